"""The predictions frame's columns, declared once: their order, the forecasters' names in the report, the quantile
columns, and a column nobody declared refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.universe.predictions import (
    COLUMNS,
    FORECASTERS,
    QUANTILES,
    REQUIRED,
    arrange,
    quantile_column,
    quantile_level,
)


def test_the_declaration_names_each_column_once_and_the_forecasters_in_the_reports_order() -> None:
    names = [c.name for c in COLUMNS]
    assert len(set(names)) == len(names)
    assert set(REQUIRED) <= set(names)
    assert list(FORECASTERS) == [
        "prediction",
        "residual",
        "residual_alone",
        "linear",
        "lightgbm",
        "momentum",
        "kronos",
        "kronos_tuned",
    ]
    assert FORECASTERS["prediction"] == "model" and len(set(FORECASTERS.values())) == len(FORECASTERS)


def test_arrange_puts_the_columns_in_the_declared_order_and_the_quantiles_at_their_place() -> None:
    shuffled = ["momentum", "q0.9", "realised", "q0.1", "linear", "date", "prediction", "ticker", "step", "fold"]
    frame = pd.DataFrame({name: np.arange(3) + i for i, name in enumerate(shuffled)})
    arranged = arrange(frame)
    expected = ["fold", "date", "ticker", "step", "prediction", "realised", "linear", "q0.9", "q0.1", "momentum"]
    assert list(arranged.columns) == expected  # the quantiles in the order they came
    for name in shuffled:
        np.testing.assert_array_equal(arranged[name], frame[name])


def test_a_column_that_is_not_declared_is_refused() -> None:
    frame = pd.DataFrame({"date": [1], "prediction": [0.1], "xgboost": [0.2], "q1.5": [0.3]})
    with pytest.raises(ValueError, match=r"column\(s\) \['xgboost', 'q1.5'\] are not declared"):
        arrange(frame)


@pytest.mark.parametrize("level", [0.1, 0.5, 0.9, 0.025, 0.975])
def test_a_quantile_column_names_its_level(level: float) -> None:
    assert quantile_level(quantile_column(level)) == level
    assert quantile_column(0.1) == "q0.1" and quantile_level("q.5") == 0.5
    assert quantile_level("prediction") is None and quantile_level(QUANTILES) is None
