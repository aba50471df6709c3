"""K-line (OHLCV candlestick) and multivariate time-series forecasting.

* :class:`KLineDataModule` (:mod:`.data`), its settings in five typed groups (:mod:`.settings`: :class:`Reading`,
  :class:`Features`, :class:`Splits`, :class:`Covariates`, :class:`Loading`): OHLCV bars (CSV/Parquet, one file, a folder or a long
  table) to feature windows with future log returns or closes as targets; :func:`read_bars`
  (:mod:`.reader`, which needs no torch) parses the common layouts, :mod:`.features` builds the
  per-bar features.
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
  where validation says so, and evaluates the model (:mod:`.evaluation`), scoring the baselines (the
  strongest the closed-form :class:`LinearBaseline`) on the same test windows with finance metrics
  and a cost-aware backtest; ``forecast(bars)``
  forecasts new bars from a checkpoint alone (:mod:`.inference`); :class:`ForecastWriter`
  (:mod:`.writer`) writes the forecasts of ``predict``.
* :class:`KronosTuner` and :class:`KronosBarsDataModule` (:mod:`.kronos_tuning`): a published Kronos fine-tuned on
  raw bars with its own objective.
* :mod:`.universe`: the model judged over a universe of tickers: walk-forward folds, each fold's forecasts
  beside LightGBM and momentum, the TopkDropout portfolios after costs and the walk-forward report.

The names below load on first use (PEP 562), so ``import lightning_tf.kline.reader`` stays free of torch
and Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_tf import lazy_exports

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from .data import KLineDataModule
    from .evaluation.baselines import LinearBaseline, drift, mean_forecast, moving_average, persistence
    from .evaluation.metrics import ForecastMetrics
    from .evaluation.summary import summary_text
    from .handover import DataHandover
    from .kronos_tuning import KronosBarsDataModule, KronosTuner
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
    from .reader.io import read_bars
    from .scale import DataScale, rebuild_prices
    from .settings import Covariates, Features, Loading, Reading, Splits
    from .throughput import BarsPerSecond
    from .windows import WindowDataset, chronological_borders, ett_borders, next_timestamps
    from .writer import ForecastWriter

_WHERE = {
    "BarBackbone": ".networks",
    "BarsPerSecond": ".throughput",
    "Covariates": ".settings",
    "DataHandover": ".handover",
    "Features": ".settings",
    "Loading": ".settings",
    "Reading": ".settings",
    "Splits": ".settings",
    "DataScale": ".scale",
    "ForecastMetrics": ".evaluation.metrics",
    "ForecastNet": ".networks",
    "ForecastWriter": ".writer",
    "KLineDataModule": ".data",
    "KLineForecaster": ".module",
    "KronosBarsDataModule": ".kronos_tuning",
    "KronosTuner": ".kronos_tuning",
    "LinearBaseline": ".evaluation.baselines",
    "LinearPath": ".networks",
    "MultivariateDataModule": ".multivariate",
    "PatchBackbone": ".networks",
    "PatchTST": ".networks",
    "RevIN": ".networks",
    "RevINStats": ".networks",
    "VariateBackbone": ".networks",
    "WindowDataset": ".windows",
    "chronological_borders": ".windows",
    "drift": ".evaluation.baselines",
    "ett_borders": ".windows",
    "mean_forecast": ".evaluation.baselines",
    "moving_average": ".evaluation.baselines",
    "n_patches": ".networks",
    "next_timestamps": ".windows",
    "patchify": ".networks",
    "persistence": ".evaluation.baselines",
    "read_bars": ".reader.io",
    "rebuild_prices": ".scale",
    "summary_text": ".evaluation.summary",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
