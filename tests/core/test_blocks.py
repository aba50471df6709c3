"""EncoderLayer, DecoderLayer and FeedForward against torch's own layers and hand-written formulas.

The reference is ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` with the same
weights (dropout 0, eval mode). Their ``key_padding_mask`` reads True = ignore, ours True = may
attend, so every padding mask is built once and handed to each side in its own polarity.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_tf.core import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    KVCache,
    RMSNorm,
    RotaryEmbedding,
    TransformerSpec,
    padding_mask,
)
from tests.helpers.core import copy_decoder_layer, copy_encoder_layer

D, H, D_FF = 16, 4, 32
B, T, S = 3, 7, 5
ATOL = 1e-5


def _randomize_norms(module: nn.Module) -> None:
    # layer norms start at identity; random affine parameters make a swapped norm visible
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


def _randomize_biases(module: nn.Module) -> None:
    # nn initialises attention biases to zero; nonzero ones make a mis-sliced bias visible
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)


def _float_key_mask(keep: Tensor) -> Tensor:
    """nn's key_padding_mask as a float mask (-inf = ignore), from our (B, 1, 1, S) True = keep."""
    keep = keep[:, 0, 0, :]  # (B, S)
    return torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))  # (B, S)


def _float_causal(n: int) -> Tensor:
    return nn.Transformer.generate_square_subsequent_mask(n)  # (n, n), -inf above the diagonal


def _real(lengths: Tensor, n: int) -> Tensor:
    """(B, n) bool, True at the real (non-padded) positions."""
    return torch.arange(n).unsqueeze(0) < lengths.unsqueeze(1)


# ------------------------------------------------------------------------------------------------
# EncoderLayer
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("padded", [False, True])
def test_encoder_layer_matches_torch(norm_first: bool, activation: str, padded: bool) -> None:
    ref = nn.TransformerEncoderLayer(
        D, H, D_FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    _randomize_norms(ref)
    _randomize_biases(ref)
    ours = EncoderLayer(
        TransformerSpec(D, H, 1, D_FF, dropout=0.0, activation=activation, norm_first=norm_first)
    ).eval()
    copy_encoder_layer(ref, ours)

    x = torch.randn(B, T, D)
    lengths = torch.tensor([T, 4, 2]) if padded else torch.full((B,), T)
    keep = padding_mask(lengths=lengths, max_len=T)  # (B, 1, 1, T)
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=_float_key_mask(keep) if padded else None)
        got, w = ours(x, keep if padded else None)
        got_explicit, w_explicit = ours(x, keep if padded else None, need_weights=True)

    assert w is None
    real = _real(lengths, T)  # compare only real positions: nn may zero padded rows (nested tensors)
    torch.testing.assert_close(got[real], expected[real], atol=ATOL, rtol=0)
    torch.testing.assert_close(got_explicit, got, atol=ATOL, rtol=0)

    # our weights equal nn.MultiheadAttention's per-head weights on the same (normed) input
    h = ours.norm1(x) if norm_first else x
    with torch.no_grad():
        _, w_ref = ref.self_attn(
            h,
            h,
            h,
            key_padding_mask=_float_key_mask(keep) if padded else None,
            need_weights=True,
            average_attn_weights=False,
        )  # (B, H, T, T)
    torch.testing.assert_close(w_explicit, w_ref, atol=ATOL, rtol=0)


def test_encoder_layer_copy_is_not_vacuous() -> None:
    """The comparison above can fail: one perturbed weight breaks the match."""
    ref = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, norm_first=True).eval()
    ours = EncoderLayer(TransformerSpec(D, H, 1, D_FF, dropout=0.0, norm_first=True)).eval()
    copy_encoder_layer(ref, ours)
    x = torch.randn(B, T, D)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], ref(x), atol=ATOL, rtol=0)
        ours.self_attn.qkv_proj.weight[D + 1, 0] += 0.5  # one key weight
        assert (ours(x)[0] - ref(x)).abs().max() > 1e-3


def test_encoder_layer_padding_mask_hides_keys() -> None:
    """Changing a padded position's input leaves the real positions' outputs unchanged."""
    layer = EncoderLayer(TransformerSpec(D, H, 1, D_FF, dropout=0.0)).eval()
    x = torch.randn(B, T, D)
    lengths = torch.tensor([T, 4, 2])
    keep = padding_mask(lengths=lengths, max_len=T)
    x2 = x.clone()
    x2[~_real(lengths, T)] = torch.randn(int((~_real(lengths, T)).sum()), D) * 10
    with torch.no_grad():
        y, _ = layer(x, keep)
        y2, _ = layer(x2, keep)
        y_unmasked, _ = layer(x2)
    real = _real(lengths, T)
    torch.testing.assert_close(y[real], y2[real], atol=ATOL, rtol=0)
    assert (y_unmasked[1, :4] - y[1, :4]).abs().max() > 1e-3  # without the mask the noise leaks


