"""A trial's parameters as the command-line overrides ``lightning-tf fit`` takes (``--model.init_args.lr=0.0012``),
and the few overrides that give a trial its own folder, wandb run and a quiet console.

A value is written so that the config parser reads back exactly the value Optuna chose: strings as they
are (the parser reads a string-typed option's text as given, so ``on`` stays the string, not YAML's
boolean), floats with a decimal point (YAML 1.1 reads ``1e-05`` as text), booleans, null and lists as YAML.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["absolute_configs", "args_key", "format_value", "given_names", "to_overrides", "trial_id", "trial_overrides"]


def format_value(value: Any) -> str:
    """``value`` as the config parser reads it back: ``patches``, ``true``, ``null``, ``3``, ``1.0e-05``."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan")
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    raise ValueError(f"cannot write {value!r} ({type(value).__name__}) as a config value")


def to_overrides(params: Mapping[str, Any]) -> list[str]:
    """``--<name>=<value>`` for each parameter, in order."""
    return [f"--{name}={format_value(value)}" for name, value in params.items()]


def given_names(args: Iterable[str]) -> set[str]:
    """The option names (``trainer.devices``) that command-line ``args`` set, ``--config`` aside."""
    names = set()
    for arg in args:
        if arg.startswith("--") and not arg.startswith("--config"):
            names.add(arg[2:].split("=", 1)[0])
    return names


def trial_id(study_name: str, number: int) -> str:
    """The run id (and wandb run name) of trial ``number``: ``<study>-0007``."""
    return f"{study_name}-{number:04d}"


_SAFE = re.compile(r"[A-Za-z0-9_-]+")


def trial_overrides(study_name: str, number: int, study_dir: str, wandb: bool, user_args: Iterable[str]) -> list[str]:
    """What makes a trial a run of its own beside the others: its folder under ``study_dir``, and under a
    WandbLogger its run id and name (``<study>-0007``), its group (the study) and job type (``tune``); no
    progress bar or model summary (trials run side by side and log to files); one device unless the
    user's own arguments choose (pruning reports from one process).

    Args:
        study_name: the study (letters, digits, ``-`` and ``_``: it names folders and wandb runs).
        number: the trial's number in the study.
        study_dir: the study's folder.
        wandb: the config's logger is one WandbLogger (else the trial's folder is its ``default_root_dir``).
        user_args: the command's own overrides (whatever they set is left to them).
    """
    if not _SAFE.fullmatch(study_name):
        raise ValueError(f"study name {study_name!r}: use letters, digits, '-' and '_' only")
    run = trial_id(study_name, number)
    given = given_names(user_args)
    out: dict[str, str] = {}
    if wandb:
        logger = "trainer.logger.init_args"
        out.update(
            {
                "trainer.default_root_dir": study_dir,
                f"{logger}.save_dir": study_dir,
                f"{logger}.id": run,
                f"{logger}.name": run,
                f"{logger}.group": study_name,
                f"{logger}.job_type": "tune",
            }
        )
    else:
        out["trainer.default_root_dir"] = f"{study_dir}/trials/{number:04d}"
    out.update(
        {"trainer.enable_progress_bar": "false", "trainer.enable_model_summary": "false", "trainer.devices": "1"}
    )
    return [f"--{name}={value}" for name, value in out.items() if name not in given]


def absolute_configs(args: Sequence[str]) -> list[str]:
    """``args`` with every ``--config`` file as an absolute path, so the study's record works from any folder."""
    out = list(args)
    for i, arg in enumerate(out):
        name, eq, value = arg.partition("=")
        if name != "--config":
            continue
        if eq and os.path.exists(value):
            out[i] = f"--config={os.path.abspath(value)}"
        elif not eq and i + 1 < len(out) and os.path.exists(out[i + 1]):
            out[i + 1] = os.path.abspath(out[i + 1])
    return out


def args_key(args: Sequence[str]) -> list[str]:
    """``args`` with every ``--config`` file replaced by a digest of its content: the same on every machine
    whose configs are the same, wherever its clone is (what a study is continued with is compared by it)."""
    out = list(args)
    for i, arg in enumerate(out):
        name, eq, value = arg.partition("=")
        if name != "--config":
            continue
        j, value = (i, value) if eq else (i + 1, out[i + 1] if i + 1 < len(out) else "")
        if value and os.path.isfile(value):
            with open(value, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()[:16]
            out[j] = f"--config=sha256:{digest}" if eq else f"sha256:{digest}"
    return out
