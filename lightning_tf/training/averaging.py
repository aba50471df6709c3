"""Checkpoint averaging (Vaswani et al. 2017; fairseq's ``scripts/average_checkpoints.py``): the mean of the
parameters of several checkpoints of one model, written as a checkpoint that predicts, exports and serves
like any other.

Checkpoints are compatible when they hold the same model class, the same parameter names and, for each,
the same shape and dtype, and the same state beside the weights that inference reads (a tokenizer, class names,
a data scale); anything else is refused in one line naming the first difference. Floating-point
tensors are averaged (summed in float64, then cast back); integer tensors (counters) must agree and are
kept. The output is the last checkpoint with the averaged ``state_dict``, without the training state
(optimizer, schedulers, loops: an average is for inference, not for resuming) and with
``averaged_from``: the files averaged.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .callbacks import CHECKPOINT_KEY, METRICS_KEY
from .checkpoints import AtomicCheckpointIO, check_checkpoint

__all__ = ["average_checkpoints", "average_state_dicts"]

# what an average leaves out: the training state, and Lightning's weight-averaging copies (the EMA's raw weights)
_TRAINING_STATE = ("optimizer_states", "lr_schedulers", "loops", "callbacks", "current_model_state", "averaging_state")


def average_state_dicts(states: Sequence[dict[str, Tensor]], names: Sequence[str] | None = None) -> dict[str, Tensor]:
    """The element-wise mean of ``states`` (same keys, shapes and dtypes; ``names`` label them in errors).

    Raises:
        ValueError: no states, or two that differ in keys, shapes, dtypes or integer values (one line).
    """
    if not states:
        raise ValueError("nothing to average: give at least one checkpoint")
    names = list(names) if names is not None else [f"#{i}" for i in range(len(states))]
    first = states[0]
    for other, name in zip(states[1:], names[1:], strict=True):
        extra, missing = sorted(set(other) - set(first)), sorted(set(first) - set(other))
        if extra or missing:
            key = (missing or extra)[0]
            raise ValueError(
                f"{name} is not compatible with {names[0]}: parameter {key!r} is in one and not the other "
                f"({len(missing)} missing, {len(extra)} extra)"
            )
        for key, value in first.items():
            theirs = other[key]
            if theirs.shape != value.shape or theirs.dtype != value.dtype:
                raise ValueError(
                    f"{name} is not compatible with {names[0]}: {key!r} is {tuple(theirs.shape)} {theirs.dtype} "
                    f"there, {tuple(value.shape)} {value.dtype} here"
                )
            if not value.is_floating_point() and not torch.equal(theirs, value):
                raise ValueError(f"{name} is not compatible with {names[0]}: integer tensor {key!r} differs")
    out: dict[str, Tensor] = {}
    for key, value in first.items():
        if value.is_floating_point():
            total = torch.zeros(value.shape, dtype=torch.float64)
            for state in states:
                total += state[key].to(torch.float64)
            out[key] = (total / len(states)).to(value.dtype)
        else:
            out[key] = value.clone()
    return out


def average_checkpoints(paths: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str]) -> Path:
    """Average the parameters of the Lightning checkpoints ``paths`` into the checkpoint ``output``.

    Args:
        paths: checkpoints of one model (e.g. the last few epochs of a run).
        output: the averaged checkpoint to write (its folder is created; written atomically).

    Returns:
        ``output`` as a Path.

    Raises:
        ValueError: checkpoints of different model classes or parameters (one line naming the first
            difference), a broken checkpoint (:class:`~.checkpoints.CheckpointError`).
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("nothing to average: give at least one checkpoint")
    out = Path(output)
    if out.resolve() in {p.resolve() for p in paths}:
        raise ValueError(f"--output {out} is one of the checkpoints averaged: write the average elsewhere")
    ckpts: list[dict[str, Any]] = []
    for p in paths:
        check_checkpoint(p)  # exists, complete, a format this package reads
        ckpts.append(torch.load(p, map_location="cpu", weights_only=True))
    first_class = _class_of(ckpts[0])
    for p, ckpt in zip(paths[1:], ckpts[1:], strict=True):
        theirs = _class_of(ckpt)
        if first_class and theirs and theirs != first_class:
            raise ValueError(f"{p} is not compatible with {paths[0]}: a {theirs} checkpoint, not a {first_class} one")
        key = _inference_difference(ckpts[0], ckpt)
        if key is not None:  # another tokenizer, other class names, another data scale: its weights mean otherwise
            raise ValueError(f"{p} is not compatible with {paths[0]}: its {key!r} (what it predicts with) differs")
    averaged = average_state_dicts([c["state_dict"] for c in ckpts], [str(p) for p in paths])
    result = {k: v for k, v in ckpts[-1].items() if k not in _TRAINING_STATE}
    result["state_dict"] = averaged
    result["averaged_from"] = [str(p) for p in paths]
    AtomicCheckpointIO().save_checkpoint(result, out)
    return out


# what a checkpoint holds beside the weights that does not change what they mean (the rest, a tokenizer, class names,
# a data scale, a data module's state, must be equal for an average to mean anything)
_BOOKKEEPING = ("state_dict", "hyper_parameters", "epoch", "global_step", "pytorch-lightning_version", "lightning_tf")
_BOOKKEEPING += ("averaged_from", "provenance", "pretrained_from", "hparams_name", *_TRAINING_STATE)
_BOOKKEEPING += (CHECKPOINT_KEY, METRICS_KEY, "datamodule_hyper_parameters", "datamodule_hparams_name")
_BOOKKEEPING += ("native_amp_scaling_state",)  # and a precision plugin's own (MixedPrecision: its grad scaler)


def _inference_difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """The first key beside the weights and bookkeeping whose value differs between checkpoints ``a`` and ``b``."""
    for key in sorted((set(a) | set(b)) - set(_BOOKKEEPING)):
        if key.endswith("Precision"):
            continue
        if key not in a or key not in b or not _same(a[key], b[key]):
            return key
    return None


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, Tensor) or isinstance(y, Tensor):
        return isinstance(x, Tensor) and isinstance(y, Tensor) and x.shape == y.shape and torch.equal(x, y)
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y, strict=True))
    return bool(x == y) if type(x) is type(y) else False


def _class_of(ckpt: dict[str, Any]) -> str:
    """The model class LightningCLI recorded ("" for a plain Trainer run)."""
    return str((ckpt.get("hyper_parameters") or {}).get("_class_path") or "")
