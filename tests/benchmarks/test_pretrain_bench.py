"""The pretraining benchmark runs end to end (``--quick``: a generated corpus and universe, one objective, three
rows) and writes its page: the corpus, the pretraining, the rows beside the baselines, the verdict, the residual's
own RankIC per fold and the cost; then writes it again from the saved runs (reading only its JSON: nothing appears
under the default ``--workdir``, the checkout's runs/, which the session checks). No number is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_pretrain_benchmark_smoke(tmp_path: Path) -> None:
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = tmp_path / "pretrain"
    args = ["--quick", "--objectives", "forecast", "--rows", "scratch", "zero_shot", "frozen"]
    proc = subprocess.run(
        [sys.executable, "benchmarks/pretrain.py", *args, "--workdir", str(tmp_path / "work"), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    page = Path(f"{out}.md").read_text(encoding="utf-8")
    for row in ("from scratch (us_universe.yaml)", "pretrained, zero-shot", "pretrained, frozen backbone", "LightGBM"):
        assert f"| {row} |" in page, row
    assert "| forecast |" in page and "tickers in the panel" in page and "Machine: " in page
    assert "* pretrained, frozen backbone: RankIC" in page and "### The Transformer residual's own RankIC" in page
    payload = json.loads(Path(f"{out}.json").read_text())
    assert payload["corpus"]["universe_files_left_out"] == 0 and payload["pretrain"]["forecast"]["steps"] == 10
    again = subprocess.run(
        [sys.executable, "benchmarks/pretrain.py", "--report_only", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert Path(f"{out}.md").read_text(encoding="utf-8") == page
