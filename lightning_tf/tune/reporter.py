"""The pruning callback a trial's ``fit`` runs with, named by its class path as any callback (docs/tune.md)."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import threading
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from optuna_integration import PyTorchLightningPruningCallback

from lightning_tf.training import run_dir

from .overrides import CHANNEL

__all__ = ["TrialReporter"]


class TrialReporter(PyTorchLightningPruningCallback):
    """optuna-integration's pruning callback whose trial is the ``lightning-tf tune`` command's, asked over a socket
    the run inherits (its descriptor in :data:`~.overrides.CHANNEL`; without it the callback does nothing): each
    ``report`` a JSON line, each ``should_prune`` its one-byte answer. It also sends the run folder and, under wandb,
    records the trial in the run's config (``tune``).

    Args:
        monitor: the validation metric the study optimises.
        study: the study's name.
        trial: the trial's number.
        params: the trial's parameters.
    """

    def __init__(self, monitor: str, study: str = "", trial: int = 0, params: dict | None = None) -> None:
        super().__init__(self, monitor)  # type: ignore[arg-type]
        self.tune = {"study": study, "trial": trial, "params": params or {}}
        self.metrics: dict[str, float] = {}
        self.answers: queue.SimpleQueue[bool] = queue.SimpleQueue()
        fd = os.environ.pop(CHANNEL, None)  # popped: a process the run starts is not the trial
        self.socket = socket.socket(fileno=int(fd)) if fd else None
        if self.socket is not None:
            # a forked data-loading worker keeps no copy: the command sees the socket end when the run ends
            os.register_at_fork(after_in_child=self.socket.close)
            threading.Thread(target=self._read, daemon=True, name="lightning-tf-tune").start()

    def _read(self) -> None:
        while answer := self.socket.recv(1):  # type: ignore[union-attr]  # b"p": prune, b"g": go on
            self.answers.put(answer == b"p")
        self.gone()

    def gone(self) -> None:
        """The socket closed: the command is gone (killed), and so is the trial; stop at once."""
        os.kill(os.getpid(), signal.SIGKILL)

    def send(self, record: dict[str, Any]) -> None:
        """``record`` to the command, as one JSON line."""
        self.socket.sendall((json.dumps(record) + "\n").encode())  # type: ignore[union-attr]

    def report(self, value: float, step: int) -> None:
        self.send({"step": step, "value": value, "metrics": self.metrics})

    def should_prune(self) -> bool:
        return self.answers.get()

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.socket is not None:
            self.send({"run_dir": str(run_dir(trainer).absolute())})
        for logger in trainer.loggers:
            if type(logger).__name__ == "WandbLogger":
                logger.log_hyperparams({"tune": self.tune})

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.socket is not None:
            super().on_fit_start(trainer, pl_module)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or self.socket is None:
            return
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            logged = ", ".join(sorted(k for k in metrics if k.startswith("val")))
            message = f"--metric {self.monitor} is not logged by this run; it logs {logged}"
            self.send({"missing": message})
            raise ValueError(message)
        self.metrics = {k: float(v) for k, v in metrics.items() if k.startswith("val") and v.numel() == 1}
        super().on_validation_end(trainer, pl_module)
