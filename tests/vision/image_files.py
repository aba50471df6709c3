"""Generated image files for the vision tests: class folders of tiny PNGs in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


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
