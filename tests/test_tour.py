"""``lightning-tf tour``, the main job: each task fits, tests, and reports its numbers and paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from lightning_tf.__main__ import main
from lightning_tf.cli.tour import TASKS

ROOT = Path(__file__).resolve().parents[1]
SHORT = [
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "3",
    "--trainer.limit_val_batches",
    "2",
    "--trainer.limit_test_batches",
    "2",
]


def _tour(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tasks: list[str], capsys: pytest.CaptureFixture) -> str:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["lightning-tf"])
    main(["tour", "--root", str(ROOT), "--tasks", *tasks, "--", *SHORT])
    return capsys.readouterr().out


@pytest.mark.integration
def test_tour_reports_each_task_with_its_checkpoint_and_wandb_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = _tour(tmp_path, monkeypatch, ["vision", "kline"], capsys)
    table = (tmp_path / "runs" / "tour_summary.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| vision") or line.startswith("| kline")]
    assert len(rows) == 2, table
    # every checkpoint and wandb run named in the table exists and loads with weights_only=True
    for task in ("vision", "kline"):
        ckpt, run = re.search(rf"- {task}: checkpoint `([^`]+)`; wandb run `([^`]+)`", table).groups()
        assert (tmp_path / ckpt).is_file() and (tmp_path / run).is_dir(), (ckpt, run)
        assert torch.load(tmp_path / ckpt, weights_only=True)["global_step"] == 3
    # the forecaster's row compares it with each baseline, by the MSE it prints
    kline = rows[1]
    model_mse = float(re.search(r"\| ([0-9.e-]+) \(persistence", kline).group(1))
    persistence = float(re.search(r"persistence ([0-9.e-]+)", kline).group(1))
    assert ("beats persistence" in kline and "does not beat persistence" not in kline) == (model_mse < persistence)
    assert "lightning-tf tour" in out and "wandb sync" in out


@pytest.mark.slow
def test_tour_runs_all_three_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _tour(tmp_path, monkeypatch, list(TASKS), capsys)
    table = (tmp_path / "runs" / "tour_summary.md").read_text()
    assert re.search(r"\| text \|.*test BLEU / chrF \| [0-9.]+ / [0-9.]+", table), table


def test_a_root_without_configs_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["tour", "--root", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"configs/trainer/default.yaml not found under {tmp_path}; pass --root" in capsys.readouterr().err
