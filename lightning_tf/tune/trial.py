"""One trial: an ordinary ``lightning-tf fit`` run (:func:`lightning_tf.cli.make_cli`) of the study's configs
with the trial's parameters as overrides, in a folder and a wandb run of its own, and one more callback,
:class:`TrialReporter` (optuna-integration's ``PyTorchLightningPruningCallback``), that reports the
validation metric after every epoch and stops the run at once when the pruner says so.

What can end a trial, and how the study records it (:class:`Outcome`): complete (its value: the best
validation metric of its epochs), pruned, refused before it starts (a constraint, or the model or data
rejecting the combination), failed (a non-finite loss stopped by NaNGuard, out of memory, any other
error: one line), or interrupted (Ctrl-C: its parameters run again when the study continues).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException
from optuna.trial import TrialState
from optuna_integration import PyTorchLightningPruningCallback

from lightning_tf.cli.argument_errors import one_line_error
from lightning_tf.cli.lightning_cli import make_cli
from lightning_tf.training import run_dir

from .overrides import to_overrides, trial_overrides
from .space import SearchSpace
from .study import StudySpec

__all__ = ["Interrupts", "MetricMissing", "Outcome", "TrialReporter", "run_trial"]

log = logging.getLogger(__name__)


class MetricMissing(RuntimeError):
    """The study's metric is not among what the run logs: every trial would fail the same way."""


class Interrupts:
    """SIGINT / SIGTERM while a worker runs: a request to stop that raises KeyboardInterrupt inside a trial's
    own work (so Lightning shuts the run down), and waits while the storage is being written."""

    def __init__(self) -> None:
        self.requested = False
        self._raise = False

    def handler(self, signum: int, frame: Any) -> None:
        self.requested = True
        if self._raise:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def raising(self) -> Iterator[None]:
        """A trial's run: a stop request raises KeyboardInterrupt at once."""
        self._raise = True
        try:
            if self.requested:
                raise KeyboardInterrupt
            yield
        finally:
            self._raise = False

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Storage calls: a stop request waits until they are done."""
        before, self._raise = self._raise, False
        try:
            yield
        finally:
            self._raise = before
        if before and self.requested:
            raise KeyboardInterrupt


class TrialReporter(PyTorchLightningPruningCallback):
    """Reports ``monitor`` to the trial after each validation epoch (optuna-integration's callback, which also
    raises ``optuna.TrialPruned`` when the pruner says so) and records what the study keeps of the run: each
    epoch's value, the run folder, whether training started; under wandb it adds the trial's number, the study
    and the parameters to the run's config (``tune``).

    Args:
        trial: the Optuna trial.
        monitor: the validation metric (``val/loss``).
        params: the trial's parameters (for the wandb config).
        study_name: the study (for the wandb config).
        interrupts: where a stop request waits while the storage is written.
    """

    def __init__(
        self, trial: optuna.Trial, monitor: str, params: Mapping[str, Any], study_name: str, interrupts: Interrupts
    ) -> None:
        super().__init__(trial, monitor)
        self.params = dict(params)
        self.study_name = study_name
        self.interrupts = interrupts
        self.values: list[float] = []
        self.epoch_metrics: list[dict[str, float]] = []  # every one-number validation metric, per epoch
        self.run_dir: str = ""
        self.started = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.run_dir = str(run_dir(trainer))
        for logger in trainer.loggers:
            if type(logger).__name__ == "WandbLogger":
                logger.log_hyperparams(
                    {"tune": {"study": self.study_name, "trial": self._trial.number, "params": self.params}}
                )

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        self.started = True

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            logged = sorted(k for k in trainer.callback_metrics if k.startswith("val"))
            raise MetricMissing(f"--metric {self.monitor} is not logged by this run; it logs {', '.join(logged)}")
        value = float(value)
        if not math.isfinite(value):
            raise FloatingPointError(f"{self.monitor} is {value} after epoch {trainer.current_epoch}")
        self.values.append(value)
        self.epoch_metrics.append(
            {
                k: float(v)
                for k, v in trainer.callback_metrics.items()
                if k.startswith("val") and getattr(v, "numel", lambda: 1)() == 1
            }
        )
        with self.interrupts.deferred():
            super().on_validation_end(trainer, pl_module)


@dataclass
class Outcome:
    """How a trial ended: its state for the study, its value (complete), one line saying why otherwise, the
    epochs it ran, its folder, the validation metrics of its best epoch; ``stop_study``: the error would end
    every trial (a wrong metric)."""

    state: TrialState
    value: float | None = None
    reason: str = ""
    epochs: int = 0
    run_dir: str = ""
    seconds: float = 0.0
    refused: bool = False
    interrupted: bool = False
    stop_study: bool = False
    values: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # the validation metrics of its best epoch


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _is_oom(err: BaseException) -> bool:
    import torch

    return isinstance(err, torch.OutOfMemoryError) or (isinstance(err, RuntimeError) and "out of memory" in str(err))


def _free_memory() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _finish_wandb(exit_code: int) -> None:
    """Close the trial's wandb run, so that the next trial's WandbLogger starts its own."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=exit_code)


