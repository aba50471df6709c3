"""Boolean attention masks.

One convention everywhere in lightning-tf: a mask is a ``torch.bool`` tensor where **True means
"may attend"**, broadcastable to ``(B, H, T, S)``; exactly what ``F.scaled_dot_product_attention``
reads. (``nn.MultiheadAttention``'s ``key_padding_mask`` uses the opposite polarity; we never do.)
Masks hide *keys*; a query row that ends up with no visible key produces a zero output, never NaN
(see :class:`lightning_tf.core.attention.MultiHeadAttention`).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["causal_mask", "padding_mask", "combine_masks"]


def causal_mask(
    T: int,
    S: int | None = None,
    *,
    offset: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Lower-triangular mask: query ``i`` may attend to key ``j`` iff ``j <= offset + i``.

    Args:
        T: number of queries.
        S: number of keys; defaults to ``T``.
        offset: absolute position of the first query among the keys. Defaults to ``S - T``, the
            case of incremental decoding where the queries are the newest ``T`` of ``S`` positions.
        device: device of the returned mask.

    Returns:
        Bool tensor of shape ``(T, S)``.
    """
    S = T if S is None else S
    offset = S - T if offset is None else offset
    q_pos = torch.arange(T, device=device).unsqueeze(1) + offset  # (T, 1)
    k_pos = torch.arange(S, device=device).unsqueeze(0)  # (1, S)
    return k_pos <= q_pos  # (T, S)


def padding_mask(
    ids: Tensor | None = None,
    pad_id: int | None = None,
    *,
    lengths: Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Key mask that hides padding, from token ids and a pad id, or from sequence lengths.

    Args:
        ids: token ids of shape ``(B, S)``; used with ``pad_id``.
        pad_id: the padding token id.
        lengths: number of real (leading) positions per sequence, shape ``(B,)``; used instead
            of ``ids``/``pad_id``.
        max_len: ``S`` when built from ``lengths``; defaults to ``lengths.max()``.

    Returns:
        Bool tensor of shape ``(B, 1, 1, S)``, True at real positions.
    """
    if lengths is not None:
        if ids is not None:
            raise ValueError("padding_mask: pass either ids with pad_id, or lengths, not both")
        if lengths.dim() != 1:
            raise ValueError(f"padding_mask: lengths must have shape (B,), got {tuple(lengths.shape)}")
        longest = int(lengths.max())
        if max_len is not None and max_len < longest:
            raise ValueError(f"padding_mask: max_len ({max_len}) is shorter than the longest length ({longest})")
        S = longest if max_len is None else max_len
        keep = torch.arange(S, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)
    else:
        if ids is None or pad_id is None:
            raise ValueError("padding_mask: pass ids with pad_id, or lengths")
        if ids.dim() != 2:
            raise ValueError(f"padding_mask: ids must have shape (B, S), got {tuple(ids.shape)}")
        keep = ids != pad_id  # (B, S)
    return keep[:, None, None, :]  # (B, 1, 1, S)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of any number of masks (``None`` entries are skipped); ``None`` if all are."""
    out: Tensor | None = None
    for m in masks:
        if m is None:
            continue
        if m.dtype != torch.bool:
            raise TypeError(f"combine_masks: masks must be bool (True = may attend), got {m.dtype}")
        out = m if out is None else out & m
    return out
