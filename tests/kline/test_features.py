"""Features on a hand-checkable series, and their causality."""

from __future__ import annotations

from math import log
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.features import FEATURES, SeriesWindows, compute_features, compute_target, feature_matrix
from lightning_tf.kline.reader.io import read_bars

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def bars() -> pd.DataFrame:
    # open  10.0 10.5 10.2 10.8 11.0 10.9 | high 10.6 10.7 10.9 11.2 11.3 11.1
    # low    9.9 10.1 10.0 10.6 10.8 10.5 | close 10.5 10.2 10.8 11.0 10.9 10.6 | volume 1000 1500 1200 ...
    return read_bars(FIXTURES / "english.csv")


def test_price_features_by_hand(bars: pd.DataFrame) -> None:
    f = compute_features(
        bars, ["log_return", "open_rel", "high_rel", "low_rel", "body", "upper_shadow", "lower_shadow"]
    )
    assert f.iloc[0][["log_return", "open_rel", "high_rel", "low_rel"]].isna().all()  # no previous close
    row = f.iloc[1]
    assert row["log_return"] == pytest.approx(log(10.2 / 10.5))
    assert row["open_rel"] == pytest.approx(0.0)  # opened at the previous close
    assert row["high_rel"] == pytest.approx(log(10.7 / 10.5))
    assert row["low_rel"] == pytest.approx(log(10.1 / 10.5))
    assert row["body"] == pytest.approx(log(10.2 / 10.5))  # a red candle: close below open
    assert row["upper_shadow"] == pytest.approx(log(10.7 / 10.5))
    assert row["lower_shadow"] == pytest.approx(log(10.2 / 10.1))
    first = f.iloc[0]
    assert first["body"] == pytest.approx(log(10.5 / 10.0))
    assert first["upper_shadow"] == pytest.approx(log(10.6 / 10.5))
    assert first["lower_shadow"] == pytest.approx(log(10.0 / 9.9))
    assert (f[["upper_shadow", "lower_shadow"]] >= 0).all().all()


def test_volume_volatility_and_calendar_by_hand(bars: pd.DataFrame) -> None:
    f = compute_features(
        bars,
        [
            "log_volume",
            "log_volume_change",
            "volume_zscore",
            "volatility",
            "day_of_week",
            "time_of_day",
            "close",
            "log_close",
        ],
        volatility_window=3,
        volume_window=3,
    )
    assert f["log_volume"].iloc[0] == pytest.approx(log(1001))
    assert f["log_volume_change"].iloc[1] == pytest.approx(log(1501 / 1001))
    lv = np.log1p([1000.0, 1500.0, 1200.0])
    assert np.isnan(f["volume_zscore"].iloc[1])
    assert f["volume_zscore"].iloc[2] == pytest.approx((lv[2] - lv.mean()) / lv.std(ddof=1))
    returns = np.diff(np.log([10.5, 10.2, 10.8, 11.0]))
    assert np.isnan(f["volatility"].iloc[2])  # needs three returns, i.e. four closes
    assert f["volatility"].iloc[3] == pytest.approx(returns.std(ddof=1))
    # 2024-01-02 is a Tuesday (dayofweek 1); 2024-01-08 a Monday.
    assert f["day_of_week"].iloc[0] == pytest.approx(1 / 6 - 0.5)
    assert f["day_of_week"].iloc[4] == pytest.approx(-0.5)
    assert (f["time_of_day"] == -0.5).all()  # daily bars stamp midnight
    assert f["close"].tolist() == pytest.approx([10.5, 10.2, 10.8, 11.0, 10.9, 10.6])
    assert f["log_close"].iloc[3] == pytest.approx(log(11.0))


def test_time_of_day_intraday() -> None:
    ts = pd.to_datetime(["2024-06-18 09:35", "2024-06-18 13:05"])
    one = pd.DataFrame({"timestamp": ts, "open": 1.0, "high": 1.0, "low": 1.0, "close": 1.0, "volume": 1.0})
    tod = compute_features(one, ["time_of_day"])["time_of_day"]
    assert tod.tolist() == pytest.approx([575 / 1440 - 0.5, 785 / 1440 - 0.5])


