"""The windows of a forecast: many series read together (a server's batch, a panel's tickers) give each series the
window it gets alone, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_tf.kline.inference import SeriesWindow, windows_of_series
from lightning_tf.kline.scale import DataScale

FEATURES = ["log_return", "high_rel", "volatility", "volume_zscore", "log_volume"]


def _columns(n: int, seed: int, nan_rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    level = 10.0 ** rng.uniform(-2, 4)  # every series in its own units
    close = level * np.exp(np.cumsum(rng.normal(0, 0.02, n)))
    open_ = close * np.exp(rng.normal(0, 0.01, n))
    turnover = rng.lognormal(0, 1, n)
    turnover[:nan_rows] = np.nan  # a covariate that starts late: a longer warm-up for this series
    return {
        "timestamp": np.datetime64("2024-01-01") + np.arange(n).astype("timedelta64[D]"),
        "open": open_,
        "high": np.fmax(open_, close) * 1.01,
        "low": np.fmin(open_, close) * 0.99,
        "close": close,
        "volume": rng.lognormal(12, 1, n),
        "turnover": turnover,
    }


@pytest.mark.parametrize("covariate", [True, False])
@pytest.mark.parametrize("context_len", [16, 40])
def test_series_read_together_get_the_windows_they_get_alone(context_len: int, covariate: bool) -> None:
    """Series of two lengths, scaled by their training statistics or their own history, with warm-ups of several
    lengths in one group (a covariate that starts late), and one with too few usable bars: each window (inputs,
    targets, statistics, anchor, what scaled it) equals the one of the series alone, and the short one gets its
    own error."""
    rng = np.random.default_rng(context_len)
    c = len(FEATURES) + covariate
    trained = {"AAA": (rng.normal(0, 1, c), rng.uniform(0.5, 2, c), rng.normal(0, 1, 1), rng.uniform(0.5, 2, 1))}
    specs = [(90, "AAA", 0), (90, "b", 0), (90, "c", 7), (70, "d", 3), (90, "AAA", 30), (90, "e", 25), (70, "f", 0)]
    specs.append((90, "short", 90 - context_len + 1))  # one usable bar short
    series = [(name, _columns(n, k, nan_rows), f"file{k}") for k, (n, name, nan_rows) in enumerate(specs)]
    if not covariate:  # the warm-ups then differ by the holes of the volume
        for (_, columns, _), (_, _, nan_rows) in zip(series, specs, strict=True):
            columns["volume"][:nan_rows] = np.nan
    (fm, fs, tm, ts) = trained["AAA"]
    scale = DataScale(
        feature_names=[*FEATURES, "turnover"] if covariate else FEATURES,
        target_names=["log_return"],
        target_kind="return",
        ticker_names=["AAA"],
        feature_mean=[fm],
        feature_std=[fs],
        target_mean=[tm],
        target_std=[ts],
        has_prices=True,
        volatility_window=5,
        volume_window=10,
        covariates={"past": ["turnover"]} if covariate else {},
    )
    kwargs = dict(scale=scale, context_len=context_len)
    together = windows_of_series(series, **kwargs)  # type: ignore[arg-type]
    for one, window in zip(series, together, strict=True):
        (alone,) = windows_of_series([one], **kwargs)  # type: ignore[arg-type]
        if isinstance(alone, ValueError):
            assert isinstance(window, ValueError) and str(window) == str(alone)
            continue
        assert isinstance(window, SeriesWindow) and isinstance(alone, SeriesWindow)
        for key in ("x", "raw_target", "target_mean", "target_std"):
            assert np.array_equal(getattr(window, key), getattr(alone, key)), (one[0], key)
        assert (window.name, window.anchor, window.scaled_by) == (alone.name, alone.anchor, alone.scaled_by)
        assert np.isfinite(window.x).all()
    assert str(together[-1]).startswith("file7: ticker 'short' has")
    scaled = [w.scaled_by for w in together if isinstance(w, SeriesWindow)]
    assert scaled.count("training statistics of 'AAA'") == 2 and sum("own history" in s for s in scaled) == 5
