"""Scoring on three scales and the plain-words summary."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lightning_tf.kline import DataScale, ForecastMetrics
from lightning_tf.kline.evaluation.summary import baseline_forecasts, naive_model_scale, score, summary_text


def metrics(key: str) -> nn.ModuleDict:
    return nn.ModuleDict({f"{key}{s}": ForecastMetrics() for s in ("model", "orig", "price")})


def scale(has_prices: bool) -> DataScale:
    return DataScale(
        feature_names=["log_return"],
        target_names=["log_return"],
        target_kind=None,
        ticker_names=["t"],
        feature_mean=[[0.0]],
        feature_std=[[1.0]],
        target_mean=[[0.001]],
        target_std=[[0.02]],
        has_prices=has_prices,
    )


def batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(5, 8, 1, generator=g),
        "y": torch.randn(5, 3, 1, generator=g),
        "x_raw_target": 0.02 * torch.randn(5, 8, 1, generator=g),
        "anchor": 50 + torch.rand(5, generator=g).double(),
        "ticker": torch.zeros(5, dtype=torch.long),
    }


def test_returns_are_scored_in_their_units_and_as_prices() -> None:
    b, pred = batch(), torch.zeros(5, 3, 1)
    m = metrics("test_")
    score(m, "test_", b, pred, None, scale=scale(True), returns=True, horizon=3)
    y = b["y"].double() * 0.02 + 0.001
    assert m["test_orig"].compute()["mse"] == pytest.approx(float(((y - 0.001) ** 2).mean()), rel=1e-5)
    close = b["anchor"][:, None] * torch.exp(torch.cumsum(y[..., 0], 1))  # (B, F)
    pred_close = b["anchor"][:, None] * torch.exp(torch.full((5, 3), 0.001, dtype=torch.float64).cumsum(1))
    assert m["test_price"].compute()["mae"] == pytest.approx(float((close - pred_close).abs().mean()), rel=1e-5)
    # a generic CSV's returns have no closes to rebuild; without a data scale only the model scale is scored
    m2 = metrics("val_")
    score(m2, "val_", b, pred, None, scale=scale(False), returns=True, horizon=3)
    assert m2["val_orig"].mse.update_called and not m2["val_price"].mse.update_called
    m3 = metrics("val_")
    score(m3, "val_", b, pred, None, scale=None, returns=True, horizon=3)
    assert m3["val_model"].mse.update_called and not m3["val_orig"].mse.update_called


def test_baselines_of_levels_are_on_the_model_scale_and_of_returns_in_original_units() -> None:
    b = batch()
    levels = baseline_forecasts(b, 3, target_channels=[0], returns=False)
    assert list(levels) == ["persistence", "mean", "drift"] and all(on_model for _, on_model in levels.values())
    torch.testing.assert_close(levels["persistence"][0], b["x"][:, -1:].expand(-1, 3, -1))
    torch.testing.assert_close(naive_model_scale(b["x"], 3, [0], returns=False), levels["persistence"][0])
    returns = baseline_forecasts(b, 3, target_channels=[0], returns=True)
    assert list(returns) == ["persistence", "mean"] and not any(on_model for _, on_model in returns.values())
    assert returns["persistence"][0].abs().sum() == 0
    torch.testing.assert_close(returns["mean"][0], b["x_raw_target"].mean(1, keepdim=True).expand(-1, 3, -1))
    assert naive_model_scale(b["x"], 3, [0], returns=True) is None


def test_summary_says_plainly_whether_the_model_beats_each_baseline() -> None:
    def row(mse, mae):
        return {"orig": {"mse": mse, "mae": mae}}

    text = summary_text(
        {
            "model": row(1.0, 1.0),
            "persistence": row(2.0, 2.0),
            "mean": row(1.5, 0.5),
            "linear": row(0.9, 0.9),
            "drift": row(1.0, 1.0),
            "about": {"selection": "tested model: ..."},
        },
        "orig",
    )
    assert text.splitlines()[0] == "Test windows, original units:"
    assert "model beats persistence: MSE 1 vs 2, MAE 1 vs 2" in text
    assert "model beats mean on MSE only" in text
    assert "model does NOT beat linear" in text
    assert "model ties drift (the same forecast)" in text
    assert "about" not in text  # the notes beside the forecasts are not rows of the table
