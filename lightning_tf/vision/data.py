"""``ImageDataModule``: image classification data by name, with a seeded stratified validation
split, torchvision v2 transforms and timm's Mixup/CutMix on training batches.

Batches:

- train / val / test: ``(images, targets)``, images ``(B, C, H, W)`` float32 normalised with
  ``mean``/``std``, targets ``(B,)`` long. When ``mixup_alpha`` or ``cutmix_alpha`` is set,
  training batches (and only they) are mixed on the device after transfer and their targets are
  soft: ``(B, num_classes)`` float rows that sum to 1. Validation and test keep hard labels.
- predict: a dict ``{"image": (B, C, H, W), "index": (B,) long, "path": list[str], "target": (B,)
  long}``; ``path`` is the image file (``predict_path``) or ``"<dataset>/test/<i>"`` for the test
  split (the default when no ``predict_path`` is given), ``index`` its position in
  ``predict_paths`` (every path in prediction order, set by ``setup("predict")``), ``target`` the
  label or -1 for unlabelled files.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, default_collate
from torchvision.transforms import v2

from lightning_tf.training import (
    IgnoreStopSignals,
    ResumableDataLoader,
    SeededBatches,
    ShuffledBatchSampler,
    eval_sampler,
)

from .datasets import (
    DATASETS,
    SPECS,
    ArrayImages,
    DatasetName,
    ImageFiles,
    find_images,
    load_arrays,
    load_image,
    prepare_arrays,
    scan_image_folder,
    stratified_split,
)
from .transforms import AUGMENTS, IMAGENET_MEAN, IMAGENET_STD, AugmentName, build_mixup, build_transform

log = logging.getLogger(__name__)

__all__ = ["ImageDataModule"]

# Default image size per dataset: native, except digits, whose 8x8 images are upsampled so that a
# patch-4 ViT sees a 4x4 grid of 16 patches (each covering 2x2 original pixels), and image folders,
# which get the ViT standard.
DEFAULT_SIZE = {"digits": 16, "image_folder": 224}


class _Predict(Dataset):
    """Wraps a split for prediction: each item is ``{"image", "index", "path", "target"}``."""

    def __init__(self, dataset: ArrayImages | ImageFiles) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        fetch = getattr(self.dataset, "__getitems__", None)
        items = fetch(indices) if fetch else [self.dataset[i] for i in indices]
        return [
            {"image": image, "index": i, "path": self.dataset.names[i], "target": target}
            for i, (image, target) in zip(indices, items, strict=True)
        ]

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]


class ImageDataModule(LightningDataModule):
    """Image classification data: built-in datasets by name or a folder of class folders.

    ``num_classes``, ``image_size``, ``in_chans``, ``class_names``, ``mean`` and ``std`` are set
    by ``__init__`` (an image folder's class folders are listed there), so a model can check them
    (and that its patch size divides ``image_size``) before any data is read. They are saved in every
    checkpoint (``state_dict``). Predicting files (``predict_path``) under a checkpoint prepares them
    with the checkpoint's size, channels and normalisation, and needs no training data: when the
    image folder ``root`` is gone, what it would have said comes from the checkpoint (until then
    ``num_classes``, and ``image_size`` / ``in_chans`` unless given, are unknown: reading them raises
    AttributeError, so the CLI links nothing and the model keeps the checkpoint's values).

    Splits: ``digits`` and a single image folder are split class by class into test
    (``test_fraction``), validation (``val_fraction`` of the rest) and training; the other
    datasets keep their official test set and hold ``val_fraction`` of the official training set
    out for validation. Splits depend only on ``seed``, not on the global RNG.

    Args:
        dataset: ``digits`` (scikit-learn's 8x8 digits, bundled), ``mnist``, ``fashion_mnist``,
            ``cifar10``, ``cifar100`` (torchvision) or ``image_folder``.
        root: where the torchvision datasets live (and are downloaded to); for ``image_folder``,
            the folder: ``root/<class>/<image>``, or ``root/train/<class>/...`` with optional
            ``root/val/`` and ``root/test/``.
        image_size: side of the square images fed to the model; default: the native size
            (28 for MNIST, 32 for CIFAR), 16 for digits (8x8 upsampled), 224 for image folders.
        in_chans: channels fed to the model; default: the dataset's (1 for digits and MNIST, 3 for
            CIFAR and image folders). 3 on a greyscale dataset replicates the channel; colour
            images in the data are never turned grey (an error names the file); images to predict
            are (a greyscale model cannot see colour).
        batch_size: images per batch (even when Mixup/CutMix is on).
        val_fraction: share of the training pool held out for validation, stratified.
        test_fraction: share held out for test where no test set exists (digits, an image folder
            without ``test/``), stratified.
        seed: seed of the splits, of the training order and of the augmentations (each training batch
            draws its crops, flips and policy operations from ``(seed, epoch, batch)``).
        augment: training augmentation preset: ``none``, ``flip_crop`` (pad-and-crop or random
            resized crop, plus flip), ``randaugment`` or ``trivialaugment`` (each after flip_crop).
        hflip: whether flip_crop flips horizontally; default: yes, except for handwritten digits
            (``digits``, ``mnist``), which a mirror turns into non-digits.
        random_erasing: probability of erasing a random box of each training image.
        mixup_alpha: Mixup's Beta(alpha, alpha); 0 is off.
        cutmix_alpha: CutMix's Beta(alpha, alpha); 0 is off.
        mixup_prob: probability that a training batch is mixed (when either alpha is > 0).
        mixup_switch_prob: with both on, probability of CutMix instead of Mixup.
        mixup_mode: one mixing weight per ``batch``, ``pair`` or ``elem``.
        mixup_label_smoothing: smoothing of the soft Mixup/CutMix targets only (hard labels are
            smoothed by the model's ``label_smoothing``).
        mean: per-channel mean of the [0, 1] images for normalisation; default: the dataset's
            (ImageNet's for image folders, the training split's for digits).
        std: per-channel standard deviation, likewise.
        num_workers: DataLoader worker processes.
        download: let torchvision download missing files (needs internet).
        predict_path: an image file or a folder of images to predict; default: the test split.
            With it, ``setup("predict")`` reads only these files.
    """

    def __init__(
        self,
        dataset: DatasetName = "digits",
        root: str = "data/downloads",
        image_size: int | None = None,
        in_chans: int | None = None,
        batch_size: int = 128,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        seed: int = 0,
        augment: AugmentName = "flip_crop",
        hflip: bool | None = None,
        random_erasing: float = 0.0,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        mixup_prob: float = 1.0,
        mixup_switch_prob: float = 0.5,
        mixup_mode: Literal["batch", "pair", "elem"] = "batch",
        mixup_label_smoothing: float = 0.0,
        mean: list[float] | None = None,
        std: list[float] | None = None,
        num_workers: int = 0,
        download: bool = True,
        predict_path: str | None = None,
    ) -> None:
        super().__init__()
        if dataset not in DATASETS:
            raise ValueError(f"unknown dataset '{dataset}'; choose one of {list(DATASETS)}")
        if augment not in AUGMENTS:
            raise ValueError(f"augment '{augment}' is not one of {list(AUGMENTS)}")
        if image_size is not None and image_size < 1:
            raise ValueError(f"image_size ({image_size}) must be a positive number of pixels")
        if batch_size < 1:
            raise ValueError(f"batch_size ({batch_size}) must be >= 1")
        for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0 < value < 1:
                raise ValueError(f"{name} ({value}) must be in (0, 1)")
        if not 0 <= random_erasing <= 1:
            raise ValueError(f"random_erasing ({random_erasing}) must be a probability in [0, 1]")
        if not 0 <= mixup_label_smoothing < 1:
            raise ValueError(f"mixup_label_smoothing ({mixup_label_smoothing}) must be in [0, 1)")
        if mixup_label_smoothing and not (mixup_alpha or cutmix_alpha):
            log.warning(
                "mixup_label_smoothing (%s) only smooths Mixup/CutMix targets, which are off "
                "(mixup_alpha = cutmix_alpha = 0); for hard labels set the model's label_smoothing",
                mixup_label_smoothing,
            )
        if in_chans is not None and in_chans not in (1, 3):
            raise ValueError(f"in_chans ({in_chans}) must be 1 (greyscale) or 3 (RGB)")

        spec = SPECS.get(dataset)
        # image files are read straight into in_chans channels (see datasets.load_image)
        native_chans = spec.in_chans if spec else in_chans or 3
        if in_chans is not None and in_chans < native_chans:
            raise ValueError(f"{dataset} images are RGB; in_chans ({in_chans}) must be 3")
        if (mixup_alpha or cutmix_alpha) and batch_size % 2:
            raise ValueError(f"batch_size ({batch_size}) must be even with Mixup/CutMix (pairs are mixed)")
        # the resolved values live on the model's hyperparameters (the CLI links them data -> model);
        # kept out of these, so that a logger merging both never sees the config's None beside them
        self.save_hyperparameters(ignore=["image_size", "in_chans"])
        self.hflip: bool = hflip if hflip is not None else (spec.hflip if spec else True)
        self._to_rgb_from = spec.in_chans if spec else None  # arrays of this many channels, replicated to RGB

        # What inference needs (the checkpoint keeps it: state_dict). Known here, except when only predicting
        # after the training folder moved away: then the checkpoint's state brings it (load_state_dict), and
        # until then the CLI links nothing to the model, which keeps the checkpoint's own values.
        self.class_names: list[str] | None = None
        self._image_size: int | None = image_size
        self._in_chans: int | None = in_chans
        self.mean: list[float] | None = [float(m) for m in mean] if mean is not None else None
        self.std: list[float] | None = [float(s) for s in std] if std is not None else None
        if dataset == "image_folder" and predict_path is not None and not Path(root).is_dir():
            log.info("%s is not a folder: class names, image size and normalisation come from the checkpoint", root)
        else:
            if dataset == "image_folder":
                self.class_names = scan_image_folder(root, scan_files=False).class_names
                if len(self.class_names) < 2:
                    raise ValueError(
                        f"{root}: one class folder ({self.class_names[0]}); a classifier needs two or more: "
                        "add a folder of images per class"
                    )
            else:
                self.class_names = list(spec.class_names)
            self._image_size = image_size or DEFAULT_SIZE.get(dataset) or spec.size
            self._in_chans = in_chans or native_chans

        self._arrays: tuple[Tensor, Tensor] | None = None  # digits, loaded once
        self.split_indices: dict[str, Tensor] = {}  # after setup: positions in the pool each split came from
        if (mean is None or std is None) and self._in_chans is not None:
            default_mean, default_std = self._default_stats()
            self.mean = self.mean if self.mean is not None else default_mean
            self.std = self.std if self.std is not None else default_std
        self._check_stats()

        self.mixup = None
        if self.class_names is not None:  # training only, and training needs the class folders
            self.mixup = build_mixup(
                self.num_classes,
                mixup_alpha,
                cutmix_alpha,
                mixup_prob,
                mixup_switch_prob,
                mixup_mode,
                mixup_label_smoothing,
            )
        self.train_transform: v2.Compose | None = None
        self.eval_transform: v2.Compose | None = None
        self.predict_transform: v2.Compose | None = None
        self._build_transforms()
        self.train_set: ArrayImages | ImageFiles | None = None
        self.val_set: ArrayImages | ImageFiles | None = None
        self.test_set: ArrayImages | ImageFiles | None = None
        self.predict_set: _Predict | None = None
        self.predict_paths: list[str] = []

    # ----------------------------------------------------------------------------------------------
    # What the model must agree with. An AttributeError while unknown (only predicting, the training
    # folder gone, no checkpoint state yet): the CLI skips a link whose source attribute is missing.

    @property
    def num_classes(self) -> int:
        """Number of classes, ``len(class_names)``."""
        if self.class_names is None:
            raise AttributeError("num_classes is unknown until a checkpoint's state is loaded")
        return len(self.class_names)

    @property
    def image_size(self) -> int:
        """Side of the square images fed to the model."""
        if self._image_size is None:
            raise AttributeError("image_size is unknown until a checkpoint's state is loaded")
        return self._image_size

    @property
    def in_chans(self) -> int:
        """Channels fed to the model."""
        if self._in_chans is None:
            raise AttributeError("in_chans is unknown until a checkpoint's state is loaded")
        return self._in_chans

    def _knows_inputs(self) -> bool:
        return None not in (self._image_size, self._in_chans, self.mean, self.std)

    def _check_stats(self) -> None:
        for name, stats in (("mean", self.mean), ("std", self.std)):
            if stats is not None and self._in_chans is not None and len(stats) != self._in_chans:
                raise ValueError(f"{name} has {len(stats)} values ({stats}) but in_chans is {self._in_chans}")
        if self.std is not None and min(self.std) <= 0:
            raise ValueError(f"std ({self.std}) must be positive")

    def _build_transforms(self) -> None:
        """The three pipelines from the current size, channels and normalisation (none while unknown)."""
        if not self._knows_inputs():
            return
        h = self.hparams
        to_rgb = self._to_rgb_from is not None and self.in_chans > self._to_rgb_from
        common = {"image_size": self.image_size, "mean": self.mean, "std": self.std, "to_rgb": to_rgb}
        source = "file" if h.dataset == "image_folder" else "array"
        self.train_transform = build_transform(
            train=True, augment=h.augment, hflip=self.hflip, random_erasing=h.random_erasing, source=source, **common
        )
        self.eval_transform = build_transform(train=False, source=source, **common)
        # Files given for prediction can have any shape, whatever the dataset.
        self.predict_transform = build_transform(train=False, source="file", **common)

    def _attach_transforms(self) -> None:
        """Give every built split the current pipeline (and prediction files the current channels)."""
        if self.train_set is not None:
            self.train_set.transform = self.train_transform
            self.val_set.transform = self.test_set.transform = self.eval_transform
        if self.predict_set is not None:
            files = self.predict_set.dataset
            if isinstance(files, ImageFiles) and files is not self.test_set:
                files.in_chans, files.transform = self._in_chans, self.predict_transform

    def load_image(self, path: str | Path) -> Tensor:
        """One image file as the model sees it at prediction: ``(in_chans, image_size, image_size)``
        (a colour file for a greyscale model is turned grey)."""
        if self.predict_transform is None:
            raise ValueError(self._unknown_inputs_message())
        return self.predict_transform(load_image(path, self.in_chans, colour_to_grey=True)).as_subclass(Tensor)

    def _unknown_inputs_message(self) -> str:
        return (
            f"{self.hparams.root} is not a folder, and no checkpoint gave the image size, channels and "
            "normalisation to predict with: pass --ckpt_path <checkpoint> (the model's own), or restore the folder"
        )

    # ----------------------------------------------------------------------------------------------
    # The checkpoint's copy (Lightning saves state_dict() in every checkpoint and, under ckpt_path, calls
    # load_state_dict() after setup in every stage)

    def state_dict(self) -> dict[str, Any]:
        """Class names, image size, channels and normalisation as plain data."""
        if self.class_names is None or not self._knows_inputs():
            return {}
        return {
            "class_names": list(self.class_names),
            "image_size": int(self.image_size),
            "in_chans": int(self.in_chans),
            "mean": list(self.mean),
            "std": list(self.std),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the checkpoint's class names, image size, channels and normalisation.

        Prediction of files uses all of them, whatever this DataModule was built with: images are
        prepared as the model was trained. Fit, validate, test and prediction of the test split keep
        their own size and normalisation (filling in only what is unknown) and need the checkpoint's
        class names: the labels must mean the same classes.

        Raises:
            ValueError: the checkpoint's classes differ from the data's where labels are used.
        """
        if not state_dict:
            return
        theirs = [str(c) for c in state_dict["class_names"]]
        trainer = self.trainer
        files_only = self.hparams.predict_path is not None and (trainer is None or trainer.predicting)
        if self.class_names is not None and self.class_names != theirs and not files_only:
            raise ValueError(
                f"the checkpoint's model was trained on the classes {theirs}; data {self.hparams.dataset} "
                f"({self.hparams.root}) has {self.class_names}"
            )
        if self.class_names is None or files_only:
            self.class_names = theirs
        facts = {"image_size": "_image_size", "in_chans": "_in_chans", "mean": "mean", "std": "std"}
        taken, replaced = [], []
        for key, attr in facts.items():
            value = state_dict[key]
            value = [float(v) for v in value] if isinstance(value, (list, tuple)) else int(value)
            ours = getattr(self, attr)
            if ours is None or (files_only and ours != value):
                taken.append(key)
                if ours is not None:
                    replaced.append(f"{key} {ours} -> {value}")
                setattr(self, attr, value)
        if replaced:
            log.info("images prepared as the checkpoint's model was trained: %s", ", ".join(replaced))
        if taken:
            self._check_stats()
            self._build_transforms()
            self._attach_transforms()

    # ----------------------------------------------------------------------------------------------
    # Splits

    def _digits(self) -> tuple[Tensor, Tensor]:
        if self._arrays is None:
            self._arrays = load_arrays("digits", self.hparams.root, train=True)
        return self._arrays

    def _holdout(self, targets: Tensor, with_test: bool, with_val: bool = True) -> dict[str, Tensor]:
        """Indices into ``targets`` of train, val and test: test (``test_fraction`` of all) first,
        then val (``val_fraction`` of the rest), each stratified and seeded; train keeps the rest."""
        h = self.hparams
        idx, pool = {}, torch.arange(len(targets))
        if with_test:
            idx["test"], pool = stratified_split(targets, [h.test_fraction], h.seed)
        if with_val:
            val, rest = stratified_split(targets[pool], [h.val_fraction], h.seed)
            idx["val"], pool = pool[val], pool[rest]
        idx["train"] = pool
        return idx

    def _default_stats(self) -> tuple[list[float], list[float]]:
        h = self.hparams
        if h.dataset == "image_folder":
            if self.in_chans == 1:  # the luminance-free average, as timm adapts RGB stems to grey
                return [sum(IMAGENET_MEAN) / 3], [sum(IMAGENET_STD) / 3]
            return list(IMAGENET_MEAN), list(IMAGENET_STD)
        spec = SPECS[h.dataset]
        if spec.mean is not None:
            mean, std = list(spec.mean), list(spec.std)
        else:  # digits: measured on the training split at the model's image size (cheap: 1.3k tiny images)
            images, targets = self._digits()
            train = images[self._holdout(targets, with_test=True)["train"]]  # (N, 1, 8, 8)
            x = v2.functional.resize(train, [self.image_size], antialias=True).float() / 255  # (N, 1, S, S)
            mean, std = [x.mean().item()], [x.std().item()]
        return mean * (self.in_chans // len(mean)), std * (self.in_chans // len(std))

    # ----------------------------------------------------------------------------------------------
    # LightningDataModule hooks

    def prepare_data(self) -> None:
        """Download or unpack the files of a torchvision dataset (nothing for digits and folders)."""
        if self.hparams.dataset in SPECS:
            prepare_arrays(self.hparams.dataset, self.hparams.root, self.hparams.download)

    def __str__(self) -> str:
        # Lightning's __str__ builds every loader (training data, and predict windows without statistics);
        # jsonargparse formats the DataModule into a debug line for every link it skips
        return f"{type(self).__name__}(dataset={self.hparams.dataset!r})"

    def setup(self, stage: str | None = None) -> None:
        """Build the splits; for ``predict`` with ``predict_path``, only list those files (the training
        data is not read: what preparing them needs may still come from a checkpoint)."""
        h = self.hparams
        if stage == "predict" and h.predict_path is not None:
            paths = find_images(h.predict_path)
            files = ImageFiles(paths, [-1] * len(paths), self._in_chans, self.predict_transform, colour_to_grey=True)
            self.predict_set = _Predict(files)
            self.predict_paths = paths
            return
        if self.train_set is None:
            self._build_splits()
        if stage == "predict":
            self.predict_set = _Predict(self.test_set)
            self.predict_paths = list(self.test_set.names)

    def _build_splits(self) -> None:
        h = self.hparams
        # `pool` is what the held-out parts come from; `given` holds the parts that exist on disk
        given: dict[str, ArrayImages | ImageFiles] = {}
        if h.dataset == "image_folder":
            layout = scan_image_folder(h.root)
            if layout.class_names != self.class_names:
                raise ValueError(f"{h.root}: the class folders changed since __init__: {layout.class_names}")
            files = {k: ImageFiles(paths, targets, self.in_chans) for k, (paths, targets) in layout.splits.items()}
            pool = files.pop("train", None) or files.pop("all")
            given = files  # val/ and test/ folders are used as they are
        elif h.dataset == "digits":
            images, targets = self._digits()
            pool = ArrayImages(images, targets, names=[f"digits/{i}" for i in range(len(targets))])
        else:
            images, targets = load_arrays(h.dataset, h.root, train=True)
            pool = ArrayImages(images, targets, names=[f"{h.dataset}/train/{i}" for i in range(len(targets))])
            images, targets = load_arrays(h.dataset, h.root, train=False)
            given["test"] = ArrayImages(images, targets, names=[f"{h.dataset}/test/{i}" for i in range(len(targets))])
        self.split_indices = self._holdout(pool.targets, with_test="test" not in given, with_val="val" not in given)
        parts = {split: pool.subset(idx) for split, idx in self.split_indices.items()} | given
        self.train_set, self.val_set, self.test_set = parts["train"], parts["val"], parts["test"]
        self._attach_transforms()
        log.info(
            "%s: train %d, val %d, test %d images of %dx%dx%d, %d classes",
            h.dataset,
            len(self.train_set),
            len(self.val_set),
            len(self.test_set),
            self.in_chans,
            self.image_size,
            self.image_size,
            self.num_classes,
        )

    def _loader(self, dataset: Dataset | None, train: bool = False) -> DataLoader:
        if dataset is None:
            raise RuntimeError("call setup() (or let the Trainer call it) before asking for a DataLoader")
        h = self.hparams
        common = {
            "num_workers": h.num_workers,
            "persistent_workers": h.num_workers > 0,
            "pin_memory": torch.cuda.is_available(),
            "collate_fn": _collate,
            "worker_init_fn": IgnoreStopSignals() if h.num_workers > 0 else None,  # the main process stops the run
        }
        if train:
            # the order and every batch's augmentation depend on (seed, epoch, batch) alone: a mid-epoch
            # checkpoint resumes on the rest of the epoch, and the workers change nothing; Mixup pairs
            # sample i with B - 1 - i, so its batches are even (drop_last)
            sampler = ShuffledBatchSampler(len(dataset), h.batch_size, drop_last=self.mixup is not None, seed=h.seed)
            if self.trainer is not None:
                sampler.set_epoch(self.trainer.current_epoch)
            return ResumableDataLoader(SeededBatches(dataset, h.seed), sampler, **common)
        # under DDP: every evaluation image on exactly one process (Lightning's sampler would repeat some)
        sampler = eval_sampler(dataset, predict=dataset is self.predict_set)  # type: ignore[arg-type]
        return DataLoader(dataset, batch_size=h.batch_size, shuffle=False, sampler=sampler, **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set)

    def predict_dataloader(self) -> DataLoader:
        if self.predict_set is not None and not self._knows_inputs():
            raise ValueError(self._unknown_inputs_message())
        return self._loader(self.predict_set)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Mix training batches on the device (Mixup/CutMix): targets become ``(B, num_classes)``.
        Anything but an ``(images, targets)`` pair (the model summary's example input) passes unchanged."""
        trainer = self.trainer
        is_pair = isinstance(batch, (tuple, list))
        if self.mixup is not None and trainer is not None and trainer.training and is_pair:
            images, targets = batch
            if len(images) % 2:  # only a last batch can be odd; drop_last prevents it
                images, targets = images[:-1], targets[:-1]
            images, targets = self.mixup(images, targets)  # (B, C, H, W), (B, num_classes)
            return images, targets
        return batch


def _collate(items: list[Any]) -> Any:
    """Default collation, with tv_tensors turned into plain tensors."""
    batch = default_collate(items)
    if isinstance(batch, dict):
        batch["image"] = batch["image"].as_subclass(Tensor)
        return batch
    images, targets = batch
    return images.as_subclass(Tensor), targets
