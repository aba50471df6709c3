"""PatchTST: gradients, channel independence, RevIN wiring, attention over patches, the encoder's
norm option, configuration errors."""

from __future__ import annotations

import pytest
import torch

from lightning_tf.core import TokenBatchNorm
from lightning_tf.kline import PatchTST
from lightning_tf.kline.networks.layers import n_patches
from tests.helpers.kline import TINY, net_args


def net(**kw) -> PatchTST:
    args = dict(n_features=3, n_targets=3, context_len=32, horizon=6, **TINY)
    args.update(kw)
    return PatchTST(**net_args(**args))


@pytest.mark.parametrize("channel_mixing", [False, True])
def test_every_parameter_gets_a_gradient(channel_mixing: bool) -> None:
    model = net(channel_mixing=channel_mixing, target_channels=[0, 1, 2], dropout=0.0)
    x = torch.randn(4, 32, 3)
    model(x).pow(2).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"parameters without gradient: {missing}"


def test_channel_independent_head_keeps_channels_apart() -> None:
    model = net(channel_mixing=False).eval()
    x = torch.randn(2, 32, 3)
    x2 = x.clone()
    x2[:, :, 1] = torch.randn(2, 32) * 5 + 3  # change channel 1 only
    y, y2 = model(x), model(x2)
    torch.testing.assert_close(y2[..., [0, 2]], y[..., [0, 2]], rtol=0, atol=0)
    assert (y2[..., 1] - y[..., 1]).abs().max() > 1e-3
    # the mixing head, by contrast, lets channel 1 move every forecast
    mixing = net(channel_mixing=True, target_channels=[0, 1, 2]).eval()
    assert (mixing(x2)[..., 0] - mixing(x)[..., 0]).abs().max() > 1e-4


def test_target_channels_pick_the_forecast_channels() -> None:
    """A channel-independent net forecasts every channel; target_channels picks and orders the targets."""
    torch.manual_seed(0)
    every = net().eval()
    torch.manual_seed(0)
    picked = net(n_targets=2, target_channels=[2, 0]).eval()
    x = torch.randn(2, 32, 3)
    torch.testing.assert_close(picked(x), every(x)[..., [2, 0]], rtol=0, atol=0)


def test_revin_maps_a_zero_head_back_to_the_window_mean() -> None:
    """With the head's output zero, the forecast is RevIN's denormalisation of 0: each target
    channel's context mean."""
    model = net(target_channels=[2, 0], n_targets=2).eval()
    torch.nn.init.zeros_(model.head.weight)
    torch.nn.init.zeros_(model.head.bias)
    x = torch.randn(3, 32, 3) * 4 + torch.tensor([1.0, -2.0, 10.0])
    expected = x[..., [2, 0]].mean(1, keepdim=True).expand(-1, 6, -1)
    torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)


def test_attention_over_patches() -> None:
    model = net().eval()
    x = torch.randn(2, 32, 3)
    y, weights = model.forward_with_attention(x)
    N = n_patches(32, 8, 4)
    torch.testing.assert_close(y, model(x))  # the explicit-weights path computes the same forecast
    assert len(weights) == 2 and weights[0].shape == (2, 3, 2, N, N)
    torch.testing.assert_close(weights[-1].sum(-1), torch.ones(2, 3, 2, N))


def test_configuration_errors_name_the_values() -> None:
    with pytest.raises(ValueError, match=r"patch_len \(40\) must not exceed context_len \(32\)"):
        net(patch_len=40)
    with pytest.raises(ValueError, match=r"target_channels \[0\] must list n_targets \(3\)"):
        net(target_channels=[0])
    with pytest.raises(ValueError, match="must index the n_features"):
        net(n_targets=1, target_channels=[5])
    with pytest.raises(ValueError, match="target_channels is unknown"):
        net(n_targets=1)(torch.randn(1, 32, 3))
    with pytest.raises(ValueError, match="d_model"):
        net(d_model=15)
    with pytest.raises(ValueError, match=r"horizon must be at least 1, got 0"):
        net(horizon=0)


def test_batch_norm_encoder_option() -> None:
    model = net(norm="batch", norm_first=False)
    assert sum(isinstance(m, TokenBatchNorm) for m in model.modules()) == 2 * TINY["n_layers"]
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.backbone.encoder.modules())
