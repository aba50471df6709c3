"""Stochastic depth (DropPath) and LayerScale in the encoder layer and stack."""

from __future__ import annotations

import pytest
import torch

from lightning_tf.core import DropPath, Encoder, EncoderLayer, LayerScale, TransformerSpec

D, H = 16, 4


def test_drop_path_keeps_or_drops_whole_samples_and_is_unbiased() -> None:
    p = 0.25
    dp = DropPath(p).train()
    x = torch.randn(4000, 3, D) + 2.0
    y = dp(x)
    ratio = y / x  # (B, 3, D): one value per sample, either 0 or 1 / (1 - p)
    per_sample = ratio.flatten(1)
    assert torch.allclose(per_sample, per_sample[:, :1].expand_as(per_sample))
    values = per_sample[:, 0]
    assert torch.all((values == 0) | torch.isclose(values, torch.tensor(1 / (1 - p))))
    assert abs((values == 0).float().mean().item() - p) < 0.03
    assert torch.allclose(y.mean(0), x.mean(0), atol=0.15)


def test_drop_path_is_identity_in_eval_and_at_zero() -> None:
    x = torch.randn(5, 3, D)
    assert torch.equal(DropPath(0.5).eval()(x), x)
    assert torch.equal(DropPath(0.0).train()(x), x)


@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_drop_path_rejects_bad_rate(p: float) -> None:
    with pytest.raises(ValueError, match=r"drop_path must be in \[0, 1\)"):
        DropPath(p)


def test_layer_scale_multiplies_channels() -> None:
    ls = LayerScale(D, 0.1)
    x = torch.randn(2, 3, D)
    assert torch.allclose(ls.gamma, torch.full((D,), 0.1))
    with torch.no_grad():
        ls.gamma.copy_(torch.arange(D, dtype=torch.float32))
    assert torch.allclose(ls(x), x * torch.arange(D))


def test_layer_scale_zero_makes_the_layer_an_identity() -> None:
    layer = EncoderLayer(TransformerSpec(D, H, 1, dropout=0.0, layer_scale=0.0)).eval()
    x = torch.randn(2, 5, D)
    assert torch.equal(layer(x)[0], x)


def test_layer_scale_one_and_eval_drop_path_change_nothing() -> None:
    torch.manual_seed(0)
    plain = EncoderLayer(TransformerSpec(D, H, 1, dropout=0.0)).eval()
    regular = EncoderLayer(TransformerSpec(D, H, 1, dropout=0.0, layer_scale=1.0, drop_path=0.3)).eval()
    missing, unexpected = regular.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing) == ["ls1.gamma", "ls2.gamma"] and not unexpected
    x = torch.randn(2, 5, D)
    assert torch.allclose(regular(x)[0], plain(x)[0], atol=1e-6)


def test_drop_path_in_training_drops_branches_per_sample() -> None:
    """With rate close to 1 nearly every branch is dropped, so most samples pass through unchanged."""
    layer = EncoderLayer(TransformerSpec(D, H, 1, dropout=0.0, drop_path=0.99)).train()
    x = torch.randn(64, 5, D)
    unchanged = (layer(x)[0] == x).flatten(1).all(1)
    assert unchanged.float().mean() > 0.9


def test_encoder_drop_path_rises_linearly_over_depth() -> None:
    enc = Encoder(TransformerSpec(D, H, 5, drop_path=0.2, layer_scale=1e-4))
    rates = [getattr(layer.drop_path1, "p", 0.0) for layer in enc.layers]
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert all(torch.allclose(layer.ls2.gamma, torch.full((D,), 1e-4)) for layer in enc.layers)


def test_regularizers_need_pre_ln() -> None:
    with pytest.raises(ValueError, match="need a Pre-LN layer"):
        EncoderLayer(TransformerSpec(D, H, 1, norm_first=False, drop_path=0.1))
    with pytest.raises(ValueError, match=r"drop_path must be in \[0, 1\), got 1.5"):
        Encoder(TransformerSpec(D, H, 2, drop_path=1.5))


@pytest.mark.parametrize(("ffn_dropout", "expected"), [(None, 0.3), (0.0, 0.0), (0.6, 0.6)])
def test_ffn_dropout_is_the_hidden_units_rate_in_both_stacks(ffn_dropout: float | None, expected: float) -> None:
    from torch import nn

    from lightning_tf.core import Decoder
    from tests.helpers.core import hidden_dropout_rates

    torch.manual_seed(0)
    kw = dict(dropout=0.3, ffn_dropout=ffn_dropout, activation="gelu")
    enc, dec = Encoder(TransformerSpec(D, H, 2, 64, **kw)), Decoder(TransformerSpec(D, H, 2, 64, **kw))
    x = torch.randn(8, 24, D)
    rates = hidden_dropout_rates(enc, lambda: enc(x)) + hidden_dropout_rates(dec, lambda: dec(x, x))
    assert len(rates) == 4  # 12,288 hidden units per layer: a standard error of 0.005 at most
    assert all(abs(r - expected) < 0.03 for r in rates), rates
    if expected == 0:
        assert all(r == 0 for r in rates)
    # the embeddings' and the sublayer outputs' dropout keep `dropout`'s rate
    others = [
        m.p
        for stack in (enc, dec)
        for name, m in stack.named_modules()
        if isinstance(m, nn.Dropout) and ".ff." not in name
    ]
    assert len(others) == 2 + 2 * 2 + 2 * 3 and set(others) == {0.3}
