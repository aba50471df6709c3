"""How a forecaster is judged: finance metrics (:mod:`.metrics`), honest baselines scored on the same
windows (:mod:`.baselines`), the residual's keep-or-drop rule chosen on validation (:mod:`.selection`),
the test summary beside the baselines (:mod:`.summary`), the cost-aware backtest (:mod:`.backtest`), the
test report and its figures (:mod:`.report`, :mod:`.plots`). Functions of tensors, the data's scale, a
logger or a path; nothing here takes the LightningModule.
"""

from .backtest import backtest
from .baselines import LinearBaseline, drift, mean_forecast, moving_average, persistence
from .metrics import ForecastMetrics
from .selection import ResidualSelection
from .summary import summary_text

__all__ = [
    "ForecastMetrics",
    "LinearBaseline",
    "ResidualSelection",
    "backtest",
    "drift",
    "mean_forecast",
    "moving_average",
    "persistence",
    "summary_text",
]
