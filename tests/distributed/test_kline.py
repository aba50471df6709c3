"""K-line forecasting under DDP (2 CPU processes, gloo) against one process at the same global batch.

Every test window must be scored exactly once. Lightning's DistributedSampler would pad the 147 test
windows to 148 by repeating window 0, and every synced torchmetrics metric would count it twice; the
DataModule's evaluation loaders use :class:`~lightning_tf.training.distributed.UnpaddedDistributedSampler`
instead. ``up_share`` depends only on the data, so it must be EXACTLY equal (counts summed over the
processes); the other metrics come from weights that agree to float32 precision after 6 steps
(measured: 6e-7 relative at most, 2e-5 for the correlations, merged from per-process float32
moments). A repeated window moves the metrics by about 1/147 = 7e-3. The two processes read their panel from
a prepared cache (``cache_dir``: rank 0 prepares it, both map it), the one process builds it in memory: the
same windows and metrics either way.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lightning_tf.kline.evaluation.summary import summary_text

from .conftest import Runs

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration


def _close(a: float, b: float, key: str) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    rel = 1e-3 if key.endswith("ic") else 1e-4
    return b == pytest.approx(a, rel=rel, abs=1e-9)


def test_the_two_processes_shared_one_prepared_panel(ddp_runs: Runs) -> None:
    panels = [p for p in (ddp_runs.two / "panel_cache" / "kline").iterdir() if p.is_dir()]
    assert len(panels) == 1 and (panels[0] / "manifest.json").is_file()
    assert not (ddp_runs.one / "panel_cache").exists()


def test_training_keeps_processes_in_step(ddp_runs: Runs) -> None:
    two = ddp_runs.record(2, "kline")
    assert two["global_step"] == [6, 6]
    assert len(set(two["params"])) == 1


def test_every_test_window_scored_once(ddp_runs: Runs) -> None:
    one, two = ddp_runs.record(1, "kline"), ddp_runs.record(2, "kline")
    assert one["sizes"] == two["sizes"] and one["sizes"]["test"] % 2 == 1
    for stage in ("validate", "test"):
        assert one[stage].keys() == two[stage].keys() and one[stage]
        for key, value in one[stage].items():
            if key.endswith("up_share"):
                assert two[stage][key] == value, key  # a function of the windows alone: exact
            else:
                assert _close(value, two[stage][key], key), (key, value, two[stage][key])


def test_baseline_summary_matches_one_process(ddp_runs: Runs) -> None:
    one, two = ddp_runs.record(1, "kline")["test_summary"], ddp_runs.record(2, "kline")["test_summary"]
    forecasts = ("model", "persistence", "mean", "linear")
    assert set(one) == set(two) == {*forecasts, "about", "backtest"}
    assert one["about"] == two["about"]
    for name in forecasts:
        assert one[name].keys() == two[name].keys()
        for scale in one[name]:
            for key, value in one[name][scale].items():
                assert _close(value, two[name][scale][key], key), (name, scale, key)
    for strategy, values in one["backtest"]["strategies"].items():
        for key, value in values.items():
            assert _close(value, two["backtest"]["strategies"][strategy][key], key), (strategy, key)
    for scale in ("orig", "price"):  # the same verdicts ("beats" / "does NOT beat"; the numbers are above)
        assert _verdicts(summary_text(one, scale)) == _verdicts(summary_text(two, scale))
        assert len(_verdicts(summary_text(one, scale))) == 3


def _verdicts(text: str) -> list[str]:
    return [
        line.split(":")[0]
        for line in text.splitlines()
        if line.startswith("model ") and (" beat" in line or " ties " in line)
    ]


def test_forecast_csv_matches_one_process(ddp_runs: Runs) -> None:
    one = pd.read_csv(ddp_runs.one / "forecast" / "forecast.csv")
    two = pd.read_csv(ddp_runs.two / "forecast" / "forecast.csv")
    assert list(two.columns) == list(one.columns)
    # three tickers: process 0 forecast AAA and CCC, process 1 BBB; the file has them in input order, once
    assert list(two["ticker"]) == [t for t in ("AAA", "BBB", "CCC") for _ in range(4)]
    keys = ["ticker", "timestamp", "step"]
    pd.testing.assert_frame_equal(two[keys], one[keys])
    values = [c for c in one.columns if c not in keys]
    pd.testing.assert_frame_equal(two[values], one[values], rtol=1e-4)
    assert sorted(p.name for p in (ddp_runs.two / "forecast").glob("*.png")) == [
        "forecast_AAA.png",
        "forecast_BBB.png",
        "forecast_CCC.png",
    ]


def test_forecast_of_fewer_windows_than_processes(ddp_runs: Runs) -> None:
    # one ticker, two processes: the second forecasts the window again (Lightning needs a batch on every
    # process) and the merge drops the repeat
    one = pd.read_csv(ddp_runs.one / "forecast_one" / "forecast.csv")
    two = pd.read_csv(ddp_runs.two / "forecast_one" / "forecast.csv")
    assert list(two["ticker"]) == ["BBB"] * 4 and list(two["step"]) == [1, 2, 3, 4]
    pd.testing.assert_frame_equal(two, one, rtol=1e-4)
