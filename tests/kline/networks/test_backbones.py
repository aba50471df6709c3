"""The three backbones behind one network: each one's defining property (``bars`` with a causal mask is
causal, ``variates`` is equivariant to permuting the channels, ``patches`` keeps channels apart), what they
share (gradients, heads, quantiles, the residual path), checkpoints of the earlier layout, errors."""

from __future__ import annotations

import pytest
import torch

from lightning_tf.core import TransformerSpec
from lightning_tf.kline import BarBackbone, ForecastNet, KLineForecaster, VariateBackbone
from tests.helpers.kline import TINY, net_args

BACKBONES = ["patches", "variates", "bars"]
L, C, F = 32, 3, 6


def net(backbone: str, **kw) -> ForecastNet:
    args = dict(
        n_features=C, n_targets=C, context_len=L, horizon=F, backbone=backbone, dropout=0.0, head_dropout=0.0, **TINY
    )
    args.update(kw)
    return ForecastNet(**net_args(**args))


def bars(**kw) -> BarBackbone:
    args = dict(
        d_model=16,
        n_heads=2,
        n_layers=2,
        d_ff=32,
        dropout=0.0,
        attn_dropout=0.0,
        activation="relu",
        norm_first=True,
        norm="layer",
        pos_encoding="learned",
    )
    args.update(kw)
    causal = args.pop("causal", False)
    return BarBackbone(C, L, TransformerSpec(**args), causal=causal).eval()


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "learned", "rope", "alibi"])
def test_a_causal_bars_encoder_never_reads_a_later_bar(pos_encoding: str) -> None:
    x = torch.randn(2, L, C)
    t = 12
    later = x.clone()
    later[:, t + 1 :] = torch.randn(2, L - t - 1, C) * 3  # every bar after t changed
    causal = bars(causal=True, pos_encoding=pos_encoding)
    with torch.no_grad():
        h, moved = causal.encode(x)[0], causal.encode(later)[0]  # (B, L, D)
    torch.testing.assert_close(moved[:, : t + 1], h[:, : t + 1], rtol=0, atol=1e-6)
    assert (moved[:, t + 1 :] - h[:, t + 1 :]).abs().max() > 1e-3  # the later bars' own outputs do move
    # without the mask, bar t reads the later bars
    full = bars(causal=False, pos_encoding=pos_encoding)
    with torch.no_grad():
        assert (full.encode(later)[0][:, t] - full.encode(x)[0][:, t]).abs().max() > 1e-3
    # the attention itself: no weight on a later bar
    with torch.no_grad():
        weights = causal.encode(x, need_weights=True)[1]  # n_layers x (B, H, L, L)
    assert all(float(w.triu(1).abs().max()) == 0.0 for w in weights)


def test_variates_is_equivariant_to_permuting_the_channels() -> None:
    model = net("variates", revin_affine=False).eval()  # RevIN's per-channel affine map is channel-specific
    x = torch.randn(4, L, C) * torch.tensor([1.0, 3.0, 0.5]) + torch.tensor([0.0, 2.0, -1.0])
    perm = [2, 0, 1]
    with torch.no_grad():
        y = model(x)  # (B, F, C)
        torch.testing.assert_close(model(x[..., perm]), y[..., perm], rtol=1e-5, atol=1e-6)
        h = model.backbone(x)[0]  # (B, C, D): the tokens themselves
        torch.testing.assert_close(model.backbone(x[..., perm])[0], h[:, perm], rtol=1e-5, atol=1e-6)
        # and every channel reads the others (attention across the channels)
        x2 = x.clone()
        x2[..., 1] = torch.randn(4, L)
        assert (model(x2)[..., 0] - y[..., 0]).abs().max() > 1e-4
    # a head over all the channels at once is not equivariant: the property is the backbone's and its shared head's
    mixing = net("variates", revin_affine=False, channel_mixing=True, target_channels=[0, 1, 2]).eval()
    with torch.no_grad():
        assert (mixing(x[..., perm]) - mixing(x)[..., perm]).abs().max() > 1e-4


