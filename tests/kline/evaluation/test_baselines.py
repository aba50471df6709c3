"""Each baseline computes what it claims, on series small enough to check by hand."""

from __future__ import annotations

import pytest
import torch

from lightning_tf.kline.evaluation.baselines import LinearBaseline, drift, mean_forecast, moving_average, persistence

PAST = torch.tensor([1.0, 2.0, 3.0, 6.0]).view(1, 4, 1)  # (B=1, L=4, K=1)


def test_persistence_repeats_the_last_value_or_predicts_no_change() -> None:
    assert persistence(PAST, 3).flatten().tolist() == [6.0, 6.0, 6.0]
    assert persistence(PAST, 3, returns=True).flatten().tolist() == [0.0, 0.0, 0.0]


def test_mean_and_drift() -> None:
    assert mean_forecast(PAST, 2).flatten().tolist() == [3.0, 3.0]
    # one-bar returns: the drift is the mean return at every step, accumulated for cumulative targets
    assert mean_forecast(PAST, 2, returns=True, cumulative=False).flatten().tolist() == [3.0, 3.0]
    assert mean_forecast(PAST, 3, returns=True, cumulative=True).flatten().tolist() == [3.0, 6.0, 9.0]
    # the line through the first (1) and last (6) values: slope 5/3 per bar
    torch.testing.assert_close(drift(PAST, 3).flatten(), torch.tensor([6 + 5 / 3, 6 + 10 / 3, 11.0]))


def test_moving_average_pads_with_the_end_values() -> None:
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 8.0]).view(1, 5, 1)
    torch.testing.assert_close(moving_average(x, 3).flatten(), torch.tensor([4 / 3, 2.0, 3.0, 5.0, 20 / 3]))


