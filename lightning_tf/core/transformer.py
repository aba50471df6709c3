"""Encoder and decoder stacks (Vaswani et al. 2017, sec. 3.1) over the layers of :mod:`.blocks`.

Both stacks take embedded inputs ``(B, T, D)``: embeddings, patching and heads belong to the
tasks. The positional scheme is chosen by name (:class:`.positional.PositionalEncoding`).

Initialisation: every matrix of the stacks is Glorot/Xavier-uniform with zero biases and the
layer norms start at identity, as in ``torch.nn.Transformer`` and the paper's tensor2tensor
code: Glorot keeps the activation variance roughly constant through each linear map, so neither
Post-LN nor Pre-LN stacks start with exploding or vanishing residual branches.
"""

from __future__ import annotations

from torch import Tensor, nn

from .attention import KVCache, masked_bias
from .blocks import DecoderLayer, EncoderLayer, make_norm
from .masks import causal_mask, combine_masks
from .positional import PositionalEncoding
from .spec import TransformerSpec

__all__ = ["Encoder", "Decoder", "DecoderCache"]


def _positional(spec: TransformerSpec, bidirectional: bool) -> PositionalEncoding:
    return PositionalEncoding(
        spec.pos_encoding,
        spec.d_model,
        spec.n_heads,
        spec.max_len,
        d_head=spec.d_head,
        relative_buckets=spec.relative_buckets,
        relative_max_distance=spec.relative_max_distance,
        bidirectional=bidirectional,
    )


