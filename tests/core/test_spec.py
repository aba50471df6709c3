"""TransformerSpec: the settings of a stack declared once, checked where they enter, handed to every layer."""

from __future__ import annotations

import pytest
import torch

from lightning_tf.core import Decoder, DecoderLayer, Encoder, TransformerSpec


def test_every_layer_reads_the_one_spec() -> None:
    spec = TransformerSpec(
        16, 4, 3, 24, dropout=0.3, attn_dropout=0.2, ffn_dropout=0.1, activation="swiglu", bias=False
    )
    enc = Encoder(spec)
    assert enc.spec is spec and len(enc.layers) == 3
    for layer in enc.layers:
        assert layer.dropout1.p == 0.3 and layer.ff.dropout.p == 0.1 and layer.self_attn.dropout == 0.2
        assert layer.ff.linear1.weight.shape == (48, 16) and layer.ff.linear1.bias is None  # SwiGLU: 2 x d_ff


def test_replace_changes_one_setting_and_checks_again() -> None:
    spec = TransformerSpec(16, 4, 2, dropout=0.0)
    deeper = spec.replace(n_layers=5)
    assert (deeper.n_layers, deeper.d_model, deeper.dropout) == (5, 16, 0.0) and spec.n_layers == 2
    with pytest.raises(ValueError, match=r"d_model \(16\) must be divisible by n_heads \(3\)"):
        spec.replace(n_heads=3)
    with pytest.raises(ValueError, match="need a Pre-LN layer"):
        spec.replace(norm_first=False, layer_scale=1e-4)


def test_defaults_resolve_ffn_dropout_and_final_norm() -> None:
    spec = TransformerSpec(16, 4, 1, dropout=0.25)
    assert spec.ffn_rate == 0.25 and spec.use_final_norm
    assert not spec.replace(norm_first=False).use_final_norm
    assert spec.replace(norm_first=False, final_norm=True).use_final_norm
    assert Encoder(spec.replace(final_norm=False)).norm is None


@pytest.mark.parametrize("change", [{"norm": "batch"}, {"drop_path": 0.1}, {"layer_scale": 1e-4}])
def test_a_decoder_refuses_what_only_encoders_have(change: dict) -> None:
    spec = TransformerSpec(16, 4, 1).replace(**change)
    with pytest.raises(
        ValueError, match="a decoder layer takes norm 'layer' or 'rms' and neither drop_path nor layer_scale"
    ):
        Decoder(spec)
    with pytest.raises(ValueError, match="a decoder layer takes"):
        DecoderLayer(spec)


def test_the_spec_is_frozen() -> None:
    spec = TransformerSpec(16, 4, 1)
    with pytest.raises(AttributeError):
        spec.d_model = 32  # type: ignore[misc]
    torch.manual_seed(0)
    a = Encoder(spec)
    torch.manual_seed(0)
    b = Encoder(TransformerSpec(16, 4, 1))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_a_head_dimension_frees_d_model_from_the_head_count() -> None:
    spec = TransformerSpec(16, 3, 1, d_head=8)
    assert Encoder(spec).layers[0].self_attn.qkv_proj.out_features == 72
    with pytest.raises(ValueError, match=r"d_head must be positive, got 0"):
        TransformerSpec(16, 3, 1, d_head=0)
    with pytest.raises(ValueError, match=r"d_model \(16\) must be divisible by n_heads \(3\)"):
        TransformerSpec(16, 3, 1)
    assert TransformerSpec(16, 4, 1, bias=False).use_ffn_bias is False
    assert TransformerSpec(16, 4, 1, bias=False, ffn_bias=True).use_ffn_bias is True
