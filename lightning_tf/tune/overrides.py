"""A trial's parameters as ``fit`` overrides (``--model.init_args.lr=0.0012``), the few that make a trial a run of
its own (docs/tune.md, a trial), and the study's ``--config`` files as absolute paths and as digests.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = ["check_study_name", "config_args", "format_value", "to_overrides", "trial_overrides"]


def format_value(value: Any) -> str:
    """``value`` as the config parser reads it back: ``patches``, ``true``, ``null``, ``3``, ``1.0e-05``."""
    if isinstance(value, str):
        return value  # as it is: ``on`` stays the string
    # one line of YAML, whose floats keep a decimal point (YAML 1.1 reads ``1e-05`` as text); a scalar ends in "..."
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=math.inf)
    return text.removesuffix("\n...\n").strip()


def to_overrides(params: Mapping[str, Any]) -> list[str]:
    """``--<name>=<value>`` for each parameter, in order."""
    return [f"--{name}={format_value(value)}" for name, value in params.items()]


def check_study_name(name: str) -> str:
    """``name``, which names folders and wandb runs: letters, digits, ``-`` and ``_``."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"study name {name!r}: use letters, digits, '-' and '_' only")
    return name


def trial_overrides(
    study_name: str, number: int, study_dir: str, wandb: bool, user_args: Iterable[str], reporter: dict[str, Any]
) -> list[str]:
    """What makes trial ``number`` a run of its own: its folder under ``study_dir``, under a WandbLogger its run id
    and name (``<study>-0007``), group (the study) and job type (``tune``); no progress bar or model summary; one
    device (pruning reports from one process); the pruning callback, ``TrialReporter(**reporter)``, last. What
    ``user_args`` set is left to them, the callbacks they add beside it."""
    run, logger = f"{study_name}-{number:04d}", "trainer.logger.init_args"
    out: dict[str, Any] = {"trainer.default_root_dir": study_dir if wandb else f"{study_dir}/trials/{number:04d}"}
    if wandb:
        out |= {f"{logger}.save_dir": study_dir, f"{logger}.id": run, f"{logger}.name": run}
        out |= {f"{logger}.group": study_name, f"{logger}.job_type": "tune"}
    out |= {"trainer.enable_progress_bar": "false", "trainer.enable_model_summary": "false", "trainer.devices": "1"}
    given = {arg[2:].split("=", 1)[0] for arg in user_args if arg.startswith("--")}
    callback = format_value({"class_path": "lightning_tf.tune.reporter.TrialReporter", "init_args": reporter})
    kept = [f"--{name}={value}" for name, value in out.items() if name not in given]
    return [*kept, f"--trainer.callbacks+={callback}"]


def config_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``args`` with every ``--config`` file as an absolute path (the study's record works from any folder), and as
    a digest of its content (the key a continued study is compared by: the same wherever the clone is)."""
    absolute, key = list(args), list(args)
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        j, value = (i, value) if eq else (i + 1, args[i + 1] if i + 1 < len(args) else "")
        if name == "--config" and value and os.path.isfile(value):
            prefix = "--config=" if eq else ""
            absolute[j] = prefix + os.path.abspath(value)
            key[j] = f"{prefix}sha256:{hashlib.sha256(Path(value).read_bytes()).hexdigest()[:16]}"
    return absolute, key
