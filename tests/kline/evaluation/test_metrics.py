"""Forecast metrics against numpy and scipy, and on hand-checkable cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from lightning_tf.kline.evaluation.metrics import ForecastMetrics


def test_metrics_match_numpy_and_scipy_over_several_batches() -> None:
    g = torch.Generator().manual_seed(1)
    target = torch.randn(40, 5, 2, generator=g)
    naive = torch.randn(40, 1, 2, generator=g).expand(-1, 5, -1)
    pred = 0.5 * target + 0.5 * torch.randn(40, 5, 2, generator=g)
    m = ForecastMetrics()
    for sl in (slice(0, 7), slice(7, 30), slice(30, 40)):
        m.update(pred[sl], target[sl], naive[sl])
    out = m.compute()
    p, t, n = (a.double().numpy().ravel() for a in (pred, target, naive))
    assert out["mse"] == pytest.approx(np.mean((p - t) ** 2), rel=1e-6)
    assert out["mae"] == pytest.approx(np.mean(np.abs(p - t)), rel=1e-6)
    assert out["rmse"] == pytest.approx(math.sqrt(np.mean((p - t) ** 2)), rel=1e-6)
    assert out["mase"] == pytest.approx(np.abs(p - t).sum() / np.abs(n - t).sum(), rel=1e-6)
    assert out["dir_acc"] == pytest.approx(np.mean(np.sign(p - n) == np.sign(t - n)), rel=1e-6)
    assert out["up_share"] == pytest.approx(np.mean(t > n), rel=1e-6)
    assert out["ic"] == pytest.approx(np.corrcoef(p - n, t - n)[0, 1], abs=1e-5)
    assert out["rank_ic"] == pytest.approx(stats.spearmanr(p - n, t - n).statistic, abs=1e-5)
    m.reset()
    m.update(pred, target, naive)
    assert m.compute()["mse"] == pytest.approx(out["mse"], rel=1e-6)


def test_information_coefficient_of_heavy_tailed_returns_is_not_nan() -> None:
    # returns of a few percent with one +500% jump: var / max|dev|^2 is far below float32's sqrt(eps), where a
    # float32 Pearson accumulator answers NaN although the correlation is well defined
    g = torch.Generator().manual_seed(2)
    target = 0.03 * torch.randn(20_000, 1, 1, generator=g, dtype=torch.float64)
    pred = 0.2 * target + 0.03 * torch.randn(20_000, 1, 1, generator=g, dtype=torch.float64)
    pred[0] = 5.0
    naive = torch.zeros_like(target)
    m = ForecastMetrics()
    for sl in (slice(0, 5_000), slice(5_000, 20_000)):
        m.update(pred[sl], target[sl], naive[sl])
    p, t = pred.numpy().ravel(), target.numpy().ravel()
    assert m.compute()["ic"] == pytest.approx(np.corrcoef(p, t)[0, 1], abs=1e-9)


def test_direction_on_a_hand_example_skips_flat_moves() -> None:
    # returns: persistence is zero; realised +1, -2, 0 (flat, skipped), +3; predicted +0.5, +1, -1, -2
    target = torch.tensor([1.0, -2.0, 0.0, 3.0]).view(4, 1, 1)
    pred = torch.tensor([0.5, 1.0, -1.0, -2.0]).view(4, 1, 1)
    m = ForecastMetrics()
    m.update(pred, target, torch.zeros_like(target))
    out = m.compute()
    assert out["dir_acc"] == pytest.approx(1 / 3)  # only the first of the three moves is right
    assert out["up_share"] == pytest.approx(2 / 3)
    assert out["mase"] == pytest.approx((0.5 + 3 + 1 + 5) / (1 + 2 + 0 + 3))


def test_a_constant_forecast_has_no_information_coefficient() -> None:
    target = torch.randn(20, 3, 1)
    naive = torch.zeros_like(target)
    m = ForecastMetrics()
    m.update(naive.clone(), target, naive)
    out = m.compute()
    assert math.isnan(out["ic"]) and math.isnan(out["rank_ic"])
    assert out["mase"] == pytest.approx(1.0)


def test_errors_only_without_a_reference() -> None:
    m = ForecastMetrics(full=True)
    m.update(torch.ones(2, 3, 1), torch.zeros(2, 3, 1))
    assert m.compute() == {"mse": 1.0, "mae": 1.0, "rmse": 1.0}
    cheap = ForecastMetrics(full=False)
    cheap.update(torch.ones(2, 3, 1), torch.zeros(2, 3, 1), torch.zeros(2, 3, 1))
    assert set(cheap.compute()) == {"mse", "mae", "rmse"}
