"""Image datasets by name: loading, offline layouts, image folders and the stratified split.

Every built-in dataset (``digits``, ``mnist``, ``fashion_mnist``, ``cifar10``, ``cifar100``) is small
enough to live in memory, so each is loaded once into a uint8 array ``(N, C, H, W)`` plus integer
targets and served by :class:`ArrayImages`; an ``image_folder`` is served file by file by
:class:`ImageFiles`. Both apply a torchvision v2 transform to a ``tv_tensors.Image``.

Where the files come from:

- ``digits``: scikit-learn's bundled 8x8 digits (1797 images, values 0..16), nothing to download.
- ``mnist`` / ``fashion_mnist`` / ``cifar10`` / ``cifar100``: torchvision's layout under ``root``
  (``<root>/MNIST/raw/``, ``<root>/FashionMNIST/raw/``, ``<root>/cifar-10-batches-py/``,
  ``<root>/cifar-100-python/``), downloaded by torchvision when ``download`` is set and the machine
  is online. Offline, the four MNIST-style idx files (``.gz`` or not) are also taken from ``root``
  itself or, for Fashion-MNIST, from Debian's ``dataset-fashion-mnist`` package
  (``/usr/share/datasets/fashion-mnist``), and unpacked into torchvision's layout.
- ``image_folder``: ``root/<class>/<image>`` (split by seed), or ``root/train/<class>/...`` with
  optional ``root/val/`` and ``root/test/`` of the same classes.
"""

from __future__ import annotations

import gzip
import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import Dataset
from torchvision import tv_tensors

log = logging.getLogger(__name__)

__all__ = [
    "DATASETS",
    "FASHION_MNIST_SYSTEM_DIRS",
    "IMAGE_EXTENSIONS",
    "SPECS",
    "ArrayImages",
    "DatasetName",
    "DatasetSpec",
    "FolderLayout",
    "ImageFiles",
    "find_images",
    "image_from_pil",
    "load_arrays",
    "load_image",
    "prepare_arrays",
    "scan_image_folder",
    "stratified_split",
]

