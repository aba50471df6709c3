"""The callback a trial's ``fit`` runs with (named by its class path on the command line, as any callback):
optuna-integration's ``PyTorchLightningPruningCallback`` whose trial is the worker's, reached through files
in the trial's folder.

After each validation epoch the callback reports the metric; :class:`WorkerTrial` appends it (with every
one-number validation metric) to ``reports.jsonl`` and waits for the worker's answer in ``answer-<epoch>``,
which the worker writes after Optuna's own ``trial.report`` and ``trial.should_prune``; on ``prune`` the
callback raises ``optuna.TrialPruned`` and the run stops at once. The run stops too when the worker is gone.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from optuna_integration import PyTorchLightningPruningCallback

from lightning_tf.training import run_dir

__all__ = ["TrialReporter", "WorkerTrial", "append_line"]


def append_line(path: Path, record: dict[str, Any]) -> None:
    """``record`` as one JSON line, appended whole."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _watch(parent: int) -> None:
    """Stop this run at once when the worker that started it is gone (killed)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)


class WorkerTrial:
    """What ``PyTorchLightningPruningCallback`` asks of its trial (``report``, ``should_prune``), answered by
    the worker that holds the Optuna trial.

    Args:
        channel: the trial's folder (``reports.jsonl``, ``answer-<epoch>``).
    """

    def __init__(self, channel: str) -> None:
        self.channel = Path(channel)
        self.metrics: dict[str, float] = {}
        self.step = -1

    def report(self, value: float, step: int) -> None:
        self.step = step
        append_line(self.channel / "reports.jsonl", {"step": step, "value": value, "metrics": self.metrics})

    def should_prune(self) -> bool:
        answer = self.channel / f"answer-{self.step}"
        while not answer.exists():
            time.sleep(0.05)
        return answer.read_text().strip() == "prune"


class TrialReporter(PyTorchLightningPruningCallback):
    """optuna-integration's pruning callback for a trial run by a ``lightning-tf tune`` worker; it also records
    the run folder and, under wandb, the trial in the run's config (``tune``).

    Args:
        channel: the trial's folder, shared with the worker.
        monitor: the validation metric the study optimises.
        study: the study's name.
        trial: the trial's number.
        params: the trial's parameters.
    """

    def __init__(self, channel: str, monitor: str, study: str = "", trial: int = 0, params: dict | None = None) -> None:
        self.worker_trial = WorkerTrial(channel)
        super().__init__(self.worker_trial, monitor)  # type: ignore[arg-type]
        self.channel, self.tune = Path(channel), {"study": study, "trial": trial, "params": params or {}}
        threading.Thread(target=_watch, args=(os.getppid(),), daemon=True).start()

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        append_line(self.channel / "reports.jsonl", {"run_dir": str(run_dir(trainer).absolute())})
        for logger in trainer.loggers:
            if type(logger).__name__ == "WandbLogger":
                logger.log_hyperparams({"tune": self.tune})

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            logged = ", ".join(sorted(k for k in metrics if k.startswith("val")))
            message = f"--metric {self.monitor} is not logged by this run; it logs {logged}"
            append_line(self.channel / "reports.jsonl", {"missing": message})
            raise ValueError(message)
        self.worker_trial.metrics = {k: float(v) for k, v in metrics.items() if k.startswith("val") and v.numel() == 1}
        super().on_validation_end(trainer, pl_module)
