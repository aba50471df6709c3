"""The ``lightning-tf`` command under DDP: Lightning relaunches the console script for rank 1, and each
task's config trains, validates and tests with 2 CPU processes (one fast_dev_run batch each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CASES = {
    "text": [
        "--config",
        "configs/text/copy.yaml",
        "--data.n_train",
        "200",
        "--trainer.use_distributed_sampler",
        "false",
    ],
    "vision": ["--config", "configs/vision/digits.yaml"],
    "kline": ["--config", "configs/kline/msft_daily.yaml"],
}


@pytest.mark.slow
@pytest.mark.parametrize("task", list(CASES))
def test_cli_fit_and_test_with_two_processes(task: str) -> None:
    if task == "kline" and not (ROOT / "data" / "msft.csv").exists():
        pytest.skip("data/msft.csv is absent")
    cli = Path(sys.executable).with_name("lightning-tf")
    args = [
        str(cli),
        "fit",
        "--config",
        "configs/trainer/ddp.yaml",
        *CASES[task],
        "--config",
        "configs/trainer/debug.yaml",
        "--trainer.accelerator",
        "cpu",
        "--trainer.devices",
        "2",
        "--test_after_fit",
        "true",
    ]
    env = os.environ | {"OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    env.pop("LOCAL_RANK", None)
    proc = subprocess.run(args, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in proc.stdout + proc.stderr