DatasetName = Literal["digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "image_folder"]
DATASETS: tuple[str, ...] = get_args(DatasetName)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

# Debian's `dataset-fashion-mnist` installs the four gzipped idx files here.
FASHION_MNIST_SYSTEM_DIRS: tuple[Path, ...] = (Path("/usr/share/datasets/fashion-mnist"),)

# CIFAR-100's fine labels in label order (alphabetical, as in the archive's `meta` file), so that
# class names are known before the archive is on disk.
CIFAR100_CLASSES = [
    "apple",
    "aquarium_fish",
    "baby",
    "bear",
    "beaver",
    "bed",
    "bee",
    "beetle",
    "bicycle",
    "bottle",
    "bowl",
    "boy",
    "bridge",
    "bus",
    "butterfly",
    "camel",
    "can",
    "castle",
    "caterpillar",
    "cattle",
    "chair",
    "chimpanzee",
    "clock",
    "cloud",
    "cockroach",
    "couch",
    "crab",
    "crocodile",
    "cup",
    "dinosaur",
    "dolphin",
    "elephant",
    "flatfish",
    "forest",
    "fox",
    "girl",
    "hamster",
    "house",
    "kangaroo",
    "keyboard",
    "lamp",
    "lawn_mower",
    "leopard",
    "lion",
    "lizard",
    "lobster",
    "man",
    "maple_tree",
    "motorcycle",
    "mountain",
    "mouse",
    "mushroom",
    "oak_tree",
    "orange",
    "orchid",
    "otter",
    "palm_tree",
    "pear",
    "pickup_truck",
    "pine_tree",
    "plain",
    "plate",
    "poppy",
    "porcupine",
    "possum",
    "rabbit",
    "raccoon",
    "ray",
    "road",
    "rocket",
    "rose",
    "sea",
    "seal",
    "shark",
    "shrew",
    "skunk",
    "skyscraper",
    "snail",
    "snake",
    "spider",
    "squirrel",
    "streetcar",
    "sunflower",
    "sweet_pepper",
    "table",
    "tank",
    "telephone",
    "television",
    "tiger",
    "tractor",
    "train",
    "trout",
    "tulip",
    "turtle",
    "wardrobe",
    "whale",
    "willow_tree",
    "wolf",
    "woman",
    "worm",
]

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


@dataclass(frozen=True)
class DatasetSpec:
    """What is known about a built-in dataset before its files are read.

    Args:
        title: the name people use.
        class_names: class names in label order.
        in_chans: channels of the stored images.
        size: native height = width in pixels.
        mean: per-channel mean of the training images scaled to [0, 1] (None: computed, see digits).
        std: per-channel standard deviation, likewise.
        hflip: whether a horizontal flip keeps the label (not for handwritten digits).
        folder: torchvision's folder under ``root``.
        how_to_get: how to obtain the files offline, for the error message.
    """

    title: str
    class_names: tuple[str, ...]
    in_chans: int
    size: int
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    hflip: bool
    folder: str
    how_to_get: str


_DIGITS = tuple(str(i) for i in range(10))
SPECS: dict[str, DatasetSpec] = {
    "digits": DatasetSpec("digits (scikit-learn)", _DIGITS, 1, 8, None, None, False, "", "bundled with scikit-learn"),
    "mnist": DatasetSpec(
        "MNIST",
        _DIGITS,
        1,
        28,
        (0.1307,),
        (0.3081,),
        False,
        "MNIST/raw",
        "copy train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and "
        "t10k-labels-idx1-ubyte.gz (from https://ossci-datasets.s3.amazonaws.com/mnist/) into {root}/MNIST/raw/ "
        "or {root}/",
    ),
    "fashion_mnist": DatasetSpec(
        "Fashion-MNIST",
        ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"),
        1,
        28,
        (0.2860,),
        (0.3530,),
        True,
        "FashionMNIST/raw",
        "install Debian's package (`sudo apt-get install dataset-fashion-mnist`, found automatically in "
        "/usr/share/datasets/fashion-mnist), or copy the four idx files (train-images-idx3-ubyte.gz, "
        "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz from "
        "https://github.com/zalandoresearch/fashion-mnist) into {root}/FashionMNIST/raw/ or {root}/",
    ),
    "cifar10": DatasetSpec(
        "CIFAR-10",
        ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
        3,
        32,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
        True,
        "cifar-10-batches-py",
        "download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and either extract it "
        "into {root}/ (giving {root}/cifar-10-batches-py/) or place the archive in {root}/ (it is extracted)",
    ),
    "cifar100": DatasetSpec(
        "CIFAR-100",
        tuple(CIFAR100_CLASSES),
        3,
        32,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
        True,
        "cifar-100-python",
        "download cifar-100-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and either extract it "
        "into {root}/ (giving {root}/cifar-100-python/) or place the archive in {root}/ (it is extracted)",
    ),
}


# --------------------------------------------------------------------------------------------------
# The split


def stratified_split(targets: Sequence[int] | Tensor, fractions: Sequence[float], seed: int) -> list[Tensor]:
    """Split sample indices class by class into ``len(fractions) + 1`` disjoint parts.

    Within each class the indices are shuffled by ``seed`` and part ``k`` takes
    ``round(n_class * fractions[k])`` of them; the last part takes the rest. Every index lands in
    exactly one part, each part holds every class in (rounded) proportion, and the same seed gives
    the same parts on any machine. Unlike scikit-learn's ``train_test_split`` it never refuses a
    rare class: a class too small for its share simply contributes nothing to that part.

    Args:
        targets: class index of each sample, ``(N,)``.
        fractions: the share of each held-out part (e.g. ``[test, val]``); they sum to < 1.
        seed: shuffling seed.

    Returns:
        ``[part_0, ..., rest]``, each a sorted ``(n_k,)`` long tensor of indices.
    """
    targets = torch.as_tensor(targets)
    g = torch.Generator().manual_seed(seed)
    parts: list[list[Tensor]] = [[] for _ in range(len(fractions) + 1)]
    for c in torch.unique(targets).tolist():
        idx = torch.nonzero(targets == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        start = 0
        for k, frac in enumerate(fractions):
            n = min(round(len(idx) * frac), len(idx) - start)
            parts[k].append(idx[start : start + n])
            start += n
        parts[-1].append(idx[start:])
    return [torch.sort(torch.cat(p)).values if p else torch.zeros(0, dtype=torch.long) for p in parts]


# --------------------------------------------------------------------------------------------------
# In-memory arrays (digits, MNIST, Fashion-MNIST, CIFAR)


class ArrayImages(Dataset):
    """Images held in memory as a uint8 array, transformed a batch at a time.

    The DataLoader fetches a batch through ``__getitems__``, which runs the transform once on the
    stacked ``(B, C, H, W)`` batch (the transforms of :mod:`.transforms` draw random parameters
    per image); ``dataset[i]`` is the same pipeline on a batch of one.

    Args:
        images: ``(N, C, H, W)`` uint8.
        targets: ``(N,)`` class indices.
        transform: maps a uint8 batch ``(B, C, H, W)`` to float ``(B, C', S, S)``.
        names: a name for each image (predict output); defaults to ``"<index>"``.
    """

    def __init__(
        self, images: Tensor, targets: Tensor, transform: Callable | None = None, names: Sequence[str] | None = None
    ) -> None:
        self.images, self.targets, self.transform = images, targets, transform
        self.names = list(names) if names is not None else [str(i) for i in range(len(images))]

    def __len__(self) -> int:
        return len(self.images)

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Tensor, int]]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        images = tv_tensors.Image(self.images[idx])  # (B, C, H, W) uint8
        if self.transform is not None:
            images = self.transform(images)  # (B, C', S, S) float
        return list(zip(images.as_subclass(Tensor).unbind(0), self.targets[idx].tolist(), strict=True))

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        return self.__getitems__([i])[0]

    def subset(self, indices: Tensor) -> ArrayImages:
        """The images at ``indices`` (a copy), with this transform."""
        names = [self.names[i] for i in indices]
        return ArrayImages(self.images[indices], self.targets[indices], self.transform, names)


