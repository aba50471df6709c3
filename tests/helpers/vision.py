"""Generated image data for the vision tests: class folders of tiny PNGs, MNIST-style idx files and
torchvision's CIFAR-10 layout, in a temporary folder."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

__all__ = ["fake_cifar10", "fake_mnist", "make_image_folder", "write_idx", "write_image"]


def write_image(path: Path, value: int, size: tuple[int, int] = (12, 10), mode: str = "RGB") -> Path:
    """One image of ``size`` (width, height) whose pixels encode ``value`` (so tests can recognise it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    grid = (np.arange(h)[:, None] * 7 + np.arange(w)[None, :] * 3 + value * 11) % 256  # (h, w)
    if mode == "L":
        Image.fromarray(grid.astype(np.uint8), "L").save(path)
    else:
        rgb = np.stack([grid, (grid + 85) % 256, (grid + 170) % 256], axis=-1).astype(np.uint8)  # (h, w, 3)
        Image.fromarray(rgb, "RGB").convert(mode).save(path)
    return path


def make_image_folder(root: Path, counts: dict[str, int], mode: str = "RGB", size: tuple[int, int] = (12, 10)) -> Path:
    """``root/<class>/<class>_<i>.png`` with ``counts[class]`` images per class."""
    for name, n in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            write_image(root / name / f"{name}_{i:03d}.png", value=i, size=size, mode=mode)
    return root


def write_idx(folder: Path, prefix: str, images: np.ndarray, labels: np.ndarray, gz: bool = True) -> None:
    """``<prefix>-images-idx3-ubyte`` and ``<prefix>-labels-idx1-ubyte`` (gzipped when ``gz``) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    opener, suffix = (gzip.open, ".gz") if gz else (open, "")
    n, h, w = images.shape
    with opener(folder / f"{prefix}-images-idx3-ubyte{suffix}", "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, h, w) + images.astype(np.uint8).tobytes())
    with opener(folder / f"{prefix}-labels-idx1-ubyte{suffix}", "wb") as f:
        f.write(struct.pack(">II", 2049, n) + labels.astype(np.uint8).tobytes())


def fake_mnist(folder: Path, gz: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """MNIST-style idx files in ``folder``: 200 training images (20 per class) and 30 test images."""
    rng = np.random.default_rng(0)
    train_x, train_y = rng.integers(0, 256, (200, 28, 28)), np.repeat(np.arange(10), 20)
    write_idx(folder, "train", train_x, train_y, gz)
    write_idx(folder, "t10k", rng.integers(0, 256, (30, 28, 28)), np.repeat(np.arange(10), 3), gz)
    return train_x, train_y


def fake_cifar10(root: Path, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    """torchvision's CIFAR-10 layout with 6 x 4 random images; the checksums are patched to match."""
    import hashlib
    import pickle

    from torchvision.datasets import CIFAR10

    from lightning_tf.vision.datasets import SPECS

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (6, 4, 3 * 32 * 32), dtype=np.uint8)  # rows as stored: R plane, G, B
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name, rows in zip(names, pixels):
        with open(folder / name, "wb") as f:
            pickle.dump({"data": rows, "labels": [0, 1, 2, 3]}, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": list(SPECS["cifar10"].class_names)}, f)
    md5 = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    monkeypatch.setattr(CIFAR10, "train_list", [[n, md5[n]] for n in names[:5]])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5["test_batch"]]])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5["batches.meta"]})
    return pixels
