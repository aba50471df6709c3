"""A forecaster judged over a universe of tickers as a quant judges it: walk-forward folds, each fold's forecasts
beside the quant baselines', the portfolios they make and one report (qlib's workflow; alphalens' tear sheet).
``lightning-tf walkforward`` runs it fold by fold (``docs/kline.md``, "Universe walk-forward").

* :mod:`.folds`: the folds on a panel's trading dates (:func:`folds`, :class:`Fold`): train, embargo, validate,
  embargo, test, roll.
* :mod:`.predictions`: the predictions frame, its columns declared once (:data:`COLUMNS`).
* :mod:`.forecasts`: a fold's test forecasts as that frame (:meth:`~lightning_tf.kline.KLineForecaster.window_forecasts`
  calls :func:`window_forecasts`), and the baselines beside them (:func:`fold_predictions`).
* :mod:`.baselines`: the quant baselines: the momentum factor and LightGBM on flattened windows.
* :mod:`.kronos`: a published Kronos's zero-shot forecasts from the raw bars at a fold's origins
  (:func:`kronos_column`, :class:`KronosColumn`).
* :mod:`.recorder`: :class:`FoldRecorder`, the callback that writes what a fold keeps.
* :mod:`.portfolio`: a predictions frame's IC, quantile returns, TopkDropout portfolios after costs and
  probabilistic scores (:func:`evaluate_predictions`).
* :mod:`.report`: every forecaster over the folds, pooled and per fold, as ``report.md`` with its charts.

The names below load on first use (PEP 562): :mod:`.folds`, :mod:`.predictions`, :mod:`.baselines`,
:mod:`.portfolio` and :mod:`.report` need no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_tf import lazy_exports

# eager: the function must win over the submodule of the same name (folds.py needs no torch)
from .folds import Fold, folds

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from .baselines import LightGBMBaseline, flatten_windows, momentum_predictions, realised_log_returns
    from .forecasts import WindowForecast, fold_predictions, window_forecasts
    from .kronos import KronosColumn, kronos_column
    from .portfolio import PortfolioEvaluation, evaluate_predictions, probabilistic_scores
    from .predictions import COLUMNS, FORECASTERS, REQUIRED, Column
    from .recorder import FoldRecorder
    from .report import WalkForwardResult, evaluate_forecasters, write_report

_WHERE = {
    "COLUMNS": ".predictions",
    "Column": ".predictions",
    "FORECASTERS": ".predictions",
    "FoldRecorder": ".recorder",
    "KronosColumn": ".kronos",
    "LightGBMBaseline": ".baselines",
    "PortfolioEvaluation": ".portfolio",
    "REQUIRED": ".predictions",
    "WalkForwardResult": ".report",
    "WindowForecast": ".forecasts",
    "evaluate_forecasters": ".report",
    "evaluate_predictions": ".portfolio",
    "flatten_windows": ".baselines",
    "fold_predictions": ".forecasts",
    "kronos_column": ".kronos",
    "momentum_predictions": ".baselines",
    "probabilistic_scores": ".portfolio",
    "realised_log_returns": ".baselines",
    "window_forecasts": ".forecasts",
    "write_report": ".report",
}

__all__ = sorted([*_WHERE, "Fold", "folds"])
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
