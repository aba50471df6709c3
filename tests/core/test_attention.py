"""MultiHeadAttention and KVCache.

Three implementations must agree: the fused path (``F.scaled_dot_product_attention``), the
explicit path (``need_weights=True``) and :func:`reference_attention` below, a per-head
matmul/softmax written from the module's own projection weights. Cached decoding must equal full
recomputation, and a query with no visible key must give zeros, never NaN.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from lightning_tf.core import (
    ALiBi,
    KVCache,
    MultiHeadAttention,
    RotaryEmbedding,
    apply_rotary,
    causal_mask,
    combine_masks,
    masked_bias,
    padding_mask,
)

B, T, S, D, H = 2, 5, 7, 16, 4
DH = D // H
ATOL = 1e-6  # fused vs explicit
REF_ATOL = 1e-5  # module vs the reference written here


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return x @ w.T + (0.0 if b is None else b)


def _rows(b: Tensor | None, sl: slice) -> Tensor | None:
    return None if b is None else b[sl]


def reference_attention(
    mha: MultiHeadAttention,
    x: Tensor,
    context: Tensor | None = None,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Plain attention, one head at a time, from ``mha``'s weights.

    ``mask`` is bool (True = may attend) and ``bias`` additive, both broadcastable to (B, H, T, S).
    A query row with no visible key gets zero weights and a zero head output.
    Returns the output (B, T, D) and the weights (B, H, T, S).
    """
    d, n_heads = mha.d_model, mha.n_heads
    dh = d // n_heads
    if mha.cross_attention:
        src = context
        wq, bq = mha.q_proj.weight, mha.q_proj.bias
        wk, wv = mha.kv_proj.weight[:d], mha.kv_proj.weight[d:]
        bk, bv = _rows(mha.kv_proj.bias, slice(0, d)), _rows(mha.kv_proj.bias, slice(d, 2 * d))
    else:
        src = x
        w, b = mha.qkv_proj.weight, mha.qkv_proj.bias
        wq, wk, wv = w[:d], w[d : 2 * d], w[2 * d :]
        bq, bk, bv = _rows(b, slice(0, d)), _rows(b, slice(d, 2 * d)), _rows(b, slice(2 * d, 3 * d))
    n_b, n_t, n_s = x.shape[0], x.shape[1], src.shape[1]
    full_mask = None if mask is None else mask.expand(n_b, n_heads, n_t, n_s)
    full_bias = None if bias is None else bias.expand(n_b, n_heads, n_t, n_s)
    heads, weights = [], []
    for h in range(n_heads):
        sl = slice(h * dh, (h + 1) * dh)
        q = _linear(x, wq[sl], _rows(bq, sl))  # (B, T, Dh)
        k = _linear(src, wk[sl], _rows(bk, sl))  # (B, S, Dh)
        v = _linear(src, wv[sl], _rows(bv, sl))  # (B, S, Dh)
        scores = q @ k.transpose(1, 2) / math.sqrt(dh)  # (B, T, S)
        if full_bias is not None:
            scores = scores + full_bias[:, h]
        if full_mask is not None:
            scores = scores.masked_fill(~full_mask[:, h], float("-inf"))
        w_h = torch.nan_to_num(scores.softmax(-1), nan=0.0)  # all -inf rows -> 0
        heads.append(w_h @ v)
        weights.append(w_h)
    out = torch.cat(heads, dim=-1)  # (B, T, D)
    return _linear(out, mha.out_proj.weight, mha.out_proj.bias), torch.stack(weights, 1)


def _randomize_biases(mha: MultiHeadAttention) -> None:
    # biases start at zero; random ones make a mis-sliced bias visible
    with torch.no_grad():
        for p_name, p in mha.named_parameters():
            if p_name.endswith("bias"):
                p.uniform_(-0.5, 0.5)


def _self_attention() -> MultiHeadAttention:
    mha = MultiHeadAttention(D, H).eval()
    _randomize_biases(mha)
    return mha


def _pad() -> Tensor:
    return padding_mask(lengths=torch.tensor([T, 3]), max_len=T)  # (B, 1, 1, T)


