"""Quantile forecasts: monotone by construction, the pinball loss and interval coverage by hand, the
Gaussian start from the linear fit, and the quantile columns of a trained model's forecast."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from lightning_tf.kline import KLineDataModule, KLineForecaster, PatchTST
from lightning_tf.kline.evaluation.metrics import IntervalMetrics, central_intervals, pinball_loss
from lightning_tf.kline.settings import Loading
from tests.helpers.kline import TINY, SineDataModule, net_args, write_bars

LEVELS = [0.05, 0.1, 0.5, 0.9, 0.95]


@pytest.mark.parametrize("residual", ["on", "off", "only"])
def test_quantiles_never_cross(residual: str) -> None:
    torch.manual_seed(0)
    net = PatchTST(3, 3, 32, 6, [0, 1, 2], residual=residual, **net_args(quantiles=LEVELS, **TINY)).eval()
    with torch.no_grad():  # any weights at all: large random heads and offsets
        for p in net.parameters():
            p.normal_(0.0, 3.0)
    q = net.forward_quantiles(torch.randn(16, 32, 3) * 5)  # (B, F, K, Q)
    assert q.shape == (16, 6, 3, 5)
    assert (q.diff(dim=-1) >= 0).all()  # softplus gaps: never negative (an underflowing gap of 0 ties two levels)
    torch.testing.assert_close(
        net(torch.zeros(2, 32, 3) + 1.0), net.forward_quantiles(torch.zeros(2, 32, 3) + 1.0)[..., 2]
    )


def test_quantile_levels_are_checked() -> None:
    with pytest.raises(
        ValueError, match=r"quantiles \[0.1, 0.9\] must be distinct levels in \(0, 1\), ascending, and include 0.5"
    ):
        PatchTST(1, 1, 16, 2, [0], quantiles=[0.1, 0.9], patch_len=4, stride=4)
    with pytest.raises(ValueError, match=r"quantiles \[0.9, 0.5, 0.1\] must be distinct"):
        PatchTST(1, 1, 16, 2, [0], quantiles=[0.9, 0.5, 0.1], patch_len=4, stride=4)
    with pytest.raises(ValueError, match="are trained by the pinball loss: set loss: quantile"):
        KLineForecaster(n_features=1, n_targets=1, context_len=16, horizon=2, quantiles=[0.1, 0.5, 0.9])
    assert KLineForecaster(
        n_features=1, n_targets=1, context_len=16, horizon=2, loss="quantile", patch_len=4, stride=4
    ).quantiles == [0.1, 0.5, 0.9]


def test_pinball_loss_by_hand() -> None:
    q = torch.tensor([[[[1.0, 2.0, 3.0]]]])  # (1, 1, 1, 3) at levels 0.1, 0.5, 0.9
    y = torch.tensor([[[2.5]]])
    # errors y - q = 1.5, 0.5, -0.5: 0.1 * 1.5, 0.5 * 0.5, (0.9 - 1) * -0.5
    expected = (0.15 + 0.25 + 0.05) / 3
    assert pinball_loss(q, y, [0.1, 0.5, 0.9]).item() == pytest.approx(expected)


def test_interval_coverage_by_hand() -> None:
    """Four outcomes, intervals [0, 1] and [-1, 2]: 0.5 and 1.0 inside both, 1.5 in the wide one only, 3 in
    neither (the edges count as inside)."""
    assert central_intervals(LEVELS) == [(0, 4), (1, 3)]
    m = IntervalMetrics(LEVELS)
    lo_hi = torch.tensor([-1.0, 0.0, 0.5, 1.0, 2.0])  # (Q,)
    q = lo_hi.expand(4, 1, 1, 5)  # (B=4, F=1, K=1, Q)
    y = torch.tensor([0.5, 1.0, 1.5, 3.0]).view(4, 1, 1)
    m.update(q[:2], y[:2])
    m.update(q[2:], y[2:])
    values = m.compute()
    assert values == {"coverage_5_95": 0.75, "width_5_95": 3.0, "coverage_10_90": 0.5, "width_10_90": 1.0}


def test_the_gaps_start_as_a_gaussian_of_the_linear_fit_error() -> None:
    """Before any step, the 10%-90% interval of a quantile model is the linear fit's training error times
    the Gaussian's 2 x 1.2816, per horizon, on the normalised scale."""
    dm = SineDataModule(n_features=2, context_len=32, horizon=4, n_bars=600, noise=0.3)
    dm.setup()
    pairs = [
        (
            torch.stack([dm.train_set[i]["x"] for i in range(len(dm.train_set))]),
            torch.stack([dm.train_set[i]["y"] for i in range(len(dm.train_set))]),
        )
    ]
    net = PatchTST(
        2, 2, 32, 4, [0, 1], residual="on", linear_input="revin", **net_args(quantiles=[0.1, 0.5, 0.9], **TINY)
    ).eval()
    fit = net.fit_linear(lambda: pairs, ridges=(1e-3,))
    x = pairs[0][0][:3]
    q = net.forward_quantiles(x)  # (B, F, K, 3)
    _, _, std = net._target_scale(x)  # (B, 1, K)
    width = (q[..., 2] - q[..., 0]) / std  # (B, F, K), normalised
    expected = 2 * 1.2815516 * fit.residual_std.T  # (F, K)
    torch.testing.assert_close(width, expected.expand_as(width), rtol=1e-4, atol=1e-5)


def test_a_quantile_model_reports_intervals_and_forecasts_quantile_columns(tmp_path: Path) -> None:
    write_bars(tmp_path / "bars.csv", n=400)
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=3, loading=Loading(batch_size=64))
    model = KLineForecaster(
        n_features=6,
        n_targets=1,
        context_len=32,
        horizon=3,
        loss="quantile",
        quantiles=[0.1, 0.5, 0.9],
        revin=False,
        **TINY,
    )
    t = L.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    t.fit(model, dm)
    assert "val/coverage_10_90" in t.callback_metrics and "val/width_10_90" in t.callback_metrics
    t.test(model, dm, verbose=False)
    intervals = model.test_summary["intervals"]
    assert set(intervals) == {"coverage_10_90", "width_10_90"} and 0.0 <= intervals["coverage_10_90"] <= 1.0
    assert float(t.callback_metrics["test/coverage_10_90"]) == pytest.approx(intervals["coverage_10_90"])
    table = model.forecast(tmp_path / "bars.csv")
    cols = ["pred_log_return_q0.1", "pred_log_return", "pred_log_return_q0.9"]
    assert set(cols) <= set(table.columns) and "pred_log_return_q0.5" in table.columns
    assert (table[cols[0]] < table[cols[1]]).all() and (table[cols[1]] < table[cols[2]]).all()
    torch.testing.assert_close(
        torch.tensor(table["pred_log_return"].to_numpy()), torch.tensor(table["pred_log_return_q0.5"].to_numpy())
    )
