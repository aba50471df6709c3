"""The study's bookkeeping without training: the direction a metric's name implies, the trials that count
against ``--trials``, trials left running by a dead worker failed and queued again, the settings every
worker reads, the seeded samplers and the pruners."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from optuna.trial import TrialState  # noqa: E402

from lightning_tf.tune.study import StudySpec, counted, fail_stale, infer_direction, make_pruner, make_sampler  # noqa: E402

DEAD_PID = 2**22 + 4321  # above Linux's largest pid: no such process


@pytest.mark.parametrize(
    ("metric", "direction"),
    [
        ("val/loss", "minimize"),
        ("val/acc", "maximize"),
        ("val/top5", "maximize"),
        ("val/bleu", "maximize"),
        ("val/chrf", "maximize"),
        ("val/mse", "minimize"),
        ("val/loss_linear", "minimize"),
    ],
)
def test_the_direction_follows_the_metric(metric: str, direction: str) -> None:
    assert infer_direction(metric) == direction


def spec(tmp_path: Path, **kwargs: object) -> StudySpec:
    return StudySpec(
        study_name="s",
        storage=str(tmp_path / "j.log"),
        study_dir=str(tmp_path),
        args=[],
        search="x.yaml",
        trials=8,
        **kwargs,
    )  # type: ignore[arg-type]


def test_the_settings_round_trip_and_build_the_sampler_and_pruner(tmp_path: Path) -> None:
    s = spec(tmp_path, pruner="hyperband", max_epochs=27, fixed={"trainer.max_epochs": 27}, deadline=12.5)
    s.save(tmp_path / "spec.json")
    assert StudySpec.read(tmp_path / "spec.json") == s
    assert isinstance(make_pruner(s), optuna.pruners.HyperbandPruner)
    assert isinstance(make_pruner(spec(tmp_path, pruner="none")), optuna.pruners.NopPruner)
    median = make_pruner(spec(tmp_path, pruner_startup=2, pruner_warmup=3))
    assert isinstance(median, optuna.pruners.MedianPruner)
    assert (median._n_startup_trials, median._n_warmup_steps) == (2, 3)
    tpe = make_sampler(s, worker=1, n_existing=0)
    assert isinstance(tpe, optuna.samplers.TPESampler) and tpe._n_startup_trials == 4  # a quarter of 8, at least 4
    assert isinstance(make_sampler(spec(tmp_path, sampler="random"), 0, 0), optuna.samplers.RandomSampler)

    def draws(worker: int, n_existing: int) -> list[float]:
        sampler = make_sampler(spec(tmp_path, sampler="random"), worker, n_existing)
        study = optuna.create_study(sampler=sampler)
        return [study.ask().suggest_float("x", 0, 1) for _ in range(3)]

    assert draws(0, 0) == draws(0, 0)  # seeded
    assert draws(0, 0) != draws(1, 0) and draws(0, 0) != draws(0, 5)  # workers and continued runs differ


def test_stale_trials_are_failed_queued_again_and_not_counted() -> None:
    study = optuna.create_study()
    done = study.ask()
    done.suggest_float("x", 0, 1)
    study.tell(done, 1.0)
    dead, alive = study.ask(), study.ask()
    x_dead = dead.suggest_float("x", 0, 1)
    alive.suggest_float("x", 0, 1)
    import socket

    for trial, pid in ((dead, DEAD_PID), (alive, os.getpid())):
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("pid", pid)
    assert counted(study.get_trials()) == 3  # finished and running
    (stale,) = fail_stale(study)
    assert stale.number == dead.number
    trials = study.get_trials()
    assert trials[dead.number].state == TrialState.FAIL
    assert trials[dead.number].user_attrs["interrupted"] == "its worker process was gone"
    assert trials[alive.number].state == TrialState.RUNNING  # its process lives
    assert counted(trials) == 2  # the interrupted one does not count
    retry = study.ask()  # its parameters come first
    assert retry.suggest_float("x", 0, 1) == x_dead and retry.user_attrs["retry_of"] == dead.number
    assert fail_stale(study) == []


def test_a_path_is_a_journal_file(tmp_path: Path) -> None:
    from lightning_tf.tune.study import open_storage

    journal = open_storage(str(tmp_path / "new" / "journal.log"))
    assert isinstance(journal, optuna.storages.JournalStorage) and (tmp_path / "new").is_dir()


@pytest.mark.integration  # sqlalchemy creates the database's tables: seconds
def test_a_database_url_gets_a_heartbeat(tmp_path: Path) -> None:
    from lightning_tf.tune.study import open_storage

    database = open_storage(f"sqlite:///{tmp_path / 'tune.db'}")
    assert isinstance(database, optuna.storages.RDBStorage)
    assert database.get_heartbeat_interval() == 60 and database.grace_period == 180
    assert database.failed_trial_callback is not None  # a trial whose heartbeat stopped runs again once