def _alibi() -> Tensor:
    return ALiBi(H)(T, T)  # (H, T, T)


# name -> (mask, is_causal, bias); built lazily so the autouse seed applies first
CASES = {
    "no_mask": lambda: (None, False, None),
    "padding": lambda: (_pad(), False, None),
    "causal": lambda: (None, True, None),
    "padding_and_causal": lambda: (_pad(), True, None),
    "combined_mask": lambda: (combine_masks(_pad(), causal_mask(T)), False, None),
    "alibi": lambda: (None, False, _alibi()),
    "alibi_causal": lambda: (None, True, _alibi()),
    "alibi_padding_causal": lambda: (_pad(), True, _alibi()),
}


def _reference_mask(mask: Tensor | None, is_causal: bool) -> Tensor | None:
    return combine_masks(mask, causal_mask(T) if is_causal else None)


@pytest.mark.parametrize("case", list(CASES))
def test_fused_equals_explicit(case: str) -> None:
    mha = _self_attention()
    mask, is_causal, bias = CASES[case]()
    x = torch.randn(B, T, D)
    fused, no_weights = mha(x, mask=mask, is_causal=is_causal, bias=bias)
    explicit, weights = mha(x, mask=mask, is_causal=is_causal, bias=bias, need_weights=True)
    assert no_weights is None
    assert weights is not None and weights.shape == (B, H, T, T)
    torch.testing.assert_close(fused, explicit, atol=ATOL, rtol=0)


@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference_implementation(case: str) -> None:
    mha = _self_attention()
    mask, is_causal, bias = CASES[case]()
    x = torch.randn(B, T, D)
    ref_out, ref_w = reference_attention(mha, x, mask=_reference_mask(mask, is_causal), bias=bias)
    fused, _ = mha(x, mask=mask, is_causal=is_causal, bias=bias)
    explicit, weights = mha(x, mask=mask, is_causal=is_causal, bias=bias, need_weights=True)
    torch.testing.assert_close(fused, ref_out, atol=REF_ATOL, rtol=0)
    torch.testing.assert_close(explicit, ref_out, atol=REF_ATOL, rtol=0)
    torch.testing.assert_close(weights, ref_w, atol=REF_ATOL, rtol=0)


@pytest.mark.parametrize("case", list(CASES))
def test_weights_sum_to_one_over_visible_keys_and_zero_elsewhere(case: str) -> None:
    mha = _self_attention()
    mask, is_causal, bias = CASES[case]()
    x = torch.randn(B, T, D)
    _, weights = mha(x, mask=mask, is_causal=is_causal, bias=bias, need_weights=True)
    visible = _reference_mask(mask, is_causal)
    visible = torch.ones(B, H, T, T, dtype=torch.bool) if visible is None else visible.expand(B, H, T, T)
    assert torch.all(weights[~visible] == 0.0)  # exactly zero, not just small
    assert torch.all(weights[visible] > 0.0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T), atol=1e-6, rtol=0)


def test_mask_changes_output() -> None:
    # guards the tests above against a mask that is silently ignored
    mha = _self_attention()
    x = torch.randn(B, T, D)
    plain, _ = mha(x)
    padded, _ = mha(x, mask=_pad())
    causal, _ = mha(x, is_causal=True)
    assert torch.allclose(plain[0], padded[0], atol=1e-6)  # batch 0 has no padding
    assert not torch.allclose(plain[1], padded[1], atol=1e-3)
    assert torch.allclose(plain[:, -1], causal[:, -1], atol=1e-6)  # last query sees everything anyway
    assert not torch.allclose(plain[:, 0], causal[:, 0], atol=1e-3)


def test_padding_keys_do_not_influence_real_queries() -> None:
    # appending padding (masked) leaves the real outputs unchanged
    mha = _self_attention()
    x = torch.randn(1, 3, D)
    longer = torch.cat((x, torch.randn(1, 4, D)), dim=1)
    mask = padding_mask(lengths=torch.tensor([3]), max_len=7)
    short_out, _ = mha(x)
    long_out, _ = mha(longer, mask=mask)
    torch.testing.assert_close(long_out[:, :3], short_out, atol=1e-6, rtol=0)


