"""The pruning callback's side of a trial, without training: it opens its trial from the study's storage, reports each
epoch there and is pruned by the command's pruner, records the metrics of its best epoch and why it ends early, stops
its run when the command is gone, and without a command (a trial's saved config run again by hand) does nothing."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("optuna_integration")
import optuna  # noqa: E402
import torch  # noqa: E402

from lightning_tf.tune.reporter import TrialReporter  # noqa: E402
from lightning_tf.tune.study import STORAGE, open_storage  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _study(tmp_path: Path, direction: str, other: list[float]) -> optuna.Study:
    """A study holding one complete trial with the validation values ``other`` and, running, trial 1."""
    study = optuna.create_study(study_name="s", storage=open_storage(str(tmp_path / "j.log")), direction=direction)
    values = dict(enumerate(other))
    study.add_trial(optuna.create_trial(value=other[-1], params={}, distributions={}, intermediate_values=values))
    running = study.ask()
    running.set_user_attr("pid", os.getppid())  # this process's parent: the run's command, alive
    return study


def _epoch(reporter: TrialReporter, epoch: int, metrics: dict[str, float]) -> None:
    trainer = SimpleNamespace(sanity_checking=False, callback_metrics={k: torch.tensor(v) for k, v in metrics.items()})
    reporter.on_validation_end(trainer, SimpleNamespace(current_epoch=epoch))  # type: ignore[arg-type]


@pytest.mark.parametrize(  # values a float32 metric holds exactly
    ("direction", "metric", "values", "other"),
    [
        ("maximize", "val/acc", [0.5, 0.375, 0.625], [0.25, 0.25, 0.875]),
        ("minimize", "val/loss", [0.5, 0.625, 0.375], [0.75, 0.75, 0.125]),
    ],
)
def test_each_epoch_reaches_the_study_and_the_commands_pruner_ends_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direction: str, metric: str, values: list, other: list
) -> None:
    """The median pruner after one trial: the third epoch is worse than the complete trial's (``other``)."""
    study = _study(tmp_path, direction, other)
    monkeypatch.setenv(STORAGE, str(tmp_path / "j.log"))
    reporter = TrialReporter(metric, study="s", trial=1, params={"lr": 0.1}, pruner=["median", 1, 0, None])
    assert STORAGE not in os.environ  # a process the run starts is not the trial
    for epoch, value in enumerate(values[:2]):
        _epoch(reporter, epoch, {metric: value, "val/x": epoch, "train/loss": 9.0})
        assert study.trials[1].user_attrs["val_metrics"] == {metric: values[0], "val/x": 0.0}  # the best epoch's
    with pytest.raises(optuna.TrialPruned):
        _epoch(reporter, 2, {metric: values[2], "val/x": 2})
    trial = study.trials[1]
    assert trial.intermediate_values == dict(enumerate(values)) and trial.state.name == "RUNNING"
    assert trial.user_attrs["reason"] == "pruned" and trial.user_attrs["val_metrics"] == {metric: values[2], "val/x": 2}


def test_a_metric_the_run_does_not_log_is_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = _study(tmp_path, "minimize", [0.1])
    monkeypatch.setenv(STORAGE, str(tmp_path / "j.log"))
    reporter = TrialReporter("val/accc", study="s", trial=1, pruner=["none", 0, 0, None])
    message = "--metric val/accc is not logged by this run; it logs val/acc, val/loss"
    with pytest.raises(ValueError, match=f"^{message}$"):
        _epoch(reporter, 0, {"val/loss": 0.3, "val/acc": 0.9, "train/loss": 0.2})
    assert study.trials[1].user_attrs["reason"] == message and study.trials[1].intermediate_values == {}


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _command(runs: multiprocessing.SimpleQueue) -> None:
    """A command that starts a run, whose callback watches it, and waits to be killed."""
    command = os.getpid()
    run = os.fork()
    if run == 0:
        TrialReporter("val/loss").watch(command)
        time.sleep(60)  # a watch that let the run go on
        os._exit(0)
    runs.put(run)
    time.sleep(60)


def test_the_run_stops_when_the_command_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORAGE, raising=False)
    context = multiprocessing.get_context("fork")
    runs = context.SimpleQueue()
    command = context.Process(target=_command, args=(runs,))
    command.start()
    run = runs.get()
    time.sleep(1.5)
    assert _alive(run)  # the command lives: so does its run
    command.kill()  # SIGKILL
    command.join(10)
    t0 = time.time()
    while _alive(run) and time.time() - t0 < 10:
        time.sleep(0.1)
    assert not _alive(run)


def test_without_a_command_the_callback_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORAGE, raising=False)
    made = TrialReporter("val/loss", study="s", trial=1)
    assert made.trial is None

    class Trainer:
        sanity_checking = False
        callback_metrics: dict = {}

    made.on_validation_end(Trainer(), None)  # type: ignore[arg-type]  # no report, no error
