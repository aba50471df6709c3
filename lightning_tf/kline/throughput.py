"""How fast a K-line run reads its data: bars per second on the progress bar and in the logs.

A training step reads a batch of windows ``x`` (B, L, C): B windows of L bars each. :class:`BarsPerSecond` counts
them between log points, over the wall time of the steps (data loading included), and logs ``train/bars_per_s``
(and ``train/windows_per_s``) every ``every_n_steps`` steps, summed over the processes of a distributed run.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

__all__ = ["BarsPerSecond"]


class BarsPerSecond(Callback):
    """Log ``train/bars_per_s`` (windows x context bars read per second) and ``train/windows_per_s``.

    Args:
        every_n_steps: steps between two measurements.
    """

    def __init__(self, every_n_steps: int = 20) -> None:
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self._start: float | None = None
        self._windows = 0
        self._bars = 0

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start, self._windows, self._bars = time.perf_counter(), 0, 0

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        x = batch["x"] if isinstance(batch, dict) else batch[0]
        self._windows += int(x.shape[0])
        self._bars += int(x.shape[0]) * int(x.shape[1])
        if (batch_idx + 1) % self.every_n_steps or self._start is None:
            return
        seconds = max(time.perf_counter() - self._start, 1e-9)
        counts = torch.tensor([self._bars, self._windows], dtype=torch.float64, device=pl_module.device)
        counts = trainer.strategy.reduce(counts, reduce_op="sum")  # every process's, as one run's rate
        pl_module.log("train/bars_per_s", float(counts[0]) / seconds, prog_bar=True, rank_zero_only=True)
        pl_module.log("train/windows_per_s", float(counts[1]) / seconds, rank_zero_only=True)
        self._start, self._windows, self._bars = time.perf_counter(), 0, 0
