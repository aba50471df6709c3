"""The image-loader benchmark still runs: its batched evaluation images equal torchvision's
per-image ones (the script aborts otherwise) and it prints the comparison table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_vision_data_benchmark_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/vision_data.py", "--quick", "--json", str(tmp_path / "out.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| dataset | augment | ours img/s | per-image v2 img/s | ours/v2 |" in proc.stdout
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert [r["augment"] for r in rows] == ["none", "flip_crop", "randaugment", "trivialaugment"]
    assert all(r["ours"] > 0 and r["ref"] > 0 for r in rows)