def test_flat_volume_zscore_is_zero_not_inf(bars: pd.DataFrame) -> None:
    flat = bars.assign(volume=100.0)
    z = compute_features(flat, ["volume_zscore"], volume_window=3)["volume_zscore"]
    assert z.iloc[2:].tolist() == [0.0] * 4


def test_targets(bars: pd.DataFrame) -> None:
    r = compute_target(bars, "log_return")
    assert np.isnan(r[0]) and r[2] == pytest.approx(log(10.8 / 10.2))
    assert compute_target(bars, "close").tolist() == [10.5, 10.2, 10.8, 11.0, 10.9, 10.6]
    with pytest.raises(ValueError, match="target must be 'log_return' or 'close', got 'price'"):
        compute_target(bars, "price")  # type: ignore[arg-type]


def test_every_feature_is_causal() -> None:
    """Changing bars after t leaves every feature at bars <= t unchanged."""
    rng = np.random.default_rng(0)
    n, t = 80, 50
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = close * np.exp(rng.normal(0, 0.005, n))
    bars = pd.DataFrame(
        {
            "timestamp": pd.date_range("2024-01-01 09:30", periods=n, freq="5min"),
            "open": open_,
            "close": close,
            "high": np.maximum(open_, close) * 1.01,
            "low": np.minimum(open_, close) * 0.99,
            "volume": rng.integers(1, 1000, n).astype(float),
        }
    )
    changed = bars.copy()
    changed.loc[t + 1 :, ["open", "high", "low", "close", "volume"]] *= 1.5
    a = compute_features(bars, list(FEATURES), 5, 5)
    b = compute_features(changed, list(FEATURES), 5, 5)
    pd.testing.assert_frame_equal(a.iloc[: t + 1], b.iloc[: t + 1])
    assert not np.allclose(a.iloc[t + 1 :]["volume_zscore"], b.iloc[t + 1 :]["volume_zscore"])


def test_unknown_features() -> None:
    with pytest.raises(ValueError, match=r"unknown feature\(s\) \['rsi'\]; choose from"):
        compute_features(pd.DataFrame(), ["rsi"])
    with pytest.raises(ValueError, match="repeat a name"):
        compute_features(pd.DataFrame(), ["body", "body"])


@pytest.mark.parametrize("window", [2, 5, 20])
def test_the_features_of_many_series_are_each_series_own_bit_for_bit(window: int) -> None:
    """``feature_matrix`` on the columns of B series at once ``(B, n)``: every feature of every series, the rolling
    ones included (one pandas pass over the series laid end to end, :class:`SeriesWindows`), equals the series' own
    features computed alone, bit for bit, whatever the series' levels (1e-5 to 1e7), their holes and the window."""
    rng = np.random.default_rng(window)
    b, n = 12, 90
    scale = 10.0 ** rng.uniform(-5, 7, size=(b, 1))
    close = scale * np.exp(np.cumsum(rng.normal(0, 0.02, (b, n)), axis=1))
    open_ = close * np.exp(rng.normal(0, 0.01, (b, n)))
    columns = {
        "open": open_,
        "high": np.fmax(open_, close) * 1.01,
        "low": np.fmin(open_, close) * 0.99,
        "close": close,
        "volume": rng.lognormal(10, 2, (b, n)) * scale,
    }
    columns["volume"][3, 40] = np.nan  # a hole: its windows are NaN in that series only
    columns["volume"][5, :] = 1000.0  # a flat series: z-score 0
    names = ["log_return", "volatility", "log_volume", "volume_zscore", "body"]
    together = feature_matrix(columns, names, volatility_window=window, volume_window=window)  # (B, n, C)
    for k in range(b):
        alone = feature_matrix({c: v[k] for c, v in columns.items()}, names, window, window)  # (n, C)
        assert np.array_equal(together[k], alone, equal_nan=True), k
    assert np.isnan(together[3, 40 : 40 + window, names.index("volume_zscore")]).all()
    assert not np.isnan(together[4, window + 1 :, names.index("volume_zscore")]).any()


def test_series_windows_never_reach_into_the_series_before() -> None:
    start, end = SeriesWindows(window_size=3, length=4).get_window_bounds(8)
    assert start.tolist() == [0, 0, 0, 1, 4, 4, 4, 5] and end.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
