"""The cost-aware backtest on series whose answers are known by hand: a perfect forecaster, a random
one, costs that eat an edge, no look-ahead, drawdown and Sharpe, a panel."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline.evaluation.backtest import (
    backtest,
    beats_line,
    equity_curve,
    max_drawdown,
    periods_per_year,
    positions,
    strategy_returns,
)
from lightning_tf.kline.settings import Loading


def _frame(realised: np.ndarray, **signals: np.ndarray) -> pd.DataFrame:
    times = pd.bdate_range("2020-01-01", periods=len(realised))
    return pd.DataFrame({"time": times, "ticker": 0, "realised": realised, **signals})


def test_positions_and_costs_by_hand() -> None:
    assert positions(np.array([0.5, -0.2, 0.0, 1e-9])).tolist() == [1, 0, 0, 1]
    assert positions(np.array([0.5, -0.2, 0.0]), short=True).tolist() == [1, -1, 0]
    # long, long, flat, short: trades 1 (enter), 0, 1, 1 sides; 10 bp per side
    pos = np.array([1.0, 1.0, 0.0, -1.0])
    r = np.log(np.array([1.01, 0.98, 1.05, 0.90]))
    net = strategy_returns(pos, r, cost_bps=10)
    np.testing.assert_allclose(net, [0.01 - 0.001, -0.02, 0.0 - 0.001, 0.10 - 0.001])
    assert equity_curve(net)[-1] == pytest.approx(1.009 * 0.98 * 0.999 * 1.099)


def test_max_drawdown_and_periods_per_year() -> None:
    # up 10%, down to 0.88 (-20% from the peak 1.1), back up
    assert max_drawdown(np.array([0.1, -0.2, 0.5])) == pytest.approx(0.2)
    assert max_drawdown(np.array([-0.5])) == pytest.approx(0.5)  # the start counts as a peak
    assert periods_per_year(pd.bdate_range("2020-01-01", "2022-12-31")) == pytest.approx(261, abs=1.5)
    assert periods_per_year(pd.DatetimeIndex(["2020-01-01"])) == 252.0


def test_a_perfect_forecaster_is_long_exactly_on_up_bars() -> None:
    rng = np.random.default_rng(0)
    r = rng.normal(0, 0.01, 500)
    stats, curves = backtest(_frame(r, model=r), ["model", "buy_and_hold"], cost_bps=0.0, ppy=252)
    expected = np.prod(np.where(r > 0, np.exp(r), 1.0)) - 1
    assert stats["model"]["cum_return"] == pytest.approx(expected)
    assert stats["model"]["hit_rate"] == 1.0 and stats["model"]["exposure"] == pytest.approx(np.mean(r > 0))
    assert stats["model"]["max_drawdown"] == 0.0
    assert stats["buy_and_hold"]["cum_return"] == pytest.approx(math.exp(r.sum()) - 1)
    assert stats["model"]["sharpe"] > stats["buy_and_hold"]["sharpe"]
    assert curves["model"].iloc[-1] == pytest.approx(1 + expected)
    assert beats_line(stats, 0.0, False).startswith(
        "after 0 bp per side, the model's long/flat strategy beats buy-and-hold"
    )


def test_a_random_forecaster_has_no_edge_and_pays_its_turnover() -> None:
    """Signals independent of the returns: hit rate about one half, a Sharpe near zero, and turnover about
    one half of the bars (a coin changes its side every other bar)."""
    rng = np.random.default_rng(1)
    r = rng.normal(0, 0.01, 20_000)
    stats, _ = backtest(_frame(r, model=rng.normal(size=len(r))), ["model"], cost_bps=0.0, short=True, ppy=252)
    assert stats["model"]["hit_rate"] == pytest.approx(0.5, abs=0.02)
    assert abs(stats["model"]["sharpe"]) < 0.5
    assert stats["model"]["turnover"] == pytest.approx(1.0, abs=0.05)  # long <-> short is two sides


def test_costs_eat_a_small_edge() -> None:
    """A forecaster right 55% of the time, trading every bar: profitable without costs, a loss at 50 bp."""
    rng = np.random.default_rng(2)
    r = rng.normal(0, 0.01, 5000)
    right = rng.random(len(r)) < 0.55
    signal = np.where(right, np.sign(r), -np.sign(r))
    free, _ = backtest(_frame(r, model=signal), ["model"], cost_bps=0.0, short=True, ppy=252)
    costly, _ = backtest(_frame(r, model=signal), ["model"], cost_bps=50.0, short=True, ppy=252)
    assert free["model"]["cum_return"] > 0 and free["model"]["sharpe"] > 1
    assert costly["model"]["cum_return"] < 0 and costly["model"]["sharpe"] < 0
    assert free["model"]["hit_rate"] == costly["model"]["hit_rate"]  # costs do not move the calls


def test_no_look_ahead_a_forecast_only_ever_meets_the_next_bar() -> None:
    """Shifting the signal one bar later (using the bar it trades) changes the result; the position of bar t
    multiplies the return of bar t+1 only: a forecaster that knows the return of the bar just closed (a
    momentum call) earns nothing on a series without momentum."""
    r = np.array([0.01, -0.02, 0.03, -0.01, 0.02, -0.03] * 50)  # alternating: no momentum to exploit
    last = np.concatenate(([0.0], r[:-1]))  # the return of the bar already closed
    stats, _ = backtest(_frame(r, model=last), ["model"], cost_bps=0.0, ppy=252)
    assert stats["model"]["hit_rate"] == 0.0  # alternation: yesterday's sign is always wrong


def test_a_panel_is_held_in_equal_weight() -> None:
    times = pd.bdate_range("2021-01-01", periods=3)
    frame = pd.DataFrame(
        {
            "time": list(times) * 2,
            "ticker": [0] * 3 + [1] * 3,
            "realised": np.log([1.1, 1.1, 1.1, 0.9, 0.9, 0.9]),
            "model": [1, 1, 1, 1, 1, 1],
        }
    )
    stats, curves = backtest(frame, ["model"], cost_bps=0.0, ppy=252)
    # each bar: half in +10%, half in -10%: 0 return
    assert stats["model"]["cum_return"] == pytest.approx(0.0, abs=1e-12)
    assert list(curves.index) == list(times)


def test_the_model_backtests_its_test_windows_and_draws_the_equity(tmp_path: Path) -> None:
    """On price data the test summary holds the backtest of the model, buy-and-hold and the baselines on
    every test window; with a logger the equity curves land in the run folder (CSV and PNG)."""
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    from lightning_tf.kline import KLineDataModule, KLineForecaster
    from tests.helpers.kline import TINY, write_bars

    write_bars(tmp_path / "bars.csv", n=300)
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=2, loading=Loading(batch_size=64))
    model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=2, backtest_cost_bps=10.0, **TINY)
    t = L.Trainer(
        max_epochs=1,
        logger=CSVLogger(tmp_path / "logs"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    t.fit(model, dm)
    t.test(model, dm, verbose=False)
    bt = model.test_summary["backtest"]
    assert bt["cost_bps"] == 10.0 and bt["bars"] == len(dm.datasets["test"])
    assert set(bt["strategies"]) == {"model", "buy_and_hold", "mean", "linear"}
    assert bt["verdict"].startswith("after 10 bp per side, the model's long/flat strategy ")
    # buy-and-hold by hand: the product of the test bars' next-bar simple returns, less one entry cost
    realised = torch.cat([dm.inverse_targets(b["y"], b["ticker"])[:, 0, 0] for b in dm.test_dataloader()])
    expected = (1 - 10e-4 + np.expm1(realised[0].item())) * np.prod(np.exp(realised[1:].double().numpy())) - 1
    assert bt["strategies"]["buy_and_hold"]["cum_return"] == pytest.approx(expected, rel=1e-4)
    run = Path(t.logger.log_dir)
    curves = pd.read_csv(run / "backtest.csv", index_col=0)
    assert list(curves.columns) == ["model", "buy_and_hold", "mean", "linear"] and len(curves) == bt["bars"]
    assert (run / "backtest.png").stat().st_size > 10_000
    # the report the CLI prints: the tables, the selection line, the backtest in percent and its verdict
    report = model.test_report()
    assert report.startswith("Test windows, original units:") and "Test windows, prices:" in report
    assert "tested model: " in report and report.endswith(bt["verdict"])
    hold = bt["strategies"]["buy_and_hold"]
    assert f"{hold['cum_return']:+.1%}" in report and f"{hold['exposure']:.1%}" in report
