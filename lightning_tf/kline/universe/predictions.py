"""The predictions frame: what a walk-forward fold writes (``predictions.parquet``), what its gather joins, and what
the portfolio evaluation (:mod:`.portfolio`) and the report (:mod:`.report`) read. Its columns are declared here,
once, in their order in the file (:data:`COLUMNS`).

One row per forecast origin, ticker and horizon step. Every frame has :data:`REQUIRED`; a fold's frame has the
model's columns and the baselines' beside them, NaN where a forecaster has no forecast (LightGBM and the portfolios
use step 1 only). Pure Python and pandas: no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

__all__ = [
    "COLUMNS",
    "FORECASTERS",
    "QUANTILES",
    "REQUIRED",
    "Column",
    "arrange",
    "quantile_column",
    "quantile_level",
]


@dataclass(frozen=True)
class Column:
    """One column of the predictions frame.

    Attributes:
        name: its name (:data:`QUANTILES` stands for the quantile columns, one per level).
        meaning: what it holds.
        forecaster: a forecaster's column: its name in the report; None for the others.
    """

    name: str
    meaning: str
    forecaster: str | None = None


#: the quantile columns' place among :data:`COLUMNS`: ``q0.1``, ``q0.5``, ``q0.9``, ... (:func:`quantile_column`)
QUANTILES = "q<level>"

COLUMNS: tuple[Column, ...] = (
    Column("fold", "the walk-forward fold (the gathered file)"),
    Column("date", "the forecast origin: the date of the window's last bar (datetime64)"),
    Column("ticker", "the ticker (str)"),
    Column("step", "the horizon step, 1..F (int)"),
    Column(
        "prediction",
        "the model's point forecast of the step's log return, as tested (the median of a quantile model); or any "
        "score whose order across tickers is the signal",
        "model",
    ),
    Column(
        "residual",
        "the model with its whole Transformer residual, whatever validation chose (residual: on or blend)",
        "model, residual always kept",
    ),
    Column(
        "residual_alone",
        "what the Transformer adds to the linear path: residual - linear",
        "the Transformer residual alone",
    ),
    Column("realised", "the step's realised log return: bar t + step over bar t + step - 1"),
    Column("target", "the model's own target where it is not that log return (a cross-sectional label, a close)"),
    Column("linear", "the model's closed-form linear path alone (NaN for a model without one)", "linear path"),
    Column(QUANTILES, "a quantile model's forecast quantiles, one column per level"),
    Column("lightgbm", "LightGBM on the model's own inputs (step 1)", "LightGBM"),
    Column("momentum", "the past 20 bars' log return at the origin", "momentum (20 bars)"),
    Column(
        "kronos",
        "a published Kronos's forecast from the raw bars, as published (walkforward --kronos)",
        "Kronos zero-shot",
    ),
    Column(
        "kronos_tuned",
        "that Kronos fine-tuned on the fold's training bars (walkforward --kronos_finetune_steps)",
        "Kronos fine-tuned",
    ),
)

#: the columns every predictions frame has (what :func:`~.portfolio.check_predictions` asks for)
REQUIRED: tuple[str, ...] = ("date", "ticker", "step", "prediction", "realised")

#: each forecaster's column and its name in the report, in the report's order
FORECASTERS: dict[str, str] = {c.name: c.forecaster for c in COLUMNS if c.forecaster is not None}

_QUANTILE_COLUMN = re.compile(r"^q(0?\.\d+)$")


def quantile_column(level: float) -> str:
    """The column of quantile ``level`` (``q0.1`` for 0.1)."""
    return f"q{level:g}"


def quantile_level(column: object) -> float | None:
    """The level of a quantile column (``q0.1``, ``q.5``), or None for any other column."""
    match = _QUANTILE_COLUMN.match(str(column))
    return float(match.group(1)) if match else None


def arrange(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its columns in :data:`COLUMNS`' order (the quantile columns in the order they come); a column
    that is not declared there is refused."""
    place = {c.name: i for i, c in enumerate(COLUMNS)}
    quantiles = place[QUANTILES]
    unknown = [c for c in frame.columns if c not in place and quantile_level(c) is None]
    if unknown:
        raise ValueError(
            f"predictions frame: column(s) {unknown} are not declared in lightning_tf.kline.universe.predictions"
        )
    order = sorted(frame.columns, key=lambda c: place.get(c, quantiles))  # a stable sort: quantiles keep their order
    return frame[order]
