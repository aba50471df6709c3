"""A fold's test windows as a predictions frame: origins, tickers, steps, original units, quantile columns, and
the baselines' columns lined up with the model's rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline.evaluation.fold_forecasts import momentum_column, realised_column, window_forecasts
from lightning_tf.kline.scale import DataScale
from lightning_tf.kline.windows import WindowDataset

L, F = 3, 2


def _dataset_and_scale() -> tuple[WindowDataset, DataScale]:
    """Two tickers of 8 rows each, stored end to end; targets scaled by (mean, std) = (1, 2) and (-1, 3)."""
    n = 16
    ticker = torch.tensor([0] * 8 + [1] * 8)
    time = torch.tensor(pd.bdate_range("2020-01-01", periods=8).as_unit("ns").asi8.tolist() * 2)
    y = torch.arange(n, dtype=torch.float32)[:, None] / 10  # (N, 1) scaled targets
    ends = torch.tensor([2, 3, 4, 5, 10, 11])  # window ends of both tickers; targets stay inside a ticker
    ds = WindowDataset(
        x=torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 2),  # (N, C=2)
        ends=ends,
        context_len=L,
        horizon=F,
        y=y,
        raw_target=y,
        anchor=torch.ones(n, dtype=torch.float64),
        ticker=ticker,
        time=time,
    )
    scale = DataScale(
        feature_names=["a", "b"],
        target_names=["log_return"],
        target_kind="return",
        ticker_names=["AAA", "BBB"],
        feature_mean=torch.zeros(2, 2),
        feature_std=torch.ones(2, 2),
        target_mean=torch.tensor([[1.0], [-1.0]]),
        target_std=torch.tensor([[2.0], [3.0]]),
    )
    return ds, scale


def _forecast(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = batch["x"]
    last = x[:, -1, 0]  # (B,) the window's last input: identifies it
    point = last[:, None, None] + torch.arange(F, dtype=x.dtype)[None, :, None]  # (B, F, 1)
    quantiles = torch.stack([point - 1, point, point + 1], dim=-1)  # (B, F, 1, 3)
    return point, quantiles, -point


@pytest.mark.parametrize("batch_size", [1, 4, 100])
def test_rows_are_windows_by_steps_in_original_units(batch_size: int) -> None:
    ds, scale = _dataset_and_scale()
    frame = window_forecasts(_forecast, ds, scale, [0.1, 0.5, 0.9], batch_size=batch_size)
    assert list(frame.columns) == ["date", "ticker", "step", "prediction", "realised", "linear", "q0.1", "q0.5", "q0.9"]
    assert len(frame) == 6 * F and list(frame["step"]) == [1, 2] * 6
    assert list(frame["ticker"]) == ["AAA"] * 8 + ["BBB"] * 4
    days = pd.bdate_range("2020-01-01", periods=8)
    assert list(frame["date"][::F]) == [days[e % 8] for e in (2, 3, 4, 5, 10, 11)]
    mean = np.where(frame["ticker"] == "AAA", 1.0, -1.0)
    std = np.where(frame["ticker"] == "AAA", 2.0, 3.0)
    end = np.repeat([2, 3, 4, 5, 10, 11], F)
    step = frame["step"].to_numpy()
    np.testing.assert_allclose(frame["prediction"], (end + step - 1) * std + mean, rtol=1e-6)
    np.testing.assert_allclose(frame["linear"], -(end + step - 1) * std + mean, rtol=1e-6)
    np.testing.assert_allclose(frame["q0.1"], (end + step - 2) * std + mean, rtol=1e-6)
    np.testing.assert_allclose(frame["realised"], (end + step) / 10 * std + mean, rtol=1e-6)  # y of row t + step


def test_momentum_lines_up_with_the_rows() -> None:
    days = pd.bdate_range("2020-01-01", periods=30)
    close = {"AAA": np.exp(np.linspace(0, 1, 30)), "BBB": np.exp(np.linspace(0, -2, 30))}
    bars = pd.concat(
        [pd.DataFrame({"timestamp": days, "ticker": t, "close": c}) for t, c in close.items()], ignore_index=True
    )
    frame = pd.DataFrame({"date": [days[25], days[25], days[5]], "ticker": ["BBB", "AAA", "AAA"], "step": [1, 1, 1]})
    column = momentum_column(frame, bars, window=20)
    np.testing.assert_allclose(column.iloc[:2], [np.log(close["BBB"][25] / close["BBB"][5]), 20 / 29], rtol=1e-9)
    assert np.isnan(column.iloc[2])  # 5 bars of history: no 20-bar momentum


def test_realised_returns_come_from_the_bars() -> None:
    days = pd.bdate_range("2020-01-01", periods=10)
    close = np.exp(np.cumsum(np.arange(1, 11) / 100))  # log return of bar i: (i + 1) / 100
    bars = pd.DataFrame({"timestamp": days, "ticker": "AAA", "close": close})
    frame = pd.DataFrame({"date": [days[2], days[2], days[8]], "ticker": "AAA", "step": [1, 2, 2]})
    column = realised_column(frame, bars)
    np.testing.assert_allclose(column.iloc[:2], [0.04, 0.05], rtol=1e-9)
    assert np.isnan(column.iloc[2])  # bar 10 does not exist
