"""Rank-aware training and selection. The training term (``ic_weight``): the per-date correlation it maximises is
each date's Pearson correlation across tickers, averaged over dates, blind to each date's level and scale; the
training loss is the point loss plus ``ic_weight * (1 - IC)``. The selection by IC (``residual_select_by: ic``)
keeps a residual that orders each date better, whatever it does to the loss, and drops noise."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from lightning_tf.kline import KLineDataModule, KLineForecaster
from lightning_tf.kline.evaluation.metrics import date_correlation, date_ranks
from lightning_tf.kline.evaluation.selection import Decision, ResidualSelection
from lightning_tf.kline.settings import Loading
from tests.helpers.kline import quiet_trainer
from tests.helpers.universe import write_universe


def _date_universe(tmp_path: Path, **kw: object) -> KLineDataModule:
    """A generated universe of 10 tickers in date batches (8 bars -> 2), validation from August 2015."""
    path = tmp_path / "universe.csv"
    write_universe(path, past=1.0, future=0.0, n_tickers=10, n_days=200)
    args = {"context_len": 8, "horizon": 2, "features": ["log_return", "volatility"], "batch_by_date": True}
    dates = {"val_start": "2015-08-03", "test_start": "2015-09-01"}
    return KLineDataModule.from_arguments({"path": str(path), **args, **dates, **kw})


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
    dm = _date_universe(tmp_path, label="cs_zscore")
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


def _universe_validation(seed: int, dates: int = 40, tickers: int = 30) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    time = torch.arange(dates).repeat_interleave(tickers)  # (N,) dates in order, a universe each
    series = torch.arange(tickers).repeat(dates)
    y = torch.randn(dates * tickers, 2, 1, generator=g)  # (N, F, K)
    base = 0.1 * y + torch.randn(dates * tickers, 2, 1, generator=g)
    level = 5 * torch.randn(dates, generator=g).repeat_interleave(tickers)[:, None, None]  # a level per date
    return {"time": time, "series": series, "y": y, "base": base, "level": level}


def _decide(by: str, v: dict[str, torch.Tensor], residual: torch.Tensor) -> Decision:
    sel = ResidualSelection(1, mse=True, blocks=5, keep_se=1.0, by=by)
    for idx in torch.randperm(len(v["time"]), generator=torch.Generator().manual_seed(1)).split(97):  # any order
        sel.update(v["time"][idx], v["base"][idx], residual[idx], v["y"][idx], series=v["series"][idx])
    return sel.compute()


def test_selection_by_ic_keeps_a_residual_that_orders_each_date_better_whatever_its_loss() -> None:
    v = _universe_validation(0)
    residual = 0.5 * v["y"] + v["level"]  # better order within each date, a large error in each date's level
    by_ic, by_loss = _decide("ic", v, residual), _decide("loss", v, residual)
    assert by_ic.kept and float(by_ic.weight) == 1.0  # whole
    assert by_loss.full > by_loss.linear  # the whole residual raises the MSE ...
    assert not by_loss.kept or float(by_loss.weight) < 0.2  # ... so the loss keeps little or none of it
    # the gain is the mean over dates of the per-date IC difference (mean over the two steps), as numpy has it
    ics = {"linear": [], "full": []}
    for d in range(40):
        rows = (v["time"] == d).numpy()
        for name, f in (("linear", v["base"]), ("full", v["base"] + residual)):
            ics[name].append(np.mean([np.corrcoef(f[rows, s, 0], v["y"][rows, s, 0])[0, 1] for s in range(2)]))
    assert by_ic.ic_linear == pytest.approx(np.mean(ics["linear"]), abs=1e-6)
    assert by_ic.ic_full == pytest.approx(np.mean(ics["full"]), abs=1e-6)
    assert by_ic.gain == pytest.approx(np.mean(ics["full"]) - np.mean(ics["linear"]), abs=1e-6)
    assert by_ic.chosen == pytest.approx(by_ic.full)  # the loss reported is the kept model's


def test_selection_by_ic_drops_noise_and_needs_a_cross_section() -> None:
    v = _universe_validation(1)
    noise = torch.randn(v["y"].shape, generator=torch.Generator().manual_seed(5))
    decision = _decide("ic", v, noise)
    assert not decision.kept and float(decision.weight) == 0.0
    assert decision.gain < 0 and decision.chosen == pytest.approx(decision.linear)
    one_series = ResidualSelection(1, by="ic")  # no date has a cross-section: no IC, nothing kept
    one_series.update(torch.arange(10), torch.randn(10, 2, 1), torch.randn(10, 2, 1), torch.randn(10, 2, 1))
    alone = one_series.compute()
    assert not alone.kept and math.isnan(alone.ic_linear) and alone.chosen == pytest.approx(alone.linear)
    with pytest.raises(ValueError, match="residual_select_by must be one of loss, ic, rank_ic, got 'rank'"):
        ResidualSelection(1, by="rank")


def test_selection_by_rank_ic_is_spearmans_and_not_swayed_by_one_outlier_a_date() -> None:
    v = _universe_validation(2)
    # a better order for every ticker, but on each date one ticker's forecast jumps far the wrong way: the
    # Pearson IC, led by that one point, falls; each date's ranks, where it is one rank of 30, improve
    residual = 1.0 * v["y"]
    first = v["series"] == 0
    residual[first] = -50 * v["y"][first].sign() - v["base"][first]
    by_rank, by_ic = _decide("rank_ic", v, residual), _decide("ic", v, residual)
    assert by_rank.kept and not by_ic.kept
    assert by_ic.ic_full < by_ic.ic_linear and by_rank.ic_full > by_rank.ic_linear
    rank_ics = {"linear": [], "full": []}
    for d in range(40):
        rows = (v["time"] == d).numpy()
        for name, f in (("linear", v["base"]), ("full", v["base"] + residual)):
            per_step = [stats.spearmanr(f[rows, s, 0], v["y"][rows, s, 0]).statistic for s in range(2)]
            rank_ics[name].append(np.mean(per_step))
    assert by_rank.ic_linear == pytest.approx(np.mean(rank_ics["linear"]), abs=1e-9)
    assert by_rank.ic_full == pytest.approx(np.mean(rank_ics["full"]), abs=1e-9)


def test_date_ranks_share_ties_and_stay_within_each_date() -> None:
    values = torch.tensor([[3.0], [1.0], [3.0], [7.0], [5.0]])
    dates = torch.tensor([0, 0, 0, 1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's about a read-only numpy array
        ranks = date_ranks(values, dates)
    assert ranks[:, 0].tolist() == [2.5, 1.0, 2.5, 2.0, 1.0]


def test_a_fit_selecting_by_ic_reports_the_validation_ic_of_its_linear_path(tmp_path: Path) -> None:
    from lightning_tf.kline.evaluation.metrics import date_correlations

    dm = _date_universe(tmp_path)
    model = KLineForecaster(
        n_features=2, context_len=8, horizon=2, ic_weight=1.0, residual_select_by="ic", baselines=False
    )
    # the sanity check's one batch holds one ticker
    trainer = quiet_trainer(limit_train_batches=4, num_sanity_val_steps=1, default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(model, dm)
    assert "validation IC" in model.selection_line()
    # the linear path's IC as the selection has it: each validation date's correlation across the tickers
    model.eval()
    base, y, time = [], [], []
    with torch.no_grad():
        for batch in dm.val_dataloader():
            base.append(model._point(model.net.combine(model._parts(batch["x"], batch), gate=0.0)))
            y.append(batch["y"])
            time.append(batch["time"])
    corr, valid = date_correlations(torch.cat(base), torch.cat(y), torch.cat(time))
    per_date = (corr * valid).sum(1)[valid.any(1)] / valid.sum(1)[valid.any(1)]
    assert float(model.val_selection[1]) == pytest.approx(float(per_date.mean()), abs=1e-6)
    assert float(trainer.callback_metrics["val/ic_linear"]) == pytest.approx(float(per_date.mean()), abs=1e-6)
    selected = "val/ic_residual" if bool((model.net.residual_gate > 0).any()) else "val/ic_linear"
    assert float(trainer.callback_metrics["val/ic"]) == float(trainer.callback_metrics[selected])


@pytest.mark.parametrize("residual", ["off", "only"])
def test_without_a_residual_val_rank_ic_is_the_models_own(tmp_path: Path, residual: str) -> None:
    """Nothing to select, but ``val/rank_ic`` is logged (a config that checkpoints by it works with any
    residual): the mean over validation dates of the model's Spearman correlation across tickers."""
    dm = _date_universe(tmp_path)
    linear = "tuned" if residual == "off" else "frozen"  # a frozen linear path alone has nothing to train
    model = KLineForecaster(
        n_features=2,
        context_len=8,
        horizon=2,
        residual=residual,
        linear=linear,
        residual_select_by="rank_ic",
        baselines=False,
    )
    trainer = quiet_trainer(limit_train_batches=2, num_sanity_val_steps=0, default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(model, dm)
    model.eval()
    per_date: dict[int, list] = {}
    with torch.no_grad():
        for batch in dm.val_dataloader():
            pred = model._point(model.net.combine(model._parts(batch["x"], batch), gate=1.0))
            for i, t in enumerate(batch["time"].tolist()):
                per_date.setdefault(t, []).append((pred[i, :, 0].numpy(), batch["y"][i, :, 0].numpy()))
    rank_ics = []
    for rows in per_date.values():
        p, y = np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
        rank_ics.append(np.mean([stats.spearmanr(p[:, s], y[:, s]).statistic for s in range(2)]))
    assert float(trainer.callback_metrics["val/rank_ic"]) == pytest.approx(float(np.mean(rank_ics)), abs=1e-6)


def test_selecting_by_ic_on_one_series_is_refused_in_one_line(tmp_path: Path) -> None:
    dm = KLineDataModule("data/msft.csv", context_len=16, horizon=2, loading=Loading(batch_size=64))
    model = KLineForecaster(n_features=dm.n_features, context_len=16, horizon=2, residual_select_by="ic")
    trainer = quiet_trainer(
        limit_train_batches=1, limit_val_batches=2, num_sanity_val_steps=0, default_root_dir=tmp_path, accelerator="cpu"
    )
    with pytest.raises(ValueError, match=r"^residual_select_by: ic needs validation dates with at least two series"):
        trainer.fit(model, dm)
