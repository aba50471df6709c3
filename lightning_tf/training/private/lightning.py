"""Lightning's private names the package relies on, and why; ``tests/training/private/test_lightning.py`` fails
as soon as a Lightning release moves or changes one of them.

:class:`~lightning_tf.training.preemption.LastCheckpoint` stops a run on SIGTERM (or SLURM's requeue signal) at a
point from which the resumed run goes on exactly, and :class:`~lightning_tf.training.rank_watch.RankWatch` names a
rank that died. Lightning's public API cannot express six things they need:

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

The rest of the package:

* :func:`attached_trainer`: a module's trainer, or None before one is attached (the public ``trainer``
  raises then); a module that adds its own callbacks or reads its data asks it;
* :func:`skip_hyperparameter_logging`: Lightning logs a module's and a datamodule's hyperparameters to every
  logger after setup; under wandb the run config (uploaded whole) already holds them;
* :func:`summary_depth`: the ``max_depth`` a ``ModelSummary`` was built with (no public getter), kept when
  the compact summary takes its place;
* :func:`wandb_init_args`, :func:`wandb_started`, :func:`wandb_offline`: what a ``WandbLogger`` will hand
  ``wandb.init``, whether its run exists yet and whether it is offline, read before the run starts (the public
  ``experiment`` would start it);
* :data:`OVERRIDES`: ``LightningCLI``'s steps the commands override, each where no public hook runs at that
  point: the checkpoint checked before LightningCLI reads it, the summary of a stopped or failed run, the
  quiet default of ``validate`` and ``test``, a parse-only CLI that seeds nothing.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, ModelSummary
from lightning.pytorch.core.mixins import HyperparametersMixin
from lightning.pytorch.loggers import WandbLogger

__all__ = [
    "OVERRIDES",
    "attached_trainer",
    "cluster_environment",
    "hpc_save_path",
    "last_saved_step",
    "launched_processes",
    "note_sigterm",
    "save_now",
    "set_triggers",
    "skip_hyperparameter_logging",
    "stop_child_observer",
    "summary_depth",
    "triggers",
    "validation_follows",
    "wandb_init_args",
    "wandb_offline",
    "wandb_started",
]

#: Lightning's private methods that classes of the package override -> those classes
OVERRIDES = {
    "lightning.pytorch.cli.LightningCLI._parse_ckpt_path": ("lightning_tf.cli.lightning_cli.LightningTFCLI",),
    "lightning.pytorch.cli.LightningCLI._prepare_subcommand_parser": ("lightning_tf.cli.lightning_cli.LightningTFCLI",),
    "lightning.pytorch.cli.LightningCLI._run_subcommand": ("lightning_tf.cli.lightning_cli.LightningTFCLI",),
    "lightning.pytorch.cli.LightningCLI._set_seed": ("lightning_tf.cli.walkforward._ParseOnly",),
}


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


def attached_trainer(module: LightningModule) -> Trainer | None:
    """The trainer ``module`` is attached to, or None (where the public ``module.trainer`` raises)."""
    return module._trainer


def skip_hyperparameter_logging(obj: HyperparametersMixin) -> None:
    """Keep Lightning from logging the hyperparameters of ``obj`` (a LightningModule or LightningDataModule) to the
    loggers after setup (what ``save_hyperparameters(logger=False)`` decides when the hyperparameters are saved)."""
    obj._log_hyperparams = False


def summary_depth(callback: ModelSummary) -> int:
    """The ``max_depth`` ``callback`` was built with."""
    return int(callback._max_depth)


def wandb_init_args(logger: WandbLogger) -> dict[str, Any]:
    """The keyword arguments ``logger`` will give ``wandb.init`` when its run starts (the dict itself: a change
    to it changes the run)."""
    return logger._wandb_init


def wandb_started(logger: WandbLogger) -> bool:
    """Whether ``logger``'s wandb run exists (its public ``experiment`` would start it)."""
    return logger._experiment is not None


def wandb_offline(logger: WandbLogger) -> bool:
    """Whether ``logger`` was built with ``offline=True``."""
    return bool(logger._offline)