def _lay_out_idx_files(name: str, root: Path) -> bool:
    """Unpack MNIST-style idx files found in ``root`` itself or in a system folder into
    torchvision's ``<root>/<Class>/raw/``; return whether the raw folder is complete."""
    raw = root / SPECS[name].folder
    if all((raw / f).is_file() for f in MNIST_FILES):
        return True
    sources = [raw, root] + (list(FASHION_MNIST_SYSTEM_DIRS) if name == "fashion_mnist" else [])
    for src in sources:
        found = {f: next((p for p in (src / f, src / f"{f}.gz") if p.is_file()), None) for f in MNIST_FILES}
        if all(found.values()):
            raw.mkdir(parents=True, exist_ok=True)
            for f, path in found.items():
                if (raw / f).is_file():
                    continue
                log.info("unpacking %s into %s", path, raw)
                opener = gzip.open if path.suffix == ".gz" else open
                partial = raw / f"{f}.partial"  # renamed when complete: an interrupted copy is never taken
                with opener(path, "rb") as fin, open(partial, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
                partial.replace(raw / f)
            return True
    return False


def _torchvision_class(name: str) -> type:
    from torchvision import datasets as tvd

    classes = {"mnist": tvd.MNIST, "fashion_mnist": tvd.FashionMNIST, "cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100}
    return classes[name]


def _missing(name: str, root: Path, reason: str) -> FileNotFoundError:
    spec = SPECS[name]
    expected = (
        f"{root / spec.folder}/ with {', '.join(MNIST_FILES)}"
        if name in ("mnist", "fashion_mnist")
        else f"{root / spec.folder}/"
    )
    return FileNotFoundError(
        f"{spec.title} not found: expected {expected} ({reason}). To get it offline, "
        + spec.how_to_get.format(root=root)
        + "; with internet access, download=True fetches it."
    )


def prepare_arrays(name: str, root: str | Path, download: bool) -> None:
    """Make sure the files of a built-in dataset are on disk in torchvision's layout: unpack local
    idx files, else let torchvision download (and extract) them.

    Raises:
        FileNotFoundError: the files are absent and could not be downloaded; the message names the
            expected layout and how to get the files.
    """
    if name == "digits":
        return
    root = Path(root)
    if name in ("mnist", "fashion_mnist") and _lay_out_idx_files(name, root):
        return
    cls = _torchvision_class(name)
    if name.startswith("cifar"):
        try:  # integrity check of the extracted batches: no network
            cls(str(root), train=True, download=False)
            return
        except RuntimeError:
            pass
    if not download:
        raise _missing(name, root, "download=False")
    try:
        cls(str(root), train=True, download=True)
    except Exception as err:  # torchvision raises RuntimeError, URLError, OSError, ... depending on the mirror
        lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [""]
        summary = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"  # MNIST lists every mirror
        raise _missing(name, root, f"the download failed: {type(err).__name__}: {summary}") from err


def load_arrays(name: str, root: str | Path, train: bool) -> tuple[Tensor, Tensor]:
    """The training (or official test) part of a built-in dataset as arrays.

    For ``digits`` (which has no official test part) ``train`` is ignored and all 1797 images are
    returned; the values 0..16 are scaled to 0..255.

    Returns:
        ``images (N, C, H, W)`` uint8 and ``targets (N,)`` long.

    Raises:
        FileNotFoundError: as :func:`prepare_arrays` with ``download=False``.
    """
    if name == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.from_numpy(np.rint(digits.images * (255 / 16)).astype(np.uint8))[:, None]  # (N, 1, 8, 8)
        return images, torch.from_numpy(digits.target).long()
    root = Path(root)
    if name in ("mnist", "fashion_mnist"):
        _lay_out_idx_files(name, root)
    try:
        ds = _torchvision_class(name)(str(root), train=train, download=False)
    except RuntimeError as err:
        raise _missing(name, root, "files absent or incomplete") from err
    data = torch.as_tensor(np.asarray(ds.data))
    if data.ndim == 3:
        images = data[:, None]  # (N, 1, H, W)
    else:
        images = data.permute(0, 3, 1, 2).contiguous()  # (N, H, W, C) -> (N, C, H, W)
    return images, torch.as_tensor(ds.targets).long()


# --------------------------------------------------------------------------------------------------
# Image files


def image_from_pil(
    img: Image.Image, in_chans: int, colour_to_grey: bool = False, name: str | Path = "image"
) -> tv_tensors.Image:
    """One decoded PIL image as a uint8 ``tv_tensors.Image`` of shape ``(in_chans, H, W)``.

    The channel rule: greyscale, palette, CMYK and alpha images are converted to RGB when
    ``in_chans`` is 3 (alpha is dropped); when ``in_chans`` is 1, greyscale images (with or
    without alpha) are kept, but a colour image is refused rather than silently turned grey, unless
    ``colour_to_grey`` (prediction: a greyscale model cannot see colour), which converts it with PIL's
    luma ``L = (299 R + 587 G + 114 B) / 1000``.

    Args:
        img: the image (any PIL mode).
        in_chans: channels of the result, 1 or 3.
        colour_to_grey: convert a colour image for ``in_chans=1`` instead of refusing it.
        name: how errors name the image (its file).

    Raises:
        ValueError: a colour image meets ``in_chans=1`` without ``colour_to_grey``, or ``in_chans`` is
            not 1 or 3.
    """
    mode = img.mode
    if in_chans == 1:
        if mode.startswith("I") or mode == "F":  # 16/32-bit or float greyscale: scale to 0..255
            arr = np.asarray(img, dtype=np.float64)
            scale = 255.0 if mode == "F" and arr.max() <= 1.0 else (1 / 257 if arr.max() > 255 else 1.0)
            array = np.clip(np.rint(arr * scale), 0, 255).astype(np.uint8)
        elif mode in ("1", "L", "LA"):
            array = np.asarray(img.convert("L"))
        else:  # RGB, palette, CMYK...: accepted only if every pixel is grey (or when told to convert)
            rgb = img.convert("RGB")
            array = np.asarray(rgb)  # (H, W, 3)
            if (array != array[:, :, :1]).any() and not colour_to_grey:
                raise ValueError(
                    f"{name}: a colour image (mode {mode}) where greyscale is expected (in_chans=1); "
                    "set in_chans=3 or convert the file"
                )
            array = np.asarray(rgb.convert("L"))  # (H, W); grey pixels keep their value
        array = array[:, :, None]  # (H, W, 1)
    elif in_chans == 3:
        array = np.asarray(img.convert("RGB"))  # (H, W, 3)
    else:
        raise ValueError(f"in_chans ({in_chans}) must be 1 or 3 for image files")
    return tv_tensors.Image(torch.from_numpy(array.copy()).permute(2, 0, 1))  # (H, W, C) -> (C, H, W)


def load_image(path: str | Path, in_chans: int, colour_to_grey: bool = False) -> tv_tensors.Image:
    """Read one image file as a uint8 ``tv_tensors.Image`` of shape ``(in_chans, H, W)``, with the
    channel rule of :func:`image_from_pil`.

    Raises:
        ValueError: the file cannot be decoded (names the file), or a colour image meets
            ``in_chans=1`` without ``colour_to_grey``.
    """
    try:
        with Image.open(path) as img:
            img.load()
            return image_from_pil(img, in_chans, colour_to_grey, name=path)
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise ValueError(f"{path}: cannot read the image ({type(err).__name__}: {err})") from err


class ImageFiles(Dataset):
    """Images read from files on demand.

    Args:
        paths: image files.
        targets: class index of each file (``-1`` when unknown, e.g. for predict).
        in_chans: channels to read each image into (see :func:`load_image`).
        transform: applied to each ``tv_tensors.Image``.
        colour_to_grey: turn colour images grey for ``in_chans=1`` (prediction) instead of refusing them.
    """

    def __init__(
        self,
        paths: Sequence[str],
        targets: Sequence[int] | Tensor,
        in_chans: int,
        transform: Callable | None = None,
        colour_to_grey: bool = False,
    ) -> None:
        self.paths, self.targets = list(paths), torch.as_tensor(targets, dtype=torch.long)
        self.in_chans, self.transform, self.colour_to_grey = in_chans, transform, colour_to_grey
        self.names = self.paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        image = load_image(self.paths[i], self.in_chans, self.colour_to_grey)
        return (self.transform(image) if self.transform else image), int(self.targets[i])

    def subset(self, indices: Tensor) -> ImageFiles:
        """The files at ``indices``, with this transform."""
        paths = [self.paths[i] for i in indices]
        return ImageFiles(paths, self.targets[indices], self.in_chans, self.transform, self.colour_to_grey)


def find_images(path: str | Path) -> list[str]:
    """One image file, or every image file under a folder (recursively, sorted).

    Raises:
        FileNotFoundError: the path does not exist, or the folder holds no image.
    """
    path = Path(path)
    if path.is_file():
        return [str(path)]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such image file or folder")
    files = sorted(str(p) for p in path.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise FileNotFoundError(f"{path}: no image files (looked for {', '.join(IMAGE_EXTENSIONS)})")
    return files


@dataclass
class FolderLayout:
    """What :func:`scan_image_folder` found.

    Args:
        class_names: sorted class folder names; the label of a class is its position.
        splits: ``{"train"|"val"|"test": (paths, targets)}`` for each split given as a folder, or
            ``{"all": ...}`` for a single folder of classes.
    """

    class_names: list[str]
    splits: dict[str, tuple[list[str], list[int]]]


def _class_folders(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.name)


def _scan_classes(folder: Path, class_names: list[str]) -> tuple[list[str], list[int]]:
    paths, targets = [], []
    for sub in _class_folders(folder):
        if sub.name not in class_names:
            raise ValueError(f"{sub}: class '{sub.name}' is not among the training classes {class_names}")
        files = sorted(str(p) for p in sub.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
        if not files:
            raise ValueError(f"{sub}: empty class folder (no {', '.join(IMAGE_EXTENSIONS)} files)")
        paths += files
        targets += [class_names.index(sub.name)] * len(files)
    return paths, targets


def scan_image_folder(root: str | Path, scan_files: bool = True) -> FolderLayout:
    """Find the classes (and files) of an image folder.

    Two layouts: ``root/train/<class>/*`` with optional ``root/val/<class>/*`` and
    ``root/test/<class>/*``; or ``root/<class>/*``, one folder split later by seed. Class names are
    the sorted folder names (of ``train/`` in the first layout).

    Args:
        root: the folder.
        scan_files: also list the files (False: only the class names, cheap).

    Raises:
        FileNotFoundError: ``root`` is not a folder.
        ValueError: no class folders, an empty class folder, or a val/test class absent from train.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(
            f"image folder {root} does not exist; expected {root}/<class>/<image> or {root}/train/<class>/<image> "
            f"(with optional {root}/val/ and {root}/test/)"
        )
    explicit = (root / "train").is_dir()
    train_dir = root / "train" if explicit else root
    class_names = [p.name for p in _class_folders(train_dir)]
    if not class_names:
        raise ValueError(f"{train_dir}: no class folders; expected {train_dir}/<class>/<image>")
    splits: dict[str, tuple[list[str], list[int]]] = {}
    if scan_files:
        if explicit:
            for split in ("train", "val", "test"):
                if (root / split).is_dir():
                    splits[split] = _scan_classes(root / split, class_names)
        else:
            splits["all"] = _scan_classes(root, class_names)
    return FolderLayout(class_names, splits)
