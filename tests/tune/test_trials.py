"""The one line a failed run leaves in the study, read from the end of its output."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("optuna")

from lightning_tf.tune.trials import failure  # noqa: E402


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