# ------------------------------------------------------------------------------------------------
# DecoderLayer
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("tgt_padded", [False, True])
@pytest.mark.parametrize("memory_padded", [False, True])
def test_decoder_layer_matches_torch(
    norm_first: bool, activation: str, causal: bool, tgt_padded: bool, memory_padded: bool
) -> None:
    ref = nn.TransformerDecoderLayer(
        D, H, D_FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    _randomize_norms(ref)
    _randomize_biases(ref)
    ours = DecoderLayer(
        TransformerSpec(D, H, 1, D_FF, dropout=0.0, activation=activation, norm_first=norm_first)
    ).eval()
    copy_decoder_layer(ref, ours)

    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    tgt_lengths = torch.tensor([T, 5, 3]) if tgt_padded else torch.full((B,), T)
    mem_lengths = torch.tensor([2, S, 4]) if memory_padded else torch.full((B,), S)
    tgt_keep = padding_mask(lengths=tgt_lengths, max_len=T)  # (B, 1, 1, T)
    mem_keep = padding_mask(lengths=mem_lengths, max_len=S)  # (B, 1, 1, S)
    self_mask = tgt_keep if tgt_padded else None
    memory_mask = mem_keep if memory_padded else None

    with torch.no_grad():
        expected = ref(
            x,
            memory,
            tgt_mask=_float_causal(T) if causal else None,
            tgt_key_padding_mask=_float_key_mask(tgt_keep) if tgt_padded else None,
            memory_key_padding_mask=_float_key_mask(mem_keep) if memory_padded else None,
            tgt_is_causal=causal,
        )
        got, sw, cw = ours(x, memory, self_mask, memory_mask, is_causal=causal)
        got_explicit, sw_explicit, cw_explicit = ours(
            x, memory, self_mask, memory_mask, is_causal=causal, need_weights=True
        )

    assert sw is None and cw is None
    real = _real(tgt_lengths, T)
    torch.testing.assert_close(got[real], expected[real], atol=ATOL, rtol=0)
    torch.testing.assert_close(got_explicit, got, atol=ATOL, rtol=0)
    assert sw_explicit is not None and cw_explicit is not None
    if causal:  # no weight above the diagonal, ever
        assert (sw_explicit.triu(1) == 0).all()
    if memory_padded:
        assert (cw_explicit.masked_select(~mem_keep.expand_as(cw_explicit)) == 0).all()


def test_decoder_layer_causal_flag_matters() -> None:
    """is_causal=True and False give different outputs, so the causal comparison tests something."""
    layer = DecoderLayer(TransformerSpec(D, H, 1, D_FF, dropout=0.0)).eval()
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    with torch.no_grad():
        causal, _, _ = layer(x, memory, is_causal=True)
        full, _, _ = layer(x, memory, is_causal=False)
    torch.testing.assert_close(causal[:, -1], full[:, -1], atol=ATOL, rtol=0)  # the last sees all
    assert (causal[:, 0] - full[:, 0]).abs().max() > 1e-3


# ------------------------------------------------------------------------------------------------
# FeedForward
# ------------------------------------------------------------------------------------------------


def test_swiglu_matches_hand_computation() -> None:
    d_ff = 24
    ff = FeedForward(D, d_ff, activation="swiglu").eval()
    with torch.no_grad():
        ff.linear1.bias.uniform_(-0.5, 0.5)
        ff.linear2.bias.uniform_(-0.5, 0.5)
    x = torch.randn(B, T, D)
    W_gate, W_value = ff.linear1.weight[:d_ff], ff.linear1.weight[d_ff:]  # (d_ff, D) each
    b_gate, b_value = ff.linear1.bias[:d_ff], ff.linear1.bias[d_ff:]
    with torch.no_grad():
        gate = x @ W_gate.T + b_gate
        value = x @ W_value.T + b_value
        hidden = gate * torch.sigmoid(gate) * value  # silu(g) = g * sigmoid(g)
        expected = hidden @ ff.linear2.weight.T + ff.linear2.bias
        got = ff(x)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    ("activation", "fn"),
    [
        ("relu", F.relu),
        ("gelu", lambda h: 0.5 * h * (1 + torch.erf(h / 2**0.5))),
        ("silu", lambda h: h / (1 + torch.exp(-h))),  # swish: x * sigmoid(x)
        # GPT-2's and T5's gelu_new
        ("gelu_tanh", lambda h: 0.5 * h * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (h + 0.044715 * h**3)))),
    ],
)
def test_feedforward_matches_hand_computation(activation: str, fn) -> None:
    ff = FeedForward(D, D_FF, activation=activation).eval()
    with torch.no_grad():
        ff.linear1.bias.uniform_(-0.5, 0.5)
    x = torch.randn(B, T, D)
    with torch.no_grad():
        expected = fn(x @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T + ff.linear2.bias
        torch.testing.assert_close(ff(x), expected, atol=ATOL, rtol=0)


def test_geglu_is_t5s_gated_gelu() -> None:
    """T5 v1.1: ``wo(gelu_new(wi_0 x) * wi_1 x)``; ``linear1`` holds wi_0 (the gate) then wi_1."""
    ff = FeedForward(D, 24, activation="geglu", bias=False).eval()
    x = torch.randn(B, T, D)
    gate, value = x @ ff.linear1.weight[:24].T, x @ ff.linear1.weight[24:].T
    gelu_new = 0.5 * gate * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (gate + 0.044715 * gate**3)))
    with torch.no_grad():
        torch.testing.assert_close(ff(x), (gelu_new * value) @ ff.linear2.weight.T, atol=ATOL, rtol=0)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"])
