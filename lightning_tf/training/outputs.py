"""Where a run writes: its folder (checkpoints, ``config.yaml``, outputs) and the prediction files in it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["prediction_path", "run_dir"]


def run_dir(trainer: Any) -> Path:
    """The folder of the trainer's run, where ``ModelCheckpoint`` puts ``checkpoints/`` and the CLI
    puts ``config.yaml``: ``<save_dir>/<name>/<version>`` of the first logger (for wandb:
    ``<save_dir>/<project>/<run id>``), else ``trainer.default_root_dir``."""
    loggers = getattr(trainer, "loggers", None) or []
    if not loggers:
        return Path(trainer.default_root_dir)
    logger = loggers[0]
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return Path(os.path.join(logger.save_dir or trainer.default_root_dir, str(logger.name), version))


def prediction_path(trainer: Any, output: str | os.PathLike[str] | None, name: str) -> Path:
    """Where a prediction writer writes: ``output`` as given (relative to the working directory);
    by default ``name`` (e.g. ``predictions.csv``) in :func:`run_dir`, numbered ``predictions-1.csv``,
    ``predictions-2.csv``, ... when an earlier predict of the same run folder left that name."""
    if output:
        return Path(output)
    folder = run_dir(trainer)
    path = folder / name
    stem, dot, suffix = name.partition(".")
    n = 1
    while path.exists():
        path = folder / f"{stem}-{n}{dot}{suffix}"
        n += 1
    return path
