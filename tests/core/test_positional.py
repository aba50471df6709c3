"""Positional encodings against the formulas of their papers, computed here independently.

Sinusoidal: Vaswani et al. 2017, sec. 3.5. RoPE: Su et al. 2021 (checked through its defining
property, scores depend only on relative position, and against a complex-number rotation).
ALiBi: Press et al. 2022 and the slope algorithm of its reference code. 2-D sin-cos: MAE. T5's relative
bias: its buckets written out by hand from the paper's description, and against transformers' own.
"""

from __future__ import annotations

import math

import pytest
import torch

from lightning_tf.core import (
    ALiBi,
    LearnedPositionalEncoding,
    PositionalEncoding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    apply_rotary,
    relative_position_buckets,
    sincos_2d,
    sinusoidal_table,
)

# --- sinusoidal --------------------------------------------------------------------------------


def _paper_pe(pos: int, dim: int, d_model: int) -> float:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), in float64."""
    two_i = dim - dim % 2
    angle = pos / 10000 ** (two_i / d_model)
    return math.sin(angle) if dim % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize(("max_len", "d_model"), [(50, 16), (7, 6), (1000, 8)])
def test_sinusoidal_table_matches_paper(max_len: int, d_model: int) -> None:
    table = sinusoidal_table(max_len, d_model)
    assert table.shape == (max_len, d_model)
    assert table.dtype == torch.float32
    expected = torch.tensor(
        [[_paper_pe(p, d, d_model) for d in range(d_model)] for p in range(max_len)], dtype=torch.float64
    )
    torch.testing.assert_close(table.double(), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize(("max_len", "d_model"), [(50, 16), (7, 6)])
def test_sinusoidal_halves_table_puts_the_papers_sines_first_and_cosines_second(max_len: int, d_model: int) -> None:
    table = sinusoidal_table(max_len, d_model, layout="halves")
    half = d_model // 2
    expected = torch.tensor(
        [
            [_paper_pe(p, 2 * i, d_model) for i in range(half)]
            + [_paper_pe(p, 2 * i + 1, d_model) for i in range(half)]
            for p in range(max_len)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(table.double(), expected, atol=1e-6, rtol=0)
    # the same numbers as the paper's table, only reordered
    paper = sinusoidal_table(max_len, d_model)
    assert torch.equal(table, torch.cat((paper[:, 0::2], paper[:, 1::2]), dim=1))
    assert not torch.equal(table, paper)


def test_sinusoidal_unknown_layout_raises() -> None:
    with pytest.raises(ValueError, match=r"layout must be 'interleaved' or 'halves', got 'split'"):
        sinusoidal_table(4, 8, layout="split")  # type: ignore[arg-type]


def test_sinusoidal_table_first_row() -> None:
    # position 0: sin(0) = 0 on even channels, cos(0) = 1 on odd ones
    row = sinusoidal_table(4, 8)[0]
    assert row.tolist() == [0.0, 1.0] * 4


def test_sinusoidal_encoding_adds_table_with_offset() -> None:
    enc = SinusoidalPositionalEncoding(d_model=8, max_len=20)
    x = torch.randn(2, 5, 8)
    table = sinusoidal_table(20, 8)
    torch.testing.assert_close(enc(x), x + table[:5], atol=0, rtol=0)
    torch.testing.assert_close(enc(x, offset=7), x + table[7:12], atol=0, rtol=0)
    # each position gets its own row (not the same row broadcast over T)
    out = enc(torch.zeros(1, 5, 8))
    assert not torch.allclose(out[0, 1], out[0, 2])


def test_sinusoidal_buffer_is_not_persistent() -> None:
    enc = SinusoidalPositionalEncoding(d_model=8, max_len=20)
    assert "table" not in enc.state_dict()
    assert len(enc.state_dict()) == 0
    assert list(enc.parameters()) == []
    # the buffer still follows the module (dtype/device moves)
    assert enc.double().table.dtype == torch.float64


def test_sinusoidal_loads_checkpoint_of_other_max_len() -> None:
    # non-persistent: a checkpoint does not pin max_len
    small = SinusoidalPositionalEncoding(d_model=8, max_len=10)
    big = SinusoidalPositionalEncoding(d_model=8, max_len=100)
    big.load_state_dict(small.state_dict(), strict=True)


@pytest.mark.parametrize(("T", "offset"), [(11, 0), (5, 6), (1, 10)])
def test_sinusoidal_too_long_raises_naming_max_len(T: int, offset: int) -> None:
    enc = SinusoidalPositionalEncoding(d_model=8, max_len=10)
    with pytest.raises(ValueError, match=rf"positions up to {T + offset} .* max_len is 10"):
        enc(torch.zeros(1, T, 8), offset=offset)


def test_sinusoidal_exactly_max_len_works() -> None:
    enc = SinusoidalPositionalEncoding(d_model=8, max_len=10)
    assert enc(torch.zeros(1, 4, 8), offset=6).shape == (1, 4, 8)


def test_sinusoidal_odd_d_model_raises() -> None:
    with pytest.raises(ValueError, match=r"even d_model, got 7"):
        SinusoidalPositionalEncoding(d_model=7)


# --- learned -----------------------------------------------------------------------------------


def test_learned_encoding_offset_slicing() -> None:
    enc = LearnedPositionalEncoding(d_model=8, max_len=12)
    x = torch.randn(3, 4, 8)
    torch.testing.assert_close(enc(x), x + enc.weight[:4], atol=0, rtol=0)
    torch.testing.assert_close(enc(x, offset=5), x + enc.weight[5:9], atol=0, rtol=0)
    # incremental: position by position equals the whole sequence at once
    steps = torch.cat([enc(x[:, t : t + 1], offset=t) for t in range(4)], dim=1)
    torch.testing.assert_close(steps, enc(x), atol=0, rtol=0)


def test_learned_encoding_is_a_parameter_with_small_init() -> None:
    enc = LearnedPositionalEncoding(d_model=64, max_len=256)
    assert "weight" in dict(enc.named_parameters())
    assert abs(enc.weight.std().item() - 0.02) < 0.002


def test_learned_encoding_gradient_only_reaches_used_rows() -> None:
    enc = LearnedPositionalEncoding(d_model=8, max_len=12)
    enc(torch.zeros(1, 3, 8), offset=4).sum().backward()
    used = torch.zeros(12, dtype=torch.bool)
    used[4:7] = True
    assert torch.all(enc.weight.grad[used] == 1.0)
    assert torch.all(enc.weight.grad[~used] == 0.0)


@pytest.mark.parametrize(("T", "offset"), [(13, 0), (3, 10)])
def test_learned_too_long_raises_naming_max_len(T: int, offset: int) -> None:
    enc = LearnedPositionalEncoding(d_model=8, max_len=12)
    with pytest.raises(ValueError, match=r"learned positional encoding.*max_len is 12"):
        enc(torch.zeros(1, T, 8), offset=offset)


# --- RoPE --------------------------------------------------------------------------------------

DH = 8


def _rotate(x: torch.Tensor, rope: RotaryEmbedding, pos: int) -> torch.Tensor:
    """Rotate ``x`` of shape (..., Dh) as if it sat at position ``pos``."""
    cos, sin = rope(1, pos)  # (1, Dh/2)
    return apply_rotary(x.reshape(1, 1, 1, -1), cos, sin).reshape(x.shape)


def _score(q: torch.Tensor, k: torch.Tensor, rope: RotaryEmbedding, m: int, n: int) -> float:
    return float(_rotate(q, rope, m) @ _rotate(k, rope, n))


@pytest.mark.parametrize("shift", [1, 7, 100, 3000])
def test_rope_scores_depend_only_on_relative_position(shift: int) -> None:
    rope = RotaryEmbedding(DH)
    q, k = torch.randn(DH), torch.randn(DH)
    for m, n in [(0, 0), (5, 2), (2, 5), (9, 0)]:
        assert _score(q, k, rope, m + shift, n + shift) == pytest.approx(_score(q, k, rope, m, n), abs=1e-5)


def test_rope_scores_change_with_relative_offset() -> None:
    rope = RotaryEmbedding(DH)
    q, k = torch.randn(DH), torch.randn(DH)
    base = _score(q, k, rope, 5, 2)
    for m, n in [(5, 3), (5, 1), (6, 2), (2, 5)]:
        assert abs(_score(q, k, rope, m, n) - base) > 1e-3, (m, n)


def test_rope_matches_complex_rotation() -> None:
    # pair (x1[k], x2[k]) (halves layout) as the complex number x1 + i x2, times exp(i pos theta_k),
    # theta_k = base^(-2k/Dh)
    rope = RotaryEmbedding(DH)
    n_t, offset = 6, 3
    x = torch.randn(2, 3, n_t, DH, dtype=torch.float64)
    cos, sin = rope(n_t, offset)
    out = apply_rotary(x, cos, sin)
    theta = torch.tensor([10000.0 ** (-2 * k / DH) for k in range(DH // 2)], dtype=torch.float64)
    pos = torch.arange(offset, offset + n_t, dtype=torch.float64)
    angle = torch.outer(pos, theta)  # (T, Dh/2)
    z = torch.complex(x[..., : DH // 2], x[..., DH // 2 :]) * torch.polar(torch.ones_like(angle), angle)
    expected = torch.cat((z.real, z.imag), dim=-1)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def test_rope_position_zero_is_identity() -> None:
    rope = RotaryEmbedding(DH)
    x = torch.randn(1, 2, 1, DH)
    cos, sin = rope(1)
    torch.testing.assert_close(apply_rotary(x, cos, sin), x, atol=0, rtol=0)


def test_rope_preserves_norms() -> None:
    rope = RotaryEmbedding(DH)
    x = torch.randn(2, 3, 10, DH)
    cos, sin = rope(10, offset=17)
    out = apply_rotary(x, cos, sin)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-6)
    assert not torch.allclose(out, x, atol=1e-3)


def test_rope_table_grows_for_large_offsets() -> None:
    rope = RotaryEmbedding(DH)
    early = [t.clone() for t in rope(4)]
    far_offset = 5000  # beyond any initial table
    cos, sin = rope(3, far_offset)
    assert cos.shape == sin.shape == (3, DH // 2)
    inv_freq = [10000.0 ** (-2 * k / DH) for k in range(DH // 2)]
    for t in range(3):
        for k, f in enumerate(inv_freq):
            assert cos[t, k].item() == pytest.approx(math.cos((far_offset + t) * f), abs=1e-6)
            assert sin[t, k].item() == pytest.approx(math.sin((far_offset + t) * f), abs=1e-6)
    # growing the table leaves the early positions as they were
    again = rope(4)
    assert torch.equal(again[0], early[0]) and torch.equal(again[1], early[1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_rope_angles_do_not_depend_on_module_dtype(dtype: torch.dtype) -> None:
    # the table is returned in float32 whatever the module dtype; its angles must stay the same
    reference = RotaryEmbedding(64)(2, 2000)
    cos, sin = RotaryEmbedding(64).to(dtype)(2, 2000)
    torch.testing.assert_close(cos, reference[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(sin, reference[1], atol=1e-5, rtol=0)


def test_rope_relative_property_at_large_offset() -> None:
    rope = RotaryEmbedding(DH)
    q, k = torch.randn(DH), torch.randn(DH)
    assert _score(q, k, rope, 10_003, 10_000) == pytest.approx(_score(q, k, rope, 3, 0), abs=1e-4)


def test_rope_custom_base() -> None:
    rope = RotaryEmbedding(4, base=100.0)
    cos, _ = rope(1, 3)
    assert cos[0].tolist() == pytest.approx([math.cos(3.0), math.cos(3.0 / 10.0)], abs=1e-6)


def test_rope_odd_head_dim_raises() -> None:
    with pytest.raises(ValueError, match=r"even head dimension, got d_head=5"):
        RotaryEmbedding(5)


# --- ALiBi -------------------------------------------------------------------------------------


def _reference_alibi_slopes(n: int) -> list[float]:
    """The slope algorithm of the ALiBi paper's code (ofirpress/attention_with_linear_biases)."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _reference_alibi_slopes(2 * closest)[0::2][: n - closest]


