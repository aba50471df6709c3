"""K-line (OHLCV candlestick) and multivariate time-series forecasting.

* :class:`KLineDataModule` (:mod:`.data`): OHLCV bars (CSV/Parquet, one file, a folder or a long
  table) to feature windows with future log returns or closes as targets; :func:`read_bars` parses
  the common layouts, :mod:`.features` builds the per-bar features.
* :class:`MultivariateDataModule` (:mod:`.multivariate`): any CSV of numeric columns under the
  long-term forecasting protocol (ETTh/ETTm borders, M/S/MS).
* :mod:`.windows`: the windows, split borders, calendar and loaders both DataModules share;
  :class:`DataScale` (:mod:`.scale`): what the model must know of the data's units.
* :mod:`.networks` (torch modules only): :class:`ForecastNet`, a closed-form linear path (:class:`LinearPath`)
  plus a Transformer on the shared core's encoder as a residual, with RevIN and a channel-independent or
  channel-mixing direct multi-horizon head (or either part alone). Its backbone makes the tokens:
  :class:`PatchBackbone` (``patches``, PatchTST), :class:`VariateBackbone` (``variates``, iTransformer) or
  :class:`BarBackbone` (``bars``, one token per bar). ``PatchTST`` is its earlier name.
* :class:`KLineForecaster` (:mod:`.module`): fits the linear path, trains the residual, keeps it only
  where validation says so, and evaluates the model, scoring the baselines of :mod:`.baselines` (the
  strongest the closed-form :class:`LinearBaseline`) on the same test windows (:mod:`.summary`) with the
  finance metrics of :mod:`.metrics` and a cost-aware backtest (:mod:`.backtest`); ``forecast(bars)``
  forecasts new bars from a checkpoint alone (:mod:`.inference`); :class:`ForecastWriter`
  (:mod:`.writer`) writes the forecasts of ``predict``.
"""

from .baselines import LinearBaseline, drift, mean_forecast, moving_average, persistence
from .data import KLineDataModule
from .io import read_bars
from .metrics import ForecastMetrics
from .module import KLineForecaster
from .multivariate import MultivariateDataModule
from .networks import (
    BarBackbone,
    ForecastNet,
    LinearPath,
    PatchBackbone,
    PatchTST,
    RevIN,
    RevINStats,
    VariateBackbone,
    n_patches,
    patchify,
)
from .scale import DataScale, rebuild_prices
from .summary import summary_text
from .windows import EpochShuffleSampler, WindowDataset, chronological_borders, ett_borders, next_timestamps
from .writer import ForecastWriter

__all__ = [
    "BarBackbone",
    "DataScale",
    "EpochShuffleSampler",
    "ForecastMetrics",
    "ForecastNet",
    "ForecastWriter",
    "KLineDataModule",
    "KLineForecaster",
    "LinearBaseline",
    "LinearPath",
    "MultivariateDataModule",
    "PatchBackbone",
    "PatchTST",
    "RevIN",
    "RevINStats",
    "VariateBackbone",
    "WindowDataset",
    "chronological_borders",
    "drift",
    "ett_borders",
    "mean_forecast",
    "moving_average",
    "n_patches",
    "next_timestamps",
    "patchify",
    "persistence",
    "read_bars",
    "rebuild_prices",
    "summary_text",
]