def test_cross_attention_matches_reference() -> None:
    mha = MultiHeadAttention(D, H, cross_attention=True).eval()
    _randomize_biases(mha)
    x, ctx = torch.randn(B, T, D), torch.randn(B, S, D)
    src_mask = padding_mask(lengths=torch.tensor([S, 4]), max_len=S)
    ref_out, ref_w = reference_attention(mha, x, ctx, mask=src_mask)
    fused, _ = mha(x, ctx, mask=src_mask)
    explicit, weights = mha(x, ctx, mask=src_mask, need_weights=True)
    assert weights.shape == (B, H, T, S)
    torch.testing.assert_close(fused, ref_out, atol=REF_ATOL, rtol=0)
    torch.testing.assert_close(explicit, fused, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, ref_w, atol=REF_ATOL, rtol=0)


# --- fully masked query rows ---------------------------------------------------------------


def _row_mask() -> Tensor:
    mask = torch.ones(B, 1, T, T, dtype=torch.bool)
    mask[0, :, 2, :] = False  # query 2 of batch 0 sees nothing
    mask[1, :, :, 3] = False  # an ordinary masked key elsewhere
    return mask


@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "alibi"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_fully_masked_query_row_is_zero_not_nan(need_weights: bool, with_bias: bool) -> None:
    mha = MultiHeadAttention(D, H, bias=False).eval()  # no out_proj bias: an empty row is exactly 0
    x = torch.randn(B, T, D)
    mask = _row_mask()
    bias = _alibi() if with_bias else None
    out, weights = mha(x, mask=mask, bias=bias, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert torch.all(out[0, 2] == 0.0)
    ref_out, ref_w = reference_attention(mha, x, mask=mask, bias=bias)
    torch.testing.assert_close(out, ref_out, atol=REF_ATOL, rtol=0)  # the other rows are untouched
    if need_weights:
        assert torch.isfinite(weights).all()
        assert torch.all(weights[0, :, 2] == 0.0)
        torch.testing.assert_close(weights, ref_w, atol=REF_ATOL, rtol=0)


@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "alibi"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_fully_padded_sequence_is_zero_not_nan(need_weights: bool, with_bias: bool) -> None:
    mha = MultiHeadAttention(D, H, bias=False).eval()
    x = torch.randn(B, T, D)
    mask = padding_mask(lengths=torch.tensor([T, 0]), max_len=T)  # batch 1 is all padding
    bias = _alibi() if with_bias else None
    out, weights = mha(x, mask=mask, bias=bias, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert torch.all(out[1] == 0.0)
    ref_out, _ = reference_attention(mha, x, mask=mask, bias=bias)
    torch.testing.assert_close(out, ref_out, atol=REF_ATOL, rtol=0)
    if need_weights:
        assert torch.all(weights[1] == 0.0)


def test_fully_masked_row_gives_out_proj_bias() -> None:
    # with biases, the empty row's attention output is zero, so the layer output is out_proj.bias
    mha = _self_attention()
    out, _ = mha(torch.randn(B, T, D), mask=_row_mask())
    assert torch.equal(out[0, 2], mha.out_proj.bias.detach())


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_fully_masked_row_has_finite_gradients(need_weights: bool) -> None:
    mha = MultiHeadAttention(D, H)
    x = torch.randn(B, T, D, requires_grad=True)
    out, _ = mha(x, mask=_row_mask(), bias=_alibi(), need_weights=need_weights)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


# --- causal alignment with T != S ----------------------------------------------------------


def test_is_causal_cross_attention_is_bottom_right_aligned() -> None:
    mha = MultiHeadAttention(D, H, cross_attention=True).eval()
    _randomize_biases(mha)
    n_t, n_s = 3, 6
    x, ctx = torch.randn(B, n_t, D), torch.randn(B, n_s, D)
    fused, _ = mha(x, ctx, is_causal=True)
    explicit, weights = mha(x, ctx, is_causal=True, need_weights=True)
    for i in range(n_t):
        for j in range(n_s):
            seen = weights[:, :, i, j] > 0
            assert bool(seen.all()) == (j <= n_s - n_t + i) and bool(seen.any()) == (j <= n_s - n_t + i), (i, j)
    bottom_right = torch.tril(torch.ones(n_t, n_s, dtype=torch.bool), diagonal=n_s - n_t)
    ref_out, _ = reference_attention(mha, x, ctx, mask=bottom_right)
    torch.testing.assert_close(fused, ref_out, atol=REF_ATOL, rtol=0)
    torch.testing.assert_close(explicit, fused, atol=ATOL, rtol=0)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_is_causal_with_cache_is_bottom_right_aligned(need_weights: bool) -> None:
    mha = _self_attention()
    x = torch.randn(B, 5, D)
    cache = KVCache()
    mha(x[:, :3], is_causal=True, cache=cache)
    step, weights = mha(x[:, 3:], is_causal=True, cache=cache, need_weights=True)
    # query i (absolute position 3 + i) sees keys 0 .. 3 + i
    expected = torch.tensor([[True, True, True, True, False], [True, True, True, True, True]])
    assert torch.equal(weights[0, 0] > 0, expected)
    assert torch.equal((weights > 0), expected.expand(B, H, 2, 5))
    full, _ = mha(x, is_causal=True)
    torch.testing.assert_close(step, full[:, 3:], atol=REF_ATOL, rtol=0)


def test_single_query_with_cache_sees_every_key() -> None:
    mha = _self_attention()
    x = torch.randn(B, 4, D)
    cache = KVCache()
    mha(x[:, :3], is_causal=True, cache=cache)
    _, weights = mha(x[:, 3:], is_causal=True, cache=cache, need_weights=True)
    assert weights.shape == (B, H, 1, 4)
    assert torch.all(weights > 0)


# --- KV cache ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "steps", [[1, 1, 1, 1, 1, 1], [2, 1, 3], [4, 2]], ids=["one_by_one", "chunks_2_1_3", "chunks_4_2"]
)
@pytest.mark.parametrize("capacity", [0, 2, 16])
def test_self_attention_cache_equals_full_causal(steps: list[int], capacity: int) -> None:
    mha = _self_attention()
    x = torch.randn(B, sum(steps), D)
    full, _ = mha(x, is_causal=True)
    cache, outs, start = KVCache(capacity), [], 0
    for n in steps:
        out, _ = mha(x[:, start : start + n], is_causal=True, cache=cache)
        outs.append(out)
        start += n
        assert cache.length == start
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=REF_ATOL, rtol=0)


