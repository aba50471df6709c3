"""The fine-tuning benchmark still runs end to end (pretrain on a Fashion-MNIST stand-in, four arms on the
digits, the JSON written); no accuracy is asserted here (docs/results/finetune.md has the measured run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.vision import fake_mnist

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_finetune_benchmark_smoke(tmp_path: Path) -> None:
    fake_mnist(tmp_path / "fashion")  # flat idx files: laid out for torchvision by the DataModule
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/finetune.py",
            "--pretrain_seconds",
            "2",
            "--seconds",
            "2",
            "--fashion_root",
            str(tmp_path / "fashion"),
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [r["arm"] for r in result["arms"]] == ["scratch", "full", "layer_decay", "linear_probe"]
    probe = result["arms"][-1]
    assert probe["trainable_params"] == 64 * 10 + 10  # the head alone
    assert all(r["steps"] > 0 and 0.0 <= r["digits_test_acc"] <= 1.0 for r in result["arms"])
    assert "| linear_probe |" in proc.stdout
