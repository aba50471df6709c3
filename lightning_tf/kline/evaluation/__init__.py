"""How a forecaster is judged: finance metrics (:mod:`.metrics`), honest baselines scored on the same
windows (:mod:`.baselines`), the residual's keep-or-drop rule chosen on validation (:mod:`.selection`),
the test summary beside the baselines (:mod:`.summary`), the cost-aware backtest (:mod:`.backtest`), the
test report and its figures (:mod:`.report`, :mod:`.plots`). Functions of tensors, the data's scale, a
logger or a path; nothing here takes the LightningModule.

Over a universe of tickers: the portfolio evaluation of a predictions frame (:mod:`.portfolio`: IC,
quantile returns, qlib's TopkDropout portfolios, probabilistic scores) and the quant baselines that make
such frames (:mod:`.universe_baselines`: momentum, LightGBM). Those two need no torch.

The names below load on first use (PEP 562), so ``import lightning_tf.kline.evaluation.portfolio`` stays
free of torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_tf import lazy_exports

# eager: the function must win over the submodule of the same name (backtest.py needs no torch)
from .backtest import backtest

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from .baselines import LinearBaseline, drift, mean_forecast, moving_average, persistence
    from .metrics import ForecastMetrics
    from .portfolio import PortfolioEvaluation, evaluate_predictions, probabilistic_scores
    from .selection import ResidualSelection
    from .summary import summary_text
    from .universe_baselines import LightGBMBaseline, flatten_windows, momentum_predictions

_WHERE = {
    "ForecastMetrics": ".metrics",
    "LightGBMBaseline": ".universe_baselines",
    "LinearBaseline": ".baselines",
    "PortfolioEvaluation": ".portfolio",
    "ResidualSelection": ".selection",
    "drift": ".baselines",
    "evaluate_predictions": ".portfolio",
    "flatten_windows": ".universe_baselines",
    "mean_forecast": ".baselines",
    "momentum_predictions": ".universe_baselines",
    "moving_average": ".baselines",
    "persistence": ".baselines",
    "probabilistic_scores": ".portfolio",
    "summary_text": ".summary",
}

__all__ = sorted([*_WHERE, "backtest"])
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
