"""Encoder and Decoder stacks: torch reference, causality, padding, caching, weights, positions,
gradients, overfitting, configuration errors.

Sizes are tiny and everything runs on the CPU; dropout is 0 and modules are in eval mode wherever
two computations are compared.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_tf.core import (
    Decoder,
    Encoder,
    MultiHeadAttention,
    TransformerSpec,
    padding_mask,
)
from tests.helpers.core import copy_decoder_layer, copy_encoder_layer

D, H, N_LAYERS, D_FF = 32, 4, 2, 64
B, T, S = 3, 7, 6
ATOL = 1e-5
ALL_PE = ["sinusoidal", "learned", "rope", "alibi", "relative", "none"]
PE_ON = ["sinusoidal", "learned", "rope", "alibi", "relative"]


def make_encoder(pos_encoding: str = "none", **kwargs) -> Encoder:
    kwargs = {"dropout": 0.0, "pos_encoding": pos_encoding, **kwargs}
    return Encoder(TransformerSpec(D, H, N_LAYERS, D_FF, **kwargs)).eval()


def make_decoder(pos_encoding: str = "none", **kwargs) -> Decoder:
    kwargs = {"dropout": 0.0, "pos_encoding": pos_encoding, **kwargs}
    return Decoder(TransformerSpec(D, H, N_LAYERS, D_FF, **kwargs)).eval()


def _randomize_affine(module: nn.Module) -> None:
    # norms start at identity and biases at zero; random values make a wrong mapping visible
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
            elif "norm" in name:
                p.uniform_(0.5, 1.5)


def _float_key_mask(keep: Tensor) -> Tensor:
    """nn's key_padding_mask (float, -inf = ignore) from our ``(B, 1, 1, S)`` True = keep."""
    keep = keep[:, 0, 0, :]  # (B, S)
    return torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))  # (B, S)


def _real(lengths: Tensor, n: int) -> Tensor:
    """(B, n) bool, True at the real (non-padded) positions."""
    return torch.arange(n).unsqueeze(0) < lengths.unsqueeze(1)


# ------------------------------------------------------------------------------------------------
# Reference: torch.nn.Transformer with copied weights
# ------------------------------------------------------------------------------------------------


