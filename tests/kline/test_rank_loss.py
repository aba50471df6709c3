"""The rank-aware training term (``ic_weight``): the per-date correlation it maximises is each date's Pearson
correlation across tickers, averaged over dates, blind to each date's level and scale; the training loss is the
point loss plus ``ic_weight * (1 - IC)``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_tf.kline import KLineDataModule, KLineForecaster
from lightning_tf.kline.evaluation.metrics import date_correlation
from tests.helpers.universe import write_universe


def _frame(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    dates = torch.tensor([5] * 7 + [9] * 4 + [2] * 12 + [11])  # the last date has one window
    y = torch.randn(len(dates), 3, 2, generator=g)  # (B, F, K)
    pred = 0.5 * y + torch.randn(len(dates), 3, 2, generator=g)
    return pred, y, dates


def test_it_is_the_mean_over_dates_of_the_pearson_correlation_across_windows() -> None:
    pred, y, dates = _frame()
    want = []
    for d in (2, 5, 9):  # date 11 has one window: no correlation
        rows = (dates == d).numpy()
        for f in range(3):
            for k in range(2):
                want.append(np.corrcoef(pred.numpy()[rows, f, k], y.numpy()[rows, f, k])[0, 1])
    assert float(date_correlation(pred, y, dates)) == pytest.approx(float(np.mean(want)), abs=1e-6)


def test_each_dates_level_and_scale_do_not_count_and_the_order_does() -> None:
    pred, y, dates = _frame(1)
    base = date_correlation(pred, y, dates)
    shift = (dates.double() * 3.7 - 10).float()[:, None, None]  # a level per date
    scale = (dates.double() * 0.9 + 0.1).float()[:, None, None]  # a positive scale per date
    torch.testing.assert_close(date_correlation(pred * scale + shift, y, dates), base, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(date_correlation(-pred, y, dates), -base, atol=1e-6, rtol=1e-6)
    assert float(date_correlation(y * 2 + 1, y, dates)) == pytest.approx(1.0, abs=1e-6)
    # pooled over dates the same numbers correlate differently: the function is per date
    pooled = np.corrcoef((pred * scale + shift).flatten().numpy(), y.flatten().numpy())[0, 1]
    assert abs(pooled - float(base)) > 0.05
    constant = torch.zeros_like(pred)
    assert float(date_correlation(constant, y, dates)) == 0.0  # no date counts: 0, not NaN


def test_gradient_steps_on_the_term_raise_the_correlation() -> None:
    pred, y, dates = _frame(2)
    p = pred.clone().requires_grad_(True)
    opt = torch.optim.SGD([p], lr=1.0)
    start = float(date_correlation(p.detach(), y, dates))
    for _ in range(30):
        loss = 1 - date_correlation(p, y, dates)
        opt.zero_grad()
        loss.backward()
        assert torch.isfinite(p.grad).all()
        opt.step()
    assert float(date_correlation(p, y, dates)) > start + 0.2


def test_the_training_loss_adds_the_weighted_term_on_date_batches(tmp_path: Path) -> None:
    path = tmp_path / "universe.csv"
    write_universe(path, past=1.0, future=0.0, n_tickers=10, n_days=200)
    dm = KLineDataModule(
        str(path),
        context_len=8,
        horizon=2,
        features=["log_return", "volatility"],
        label="cs_zscore",
        batch_by_date=True,
        val_start="2015-08-03",
        test_start="2015-09-01",
    )
    dm.setup("fit")
    kw = {"n_features": dm.n_features, "context_len": 8, "horizon": 2, "channel_mixing": True, "baselines": False}
    with pytest.raises(ValueError, match="ic_weight must be >= 0, got -1"):
        KLineForecaster(**kw, ic_weight=-1.0)
    model = KLineForecaster(**kw, ic_weight=0.5)
    model.target_channels = dm.target_channels
    model.log = lambda *a, **k: None  # no trainer: nothing to log to
    with torch.no_grad():  # the heads start at zero (a constant forecast): give the model some forecast
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    batch = next(iter(dm.train_dataloader()))
    assert (batch["time"] == batch["time"][0]).all()
    torch.manual_seed(0)
    loss = model.training_step(batch, 0)
    torch.manual_seed(0)
    pred = model._point(model.net.combine(model._parts(batch["x"], batch), gate=1.0))
    y = batch["y"]
    ics = [np.corrcoef(pred[:, f, 0].detach().numpy(), y[:, f, 0].numpy())[0, 1] for f in range(2)]
    mse = float(torch.nn.functional.mse_loss(pred, y))
    assert float(loss) == pytest.approx(mse + 0.5 * (1 - np.mean(ics)), rel=1e-5)