def test_alibi_slopes_for_8_heads_are_the_papers() -> None:
    slopes = alibi_slopes(8)
    assert slopes.tolist() == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]


def test_alibi_slopes_for_16_heads() -> None:
    # the paper: for 16 heads the sequence starts at 2^-0.5 with ratio 2^-0.5
    torch.testing.assert_close(
        alibi_slopes(16), torch.tensor([2 ** (-0.5 * (i + 1)) for i in range(16)]), atol=1e-7, rtol=0
    )


@pytest.mark.parametrize("n_heads", [1, 2, 3, 4, 5, 6, 7, 12, 16, 20, 24])
def test_alibi_slopes_match_reference_code(n_heads: int) -> None:
    slopes = alibi_slopes(n_heads)
    assert slopes.shape == (n_heads,)
    expected = torch.tensor(_reference_alibi_slopes(n_heads), dtype=torch.float32)
    torch.testing.assert_close(slopes, expected, atol=1e-7, rtol=0)


def test_alibi_slopes_6_and_12_heads_explicit() -> None:
    # 6 heads: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then every other of the 8-head ones: 2^-1, 2^-3
    assert alibi_slopes(6).tolist() == [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    # 12 heads: the 8-head slopes, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 from the 16-head sequence
    expected = [2.0**-k for k in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected), atol=1e-7, rtol=0)