def test_feedforward_default_width_is_four_d_model(activation: str) -> None:
    ff = FeedForward(D, activation=activation)
    assert ff.linear2.in_features == 4 * D
    assert ff.linear1.out_features == (2 if activation in ("swiglu", "geglu") else 1) * 4 * D


def test_feedforward_unknown_activation() -> None:
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        FeedForward(D, activation="tanh")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ BatchNorm option
def test_token_batch_norm_is_batch_norm_over_every_token() -> None:
    from lightning_tf.core import TokenBatchNorm

    torch.manual_seed(0)
    x = torch.randn(4, 7, 16) * 3 + 1  # (B, T, D)
    ours, ref = TokenBatchNorm(16), torch.nn.BatchNorm1d(16)
    ref.load_state_dict(ours.bn.state_dict())
    expected = ref(x.reshape(-1, 16)).reshape(4, 7, 16)  # statistics over all B*T tokens
    torch.testing.assert_close(ours(x), expected)
    torch.testing.assert_close(ours.bn.running_mean, ref.running_mean)
    # a token's output depends on the other sequences of the batch (unlike LayerNorm)
    y = x.clone()
    y[1:] += 5
    assert not torch.allclose(ours(y)[0], ours(x)[0])


def test_encoder_with_batch_norm_uses_it_everywhere_and_refuses_a_padding_mask() -> None:
    from lightning_tf.core import Encoder, TokenBatchNorm

    enc = Encoder(TransformerSpec(16, 4, 2, norm="batch", norm_first=False))
    norms = [m for m in enc.modules() if isinstance(m, (TokenBatchNorm, torch.nn.LayerNorm))]
    assert len(norms) == 4 and all(isinstance(m, TokenBatchNorm) for m in norms)
    x = torch.randn(3, 5, 16)
    assert enc(x).shape == (3, 5, 16)
    with pytest.raises(ValueError, match=r"Encoder\(norm='batch'\) cannot take a padding mask"):
        enc(x, torch.ones(3, 1, 1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="norm must be 'layer', 'rms' or 'batch', got 'group'"):
        Encoder(TransformerSpec(16, 4, 1, norm="group"))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ RMSNorm, decoder-only caching


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_is_the_root_mean_square_scaled(dtype: torch.dtype) -> None:
    norm = RMSNorm(D, eps=1e-6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = (torch.randn(B, T, D) * 3 + 1).to(dtype)
    h = x.double()
    expected = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight.double()
    got = norm.to(dtype)(x)
    assert got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.double(), expected.to(dtype).double(), atol=tol, rtol=tol)
    # no mean is taken out: a shifted input does not give the same output, unlike LayerNorm
    assert not torch.allclose(norm.float()(x.float() + 5), norm.float()(x.float()), atol=1e-2)


def test_rms_spec_builds_rms_norms_in_encoder_and_decoder_layers() -> None:
    spec = TransformerSpec(D, 4, 1, D_FF, dropout=0.0, norm="rms")
    for layer in (EncoderLayer(spec), DecoderLayer(spec)):
        norms = [m for m in layer.modules() if isinstance(m, (RMSNorm, nn.LayerNorm))]
        assert norms and all(isinstance(m, RMSNorm) for m in norms)


def test_spec_options_reach_the_layers() -> None:
    """T5's settings: biases off but (Kronos) the feed-forward's apart, a head dimension, an unscaled product."""
    spec = TransformerSpec(D, 3, 1, D_FF, bias=True, ffn_bias=False, d_head=8, attn_scale=1.0)
    layer = DecoderLayer(spec)
    assert layer.self_attn.qkv_proj.bias is not None and layer.ff.linear1.bias is None
    assert layer.self_attn.qkv_proj.weight.shape == (72, D) and layer.cross_attn.d_head == 8
    assert layer.self_attn.scale == 1.0 and layer.cross_attn.scale == 1.0


def test_a_causal_encoder_layer_with_a_cache_equals_its_full_pass() -> None:
    """The decoder-only use (Kronos): the newest positions against the cached ones, RoPE at their offsets."""
    spec = TransformerSpec(D, 4, 1, D_FF, dropout=0.0, norm="rms", pos_encoding="rope", activation="swiglu")
    layer = EncoderLayer(spec).eval()
    rope = RotaryEmbedding(D // 4)
    x = torch.randn(B, 9, D)
    with torch.no_grad():
        full, _ = layer(x, is_causal=True, rotary=rope(9))
        cache, outs, start = KVCache(), [], 0
        for n in (4, 1, 3, 1):
            out, _ = layer(x[:, start : start + n], is_causal=True, rotary=rope(n, start), cache=cache)
            outs.append(out)
            start += n
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=0)
