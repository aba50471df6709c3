"""The study's bookkeeping without training: the direction a metric's name implies, the storages, trials left
running by a dead command failed and queued again with Optuna's retry callback (and not counted), the report
and ``best.yaml`` (the complete config with the best trial's values), the seeded sampler and the pruner."""

from __future__ import annotations

import csv
import os
import socket
from pathlib import Path

import pytest
import yaml

optuna = pytest.importorskip("optuna")
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

from optuna.trial import TrialState  # noqa: E402

from lightning_tf.tune.report import best_config, write_report  # noqa: E402
from lightning_tf.tune.study import (
    check_continuation,
    fail_orphans,
    held,
    infer_direction,
    make_pruner,
    make_sampler,
    open_storage,
    retried,
    tally,
)  # noqa: E402

DEAD_PID = 2**22 + 4321  # above Linux's largest pid: no such process
CONFIG = {
    "seed_everything": 0,
    "trainer": {"max_epochs": 3, "logger": {"class_path": "x.WandbLogger", "init_args": {"id": None}}},
    "model": {"class_path": "lightning_tf.vision.ViTClassifier", "init_args": {"lr": 0.1, "d_model": None}},
}


@pytest.mark.parametrize(
    ("metric", "direction"),
    [("val/loss", "minimize"), ("val/acc", "maximize"), ("val/top5", "maximize"), ("val/bleu", "maximize")]
    + [("val/chrf", "maximize"), ("val/mse", "minimize"), ("val/loss_linear", "minimize")],
)
def test_the_direction_follows_the_metric(metric: str, direction: str) -> None:
    assert infer_direction(metric) == direction


def test_best_config_sets_each_dotted_name_and_leaves_the_rest() -> None:
    best = best_config(CONFIG, {"model.init_args.lr": 0.003, "model.init_args.d_model": 64, "trainer.max_epochs": 5})
    assert best["model"]["init_args"] == {"lr": 0.003, "d_model": 64}
    assert best["trainer"]["max_epochs"] == 5 and best["trainer"]["logger"] == CONFIG["trainer"]["logger"]
    assert CONFIG["model"]["init_args"]["lr"] == 0.1  # the study's config is left as it was
    with pytest.raises(ValueError, match=r"seed_everything\.x: seed_everything is not a section of the config"):
        best_config(CONFIG, {"seed_everything.x": 1})


def _journal_study(tmp_path: Path) -> optuna.Study:
    storage = open_storage(str(tmp_path / "new" / "journal.log"))
    assert isinstance(storage, optuna.storages.JournalStorage) and (tmp_path / "new").is_dir()
    return optuna.create_study(study_name="s", storage=storage)


def test_trials_of_a_dead_command_are_failed_queued_again_and_not_counted(tmp_path: Path) -> None:
    study = _journal_study(tmp_path)
    done = study.ask()
    done.suggest_float("x", 0, 1)
    study.tell(done, 1.0)
    dead, alive = study.ask(), study.ask()
    x_dead = dead.suggest_float("x", 0, 1)
    alive.suggest_float("x", 0, 1)
    for trial, pid in ((dead, DEAD_PID), (alive, os.getpid())):
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("pid", pid)
    assert held(study.get_trials()) == 3  # finished and running
    assert fail_orphans(study) == [dead.number]
    trials = study.get_trials()
    assert trials[dead.number].state == TrialState.FAIL and trials[alive.number].state == TrialState.RUNNING
    assert retried(trials) == {dead.number}
    assert tally(trials) == {"complete": 1, "interrupted": 1, "running": 1, "waiting": 1}
    assert held(trials) == 2  # the interrupted one does not count
    again = study.ask()  # its parameters come first
    assert again.suggest_float("x", 0, 1) == x_dead
    assert fail_orphans(study) == []