@pytest.mark.parametrize(("T", "S", "offset"), [(4, 4, None), (1, 6, None), (2, 5, None), (3, 5, 0), (2, 6, 1)])
def test_alibi_bias_values(T: int, S: int, offset: int | None) -> None:
    n_heads = 4
    bias = ALiBi(n_heads)(T, S, offset)
    assert bias.shape == (n_heads, T, S)
    slopes = _reference_alibi_slopes(n_heads)
    first = S - T if offset is None else offset  # decoding: the T queries are the newest of S
    for h in range(n_heads):
        for i in range(T):
            for j in range(S):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h] * abs(first + i - j), abs=1e-6)


def test_alibi_decoding_step_equals_last_rows_of_full_bias() -> None:
    alibi = ALiBi(8)
    full = alibi(6, 6)
    torch.testing.assert_close(alibi(1, 6), full[:, 5:], atol=0, rtol=0)
    torch.testing.assert_close(alibi(2, 4), full[:, 2:4, :4], atol=0, rtol=0)


def test_alibi_slopes_buffer_not_persistent() -> None:
    assert len(ALiBi(4).state_dict()) == 0


# --- 2-D sin-cos -------------------------------------------------------------------------------


def test_sincos_2d_shape_and_values() -> None:
    d_model, gh, gw = 16, 3, 5  # gh != gw so a swapped row/column shows
    table = sincos_2d(d_model, gh, gw)
    assert table.shape == (gh * gw, d_model)
    quarter = d_model // 4
    omega = [1.0 / 10000 ** (k / quarter) for k in range(quarter)]
    for r, c in [(0, 0), (2, 1), (1, 4), (2, 4)]:
        row = table[r * gw + c]  # row-major, like the patch sequence
        expected = (
            [math.sin(r * w) for w in omega]
            + [math.cos(r * w) for w in omega]
            + [math.sin(c * w) for w in omega]
            + [math.cos(c * w) for w in omega]
        )
        assert row.tolist() == pytest.approx(expected, abs=1e-6), (r, c)


