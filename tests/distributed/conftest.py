"""Runs every task once in one process and once in two DDP processes (CPU, gloo), shared by the tests
of this folder: ``ddp_tasks.py`` is launched twice per session (about a minute on two cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).with_name("ddp_tasks.py")
ROOT = Path(__file__).resolve().parents[2]


def launch(devices: int, out: Path, timeout: float = 600) -> None:
    """Run ``ddp_tasks.py`` with ``devices`` processes; fail with the output's tail when it fails."""
    env = os.environ | {
        "OMP_NUM_THREADS": "1",
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("LOCAL_RANK", None)  # a rank variable from an outer launcher would make this run a child
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--devices", str(devices), "--out", str(out)],
        check=False,
        cwd=out,  # what a run writes beside itself (the tokenizer of a logger-less run) stays in the test's folder
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode:
        pytest.fail(
            f"ddp_tasks.py --devices {devices} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-5000:]}"
        )


class Runs:
    """The two runs' output folders and their per-task records."""

    def __init__(self, one: Path, two: Path) -> None:
        self.one, self.two = one, two

    def record(self, devices: int, task: str) -> dict[str, Any]:
        return json.loads(((self.one if devices == 1 else self.two) / f"{task}.json").read_text())


@pytest.fixture(scope="session")
def ddp_runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    one, two = tmp_path_factory.mktemp("one_process"), tmp_path_factory.mktemp("two_processes")
    launch(1, one)
    launch(2, two)
    return Runs(one, two)
