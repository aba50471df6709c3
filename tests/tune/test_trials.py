"""The trials a command runs, without training: the one line a failed run leaves in the study, read from the end of
its output; and, each trial's run a stand-in for ``fit`` that reports to its trial in the study's storage as the
callback does (``tests/helpers/fake_fit.py``), a trial's value (its best epoch), pruning by the command's pruner,
failures, a run killed mid-trial or stopped by a SIGTERM from outside (interrupted, queued again), a metric the runs
do not log (the study stops, the other runs too), and a stop (the running trials end interrupted)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")
pytestmark = [pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"), pytest.mark.timeout(120)]

from optuna.storages import RetryHeartbeatStaleTrialCallback as Retry  # noqa: E402

from lightning_tf.tune.study import held, retried  # noqa: E402
from lightning_tf.tune.trials import Trials, failure  # noqa: E402


@pytest.mark.parametrize(
    ("last", "epochs", "reason"),
    [
        (
            "lightning-tf: error: model.d_model (30) must be divisible by model.n_heads (4)",
            0,
            "refused: model.d_model (30) must be divisible by model.n_heads (4)",
        ),
        ("lightning-tf: error: no such file data.csv", 2, "failed: no such file data.csv"),
        (
            "lightning-tf: training stopped: the training loss is nan at step 2",
            0,
            "non-finite: the training loss is nan at step 2",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
            1,
            "out of memory: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
        ),
        ("RuntimeError: boom", 1, "failed: RuntimeError: boom"),
    ],
)
def test_a_failed_run_leaves_one_line(tmp_path: Path, last: str, epochs: int, reason: str) -> None:
    log = tmp_path / "fit.log"
    log.write_text(f"Traceback ...\n  File x\n{last}\n\n")
    assert failure(log, epochs) == reason


def test_a_run_without_output_is_said_so(tmp_path: Path) -> None:
    (tmp_path / "fit.log").write_text("\n")
    assert failure(tmp_path / "fit.log", 0) == "failed: no output"


# ------------------------------------------------------------------ the trials, each run a stand-in for fit

FAKE_FIT = [sys.executable, str(Path(__file__).parents[1] / "helpers" / "fake_fit.py")]
BEHAVIOURS = ["good", "bad", "crash", "missing", "killed", "termed", "wait"]
PRUNER = ["median", 1, 0, None]  # after one trial, from the first epoch


def trials_of(tmp_path: Path, behaviours: list[str], trials: int, jobs: int) -> tuple[optuna.Study, Trials]:
    """A study whose trials run ``behaviours`` in order (each one's parameter), ``jobs`` at once."""
    from lightning_tf.tune.study import open_storage

    storage = str(tmp_path / "journal.log")
    study = optuna.create_study(study_name="fake", storage=open_storage(storage))
    attrs = {"study_dir": str(tmp_path), "args": ["--config", "x.yaml"], "metric": "val/loss", "pruner": PRUNER}
    for key, value in {**attrs, "direction": "minimize", "wandb": False}.items():
        study.set_user_attr(key, value)
    for behaviour in behaviours:
        study.enqueue_trial({"behaviour": behaviour})
    space = {"behaviour": optuna.distributions.CategoricalDistribution(BEHAVIOURS)}
    trials = Trials(study, space, trials=trials, jobs=jobs, storage=storage)
    trials.fit = FAKE_FIT
    return study, trials


def test_a_trials_value_is_its_best_epoch_and_the_pruner_and_failures_are_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study, trials = trials_of(tmp_path, ["good", "bad", "crash"], trials=3, jobs=1)
    assert trials.run(timeout=None) == 0
    good, bad, crash = study.trials
    assert (good.state.name, good.value, good.intermediate_values) == ("COMPLETE", 0.3, {0: 0.5, 1: 0.3, 2: 0.4})
    assert good.user_attrs["val_metrics"] == {"val/loss": 0.3, "val/acc": 0.97}
    assert good.user_attrs["run_dir"] == os.getcwd() and good.user_attrs["job"] == 0
    assert good.user_attrs["pid"] == os.getpid() and good.user_attrs["run_pid"] != os.getpid()
    assert bad.state.name == "PRUNED" and bad.user_attrs["reason"] == "pruned after epoch 1"
    assert crash.state.name == "FAIL" and crash.user_attrs["reason"] == "failed: RuntimeError: boom"
    assert (tmp_path / "trials" / "0002" / "fit.log").read_text().endswith("RuntimeError: boom\n")
    out = capsys.readouterr().out
    assert "job 0: trial 0 complete in " in out and "val/loss 0.3 [behaviour=good]" in out
    assert "trial 1 pruned in " in out and "(1 complete, 1 pruned, 1 failed; best 0.3 (trial 0))" in out


def test_a_run_killed_mid_trial_ends_interrupted_and_runs_again(tmp_path: Path) -> None:
    study, trials = trials_of(tmp_path, ["killed", "good"], trials=1, jobs=1)
    assert trials.run(timeout=None) == 0
    killed, *rest = study.trials
    assert killed.state.name == "FAIL" and killed.user_attrs["reason"] == "interrupted: its run ended (-9)"
    again = [t for t in rest if Retry.retried_trial_number(t) == killed.number]
    assert again and again[0].params == {"behaviour": "killed"}  # queued again, with its parameters
    assert held(study.trials) == 1  # the interrupted ones do not count: the study goes on to one trial


def test_a_trial_run_again_keeps_nothing_of_the_run_it_repeats(tmp_path: Path) -> None:
    """A retry starts with the attributes of the trial it repeats: the metrics and reason are its run's own."""
    study, trials = trials_of(tmp_path, [], trials=1, jobs=1)
    stale = {"val_metrics": {"val/loss": 0.1}, "reason": "interrupted: its run ended (-9)"}
    study.enqueue_trial({"behaviour": "crash"}, user_attrs=stale)
    trials.run(timeout=None)
    crash = study.trials[0].user_attrs
    assert (crash["val_metrics"], crash["reason"]) == ({}, "failed: RuntimeError: boom")


def test_a_run_stopped_by_a_sigterm_from_outside_ends_interrupted_and_the_study_goes_on(tmp_path: Path) -> None:
    study, trials = trials_of(tmp_path, ["termed", "good"], trials=1, jobs=1)
    assert trials.run(timeout=None) == 0
    termed = study.trials[0]
    assert termed.state.name == "FAIL" and termed.user_attrs["reason"] == "interrupted: its run ended (143)"
    assert termed.intermediate_values == {0: 1.0}


def test_a_metric_the_runs_do_not_log_stops_the_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study, trials = trials_of(tmp_path, ["wait", "missing"], trials=4, jobs=2)
    assert trials.run(timeout=None) == 1
    waited, missing = study.trials[:2]
    assert missing.user_attrs["reason"] == "--metric val/x is not logged by this run; it logs val/loss"
    assert waited.user_attrs["reason"] == "interrupted: the study was stopped"  # stopped, not left to run
    assert {t.user_attrs["job"] for t in study.trials[:2]} == {0, 1}
    assert "stopping the study: --metric val/x is not logged" in capsys.readouterr().out


def test_a_stop_ends_the_running_trials_as_interrupted(tmp_path: Path) -> None:
    study, trials = trials_of(tmp_path, ["wait", "wait"], trials=2, jobs=2)

    def stop_when_both_run() -> None:
        while sum(t.state.name == "RUNNING" and len(t.intermediate_values) == 1 for t in study.trials) < 2:
            time.sleep(0.05)
        trials.stop()  # what Ctrl-C does

    threading.Thread(target=stop_when_both_run, daemon=True).start()
    assert trials.run(timeout=None) == 130
    first, second = study.trials[:2]
    for t in (first, second):
        assert t.state.name == "FAIL" and t.user_attrs["reason"] == "interrupted: the study was stopped"
    assert retried(study.trials) == {0, 1} and trials.runs == {}


def test_two_jobs_that_end_at_once_never_both_take_the_last_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--trials 3 --jobs 2``: the first two trials end together and both see room for one more; the study still
    gets three trials, not four (each job decides under one lock until its trial runs)."""
    study, trials = trials_of(tmp_path, ["good"] * 4, trials=3, jobs=2)
    original = Trials.after_trial

    def slow(self: Trials, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.number < 2:
            time.sleep(1.0)  # both first trials have ended before either's line is done
        original(self, study, trial)

    monkeypatch.setattr(Trials, "after_trial", slow)
    assert trials.run(timeout=None) == 0
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3 + ["WAITING"]
