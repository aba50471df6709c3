"""The worker's side of a trial without training: the pruning callback's stand-in trial and the worker's
answers through the trial's folder, and the one line a failed run leaves in the study."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

pytest.importorskip("optuna_integration")

from lightning_tf.tune.reporter import WorkerTrial, append_line  # noqa: E402
from lightning_tf.tune.worker import _new_records, _reason  # noqa: E402


def test_the_callbacks_trial_reports_and_waits_for_the_workers_answer(tmp_path: Path) -> None:
    trial = WorkerTrial(str(tmp_path))
    trial.metrics = {"val/loss": 0.5, "val/acc": 0.75}
    trial.report(0.5, step=3)
    records, offset = _new_records(tmp_path / "reports.jsonl", 0)
    assert records == [{"step": 3, "value": 0.5, "metrics": {"val/loss": 0.5, "val/acc": 0.75}}]
    assert _new_records(tmp_path / "reports.jsonl", offset) == ([], offset)  # nothing new

    def answer() -> None:
        (tmp_path / "answer-3").write_text("prune")

    timer = threading.Timer(0.2, answer)
    timer.start()
    assert trial.should_prune() is True  # waited for the answer
    (tmp_path / "answer-4").write_text("go")
    trial.report(0.4, step=4)
    assert trial.should_prune() is False


def test_only_whole_lines_are_read(tmp_path: Path) -> None:
    path = tmp_path / "reports.jsonl"
    append_line(path, {"run_dir": "/r"})
    with open(path, "a") as handle:
        handle.write(json.dumps({"step": 0})[:5])  # a line being written
    records, offset = _new_records(path, 0)
    assert records == [{"run_dir": "/r"}] and offset == len(json.dumps({"run_dir": "/r"})) + 1


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
    assert _reason(log, epochs) == reason
