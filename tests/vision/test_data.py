"""ImageDataModule: what it exposes after __init__, its splits, normalisation, Mixup on training
batches only, image folders, prediction input and the input checks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from PIL import Image
from torch import Tensor

from lightning_tf.vision.data import ImageDataModule
from tests.helpers.vision import make_image_folder, write_image


def _split_sets(dm: ImageDataModule) -> dict[str, set[str]]:
    return {s: set(getattr(dm, f"{s}_set").names) for s in ("train", "val", "test")}


# -------------------------------------------------------------------------------- after __init__
@pytest.mark.parametrize(
    ("dataset", "classes", "size", "chans", "first"),
    [
        ("digits", 10, 16, 1, "0"),
        ("mnist", 10, 28, 1, "0"),
        ("fashion_mnist", 10, 28, 1, "T-shirt/top"),
        ("cifar10", 10, 32, 3, "airplane"),
        ("cifar100", 100, 32, 3, "apple"),
    ],
)
def test_attributes_known_after_init(dataset: str, classes: int, size: int, chans: int, first: str) -> None:
    dm = ImageDataModule(dataset, root="/nonexistent", download=False)  # no file is read
    assert (dm.num_classes, dm.image_size, dm.in_chans) == (classes, size, chans)
    assert len(dm.class_names) == classes and dm.class_names[0] == first
    assert len(dm.mean) == len(dm.std) == chans


@pytest.mark.parametrize(
    ("dataset", "flips"), [("digits", False), ("mnist", False), ("fashion_mnist", True), ("cifar10", True)]
)
def test_flip_only_where_it_keeps_the_label(dataset: str, flips: bool) -> None:
    dm = ImageDataModule(dataset, root="/nonexistent")
    assert dm.hflip is flips
    assert ImageDataModule(dataset, root="/nonexistent", hflip=not flips).hflip is not flips
    shift = [t for t in dm.train_transform.transforms if type(t).__name__ == "RandomShiftFlip"]
    assert len(shift) == 1 and shift[0].hflip is flips


def test_unknown_dataset_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown dataset 'svhn'; choose one of \['digits', 'mnist', .*'image_fold"):
        ImageDataModule("svhn")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mixup_alpha": 0.8, "batch_size": 7}, r"batch_size \(7\) must be even with Mixup"),
        ({"val_fraction": 0.0}, r"val_fraction \(0.0\) must be in \(0, 1\)"),
        ({"mean": [0.1, 0.2]}, r"mean has 2 values \(\[0.1, 0.2\]\) but in_chans is 1"),
        ({"in_chans": 2}, r"in_chans \(2\) must be 1 \(greyscale\) or 3 \(RGB\)"),
        ({"dataset": "cifar10", "in_chans": 1}, r"cifar10 images are RGB; in_chans \(1\) must be 3"),
        ({"augment": "autoaugment"}, r"augment 'autoaugment' is not one of \['none', 'flip_crop'"),
        ({"image_size": 0}, r"image_size \(0\) must be a positive"),
        ({"random_erasing": 2.0}, r"random_erasing \(2.0\) must be a probability"),
        ({"mixup_alpha": 0.8, "mixup_label_smoothing": 1.5}, r"mixup_label_smoothing \(1.5\) must be in \[0, 1\)"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ImageDataModule(**kwargs)


# ---------------------------------------------------------------------------------------- digits
def test_digits_split_is_stratified_disjoint_complete_and_seeded() -> None:
    dm = ImageDataModule(seed=1)
    dm.setup("fit")
    sets = _split_sets(dm)
    assert sum(len(s) for s in sets.values()) == 1797
    assert set().union(*sets.values()) == {f"digits/{i}" for i in range(1797)}  # covers every image once
    assert not (sets["train"] & sets["val"]) and not (sets["train"] & sets["test"]) and not (sets["val"] & sets["test"])
    all_counts = torch.bincount(torch.cat([dm.train_set.targets, dm.val_set.targets, dm.test_set.targets]))
    for part, frac in ((dm.test_set, 0.2), (dm.val_set, 0.8 * 0.1)):
        counts = torch.bincount(part.targets, minlength=10)
        assert ((counts - all_counts * frac).abs() <= 1).all()  # every class in proportion
    again = ImageDataModule(seed=1)
    again.setup("fit")
    assert _split_sets(again) == sets
    other = ImageDataModule(seed=2)
    other.setup("fit")
    assert _split_sets(other)["val"] != sets["val"]


def test_split_ignores_the_global_rng() -> None:
    torch.manual_seed(123)
    a = ImageDataModule()
    a.setup("fit")
    torch.manual_seed(456)
    b = ImageDataModule()
    b.setup("fit")
    assert _split_sets(a) == _split_sets(b)


def test_digits_batches_are_normalised_on_train() -> None:
    dm = ImageDataModule(augment="none", batch_size=2000)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (len(dm.train_set), 1, 16, 16) and x.dtype == torch.float32 and type(x) is Tensor
    assert y.dtype == torch.long
    assert abs(x.mean().item()) < 1e-4 and abs(x.std().item() - 1) < 1e-3  # the stats are the training split's
    xv, _ = next(iter(dm.val_dataloader()))
    assert abs(xv.mean().item()) < 0.1 and abs(xv.std().item() - 1) < 0.1  # held-out images: close, not exact


def test_native_size_and_rgb_replication() -> None:
    dm = ImageDataModule(image_size=8, in_chans=3, augment="none", batch_size=16)
    assert len(dm.mean) == 3 and dm.mean[0] == dm.mean[2]
    dm.setup("fit")
    x, _ = next(iter(dm.val_dataloader()))
    assert x.shape == (16, 3, 8, 8) and torch.equal(x[:, 0], x[:, 2])
    raw = dm.val_set.images[:16, 0].float() / 255  # (16, 8, 8): no resize at the native size
    assert torch.allclose(x[:, 0], (raw - dm.mean[0]) / dm.std[0], atol=1e-5)


def test_val_and_test_are_not_augmented_train_is() -> None:
    dm = ImageDataModule(augment="flip_crop", random_erasing=0.5, batch_size=64)
    dm.setup("fit")
    assert torch.equal(dm.val_set[3][0], dm.val_set[3][0])
    assert torch.equal(dm.test_set[3][0], dm.test_set[3][0])
    draws = torch.stack([dm.train_set[3][0] for _ in range(8)])  # (8, 1, 16, 16)
    assert not all(torch.equal(d, draws[0]) for d in draws[1:])


def test_predict_defaults_to_the_test_split() -> None:
    dm = ImageDataModule(batch_size=50)
    dm.setup("predict")
    batch = next(iter(dm.predict_dataloader()))
    assert set(batch) == {"image", "index", "path", "target"}
    assert batch["image"].shape == (50, 1, 16, 16) and batch["index"].tolist() == list(range(50))
    assert batch["path"] == dm.predict_paths[:50] and len(dm.predict_paths) == 359
    assert batch["path"][0].startswith("digits/") and (batch["target"] >= 0).all()


# --------------------------------------------------------------------------------------- Mixup
def test_mixup_only_on_training_batches() -> None:
    dm = ImageDataModule(mixup_alpha=0.8, cutmix_alpha=1.0, mixup_label_smoothing=0.1, batch_size=32)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    dm.trainer = SimpleNamespace(training=False)  # validating, testing, predicting
    x, y = dm.on_after_batch_transfer((batch[0].clone(), batch[1]), 0)
    assert torch.equal(x, batch[0]) and torch.equal(y, batch[1])
    dm.trainer = SimpleNamespace(training=True)
    x, y = dm.on_after_batch_transfer((batch[0].clone(), batch[1]), 0)
    assert y.shape == (32, 10) and y.dtype == torch.float32 and torch.allclose(y.sum(1), torch.ones(32))
    labels = batch[1]
    for i, row in enumerate(y - 0.1 / 10):  # without the smoothing floor: only the mixed pair remains
        pair = {int(labels[i]), int(labels[31 - i])}
        assert all(row[k].abs() < 1e-6 for k in range(10) if k not in pair)
    example = torch.zeros(1, 1, 16, 16)  # a model's example_input_array, run by the model summary at fit start
    assert dm.on_after_batch_transfer(example, 0) is example  # not a batch: passes unchanged


class _Recorder(LightningModule):
    """Records the target kinds each stage receives."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(256, 10)
        self.seen: dict[str, set[tuple]] = {"train": set(), "val": set()}

    def _step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        x, y = batch
        self.seen[stage].add((y.dtype, tuple(y.shape[1:])))
        if y.is_floating_point():
            assert torch.allclose(y.sum(1), torch.ones(len(y)))
        return self.w(x.flatten(1)).logsumexp(-1).mean()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_trainer_sees_soft_targets_in_training_and_hard_ones_in_validation() -> None:
    dm = ImageDataModule(mixup_alpha=0.8, batch_size=64)
    model = _Recorder()
    trainer = Trainer(
        max_epochs=1,
        limit_train_batches=3,
        limit_val_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
    )
    trainer.fit(model, datamodule=dm)
    assert model.seen["train"] == {(torch.float32, (10,))}
    assert model.seen["val"] == {(torch.int64, ())}