def test_sincos_2d_rows_are_distinct() -> None:
    table = sincos_2d(8, 4, 4)
    assert torch.unique(table, dim=0).shape[0] == 16


def test_sincos_2d_bad_d_model_raises() -> None:
    with pytest.raises(ValueError, match=r"d_model divisible by 4, got 10"):
        sincos_2d(10, 2, 2)


# --- PositionalEncoding ------------------------------------------------------------------------


def test_positional_encoding_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"unknown pos_encoding 'rotary'") as info:
        PositionalEncoding("rotary", d_model=16, n_heads=4)  # type: ignore[arg-type]
    for name in ("sinusoidal", "sinusoidal_halves", "learned", "rope", "alibi", "relative", "none"):
        assert repr(name) in str(info.value)


def test_positional_encoding_rope_odd_head_dim_raises() -> None:
    with pytest.raises(ValueError, match=r"d_model \(12\) / n_heads \(4\) = 3"):
        PositionalEncoding("rope", d_model=12, n_heads=4)


def test_positional_encoding_dispatch() -> None:
    x = torch.randn(2, 5, 16)
    sin_pe = PositionalEncoding("sinusoidal", 16, 4, max_len=32)
    torch.testing.assert_close(sin_pe(x, offset=3), x + sinusoidal_table(32, 16)[3:8], atol=0, rtol=0)
    assert sin_pe.rotary(5) is None and sin_pe.bias(5, 5) is None
    halves = PositionalEncoding("sinusoidal_halves", 16, 4, max_len=32)
    torch.testing.assert_close(halves(x, offset=3), x + sinusoidal_table(32, 16, "halves")[3:8], atol=0, rtol=0)

    learned = PositionalEncoding("learned", 16, 4, max_len=32)
    assert not torch.equal(learned(x), x)

    for name in ("rope", "alibi", "none"):
        assert torch.equal(PositionalEncoding(name, 16, 4)(x), x), name  # relative schemes add nothing

    rope = PositionalEncoding("rope", 16, 4)
    cos, sin = rope.rotary(5, offset=2)
    ref_cos, ref_sin = RotaryEmbedding(4)(5, 2)
    assert torch.equal(cos, ref_cos) and torch.equal(sin, ref_sin)
    assert rope.bias(5, 5) is None

    alibi = PositionalEncoding("alibi", 16, 4)
    assert torch.equal(alibi.bias(2, 5), ALiBi(4)(2, 5))
    assert alibi.rotary(5) is None

    none = PositionalEncoding("none", 16, 4)
    assert none.rotary(5) is None and none.bias(5, 5) is None
    assert list(none.parameters()) == []


