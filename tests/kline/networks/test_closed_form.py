"""The choice among closed-form linear maps: effective degrees of freedom, each validation window's error,
and the one-standard-error rule (the simplest map within one block standard error of the lowest)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_tf.kline.evaluation.baselines import LinearBaseline
from lightning_tf.kline.evaluation.selection import block_standard_error
from lightning_tf.kline.networks.closed_form import (
    Candidate,
    GramStats,
    ValidationRows,
    choose_candidate,
    effective_dof,
    ridge_solutions,
    trend_matrix,
)
from lightning_tf.kline.networks.linear import LinearPath


def _hat_trace(z: torch.Tensor, w: torch.Tensor, ridge: float) -> float:
    """``tr(Z (Z'WZ + r s P)^-1 Z'W)`` built from the rows, the intercept (last column) unpenalised."""
    g = z.T @ (z * w[:, None])
    scale = float(g.diagonal().mean())
    pen = torch.eye(z.shape[1], dtype=z.dtype) * ridge * scale
    pen[-1, -1] = 0.0
    hat = z @ torch.linalg.pinv(g + pen) @ (z * w[:, None]).T  # (N, N)
    return float(hat.trace())


@pytest.mark.parametrize("ridge", [0.0, 1e-2, 1.0, 100.0])
def test_effective_dof_is_the_trace_of_the_hat_matrix(ridge: float) -> None:
    """Against the hat matrix built row by row (weighted rows, unpenalised intercept), with a design of
    rank less than its width (a column repeated, as the DLinear rows are) where the ridge-free answer is
    the rank."""
    torch.manual_seed(0)
    n, d = 200, 6
    x = torch.randn(n, d, dtype=torch.float64) + 3.0  # not centred: the intercept matters
    z = torch.cat((x, x[:, :2], torch.ones(n, 1, dtype=torch.float64)), dim=1)  # (n, d + 3), rank d + 1
    w = torch.rand(n, dtype=torch.float64) + 0.5
    stats = GramStats()
    stats.add(z, torch.randn(n, 3, dtype=torch.float64), w)
    (dof,) = effective_dof(stats, (ridge,))
    if ridge == 0:
        assert dof == d + 1
    else:
        assert dof == pytest.approx(_hat_trace(z, w, ridge), rel=1e-9)
        assert 1.0 < dof < d + 1


def test_validation_rows_score_each_window_on_the_model_scale() -> None:
    """Each window's error is its weighted squared error averaged over groups and outputs; the DLinear
    rows ``[remainder, trend, 1]`` are kept as the window they sum to."""
    torch.manual_seed(1)
    B, L, O = 7, 5, 3
    rows = ValidationRows()
    zs, ts, ws = [], [], []
    for _ in range(2):  # two batches, two groups each
        batch = []
        for _g in range(2):
            window = torch.randn(B, L, dtype=torch.float64)
            trend = torch.randn(B, L, dtype=torch.float64)
            z = torch.cat((window - trend, trend, torch.ones(B, 1, dtype=torch.float64)), dim=1)  # (B, 2L + 1)
            t, w = torch.randn(B, O, dtype=torch.float64), torch.rand(B, dtype=torch.float64)
            batch.append((z, t, w))
            zs.append(torch.cat((window, torch.ones(B, 1, dtype=torch.float64)), dim=1))
            ts.append(t)
            ws.append(w)
        rows.add(batch)
    weights = [torch.randn(L + 1, O, dtype=torch.float64) for _ in range(2)]
    got = rows.window_errors(weights)  # (2 B,)
    assert rows.rows == 2 * B and got.shape == (2 * B,)
    for batch in range(2):
        for i in range(B):
            by_hand = (
                sum(
                    float(
                        ws[2 * batch + g][i] * ((zs[2 * batch + g][i] @ weights[g] - ts[2 * batch + g][i]) ** 2).mean()
                    )
                    for g in range(2)
                )
                / 2
            )
            assert float(got[batch * B + i]) == pytest.approx(by_hand, rel=1e-12)


def _candidate(name: str, dof: float, errors: torch.Tensor) -> Candidate:
    return Candidate("raw", "linear", name, 0.0, dof, [], errors, torch.zeros(1, 1))


def test_the_one_standard_error_rule_keeps_the_simplest_map_within_noise() -> None:
    """The lowest error wins only when no map with fewer degrees of freedom is within one block standard
    error of it; ``select_se: 0`` takes the lowest; without validation, the first tried."""
    torch.manual_seed(2)
    base = torch.rand(400, dtype=torch.float64)
    rich = _candidate("rich", 50.0, base)
    noise = 0.05 * torch.randn(400, dtype=torch.float64)
    close = _candidate("close", 10.0, base + 0.001 + noise - noise.mean())  # worse by 0.001, noise about 0.0025
    far = _candidate("far", 2.0, base + 0.2)  # clearly worse
    diff = close.val_errors - rich.val_errors
    se = block_standard_error(diff, 10)
    assert 0 < float(diff.mean()) <= se  # the case meant: worse on average, but by less than one standard error
    assert choose_candidate([rich, close, far], blocks=10, select_se=1.0) is close
    assert choose_candidate([rich, close, far], blocks=10, select_se=0.0) is rich
    # a margin of several standard errors: the richer map earns its place
    clear = _candidate("clear", 10.0, base + 10 * se + 0.05 * torch.randn(400, dtype=torch.float64))
    assert choose_candidate([rich, clear, far], blocks=10, select_se=1.0) is rich
    unscored = [_candidate("first", 50.0, None), _candidate("second", 1.0, None)]  # type: ignore[arg-type]
    assert choose_candidate(unscored).pooling == "first"
    with pytest.raises(ValueError, match="no linear candidate"):
        choose_candidate([])


def _shared_rule(T: int, channels: int, noise: float, seed: int, a1: float = 1.5, a2: float = -0.7) -> torch.Tensor:
    """``channels`` noisy AR(2) series sharing one rule ``s_t = a1 s_{t-1} + a2 s_{t-2} + noise``."""
    g = torch.Generator().manual_seed(seed)
    s = torch.zeros(T, channels, dtype=torch.float64)
    for t in range(2, T):
        s[t] = a1 * s[t - 1] + a2 * s[t - 2] + noise * torch.randn(channels, generator=g, dtype=torch.float64)
    return s


def _pairs(series: torch.Tensor, L: int, F: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.arange(len(series) - L - F + 1)
    return torch.stack([series[i : i + L] for i in idx]), torch.stack([series[i + L : i + L + F] for i in idx])


def test_shared_dynamics_get_one_pooled_map_and_distinct_ones_per_channel_maps() -> None:
    """Channels that share a rule: the rule keeps the pooled map (the per-channel maps have 4x the degrees
    of freedom and validate no better beyond noise). Channels with opposite rules: per-channel wins by far
    and is kept. The baseline and the forecaster's path make the same choice on the same windows."""
    L, F = 24, 4
    shared = _shared_rule(3000, 4, 1.0, 0)
    x, y = _pairs(shared[:2000], L, F)
    xv, yv = _pairs(shared[2000:], L, F)
    path = LinearPath(L, F, n_features=4, n_targets=4, kernel_size=5)
    fit = path.fit(
        [(x, y, torch.ones(len(x), 4))],
        [(xv, yv, torch.ones(len(xv), 4))],
        [0, 1, 2, 3],
        normalized=False,
        select_se=1.0,
    )
    base = LinearBaseline(L, F, kernel_size=5, target_channels=[0, 1, 2, 3]).fit([(x, y)], [(xv, yv)], select_se=1.0)
    assert fit.pooling == "pooled" and base.variant.startswith("pooled")  # type: ignore[union-attr]
    assert (fit.form, fit.ridge) == (base.variant.rsplit("_", 1)[1], base.ridge)  # type: ignore[union-attr]
    assert not math.isnan(fit.dof) and fit.dof < L + 1
    found = path.candidates(
        [(x, y, torch.ones(len(x), 4))], [(xv, yv, torch.ones(len(xv), 4))], [0, 1, 2, 3], normalized=False
    )
    default = path.fit(
        [(x, y, torch.ones(len(x), 4))], [(xv, yv, torch.ones(len(xv), 4))], [0, 1, 2, 3], normalized=False
    )  # select_se 0: the lowest validation error, nothing simpler preferred
    assert default.val_mse == min(c.val_mse for c in found) and default.lowest is None  # type: ignore[type-var]
    assert len(found) == 3 * 2 * 8  # forms (Linear, DLinear, NLinear) x poolings x ridges
    apart = torch.cat((shared[:, :2], _shared_rule(3000, 2, 1.0, 1, a1=-0.9, a2=0.0)), dim=1)  # 2 and 3 oscillate
    x, y = _pairs(apart[:2000], L, F)
    xv, yv = _pairs(apart[2000:], L, F)
    fit = path.fit(
        [(x, y, torch.ones(len(x), 4))],
        [(xv, yv, torch.ones(len(xv), 4))],
        [0, 1, 2, 3],
        normalized=False,
        select_se=1.0,
    )
    assert fit.pooling == "per_channel"


def test_the_chosen_weights_are_the_ridge_solution_of_the_chosen_candidate() -> None:
    """Candidates hold no weights: what the path applies is solved again, and equals a direct solve."""
    shared = _shared_rule(800, 2, 1.0, 3)
    L, F = 16, 3
    x, y = _pairs(shared[:600], L, F)
    xv, yv = _pairs(shared[600:], L, F)
    path = LinearPath(L, F, n_features=2, n_targets=2, pooling="per_channel", kernel_size=5)
    fit = path.fit([(x, y, torch.ones(len(x), 2))], [(xv, yv, torch.ones(len(xv), 2))], [0, 1], normalized=False)
    trend = trend_matrix(L, 5)
    for k in range(2):
        window = torch.cat((x[:, :, k], torch.ones(len(x), 1, dtype=torch.float64)), dim=1)  # (B, L + 1)
        stats = GramStats()
        if fit.form == "linear":
            stats.add(window, y[:, :, k])
            ((_, w),) = ridge_solutions(stats, (fit.ridge,))
        else:
            tr = x[:, :, k] @ trend  # (B, L)
            stats.add(torch.cat((x[:, :, k] - tr, tr, window[:, -1:]), dim=1), y[:, :, k])
            ((_, wd),) = ridge_solutions(stats, (fit.ridge,))
            w = torch.cat(((torch.eye(L, dtype=torch.float64) - trend) @ wd[:L] + trend @ wd[L : 2 * L], wd[-1:]))
        assert torch.allclose(path.weight[k].double(), w, atol=1e-6)


def test_last_value_statistics_are_those_of_the_nlinear_rows() -> None:
    """``last_value_stats`` from the ``[window, 1]`` statistics equals accumulating NLinear's rows
    ``[window - last, 1]`` and outputs ``t - last`` directly (weighted), and the folded weights forecast
    ``last + [window - last, 1] @ W``."""
    from lightning_tf.kline.networks.closed_form import last_value_stats

    torch.manual_seed(4)
    n, L, O = 60, 7, 3
    window = torch.randn(n, L, dtype=torch.float64) + 2.0
    ones = torch.ones(n, 1, dtype=torch.float64)
    t, w = torch.randn(n, O, dtype=torch.float64), torch.rand(n, dtype=torch.float64)
    plain, direct = GramStats(), GramStats()
    plain.add(torch.cat((window, ones), dim=1), t, w)
    last = window[:, -1:]
    direct.add(torch.cat((window - last, ones), dim=1), t - last, w)
    got = last_value_stats(plain)
    for name in ("gram", "cross", "sq"):
        torch.testing.assert_close(getattr(got, name), getattr(direct, name), rtol=1e-12, atol=1e-10)
    assert (got.weight, got.rows) == (direct.weight, direct.rows)
    weights = torch.randn(L + 1, O, dtype=torch.float64)
    cand = Candidate("raw", "nlinear", "per_channel", 0.0, 1.0, [direct], None, torch.zeros(L, L))
    (folded,) = cand.fold([weights])
    torch.testing.assert_close(
        torch.cat((window, ones), dim=1) @ folded,
        last + torch.cat((window - last, ones), dim=1) @ weights,
        rtol=1e-12,
        atol=1e-10,
    )


def test_the_nlinear_form_is_refused_for_a_map_of_every_channel() -> None:
    """NLinear forecasts a target's change from its own last value, so a map that reads every channel's window
    (mixing) cannot take that form: one message, before any fit."""
    from lightning_tf.kline.networks.closed_form import GramStats, closed_form_candidates, trend_matrix

    with pytest.raises(ValueError, match=r"the NLinear form needs each group's own window \(not mixing\)"):
        closed_form_candidates([GramStats()], None, ["mixing"], ["nlinear"], [0.0], trend_matrix(8, 3), channels=3)
