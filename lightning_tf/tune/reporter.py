"""The pruning callback a trial's ``fit`` runs with, named by its class path as any callback (docs/tune.md)."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from typing import Any

import optuna
from lightning.pytorch import LightningModule, Trainer
from optuna_integration import PyTorchLightningPruningCallback

from lightning_tf.training import run_dir

from .study import STORAGE, open_trial

__all__ = ["TrialReporter"]


class TrialReporter(PyTorchLightningPruningCallback):
    """optuna-integration's pruning callback on the ``lightning-tf tune`` command's trial, which the run opens from
    the study's storage (named in :data:`~.study.STORAGE`; without it the callback does nothing). On the trial it
    records the run folder, the validation metrics of the best epoch and why the run ends early (``reason``); it
    stops the run at once when the command is gone and, under wandb, records the trial in the run's config (``tune``).

    Args:
        monitor: the validation metric the study optimises.
        study: the study's name.
        trial: the trial's number.
        params: the trial's parameters.
        pruner: the command's pruner, as :func:`~.study.make_pruner` takes it.
    """

    def __init__(
        self, monitor: str, study: str = "", trial: int = 0, params: dict | None = None, pruner: list | None = None
    ) -> None:
        storage = os.environ.pop(STORAGE, None)  # popped: a process the run starts is not the trial
        self.trial = open_trial(storage, study, trial, pruner or ["none", 0, 0, None]) if storage else None
        super().__init__(self.trial, monitor)  # type: ignore[arg-type]
        self.tune = {"study": study, "trial": trial, "params": params or {}}
        self.best = -math.inf  # the best epoch's value so far, signed so that higher is better
        if self.trial is not None:
            threading.Thread(target=self.watch, args=(self.trial.user_attrs["pid"],), daemon=True).start()

    def watch(self, command: int) -> None:
        """Once the command (``command``, its pid) is gone, this run is no longer its child: stop at once, as the
        trial is over (the next command fails it and queues it again)."""
        while os.getppid() == command:
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGKILL)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.trial is not None:
            self.trial.set_user_attr("run_dir", str(run_dir(trainer).absolute()))
        for logger in trainer.loggers:
            if type(logger).__name__ == "WandbLogger":
                logger.log_hyperparams({"tune": self.tune})

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.trial is not None:
            super().on_fit_start(trainer, pl_module)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or self.trial is None:
            return
        metrics: dict[str, Any] = trainer.callback_metrics
        if self.monitor not in metrics:
            logged = ", ".join(sorted(k for k in metrics if k.startswith("val")))
            message = f"--metric {self.monitor} is not logged by this run; it logs {logged}"
            self.trial.set_user_attr("reason", message)
            raise ValueError(message)
        value = float(metrics[self.monitor]) * (1 if self.trial.study.direction.name == "MAXIMIZE" else -1)
        if math.isfinite(value) and value > self.best:
            self.best = value
            val = {k: float(v) for k, v in metrics.items() if k.startswith("val") and v.numel() == 1}
            self.trial.set_user_attr("val_metrics", val)
        try:
            super().on_validation_end(trainer, pl_module)
        except optuna.TrialPruned:
            self.trial.set_user_attr("reason", "pruned")
            raise