def test_alibi_slopes_survive_a_16_bit_cast() -> None:
    bias32 = ALiBi(12)(4, 600)
    bias16 = ALiBi(12).to(torch.bfloat16)(4, 600)
    torch.testing.assert_close(bias16, bias32, atol=0, rtol=0)


def test_positional_encoding_rejects_indivisible_heads() -> None:
    with pytest.raises(ValueError, match=r"d_model \(32\) must be divisible by n_heads \(0\)"):
        PositionalEncoding("alibi", 32, 0)


# --- RoPE precision ----------------------------------------------------------------------------


def test_rope_float32_angles_are_the_reference_codes_float32_arithmetic() -> None:
    """``precision="float32"`` gives, bit for bit, the angles of code that computes frequencies, positions and
    their products in float32 (Kronos's); float64 differs from them by more than 1e-5 at position 2048."""
    dh, n = 64, 2048
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dh, 2).float() / dh))
    angles = torch.einsum("i,j->ij", torch.arange(n).float(), inv_freq)
    cos, sin = RotaryEmbedding(dh, precision="float32")(n)
    assert torch.equal(cos, angles.cos()) and torch.equal(sin, angles.sin())
    cos64, _ = RotaryEmbedding(dh)(n)
    assert (cos64 - cos).abs().max() > 1e-5


def test_rope_unknown_precision_raises() -> None:
    with pytest.raises(ValueError, match=r"RoPE precision must be one of \['float64', 'float32'\], got 'half'"):
        RotaryEmbedding(8, precision="half")  # type: ignore[arg-type]


# --- T5's relative position bias -----------------------------------------------------------------