def run_trial(
    trial: optuna.Trial, spec: StudySpec, space: SearchSpace, interrupts: Interrupts
) -> tuple[dict[str, Any], Outcome]:
    """Run ``trial``: its parameters, then ``fit`` through the CLI. Returns the parameters and the outcome;
    never raises for what a trial can do wrong (the study goes on)."""
    params = space.suggest(trial)
    t0 = time.perf_counter()
    refusal = space.refusal({**spec.fixed, **params})
    if refusal is not None:
        return params, Outcome(TrialState.FAIL, reason=refusal, refused=True)
    reporter = TrialReporter(trial, spec.metric, params, spec.study_name, interrupts)
    args = [
        "fit",
        *spec.args,
        *to_overrides(params),
        *trial_overrides(spec.study_name, trial.number, spec.study_dir, spec.wandb, spec.args),
    ]
    outcome = Outcome(TrialState.COMPLETE)
    exit_code = 0
    try:
        with interrupts.raising():
            make_cli(
                args,
                trainer_defaults={"callbacks": [reporter]},
                parser_kwargs={"exit_on_error": False, "fit": {"exit_on_error": False}},
            )
    except optuna.TrialPruned:
        outcome = Outcome(TrialState.PRUNED, reason=f"pruned after epoch {len(reporter.values)}")
    except BaseException as err:  # noqa: BLE001 - whatever a trial does, the study goes on
        exit_code = 1
        if isinstance(err, SIGTERMException):
            # the run's LastCheckpoint took SIGTERM (or SLURM's signal) in place of the worker's handler, saved
            # the trial's step and stopped it: a stop request all the same
            interrupts.requested = True
        if isinstance(err, (KeyboardInterrupt, SystemExit)) and interrupts.requested:
            outcome = Outcome(TrialState.FAIL, reason="interrupted", interrupted=True)
        elif isinstance(err, MetricMissing):
            outcome = Outcome(TrialState.FAIL, reason=str(err), stop_study=True)
        elif isinstance(err, FloatingPointError):  # NaNGuard's NonFiniteError, or a non-finite metric
            outcome = Outcome(TrialState.FAIL, reason=f"non-finite: {_first_line(err)}")
        elif _is_oom(err):
            outcome = Outcome(TrialState.FAIL, reason=f"out of memory: {_first_line(err)}")
        elif isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        elif not reporter.started and isinstance(err, (ValueError, TypeError)):
            outcome = Outcome(TrialState.FAIL, reason=f"refused: {one_line_error(str(err))}", refused=True)
        else:
            log.error("trial %d failed:\n%s", trial.number, traceback.format_exc())
            outcome = Outcome(TrialState.FAIL, reason=f"failed: {type(err).__name__}: {_first_line(err)}")
    finally:
        _finish_wandb(exit_code)
        _free_memory()
    outcome.values = list(reporter.values)
    outcome.epochs = len(reporter.values)
    outcome.run_dir = reporter.run_dir
    outcome.seconds = time.perf_counter() - t0
    if outcome.state == TrialState.COMPLETE:
        if not reporter.values:
            outcome.state, outcome.reason = TrialState.FAIL, f"failed: no validation epoch logged {spec.metric}"
        else:
            pick = max if spec.direction == "maximize" else min
            outcome.value = pick(reporter.values)
    if reporter.values:
        pick = max if spec.direction == "maximize" else min
        best = reporter.values.index(pick(reporter.values))
        outcome.metrics = reporter.epoch_metrics[best]
    return params, outcome
