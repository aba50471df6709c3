"""Checkpoint files that survive a kill, and one clear line for one that did not.

* Every checkpoint a model of this package writes carries ``checkpoint["lightning_tf"]``: the package
  version and the checkpoint format (:data:`FORMAT`). A checkpoint loads when its format is at most
  this package's (older formats are read as they were written; a checkpoint without the key is
  format 0, from before the key existed); a newer format is refused, naming both versions.
* :class:`AtomicCheckpointIO` (in ``configs/trainer/default.yaml``) writes each checkpoint to
  ``<name>.partial`` beside it, flushes it to the disk (``fsync``) and renames it over ``<name>``
  (``os.replace``, atomic on POSIX and Windows): a kill or a full disk during a save leaves the previous
  checkpoint of that name intact and a ``.partial`` file that nothing reads.
* :func:`check_checkpoint` validates a path where it enters (the CLI's ``--ckpt_path``, ``export``,
  ``load_from_checkpoint``, the trainer's loads through :class:`AtomicCheckpointIO`): the file exists,
  is a complete zip archive whose every record passes its CRC-32 (a truncated or bit-flipped file is
  caught here, where ``torch.load`` would fail with a traceback or, worse, load flipped weights), holds
  a Lightning checkpoint of a format this package reads, and was written by the expected model class.
  A failure is one :class:`CheckpointError` line naming the file and the cause, and, when the file's
  folder holds another complete checkpoint, the newest of those.

The zip layout is ``torch.save``'s; reading a checkpoint's keys uses ``torch.load(mmap=True)``, which
maps the tensors instead of reading them.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import IO, Any

import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lightning_tf import __version__

__all__ = [
    "FORMAT",
    "KEY",
    "AtomicCheckpointIO",
    "CheckedLoading",
    "CheckpointError",
    "MissingCheckpointError",
    "check_checkpoint",
    "newest_complete",
    "stamp",
]

#: the checkpoint format this package writes; bump it when a change makes older packages misread a checkpoint
FORMAT = 1
#: where a checkpoint keeps the package version and the format
KEY = "lightning_tf"
#: suffix of a checkpoint being written
PARTIAL = ".partial"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: the message is one line naming the file and the cause."""


class MissingCheckpointError(CheckpointError, FileNotFoundError):
    """No file at the checkpoint's path."""


def stamp(checkpoint: dict[str, Any]) -> None:
    """Record the package version and the checkpoint format in ``checkpoint`` (the modules'
    ``on_save_checkpoint``)."""
    checkpoint[KEY] = {"version": __version__, "format": FORMAT}


# ---------------------------------------------------------------------------------------- reading


#: files whose every record passed its CRC-32, by (path, size, modification time): checked once per process
_VERIFIED: set[tuple[str, int, int]] = set()


def _open(path: Path) -> dict[str, Any]:
    """The checkpoint at ``path`` (tensors memory-mapped), or :class:`CheckpointError` without the
    alternatives (:func:`check_checkpoint` adds them)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        try:
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()  # reads every record and checks its CRC-32
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise CheckpointError(f"{path}: not a complete checkpoint, truncated or corrupted ({e})") from None
        if bad is not None:
            raise CheckpointError(f"{path}: corrupted, the record {bad} fails its CRC-32 check")
        _VERIFIED.add(key)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: holds objects that torch.load(weights_only=True) refuses ({first})") from None
    except (RuntimeError, EOFError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint ({first})") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{path}: not a Lightning checkpoint (no 'state_dict')")
    return ckpt


def _format_error(path: Path, ckpt: dict[str, Any]) -> str | None:
    info = ckpt.get(KEY) if isinstance(ckpt.get(KEY), dict) else {}
    written = int(info.get("format", 0))
    if written <= FORMAT:
        return None
    version = info.get("version", "?")
    return (
        f"{path}: written by lightning-tf {version} in checkpoint format {written}; this lightning-tf "
        f"{__version__} reads formats up to {FORMAT}: install lightning-tf {version} or later to use it"
    )


def _class_error(path: Path, ckpt: dict[str, Any], expected: type) -> str | None:
    """Whether ``expected`` wrote the checkpoint: LightningCLI records the class as ``_class_path``; a
    plain ``Trainer`` run does not, and then its hyperparameters must be ``expected``'s arguments."""
    import inspect

    hparams = dict(ckpt.get("hyper_parameters") or {})
    theirs = str(hparams.get("_class_path") or "")
    ours = f"{expected.__module__}.{expected.__qualname__}"
    if theirs:
        module_name, _, name = theirs.rpartition(".")
        if name == expected.__qualname__ and ours.startswith(module_name) or _related(theirs, expected):
            return None
        return f"{path}: a checkpoint of {name} ({_task(theirs)}), not of {expected.__name__} ({_task(ours)})"
    params = set(inspect.signature(expected.__init__).parameters) - {"self"}
    unknown = sorted(k for k in hparams if not k.startswith("_") and k not in params)
    if unknown:
        return (
            f"{path}: not a checkpoint of {expected.__name__} ({_task(ours)}): its hyperparameters "
            f"{unknown[:4]} are not {expected.__name__}'s arguments"
        )
    return None


