"""The Lightning private names that ``lightning_tf/training/private/lightning.py`` relies on still exist and
still mean what it assumes: this fails as soon as a Lightning release moves or changes one of them.

In process, a tiny model on a few batches: which training batches a validation follows, with the
epoch's end, ``val_check_interval`` as a number of batches and ``check_val_every_n_epoch``; the cluster
environment; Lightning's SLURM checkpoint name; the signal flag; ModelCheckpoint's triggers and its save; the
ranks the subprocess launcher started, and stopping its watcher of them; a module's trainer; the hyperparameters
Lightning logs; a summary's depth; a WandbLogger's arguments, run and mode; and LightningCLI's steps that the
commands override, each still called where the override expects it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.fabric.plugins.environments import LightningEnvironment, SLURMEnvironment
from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, ModelSummary, RichModelSummary
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector
from torch.utils.data import DataLoader, TensorDataset

from lightning_tf.training.preemption import LastCheckpoint
from lightning_tf.training.private import lightning as private


class Tiny(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(12, 2)), batch_size=2)  # 6 batches

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(2, 2)), batch_size=2)


class Record(Callback):
    """(epoch, batch) of every training batch that ``validation_follows`` says a validation follows, and of
    every batch that one did follow."""

    def __init__(self) -> None:
        self.predicted: list[tuple[int, int]] = []
        self.validated: list[tuple[int, int]] = []
        self._last: tuple[int, int] | None = None

    def on_train_batch_end(self, trainer: Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._last = (trainer.current_epoch, batch_idx)
        if private.validation_follows(trainer):
            self.predicted.append(self._last)

    def on_validation_start(self, trainer: Trainer, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            assert self._last is not None
            self.validated.append(self._last)


def fit(tmp_path: Path, **kwargs: Any) -> tuple[Trainer, Record]:
    record = Record()
    trainer = Trainer(
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
        default_root_dir=tmp_path,
        callbacks=[record],
        **kwargs,
    )
    trainer.fit(Tiny())
    return trainer, record


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, [(0, 5), (1, 5)]),  # the epoch's last batch
        ({"val_check_interval": 2}, [(0, 1), (0, 3), (0, 5), (1, 1), (1, 3), (1, 5)]),
        ({"check_val_every_n_epoch": 2}, [(1, 5)]),
        ({"val_check_interval": 4, "check_val_every_n_epoch": None}, [(0, 3), (1, 1), (1, 5)]),  # every 4 batches
    ],
)
def test_validation_follows_names_exactly_the_batches_a_validation_follows(
    tmp_path: Path, kwargs: dict[str, Any], expected: list[tuple[int, int]]
) -> None:
    _, record = fit(tmp_path, **kwargs)
    assert record.validated == expected
    assert record.predicted == expected


def test_cluster_environment_of_a_single_process_and_of_a_slurm_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SLURM_NTASKS", "SLURM_JOB_NAME", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, default_root_dir=tmp_path)
    assert isinstance(private.cluster_environment(trainer), LightningEnvironment)
    slurm = {"SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "7"}
    slurm |= {"SLURM_NODELIST": "localhost", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, default_root_dir=tmp_path)
    environment = private.cluster_environment(trainer)
    assert isinstance(environment, SLURMEnvironment) and environment.auto_requeue


def test_hpc_save_path_is_the_file_a_requeued_job_resumes_from(tmp_path: Path) -> None:
    assert private.hpc_save_path(tmp_path) == str(tmp_path / "hpc_ckpt_1.ckpt")
    (tmp_path / "hpc_ckpt_1.ckpt").touch()
    (tmp_path / "hpc_ckpt_3.ckpt").touch()
    assert private.hpc_save_path(tmp_path) == str(tmp_path / "hpc_ckpt_4.ckpt")
    # what Lightning's "hpc" checkpoint path (and a requeued SLURM job) picks: the highest number
    assert _CheckpointConnector.__dict__["_CheckpointConnector__max_ckpt_version_in_folder"].__func__(tmp_path) == 3


def test_note_sigterm_sets_the_trainers_public_flag(tmp_path: Path) -> None:
    trainer = Trainer(accelerator="cpu", logger=False, default_root_dir=tmp_path)
    assert trainer.received_sigterm is False
    private.note_sigterm(trainer)
    assert trainer.received_sigterm is True


def test_model_checkpoint_triggers_and_save_now(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, filename="x", train_time_interval=timedelta(minutes=5))
    private.set_triggers(cb, every_n_epochs=2, every_n_train_steps=3)
    assert private.triggers(cb) == {
        "every_n_train_steps": 3,
        "every_n_epochs": 2,
        "train_time_interval": timedelta(minutes=5),
    }
    assert cb.every_n_epochs == 2  # Lightning's public view of the same field
    # LastCheckpoint's state key is what Lightning's own key would be for those arguments
    last = LastCheckpoint(dirpath=str(tmp_path), every_n_train_steps=3, train_time_interval=timedelta(minutes=5))
    assert last.state_key == last._generate_state_key(
        filename="last", every_n_train_steps=3, every_n_epochs=1, train_time_interval=timedelta(minutes=5)
    )

    class SaveAtStep(Callback):
        def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
            if trainer.global_step == 2:
                private.save_now(last, trainer)
                assert private.last_saved_step(last) == 2

    trainer = Trainer(
        max_steps=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=tmp_path,
        callbacks=[SaveAtStep(), last],
        limit_val_batches=0,
    )
    trainer.fit(Tiny())
    assert (tmp_path / "last.ckpt").is_file() and Path(last.best_model_path) == tmp_path / "last.ckpt"


def test_launched_processes_are_the_launchers_child_ranks(tmp_path: Path) -> None:
    single = Trainer(accelerator="cpu", devices=1, logger=False, default_root_dir=tmp_path)
    assert private.launched_processes(single) is None  # no subprocess launcher
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, default_root_dir=tmp_path)
    assert private.launched_processes(trainer) == []  # before the launch, as in a rank the launcher started
    rank = subprocess.Popen([sys.executable, "-c", "pass"])
    trainer.strategy.launcher.procs.append(rank)  # what the launch does for each local rank from 1 on
    assert private.launched_processes(trainer) == [rank]
    rank.wait()


def test_stop_child_observer_keeps_lightning_from_killing_the_node_when_a_rank_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lightning's watcher of the launched ranks, started as the launch starts it, would kill every process of
    the node (this one included) once a rank ends with a non-zero status; stopped, it ends without doing so,
    and the launcher's own list of the ranks is left as it was."""
    killed: list[bool] = []
    monkeypatch.setattr(_ChildProcessObserver, "_terminate_all", lambda self: killed.append(True))
    rank = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline(); raise SystemExit(3)"], stdin=subprocess.PIPE
    )
    procs = [rank]
    observer = _ChildProcessObserver(main_pid=os.getpid(), child_processes=procs, sleep_period=0.05)  # type: ignore[arg-type]
    observer.start()
    assert observer.name == private.CHILD_OBSERVER
    assert private.stop_child_observer()
    rank.communicate(b"go\n")
    observer.join(5)
    assert not observer.is_alive() and killed == [] and procs == [rank]
    # the same watcher not stopped: what the stop prevents
    rank = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    rank.wait()
    observer = _ChildProcessObserver(main_pid=os.getpid(), child_processes=[rank], sleep_period=0.05)  # type: ignore[arg-type]
    observer.start()
    observer.join(5)
    assert killed == [True]


