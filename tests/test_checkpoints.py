"""Checkpoint files: the format stamp, atomic writes, and one line for a checkpoint that cannot be used
(missing, truncated, corrupted, not Lightning's, too new, another model's), naming the newest complete
checkpoint beside it; ``load_from_checkpoint`` checks first. The real kills are in ``test_preemption.py``."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import pytest
import torch

from lightning_tf import __version__
from lightning_tf.training import LastCheckpoint
from lightning_tf.training.checkpoints import (
    FORMAT,
    AtomicCheckpointIO,
    CheckpointError,
    MissingCheckpointError,
    check_checkpoint,
    stamp,
)
from lightning_tf.vision import ViTClassifier


def write(path: Path, *, step: int = 7, **extra: Any) -> Path:
    ckpt = {"state_dict": {"w": torch.arange(4096.0)}, "epoch": 1, "global_step": step, **extra}
    stamp(ckpt)
    ckpt.update(extra)
    torch.save(ckpt, path)
    return path


def test_a_checkpoint_is_stamped_and_an_unstamped_one_still_loads(tmp_path: Path) -> None:
    ckpt = check_checkpoint(write(tmp_path / "a.ckpt"))
    assert ckpt["lightning_tf"] == {"version": __version__, "format": FORMAT} and ckpt["global_step"] == 7
    torch.save({"state_dict": {}, "epoch": 0}, tmp_path / "old.ckpt")  # format 0: before the stamp existed
    assert check_checkpoint(tmp_path / "old.ckpt")["epoch"] == 0


def test_broken_files_are_one_line_naming_the_newest_complete_one_beside_them(tmp_path: Path) -> None:
    good = write(tmp_path / "last.ckpt", step=12)
    data = good.read_bytes()
    (tmp_path / "cut.ckpt").write_bytes(data[: len(data) - 100])
    flipped = bytearray(data)
    flipped[data.index(b"data/0") + 200] ^= 0xFF  # inside the tensor's record
    (tmp_path / "flipped.ckpt").write_bytes(bytes(flipped))
    newest = "the newest complete checkpoint in .* is last.ckpt \\(epoch 1, step 12\\)$"
    with pytest.raises(
        CheckpointError, match=f"cut.ckpt: not a complete checkpoint, truncated or corrupted .*; {newest}"
    ):
        check_checkpoint(tmp_path / "cut.ckpt")
    with pytest.raises(
        CheckpointError, match=f"flipped.ckpt: corrupted, the record .*/data/0 fails its CRC-32 check; {newest}"
    ):
        check_checkpoint(tmp_path / "flipped.ckpt")
    with pytest.raises(MissingCheckpointError, match=f"gone.ckpt: no such checkpoint file; {newest}") as missing:
        check_checkpoint(tmp_path / "gone.ckpt")
    assert isinstance(missing.value, FileNotFoundError)
    with pytest.raises(CheckpointError, match=f"{tmp_path}: a folder, not a checkpoint file; the newest complete"):
        check_checkpoint(tmp_path)
    with pytest.raises(MissingCheckpointError, match=r"nowhere/x.ckpt: no such checkpoint file$"):
        check_checkpoint(tmp_path / "nowhere" / "x.ckpt")


def test_what_is_not_a_usable_lightning_checkpoint_says_why(tmp_path: Path) -> None:
    torch.save({"weights": torch.zeros(2)}, tmp_path / "plain.ckpt")
    with pytest.raises(CheckpointError, match=r"plain.ckpt: not a Lightning checkpoint \(no 'state_dict'\)$"):
        check_checkpoint(tmp_path / "plain.ckpt")
    torch.save({"state_dict": {}, "obj": timedelta(1)}, tmp_path / "pickled.ckpt")
    with pytest.raises(
        CheckpointError, match=r"pickled.ckpt: holds objects that torch.load\(weights_only=True\) refuses"
    ):
        check_checkpoint(tmp_path / "pickled.ckpt")
    write(tmp_path / "new.ckpt", lightning_tf={"version": "9.1.0", "format": FORMAT + 1})
    with pytest.raises(
        CheckpointError,
        match=(
            f"new.ckpt: written by lightning-tf 9.1.0 in checkpoint format {FORMAT + 1}; this lightning-tf "
            f"{__version__} reads formats up to {FORMAT}: install lightning-tf 9.1.0 or later"
        ),
    ):
        check_checkpoint(tmp_path / "new.ckpt")


def test_a_checkpoint_of_another_model_is_named_as_such(tmp_path: Path) -> None:
    text = write(tmp_path / "t.ckpt", hyper_parameters={"_class_path": "lightning_tf.text.Seq2SeqTransformer"})
    with pytest.raises(
        CheckpointError,
        match=("t.ckpt: a checkpoint of Seq2SeqTransformer \\(text\\), not of ViTClassifier \\(vision\\)"),
    ):
        check_checkpoint(text, model_class=ViTClassifier)
    plain = write(tmp_path / "p.ckpt", hyper_parameters={"vocab_size": 64, "beam_size": 1})  # a plain Trainer's
    with pytest.raises(CheckpointError, match=r"p.ckpt: not a checkpoint of ViTClassifier \(vision\): its hyper"):
        check_checkpoint(plain, model_class=ViTClassifier)
    own = write(tmp_path / "v.ckpt", hyper_parameters={"_class_path": "lightning_tf.vision.module.ViTClassifier"})
    assert check_checkpoint(own, model_class=ViTClassifier)["global_step"] == 7
    assert check_checkpoint(own, model_class=type("MyViT", (ViTClassifier,), {}))["global_step"] == 7  # a subclass
    with pytest.raises(CheckpointError, match="t.ckpt: a checkpoint of Seq2SeqTransformer"):
        ViTClassifier.load_from_checkpoint(text)  # load_from_checkpoint checks first
    (tmp_path / "cut.ckpt").write_bytes(own.read_bytes()[:500])
    with pytest.raises(CheckpointError, match="cut.ckpt: not a complete checkpoint"):
        ViTClassifier.load_from_checkpoint(tmp_path / "cut.ckpt")


class Failing(AtomicCheckpointIO):
    """Dies half-way through its write, as a full disk or a kill would stop it."""

    def _write(self, checkpoint: dict[str, Any], f: IO[bytes]) -> None:
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")


def test_a_save_cut_short_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    io = AtomicCheckpointIO()
    path = tmp_path / "ck" / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "global_step": 1}, path)
    assert sorted(os.listdir(path.parent)) == ["last.ckpt"]
    with pytest.raises(OSError, match="No space left"):
        Failing().save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "global_step": 2}, path)
    assert io.load_checkpoint(path)["global_step"] == 1  # the previous one, whole
    assert (path.parent / "last.ckpt.partial").read_bytes().startswith(b"PK")
    path.with_name("last.ckpt.partial").replace(tmp_path / "broken.ckpt")
    with pytest.raises(CheckpointError, match="broken.ckpt: not a complete checkpoint"):
        io.load_checkpoint(tmp_path / "broken.ckpt")


def test_last_checkpoint_keeps_all_its_triggers() -> None:
    cb = LastCheckpoint(train_time_interval=timedelta(minutes=30), every_n_train_steps=3)
    assert (cb._every_n_epochs, cb._every_n_train_steps, cb._train_time_interval) == (1, 3, timedelta(minutes=30))
    assert cb.save_top_k == 1 and cb.filename == "last" and cb.handle_signals
    assert cb.state_key != LastCheckpoint().state_key
    with pytest.raises(ValueError, match=r"every_n_epochs \(-1\) and every_n_train_steps \(None\) must be >= 0"):
        LastCheckpoint(every_n_epochs=-1)
