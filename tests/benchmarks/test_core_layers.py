"""The core-layer benchmark still runs: its weight copy reproduces torch's outputs (the script
aborts otherwise) and it prints the comparison table. No speed is asserted here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_core_layers_benchmark_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/core_layers.py",
            "--quick",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--json",
            str(tmp_path / "out.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| layer | shape | mode | ours tok/s | torch tok/s | ours/torch | ours/torch (fastest) |" in proc.stdout
    assert proc.stdout.count("| encoder |") == 4 and proc.stdout.count("| decoder |") == 4
    assert (tmp_path / "out.json").stat().st_size > 0