# ---------------------------------------------------------------------------------- image folders
def test_image_folder_single_folder_is_split_by_class_and_seed(tmp_path: Path) -> None:
    make_image_folder(tmp_path, {"zebra": 20, "ant": 10, "moth": 30}, size=(10, 14))
    dm = ImageDataModule(
        "image_folder", root=str(tmp_path), image_size=8, batch_size=4, val_fraction=0.2, test_fraction=0.1
    )
    assert dm.class_names == ["ant", "moth", "zebra"] and dm.num_classes == 3 and dm.in_chans == 3
    dm.setup("fit")
    sets = _split_sets(dm)
    assert sum(len(s) for s in sets.values()) == 60 and len(set().union(*sets.values())) == 60
    assert torch.bincount(dm.test_set.targets).tolist() == [1, 3, 2]
    assert torch.bincount(dm.val_set.targets).tolist() == [2, 5, 4]  # 20 % of what test left
    for s, part in sets.items():
        for path in part:
            assert (
                dm.class_names[getattr(dm, f"{s}_set").targets[getattr(dm, f"{s}_set").paths.index(path)]]
                == Path(path).parent.name
            )
    again = ImageDataModule("image_folder", root=str(tmp_path), image_size=8, val_fraction=0.2, test_fraction=0.1)
    again.setup("fit")
    assert _split_sets(again) == sets
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 3, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.long


