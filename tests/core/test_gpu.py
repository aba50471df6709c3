"""On CUDA: every attention path reaches a fused SDPA kernel in bfloat16 and agrees with the float32
CPU reference (skipped without a GPU).

Restricting ``F.scaled_dot_product_attention`` to one backend with ``sdpa_kernel`` makes it raise when
that backend cannot run the call, so a test that passes under ``FLASH`` proves the path reaches flash
attention, and one under ``EFFICIENT`` the memory-efficient kernel:

* flash: unmasked attention and causal self-attention handed over as ``is_causal`` (no mask tensor),
  with or without RoPE, and the one-token steps of cached decoding;
* memory-efficient: everything with a mask tensor (flash takes none): padding masks ``(B, 1, 1, S)``,
  causal plus target padding, ALiBi biases, cross-attention to a padded source.

The reference is the same module in float32 on the CPU, run forward and backward with the same
upstream gradient. bfloat16 keeps 8 bits of mantissa (relative rounding 2^-9 per operation), so
outputs and gradients are compared by the relative error of the whole tensor, ``|a - b| / |b|``:
outputs within :data:`TOL` (CPU bfloat16 autocast gives at most 0.7% on these modules), gradients
within :data:`GRAD_TOL` (up to 7% there, most of it in the feed-forward's ReLU). A wrong mask moves
the output by 20-80% (a dropped padding mask, a non-causal self-attention), far outside both.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from lightning_tf.core import (
    Decoder,
    Encoder,
    MultiHeadAttention,
    RotaryEmbedding,
    TransformerSpec,
    causal_mask,
    padding_mask,
)

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
FLASH: list[SDPBackend] | None = [SDPBackend.FLASH_ATTENTION]
EFFICIENT: list[SDPBackend] | None = [SDPBackend.EFFICIENT_ATTENTION]
TOL = 3e-2  # relative error of an output, bfloat16 against float32
GRAD_TOL = 0.15  # of a gradient: the backward adds bfloat16 roundings (and ReLU gates that flip near 0)
B, T, S, D, H = 3, 17, 33, 128, 4  # odd lengths: neither a multiple of 8 nor equal
SRC_LENGTHS = [33, 20, 5]  # full, padded, mostly padding
TGT_LENGTHS = [17, 9, 1]  # a target of one real token: its padded queries see only that one key


def _pair(pos_encoding: str) -> tuple[Encoder, Decoder]:
    kw = dict(d_model=D, n_heads=H, n_layers=2, dropout=0.0, pos_encoding=pos_encoding)
    return Encoder(TransformerSpec(**kw)).eval(), Decoder(TransformerSpec(**kw)).eval()


def _kernels(backends: list[SDPBackend] | None) -> contextlib.AbstractContextManager:
    """SDPA restricted to ``backends`` (None: unrestricted)."""
    return sdpa_kernel(backends) if backends else contextlib.nullcontext()


def _autocast() -> torch.autocast:
    return torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16)


def _rel(a: Tensor, b: Tensor) -> float:
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def _grads(module: nn.Module, inputs: list[Tensor]) -> dict[str, Tensor]:
    """Gradients of the float inputs (by position) and of the parameters (by name)."""
    grads = {f"input {i}": t.grad for i, t in enumerate(inputs) if t.grad is not None}
    return grads | {name: p.grad for name, p in module.named_parameters() if p.grad is not None}


def check_bf16_against_fp32(
    module: nn.Module,
    inputs: list[Tensor],
    call: Callable[..., Tensor],
    backends: list[SDPBackend] | None,
    *,
    train: bool = True,
) -> None:
    """``call(module, *inputs)`` under bfloat16 autocast on :data:`DEVICE`, SDPA restricted to
    ``backends``, against float32 on the CPU: the output within TOL and (with ``train``) the gradient
    of every float input and every parameter, for the same upstream gradient, within GRAD_TOL. Bool
    inputs are masks."""
    module = module.train(train)
    dev_module = copy.deepcopy(module).to(DEVICE)
    ref_inputs = [t.clone().requires_grad_(train and t.is_floating_point()) for t in inputs]
    dev_inputs = [t.to(DEVICE).requires_grad_(train and t.is_floating_point()) for t in inputs]
    with torch.set_grad_enabled(train):
        ref = call(module, *ref_inputs)
        grad = torch.randn(ref.shape)
        if train:
            ref.backward(grad)
        with _kernels(backends):
            with _autocast():
                out = call(dev_module, *dev_inputs)
            if train:
                out.backward(grad.to(out.device, out.dtype))  # the backward of the kernel the forward chose
    assert torch.isfinite(out).all()  # bfloat16, or float32 after a final LayerNorm (autocast keeps norms in float32)
    err = _rel(out, ref)
    assert err < TOL, f"output: relative error {err:.3g} (tolerance {TOL})"
    if train:
        ref_grads, grads = _grads(module, ref_inputs), _grads(dev_module, dev_inputs)
        assert grads.keys() == ref_grads.keys() and ref_grads
        errors = {name: _rel(grads[name], ref_grads[name]) for name in ref_grads}
        worst = max(errors, key=errors.__getitem__)
        assert errors[worst] < GRAD_TOL, f"gradient of {worst}: relative error {errors[worst]:.3g} (tol. {GRAD_TOL})"


def _src_mask() -> Tensor:
    return padding_mask(lengths=torch.tensor(SRC_LENGTHS), max_len=S)  # (B, 1, 1, S)


def _tgt_mask() -> Tensor:
    return padding_mask(lengths=torch.tensor(TGT_LENGTHS), max_len=T)  # (B, 1, 1, T)


# ------------------------------------------------------------------------------------------- flash


def test_flash_causal_self_attention_without_a_mask_tensor() -> None:
    mha = MultiHeadAttention(D, H)
    check_bf16_against_fp32(mha, [torch.randn(B, T, D)], lambda m, x: m(x, is_causal=True)[0], FLASH)


def test_flash_causal_self_attention_with_rope() -> None:
    mha, rope = MultiHeadAttention(D, H), RotaryEmbedding(D // H)

    def call(m: MultiHeadAttention, x: Tensor) -> Tensor:
        return m(x, is_causal=True, rotary=rope(T, 0, x.device))[0]

    check_bf16_against_fp32(mha, [torch.randn(B, T, D)], call, FLASH)


def test_flash_unmasked_cross_attention() -> None:
    mha = MultiHeadAttention(D, H, cross_attention=True)
    check_bf16_against_fp32(mha, [torch.randn(B, T, D), torch.randn(B, S, D)], lambda m, x, c: m(x, c)[0], FLASH)


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "none"])
def test_flash_encoder_without_padding(pos_encoding: str) -> None:
    enc, _ = _pair(pos_encoding)
    check_bf16_against_fp32(enc, [torch.randn(B, S, D)], lambda m, x: m(x), FLASH)


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope"])
def test_flash_decoder_causal_without_masks(pos_encoding: str) -> None:
    """No target or memory mask: causal self-attention goes to SDPA as ``is_causal``, and the
    cross-attention is unmasked; both reach flash, forward and backward."""
    _, dec = _pair(pos_encoding)
    check_bf16_against_fp32(dec, [torch.randn(B, T, D), torch.randn(B, S, D)], lambda m, y, mem: m(y, mem), FLASH)


def test_flash_runs_attention_dropout_in_training() -> None:
    enc = Encoder(TransformerSpec(D, H, 2, dropout=0.0, attn_dropout=0.1, pos_encoding="rope")).to(DEVICE).train()
    dec = Decoder(TransformerSpec(D, H, 2, dropout=0.0, attn_dropout=0.1)).to(DEVICE).train()
    x = torch.randn(B, S, D, device=DEVICE, requires_grad=True)
    y = torch.randn(B, T, D, device=DEVICE, requires_grad=True)
    with _kernels(FLASH):
        with _autocast():
            out = dec(y, enc(x))
        out.float().square().mean().backward()
    assert torch.isfinite(out).all()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    assert y.grad is not None and torch.isfinite(y.grad).all()


def test_flash_refuses_a_mask_tensor() -> None:
    """The restriction is real: with a padding mask flash cannot run and SDPA raises, which is why
    the masked paths below are checked under the memory-efficient kernel."""
    enc, _ = _pair("none")
    enc = enc.to(DEVICE)
    with _kernels(FLASH), _autocast(), torch.no_grad():
        with pytest.raises(RuntimeError):
            enc(torch.randn(B, S, D, device=DEVICE), _src_mask().to(DEVICE))


# ---------------------------------------------------------------------------------- memory-efficient


def test_efficient_self_attention_with_padding_mask() -> None:
    mha = MultiHeadAttention(D, H)
    check_bf16_against_fp32(mha, [torch.randn(B, S, D), _src_mask()], lambda m, x, k: m(x, mask=k)[0], EFFICIENT)


def test_efficient_causal_self_attention_with_target_padding() -> None:
    mha = MultiHeadAttention(D, H)
    check_bf16_against_fp32(
        mha, [torch.randn(B, T, D), _tgt_mask()], lambda m, x, k: m(x, mask=k, is_causal=True)[0], EFFICIENT
    )


def test_efficient_cross_attention_with_source_padding() -> None:
    mha = MultiHeadAttention(D, H, cross_attention=True)
    check_bf16_against_fp32(
        mha,
        [torch.randn(B, T, D), torch.randn(B, S, D), _src_mask()],
        lambda m, x, c, k: m(x, c, mask=k)[0],
        EFFICIENT,
    )


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "alibi"])
def test_efficient_encoder_with_padding(pos_encoding: str) -> None:
    enc, _ = _pair(pos_encoding)
    check_bf16_against_fp32(enc, [torch.randn(B, S, D), _src_mask()], lambda m, x, k: m(x, k), EFFICIENT)


def test_efficient_encoder_with_alibi_and_no_mask() -> None:
    """ALiBi is an additive float bias: flash cannot take it, the memory-efficient kernel does."""
    enc, _ = _pair("alibi")
    check_bf16_against_fp32(enc, [torch.randn(B, S, D)], lambda m, x: m(x), EFFICIENT)


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "alibi"])
def test_efficient_decoder_with_target_and_source_padding(pos_encoding: str) -> None:
    _, dec = _pair(pos_encoding)
    check_bf16_against_fp32(
        dec,
        [torch.randn(B, T, D), torch.randn(B, S, D), _tgt_mask(), _src_mask()],
        lambda m, y, mem, tk, sk: m(y, mem, tgt_mask=tk, memory_mask=sk),
        EFFICIENT,
    )


def test_efficient_runs_attention_dropout_with_a_mask() -> None:
    enc = Encoder(TransformerSpec(D, H, 2, dropout=0.0, attn_dropout=0.1)).to(DEVICE).train()
    x = torch.randn(B, S, D, device=DEVICE, requires_grad=True)
    with _kernels(EFFICIENT):
        with _autocast():
            out = enc(x, _src_mask().to(DEVICE))
        out.float().square().mean().backward()
    assert torch.isfinite(out).all() and x.grad is not None and torch.isfinite(x.grad).all()


# ---------------------------------------------------------------------------------- cached decoding


@pytest.mark.parametrize(
    ("pos_encoding", "masked"), [("sinusoidal", False), ("rope", False), ("sinusoidal", True), ("alibi", True)]
)
def test_cached_decoding_steps_in_bf16_equal_full_fp32(pos_encoding: str, masked: bool) -> None:
    """One-token steps on the KV cache: unmasked they run on flash (no causal mask is needed for the
    newest query); with a padded source the cross-attention needs the memory-efficient kernel; ALiBi's
    bias always does."""
    enc, dec = _pair(pos_encoding)
    src, tgt = torch.randn(B, S, D), torch.randn(B, T, D)
    mask = _src_mask() if masked else None
    with torch.no_grad():
        ref = dec(tgt, enc(src, mask), memory_mask=mask)  # (B, T, D), float32 on the CPU
        enc, dec = enc.to(DEVICE), dec.to(DEVICE)
        dev_mask = None if mask is None else mask.to(DEVICE)
        backends = EFFICIENT if masked or pos_encoding == "alibi" else FLASH
        with _kernels(backends), _autocast():
            memory = enc(src.to(DEVICE), dev_mask)
            cache = dec.init_cache(4)  # smaller than T: the cache also grows on the way
            steps = [dec(tgt[:, t : t + 1].to(DEVICE), memory, memory_mask=dev_mask, cache=cache) for t in range(T)]
    out = torch.cat(steps, 1)  # (B, T, D)
    err = _rel(out, ref)
    assert err < TOL, f"cached bfloat16 decoding against full float32: relative error {err:.3g}"


# ------------------------------------------------------------------------- earlier checks, kept as-is


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "alibi"])
def test_cuda_bf16_matches_cpu_float32(pos_encoding: str) -> None:
    enc, dec = _pair(pos_encoding)
    src, tgt = torch.randn(4, 33, 128), torch.randn(4, 17, 128)
    mask = padding_mask(lengths=torch.tensor([33, 20, 5, 1]), max_len=33)
    with torch.no_grad():
        ref = dec(tgt, enc(src, mask), memory_mask=mask)
        enc, dec = enc.to(DEVICE), dec.to(DEVICE)
        with _autocast():
            out = dec(tgt.to(DEVICE), enc(src.to(DEVICE), mask.to(DEVICE)), memory_mask=mask.to(DEVICE))
    torch.testing.assert_close(out.float().cpu(), ref, atol=5e-2, rtol=5e-2)


def test_flash_backend_runs_the_causal_fast_path() -> None:
    _, dec = _pair("none")
    dec = dec.to(DEVICE).to(torch.bfloat16)
    tgt = torch.randn(2, 64, 128, device=DEVICE, dtype=torch.bfloat16)
    memory = torch.randn(2, 40, 128, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad(), _kernels(FLASH):
        out = dec(tgt, memory)  # no masks: causal self-attention via is_causal, plain cross-attention
    assert torch.isfinite(out).all()


def test_cuda_cached_decoding_equals_full() -> None:
    enc, dec = (m.to(DEVICE) for m in _pair("rope"))
    src, tgt = torch.randn(2, 9, 128, device=DEVICE), torch.randn(2, 12, 128, device=DEVICE)
    with torch.no_grad():
        memory = enc(src)
        full = dec(tgt, memory)
        cache = dec.init_cache()
        steps = [dec(tgt[:, t : t + 1], memory, cache=cache) for t in range(12)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-4, rtol=1e-4)


def test_causal_mask_helper_is_what_sdpa_is_causal_means() -> None:
    """``is_causal`` (top-left aligned, square) and our explicit ``causal_mask`` select the same keys,
    so handing causality to the kernel changes no number."""
    mha = MultiHeadAttention(D, H).to(DEVICE).eval()
    x = torch.randn(B, T, D, device=DEVICE)
    with torch.no_grad():
        fast, _ = mha(x, is_causal=True)
        explicit, _ = mha(x, mask=causal_mask(T, device=DEVICE))
    torch.testing.assert_close(fast, explicit, atol=1e-4, rtol=1e-4)  # a wrong key set moves it by ~80%