def _init_linear(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class DecoderCache:
    """Per-layer ``(self-attention, cross-attention)`` :class:`KVCache` pairs of a :class:`Decoder`.

    Args:
        n_layers: number of decoder layers.
        capacity: target positions to preallocate in each self-attention cache.
    """

    def __init__(self, n_layers: int, capacity: int = 0) -> None:
        self.layers = [(KVCache(capacity), KVCache()) for _ in range(n_layers)]

    @property
    def offset(self) -> int:
        """Number of target positions already decoded."""
        return self.layers[0][0].length

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` in every cache (beam search)."""
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            cross_cache.reorder(index)


class Encoder(nn.Module):
    """A stack of :class:`EncoderLayer` with positional encoding, input dropout and (for Pre-LN)
    a final norm.

    Args:
        spec: the sizes and options (:class:`~.spec.TransformerSpec`). ``drop_path`` is the last
            layer's rate; layer ``i`` of ``n`` uses ``drop_path * i / (n - 1)``. ``norm: batch``
            refuses a padding mask, since padded tokens would enter its statistics.
    """

    def __init__(self, spec: TransformerSpec) -> None:
        super().__init__()
        self.spec = spec
        self.norm_kind = spec.norm
        self.pos = _positional(spec, bidirectional=True)
        self.dropout = nn.Dropout(spec.dropout)
        n = spec.n_layers
        self.layers = nn.ModuleList(EncoderLayer(spec, drop_path=spec.drop_path * i / max(n - 1, 1)) for i in range(n))
        self.norm = make_norm(spec.norm, spec.d_model, spec.layer_norm_eps) if spec.use_final_norm else None
        _init_linear(self.layers)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, *, need_weights: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Encode ``x`` (B, S, D) -> (B, S, D).

        Args:
            x: embedded input.
            mask: bool key mask, True = may attend, broadcastable to ``(B, H, S, S)``
                (usually :func:`.masks.padding_mask`, ``(B, 1, 1, S)``).
            need_weights: also return each layer's attention weights ``(B, H, S, S)``.
        """
        if mask is not None and self.norm_kind == "batch":
            raise ValueError(
                "Encoder(norm='batch') cannot take a padding mask: padded tokens would enter the "
                "BatchNorm statistics; use norm='layer' for padded inputs"
            )
        S = x.shape[1]
        x = self.dropout(self.pos(x))  # (B, S, D)
        rotary, bias = self.pos.rotary(S, 0, x.device), self.pos.bias(S, S, None, x.device)
        if bias is not None and mask is not None:
            bias, mask = masked_bias(bias, mask)  # (B, H, S, S) once for all layers, and the row mask
        weights: list[Tensor] = []
        for layer in self.layers:
            x, w = layer(x, mask, bias=bias, rotary=rotary, need_weights=need_weights)
            if w is not None:
                weights.append(w)
        if self.norm is not None:
            x = self.norm(x)
        return (x, weights) if need_weights else x


class Decoder(nn.Module):
    """A stack of :class:`DecoderLayer`: causal self-attention, cross-attention to the encoder
    memory, feed-forward; positional encoding, input dropout and (for Pre-LN) a final norm.
    Incremental decoding passes a :class:`DecoderCache` (from :meth:`init_cache`) and the new
    target positions only.

    Args:
        spec: the sizes and options (:class:`~.spec.TransformerSpec`; norm ``layer`` or ``rms``, without
            ``drop_path`` or ``layer_scale``). ``pos_encoding: relative`` is the causal (unidirectional) bias.
    """

    def __init__(self, spec: TransformerSpec) -> None:
        super().__init__()
        self.spec = spec
        self.pos = _positional(spec, bidirectional=False)
        self.dropout = nn.Dropout(spec.dropout)
        self.layers = nn.ModuleList(DecoderLayer(spec) for _ in range(spec.n_layers))
        self.norm = make_norm(spec.norm, spec.d_model, spec.layer_norm_eps) if spec.use_final_norm else None
        _init_linear(self.layers)

    def init_cache(self, capacity: int = 0) -> DecoderCache:
        """An empty cache for incremental decoding, preallocating ``capacity`` target positions."""
        return DecoderCache(len(self.layers), capacity)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        *,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor], list[Tensor]]:
        """Decode ``x`` (B, T, D) against ``memory`` (B, S, D) -> (B, T, D).

        Args:
            x: embedded target; with a cache, only the positions not decoded yet.
            memory: encoder output; may be None once the cache holds the cross-attention keys.
            tgt_mask: extra bool mask on the target keys (True = may attend), broadcastable to
                ``(B, H, T, T')`` with ``T' = cache.offset + T``; causality is always added.
            memory_mask: bool mask on the memory keys, broadcastable to ``(B, H, T, S)``.
            cache: :class:`DecoderCache`, updated in place.
            need_weights: also return per-layer self- and cross-attention weights.
        """
        T = x.shape[1]
        offset = cache.offset if cache is not None else 0
        x = self.dropout(self.pos(x, offset))  # (B, T, D)
        rotary, bias = self.pos.rotary(T, offset, x.device), self.pos.bias(T, offset + T, offset, x.device)
        # the fast path hands causality to SDPA (is_causal); otherwise build the mask once for all layers
        is_causal = tgt_mask is None and bias is None and offset == 0 and not need_weights
        self_mask = None
        if not is_causal and T > 1:
            self_mask = combine_masks(causal_mask(T, offset + T, device=x.device), tgt_mask)  # (.., T, T')
        elif not is_causal:
            self_mask = tgt_mask
        if bias is not None and self_mask is not None:
            bias, self_mask = masked_bias(bias, self_mask)  # (.., T, T') once for all layers, and the row mask
        self_ws: list[Tensor] = []
        cross_ws: list[Tensor] = []
        for i, layer in enumerate(self.layers):
            x, sw, cw = layer(
                x,
                memory,
                self_mask,
                memory_mask,
                is_causal=is_causal,
                bias=bias,
                rotary=rotary,
                cache=None if cache is None else cache.layers[i],
                need_weights=need_weights,
            )
            if sw is not None and cw is not None:
                self_ws.append(sw)
                cross_ws.append(cw)
        if self.norm is not None:
            x = self.norm(x)
        return (x, self_ws, cross_ws) if need_weights else x