@pytest.mark.parametrize("steps", [[1, 1, 1, 1, 1, 1], [2, 1, 3]], ids=["one_by_one", "chunks_2_1_3"])
def test_self_attention_cache_with_rope_equals_full(steps: list[int]) -> None:
    mha = _self_attention()
    rope = RotaryEmbedding(DH)
    total = sum(steps)
    x = torch.randn(B, total, D)
    full, _ = mha(x, is_causal=True, rotary=rope(total))
    cache, outs = KVCache(capacity=2), []
    for n in steps:
        new = x[:, cache.length : cache.length + n]
        out, _ = mha(new, is_causal=True, rotary=rope(n, cache.length), cache=cache)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=REF_ATOL, rtol=0)
    # rotary really acts: without it the result differs
    plain, _ = mha(x, is_causal=True)
    assert not torch.allclose(plain, full, atol=1e-3)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_rope_attention_is_shift_invariant(need_weights: bool) -> None:
    # RoPE rotates queries and keys alike, so moving the whole sequence changes nothing
    mha = _self_attention()
    rope = RotaryEmbedding(DH)
    x = torch.randn(B, T, D)
    at_zero, w_zero = mha(x, is_causal=True, rotary=rope(T), need_weights=need_weights)
    shifted, w_shifted = mha(x, is_causal=True, rotary=rope(T, offset=37), need_weights=need_weights)
    torch.testing.assert_close(shifted, at_zero, atol=1e-5, rtol=0)
    if need_weights:
        torch.testing.assert_close(w_shifted, w_zero, atol=1e-5, rtol=0)


