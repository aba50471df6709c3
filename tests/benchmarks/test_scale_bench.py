"""The cost-against-size benchmark still runs end to end (``--quick``: tiny corpora, universes and image folders),
measuring each phase in its own process and under 2-process DDP, and prints its tables and targets.
No time or memory is asserted here; the ratios printed must be the ratios of the numbers printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# four minutes of subprocesses that re-prove the benchmark's own tables at toy size (what it measures, the
# prepared corpus and panel and their DDP sharing, is guarded by the integration tier's own tests): make test-slow
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_scale_benchmark_smoke(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    out = tmp_path / "scale.json"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/scale.py",
            "--quick",
            "--work",
            str(tmp_path / "work"),
            "--md",
            str(tmp_path / "scale.md"),
            "--json",
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
    assert proc.stdout.startswith("machine: ") and "load average" in proc.stdout
    assert "| tickers | bars | pandas.read_csv s | setup('fit') s | ours/pandas |" in proc.stdout
    assert "| images | ImageFolder to 1st batch s | ours to 1st batch s |" in proc.stdout
    sections = {s["title"]: s for s in json.loads(out.read_text())["sections"]}
    kline, vision = sections["K-line: a folder of ticker files"], sections["Vision: an image folder"]
    assert [r["tickers"] for r in kline["rows"]] == [20, 60]
    for row in kline["rows"]:
        assert row["rows"] == 300 * row["tickers"] and row["pandas_s"] > 0 and row["ours_s"] > 0
        assert row["ratio"] == pytest.approx(row["ours_s"] / row["pandas_s"])
        assert row["feature_mb"] == pytest.approx(row["rows"] * 6 * 4 / 2**20)  # six float32 features per bar
        assert row["peak_mb"] >= row["steady_mb"] - 1
    assert kline["rows"][-1]["ddp_sum_mb"] == pytest.approx(2 * kline["rows"][-1]["ddp_rank_mb"])
    for row in kline["rows"]:  # the prepared panel: built once (cold), then mapped (warm)
        assert row["cold_s"] > 0 and 0 < row["warm_s"] < row["cold_s"] and row["prepared_mb"] > 0
    assert kline["rows"][-1]["ddp_prepared_mb"] > 0 and kline["rows"][0]["ddp_prepared_mb"] is None
    names = [t["what"] for t in kline["targets"]]
    assert names[:2] == ["60 tickers: setup s <= 4 x pandas + 5 s", "60 tickers: peak MB <= 6 x features + 200 MB"]
    assert all(t["passed"] == (t["value"] <= t["limit"]) for t in kline["targets"])
    text = sections["Text: a parallel corpus"]
    assert [r["pairs"] for r in text["rows"]] == [2000, 4000]
    for row in text["rows"]:
        assert row["ratio"] == pytest.approx(row["cold_s"] / row["limit_s"]) and row["warm_s"] < row["cold_s"]
        # 90% of the pairs trained on (10% + 10% held out is 20%, less the dedup of repeats), two sides of ~27 ids
        assert 0.7 * row["pairs"] * 2 * 20 * 4 / 2**20 < row["int32_ids_mb"] < row["pairs"] * 2 * 40 * 4 / 2**20
    assert text["rows"][-1]["ddp_sum_mb"] == pytest.approx(2 * text["rows"][-1]["ddp_rank_mb"])
    assert all(t["passed"] == (t["value"] <= t["limit"]) for t in text["targets"])
    n_targets = len(names) + len(text["targets"])
    assert sum(line.endswith(("| PASS |", "| FAIL |")) for line in proc.stdout.splitlines()) == n_targets
    for row in vision["rows"]:
        assert row["ours_per_s"] > 0 and row["ratio"] == pytest.approx(row["ours_per_s"] / row["ref_per_s"])
    page = (tmp_path / "scale.md").read_text()
    assert page.startswith("# Cost against size")
    # --merge rebuilds the sections it does not run from the JSON: the same markdown
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import scale

    for data in json.loads(out.read_text())["sections"]:
        assert scale.Section.from_dict(data).markdown() in page
