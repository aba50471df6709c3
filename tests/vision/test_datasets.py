"""Dataset builders: the stratified split, digits, MNIST-style idx files (Debian's Fashion-MNIST
layout), the offline messages and image folders."""

from __future__ import annotations

from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest
import torch
from PIL import Image

from lightning_tf.vision import datasets
from lightning_tf.vision.data import ImageDataModule
from lightning_tf.vision.datasets import (
    CIFAR100_CLASSES,
    ImageFiles,
    find_images,
    load_arrays,
    load_image,
    prepare_arrays,
    scan_image_folder,
    stratified_split,
)
from tests.helpers.vision import fake_cifar10, fake_mnist, make_image_folder, write_image

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


# ------------------------------------------------------------------------------------ the split
def test_stratified_split_is_disjoint_complete_stratified_and_seeded() -> None:
    targets = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)[torch.randperm(100)]
    test, val, train = stratified_split(targets, [0.2, 0.1], seed=3)
    joined = torch.cat([test, val, train])
    assert len(joined) == 100 and torch.equal(joined.sort().values, torch.arange(100))  # disjoint, covers all
    for part, frac in ((test, 0.2), (val, 0.1)):
        counts = torch.bincount(targets[part], minlength=3)
        assert counts.tolist() == [round(50 * frac), round(30 * frac), round(20 * frac)]
    again = stratified_split(targets, [0.2, 0.1], seed=3)
    assert all(torch.equal(a, b) for a, b in zip((test, val, train), again))
    other = stratified_split(targets, [0.2, 0.1], seed=4)
    assert not torch.equal(test, other[0])


def test_stratified_split_keeps_a_rare_class_in_training() -> None:
    targets = torch.tensor([0] * 20 + [1])
    val, train = stratified_split(targets, [0.1], seed=0)
    assert 20 in train.tolist() and len(val) == 2


# ------------------------------------------------------------------------------------- digits
def test_digits_arrays() -> None:
    images, targets = load_arrays("digits", "unused", train=True)
    assert images.shape == (1797, 1, 8, 8) and images.dtype == torch.uint8
    assert images.min() == 0 and images.max() == 255  # 0..16 scaled to 0..255
    assert torch.bincount(targets).min() >= 170


# -------------------------------------------------------------- MNIST-style idx files, offline
def test_fashion_mnist_from_the_debian_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = tmp_path / "usr/share/datasets/fashion-mnist"  # what `dataset-fashion-mnist` installs
    train_x, train_y = fake_mnist(system)
    monkeypatch.setattr(datasets, "FASHION_MNIST_SYSTEM_DIRS", (system,))
    dm = ImageDataModule("fashion_mnist", root=str(tmp_path / "downloads"), download=False, batch_size=32)
    dm.prepare_data()
    assert (tmp_path / "downloads/FashionMNIST/raw/train-images-idx3-ubyte").is_file()
    dm.setup("fit")
    assert len(dm.train_set) + len(dm.val_set) == 200 and len(dm.test_set) == 30
    assert torch.bincount(dm.val_set.targets).tolist() == [2] * 10  # stratified 10 %
    for i in range(5):  # images keep their labels
        source = np.flatnonzero((train_x == dm.train_set.images[i, 0].numpy()).all(axis=(1, 2)))
        assert len(source) == 1 and train_y[source[0]] == dm.train_set.targets[i]


