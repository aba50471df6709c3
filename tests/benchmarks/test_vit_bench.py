"""The ViT benchmark still runs: its weight copy reproduces timm's logits (the script aborts otherwise)
and it prints the comparison table. No speed is asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_vit_benchmark_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/vit.py",
            "--quick",
            "--repeats",
            "2",
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
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| size | image | patch | d | depth | batch | mode | ours img/s | timm img/s | ours/timm |" in proc.stdout
    assert proc.stdout.count("| digits |") == 2 and proc.stdout.count("| cifar |") == 2
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert all(r["ours_img_s"] > 0 and r["timm_img_s"] > 0 for r in rows)