def _windows(series: torch.Tensor, L: int, F: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.arange(len(series) - L - F + 1)
    x = torch.stack([series[i : i + L] for i in idx])  # (B, L, C)
    y = torch.stack([series[i + L : i + L + F] for i in idx])  # (B, F, C)
    return x, y


def _ar2(a1: float, a2: float, T: int = 300) -> torch.Tensor:
    """Two channels of a noiseless AR(2) with drift, ``s_t = a1 s_{t-1} + a2 s_{t-2} + 0.1``, ``(T, 2)``."""
    s = torch.zeros(T, 2, dtype=torch.float64)
    s[:2] = torch.tensor([[1.0, -0.5], [0.3, 0.8]], dtype=torch.float64)
    for t in range(2, T):
        s[t] = a1 * s[t - 1] + a2 * s[t - 2] + 0.1
    return s


@pytest.mark.parametrize(
    "variant",
    ["pooled_dlinear", "pooled_linear", "per_channel_dlinear", "per_channel_linear", "mixing_dlinear", "mixing_linear"],
)
def test_every_linear_variant_recovers_an_exactly_linear_rule(variant: str) -> None:
    # an AR(2) with no noise: every future value is a fixed linear function of the context
    L, F = 12, 4
    x, y = _windows(_ar2(1.6, -0.8), L, F)
    channels = None if variant.startswith("mixing") else [0, 1]
    base = LinearBaseline(L, F, kernel_size=5, target_channels=channels, n_targets=2, variants=[variant])
    base.fit([(x[:150], y[:150]), (x[150:200], y[150:200])], ridges=(0.0,))
    assert base.variant == variant
    torch.testing.assert_close(base(x[200:]), y[200:], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("variant", ["pooled_nlinear", "per_channel_nlinear"])
def test_nlinear_recovers_a_rule_that_moves_with_the_level(variant: str) -> None:
    """NLinear forecasts the change from the last value, so its weights over the window sum to one: exact on
    an AR(2) with drift whose coefficients sum to one (a level shift of the past shifts the future alike);
    on a noisy mean-reverting series the constraint binds and the plain form fits the training windows
    better."""
    L, F = 12, 4
    x, y = _windows(_ar2(1.5, -0.5), L, F)
    base = LinearBaseline(L, F, kernel_size=5, target_channels=[0, 1], variants=[variant])
    base.fit([(x[:150], y[:150]), (x[150:200], y[150:200])], ridges=(0.0,))
    assert base.variant == variant and base.describe().endswith("NLinear, ridge 0")
    torch.testing.assert_close(base(x[200:]), y[200:], atol=1e-6, rtol=1e-6)
    sums = base.weight[:, :L].sum(dim=1)  # (groups, F): the window's weights per output
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-9, rtol=0)
    g = torch.Generator().manual_seed(0)
    noisy = torch.zeros(2000, 2, dtype=torch.float64)
    for t in range(1, 2000):
        noisy[t] = 0.5 * noisy[t - 1] + torch.randn(2, generator=g, dtype=torch.float64)
    x, y = _windows(noisy, L, F)
    mse = {}
    for form in ("linear", "nlinear"):
        fit = LinearBaseline(L, F, kernel_size=5, target_channels=[0, 1], variants=[variant.replace("nlinear", form)])
        fit.fit([(x, y)], ridges=(0.0,))
        mse[form] = float((fit(x) - y).pow(2).mean())
    assert mse["nlinear"] > 1.05 * mse["linear"]


def test_dlinear_is_the_dlinear_architecture() -> None:
    """The fitted weights, read as DLinear's two linear layers over remainder and trend, give the
    same forecast as the closed form."""
    L, F, k = 16, 3, 5
    x = torch.randn(64, L, 1, dtype=torch.float64)
    y = torch.randn(64, F, 1, dtype=torch.float64)
    base = LinearBaseline(L, F, kernel_size=k, target_channels=[0], variants=["per_channel_dlinear"])
    base.fit([(x, y)], ridges=(0.1,))
    w = base.weight[0]  # (2L + 1, F)
    trend = moving_average(x, k)[..., 0]  # (B, L)
    seasonal = x[..., 0] - trend
    expected = seasonal @ w[:L] + trend @ w[L : 2 * L] + w[-1]  # (B, F)
    torch.testing.assert_close(base(x)[..., 0], expected)


def test_dlinear_chooses_the_ridge_on_validation() -> None:
    # few noisy training windows and many features: an unpenalised fit overfits, a ridge does better
    g = torch.Generator().manual_seed(0)
    L, F = 48, 2
    x = torch.randn(60, L, 1, generator=g, dtype=torch.float64)
    y = x[:, -1:, :].expand(-1, F, -1) + torch.randn(60, F, 1, generator=g, dtype=torch.float64)
    xv = torch.randn(200, L, 1, generator=g, dtype=torch.float64)
    yv = xv[:, -1:, :].expand(-1, F, -1) + torch.randn(200, F, 1, generator=g, dtype=torch.float64)
    chosen = LinearBaseline(L, F, 5, target_channels=[0]).fit([(x, y)], [(xv, yv)])
    plain = LinearBaseline(L, F, 5, target_channels=[0]).fit([(x, y)], ridges=(0.0,))
    assert chosen.ridge is not None and chosen.ridge > 0

    def mse(b):
        return float(((b(xv) - yv) ** 2).mean())

    assert mse(chosen) < mse(plain)


def test_linear_baseline_weights_are_buffers_that_a_fresh_one_loads() -> None:
    """The fit is module state: a state dict carries it (shapes and variant included) to an unfitted one."""
    L, F = 12, 3
    x, y = torch.randn(40, L, 2, dtype=torch.float64), torch.randn(40, F, 1, dtype=torch.float64)
    base = LinearBaseline(L, F, 5, n_targets=1)
    assert not base.fitted and base.ridge is None and base.variant is None
    base.target_channels = [1]
    base.fit([(x, y)], [(x[:10], y[:10])])
    assert base.fitted and base.variant in ("per_channel_linear", "per_channel_dlinear")
    assert base.weight.shape[0] == 1 and base.weight.shape[2] == F
    assert not list(base.parameters()) and set(base.state_dict()) == {"weight", "channels", "penalty", "form"}
    fresh = LinearBaseline(L, F, 5, n_targets=1)
    fresh.load_state_dict(base.state_dict())
    assert fresh.target_channels == [1] and fresh.ridge == base.ridge and fresh.variant == base.variant
    torch.testing.assert_close(fresh(x), base(x), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="not fitted"):
        LinearBaseline(L, F)(x)
    with pytest.raises(ValueError, match=r"variants \['cubic'\] must be some of"):
        LinearBaseline(L, F, variants=["cubic"])


def test_linear_baseline_keeps_the_variant_that_validates_best() -> None:
    """Two channels with different dynamics: one map per channel fits both; a pooled map cannot. The
    validation windows pick per-channel; two channels driven by one rule pick either (equal), and the
    choice is reported in words."""
    T, L, F = 400, 8, 2
    t = torch.arange(T, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    s = torch.stack((torch.sin(t / 3), torch.sin(t / 11)), dim=1) + 0.01 * torch.randn(
        T, 2, generator=g, dtype=torch.float64
    )
    x, y = _windows(s, L, F)
    base = LinearBaseline(L, F, 3, target_channels=[0, 1]).fit([(x[:250], y[:250])], [(x[250:], y[250:])])
    assert base.variant.startswith("per_channel")
    assert base.describe().startswith("per-channel")
    pooled = LinearBaseline(L, F, 3, target_channels=[0, 1], variants=["pooled_linear"]).fit([(x[:250], y[:250])])

    def mse(b):
        return float(((b(x[250:]) - y[250:]) ** 2).mean())

    assert mse(base) < mse(pooled)
    torch.testing.assert_close(pooled.weight[0], pooled.weight[1])  # one map shared by the channels