@pytest.mark.parametrize("residual", ["only", "on"])
def test_patches_keeps_each_channel_forecast_apart(residual: str) -> None:
    model = net("patches", residual=residual, quantiles=[0.1, 0.5, 0.9]).eval()
    with torch.no_grad():  # a residual and quantile gaps that are not zero, and a linear path that is not either
        model.head.weight.normal_(0.0, 0.1)
        model.quantile_head.weight.normal_(0.0, 0.1)
        if model.linear is not None:
            model.linear.weight.normal_(0.0, 0.1)
    x = torch.randn(2, L, C)
    x2 = x.clone()
    x2[..., 1] = torch.randn(2, L) * 5 + 3  # change channel 1 only
    with torch.no_grad():
        y, y2 = model.forward_quantiles(x), model.forward_quantiles(x2)  # (B, F, C, Q)
    torch.testing.assert_close(y2[:, :, [0, 2]], y[:, :, [0, 2]], rtol=0, atol=0)
    assert (y2[:, :, 1] - y[:, :, 1]).abs().max() > 1e-3


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("channel_mixing", [False, True])
def test_every_parameter_gets_a_gradient(backbone: str, channel_mixing: bool) -> None:
    model = net(
        backbone, channel_mixing=channel_mixing, target_channels=[0, 1, 2], quantiles=[0.1, 0.5, 0.9], residual="blend"
    )
    model.forward_quantiles(torch.randn(4, L, C)).pow(2).sum().backward()
    missing = [
        n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)
    ]
    assert not missing, f"parameters without gradient: {missing}"


@pytest.mark.parametrize("backbone", BACKBONES)
def test_a_residual_starts_at_zero_and_the_attention_rows_sum_to_one(backbone: str) -> None:
    """``residual: on`` starts as the linear path alone, whatever the backbone; the attention weights of each
    backbone are distributions over its tokens."""
    model = net(backbone, residual="on", target_channels=[0, 1, 2]).eval()
    x = torch.randn(2, L, C)
    with torch.no_grad():
        parts = model.parts(x)[0]
        assert torch.equal(model.combine(parts, gate=1.0), model.combine(parts, gate=0.0))
        _, weights = model.forward_with_attention(x)
    tokens = {"patches": model.backbone.n_patches if backbone == "patches" else 0, "variates": C, "bars": L}[backbone]
    groups = C if backbone == "patches" else 1
    assert weights[-1].shape == (2, groups, TINY["n_heads"], tokens, tokens)
    torch.testing.assert_close(weights[-1].sum(-1), torch.ones(2, groups, TINY["n_heads"], tokens))


def test_bars_mixes_channels_without_channel_mixing() -> None:
    """``bars`` has one representation of the whole window: its head forecasts every target from every
    channel even with ``channel_mixing: false`` (which then leaves the linear path per channel)."""
    model = net("bars", residual="on", target_channels=[0, 1, 2]).eval()
    assert model.head.in_features == L * TINY["d_model"] and model.head.out_features == F * C
    with torch.no_grad():
        model.head.weight.normal_(0.0, 0.1)
    x = torch.randn(2, L, C)
    x2 = x.clone()
    x2[..., 1] = torch.randn(2, L)
    with torch.no_grad():
        assert (model(x2)[..., 0] - model(x)[..., 0]).abs().max() > 1e-4
    assert model.linear is not None and not model.linear.mixing


def test_a_checkpoint_of_the_earlier_layout_loads() -> None:
    """Checkpoints written before the backbones held ``patch_embed`` and ``encoder`` at the network's top."""
    model = KLineForecaster(n_features=C, n_targets=C, context_len=L, horizon=F, target_channels=[0, 1, 2], **TINY)
    state = {k.replace("net.backbone.", "net."): v for k, v in model.state_dict().items()}
    assert "net.encoder.layers.0.self_attn.qkv_proj.weight" in state
    fresh = KLineForecaster(n_features=C, n_targets=C, context_len=L, horizon=F, target_channels=[0, 1, 2], **TINY)
    fresh.load_state_dict(state)  # strict
    x = torch.randn(2, L, C)
    model.eval(), fresh.eval()
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))


def test_variates_reads_no_positions_and_bars_one_per_bar() -> None:
    variates = net("variates", pos_encoding="learned")
    assert variates.backbone.encoder.pos.name == "none" and isinstance(variates.backbone, VariateBackbone)
    bar_net = net("bars", pos_encoding="learned")
    assert bar_net.backbone.encoder.pos.absolute.weight.shape == (L, TINY["d_model"])


def test_configuration_errors_name_the_values() -> None:
    with pytest.raises(
        ValueError, match=r"backbone must be one of \['patches', 'variates', 'bars', 'chronos_bolt'\], got 'words'"
    ):
        net("words")
    with pytest.raises(ValueError, match="causal: true needs norm: layer"):
        net("bars", causal=True, norm="batch")
    with pytest.raises(ValueError, match=r"patch_len \(40\) must not exceed context_len \(32\)"):
        net("patches", patch_len=40)
    net("variates", patch_len=40)  # patches only: the other backbones do not read it
    with pytest.raises(ValueError, match="backbone must be"):
        KLineForecaster(backbone="words")  # type: ignore[arg-type]