def test_flat_idx_files_in_root_are_laid_out_for_torchvision(tmp_path: Path) -> None:
    train_x, _ = fake_mnist(tmp_path, gz=False)
    images, _ = load_arrays("mnist", tmp_path, train=True)
    assert images.shape == (200, 1, 28, 28) and np.array_equal(images[:, 0].numpy(), train_x)
    assert (tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte").is_file()


@pytest.mark.skipif(not DEBIAN_FASHION_MNIST.is_dir(), reason="dataset-fashion-mnist is not installed")
def test_real_fashion_mnist_from_debian(tmp_path: Path) -> None:
    dm = ImageDataModule("fashion_mnist", root=str(tmp_path), download=False, batch_size=500)
    dm.prepare_data()
    dm.setup("fit")
    assert len(dm.train_set) == 54000 and len(dm.val_set) == 6000 and len(dm.test_set) == 10000
    assert torch.bincount(dm.val_set.targets).tolist() == [600] * 10
    x = torch.cat([b[0] for b, _ in zip(dm.val_dataloader(), range(6))])  # (3000, 1, 28, 28)
    assert abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1) < 0.05


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mnist", r"MNIST/raw/ with train-images-idx3-ubyte.*t10k-labels-idx1-ubyte.gz.*download=True fetches"),
        ("fashion_mnist", r"FashionMNIST/raw/.*sudo apt-get install dataset-fashion-mnist"),
        ("cifar10", r"cifar-10-batches-py/.*cifar-10-python.tar.gz"),
        ("cifar100", r"cifar-100-python/.*cifar-100-python.tar.gz"),
    ],
)
def test_absent_files_without_download_name_the_layout(
    name: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(datasets, "FASHION_MNIST_SYSTEM_DIRS", (tmp_path / "nowhere",))
    dm = ImageDataModule(name, root=str(tmp_path), download=False)
    with pytest.raises(FileNotFoundError, match=expected):
        dm.prepare_data()
    with pytest.raises(FileNotFoundError, match=expected):
        dm.setup("fit")


def test_failed_download_names_the_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchvision.datasets import CIFAR10

    def offline(self: CIFAR10) -> None:
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(CIFAR10, "download", offline)
    with pytest.raises(FileNotFoundError, match=r"the download failed: URLError.*name resolution.*cifar.html"):
        prepare_arrays("cifar10", tmp_path, download=True)


def test_cifar100_class_names_are_complete_and_in_label_order() -> None:
    assert len(CIFAR100_CLASSES) == 100 and CIFAR100_CLASSES == sorted(set(CIFAR100_CLASSES))


# ---------------------------------------------------------------------------------- image files
def test_scan_image_folder_sorts_classes(tmp_path: Path) -> None:
    make_image_folder(tmp_path, {"zebra": 2, "ant": 3, "moth": 1})
    layout = scan_image_folder(tmp_path)
    assert layout.class_names == ["ant", "moth", "zebra"]
    paths, targets = layout.splits["all"]
    assert [Path(p).parent.name for p in paths] == ["ant"] * 3 + ["moth"] + ["zebra"] * 2
    assert targets == [0, 0, 0, 1, 2, 2]


def test_empty_class_folder_is_named(tmp_path: Path) -> None:
    make_image_folder(tmp_path, {"ant": 2})
    (tmp_path / "bee").mkdir()
    (tmp_path / "bee" / "notes.txt").write_text("not an image")
    with pytest.raises(ValueError, match=r"bee: empty class folder"):
        scan_image_folder(tmp_path)


def test_missing_folder_and_no_classes(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"image folder .*absent does not exist; expected"):
        scan_image_folder(tmp_path / "absent")
    with pytest.raises(ValueError, match=r"no class folders"):
        scan_image_folder(tmp_path)


def test_val_class_unknown_to_train_is_named(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "train", {"ant": 2})
    make_image_folder(tmp_path / "val", {"ant": 1, "bee": 1})
    with pytest.raises(ValueError, match=r"val/bee: class 'bee' is not among the training classes \['ant'\]"):
        scan_image_folder(tmp_path)


def test_corrupt_image_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "ant" / "broken.png"
    bad.parent.mkdir()
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    good = write_image(tmp_path / "ant" / "good.png", 1)
    truncated = tmp_path / "ant" / "cut.png"
    truncated.write_bytes(good.read_bytes()[:60])
    files = ImageFiles([str(good), str(bad), str(truncated)], [0, 0, 0], in_chans=3)
    assert files[0][0].shape == (3, 10, 12)
    with pytest.raises(ValueError, match=r"broken.png: cannot read the image"):
        files[1]
    with pytest.raises(ValueError, match=r"cut.png: cannot read the image"):
        files[2]


def test_channel_rule(tmp_path: Path) -> None:
    rgb = write_image(tmp_path / "rgb.png", 3, mode="RGB")
    rgba = write_image(tmp_path / "rgba.png", 3, mode="RGBA")
    grey = write_image(tmp_path / "grey.png", 3, mode="L")
    reference = torch.from_numpy(np.array(Image.open(rgb))).permute(2, 0, 1)  # (3, H, W)
    assert torch.equal(load_image(rgba, 3), reference)  # alpha dropped, colours kept
    g = load_image(grey, 3)
    assert g.shape == (3, 10, 12) and torch.equal(g[0], g[1]) and torch.equal(g[1], g[2])  # replicated
    assert load_image(grey, 1).shape == (1, 10, 12)
    grey_as_rgb = tmp_path / "grey_rgb.png"
    Image.open(grey).convert("RGB").save(grey_as_rgb)
    assert torch.equal(load_image(grey_as_rgb, 1), load_image(grey, 1))  # grey pixels stored as RGB: accepted
    with pytest.raises(ValueError, match=r"rgb.png: a colour image \(mode RGB\) where greyscale is expected"):
        load_image(rgb, 1)


def test_sixteen_bit_greyscale_is_scaled(tmp_path: Path) -> None:
    path = tmp_path / "deep.png"
    Image.fromarray(np.full((4, 4), 65535, dtype=np.uint16)).save(path)
    assert load_image(path, 1).unique().tolist() == [255]


def test_find_images(tmp_path: Path) -> None:
    write_image(tmp_path / "b" / "x.png", 0)
    write_image(tmp_path / "a.JPG", 0)
    (tmp_path / "readme.txt").write_text("-")
    assert [Path(p).relative_to(tmp_path).as_posix() for p in find_images(tmp_path)] == ["a.JPG", "b/x.png"]
    assert find_images(tmp_path / "a.JPG") == [str(tmp_path / "a.JPG")]
    with pytest.raises(FileNotFoundError, match=r"no such image file or folder"):
        find_images(tmp_path / "none")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty: no image files"):
        find_images(tmp_path / "empty")


# ----------------------------------------------------------------------------------- CIFAR files
def test_cifar_images_keep_their_channels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pixels = fake_cifar10(tmp_path, monkeypatch)
    images, targets = load_arrays("cifar10", tmp_path, train=True)
    assert images.shape == (20, 3, 32, 32) and targets.tolist() == [0, 1, 2, 3] * 5
    assert np.array_equal(images[5].numpy(), pixels[1, 1].reshape(3, 32, 32))  # (C, H, W): planes stay planes
    test_images, _ = load_arrays("cifar10", tmp_path, train=False)
    assert np.array_equal(test_images.numpy(), pixels[5].reshape(4, 3, 32, 32))


def test_cifar_archive_placed_in_root_is_extracted_without_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib
    import shutil
    import tarfile

    from torchvision.datasets import CIFAR10

    fake_cifar10(tmp_path, monkeypatch)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    shutil.rmtree(tmp_path / "cifar-10-batches-py")
    monkeypatch.setattr(CIFAR10, "tgz_md5", hashlib.md5(archive.read_bytes()).hexdigest())
    monkeypatch.setattr(CIFAR10, "url", "http://127.0.0.1:9/unreachable.tar.gz")  # a download would fail
    prepare_arrays("cifar10", tmp_path, download=True)
    assert load_arrays("cifar10", tmp_path, train=True)[0].shape == (20, 3, 32, 32)
