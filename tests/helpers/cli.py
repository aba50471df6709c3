"""Run the real ``lightning-tf`` command in a subprocess, as a user would."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["ROOT", "LogCollector", "cli", "run_dir_args"]

ROOT = Path(__file__).resolve().parents[2]


def cli(
    *args: str, cwd: Path = ROOT, check: bool = True, timeout: int = 300, wandb_silent: bool = True
) -> subprocess.CompletedProcess:
    """``python -m lightning_tf <args>`` with the repository importable and wandb offline (and silent,
    unless ``wandb_silent`` is false: then the command decides what wandb prints), both streams piped;
    with ``check``, a non-zero exit fails the test with the end of both streams."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    if not wandb_silent:
        del env["WANDB_SILENT"]
    env.pop("LIGHTNING_TF_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_tf", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, (
            f"lightning-tf {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def run_dir_args(tmp: Path) -> list[str]:
    """Arguments that keep a run's outputs (checkpoints, wandb, config) under ``tmp``."""
    return ["--trainer.default_root_dir", str(tmp), "--trainer.logger.init_args.save_dir", str(tmp)]


class LogCollector(logging.Handler):
    """A logging handler that keeps the messages it is given (``messages``), for asserting on log lines."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