@pytest.mark.parametrize("steps", [[1, 1, 1, 1, 1, 1], [2, 1, 3]], ids=["one_by_one", "chunks_2_1_3"])
def test_self_attention_cache_with_alibi_equals_full(steps: list[int]) -> None:
    mha = _self_attention()
    alibi = ALiBi(H)
    total = sum(steps)
    x = torch.randn(B, total, D)
    full, _ = mha(x, is_causal=True, bias=alibi(total, total))
    cache, outs = KVCache(), []
    for n in steps:
        new = x[:, cache.length : cache.length + n]
        out, _ = mha(new, is_causal=True, bias=alibi(n, cache.length + n), cache=cache)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=REF_ATOL, rtol=0)


def test_cross_attention_cache_reuses_projected_source() -> None:
    mha = MultiHeadAttention(D, H, cross_attention=True).eval()
    _randomize_biases(mha)
    x1, x2, ctx = torch.randn(B, 1, D), torch.randn(B, 3, D), torch.randn(B, S, D)
    src_mask = padding_mask(lengths=torch.tensor([S, 4]), max_len=S)
    cache = KVCache()
    first, _ = mha(x1, ctx, mask=src_mask, cache=cache)
    assert cache.length == S
    torch.testing.assert_close(first, mha(x1, ctx, mask=src_mask)[0], atol=ATOL, rtol=0)
    second, _ = mha(x2, None, mask=src_mask, cache=cache)  # filled cache: no context needed
    assert cache.length == S  # cross-attention does not append
    torch.testing.assert_close(second, mha(x2, ctx, mask=src_mask)[0], atol=ATOL, rtol=0)
    # a context passed with a filled cache is ignored: the cached source wins
    third, _ = mha(x2, torch.randn(B, S, D), mask=src_mask, cache=cache)
    torch.testing.assert_close(third, second, atol=0, rtol=0)


def test_kv_cache_growth_keeps_contents() -> None:
    cache = KVCache(capacity=2)
    ks, vs = [], []
    for n in [1, 1, 1, 3, 1, 5]:  # grows past 2, then 4, then 8
        k, v = torch.randn(B, H, n, DH), torch.randn(B, H, n, DH)
        ks.append(k)
        vs.append(v)
        all_k, all_v = cache.update(k, v)
        assert cache.length == sum(t.shape[2] for t in ks)
        assert torch.equal(all_k, torch.cat(ks, 2))
        assert torch.equal(all_v, torch.cat(vs, 2))
        assert torch.equal(cache.keys, all_k) and torch.equal(cache.values, all_v)


def test_kv_cache_first_update_larger_than_capacity() -> None:
    cache = KVCache(capacity=2)
    k, v = torch.randn(B, H, 5, DH), torch.randn(B, H, 5, DH)
    cache.update(k, v)
    assert cache.length == 5
    assert torch.equal(cache.keys, k) and torch.equal(cache.values, v)


def test_kv_cache_reorder() -> None:
    cache = KVCache(capacity=8)
    k, v = torch.randn(3, H, 4, DH), torch.randn(3, H, 4, DH)
    cache.update(k, v)
    index = torch.tensor([2, 0, 0])
    cache.reorder(index)
    assert cache.length == 4
    assert torch.equal(cache.keys, k[index]) and torch.equal(cache.values, v[index])
    # decoding continues on the reordered beams
    k2, v2 = torch.randn(3, H, 1, DH), torch.randn(3, H, 1, DH)
    all_k, all_v = cache.update(k2, v2)
    assert torch.equal(all_k, torch.cat((k[index], k2), 2))
    assert torch.equal(all_v, torch.cat((v[index], v2), 2))


def test_kv_cache_reorder_empty_is_noop() -> None:
    cache = KVCache()
    cache.reorder(torch.tensor([0, 0]))
    assert cache.length == 0