# nn.Transformer's own chatter about its nested-tensor fast path, which is not under test
@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("tgt_padded", [False, True])
def test_matches_torch_transformer(norm_first: bool, tgt_padded: bool) -> None:
    ref = nn.Transformer(D, H, N_LAYERS, N_LAYERS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    _randomize_affine(ref)
    # nn.Transformer always ends both stacks with a norm, Post-LN included
    enc = make_encoder(norm_first=norm_first, final_norm=True)
    dec = make_decoder(norm_first=norm_first, final_norm=True)
    for src_layer, dst_layer in zip(ref.encoder.layers, enc.layers, strict=True):
        copy_encoder_layer(src_layer, dst_layer)
    for src_layer, dst_layer in zip(ref.decoder.layers, dec.layers, strict=True):
        copy_decoder_layer(src_layer, dst_layer)
    assert enc.norm is not None and dec.norm is not None
    enc.norm.load_state_dict(ref.encoder.norm.state_dict())
    dec.norm.load_state_dict(ref.decoder.norm.state_dict())

    src, tgt = torch.randn(B, S, D), torch.randn(B, T, D)
    src_lengths = torch.tensor([S, 3, 5])
    tgt_lengths = torch.tensor([4, T, 2]) if tgt_padded else torch.full((B,), T)
    src_keep = padding_mask(lengths=src_lengths, max_len=S)  # (B, 1, 1, S)
    tgt_keep = padding_mask(lengths=tgt_lengths, max_len=T)  # (B, 1, 1, T)
    with torch.no_grad():
        expected = ref(
            src,
            tgt,
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(T),
            src_key_padding_mask=_float_key_mask(src_keep),
            tgt_key_padding_mask=_float_key_mask(tgt_keep) if tgt_padded else None,
            memory_key_padding_mask=_float_key_mask(src_keep),
            tgt_is_causal=True,
        )
        expected_memory = ref.encoder(src, src_key_padding_mask=_float_key_mask(src_keep))
        memory = enc(src, src_keep)
        got = dec(tgt, memory, tgt_keep if tgt_padded else None, src_keep)

    src_real = _real(src_lengths, S)
    torch.testing.assert_close(memory[src_real], expected_memory[src_real], atol=ATOL, rtol=0)
    tgt_real = _real(tgt_lengths, T)
    torch.testing.assert_close(got[tgt_real], expected[tgt_real], atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------------
# Causality and bidirectionality
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pos_encoding", ALL_PE)
@pytest.mark.parametrize("path", ["fused", "need_weights", "tgt_mask"])
def test_decoder_is_causal(pos_encoding: str, path: str) -> None:
    dec = make_decoder(pos_encoding)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    # an all-True tgt_mask changes nothing but takes the explicit-mask route instead of SDPA's is_causal
    tgt_mask = torch.ones(B, 1, 1, T, dtype=torch.bool) if path == "tgt_mask" else None

    def run(inp: Tensor) -> Tensor:
        with torch.no_grad():
            out = dec(inp, memory, tgt_mask, need_weights=path == "need_weights")
        return out[0] if isinstance(out, tuple) else out

    y = run(x)
    for t in range(T - 1):
        x2 = x.clone()
        x2[:, t + 1 :] = torch.randn(B, T - t - 1, D)
        y2 = run(x2)
        torch.testing.assert_close(y2[:, : t + 1], y[:, : t + 1], atol=ATOL, rtol=0)
        assert (y2[:, t + 1 :] - y[:, t + 1 :]).abs().amax(dim=-1).min() > 1e-3  # the future did change


@pytest.mark.parametrize("pos_encoding", ALL_PE)
def test_encoder_is_bidirectional(pos_encoding: str) -> None:
    enc = make_encoder(pos_encoding)
    x = torch.randn(B, T, D)
    x2 = x.clone()
    x2[:, -1] = torch.randn(B, D)  # change the last position only
    with torch.no_grad():
        y, y2 = enc(x), enc(x2)
    # every earlier position sees the change
    assert (y2[:, :-1] - y[:, :-1]).abs().amax(dim=-1).min() > 1e-4


# ------------------------------------------------------------------------------------------------
# Padding invariance
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pos_encoding", ALL_PE)
def test_encoder_padding_invariance(pos_encoding: str) -> None:
    enc = make_encoder(pos_encoding)
    lengths = torch.tensor([T, 4, 2])
    n = T + 3  # three extra pad positions for everyone
    x = torch.randn(B, n, D) * 5  # loud pads: leaking them would be visible
    keep = padding_mask(lengths=lengths, max_len=n)  # (B, 1, 1, n)
    with torch.no_grad():
        y = enc(x, keep)
        for b, length in enumerate(lengths.tolist()):
            alone = enc(x[b : b + 1, :length])  # the same sequence, unpadded, no mask
            torch.testing.assert_close(y[b, :length], alone[0], atol=ATOL, rtol=0)
        # without the mask the pads do leak, so the equality above is not vacuous
        assert (enc(x)[1, :4] - y[1, :4]).abs().max() > 1e-3


@pytest.mark.parametrize("pos_encoding", ALL_PE)
def test_decoder_memory_padding_invariance(pos_encoding: str) -> None:
    dec = make_decoder(pos_encoding)
    lengths = torch.tensor([S, 4, 1])
    n = S + 2
    x, memory = torch.randn(B, T, D), torch.randn(B, n, D) * 5
    keep = padding_mask(lengths=lengths, max_len=n)  # (B, 1, 1, n)
    with torch.no_grad():
        y = dec(x, memory, memory_mask=keep)
        for b, length in enumerate(lengths.tolist()):
            alone = dec(x[b : b + 1], memory[b : b + 1, :length])
            torch.testing.assert_close(y[b], alone[0], atol=ATOL, rtol=0)
        assert (dec(x, memory)[1] - y[1]).abs().max() > 1e-3


@pytest.mark.parametrize("pos_encoding", ALL_PE)
def test_decoder_target_padding_invariance(pos_encoding: str) -> None:
    dec = make_decoder(pos_encoding)
    lengths = torch.tensor([T, 5, 2])
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    keep = padding_mask(lengths=lengths, max_len=T)  # (B, 1, 1, T)
    with torch.no_grad():
        y = dec(x, memory, keep)
        for b, length in enumerate(lengths.tolist()):
            alone = dec(x[b : b + 1, :length], memory[b : b + 1])
            torch.testing.assert_close(y[b, :length], alone[0], atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------------
# Fully masked query rows
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fully_masked_row_gives_zeros_not_nan(need_weights: bool, with_bias: bool) -> None:
    attn = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, T, D)
    mask = torch.rand(B, 1, T, T) > 0.3
    mask[..., 0] = True  # every other row sees at least one key
    mask[0, :, 2] = False  # query 2 of sample 0 sees nothing
    mask[1, :, 5] = False
    bias = -torch.rand(H, T, T) if with_bias else None  # the ALiBi route (float mask)
    with torch.no_grad():
        out, w = attn(x, mask=mask, bias=bias, need_weights=need_weights)
        # the attention mixes nothing into a blind row; what comes out is out_proj(0) = its bias
        with_out_bias = attn.out_proj.bias.clone()
        attn.out_proj.bias.uniform_(-1, 1)
        out_b, _ = attn(x, mask=mask, bias=bias, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert (with_out_bias == 0).all()  # default init: zero bias, hence a zero row
    assert (out[0, 2] == 0).all() and (out[1, 5] == 0).all()
    torch.testing.assert_close(out_b[0, 2], attn.out_proj.bias, atol=0, rtol=0)
    assert (out[0, 1] != 0).any()  # the other rows are not zeroed
    if need_weights:
        assert w is not None and torch.isfinite(w).all()
        assert (w[0, :, 2] == 0).all() and (w[1, :, 5] == 0).all()
        torch.testing.assert_close(w[2].sum(-1), torch.ones(H, T), atol=ATOL, rtol=0)


def test_fully_padded_sequence_stays_finite() -> None:
    """A batch element whose every key is padding (length 0) yields finite outputs, and the other
    elements are unaffected by it."""
    enc = make_encoder("sinusoidal")
    x = torch.randn(B, T, D)
    keep = padding_mask(lengths=torch.tensor([T, 0, 3]), max_len=T)
    with torch.no_grad():
        y = enc(x, keep)
        y_weights, _ = enc(x, keep, need_weights=True)
    assert torch.isfinite(y).all() and torch.isfinite(y_weights).all()
    torch.testing.assert_close(y[0], enc(x[:1])[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("pos_encoding", ["alibi", "relative"])
def test_a_stack_folding_its_mask_into_the_bias_equals_its_layers_given_both(pos_encoding: str) -> None:
    # the stacks add the mask to the position bias once for all layers; each layer given the two apart must
    # compute exactly the same (a sequence of padding only included)
    enc, dec = make_encoder(pos_encoding), make_decoder(pos_encoding)
    x, y = torch.randn(B, T, D), torch.randn(B, S, D)
    keep = padding_mask(lengths=torch.tensor([T, 3, 0]), max_len=T)  # (B, 1, 1, T)
    tgt_keep = padding_mask(lengths=torch.tensor([S, 2, 4]), max_len=S)  # (B, 1, 1, S)
    with torch.no_grad():
        h = x
        bias = enc.pos.bias(T, T)
        for layer in enc.layers:
            h, _ = layer(h, keep, bias=bias)
        memory = enc(x, keep)
        assert torch.equal(memory, enc.norm(h))
        g = y
        bias, causal = dec.pos.bias(S, S), torch.ones(S, S, dtype=torch.bool).tril()
        for layer in dec.layers:
            g, _, _ = layer(g, memory, causal & tgt_keep, keep, is_causal=False, bias=bias)
        assert torch.equal(dec(y, memory, tgt_keep, keep), dec.norm(g))


# ------------------------------------------------------------------------------------------------
# Cached incremental decoding
# ------------------------------------------------------------------------------------------------


def _decode_in_chunks(
    dec: Decoder, x: Tensor, memory: Tensor, memory_mask: Tensor, sizes: list[int], capacity: int = 0
) -> Tensor:
    cache = dec.init_cache(capacity)
    outs, t = [], 0
    for n in sizes:
        # after the first call the cross-attention keys live in the cache; memory is not needed
        out = dec(x[:, t : t + n], memory if t == 0 else None, memory_mask=memory_mask, cache=cache)
        outs.append(out)
        t += n
        assert cache.offset == t
    assert t == x.shape[1]
    return torch.cat(outs, dim=1)  # (B, T, D)


@pytest.mark.parametrize("pos_encoding", ALL_PE)
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize(
    ("sizes", "capacity"),
    [([1] * T, 0), ([1] * T, 16), ([3, 1, 2, 1], 0), ([T], 0)],
    ids=["steps", "steps-prealloc", "chunked-prefill", "one-shot"],
)
def test_cached_decoding_equals_full(pos_encoding: str, norm_first: bool, sizes: list[int], capacity: int) -> None:
    dec = make_decoder(pos_encoding, norm_first=norm_first)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    memory_mask = padding_mask(lengths=torch.tensor([S, 2, 4]), max_len=S)
    with torch.no_grad():
        full = dec(x, memory, memory_mask=memory_mask)
        cached = _decode_in_chunks(dec, x, memory, memory_mask, sizes, capacity)
    torch.testing.assert_close(cached, full, atol=ATOL, rtol=0)


@pytest.mark.parametrize("pos_encoding", ALL_PE)
def test_cache_reorder_equals_decoding_reordered_batch(pos_encoding: str) -> None:
    dec = make_decoder(pos_encoding)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    memory_mask = padding_mask(lengths=torch.tensor([S, 2, 4]), max_len=S)
    index = torch.tensor([2, 0, 0])  # beams: a permutation with a duplicate, as beam search makes
    split = 3
    with torch.no_grad():
        expected = dec(x[index], memory[index], memory_mask=memory_mask[index])

        cache = dec.init_cache()
        before = [dec(x[:, t : t + 1], memory, memory_mask=memory_mask, cache=cache) for t in range(split)]
        cache.reorder(index)
        xr, mr = x[index], memory_mask[index]
        after = [dec(xr[:, t : t + 1], None, memory_mask=mr, cache=cache) for t in range(split, T)]
    torch.testing.assert_close(torch.cat(before, 1)[index], expected[:, :split], atol=ATOL, rtol=0)
    torch.testing.assert_close(torch.cat(after, 1), expected[:, split:], atol=ATOL, rtol=0)


def test_cache_without_reorder_differs() -> None:
    """Continuing the permuted batch on an un-reordered cache does not match: reorder is doing work."""
    dec = make_decoder("none")
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    index = torch.tensor([2, 0, 1])
    with torch.no_grad():
        expected = dec(x[index], memory[index])
        cache = dec.init_cache()
        for t in range(3):
            dec(x[:, t : t + 1], memory, cache=cache)
        wrong = dec(x[index][:, 3:4], None, cache=cache)
    assert (wrong[:, 0] - expected[:, 3]).abs().max() > 1e-3


# ------------------------------------------------------------------------------------------------
# need_weights at the stack level
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pos_encoding", ALL_PE)
def test_encoder_need_weights(pos_encoding: str) -> None:
    enc = make_encoder(pos_encoding)
    x = torch.randn(B, T, D)
    keep = padding_mask(lengths=torch.tensor([T, 4, 2]), max_len=T)  # (B, 1, 1, T)
    with torch.no_grad():
        fused = enc(x, keep)
        y, weights = enc(x, keep, need_weights=True)
    torch.testing.assert_close(y, fused, atol=ATOL, rtol=0)
    assert len(weights) == N_LAYERS
    hidden = ~keep.expand(B, H, T, T)
    for w in weights:
        assert w.shape == (B, H, T, T)
        assert (w[hidden] == 0).all()  # exactly zero, not merely small
        torch.testing.assert_close(w.sum(-1), torch.ones(B, H, T), atol=ATOL, rtol=0)
    assert (weights[0] - weights[1]).abs().max() > 1e-3  # per layer, not one copied twice


@pytest.mark.parametrize("pos_encoding", ALL_PE)
def test_decoder_need_weights(pos_encoding: str) -> None:
    dec = make_decoder(pos_encoding)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    mem_keep = padding_mask(lengths=torch.tensor([S, 2, 4]), max_len=S)  # (B, 1, 1, S)
    with torch.no_grad():
        fused = dec(x, memory, memory_mask=mem_keep)
        y, self_ws, cross_ws = dec(x, memory, memory_mask=mem_keep, need_weights=True)
    torch.testing.assert_close(y, fused, atol=ATOL, rtol=0)
    assert len(self_ws) == len(cross_ws) == N_LAYERS
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    for sw, cw in zip(self_ws, cross_ws, strict=True):
        assert sw.shape == (B, H, T, T) and cw.shape == (B, H, T, S)
        assert (sw[..., future] == 0).all()
        assert (sw[..., ~future] > 0).all()  # every visible key gets some weight
        assert (cw[~mem_keep.expand(B, H, T, S)] == 0).all()
        torch.testing.assert_close(sw.sum(-1), torch.ones(B, H, T), atol=ATOL, rtol=0)
        torch.testing.assert_close(cw.sum(-1), torch.ones(B, H, T), atol=ATOL, rtol=0)


@pytest.mark.parametrize("pos_encoding", ["rope", "alibi"])
def test_decoder_need_weights_with_cache(pos_encoding: str) -> None:
    """Step-by-step weights equal the rows of the full weights."""
    dec = make_decoder(pos_encoding)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    with torch.no_grad():
        _, self_ws, cross_ws = dec(x, memory, need_weights=True)
        cache = dec.init_cache()
        for t in range(T):
            _, sws, cws = dec(x[:, t : t + 1], memory, cache=cache, need_weights=True)
            for layer in range(N_LAYERS):
                torch.testing.assert_close(sws[layer][:, :, 0], self_ws[layer][:, :, t, : t + 1], atol=ATOL, rtol=0)
                torch.testing.assert_close(cws[layer][:, :, 0], cross_ws[layer][:, :, t], atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------------
# Positions matter (and don't, without a positional encoding)
# ------------------------------------------------------------------------------------------------

PERM = torch.tensor([3, 0, 6, 1, 5, 2, 4])


@pytest.mark.parametrize("pos_encoding", PE_ON)
def test_encoder_with_positions_is_not_permutation_equivariant(pos_encoding: str) -> None:
    enc = make_encoder(pos_encoding)
    x = torch.randn(B, T, D)
    with torch.no_grad():
        y, y_perm = enc(x), enc(x[:, PERM])
    assert (y_perm - y[:, PERM]).abs().max() > 1e-2


def test_encoder_without_positions_is_permutation_equivariant() -> None:
    enc = make_encoder("none")
    x = torch.randn(B, T, D)
    with torch.no_grad():
        y, y_perm = enc(x), enc(x[:, PERM])
    torch.testing.assert_close(y_perm, y[:, PERM], atol=ATOL, rtol=0)


def test_sinusoidal_encoding_adds_each_position_its_own_row() -> None:
    """Position t gets row t of the table, not row 0 for everyone (the bug of Lightning's demo)."""
    enc = make_encoder("sinusoidal")
    x = torch.zeros(1, T, D)
    assert enc.pos.absolute is not None
    torch.testing.assert_close(enc.pos(x)[0], enc.pos.absolute.table[:T], atol=0, rtol=0)
    assert (enc.pos(x)[0, 1] != enc.pos(x)[0, 0]).any()


# ------------------------------------------------------------------------------------------------
# Gradients and training
# ------------------------------------------------------------------------------------------------


class _Seq2Seq(nn.Module):
    """The smallest encoder-decoder a task would build: tied embedding, stacks, tied projection."""

    def __init__(self, vocab: int, pos_encoding: str, norm_first: bool = True, max_len: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, D)
        self.encoder = Encoder(
            TransformerSpec(
                D, H, N_LAYERS, D_FF, dropout=0.0, pos_encoding=pos_encoding, norm_first=norm_first, max_len=max_len
            )
        )
        self.decoder = Decoder(
            TransformerSpec(
                D, H, N_LAYERS, D_FF, dropout=0.0, pos_encoding=pos_encoding, norm_first=norm_first, max_len=max_len
            )
        )
        self.head = nn.Linear(D, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        memory = self.encoder(self.embed(src))  # (B, S, D)
        return self.head(self.decoder(self.embed(tgt_in), memory))  # (B, T, V)


@pytest.mark.parametrize("pos_encoding", ALL_PE)
@pytest.mark.parametrize("norm_first", [True, False])
def test_every_parameter_gets_a_gradient(pos_encoding: str, norm_first: bool) -> None:
    vocab = 12
    model = _Seq2Seq(vocab, pos_encoding, norm_first)
    assert model.head.weight is model.embed.weight
    src, tgt = torch.randint(0, vocab, (4, S)), torch.randint(0, vocab, (4, T + 1))
    logits = model(src, tgt[:, :-1])
    F.cross_entropy(logits.reshape(-1, vocab), tgt[:, 1:].reshape(-1)).backward()
    names = [name for name, _ in model.named_parameters()]
    assert names, "no parameters"
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert p.grad.abs().sum() > 0, f"{name} got an all-zero gradient"
    if pos_encoding == "learned":
        assert "encoder.pos.absolute.weight" in names and "decoder.pos.absolute.weight" in names


def test_overfits_one_batch() -> None:
    """Reverse 8 random sequences of length 6: the loss must go from ~ln(12) to near zero."""
    vocab, length, bos = 12, 6, 0
    model = _Seq2Seq(vocab, "sinusoidal")
    src = torch.randint(1, vocab, (8, length))
    tgt = src.flip(1)
    tgt_in = torch.cat((torch.full((8, 1), bos), tgt[:, :-1]), dim=1)  # teacher forcing
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(300):
        loss = F.cross_entropy(model(src, tgt_in).reshape(-1, vocab), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if loss.item() < 0.02:
            break
    assert losses[0] > 2.0, f"initial loss {losses[0]:.3f} is below chance (ln 12 = 2.48): nothing to learn"
    assert losses[-1] < 0.05, f"final loss {losses[-1]:.3f} after {len(losses)} steps"
    model.eval()
    with torch.no_grad():
        assert (model(src, tgt_in).argmax(-1) == tgt).all()


# ------------------------------------------------------------------------------------------------
# Configuration errors
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [Encoder, Decoder])
def test_d_model_not_divisible_by_n_heads(cls: type[nn.Module]) -> None:
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by n_heads \(4\)"):
        cls(TransformerSpec(30, 4, 1))
    with pytest.raises(ValueError, match=r"d_model \(32\) must be divisible by n_heads \(0\)"):
        cls(TransformerSpec(32, 0, 1))


def test_attention_d_model_not_divisible_by_n_heads() -> None:
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by n_heads \(4\)"):
        MultiHeadAttention(30, 4)
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by n_heads \(4\)"):
        MultiHeadAttention(30, 4, cross_attention=True)


@pytest.mark.parametrize("cls", [Encoder, Decoder])
def test_unknown_pos_encoding(cls: type[nn.Module]) -> None:
    with pytest.raises(ValueError, match=r"unknown pos_encoding 'rotary'; expected one of"):
        cls(TransformerSpec(D, H, 1, pos_encoding="rotary"))


@pytest.mark.parametrize("cls", [Encoder, Decoder])
def test_rope_needs_even_head_dim(cls: type[nn.Module]) -> None:
    with pytest.raises(ValueError, match=r"'rope' needs an even head dimension; d_model \(12\) / n_heads \(4\) = 3"):
        cls(TransformerSpec(12, 4, 1, pos_encoding="rope"))
    cls(TransformerSpec(12, 4, 1, pos_encoding="alibi"))  # odd head dims are fine elsewhere


@pytest.mark.parametrize("cls", [Encoder, Decoder])
def test_n_layers_at_least_one(cls: type[nn.Module]) -> None:
    with pytest.raises(ValueError, match=r"n_layers must be at least 1, got 0"):
        cls(TransformerSpec(D, H, 0))


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "learned"])
def test_input_longer_than_max_len(pos_encoding: str) -> None:
    enc = make_encoder(pos_encoding, max_len=4)
    dec = make_decoder(pos_encoding, max_len=4)
    memory = torch.randn(1, 3, D)
    enc(torch.randn(1, 4, D))  # exactly max_len is fine
    dec(torch.randn(1, 4, D), memory)
    with pytest.raises(ValueError, match=rf"{pos_encoding} positional encoding: positions up to 5 .*max_len is 4"):
        enc(torch.randn(1, 5, D))
    with pytest.raises(ValueError, match=rf"{pos_encoding} positional encoding: positions up to 5 .*max_len is 4"):
        dec(torch.randn(1, 5, D), memory)


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "learned"])
def test_cache_offset_beyond_max_len(pos_encoding: str) -> None:
    dec = make_decoder(pos_encoding, max_len=4)
    memory = torch.randn(1, 3, D)
    with torch.no_grad():
        cache = dec.init_cache()
        for _ in range(4):
            dec(torch.randn(1, 1, D), memory, cache=cache)
        with pytest.raises(ValueError, match=r"positions up to 5 requested \(length 1, offset 4\)"):
            dec(torch.randn(1, 1, D), memory, cache=cache)

        cache = dec.init_cache()
        dec(torch.randn(1, 3, D), memory, cache=cache)  # chunked: 3 fit, 2 more do not
        with pytest.raises(ValueError, match=r"positions up to 5 requested \(length 2, offset 3\)"):
            dec(torch.randn(1, 2, D), memory, cache=cache)


def test_t5s_relative_bias_is_bidirectional_in_an_encoder_and_causal_in_a_decoder() -> None:
    enc, dec = make_encoder("relative", relative_buckets=8), make_decoder("relative", relative_buckets=8)
    assert enc.pos.relative is not None and enc.pos.relative.bidirectional
    assert dec.pos.relative is not None and not dec.pos.relative.bidirectional
    assert enc.pos.relative.embedding.weight.shape == (8, H)