def _related(class_path: str, expected: type) -> bool:
    """Whether the package's class at ``class_path`` is ``expected``, a subclass or a base of it (only
    lightning_tf's modules are imported on a checkpoint's say-so)."""
    import importlib

    module_name, _, name = class_path.rpartition(".")
    if module_name.split(".")[0] != "lightning_tf":
        return False
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        return False
    return isinstance(cls, type) and (issubclass(expected, cls) or issubclass(cls, expected))


def _task(class_path: str) -> str:
    parts = class_path.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "lightning_tf" else class_path.rpartition(".")[0] or "?"


def _where(ckpt: dict[str, Any]) -> str:
    return f"epoch {ckpt.get('epoch', '?')}, step {ckpt.get('global_step', '?')}"


def newest_complete(folder: Path, skip: Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The newest ``*.ckpt`` file in ``folder`` (by modification time) that :func:`check_checkpoint`
    accepts, with its contents, leaving out ``skip``; None when there is none."""
    if not folder.is_dir():
        return None
    files = sorted(folder.glob("*.ckpt"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for candidate in files:
        if skip is not None and candidate.resolve() == skip.resolve():
            continue
        try:
            ckpt = _open(candidate)
        except CheckpointError:
            continue
        if _format_error(candidate, ckpt) is None:
            return candidate, ckpt
    return None


def _alternative(path: Path) -> str:
    found = newest_complete(path.parent, skip=path)
    if found is None:
        return ""
    other, ckpt = found
    return f"; the newest complete checkpoint in {path.parent} is {other.name} ({_where(ckpt)})"


def check_checkpoint(path: str | os.PathLike[str], model_class: type | None = None) -> dict[str, Any]:
    """Validate the checkpoint at ``path`` (see the module docstring) and return its contents (tensors
    memory-mapped).

    Args:
        path: the checkpoint file.
        model_class: the LightningModule class it must belong to (None: any).

    Raises:
        CheckpointError: one line naming the file and what is wrong with it, and the newest complete
            checkpoint in its folder when there is one.
    """
    p = Path(path)
    if not p.exists():
        raise MissingCheckpointError(f"{p}: no such checkpoint file{_alternative(p)}")
    if p.is_dir():
        found = newest_complete(p)
        hint = f"; the newest complete checkpoint in it is {found[0].name}" if found else ""
        raise CheckpointError(f"{p}: a folder, not a checkpoint file{hint}")
    try:
        ckpt = _open(p)
    except CheckpointError as e:
        raise CheckpointError(f"{e}{_alternative(p)}") from None
    error = _format_error(p, ckpt)
    if error:
        raise CheckpointError(f"{error}{_alternative(p)}")
    error = _class_error(p, ckpt, model_class) if model_class is not None else None
    if error:
        raise CheckpointError(error)
    return ckpt


class CheckedLoading:
    """``load_from_checkpoint`` that validates its file first (:func:`check_checkpoint`, with the class
    it is called on): a broken, foreign or too new checkpoint is one :class:`CheckpointError` line.
    Mixed into the package's LightningModules (before ``LightningModule``)."""

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: str | os.PathLike[str] | IO[bytes], *args: Any, **kwargs: Any
    ) -> Any:
        local = isinstance(checkpoint_path, (str, os.PathLike)) and _is_local(checkpoint_path)
        if local:
            check_checkpoint(checkpoint_path, model_class=cls)
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)  # type: ignore[misc]


# ---------------------------------------------------------------------------------------- writing


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``torch.save`` checkpoints, written atomically and checked when read.

    A save writes ``<path>.partial``, flushes and ``fsync``s it, renames it to ``<path>`` (``os.replace``)
    and ``fsync``s the folder, so ``<path>`` is always a whole checkpoint: the previous one until the
    rename, the new one after. A load validates the file first (:func:`check_checkpoint`). Remote paths
    (``s3://...``) are Lightning's, unchanged.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike[str], storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not _is_local(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + PARTIAL)
        with open(partial, "wb") as f:
            self._write(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
        _fsync_folder(path.parent)

    def _write(self, checkpoint: dict[str, Any], f: IO[bytes]) -> None:
        torch.save(checkpoint, f)

    def load_checkpoint(
        self, path: str | os.PathLike[str], map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if _is_local(path):
            check_checkpoint(path)
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)


def _is_local(path: str | os.PathLike[str]) -> bool:
    return isinstance(get_filesystem(path), LocalFileSystem)


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (POSIX); a platform without folder descriptors skips it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
