"""Multi-head attention on ``F.scaled_dot_product_attention``, with an explicit path that returns
the attention weights, and a key/value cache for incremental decoding.

Vaswani et al. 2017, "Attention Is All You Need", sec. 3.2. Masks follow :mod:`.masks`:
bool, True = may attend, broadcastable to ``(B, H, T, S)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import causal_mask, combine_masks
from .positional import apply_rotary

__all__ = ["KVCache", "MultiHeadAttention", "masked_bias"]


def masked_bias(bias: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """A key ``mask`` folded into an additive score ``bias`` once, for a stack whose layers all take both.

    Returns:
        The bias with ``-inf`` at the keys the mask hides, broadcast with it (usually ``(B, H, T, S)``), and the
        row mask ``(..., T, 1)``, False where a query sees no key (that row of the bias stays finite, so its
        softmax is not NaN). Handed to each layer's :class:`MultiHeadAttention` in place of ``(bias, mask)``,
        they give the same scores without a pass over ``(B, H, T, S)`` per layer (T5 adds its mask to the
        position bias once, too).
    """
    visible = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
    return bias.masked_fill(~(mask | ~visible), float("-inf")), visible


class KVCache:
    """Keys and values of one attention layer, kept across decoding steps.

    Self-attention appends the newest step's keys/values with :meth:`update`; cross-attention
    stores the projected source once and reuses it (``length > 0``). Storage is preallocated
    (``capacity``) and doubles when full, so a step costs a slice write, not a concatenation.

    Args:
        capacity: positions to preallocate on the first update (at least that update's length).
    """

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = capacity
        self.length = 0
        self._k: Tensor | None = None
        self._v: Tensor | None = None

    @property
    def keys(self) -> Tensor:
        """Cached keys, ``(B, H, length, Dh)``."""
        if self._k is None:
            raise RuntimeError("KVCache is empty: nothing has been cached yet")
        return self._k[:, :, : self.length]

    @property
    def values(self) -> Tensor:
        """Cached values, ``(B, H, length, Dh)``."""
        if self._v is None:
            raise RuntimeError("KVCache is empty: nothing has been cached yet")
        return self._v[:, :, : self.length]

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k, v`` of shape ``(B, H, T, Dh)``; return all cached keys and values."""
        T = k.shape[2]
        end = self.length + T
        if self._k is None or self._v is None:
            B, H, _, Dh = k.shape
            size = max(self.capacity, T)
            self._k = k.new_empty(B, H, size, Dh)  # (B, H, capacity, Dh)
            self._v = v.new_empty(B, H, size, Dh)
        elif end > self._k.shape[2]:
            grow = max(end, 2 * self._k.shape[2]) - self._k.shape[2]
            self._k = torch.cat((self._k, self._k.new_empty(*self._k.shape[:2], grow, self._k.shape[3])), 2)
            self._v = torch.cat((self._v, self._v.new_empty(*self._v.shape[:2], grow, self._v.shape[3])), 2)
        self._k[:, :, self.length : end] = k
        self._v[:, :, self.length : end] = v
        self.length = end
        return self.keys, self.values

    def reorder(self, index: Tensor) -> None:
        """Select batch rows ``index`` (beam search reordering), in place."""
        if self._k is not None and self._v is not None:
            self._k = self._k.index_select(0, index)
            self._v = self._v.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention.

    Self-attention projects queries, keys and values with one fused ``(D, 3 H Dh)`` matrix;
    cross-attention (``cross_attention=True``) projects queries from ``x`` and keys/values from
    ``context`` with a fused ``(D, 2 H Dh)`` matrix.

    Args:
        d_model: model width D.
        n_heads: number of heads H; ``d_model`` must be divisible by it unless ``d_head`` is given.
        dropout: dropout on the attention weights (training only).
        bias: whether the projections have biases.
        cross_attention: attend from ``x`` to a separate ``context``.
        d_head: head dimension Dh; None: ``d_model // n_heads``. T5's sizes set it apart from D / H (the heads
            then span ``H * Dh`` channels, projected back to D).
        scale: the factor of the dot products; None: ``1 / sqrt(Dh)``. T5 uses 1 (its initialisation holds the
            scale).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        cross_attention: bool = False,
        d_head: int | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        if n_heads <= 0 or (d_head is None and d_model % n_heads):
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if d_head is not None and d_head <= 0:
            raise ValueError(f"d_head must be positive, got {d_head}")
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_model // n_heads if d_head is None else d_head
        inner = n_heads * self.d_head
        self.scale = scale
        self.dropout = dropout
        self.cross_attention = cross_attention
        if cross_attention:
            self.q_proj = nn.Linear(d_model, inner, bias=bias)
            self.kv_proj = nn.Linear(d_model, 2 * inner, bias=bias)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * inner, bias=bias)
        self.out_proj = nn.Linear(inner, d_model, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Glorot/Xavier over each projection matrix, zero biases: the scheme of nn.MultiheadAttention
        # (and of the paper's tensor2tensor code); it keeps the variance of q, k, v near that of x.
        for lin in self.children():
            assert isinstance(lin, nn.Linear)
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def _split(self, x: Tensor, n: int) -> tuple[Tensor, ...]:
        B, T, _ = x.shape
        x = x.view(B, T, n, self.n_heads, self.d_head)  # (B, T, n, H, Dh)
        return x.permute(2, 0, 3, 1, 4).unbind(0)  # n x (B, H, T, Dh)

    def project_kv(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention's keys and values of ``context`` (B, S, D), each ``(B, H, S, Dh)``: what a caller
        appends to a :class:`KVCache` it fills itself, for a source that grows by a few positions at a time
        (the cache then serves :meth:`forward` as a filled cross-attention cache)."""
        if not self.cross_attention:
            raise ValueError("project_kv is for cross-attention (cross_attention=True)")
        k, v = self._split(self.kv_proj(context), 2)  # (B, H, S, Dh) each
        return k, v

    def _own_value(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """Self-attention of a single position ``x`` (B, 1, D) with no cache -> (B, 1, D): the softmax of its one
        score is 1, so the output is the projected value (zero where ``mask`` hides the key), and neither the
        query nor the key is computed (a decoder's first position without a cache)."""
        B, H, Dh = x.shape[0], self.n_heads, self.d_head
        w, b = self.qkv_proj.weight[2 * H * Dh :], self.qkv_proj.bias  # the value's rows of the fused projection
        v = F.linear(x, w, None if b is None else b[2 * H * Dh :])  # (B, 1, H Dh)
        if mask is not None:
            hidden = ~mask.expand(B, H, 1, 1).transpose(1, 2)  # (B, 1, H, 1)
            v = v.view(B, 1, H, Dh).masked_fill(hidden, 0.0).view(B, 1, H * Dh)
        return self.out_proj(v)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` (B, T, D) to itself or to ``context`` (B, S, D).

        Args:
            x: queries' input, ``(B, T, D)``.
            context: keys'/values' input for cross-attention, ``(B, S, D)``; ignored when the
                cross-attention ``cache`` is already filled.
            mask: bool, True = may attend, broadcastable to ``(B, H, T, S)``.
            is_causal: additionally hide keys after each query (the newest T of S positions).
            bias: additive score bias broadcastable to ``(B, H, T, S)`` (ALiBi, T5's relative bias).
            rotary: RoPE ``(cos, sin)`` of the new positions, each ``(T, Dh/2)``; applied to
                queries and to the new keys before they are cached. In cross-attention the keys computed from
                ``context`` are rotated by the same angles, so it needs ``S == T`` (Kronos's dependency layer;
                a filled cross-attention cache is used as it is).
            cache: :class:`KVCache` for incremental decoding.
            need_weights: take the explicit path and also return the weights.

        Returns:
            Output ``(B, T, D)`` and, if ``need_weights``, the weights ``(B, H, T, S)`` (else None).
            A query with no visible key gets a zero output and zero weights.
        """
        B, T, _ = x.shape
        if self.cross_attention:
            (q,) = self._split(self.q_proj(x), 1)  # (B, H, T, Dh)
            if cache is not None and cache.length > 0:
                k, v = cache.keys, cache.values  # (B, H, S, Dh)
            else:
                if context is None:
                    raise ValueError("cross-attention needs a context (B, S, D) unless its cache is already filled")
                k, v = self._split(self.kv_proj(context), 2)  # (B, H, S, Dh) each
                if rotary is not None:
                    cos, sin = rotary
                    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
                if cache is not None:
                    k, v = cache.update(k, v)
        elif T == 1 and cache is None and not need_weights and not (self.training and self.dropout > 0):
            return self._own_value(x, mask), None
        else:
            q, k, v = self._split(self.qkv_proj(x), 3)  # (B, H, T, Dh) each
            if rotary is not None:
                cos, sin = rotary
                q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            if cache is not None:
                k, v = cache.update(k, v)  # (B, H, S, Dh), S = cached + T
        S = k.shape[2]

        if is_causal and T == 1:
            is_causal = False  # the single newest query sees every key
        if is_causal and (mask is not None or bias is not None or need_weights or T != S):
            # SDPA's is_causal aligns to the top-left corner and excludes attn_mask; build it explicitly
            mask = combine_masks(causal_mask(T, S, device=x.device), mask)
            is_causal = False

        visible: Tensor | None = None
        if mask is not None:
            # a row with no visible key would softmax over -inf only (NaN); let it see every key,
            # then zero its output
            visible = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
            mask = mask | ~visible
        attn_mask: Tensor | None = mask
        if bias is not None:
            bias = bias.to(q.dtype)
            # a mask of one column (a row mask, as masked_bias gives) hides no key of a row that sees any
            attn_mask = bias if mask is None or mask.shape[-1] == 1 else bias.masked_fill(~mask, float("-inf"))

        dropout_p = self.dropout if self.training else 0.0
        weights: Tensor | None = None
        if need_weights:
            scores = q @ k.transpose(-2, -1)  # (B, H, T, S)
            scores = scores / math.sqrt(self.d_head) if self.scale is None else scores * self.scale
            if attn_mask is not None:
                scores = (
                    scores.masked_fill(~attn_mask, float("-inf"))
                    if attn_mask.dtype == torch.bool
                    else scores + attn_mask
                )
            weights = scores.softmax(dim=-1)  # (B, H, T, S)
            if visible is not None:
                weights = weights.masked_fill(~visible, 0.0)
            out = F.dropout(weights, dropout_p, self.training) @ v  # (B, H, T, Dh)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=self.scale
            )  # (B, H, T, Dh)
        if visible is not None:
            out = out.masked_fill(~visible, 0.0)
        out = out.transpose(1, 2).reshape(B, T, self.n_heads * self.d_head)  # (B, T, H Dh)
        return self.out_proj(out), weights