def test_the_report_and_best_yaml(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="r2")
    for key, value in {"metric": "val/loss", "config": CONFIG, "max_epochs": 3, "search": "s.yaml"}.items():
        study.set_user_attr(key, value)
    dist = {"model.init_args.lr": optuna.distributions.FloatDistribution(1e-3, 1.0, log=True)}
    for lr, value, epochs, reason in ((0.01, 0.5, 3, ""), (0.002, 0.25, 3, ""), (0.2, None, 1, "failed: boom")):
        study.add_trial(
            optuna.trial.create_trial(
                params={"model.init_args.lr": lr},
                distributions=dist,
                value=value,
                state=TrialState.COMPLETE if value is not None else TrialState.FAIL,
                user_attrs={"reason": reason},
                intermediate_values={k: (value or 1.0) + 0.1 * (epochs - 1 - k) for k in range(epochs)},
            )
        )
    written = write_report(study, tmp_path)
    best = yaml.safe_load(written["best"].read_text())
    assert best["model"]["init_args"]["lr"] == 0.002 and best["trainer"]["max_epochs"] == 3
    assert written["best"].read_text().startswith("# The best trial of study r2: trial 1, val/loss 0.25")
    rows = list(csv.DictReader(written["trials"].open()))
    assert [(r["number"], r["state"], r["reason"]) for r in rows] == [
        ("0", "complete", ""),
        ("1", "complete", ""),
        ("2", "failed", "failed: boom"),
    ]
    assert [r["epochs"] for r in rows] == ["3", "3", "1"]  # the epochs each trial reported
    summary = written["summary"].read_text()
    assert "3 trials: 2 complete, 1 failed." in summary and "Trial 1: val/loss **0.25**" in summary
    assert "Epochs run: 7 of the 9" in summary and "- trial 2 (failed): failed: boom" in summary
    assert (tmp_path / "history.png").stat().st_size > 5000


def test_a_parameter_a_trial_lacks_is_blank_in_the_top_10(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="r3")
    low_high = optuna.distributions.FloatDistribution(1e-3, 1.0)
    for value, params in (
        (1.0, {"model.init_args.lr": 0.5}),
        (0.5, {"model.init_args.lr": 0.25, "model.init_args.wd": 0.1}),
    ):
        distributions = {name: low_high for name in params}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value))
    summary = write_report(study, tmp_path)["summary"].read_text()
    assert "| 1 | 1 | 0.5 | 0 | 0.25 | 0.1 |" in summary and "| 2 | 0 | 1 | 0 | 0.5 |  |" in summary


def test_a_study_continues_only_with_its_own_configs_and_objective(capsys: pytest.CaptureFixture[str]) -> None:
    study = optuna.create_study(study_name="s")
    attrs = {
        "args": ["--config", "/a/d.yaml"],
        "args_key": ["--config", "sha256:1"],
        "metric": "val/loss",
        "direction": "minimize",
        "search_text": "x: 1",
    }
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    check_continuation(study, {**attrs, "args": ["--config", "/b/d.yaml"]})  # another clone, the same file
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match=r"study 's' was started with other arguments or config files"):
        check_continuation(study, {**attrs, "args_key": ["--config", "sha256:2"]})
    with pytest.raises(ValueError, match=r"study 's' optimises val/loss \(minimize\); --metric val/acc"):
        check_continuation(study, {**attrs, "metric": "val/acc", "direction": "maximize"})
    check_continuation(study, {**attrs, "search_text": "x: 2"})
    assert "note: the search file differs from the one study 's' started with" in capsys.readouterr().out


@pytest.mark.integration  # sqlalchemy creates the database's tables: seconds
def test_a_database_url_gets_a_heartbeat_that_retries(tmp_path: Path) -> None:
    database = open_storage(f"sqlite:///{tmp_path / 'tune.db'}", heartbeat=5)
    assert isinstance(database, optuna.storages.RDBStorage)
    assert database.get_heartbeat_interval() == 5 and database.grace_period == 10
    assert isinstance(database.heartbeat_stale_trial_callback, optuna.storages.RetryHeartbeatStaleTrialCallback)


def test_the_sampler_is_seeded_by_the_trials_held_and_the_pruner_waits_as_asked() -> None:
    tpe = make_sampler("tpe", seed=0, trials=40, n_existing=0)
    assert isinstance(tpe, optuna.samplers.TPESampler) and tpe._n_startup_trials == 10 and tpe._constant_liar
    assert make_sampler("tpe", seed=0, trials=8, n_existing=0)._n_startup_trials == 4

    def draws(sampler: optuna.samplers.BaseSampler) -> list[float]:
        study = optuna.create_study(sampler=sampler)
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
        return [t.params["x"] for t in study.trials]

    assert draws(make_sampler("random", 1, 20, 0)) == draws(make_sampler("random", 1, 20, 0))
    assert draws(make_sampler("random", 1, 20, 0)) != draws(make_sampler("random", 1, 20, 3))  # a continued study
    median = make_pruner("median", startup=3, warmup=4, max_epochs=40)
    assert isinstance(median, optuna.pruners.MedianPruner) and median._n_startup_trials == 3
    assert median._n_warmup_steps == 4
    assert make_pruner("hyperband", 3, 4, max_epochs=40)._max_resource == 40
    assert isinstance(make_pruner("none", 3, 4, None), optuna.pruners.NopPruner)