def _t5_bucket(rel: int, n_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """One bucket, from the paper's description: the sign halves the buckets (bidirectional), distances below
    half of a half are exact, the rest log-spaced up to max_distance, then the last bucket."""
    base = 0
    if bidirectional:
        n_buckets //= 2
        base = n_buckets if rel > 0 else 0
        d = abs(rel)
    else:
        d = max(-rel, 0)
    exact = n_buckets // 2
    if d < exact:
        return base + d
    far = exact + int(math.log(d / exact) / math.log(max_distance / exact) * (n_buckets - exact))
    return base + min(far, n_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("n_buckets", "max_distance"), [(32, 128), (8, 20), (16, 64)])
def test_relative_buckets_follow_the_papers_scheme(bidirectional: bool, n_buckets: int, max_distance: int) -> None:
    rel = torch.arange(-300, 301)
    got = relative_position_buckets(rel, n_buckets, max_distance, bidirectional)
    assert got.tolist() == [_t5_bucket(int(r), n_buckets, max_distance, bidirectional) for r in rel]
    assert got.min() == 0 and got.max() == n_buckets - 1
    if not bidirectional:
        assert got[rel > 0].eq(0).all()  # keys after the query share bucket 0


# T5's buckets (32 of them, max_distance 128) of these relative positions, as transformers' T5Attention gives them
T5_RELATIVE = [-200, -128, -127, -64, -33, -32, -16, -9, -8, -7, -1, 0, 1, 7, 8, 9, 15, 16, 32, 64, 127, 128, 200]
T5_ENCODER = [15, 15, 15, 14, 12, 12, 10, 8, 8, 7, 1, 0, 17, 23, 24, 24, 25, 26, 28, 30, 31, 31, 31]
T5_DECODER = [31, 31, 31, 26, 21, 21, 16, 9, 8, 7, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]


def test_relative_buckets_are_t5s() -> None:
    rel = torch.tensor(T5_RELATIVE)
    assert relative_position_buckets(rel, 32, 128, True).tolist() == T5_ENCODER
    assert relative_position_buckets(rel, 32, 128, False).tolist() == T5_DECODER


def test_relative_bias_values_come_from_its_table_by_bucket() -> None:
    rel = RelativePositionBias(4, 8, 20)
    bias = rel(3, 6, offset=2)  # (H, T, S)
    assert bias.shape == (4, 3, 6)
    for i in range(3):
        for j in range(6):
            bucket = relative_position_buckets(torch.tensor(j - (i + 2)), 8, 20, True)
            assert torch.equal(bias[:, i, j], rel.embedding.weight[bucket])
    # a decoding step is the last row of the full bias
    assert torch.equal(rel(1, 6), rel(6, 6)[:, -1:])


def test_relative_bias_of_a_decoder_is_causal_bucketing() -> None:
    enc, dec = RelativePositionBias(2, 8, 20), RelativePositionBias(2, 8, 20, bidirectional=False)
    dec.embedding.weight.data.copy_(enc.embedding.weight)
    assert not torch.equal(enc(5, 5), dec(5, 5))
    b = dec(5, 5)
    assert torch.equal(b[:, 0, 1], b[:, 0, 4])  # every later key in bucket 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(n_buckets=3), r"relative position bias needs at least 4 buckets, got 3"),
        (dict(n_buckets=8, max_distance=2), r"max_distance \(2\) must exceed the 2 exact buckets"),
    ],
)
def test_relative_bias_bad_sizes_raise(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RelativePositionBias(4, **kw)


def test_positional_encoding_relative_dispatch() -> None:
    pe = PositionalEncoding("relative", 16, 4, relative_buckets=8, relative_max_distance=20)
    x = torch.randn(2, 5, 16)
    assert torch.equal(pe(x), x) and pe.rotary(5) is None
    assert pe.relative is not None and torch.equal(pe.bias(3, 5), pe.relative(3, 5))
    causal = PositionalEncoding("relative", 16, 4, bidirectional=False)
    assert causal.relative is not None and not causal.relative.bidirectional


def test_a_rope_table_first_built_under_inference_mode_serves_training() -> None:
    """Lightning validates under ``torch.inference_mode`` before it trains: the table built there must not be an
    inference tensor, which autograd refuses to save."""
    rope = RotaryEmbedding(8)
    with torch.inference_mode():
        cos, _ = rope(4)
    assert not cos.is_inference()
    x = torch.randn(1, 1, 4, 8, requires_grad=True)
    c, s = rope(4)
    x1, x2 = x.chunk(2, dim=-1)
    torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
