"""How a forecaster is judged: finance metrics (:mod:`.metrics`), honest baselines scored on the same
windows (:mod:`.baselines`), the residual's keep-or-drop rule chosen on validation (:mod:`.selection`),
the test summary beside the baselines (:mod:`.summary`), the cost-aware backtest (:mod:`.backtest`), the
test report and its figures (:mod:`.report`, :mod:`.plots`). Functions of tensors, the data's scale, a
logger or a path; nothing here takes the LightningModule. Over a universe of tickers (walk-forward folds,
portfolios, the quant baselines) a forecaster is judged by :mod:`lightning_tf.kline.universe`.

The names below load on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_tf import lazy_exports

# eager: the function must win over the submodule of the same name (backtest.py needs no torch)
from .backtest import backtest

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from .baselines import LinearBaseline, drift, mean_forecast, moving_average, persistence
    from .metrics import ForecastMetrics
    from .selection import ResidualSelection
    from .summary import summary_text

_WHERE = {
    "ForecastMetrics": ".metrics",
    "LinearBaseline": ".baselines",
    "ResidualSelection": ".selection",
    "drift": ".baselines",
    "mean_forecast": ".baselines",
    "moving_average": ".baselines",
    "persistence": ".baselines",
    "summary_text": ".summary",
}

__all__ = sorted([*_WHERE, "backtest"])
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