def test_image_folder_explicit_splits_are_used_as_given(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "train", {"b": 4, "a": 3})
    make_image_folder(tmp_path / "val", {"a": 2, "b": 1})
    make_image_folder(tmp_path / "test", {"a": 1, "b": 2})
    dm = ImageDataModule("image_folder", root=str(tmp_path), image_size=8)
    assert dm.class_names == ["a", "b"]
    dm.setup("fit")
    for split, n in (("train", 7), ("val", 3), ("test", 3)):
        names = getattr(dm, f"{split}_set").names
        assert len(names) == n and all(Path(p).parts[-3] == split for p in names)


def test_image_folder_without_val_holds_it_out_of_train(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "train", {"a": 10, "b": 10})
    make_image_folder(tmp_path / "test", {"a": 2, "b": 2})
    dm = ImageDataModule("image_folder", root=str(tmp_path), image_size=8, val_fraction=0.2)
    dm.setup("fit")
    assert len(dm.train_set) == 16 and torch.bincount(dm.val_set.targets).tolist() == [2, 2]
    assert not set(dm.train_set.names) & set(dm.val_set.names)
    assert all(Path(p).parts[-3] == "test" for p in dm.test_set.names)


def test_image_folder_greyscale_and_mixed_modes(tmp_path: Path) -> None:
    write_image(tmp_path / "a" / "grey.png", 1, mode="L")
    write_image(tmp_path / "a" / "rgba.png", 2, mode="RGBA")
    write_image(tmp_path / "b" / "palette.png", 3, mode="P")
    write_image(tmp_path / "b" / "rgb.png", 4, mode="RGB")
    dm = ImageDataModule(
        "image_folder", root=str(tmp_path), image_size=8, batch_size=4, val_fraction=0.3, test_fraction=0.3
    )
    dm.setup("fit")
    for part in (dm.train_set, dm.val_set, dm.test_set):
        for i in range(len(part)):
            assert part[i][0].shape == (3, 8, 8)  # every mode becomes RGB
    grey = ImageDataModule(
        "image_folder", root=str(tmp_path), in_chans=1, image_size=8, val_fraction=0.3, test_fraction=0.3
    )
    assert grey.mean == pytest.approx([0.449]) and grey.std == pytest.approx([0.226])
    grey.setup("fit")
    rgb = str(tmp_path / "b" / "rgb.png")
    split = next(part for part in (grey.train_set, grey.val_set, grey.test_set) if rgb in part.paths)
    with pytest.raises(ValueError, match=r"rgb.png: a colour image \(mode RGB\) where greyscale is expected"):
        split[split.paths.index(rgb)]  # the data: never turned grey silently
    # an image to predict is turned grey as PIL does (the greyscale model cannot see colour)
    with Image.open(rgb) as img:
        img.convert("L").save(tmp_path / "luma.png")
    prepared = grey.load_image(rgb)
    assert prepared.shape == (1, 8, 8) and torch.equal(prepared, grey.load_image(tmp_path / "luma.png"))


