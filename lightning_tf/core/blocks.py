"""Encoder and decoder layers, Pre-LN (default) or Post-LN.

Post-LN is the block of Vaswani et al. 2017: ``x = norm(x + dropout(sublayer(x)))``.
Pre-LN (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture") moves the
norm inside the residual branch, ``x = x + dropout(sublayer(norm(x)))``, which trains stably
without a long warmup; a Pre-LN stack ends with a final norm. Submodule names match
``torch.nn.TransformerEncoderLayer``/``TransformerDecoderLayer`` so weights map one to one.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import KVCache, MultiHeadAttention
from .feedforward import FeedForward
from .spec import NormName, TransformerSpec

__all__ = ["DropPath", "EncoderLayer", "DecoderLayer", "LayerScale", "RMSNorm", "TokenBatchNorm", "make_norm"]


class DropPath(nn.Module):
    """Stochastic depth (Huang et al. 2016): in training, drop a residual branch for a whole
    sample with probability ``p`` and scale the kept ones by ``1 / (1 - p)``; identity in eval.

    Args:
        p: drop probability, in ``[0, 1)``.
    """

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"drop_path must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # (B, 1, ..., 1): one draw per sample
        return x * torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(keep).div_(keep)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class LayerScale(nn.Module):
    """Per-channel learned scale of a residual branch (Touvron et al. 2021, CaiT).

    Args:
        d_model: width D.
        init: initial value of every entry of ``gamma`` (D,).
    """

    def __init__(self, d_model: int, init: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((d_model,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma  # (..., D) * (D,)


class TokenBatchNorm(nn.Module):
    """BatchNorm over the feature axis of ``(B, T, D)`` tokens: statistics over every token of the
    batch (``B * T`` values per feature), as PatchTST normalises patch tokens (Zerveas et al. 2021).
    Unlike LayerNorm it mixes tokens of different sequences, so it is for unpadded inputs."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(d_model, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(x.transpose(1, 2)).transpose(1, 2)  # (B, T, D) -> (B, D, T) -> (B, T, D)


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (Zhang and Sennrich 2019): ``x / sqrt(mean(x^2) + eps) * weight``, no mean
    subtracted and no bias; T5's layer norm and LLaMA's (and Kronos's). The statistics are taken in float32
    whatever the input's type, and the result is cast back before the weight multiplies it.

    Args:
        d_model: width D.
        eps: added to the mean square.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., D)."""
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., D)
        return h.to(x.dtype) * self.weight

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def make_norm(norm: NormName, d_model: int, eps: float = 1e-5) -> nn.Module:
    """``layer`` -> :class:`torch.nn.LayerNorm`, ``rms`` -> :class:`RMSNorm`, ``batch`` -> :class:`TokenBatchNorm`."""
    if norm == "layer":
        return nn.LayerNorm(d_model, eps=eps)
    if norm == "rms":
        return RMSNorm(d_model, eps=eps)
    if norm == "batch":
        return TokenBatchNorm(d_model, eps=eps)
    raise ValueError(f"norm must be 'layer', 'rms' or 'batch', got {norm!r}")


def _attention(spec: TransformerSpec, cross_attention: bool = False) -> MultiHeadAttention:
    return MultiHeadAttention(
        spec.d_model,
        spec.n_heads,
        dropout=spec.attn_dropout,
        bias=spec.bias,
        cross_attention=cross_attention,
        d_head=spec.d_head,
        scale=spec.attn_scale,
    )


def _feedforward(spec: TransformerSpec) -> FeedForward:
    return FeedForward(spec.d_model, spec.d_ff, spec.activation, spec.ffn_rate, spec.use_ffn_bias)


def _branch_regularizers(d_model: int, drop_path: float, layer_scale: float | None) -> tuple[nn.Module, nn.Module]:
    """(LayerScale or Identity, DropPath or Identity) for one residual branch."""
    ls = LayerScale(d_model, layer_scale) if layer_scale is not None else nn.Identity()
    return ls, DropPath(drop_path) if drop_path > 0 else nn.Identity()


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual branch.

    Args:
        spec: the sizes and options (:class:`~.spec.TransformerSpec`; ``n_layers``, ``final_norm``,
            ``pos_encoding`` and ``max_len`` are the stack's).
        drop_path: this layer's stochastic-depth rate of both residual branches; None: ``spec.drop_path``.
    """

    def __init__(self, spec: TransformerSpec, drop_path: float | None = None) -> None:
        super().__init__()
        D = spec.d_model
        self.norm_first = spec.norm_first
        self.self_attn = _attention(spec)
        self.ff = _feedforward(spec)
        self.norm1 = make_norm(spec.norm, D, spec.layer_norm_eps)
        self.norm2 = make_norm(spec.norm, D, spec.layer_norm_eps)
        self.dropout1 = nn.Dropout(spec.dropout)
        self.dropout2 = nn.Dropout(spec.dropout)
        rate = spec.drop_path if drop_path is None else drop_path
        self.ls1, self.drop_path1 = _branch_regularizers(D, rate, spec.layer_scale)
        self.ls2, self.drop_path2 = _branch_regularizers(D, rate, spec.layer_scale)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """(B, T, D) -> (B, T, D), and the attention weights (B, H, T, T') if ``need_weights``.

        With ``is_causal`` and a ``cache`` (a :class:`KVCache` of the earlier positions, updated in place) the
        layer is a decoder-only model's layer decoding incrementally: ``x`` holds the newest T positions and
        attends to the T' = cached + T positions.
        """
        if self.norm_first:
            a, w = self.self_attn(
                self.norm1(x),
                mask=mask,
                is_causal=is_causal,
                bias=bias,
                rotary=rotary,
                cache=cache,
                need_weights=need_weights,
            )
            x = x + self.drop_path1(self.ls1(self.dropout1(a)))
            x = x + self.drop_path2(self.ls2(self.dropout2(self.ff(self.norm2(x)))))
        else:
            a, w = self.self_attn(
                x, mask=mask, is_causal=is_causal, bias=bias, rotary=rotary, cache=cache, need_weights=need_weights
            )
            x = self.norm1(x + self.dropout1(a))
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x, w


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder memory, then feed-forward.

    Args:
        spec: the sizes and options (:class:`~.spec.TransformerSpec`); norm ``layer`` or ``rms``, without
            ``drop_path`` or ``layer_scale``.
    """

    def __init__(self, spec: TransformerSpec) -> None:
        super().__init__()
        if spec.norm == "batch" or spec.drop_path > 0 or spec.layer_scale is not None:
            raise ValueError("a decoder layer takes norm 'layer' or 'rms' and neither drop_path nor layer_scale")
        D = spec.d_model
        self.norm_first = spec.norm_first
        self.self_attn = _attention(spec)
        self.cross_attn = _attention(spec, cross_attention=True)
        self.ff = _feedforward(spec)
        self.norm1 = make_norm(spec.norm, D, spec.layer_norm_eps)
        self.norm2 = make_norm(spec.norm, D, spec.layer_norm_eps)
        self.norm3 = make_norm(spec.norm, D, spec.layer_norm_eps)
        self.dropout1 = nn.Dropout(spec.dropout)
        self.dropout2 = nn.Dropout(spec.dropout)
        self.dropout3 = nn.Dropout(spec.dropout)

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
                h,
                mask=self_mask,
                is_causal=is_causal,
                bias=bias,
                rotary=rotary,
                cache=self_cache,
                need_weights=need_weights,
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
