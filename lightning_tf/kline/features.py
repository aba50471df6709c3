"""Per-bar input features and forecast targets computed from one ticker's canonical bars.

Every feature at bar ``t`` uses bars ``<= t`` only (rolling windows look back), so a window's
inputs never see its targets. Prices enter as log ratios, which are scale-free across tickers and
decades of splits:

=====================  ===================================================================
``log_return``          ``log(close_t / close_{t-1})``
``open_rel``            ``log(open_t / close_{t-1})``  (the overnight gap)
``high_rel``            ``log(high_t / close_{t-1})``
``low_rel``             ``log(low_t / close_{t-1})``
``body``                ``log(close_t / open_t)``
``upper_shadow``        ``log(high_t / max(open_t, close_t))``  (>= 0)
``lower_shadow``        ``log(min(open_t, close_t) / low_t)``  (>= 0)
``log_volume``          ``log(1 + volume_t)``
``log_volume_change``   ``log(1 + volume_t) - log(1 + volume_{t-1})``
``volume_zscore``       z-score of ``log(1 + volume_t)`` over the last ``volume_window`` bars
``volatility``          sample std of ``log_return`` over the last ``volatility_window`` bars
``day_of_week``         ``dayofweek / 6 - 0.5`` (Informer's time-feature convention)
``time_of_day``         ``minutes since midnight / 1440 - 0.5`` (intraday bars)
``close``               the close price itself (for ``target="close"``)
``log_close``           ``log(close_t)``
=====================  ===================================================================

Targets (per bar ``t``; a window ending at ``t`` forecasts rows ``t+1 .. t+F``):
``log_return`` (default) or ``close``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
import pandas as pd
from pandas.api.indexers import BaseIndexer

__all__ = ["DEFAULT_FEATURES", "FEATURES", "Target", "compute_features", "compute_target", "feature_matrix"]

Target = Literal["log_return", "close"]
FEATURES = (
    "log_return",
    "open_rel",
    "high_rel",
    "low_rel",
    "body",
    "upper_shadow",
    "lower_shadow",
    "log_volume",
    "log_volume_change",
    "volume_zscore",
    "volatility",
    "day_of_week",
    "time_of_day",
    "close",
    "log_close",
)
DEFAULT_FEATURES = ["log_return", "open_rel", "high_rel", "low_rel", "log_volume_change", "volatility"]


def check_feature_names(names: list[str]) -> None:
    """Raise a ValueError naming unknown or repeated feature names."""
    unknown = [n for n in names if n not in FEATURES]
    if unknown:
        raise ValueError(f"unknown feature(s) {unknown}; choose from {list(FEATURES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"features {names} repeat a name")
    if not names:
        raise ValueError("features must name at least one feature")


def compute_features(
    bars: pd.DataFrame, names: list[str], volatility_window: int = 20, volume_window: int = 20
) -> pd.DataFrame:
    """Features of one ticker's bars (sorted by time), one column per name, in the given order.

    Args:
        bars: canonical bars of one ticker (``timestamp``, ``open`` ... ``volume``).
        names: feature names from :data:`FEATURES`.
        volatility_window: bars in the rolling std of ``volatility``.
        volume_window: bars in the rolling mean/std of ``volume_zscore``.

    Returns:
        float64 frame ``(n, len(names))`` on the bars' index; the first rows are NaN where a
        feature needs earlier bars (1 for returns, the window length for rolling features).
    """
    values = feature_matrix(bars, names, volatility_window, volume_window)
    return pd.DataFrame(values, columns=list(names), index=bars.index)


def _after_first(x: np.ndarray) -> np.ndarray:
    """``x`` one bar later along the last axis: NaN, then ``x`` without its last bar."""
    return np.concatenate([np.full(x.shape[:-1] + (1,), np.nan), x[..., :-1]], axis=-1)


class SeriesWindows(BaseIndexer):
    """Rolling windows over series of ``length`` rows laid end to end in one column: each row's window holds its
    last ``window_size`` rows within its own series. pandas' rolling kernels start afresh at a window that does not
    overlap the one before (each series' first row), then add and drop rows as over the series alone: each series
    gets the values, bit for bit, that it gets alone (tests/kline/test_features.py)."""

    length: int  # rows per series (BaseIndexer keeps its keyword arguments as attributes)

    def get_window_bounds(
        self,
        num_values: int = 0,
        min_periods: int | None = None,
        center: bool | None = None,
        closed: str | None = None,
        step: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        row = np.arange(num_values, dtype=np.int64)
        first = row - row % self.length  # the first row of each row's series
        return np.maximum(row - self.window_size + 1, first), row + 1


def feature_matrix(
    bars: pd.DataFrame | Mapping[str, np.ndarray],
    names: list[str],
    volatility_window: int = 20,
    volume_window: int = 20,
) -> np.ndarray:
    """:func:`compute_features` as a float64 array ``(n, len(names))`` (column-major, as the frame's
    values are), without building the frame; ``bars`` may also be its columns as arrays. Columns of ``B``
    series of ``n`` bars each ``(B, n)`` give each series' features at once ``(B, n, len(names))``, equal to
    those of each series alone."""
    check_feature_names(names)
    o, h, lo, c = (np.log(np.asarray(bars[k], dtype=np.float64)) for k in ("open", "high", "low", "close"))
    prev_c = _after_first(c)
    log_v = np.log1p(np.asarray(bars["volume"], dtype=np.float64))
    ret = c - prev_c

    def stamps() -> pd.DatetimeIndex:
        return pd.DatetimeIndex(np.asarray(bars["timestamp"]).reshape(-1))

    def rolling(x: np.ndarray, window: int) -> pd.core.window.Rolling:
        if x.ndim == 1:
            return pd.Series(x).rolling(window, min_periods=window)
        # several series end to end in one column, each window kept within its row's series (one pass of pandas'
        # kernel instead of one per series)
        return pd.Series(x.reshape(-1)).rolling(
            SeriesWindows(window_size=window, length=x.shape[-1]), min_periods=window
        )

    def series(values: pd.Series) -> np.ndarray:
        return values.to_numpy().reshape(c.shape)

    def volume_zscore() -> np.ndarray:
        r = rolling(log_v, volume_window)
        mean, std = series(r.mean()), series(r.std())
        # A flat volume stretch has std 0: its z-score is 0, not inf.
        return np.where(std > 0, (log_v - mean) / np.where(std > 0, std, 1.0), np.where(np.isnan(std), np.nan, 0.0))

    make = {
        "log_return": lambda: ret,
        "open_rel": lambda: o - prev_c,
        "high_rel": lambda: h - prev_c,
        "low_rel": lambda: lo - prev_c,
        "body": lambda: c - o,
        "upper_shadow": lambda: h - np.fmax(o, c),
        "lower_shadow": lambda: np.fmin(o, c) - lo,
        "log_volume": lambda: log_v,
        "log_volume_change": lambda: log_v - _after_first(log_v),
        "volume_zscore": volume_zscore,
        "volatility": lambda: series(rolling(ret, volatility_window).std()),
        "day_of_week": lambda: stamps().day_of_week.to_numpy().reshape(c.shape) / 6.0 - 0.5,
        "time_of_day": lambda: (
            (stamps().hour.to_numpy() * 60 + stamps().minute.to_numpy()).reshape(c.shape) / 1440.0 - 0.5
        ),
        "close": lambda: np.exp(c),
        "log_close": lambda: c,
    }
    out = np.empty((len(names), *c.shape), dtype=np.float64)  # (C, [B,] n): each feature contiguous
    for j, name in enumerate(names):
        out[j] = make[name]()
    return np.moveaxis(out, 0, -1)  # ([B,] n, C)


def compute_target(bars: pd.DataFrame | Mapping[str, np.ndarray], target: Target) -> np.ndarray:
    """The forecast quantity at every bar, float64 ``(n,)`` (``(B, n)`` for the columns of B series):
    ``log(close_t / close_{t-1})`` (NaN at
    the first bar) or ``close_t``. A window ending at bar ``t`` predicts its values at ``t+1 .. t+F``."""
    c = np.asarray(bars["close"], dtype=np.float64)
    if target == "log_return":  # of each series, for columns of several (B, n)
        return np.concatenate([np.full(c.shape[:-1] + (1,), np.nan), np.diff(np.log(c), axis=-1)], axis=-1)
    if target == "close":
        return c.copy()
    raise ValueError(f"target must be 'log_return' or 'close', got {target!r}")
