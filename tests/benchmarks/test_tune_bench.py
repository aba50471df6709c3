"""benchmarks/tune.py: its page from measured results (every section, every verdict), and (integration) the
pruning section end to end at toy size, its page and JSON written from what the studies hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from tune import page  # noqa: E402

MACHINE = {"cpu": "AMD EPYC", "cores": 2, "torch": "2.14.1", "threads": 2, "device": "cpu", "cuda": None}


def study(wall_s: float, best: float | None, states: dict[str, int]) -> dict:
    return {
        "wall_s": wall_s,
        "trials": sum(states.values()),
        "states": states,
        "best_value": best,
        "best_trial": 3,
        "best_acc": None if best is None else 1 - best / 10,
        "trial_s": 2 * wall_s,
        "best_params": {"model.init_args.lr": 0.00123, "model.init_args.d_model": 64},
        "epochs": 400,
        "trials_per_hour": 3600 * sum(states.values()) / wall_s,
    }


def test_the_page_states_each_measurement_and_its_verdict() -> None:
    results = {
        "machine": MACHINE,
        "smoke": False,
        "date": "2026-12-01",
        "pruning": {
            "trials": 24,
            "rows": {
                "median": study(600, 0.15, {"complete": 10, "pruned": 14}),
                "none": study(1200, 0.125, {"complete": 24}),
            },
            "saving": 0.5,
            "best_gap_points": 0.25,
            "target_met": True,
        },
        "parallel": {
            "trials": 8,
            "rows": {"1": study(480, 0.9, {"complete": 8}), "2": study(270, 0.9, {"complete": 8})},
            "speedup": 1.78,
            "kill": {
                "trials": 6,
                "finished_before_kill": 2,
                "left_running": [2, 3],
                "rerun_with_same_params": True,
                "finished_after": 6,
                "first_wall_s": 150,
                "second_wall_s": 200,
                "states": {"complete": 6, "interrupted": 2},
            },
        },
        "etth1": {
            "trials": 30,
            "budget": ["--trainer.max_time=00:00:03:00"],
            "study": study(3600, 0.4123, {"complete": 20, "pruned": 10}),
            "best": {
                "mse": 0.3688,
                "mae": 0.3905,
                "linear_mse": 0.3700,
                "linear_mae": 0.3914,
                "persistence_mse": 1.294,
            },
            "default": {"mse": 0.3695, "mae": 0.3912, "train_s": 240.0},
        },
    }
    text = page(results)
    assert "Machine: AMD EPYC, 2 cores, torch 2.14.1" in text and "Smoke" not in text
    assert (
        "| median | 10.0 min | 10 complete, 14 pruned | 400 | 20.0 min | 0.1500 | 98.50% | lr 0.00123, d_model 64 |"
        in text
    )
    assert "Pruning saves **50%** of the wall time" in text and "+0.25 points" in text and "**met**" in text
    assert "| 1 | 8.0 min | 8 complete | 60 |" in text and "| 2 | 4.5 min | 8 complete | 107 |" in text
    assert "Two jobs run **1.78x** the trials per hour of one." in text
    assert "leaving trials [2, 3] running" in text and "their parameters ran again (yes)" in text
    assert "| best trial (3: lr 0.00123, d_model 64; val loss 0.4123) | **0.3688** | 0.3905 |" in text
    assert "| closed-form linear model, same windows | 0.3700 | 0.3914 |" in text
    assert "| default config, same budget (4.0 min) | 0.3695 | 0.3912 |" in text
    assert "the tuned model is below the linear model by 0.0012 MSE (0.32%)" in text
    results["pruning"].update(saving=0.3, target_met=False)
    results["etth1"]["best"]["mse"] = 0.3750
    results["etth1"].pop("default")
    results["etth1"]["default"] = {"mse": 0.3700, "mae": 0.39, "train_s": 60.0}
    text = page({**results, "smoke": True})
    assert "Smoke-sized (pruning, parallel, etth1)" in text and "**NOT met**" in text
    assert (
        "the tuned model is above the linear model by 0.0050 MSE; against the default config it is not better" in text
    )
    assert "Not run: x.csv not found." in page({**results, "etth1": {"skipped": "x.csv not found"}})


@pytest.mark.slow  # 66 s of toy trials
def test_the_pruning_section_runs_at_toy_size(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/tune.py",
            "--smoke",
            "--sections",
            "pruning",
            "--trials",
            "1",
            "--out",
            str(tmp_path / "tune"),
            "--workdir",
            str(tmp_path / "work"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "tune.json").read_text())
    rows = results["pruning"]["rows"]
    assert rows["median"]["trials"] == rows["none"]["trials"] == results["pruning"]["trials"]
    assert rows["none"]["states"] == {"complete": results["pruning"]["trials"]}  # no pruner: every trial completes
    assert results["pruning"]["saving"] == pytest.approx(1 - rows["median"]["wall_s"] / rows["none"]["wall_s"])
    assert 0 < rows["none"]["best_acc"] <= 1 and rows["none"]["best_value"] > 0  # validation accuracy and loss
    text = (tmp_path / "tune.md").read_text()
    assert "Smoke-sized (pruning)" in text and "## Pruning pays" in text and "| none |" in text
