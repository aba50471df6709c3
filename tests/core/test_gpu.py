"""On CUDA: the fused kernels agree with the float32 CPU reference (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from lightning_tf.core import Decoder, Encoder, padding_mask

pytestmark = pytest.mark.gpu


def _pair(pos_encoding: str) -> tuple[Encoder, Decoder]:
    kw = dict(d_model=128, n_heads=4, n_layers=2, dropout=0.0, pos_encoding=pos_encoding)
    return Encoder(**kw).eval(), Decoder(**kw).eval()


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "alibi"])
def test_cuda_bf16_matches_cpu_float32(pos_encoding: str) -> None:
    enc, dec = _pair(pos_encoding)
    src, tgt = torch.randn(4, 33, 128), torch.randn(4, 17, 128)
    mask = padding_mask(lengths=torch.tensor([33, 20, 5, 1]), max_len=33)
    with torch.no_grad():
        ref = dec(tgt, enc(src, mask), memory_mask=mask)
        enc, dec = enc.cuda(), dec.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = dec(tgt.cuda(), enc(src.cuda(), mask.cuda()), memory_mask=mask.cuda())
    torch.testing.assert_close(out.float().cpu(), ref, atol=5e-2, rtol=5e-2)


def test_flash_backend_runs_the_causal_fast_path() -> None:
    _, dec = _pair("none")
    dec = dec.cuda().to(torch.bfloat16)
    tgt = torch.randn(2, 64, 128, device="cuda", dtype=torch.bfloat16)
    memory = torch.randn(2, 40, 128, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad(), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = dec(tgt, memory)  # no masks: causal self-attention via is_causal, plain cross-attention
    assert torch.isfinite(out).all()


def test_cuda_cached_decoding_equals_full() -> None:
    enc, dec = (m.cuda() for m in _pair("rope"))
    src, tgt = torch.randn(2, 9, 128, device="cuda"), torch.randn(2, 12, 128, device="cuda")
    with torch.no_grad():
        memory = enc(src)
        full = dec(tgt, memory)
        cache = dec.init_cache()
        steps = [dec(tgt[:, t : t + 1], memory, cache=cache) for t in range(12)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-4, rtol=1e-4)
