"""The only place where lightning-tf reaches into Lightning's private names, and why.

:class:`~lightning_tf.training.preemption.LastCheckpoint` stops a run on SIGTERM (or SLURM's requeue
signal) at a point from which the resumed run goes on exactly, and
:class:`~lightning_tf.training.rank_watch.RankWatch` names a rank that died. Lightning's public API cannot
express six things they need, so they are here, each in one small function, and
``tests/test_lightning_private.py`` fails as soon as a Lightning release moves or changes one of them:

* :func:`validation_follows`: whether the trainer runs a validation right after the training batch
  that just ended. Lightning decides it in ``_TrainingEpochLoop._should_check_val_fx`` (``val_check_interval``
  as a fraction, a number of batches or a time, ``check_val_every_n_epoch``, the epoch's last batch);
  a checkpoint taken at such a batch's end resumes *without* that validation (Lightning counts it as
  done), so the stop waits for it;
* :func:`cluster_environment`: the cluster environment the trainer chose (``SLURMEnvironment`` inside a
  SLURM job, with its requeue signal); a single-device strategy does not expose it;
* :func:`hpc_save_path`: the name of Lightning's SLURM checkpoint (``hpc_ckpt_<n>.ckpt``), which a
  requeued job resumes from on its own;
* :func:`note_sigterm`: ``trainer.received_sigterm`` (read-only in public), which Lightning's loops and
  loggers read to finish as stopped, as Lightning's own handler sets it;
* :func:`launched_processes` and :func:`stop_child_observer`: :class:`~lightning_tf.training.rank_watch.RankWatch`
  watches the ranks that Lightning's launcher started as child processes of a node's first rank (the
  launcher's list of them), and stops Lightning's own watcher of them, a thread that kills every process
  of the node without a word 0 to 5 s after one of them ended (and so may kill the rank that would have
  said which);
* :class:`ModelCheckpoint`'s triggers (:func:`set_triggers`, :func:`triggers`) and its save without a
  monitor (:func:`save_now`, :func:`last_saved_step`): ``LastCheckpoint`` is one ``ModelCheckpoint`` with
  several triggers at once (the public constructor accepts one), and saves on a signal at any step.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

__all__ = [
    "cluster_environment",
    "hpc_save_path",
    "last_saved_step",
    "launched_processes",
    "note_sigterm",
    "save_now",
    "set_triggers",
    "stop_child_observer",
    "triggers",
    "validation_follows",
]


def validation_follows(trainer: Trainer) -> bool:
    """Whether the trainer validates right after the training batch that just ended (call it from
    ``on_train_batch_end``: the same decision the training loop takes next)."""
    loop = trainer.fit_loop
    if loop._data_fetcher is None:
        return False
    return bool(loop.epoch_loop._should_check_val_fx(loop._data_fetcher))


def cluster_environment(trainer: Trainer) -> ClusterEnvironment:
    """The cluster environment of the trainer (also under a single-device strategy)."""
    return trainer._accelerator_connector.cluster_environment


def hpc_save_path(folder: str | os.PathLike) -> str:
    """Lightning's next SLURM checkpoint in ``folder``: ``hpc_ckpt_<n>.ckpt``, one above the highest there."""
    from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector

    return str(Path(_CheckpointConnector.hpc_save_path(folder)))


def note_sigterm(trainer: Trainer) -> None:
    """Mark the trainer as stopped by a signal (``trainer.received_sigterm``), as Lightning's handler does."""
    trainer._signal_connector.received_sigterm = True


def set_triggers(cb: ModelCheckpoint, every_n_epochs: int, every_n_train_steps: int) -> None:
    """Give ``cb`` an epoch trigger and a step trigger besides the time trigger it was built with."""
    cb._every_n_epochs, cb._every_n_train_steps = every_n_epochs, every_n_train_steps


def triggers(cb: ModelCheckpoint) -> dict[str, Any]:
    """``cb``'s triggers: ``every_n_train_steps``, ``every_n_epochs``, ``train_time_interval``."""
    return {
        "every_n_train_steps": cb._every_n_train_steps,
        "every_n_epochs": cb._every_n_epochs,
        "train_time_interval": cb._train_time_interval,
    }


def last_saved_step(cb: ModelCheckpoint) -> int:
    """The global step ``cb`` last saved at."""
    return int(cb._last_global_step_saved)


def save_now(cb: ModelCheckpoint, trainer: Trainer) -> None:
    """Save ``cb``'s checkpoint now (a callback without a monitor: its one file, replaced)."""
    cb._save_none_monitor_checkpoint(trainer, cb._monitor_candidates(trainer))


#: the name of the thread with which Lightning's subprocess launcher watches the ranks it started
CHILD_OBSERVER = "child-process-observer"


def launched_processes(trainer: Trainer) -> list[subprocess.Popen] | None:
    """The ranks that Lightning's subprocess launcher started from this process (in local rank order, from
    local rank 1; [] in a rank it started, or when it started none); None under another launcher."""
    from lightning.pytorch.strategies.launchers.subprocess_script import _SubprocessScriptLauncher

    launcher = getattr(trainer.strategy, "launcher", None)
    if not isinstance(launcher, _SubprocessScriptLauncher):
        return None
    return list(launcher.procs)


def stop_child_observer() -> bool:
    """Stop Lightning's watcher of the launched ranks (it ends at its next look, having nothing left to
    watch); the launcher's own list, which a Ctrl-C uses to end them, is left alone. Whether there was one."""
    found = False
    for thread in threading.enumerate():
        if thread.name == CHILD_OBSERVER and hasattr(thread, "_child_processes"):
            thread._child_processes = []
            found = True
    return found
