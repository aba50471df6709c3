"""The serving benchmark still runs end to end (``--smoke``: a tiny ViT checkpoint, concurrency 1 and 8, a
200-request mixed run). No speed is asserted here; the printed ratios must be the ratios of the printed
throughputs, and the mixed run must have no wrong status code and lose no good request."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("litserve")

from tests.helpers.serve import save_checkpoint, tiny_vit

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_serve_benchmark_smoke(tmp_path: Path) -> None:
    ckpt = save_checkpoint(tiny_vit(), tmp_path / "vision.ckpt")
    md = tmp_path / "serve.md"
    docs = {p: p.read_text() for p in (ROOT / "docs" / "serve.md", ROOT / "docs" / "benchmarks.md")}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "benchmarks/serve.py", "--smoke", "--tasks", "vision", "--vision", str(ckpt), "--md", str(md)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("machine: ")
    assert {p: p.read_text() for p in docs} == docs  # a smoke run leaves the documentation's tables alone
    page = md.read_text()
    assert "a SMOKE run" in page
    rows = re.findall(
        r"^\| vision \| (batched|unbatched|limit \(offline\)) \| (\d+|-) \| [\d,]+ \| ([0-9.]+) \| "
        r"([0-9.]+) \| ([0-9.]*) ?\|",
        page,
        re.M,
    )
    assert [(r[0], r[1]) for r in rows] == [
        ("batched", "1"),
        ("batched", "8"),
        ("unbatched", "1"),
        ("unbatched", "8"),
        ("limit (offline)", "-"),
    ], page
    limit = float(rows[-1][2])
    by_key = {(r[0], r[1]): float(r[2]) for r in rows}
    for server, c, rate, x_limit, x_unbatched in rows[:-1]:
        assert float(x_limit) == pytest.approx(float(rate) / limit, abs=0.006)
        if server == "batched":
            assert float(x_unbatched) == pytest.approx(float(rate) / by_key[("unbatched", c)], abs=0.006)
    results = json.loads(md.with_suffix(".json").read_text())["results"][0]
    mixed = results["mixed"]
    assert (mixed["requests"], mixed["bad"], mixed["wrong_status"], mixed["good_lost"]) == (200, 20, 0, 0)
    assert results["loads"]["batched/8"]["errors"] == 0
    assert "## Where the time goes" in page
    # the targets' ratios: the median of the paired rounds, each its batched server's rate over the unbatched one's
    rounds = results["rounds"]
    assert len(rounds) == 2 and all(r["ratio"] == pytest.approx(r["batched"] / r["unbatched"]) for r in rounds)
    median = statistics.median(r["ratio"] for r in rounds)
    assert re.search(rf"^\| vision \| [0-9.]+ \([0-9.]+-[0-9.]+\) \w+ \| {median:.2f} \(", page, re.M), page
