"""The universe walk-forward benchmark runs end to end (``--quick``: 30 tickers, 2 short folds, one backbone) and
writes its page: the forecasters' tables, one verdict per baseline, the cost and the machine. No number is
asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_universe_benchmark_smoke(tmp_path: Path) -> None:
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = tmp_path / "universe"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/universe.py",
            "--quick",
            "--backbones",
            "patches",
            "--workdir",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    page = Path(f"{out}.md").read_text(encoding="utf-8")
    assert "| | RankIC | RankICIR | RankIC t | long-short gross ann. return | long-short net ann. return |" in page
    assert "| patches, residual always kept |" in page
    for name in ("Transformer (patches)", "linear path", "momentum (20 bars)"):
        assert f"| {name} |" in page
    assert "* Transformer (patches) vs momentum (20 bars):" in page and "Machine: " in page
    assert "| patches |" in page and "Equal-weight universe:" in page
    payload = json.loads(Path(f"{out}.json").read_text())
    assert set(payload["folds"]) == {"1", "2"} and "Transformer (patches)" in payload["pooled"]
    # the page is written again from the saved runs alone, the same
    again = subprocess.run(
        [sys.executable, "benchmarks/universe.py", "--report_only", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert Path(f"{out}.md").read_text(encoding="utf-8") == page