def test_reordered_cache_equals_reordered_inputs() -> None:
    # beam search: reordering the cache equals having decoded the reordered batch
    mha = _self_attention()
    x = torch.randn(3, 4, D)
    index = torch.tensor([1, 1, 0])
    cache = KVCache()
    mha(x[:, :3], is_causal=True, cache=cache)
    cache.reorder(index)
    step, _ = mha(x[index, 3:], is_causal=True, cache=cache)
    full, _ = mha(x[index], is_causal=True)
    torch.testing.assert_close(step, full[:, 3:], atol=REF_ATOL, rtol=0)


# --- construction, dropout, gradients -----------------------------------------------------


@pytest.mark.parametrize("cross_attention", [False, True])
def test_bias_false_has_no_bias_parameters(cross_attention: bool) -> None:
    mha = MultiHeadAttention(D, H, bias=False, cross_attention=cross_attention)
    assert [n for n, _ in mha.named_parameters() if "bias" in n] == []
    assert sum(p.numel() for p in mha.parameters()) == 4 * D * D  # q, k, v, out matrices only
    # a linear map without offsets: zero in, zero out
    x = torch.zeros(B, T, D)
    out, _ = mha(x, x if cross_attention else None)
    assert torch.all(out == 0.0)


def test_bias_true_parameter_count() -> None:
    mha = MultiHeadAttention(D, H)
    assert sum(p.numel() for p in mha.parameters()) == 4 * D * D + 4 * D


def test_d_model_not_divisible_by_n_heads_raises() -> None:
    with pytest.raises(ValueError, match=r"^d_model \(10\) must be divisible by n_heads \(3\)$"):
        MultiHeadAttention(10, 3)


def test_zero_heads_raises() -> None:
    with pytest.raises(ValueError, match=r"^d_model \(8\) must be divisible by n_heads \(0\)$"):
        MultiHeadAttention(8, 0)


def test_dropout_only_in_training() -> None:
    mha = MultiHeadAttention(D, H, dropout=0.5)
    _randomize_biases(mha)
    x = torch.randn(B, T, D)
    mha.eval()
    fused, _ = mha(x)
    explicit, _ = mha(x, need_weights=True)
    ref_out, _ = reference_attention(mha, x)
    torch.testing.assert_close(fused, ref_out, atol=REF_ATOL, rtol=0)
    torch.testing.assert_close(explicit, ref_out, atol=REF_ATOL, rtol=0)
    mha.train()
    assert not torch.allclose(mha(x)[0], ref_out, atol=1e-3)
    assert not torch.allclose(mha(x, need_weights=True)[0], ref_out, atol=1e-3)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("cross_attention", [False, True], ids=["self", "cross"])
def test_every_parameter_gets_a_gradient(cross_attention: bool, need_weights: bool) -> None:
    mha = MultiHeadAttention(D, H, cross_attention=cross_attention)
    x = torch.randn(B, T, D)
    ctx = torch.randn(B, S, D) if cross_attention else None
    mask = padding_mask(lengths=torch.tensor([S if cross_attention else T, 3]))
    out, _ = mha(x, ctx, mask=mask, need_weights=need_weights)
    (out**2).sum().backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None, name
        assert p.grad.abs().sum() > 0, name


def test_cross_attention_without_context_or_filled_cache_is_a_clear_error() -> None:
    attn = MultiHeadAttention(16, 2, cross_attention=True)
    with pytest.raises(ValueError, match=r"cross-attention needs a context"):
        attn(torch.randn(1, 3, 16), None, cache=KVCache())


def test_empty_cache_says_so() -> None:
    with pytest.raises(RuntimeError, match="KVCache is empty"):
        KVCache().keys


# --- T5's and Kronos's options: a head dimension apart from D / H, another scale, rotated cross-attention -------


