"""A run stopped from outside continues as if it never stopped: :class:`LastCheckpoint`.

Long runs on shared or rented machines are stopped all the time: a spot instance is reclaimed, a job
is cancelled or reaches its time limit (SIGTERM, then SIGKILL after a grace period: 30 s by default for
SLURM and Kubernetes, 2 minutes for a spot instance), or SLURM asks the job to requeue (SIGUSR1 with
``#SBATCH --signal=SIGUSR1@90``). :class:`LastCheckpoint` keeps ``last.ckpt`` close to the run and
turns such a signal into a clean stop:

* ``last.ckpt`` is written after every epoch, every ``train_time_interval`` of training (default
  config: 30 minutes) and, if asked, every ``every_n_train_steps`` steps, so a kill without warning
  (SIGKILL, a node lost) costs at most that much;
* on SIGTERM (or SLURM's requeue signal under ``SLURMEnvironment(auto_requeue=True)``, Lightning's
  default on SLURM) the run finishes the training step it is in, writes ``last.ckpt`` at that step (a
  checkpoint like any step checkpoint: resuming from it is exact), and stops with Lightning's
  ``SIGTERMException``, exit status :data:`EXIT_STATUS` (143, 128 + SIGTERM: stopped, not finished);
  the ``lightning-tf`` command then prints the command that resumes the run. Under SLURM's requeue the
  checkpoint is also linked as Lightning's ``hpc_ckpt_<n>.ckpt`` in ``default_root_dir`` and the job is
  requeued with ``scontrol requeue``: the requeued job resumes from it with the same command.

Lightning's own handlers are replaced while training runs (and put back by Lightning when it ends):
they save SLURM's checkpoint inside the signal handler, wherever the step is (not at a step's end, so
not exactly resumable), and under DDP broadcast from inside the handler, which can meet another rank
in a different collective. Here the handler only notes the signal; the ranks agree at the next step's
end (one all-reduce of one flag per step, only under DDP), so every rank stops after the same step.

The stop is always at a point a resumed run goes on from exactly: the end of a training step that no
validation follows and that does not end the epoch, or the end of an epoch. A signal during the
epoch's last step or a step a validation follows, or during a validation, stops the run after that
validation (Lightning resumes a checkpoint taken there without the validation, and one taken at an
epoch's last step also without the epoch's end). The few Lightning internals this needs are in
:mod:`.private.lightning`.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .private import lightning as private

__all__ = ["EXIT_STATUS", "LastCheckpoint", "Stop"]

log = logging.getLogger(__name__)

#: exit status of a run stopped by SIGTERM or a requeue signal (128 + SIGTERM, as a shell reports it)
EXIT_STATUS = 128 + signal.SIGTERM


class Stop(dict):
    """Where a signal stopped the run: ``signal`` (its name), ``path`` (the checkpoint written),
    ``global_step``, ``epoch``, ``batch`` (in the epoch), ``hpc`` (after SLURM's requeue signal: whether
    the job was requeued, and the checkpoint it resumes from)."""


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt`` after every epoch, every ``train_time_interval`` of training, every
    ``every_n_train_steps`` steps, and at the step where SIGTERM or SLURM's requeue signal stopped the
    run (see the module docstring). Lightning's ``ModelCheckpoint`` with one file that it overwrites
    (``save_top_k=1``, no version counter) and several triggers at once.

    Args:
        dirpath: the checkpoint folder (None: Lightning's, ``<run folder>/checkpoints``).
        filename: the file's name without ``.ckpt``.
        train_time_interval: also write it when this much training time has passed since the last
            write (``"0:30:00"``; None: no timed writes). Checked after every training step.
        every_n_train_steps: also write it every this many optimizer steps (None or 0: no).
        every_n_epochs: write it after every this many epochs (0: no).
        handle_signals: on SIGTERM (and SLURM's requeue signal), write it after the current step and stop.
    """

    def __init__(
        self,
        dirpath: str | None = None,
        filename: str = "last",
        train_time_interval: timedelta | None = None,
        every_n_train_steps: int | None = None,
        every_n_epochs: int = 1,
        handle_signals: bool = True,
    ) -> None:
        if every_n_epochs < 0 or (every_n_train_steps or 0) < 0:
            raise ValueError(
                f"every_n_epochs ({every_n_epochs}) and every_n_train_steps ({every_n_train_steps}) must be >= 0"
            )
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            save_top_k=1,
            enable_version_counter=False,
            train_time_interval=train_time_interval,
        )
        # ModelCheckpoint accepts one trigger at a time; its saving code serves them all
        private.set_triggers(self, every_n_epochs, every_n_train_steps or 0)
        self.handle_signals = handle_signals
        self._received: set[int] = set()
        self.stopped: Stop | None = None

    @property
    def state_key(self) -> str:
        # as Callback's own key: the class and the arguments that tell two instances apart
        return f"{type(self).__qualname__}{ {'filename': self.filename, **private.triggers(self)}!r}"

    # ------------------------------------------------------------------------------------ signals
    def _requeue_signal(self, trainer: Trainer) -> int | None:
        environment = private.cluster_environment(trainer)
        if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
            return int(environment.requeue_signal)
        return None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if not self._received:
            name = signal.Signals(signum).name
            log.warning("received %s: finishing this training step, then saving and stopping", name)
        self._received.add(signum)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._received, self.stopped = set(), None
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return
        # Lightning registered its handlers before training started and restores what was there before
        # them when the run ends (teardown), which removes these too
        signal.signal(signal.SIGTERM, self._note)
        requeue = self._requeue_signal(trainer)
        if requeue is not None:
            signal.signal(requeue, self._note)

    def _agreed(self, trainer: Trainer, flag: bool) -> bool:
        """``flag`` on any rank (a collective under DDP: every rank calls this at the same point)."""
        if trainer.world_size > 1:
            return bool(trainer.strategy.reduce_boolean_decision(flag, all=False))
        return flag

    def _stop_if_signalled(self, trainer: Trainer, epoch_end: bool = False) -> None:
        if not self.handle_signals or not self._agreed(trainer, bool(self._received)):
            return
        requeue_signal = self._requeue_signal(trainer)
        requeue = requeue_signal is not None and self._agreed(trainer, requeue_signal in self._received)
        # at an epoch's end, always a checkpoint of the epoch's end (one saved at its last batch's end, by the
        # step trigger, would resume without the epoch's validation and end-of-epoch hooks)
        if epoch_end or private.last_saved_step(self) != trainer.global_step or not self.best_model_path:
            private.save_now(self, trainer)
        path = self.best_model_path
        hpc = _requeue(trainer, path) if requeue else None
        name = "the SLURM requeue signal" if requeue else "SIGTERM"
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        self.stopped = Stop(
            signal=name,
            path=path,
            global_step=trainer.global_step,
            epoch=trainer.current_epoch,
            batch=progress.processed,
            hpc=hpc,
        )
        private.note_sigterm(trainer)  # what Lightning's own handler would have set
        raise SIGTERMException(EXIT_STATUS)

    # The run stops at one of two kinds of checkpoint, both resumed exactly: the end of a training step
    # that no validation follows and that does not end the epoch, or the end of an epoch. A checkpoint
    # taken at the end of a step that a validation follows (the epoch's last, or every
    # ``val_check_interval``) resumes without that validation, and one taken at the epoch's last step
    # also without its end-of-epoch hooks (EarlyStopping, epoch-interval schedulers): Lightning counts them
    # as done. A signal there or during a validation therefore stops the run after the validation, at the
    # next step's end or at the epoch's end.

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        loop = trainer.fit_loop.epoch_loop
        if loop.batch_progress.is_last_batch or loop.done or private.validation_follows(trainer):
            return  # the same decision on every rank: the stop waits for the validation or the epoch's end
        self._stop_if_signalled(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        self._stop_if_signalled(trainer, epoch_end=True)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning's own SIGTERM stop (a signal before training started): the same exit status
        if isinstance(exception, SIGTERMException) and exception.code is None:
            exception.code = EXIT_STATUS
        super().on_exception(trainer, pl_module, exception)


def _requeue(trainer: Trainer, path: str) -> str | None:
    """Make ``path`` Lightning's SLURM checkpoint (``hpc_ckpt_<n>.ckpt`` in ``default_root_dir``, which a
    requeued job resumes from) and requeue the job, on global rank zero. Returns what happened, in words
    (None on the other ranks)."""
    said = None
    if trainer.is_global_zero:
        hpc = Path(private.hpc_save_path(trainer.default_root_dir))
        hpc.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, hpc)
        except OSError:  # another file system, or no hard links: a copy
            shutil.copyfile(path, hpc)
        job = os.environ.get("SLURM_JOB_ID", "")
        if os.environ.get("SLURM_ARRAY_JOB_ID"):
            job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
        try:
            done = subprocess.run(["scontrol", "requeue", job], check=False, capture_output=True, text=True)
            ok, why = done.returncode == 0, done.stderr.strip()
        except FileNotFoundError:
            ok, why = False, "scontrol not found"
        if ok:
            said = f"job {job} requeued; it resumes from {hpc} with the same command"
        else:
            said = f"job {job} not requeued ({why}); the same command resumes from {hpc}"
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        trainer.strategy.barrier("requeue")
    return said
