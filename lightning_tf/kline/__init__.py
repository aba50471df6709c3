"""K-line (OHLCV candlestick) and multivariate time-series forecasting.

* :class:`KLineDataModule`: OHLCV bars (CSV/Parquet, one file, a folder or a long table) to feature
  windows with future log returns or closes as targets; :func:`read_bars` parses the common layouts.
* :class:`MultivariateDataModule`: any CSV of numeric columns under the long-term forecasting
  protocol (ETTh/ETTm borders, M/S/MS).
* :class:`KLineForecaster`: a patch Transformer (PatchTST) on the shared core's encoder, with RevIN,
  a channel-independent or channel-mixing direct multi-horizon head, baselines scored on the same
  test windows (:mod:`.baselines`) and finance metrics (:mod:`.metrics`).
"""

from .baselines import DLinearBaseline, drift, mean_forecast, moving_average, persistence
from .data import KLineDataModule, MultivariateDataModule
from .io import read_bars
from .layers import RevIN, RevINStats, n_patches, patchify
from .metrics import ForecastMetrics
from .module import KLineForecaster

__all__ = [
    "DLinearBaseline",
    "ForecastMetrics",
    "KLineDataModule",
    "KLineForecaster",
    "MultivariateDataModule",
    "RevIN",
    "RevINStats",
    "drift",
    "mean_forecast",
    "moving_average",
    "n_patches",
    "patchify",
    "persistence",
    "read_bars",
]
