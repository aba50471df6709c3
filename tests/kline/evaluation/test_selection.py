"""The residual's validation verdict: least-squares weights per target, a gain measured against its
block standard error, windows put in time order whatever order they arrive in."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_tf.kline.evaluation.selection import ResidualSelection, block_standard_error, selection_line


def _windows(n: int = 400, k: int = 3, f: int = 4, seed: int = 0, signal: tuple[float, ...] = (0.3, -0.5, 2.0)):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, f, k, generator=g)
    r = torch.randn(n, f, k, generator=g)
    y = base + r * torch.tensor(signal) + 0.5 * torch.randn(n, f, k, generator=g)
    return torch.arange(n), base, r, y


def test_block_standard_error_is_the_spread_of_block_means() -> None:
    values = torch.arange(12, dtype=torch.float64)  # blocks of 3: means 1, 4, 7, 10
    means = torch.tensor([1.0, 4.0, 7.0, 10.0], dtype=torch.float64)
    assert block_standard_error(values, 4) == pytest.approx(float(means.std() / 2))
    assert block_standard_error(torch.ones(50), 10) == 0.0
    assert math.isinf(block_standard_error(torch.ones(1), 10))


def test_block_standard_error_grows_with_correlation_that_iid_formulas_miss() -> None:
    """A slowly wandering gain (neighbouring windows alike, as overlapping windows are) has a much larger
    block standard error than the naive std / sqrt(n), which would call its mean significant."""
    g = torch.Generator().manual_seed(0)
    wander = torch.randn(40, generator=g).repeat_interleave(50)  # (2000,) 40 runs of 50 equal values
    naive = float(wander.std() / math.sqrt(wander.numel()))
    assert block_standard_error(wander, 10) > 4 * naive


def test_weights_are_the_clipped_least_squares_weights_and_losses_are_exact() -> None:
    t, base, r, y = _windows()
    sel = ResidualSelection(3, keep_se=0.0)
    sel.update(t[:150], base[:150], r[:150], y[:150])
    sel.update(t[150:], base[150:], r[150:], y[150:])
    d = sel.compute()
    torch.testing.assert_close(d.weight[0], torch.tensor(0.3), atol=0.05, rtol=0)
    assert d.weight[1] == 0.0 and d.weight[2] == 1.0  # a harmful residual gets 0; a weight is at most 1
    mse = lambda w: float(((y - base - r * w) ** 2).mean())  # noqa: E731
    assert d.best == pytest.approx(mse(d.weight), rel=1e-5)
    assert d.linear == pytest.approx(mse(torch.zeros(3)), rel=1e-5)
    assert d.full == pytest.approx(mse(torch.ones(3)), rel=1e-5)
    assert d.kept and d.chosen == d.best
    # judged out of sample: each block weighted by the weights of the other blocks, never better in-sample
    judged = []
    for idx in torch.tensor_split(torch.arange(400), 10):
        rest = torch.ones(400, dtype=torch.bool)
        rest[idx] = False
        e, rr_ = y - base, r
        w = ((e * rr_)[rest].sum((0, 1)) / (rr_ * rr_)[rest].sum((0, 1))).clamp(0, 1)  # (K,)
        judged.append(((e[idx] - w * rr_[idx]) ** 2).mean((1, 2)))
    out_of_sample = d.linear - float(torch.cat(judged).mean())
    assert d.gain == pytest.approx(out_of_sample, rel=1e-5) and d.gain < d.linear - d.best


def test_weights_fit_on_noise_gain_in_sample_and_lose_out_of_sample() -> None:
    """A residual unrelated to the error: the least-squares weights always lower the in-sample loss, but
    judged on windows they were not fit on, they do not, and the residual is dropped."""
    for seed in range(5):
        t, base, noise, y = _windows(n=2000, signal=(0.0, 0.0, 0.0), seed=seed)
        sel = ResidualSelection(3)
        sel.update(t, base, noise, y)
        d = sel.compute()
        assert d.best < d.linear and d.gain < d.linear - d.best and d.gain < d.gain_se
        assert not d.kept and d.chosen == d.linear


def test_a_real_gain_is_kept_and_a_gain_of_noise_is_not() -> None:
    t, base, r, y = _windows(signal=(0.5, 0.5, 0.5))
    real = ResidualSelection(3)
    real.update(t, base, r, y)
    assert real.compute().kept
    # a small real gain: kept under "any gain", refused by a rule that asks more than the noise allows
    t, base, r, y = _windows(n=1000, signal=(0.03, 0.03, 0.03), seed=1)
    decisions = {}
    for keep_se in (0.0, 1.0, 100.0):
        sel = ResidualSelection(3, keep_se=keep_se)
        sel.update(t, base, r, y)
        decisions[keep_se] = sel.compute()
    assert decisions[0.0].kept and decisions[1.0].gain == decisions[0.0].gain > 0
    assert not decisions[100.0].kept and decisions[100.0].chosen == decisions[100.0].linear
    assert not bool((decisions[100.0].weight > 0).any())


def test_windows_are_put_in_time_order_before_blocking() -> None:
    """Processes deliver windows interleaved (a distributed sampler deals them out in turn); the decision
    is the one of the windows in time order."""
    t, base, r, y = _windows(signal=(0.05, 0.05, 0.05), seed=2)
    ordered = ResidualSelection(3)
    ordered.update(t, base, r, y)
    dealt = ResidualSelection(3)
    for rank in range(2):
        idx = torch.arange(rank, len(t), 2)
        dealt.update(t[idx], base[idx], r[idx], y[idx])
    a, b = ordered.compute(), dealt.compute()
    assert a.gain_se == pytest.approx(b.gain_se, rel=1e-9) and a.kept == b.kept
    torch.testing.assert_close(a.weight, b.weight)


def test_windows_of_several_series_at_one_time_are_ordered_by_series() -> None:
    """Two series with the same timestamps, dealt to processes differently: the same decision."""
    t, base, r, y = _windows(n=400, signal=(0.05, 0.05, 0.05), seed=4)
    time = torch.arange(400) // 2  # two series per timestamp
    series = torch.arange(400) % 2
    one = ResidualSelection(3)
    one.update(time, base, r, y, series=series)
    dealt = ResidualSelection(3)
    for part in (torch.arange(0, 400, 4), torch.arange(1, 400, 4), torch.arange(2, 400, 4), torch.arange(3, 400, 4)):
        dealt.update(time[part], base[part], r[part], y[part], series=series[part])
    a, b = one.compute(), dealt.compute()
    assert a.gain == b.gain and a.gain_se == b.gain_se and a.kept == b.kept


def test_other_losses_keep_or_drop_the_residual_whole() -> None:
    t = torch.arange(200)
    z = torch.zeros(200, 2, 1)
    sel = ResidualSelection(1, mse=False)
    sel.update(t, z, z, z, loss_linear=torch.ones(200), loss_full=torch.full((200,), 0.5) + 0.01 * (t % 3))
    d = sel.compute()
    assert d.kept and float(d.weight) == 1.0 and d.chosen == pytest.approx(d.full)
    sel = ResidualSelection(1, mse=False)
    sel.update(t, z, z, z, loss_linear=torch.ones(200), loss_full=torch.full((200,), 1.5))
    d = sel.compute()
    assert not d.kept and float(d.weight) == 0.0 and d.chosen == 1.0
    with pytest.raises(ValueError, match="needs each window's loss_linear and loss_full"):
        ResidualSelection(1, mse=False).update(t, z, z, z)


def test_the_selection_line_says_which_model_is_tested_and_why() -> None:
    values = torch.tensor([0.9, 1.0, 0.8, 0.15, 0.05], dtype=torch.float64)
    kept = selection_line("on", values, torch.tensor([1.0, 1.0]), 1.0)
    assert kept.startswith("tested model: linear path + Transformer residual, which beat the linear path alone")
    assert "gain out of sample 0.15, 1 standard error 0.05" in kept
    dropped = selection_line("on", values, torch.zeros(2), 1.0)
    assert dropped.startswith("tested model: the linear path alone; the Transformer residual did not beat it")
    assert "weighted per target by [0.50, 1.00]" in selection_line("on", values, torch.tensor([0.5, 1.0]), 1.0)
    assert selection_line("only", values, torch.zeros(2), 1.0) == "tested model: the Transformer alone (residual: only)"
    assert "no validation decided" in selection_line("on", torch.full((5,), -1.0), torch.ones(2), 1.0)
    # the blend names what is mixed: the linear path and the Transformer trained alone
    assert selection_line("blend", values, torch.ones(2), 1.0).startswith(
        "tested model: the Transformer alone (weight 1 on every target), which beat the linear path alone"
    )
    mixed = selection_line("blend", values, torch.tensor([0.25, 0.0]), 1.0)
    assert mixed.startswith(
        "tested model: (1 - w) linear path + w Transformer (trained alone), w per target [0.25, 0.00]"
    )
    assert selection_line("blend", values, torch.zeros(2), 1.0).startswith(
        "tested model: the linear path alone; the Transformer (trained alone) did not beat it"
    )
