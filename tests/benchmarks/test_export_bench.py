"""The export benchmark still runs end to end (``--quick``): both models export, load in onnxruntime
and are timed beside torch. No speed is asserted here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_export_benchmark_smoke() -> None:
    pytest.importorskip("onnxruntime")
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "benchmarks/export.py", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("machine: ")
    rows = re.findall(
        r"^\| (ViT digits|K-line default).* \| 1 \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+)x \|$", proc.stdout, re.M
    )
    assert len(rows) == 2, proc.stdout
    for _, torch_ms, ort_ms, ratio in rows:  # the printed ratio is the ratio of the printed times
        assert float(ratio) == pytest.approx(float(torch_ms) / float(ort_ms), rel=0.02)