def test_attached_trainer_is_none_until_a_trainer_takes_the_module(tmp_path: Path) -> None:
    module = Tiny()
    assert private.attached_trainer(module) is None
    with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
        module.trainer  # noqa: B018 - the public property raises where the register answers None
    trainer = Trainer(accelerator="cpu", logger=False, default_root_dir=tmp_path)
    module.trainer = trainer
    assert private.attached_trainer(module) is trainer


class Recorder(CSVLogger):
    """A logger that records the hyperparameters Lightning logs to it."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.logged: list[dict[str, Any]] = []

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        self.logged.append(dict(params))


class WithHparams(Tiny):
    def __init__(self, width: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()


class Data(LightningDataModule):
    def __init__(self, rows: int = 12) -> None:
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(self.hparams.rows, 2)), batch_size=2)


@pytest.mark.parametrize("skip", [False, True])
def test_skip_hyperparameter_logging_keeps_them_from_the_loggers(tmp_path: Path, skip: bool) -> None:
    class Skip(Callback):
        def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
            if skip:
                private.skip_hyperparameter_logging(pl_module)
                private.skip_hyperparameter_logging(trainer.datamodule)

    logger = Recorder(tmp_path)
    trainer = Trainer(
        max_steps=1,
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        default_root_dir=tmp_path,
        callbacks=[Skip()],
    )
    trainer.fit(WithHparams(), datamodule=Data())
    assert logger.logged == ([] if skip else [{"width": 3, "rows": 12}])


def test_summary_depth_is_the_depth_a_summary_was_built_with() -> None:
    assert private.summary_depth(ModelSummary(max_depth=3)) == 3
    assert private.summary_depth(RichModelSummary(max_depth=-1)) == -1


def test_wandb_logger_arguments_run_and_mode_before_its_run_starts(tmp_path: Path) -> None:
    logger = WandbLogger(name="run", project="p", save_dir=str(tmp_path), offline=True, tags=["a"])
    init = private.wandb_init_args(logger)
    assert (init["name"], init["project"], init["dir"], init["tags"]) == ("run", "p", str(tmp_path), ["a"])
    assert private.wandb_offline(logger) is True
    assert private.wandb_offline(WandbLogger(save_dir=str(tmp_path))) is False
    assert private.wandb_started(logger) is False
    init["notes"] = "set before the run starts"  # the dict itself: what wandb.init will be given
    assert private.wandb_init_args(logger)["notes"] == "set before the run starts"
    run = object()
    logger._experiment = run  # a started run: the public property gives it, without starting another
    assert private.wandb_started(logger) is True and logger.experiment is run


class SpyCLI(LightningCLI):
    """Records each overridden step LightningCLI calls, with its arguments."""

    calls: list[tuple[str, tuple[Any, ...]]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.calls = []
        super().__init__(*args, **kwargs)

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any) -> Any:
        self.calls.append(("_prepare_subcommand_parser", (klass, subcommand)))
        return super()._prepare_subcommand_parser(klass, subcommand, **kwargs)

    def _parse_ckpt_path(self) -> None:
        self.calls.append(("_parse_ckpt_path", (self.config["subcommand"],)))
        super()._parse_ckpt_path()

    def _set_seed(self) -> None:
        self.calls.append(("_set_seed", (torch.initial_seed(),)))
        super()._set_seed()

    def _run_subcommand(self, subcommand: str) -> None:
        self.calls.append(("_run_subcommand", (subcommand, self.model.global_step)))
        super()._run_subcommand(subcommand)
        self.calls.append(("ran", (self.trainer.global_step,)))


def test_lightning_cli_calls_each_overridden_step_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps of :data:`~lightning_tf.training.private.lightning.OVERRIDES`: a parser per subcommand, the
    checkpoint path after parsing, the seed before anything is built, the subcommand run last."""
    monkeypatch.setattr(sys, "argv", ["lightning-tf"])
    args = [
        "fit",
        "--seed_everything=7",
        "--trainer.max_steps=1",
        "--trainer.logger=false",
        "--trainer.accelerator=cpu",
    ]
    args += [
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={tmp_path}",
    ]
    cli = SpyCLI(Tiny, args=args, save_config_callback=None, trainer_defaults={"enable_model_summary": False})
    assert [c for c in cli.calls if c[0] == "_prepare_subcommand_parser"] == [
        ("_prepare_subcommand_parser", (Trainer, name)) for name in ("fit", "validate", "test", "predict")
    ]
    rest = [c for c in cli.calls if c[0] != "_prepare_subcommand_parser"]
    assert [c[0] for c in rest] == ["_parse_ckpt_path", "_set_seed", "_run_subcommand", "ran"]
    assert rest[0][1] == ("fit",) and rest[2][1] == ("fit", 0) and rest[3][1] == (1,)
    assert torch.initial_seed() == 7  # the step the parse-only CLI skips is the one that seeds
    for hook in ("_parse_ckpt_path", "_prepare_subcommand_parser", "_run_subcommand", "_set_seed"):
        assert f"lightning.pytorch.cli.LightningCLI.{hook}" in private.OVERRIDES