def test_corrupt_file_in_a_folder_is_named_by_the_loader(tmp_path: Path) -> None:
    make_image_folder(tmp_path, {"a": 3, "b": 3})
    (tmp_path / "b" / "b_001.png").write_bytes(b"garbage")
    dm = ImageDataModule(
        "image_folder", root=str(tmp_path), image_size=8, batch_size=8, val_fraction=0.01, test_fraction=0.01
    )
    dm.setup("fit")
    with pytest.raises(ValueError, match=r"b_001.png: cannot read the image"):
        next(iter(dm.train_dataloader()))


def test_empty_class_folder_is_named_at_init(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "train", {"a": 2, "b": 2})
    (tmp_path / "val" / "b").mkdir(parents=True)
    write_image(tmp_path / "val" / "a" / "x.png", 0)
    dm = ImageDataModule("image_folder", root=str(tmp_path), image_size=8)
    with pytest.raises(ValueError, match=r"val/b: empty class folder"):
        dm.setup("fit")


def test_predict_from_a_folder_of_files(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "data", {"a": 3, "b": 3})
    write_image(tmp_path / "new" / "2.png", 0, size=(30, 20))
    write_image(tmp_path / "new" / "1.jpg", 1, size=(5, 9), mode="L")
    dm = ImageDataModule("image_folder", root=str(tmp_path / "data"), image_size=8, predict_path=str(tmp_path / "new"))
    dm.setup("predict")
    assert [Path(p).name for p in dm.predict_paths] == ["1.jpg", "2.png"]
    batch = next(iter(dm.predict_dataloader()))
    assert batch["image"].shape == (2, 3, 8, 8) and batch["path"] == dm.predict_paths
    assert batch["target"].tolist() == [-1, -1] and batch["index"].tolist() == [0, 1]
    assert torch.allclose(batch["image"][1], dm.load_image(dm.predict_paths[1]))


# ------------------------------------------------------------------------ the checkpoint's copy


def test_state_is_plain_data_and_complete(tmp_path: Path) -> None:
    """What inference needs is in state_dict (Lightning saves it in every checkpoint), loadable with
    weights_only=True."""
    make_image_folder(tmp_path / "data", {"b": 2, "a": 2}, mode="L")
    dm = ImageDataModule("image_folder", root=str(tmp_path / "data"), image_size=8, in_chans=1)
    state = dm.state_dict()
    assert state == {"class_names": ["a", "b"], "image_size": 8, "in_chans": 1, "mean": dm.mean, "std": dm.std}
    torch.save(state, tmp_path / "s.pt")
    assert torch.load(tmp_path / "s.pt", weights_only=True) == state


