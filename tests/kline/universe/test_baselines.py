"""Universe baselines: momentum predictions from bars (values by hand, the contract of the predictions
frame), flattened windows, and LightGBM on a planted nonlinear function."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.universe.baselines import (
    LightGBMBaseline,
    flatten_windows,
    momentum_predictions,
    realised_log_returns,
)
from lightning_tf.kline.universe.portfolio import evaluate_predictions, information_coefficients


def _bars(n_dates=60, tickers=("AAA", "BBB", "CCC", "DDD"), seed=0):
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range("2020-01-01", periods=n_dates)
    rows = []
    for i, ticker in enumerate(tickers):
        close = 10.0 * (i + 1) * np.exp(np.cumsum(rng.normal(0.0, 0.02, n_dates)))
        rows.append(pd.DataFrame({"date": dates, "ticker": ticker, "close": close}))
    return pd.concat(rows, ignore_index=True)


def test_momentum_is_the_past_window_log_return_and_realised_the_next_bars():
    bars = _bars()
    dates = pd.bdate_range("2020-01-01", periods=60)
    frame = momentum_predictions(bars, dates[[25, 40]], window=20, horizon=2)
    assert list(frame.columns) == ["date", "ticker", "step", "prediction", "realised"]
    assert len(frame) == 2 * 4 * 2
    close = bars.pivot(index="date", columns="ticker", values="close")
    row = frame[(frame["date"] == dates[40]) & (frame["ticker"] == "CCC") & (frame["step"] == 2)].iloc[0]
    assert row["prediction"] == pytest.approx(np.log(close["CCC"].iloc[40] / close["CCC"].iloc[20]))
    assert row["realised"] == pytest.approx(np.log(close["CCC"].iloc[42] / close["CCC"].iloc[41]))
    step1 = frame[(frame["date"] == dates[40]) & (frame["ticker"] == "CCC") & (frame["step"] == 1)].iloc[0]
    assert step1["prediction"] == row["prediction"]
    assert step1["realised"] == pytest.approx(np.log(close["CCC"].iloc[41] / close["CCC"].iloc[40]))


def test_momentum_leaves_out_origins_without_history_or_future():
    bars = _bars()
    dates = pd.bdate_range("2020-01-01", periods=60)
    frame = momentum_predictions(bars, dates, window=20)
    # origins 20..58 have 20 bars behind and one ahead
    assert frame["date"].min() == dates[20] and frame["date"].max() == dates[58]
    assert frame["prediction"].notna().all() and frame["realised"].notna().all()
    assert len(frame) == 39 * 4


def test_momentum_counts_each_tickers_own_bars():
    bars = _bars()
    dates = pd.bdate_range("2020-01-01", periods=60)
    gappy = bars.drop(bars[(bars["ticker"] == "BBB") & bars["date"].isin(dates[30:35])].index)
    frame = momentum_predictions(gappy, [dates[45]], window=20)
    close = gappy[gappy["ticker"] == "BBB"].set_index("date")["close"]
    position = close.index.get_loc(dates[45])
    expected = np.log(close.iloc[position] / close.iloc[position - 20])
    assert frame.set_index("ticker").loc["BBB", "prediction"] == pytest.approx(expected)


def test_momentum_on_a_planted_trend_has_positive_ic_and_feeds_the_evaluation():
    # each ticker has a persistent drift: past and future returns share its sign and size
    rng = np.random.default_rng(1)
    dates = pd.bdate_range("2019-01-01", periods=120)
    drifts = np.linspace(-0.004, 0.004, 20)
    rows = [
        pd.DataFrame(
            {"date": dates, "ticker": f"T{i:02d}", "close": np.exp(np.cumsum(d + rng.normal(0, 0.01, len(dates))))}
        )
        for i, d in enumerate(drifts)
    ]
    frame = momentum_predictions(pd.concat(rows), dates, window=20)
    assert information_coefficients(frame)["ic"].mean() > 0.1
    result = evaluate_predictions(frame, top_k=3, n_drop=1, n_quantiles=4)
    assert result.summary["long_short_annual_return"] > 0


def test_realised_log_returns_and_bad_bars():
    bars = _bars()
    dates = pd.bdate_range("2020-01-01", periods=60)
    realised = realised_log_returns(bars, [dates[59]], horizon=1)
    assert realised.empty  # no bar after the last one
    with pytest.raises(ValueError, match="bars has no column 'close'"):
        momentum_predictions(bars.drop(columns="close"), dates)
    bad = bars.copy()
    bad.loc[3, "close"] = -1.0
    with pytest.raises(ValueError, match="column 'close' has 1 missing or non-positive"):
        momentum_predictions(bad, dates)
    with pytest.raises(ValueError, match="appears more than once"):
        momentum_predictions(pd.concat([bars, bars.iloc[:1]]), dates)


def test_flatten_windows():
    x = np.arange(2 * 3 * 4, dtype=float).reshape(2, 3, 4)  # (N, L, C)
    flat = flatten_windows(x)
    assert flat.shape == (2, 12)
    np.testing.assert_array_equal(flat[1], x[1].reshape(-1))
    with_cov = flatten_windows(x, np.array([[7.0], [8.0]]))
    assert with_cov.shape == (2, 13) and with_cov[1, -1] == 8.0
    with pytest.raises(ValueError, match=r"x must be \(N, L, C\)"):
        flatten_windows(x[0])
    with pytest.raises(ValueError, match="covariates must be"):
        flatten_windows(x, np.ones((3, 1)))


def _planted(n, rng):
    x = rng.uniform(-1, 1, size=(n, 8, 2))  # (N, L, C)
    y = np.sin(3 * x[:, -1, 0]) * x[:, -2, 1] + np.where(x[:, 0, 0] > 0, 0.5, -0.5) + rng.normal(0, 0.1, n)
    return flatten_windows(x), y


def test_lightgbm_learns_a_planted_nonlinear_function_and_is_deterministic():
    pytest.importorskip("lightgbm")
    rng = np.random.default_rng(2)
    x_train, y_train = _planted(2000, rng)
    x_val, y_val = _planted(500, rng)
    x_test, y_test = _planted(500, rng)
    model = LightGBMBaseline(learning_rate=0.2, num_leaves=15, n_estimators=1000, early_stopping_rounds=20)
    model.fit(x_train, y_train, x_val, y_val)
    mse = np.mean((model.predict(x_test) - y_test) ** 2)
    mean_mse = np.mean((y_train.mean() - y_test) ** 2)
    assert mse < 0.25 * mean_mse
    assert 0 < model.best_iteration < 1000 - 20  # stopped early on validation
    again = LightGBMBaseline(learning_rate=0.2, num_leaves=15, n_estimators=1000, early_stopping_rounds=20).fit(
        x_train, y_train, x_val, y_val
    )
    np.testing.assert_array_equal(again.predict(x_test), model.predict(x_test))
    other = LightGBMBaseline(learning_rate=0.2, num_leaves=15, n_estimators=1000, early_stopping_rounds=20, seed=1).fit(
        x_train, y_train, x_val, y_val
    )
    assert not np.array_equal(other.predict(x_test), model.predict(x_test))  # the seed is used


def test_lightgbm_bad_inputs():
    pytest.importorskip("lightgbm")
    model = LightGBMBaseline(n_estimators=5)
    with pytest.raises(RuntimeError, match="call fit"):
        model.predict(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="x_train has 4 rows, y_train 3"):
        model.fit(np.zeros((4, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="give both x_val and y_val"):
        model.fit(np.zeros((4, 2)), np.zeros(4), x_val=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="y_train has 1 NaN"):
        model.fit(np.zeros((4, 2)), np.array([0.0, np.nan, 1.0, 2.0]))
    model.fit(np.random.default_rng(0).normal(size=(50, 2)), np.arange(50.0))
    with pytest.raises(ValueError, match=r"x must be \(N, 2\)"):
        model.predict(np.zeros((2, 3)))


def test_lightgbm_missing_says_how_to_install(monkeypatch):
    import importlib

    from lightning_tf.kline.universe import baselines

    real = importlib.import_module

    def fake(name, *args):
        if name == "lightgbm":
            raise ImportError("No module named 'lightgbm'")
        return real(name, *args)

    monkeypatch.setattr(baselines.importlib, "import_module", fake)
    with pytest.raises(ImportError, match=r"pip install 'lightning-tf\[quant\]'"):
        LightGBMBaseline().fit(np.zeros((4, 2)), np.zeros(4))


SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"
UNIVERSE = SHARED / "kline_us_universe" / "us_stocks_2005_2012.csv.gz"


@pytest.mark.integration
@pytest.mark.skipif(not UNIVERSE.exists(), reason="the shared US universe is absent")
def test_momentum_on_the_us_universe_equals_alphalens_and_empyrical():
    """A real universe (354 stocks, 2012): our rank IC equals alphalens', the portfolio numbers empyrical's."""
    alphalens = pytest.importorskip("alphalens")
    empyrical = pytest.importorskip("empyrical")
    bars = pd.read_csv(UNIVERSE, parse_dates=["date"], usecols=["date", "ticker", "close"])
    bars = bars[bars["date"] >= "2011-10-01"]
    origins = bars["date"][bars["date"] >= "2012-01-01"].unique()
    frame = momentum_predictions(bars, origins, window=20)
    assert frame.groupby("date").size().min() > 300
    result = evaluate_predictions(frame, top_k=30, n_drop=3, cost_bps=10)
    data = frame.set_index(["date", "ticker"]).sort_index().rename_axis(["date", "asset"])
    factor_data = pd.DataFrame({"factor": data["prediction"], "1D": np.expm1(data["realised"])})
    theirs = alphalens.performance.factor_information_coefficient(factor_data)["1D"]
    np.testing.assert_allclose(result.ic["rank_ic"].to_numpy(), theirs.to_numpy(), atol=1e-12)
    net = result.returns["long_only_net"].to_numpy()
    bench = result.returns["benchmark"].to_numpy()
    s = result.summary
    assert s["long_only_annual_return"] == pytest.approx(empyrical.annual_return(net), rel=1e-10)
    assert s["long_only_sharpe"] == pytest.approx(empyrical.sharpe_ratio(net), rel=1e-10)
    assert s["long_only_information_ratio"] == pytest.approx(empyrical.excess_sharpe(net, bench) * np.sqrt(252))
    assert 0 < s["long_only_turnover"] <= 2 * 3 / 30 + 1 / len(net)  # at most n_drop names a day, plus the entry
