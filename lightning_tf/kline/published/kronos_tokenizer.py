"""Kronos's tokenizer: OHLCV bars to pairs of discrete tokens and back.

A causal Transformer encoder maps each normalised bar to ``s1_bits + s2_bits`` numbers; binary spherical
quantisation (BSQ, Zhao et al. 2024, "Image and Video Tokenization with Binary Spherical Quantization") keeps
their signs, a point of the hypercube scaled onto the unit sphere. The first ``s1_bits`` signs are the coarse
token s1, the others the fine token s2 (each read as a binary number, bit ``i`` worth ``2^i``), the hierarchy
the Kronos model predicts in two steps. A causal decoder maps the scaled sign vector back to a bar.

Its blocks are the core's (:mod:`.kronos_layers`). The quantiser's entropy losses, which train the tokenizer
from scratch, are not reproduced: :meth:`KronosTokenizer.forward` gives the two reconstructions with the
straight-through gradient, enough to fine-tune it on a reconstruction loss.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_tf.core import RotaryEmbedding

from .configs import KronosTokenizerConfig
from .kronos_layers import block_spec, make_blocks, run_blocks

__all__ = ["KronosTokenizer"]


class KronosTokenizer(nn.Module):
    """Bars ``(B, L, d_in)`` -> token pairs ``(B, L)`` each, and back.

    Args:
        config: the sizes (:class:`KronosTokenizerConfig`; :meth:`KronosTokenizerConfig.from_reference` reads
            the reference's config.json).
    """

    def __init__(self, config: KronosTokenizerConfig) -> None:
        super().__init__()
        self.config = config
        D, bits = config.d_model, config.s1_bits + config.s2_bits
        spec = block_spec(D, config.n_heads, config.d_ff, config.dropout, config.attn_dropout)
        self.embed = nn.Linear(config.d_in, D)
        self.encoder = make_blocks(spec, config.n_enc_layers - 1)
        self.quant_embed = nn.Linear(D, bits)
        self.post_quant_embed_pre = nn.Linear(config.s1_bits, D)
        self.post_quant_embed = nn.Linear(bits, D)
        self.decoder = make_blocks(spec, config.n_dec_layers - 1)
        self.head = nn.Linear(D, config.d_in)
        self.rope = RotaryEmbedding(D // config.n_heads, precision="float32")
        self.register_buffer("powers", 2 ** torch.arange(max(config.s1_bits, config.s2_bits)), persistent=False)

    def _latent(self, x: Tensor) -> Tensor:
        """Bars ``(B, L, d_in)`` -> the quantiser's input ``(B, L, s1_bits + s2_bits)``."""
        z = self.embed(x)  # (B, L, D)
        z = run_blocks(self.encoder, z, self.rope(x.shape[1], 0, x.device))
        return self.quant_embed(z)  # (B, L, bits)

    def _decode_codes(self, codes: Tensor, pre: bool = False) -> Tensor:
        """Scaled sign vectors ``(B, L, bits)`` (or the coarse part alone, ``pre``) -> bars ``(B, L, d_in)``."""
        z = (self.post_quant_embed_pre if pre else self.post_quant_embed)(codes)  # (B, L, D)
        z = run_blocks(self.decoder, z, self.rope(codes.shape[1], 0, codes.device))
        return self.head(z)  # (B, L, d_in)

    @torch.no_grad()
    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Normalised bars ``(B, L, d_in)`` -> the coarse and the fine tokens, ``(B, L)`` int64 each."""
        positive = self._latent(x) > 0  # (B, L, bits): the sign BSQ keeps (normalising leaves it)
        s1_bits = self.config.s1_bits
        s1 = (positive[..., :s1_bits].long() * self.powers[:s1_bits]).sum(-1)  # (B, L)
        s2 = (positive[..., s1_bits:].long() * self.powers[: self.config.s2_bits]).sum(-1)  # (B, L)
        return s1, s2

    def codes(self, s1: Tensor, s2: Tensor) -> Tensor:
        """Token pairs ``(B, L)`` each -> the quantised vectors ``(B, L, bits)``: each bit as ``+-1``, scaled by
        ``1 / sqrt(bits)`` onto the unit sphere."""
        c = self.config
        b1 = (s1.unsqueeze(-1) & self.powers[: c.s1_bits]) != 0  # (B, L, s1_bits)
        b2 = (s2.unsqueeze(-1) & self.powers[: c.s2_bits]) != 0  # (B, L, s2_bits)
        signs = torch.cat((b1, b2), dim=-1).float() * 2 - 1  # (B, L, bits)
        return signs * (1.0 / math.sqrt(c.s1_bits + c.s2_bits))

    def decode(self, s1: Tensor, s2: Tensor) -> Tensor:
        """Token pairs ``(B, L)`` each -> normalised bars ``(B, L, d_in)``."""
        return self._decode_codes(self.codes(s1, s2))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Reconstruct bars ``(B, L, d_in)`` through the quantiser, with the straight-through gradient.

        Returns:
            The reconstruction from the coarse bits alone and from all bits, ``(B, L, d_in)`` each, and the
            quantised vectors ``(B, L, bits)``.
        """
        z = F.normalize(self._latent(x), dim=-1)  # (B, L, bits) on the unit sphere
        signs = torch.where(z > 0, 1.0, -1.0).to(z.dtype)
        quantized = (z + (signs - z).detach()) * (1.0 / math.sqrt(z.shape[-1]))  # the signs, with z's gradient
        pre = self._decode_codes(quantized[..., : self.config.s1_bits], pre=True)
        return pre, self._decode_codes(quantized), quantized
