"""A trial's parameters as the overrides ``lightning-tf fit`` takes (``--model.init_args.lr=0.0012``), the few that
give a trial its own folder, wandb run and pruning callback, and the study's ``--config`` files as absolute paths
and as digests.

A value is written so that the config parser reads back exactly Optuna's value: strings as they are (``on``
stays the string), floats with a decimal point (YAML 1.1 reads ``1e-05`` as text), the rest as YAML.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["CHANNEL", "absolute_configs", "args_key", "check_study_name", "format_value", "given_names"]
__all__ += ["to_overrides", "trial_overrides"]

#: the environment variable that gives a trial's run the descriptor of its socket to the command
CHANNEL = "LIGHTNING_TF_TUNE_CHANNEL"


def format_value(value: Any) -> str:
    """``value`` as the config parser reads it back: ``patches``, ``true``, ``null``, ``3``, ``1.0e-05``."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan")
    if isinstance(value, float):
        mantissa, e, exponent = repr(value).partition("e")
        return f"{mantissa}{'' if '.' in mantissa else '.0'}e{exponent}" if e else mantissa
    if value is None or isinstance(value, (bool, int, list, tuple)):
        return json.dumps(list(value) if isinstance(value, tuple) else value)
    raise ValueError(f"cannot write {value!r} ({type(value).__name__}) as a config value")


def to_overrides(params: Mapping[str, Any]) -> list[str]:
    """``--<name>=<value>`` for each parameter, in order."""
    return [f"--{name}={format_value(value)}" for name, value in params.items()]


def given_names(args: Iterable[str]) -> set[str]:
    """The option names (``trainer.devices``) that command-line ``args`` set, ``--config`` aside."""
    return {a[2:].split("=", 1)[0] for a in args if a.startswith("--") and not a.startswith("--config")}


def check_study_name(name: str) -> str:
    """``name``, which names folders and wandb runs: letters, digits, ``-`` and ``_``."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"study name {name!r}: use letters, digits, '-' and '_' only")
    return name


def trial_overrides(
    study_name: str, number: int, study_dir: str, wandb: bool, user_args: Iterable[str], reporter: Mapping[str, Any]
) -> list[str]:
    """What makes trial ``number`` a run of its own: its folder under ``study_dir``, under a WandbLogger its run id
    and name (``<study>-0007``), group (the study) and job type (``tune``); no progress bar or model summary; one
    device (pruning reports from one process); the pruning callback, ``TrialReporter(**reporter)``. What
    ``user_args`` set is left to them."""
    run, logger = f"{check_study_name(study_name)}-{number:04d}", "trainer.logger.init_args"
    out: dict[str, Any] = {"trainer.default_root_dir": study_dir if wandb else f"{study_dir}/trials/{number:04d}"}
    if wandb:
        out |= {f"{logger}.save_dir": study_dir, f"{logger}.id": run, f"{logger}.name": run}
        out |= {f"{logger}.group": study_name, f"{logger}.job_type": "tune"}
    out |= {"trainer.enable_progress_bar": "false", "trainer.enable_model_summary": "false", "trainer.devices": "1"}
    given = given_names(user_args)
    out["trainer.callbacks+"] = json.dumps(
        {"class_path": "lightning_tf.tune.reporter.TrialReporter", "init_args": reporter}
    )
    return [f"--{name}={value}" for name, value in out.items() if name not in given]


def _config_files(args: Sequence[str]) -> Iterable[tuple[int, str, bool]]:
    """(index of the file's text, the file, whether written ``--config=file``) of each ``--config`` file."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        j, value = (i, value) if eq else (i + 1, args[i + 1] if i + 1 < len(args) else "")
        if name == "--config" and value and os.path.isfile(value):
            yield j, value, bool(eq)


def absolute_configs(args: Sequence[str]) -> list[str]:
    """``args`` with every ``--config`` file as an absolute path, so the study's record works from any folder."""
    out = list(args)
    for j, value, eq in _config_files(args):
        out[j] = f"--config={os.path.abspath(value)}" if eq else os.path.abspath(value)
    return out


def args_key(args: Sequence[str]) -> list[str]:
    """``args`` with every ``--config`` file replaced by a digest of its content: the same on every machine whose
    configs are the same, wherever its clone is (what a study is continued with is compared by it)."""
    out = list(args)
    for j, value, eq in _config_files(args):
        with open(value, "rb") as handle:
            digest = f"sha256:{hashlib.sha256(handle.read()).hexdigest()[:16]}"
        out[j] = f"--config={digest}" if eq else digest
    return out
