"""The K-line and ETT benchmarks still run end to end (``--quick``) and print their tables; the
speed comparison aborts unless our forecaster and the torch.nn.TransformerEncoder copy agree.
No accuracy or speed is asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ETTH1 = ROOT.parent / "shared" / "data" / "ett" / "ETTh1.csv"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_kline_benchmark_smoke(tmp_path: Path) -> None:
    proc = run("benchmarks/kline.py", "--quick", "--workdir", str(tmp_path / "ckpt"), "--json", str(tmp_path / "out.json"))
    assert "| forecast | mse | mae | rmse | mase | dir_acc | up_share | ic | rank_ic |" in proc.stdout
    for name in ("model", "persistence", "mean", "dlinear"):
        assert f"| {name} |" in proc.stdout
    assert "| mode | ours windows/s | torch.nn.TransformerEncoder windows/s | ours/torch |" in proc.stdout
    out = json.loads((tmp_path / "out.json").read_text())
    assert [r["mode"] for r in out["speed"]] == ["train", "eval"]


@pytest.mark.skipif(not ETTH1.is_file(), reason=f"{ETTH1} not present")
def test_ett_benchmark_smoke(tmp_path: Path) -> None:
    proc = run("benchmarks/ett.py", "--quick", "--workdir", str(tmp_path / "ckpt"))
    assert "| look-back | horizon | ours MSE / MAE |" in proc.stdout and "| 96 | 24 |" in proc.stdout