def test_predict_after_the_training_folder_moved(tmp_path: Path) -> None:
    """Only predicting, the image folder gone: nothing is known (so the CLI links nothing and the model
    keeps its checkpoint's values) and only the files to predict are read; the checkpoint's state then
    prepares them as in training."""
    make_image_folder(tmp_path / "data", {"a": 2, "b": 2})
    trained = ImageDataModule("image_folder", root=str(tmp_path / "data"), image_size=8, mean=[0.1] * 3, std=[0.3] * 3)
    write_image(tmp_path / "new" / "wide.png", 4, size=(30, 9), mode="L")  # another size and colour mode
    moved = ImageDataModule("image_folder", root=str(tmp_path / "gone"), predict_path=str(tmp_path / "new"))
    for name in ("num_classes", "image_size", "in_chans"):
        assert not hasattr(moved, name)
    assert moved.class_names is None and moved.state_dict() == {}
    moved.setup("predict")
    with pytest.raises(ValueError, match=r"gone is not a folder, and no checkpoint gave the image size"):
        moved.predict_dataloader()
    moved.load_state_dict(trained.state_dict())
    assert (moved.class_names, moved.num_classes, moved.image_size, moved.in_chans) == (["a", "b"], 2, 8, 3)
    batch = next(iter(moved.predict_dataloader()))
    assert torch.equal(batch["image"][0], trained.load_image(tmp_path / "new" / "wide.png"))
    with pytest.raises(FileNotFoundError, match=r"image folder .*gone does not exist"):
        moved.setup("fit")


def test_files_to_predict_take_the_checkpoints_size_and_normalisation(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "data", {"a": 2, "b": 2})
    write_image(tmp_path / "new" / "x.png", 4, size=(20, 20))
    trained = ImageDataModule("image_folder", root=str(tmp_path / "data"), image_size=8)
    dm = ImageDataModule(
        "image_folder",
        root=str(tmp_path / "data"),
        image_size=12,
        mean=[0.5] * 3,
        std=[0.5] * 3,
        predict_path=str(tmp_path / "new"),
    )
    dm.setup("predict")
    dm.load_state_dict(trained.state_dict())  # no trainer: as under `predict --ckpt_path`
    assert (dm.image_size, dm.mean, dm.std) == (8, trained.mean, trained.std)
    assert torch.equal(next(iter(dm.predict_dataloader()))["image"][0], trained.load_image(tmp_path / "new" / "x.png"))


def test_checkpoint_classes_must_be_the_datas_where_labels_count(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "one", {"a": 2, "b": 2})
    make_image_folder(tmp_path / "two", {"a": 2, "c": 2})
    dm = ImageDataModule("image_folder", root=str(tmp_path / "two"), image_size=8, val_fraction=0.3, test_fraction=0.3)
    dm.setup("test")
    own = dm.state_dict()
    message = r"trained on the classes \['a', 'b'\]; data image_folder \(.*two\) has \['a', 'c'\]"
    with pytest.raises(ValueError, match=message):
        dm.load_state_dict(ImageDataModule("image_folder", root=str(tmp_path / "one"), image_size=8).state_dict())
    dm.load_state_dict({**own, "image_size": 16})  # evaluation keeps its own size
    assert dm.image_size == 8


def test_single_class_folder_empty_predict_folder_and_unreadable_image(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "one", {"ant": 3})
    with pytest.raises(ValueError, match=r"one: one class folder \(ant\); a classifier needs two or more"):
        ImageDataModule("image_folder", root=str(tmp_path / "one"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images here")
    with pytest.raises(FileNotFoundError, match=r"empty: no image files \(looked for .png"):
        ImageDataModule(predict_path=str(tmp_path / "empty")).setup("predict")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "broken.png").write_bytes(b"garbage")
    dm = ImageDataModule(predict_path=str(tmp_path / "new"))
    dm.setup("predict")
    with pytest.raises(ValueError, match=r"broken.png: cannot read the image"):
        next(iter(dm.predict_dataloader()))
