"""Encoder and decoder layers, Pre-LN (default) or Post-LN.

Post-LN is the block of Vaswani et al. 2017: ``x = norm(x + dropout(sublayer(x)))``.
Pre-LN (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture") moves the
norm inside the residual branch, ``x = x + dropout(sublayer(norm(x)))``, which trains stably
without a long warmup; a Pre-LN stack ends with a final norm. Submodule names match
``torch.nn.TransformerEncoderLayer``/``TransformerDecoderLayer`` so weights map one to one.
"""

from __future__ import annotations

from torch import Tensor, nn

from .attention import KVCache, MultiHeadAttention
from .feedforward import Activation, FeedForward

__all__ = ["EncoderLayer", "DecoderLayer"]


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual branch.

    Args:
        d_model: model width D.
        n_heads: number of heads H.
        d_ff: feed-forward hidden width; defaults to ``4 * d_model``.
        dropout: dropout on each sublayer output (before the residual add) and inside the
            feed-forward network.
        attn_dropout: dropout on the attention weights.
        activation: feed-forward activation, ``relu``, ``gelu`` or ``swiglu``.
        norm_first: Pre-LN (True) or Post-LN (False).
        bias: whether linear layers have biases.
        layer_norm_eps: epsilon of the layer norms.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.1,
        attn_dropout: float = 0.0,
        activation: Activation = "relu",
        norm_first: bool = True,
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=attn_dropout, bias=bias)
        self.ff = FeedForward(d_model, d_ff, activation, dropout, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """(B, T, D) -> (B, T, D), and the attention weights (B, H, T, T) if ``need_weights``."""
        if self.norm_first:
            a, w = self.self_attn(
                self.norm1(x), mask=mask, is_causal=is_causal, bias=bias, rotary=rotary, need_weights=need_weights
            )
            x = x + self.dropout1(a)
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            a, w = self.self_attn(x, mask=mask, is_causal=is_causal, bias=bias, rotary=rotary, need_weights=need_weights)
            x = self.norm1(x + self.dropout1(a))
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x, w


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder memory, then feed-forward.

    Args:
        d_model: model width D.
        n_heads: number of heads H.
        d_ff: feed-forward hidden width; defaults to ``4 * d_model``.
        dropout: dropout on each sublayer output and inside the feed-forward network.
        attn_dropout: dropout on the attention weights.
        activation: feed-forward activation, ``relu``, ``gelu`` or ``swiglu``.
        norm_first: Pre-LN (True) or Post-LN (False).
        bias: whether linear layers have biases.
        layer_norm_eps: epsilon of the layer norms.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.1,
        attn_dropout: float = 0.0,
        activation: Activation = "relu",
        norm_first: bool = True,
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=attn_dropout, bias=bias)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=attn_dropout, bias=bias, cross_attention=True)
        self.ff = FeedForward(d_model, d_ff, activation, dropout, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        *,
        is_causal: bool = True,
        bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
        cache: tuple[KVCache, KVCache] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Decode ``x`` (B, T, D) against ``memory`` (B, S, D).

        Returns:
            ``(B, T, D)``, and if ``need_weights`` the self-attention weights ``(B, H, T, T')``
            (T' = cached + T) and the cross-attention weights ``(B, H, T, S)``.
        """
        self_cache, cross_cache = cache if cache is not None else (None, None)

        def self_block(h: Tensor) -> tuple[Tensor, Tensor | None]:
            a, w = self.self_attn(
                h, mask=self_mask, is_causal=is_causal, bias=bias, rotary=rotary, cache=self_cache, need_weights=need_weights
            )
            return self.dropout1(a), w

        def cross_block(h: Tensor) -> tuple[Tensor, Tensor | None]:
            a, w = self.cross_attn(h, memory, mask=memory_mask, cache=cross_cache, need_weights=need_weights)
            return self.dropout2(a), w

        if self.norm_first:
            a, self_w = self_block(self.norm1(x))
            x = x + a
            a, cross_w = cross_block(self.norm2(x))
            x = x + a
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            a, self_w = self_block(x)
            x = self.norm1(x + a)
            a, cross_w = cross_block(x)
            x = self.norm2(x + a)
            x = self.norm3(x + self.dropout3(self.ff(x)))
        return x, self_w, cross_w