def _heads_reference(mha: MultiHeadAttention, x: Tensor, src: Tensor, scale: float, bias: Tensor | None) -> Tensor:
    """Attention written out for any head dimension: ``scale * q.k + bias``, softmax, heads concatenated."""
    inner = mha.n_heads * mha.d_head
    if mha.cross_attention:
        wq, wk, wv = mha.q_proj.weight, mha.kv_proj.weight[:inner], mha.kv_proj.weight[inner:]
    else:
        wq, wk, wv = mha.qkv_proj.weight.split(inner)
    q = (x @ wq.T).unflatten(-1, (mha.n_heads, mha.d_head)).transpose(1, 2)  # (B, H, T, Dh)
    k = (src @ wk.T).unflatten(-1, (mha.n_heads, mha.d_head)).transpose(1, 2)
    v = (src @ wv.T).unflatten(-1, (mha.n_heads, mha.d_head)).transpose(1, 2)
    scores = scale * q @ k.transpose(-2, -1) + (0.0 if bias is None else bias)
    out = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)  # (B, T, H Dh)
    return out @ mha.out_proj.weight.T


@pytest.mark.parametrize("cross_attention", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_a_head_dimension_apart_from_d_over_h_and_an_unscaled_product(
    cross_attention: bool, need_weights: bool
) -> None:
    """T5's sizes: 3 heads of 12 channels in a width of 16, dot products not divided by sqrt(Dh), a bias."""
    mha = MultiHeadAttention(16, 3, bias=False, cross_attention=cross_attention, d_head=12, scale=1.0).eval()
    assert mha.out_proj.weight.shape == (16, 36)
    x, ctx = torch.randn(B, T, 16), torch.randn(B, S, 16)
    src = ctx if cross_attention else x
    bias = torch.randn(3, T, src.shape[1])
    out, _ = mha(x, ctx if cross_attention else None, bias=bias, need_weights=need_weights)
    torch.testing.assert_close(out, _heads_reference(mha, x, src, 1.0, bias), atol=REF_ATOL, rtol=0)
    scaled = MultiHeadAttention(16, 3, bias=False, cross_attention=cross_attention, d_head=12)
    scaled.load_state_dict(mha.state_dict())
    out_scaled, _ = scaled(x, ctx if cross_attention else None, bias=bias, need_weights=need_weights)
    torch.testing.assert_close(out_scaled, _heads_reference(mha, x, src, 12**-0.5, bias), atol=REF_ATOL, rtol=0)
    assert not torch.allclose(out, out_scaled, atol=1e-3)


def test_bad_head_dimension_raises() -> None:
    with pytest.raises(ValueError, match=r"d_head must be positive, got 0"):
        MultiHeadAttention(16, 3, d_head=0)
    MultiHeadAttention(16, 3, d_head=4)  # with d_head, H need not divide D


def _heads_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return apply_rotary(x.unflatten(-1, (H, DH)).transpose(1, 2), cos, sin)  # (B, H, T, Dh)


def test_cross_attention_rotates_queries_and_keys_at_the_same_positions() -> None:
    """Kronos's dependency layer: with RoPE angles, queries and the keys made from the context are rotated
    alike, so (as in self-attention) the scores depend on positions only through their difference."""
    mha = MultiHeadAttention(D, H, cross_attention=True).eval()
    x, ctx = torch.randn(B, T, D), torch.randn(B, T, D)
    cos, sin = RotaryEmbedding(DH)(T)
    out, w = mha(x, ctx, rotary=(cos, sin), need_weights=True)
    q, k = mha.q_proj(x), mha.kv_proj(ctx)[..., :D]
    q, k = _heads_rotary(q, cos, sin), _heads_rotary(k, cos, sin)
    torch.testing.assert_close(w, (q @ k.transpose(-2, -1) / math.sqrt(DH)).softmax(-1), atol=REF_ATOL, rtol=0)
    assert not torch.allclose(out, mha(x, ctx)[0], atol=1e-3)
    # position 0 rotates nothing
    cos0, sin0 = RotaryEmbedding(DH)(1)
    torch.testing.assert_close(mha(x[:, :1], ctx, rotary=(cos0, sin0))[0], mha(x[:, :1], ctx)[0], atol=0, rtol=0)


def test_a_cache_filled_by_project_kv_serves_a_growing_source() -> None:
    """Kronos's sampling appends the newest hidden state's keys to a cross-attention cache step by step."""
    mha = MultiHeadAttention(D, H, cross_attention=True).eval()
    _randomize_biases(mha)
    ctx, cache = torch.randn(B, S, D), KVCache()
    for end in (3, 4, 7):
        cache.update(*mha.project_kv(ctx[:, cache.length : end]))
        q = torch.randn(B, 1, D)
        torch.testing.assert_close(mha(q, cache=cache)[0], mha(q, ctx[:, :end])[0], atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match=r"project_kv is for cross-attention"):
        MultiHeadAttention(D, H).project_kv(ctx)


# --- a mask folded into the bias once (masked_bias) ---------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("mask_of", ["padding", "rows", "empty_sequence"])
def test_masked_bias_gives_the_scores_of_the_mask_and_bias_apart(mask_of: str, need_weights: bool) -> None:
    mha = _self_attention()
    x = torch.randn(B, T, D)
    lengths = torch.tensor([T, 0]) if mask_of == "empty_sequence" else torch.tensor([T, 3])
    mask = _row_mask() if mask_of == "rows" else padding_mask(lengths=lengths, max_len=T)
    bias = _alibi()
    folded, rows = masked_bias(bias, mask)  # (B, H, T, T), (B, 1, T, 1)
    # -inf exactly at the hidden keys of a row that sees some key; a row that sees none stays finite
    sees = mask.expand(B, H, T, T).any(-1, keepdim=True)
    assert torch.equal(rows.expand(B, H, T, 1), sees)
    assert torch.equal(torch.isinf(folded), ~mask.expand(B, H, T, T) & sees)
    out, w = mha(x, mask=mask, bias=bias, need_weights=need_weights)
    out_folded, w_folded = mha(x, mask=rows, bias=folded, need_weights=need_weights)
    assert torch.equal(out_folded, out)
    if need_weights:
        assert torch.equal(w_folded, w)
    ref_out, _ = reference_attention(mha, x, mask=mask, bias=bias)
    torch.testing.assert_close(out_folded, ref_out, atol=REF_ATOL, rtol=0)


# --- a single position without a cache: its output is its value --------------------------------


def _single_position_cases() -> dict[str, tuple[Tensor | None, Tensor | None]]:
    hide = torch.ones(B, H, 1, 1, dtype=torch.bool)
    hide[0, 1] = False  # head 1 of batch 0 may not see its own key
    hide[1, 3] = False
    return {
        "plain": (None, None),
        "bias": (None, torch.randn(H, 1, 1)),
        "hidden_key_per_head": (hide, None),
        "hidden_key_and_bias": (padding_mask(lengths=torch.tensor([1, 0]), max_len=1), torch.randn(H, 1, 1)),
    }


@pytest.mark.parametrize("case", ["plain", "bias", "hidden_key_per_head", "hidden_key_and_bias"])
def test_a_single_position_without_cache_attends_to_its_value(case: str) -> None:
    # the fast path (neither the query nor the key is computed) against the explicit path and the reference
    mha = _self_attention()
    mask, bias = _single_position_cases()[case]
    x = torch.randn(B, 1, D)
    fast, none = mha(x, mask=mask, bias=bias, is_causal=True)
    explicit, _ = mha(x, mask=mask, bias=bias, need_weights=True)
    ref_out, _ = reference_attention(mha, x, mask=mask, bias=bias)
    assert none is None
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)
    torch.testing.assert_close(fast, ref_out, atol=REF_ATOL, rtol=0)
    if mask is not None:  # the mask is not lost on the way
        assert (fast - mha(x, bias=bias)[0]).abs().max() > 1e-3


def test_a_single_position_in_training_keeps_attention_dropout() -> None:
    # dropout on the one attention weight zeroes or scales whole heads, so training takes the ordinary path
    mha = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(B, 1, D)
    plain, _ = mha.eval()(x)
    dropped, _ = mha.train()(x)
    assert (dropped - plain).abs().max() > 1e-3
