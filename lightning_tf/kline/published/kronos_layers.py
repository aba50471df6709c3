"""The pieces of Kronos (Shi et al. 2025, "Kronos: A Foundation Model for the Language of Financial Markets";
github.com/shiyu-coder/Kronos) around the shared core's blocks.

Every Transformer block of Kronos, in its tokenizer and in its model, is the core's Pre-LN
:class:`~lightning_tf.core.EncoderLayer` with RMSNorm, causal self-attention with biases and RoPE, and a
SwiGLU feed-forward without biases (:func:`block_spec`); RoPE's angles are computed in float32 as the
reference computes them. What is Kronos's own lives here: the embedding of a token pair, the calendar
embedding and the dependency-aware layer that conditions the fine token on the coarse one.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from lightning_tf.core import (
    EncoderLayer,
    KVCache,
    MultiHeadAttention,
    RMSNorm,
    RotaryEmbedding,
    TransformerSpec,
    sinusoidal_table,
)

__all__ = [
    "CALENDAR_FIELDS",
    "DependencyLayer",
    "HierarchicalEmbedding",
    "TemporalEmbedding",
    "block_spec",
    "make_blocks",
    "run_blocks",
]

#: the calendar fields of a bar's time stamp, in the order of its last axis, and how many values each takes
CALENDAR_FIELDS = (("minute", 60), ("hour", 24), ("weekday", 7), ("day", 32), ("month", 13))
# the reference sums the five embeddings in this order; float addition is not associative
_SUM_ORDER = ("hour", "weekday", "day", "month", "minute")


def block_spec(d_model: int, n_heads: int, d_ff: int, dropout: float, attn_dropout: float) -> TransformerSpec:
    """The core's settings of a Kronos block: Pre-LN, RMSNorm (eps 1e-5), attention with biases, RoPE, SwiGLU
    without biases, one dropout rate on both residual branches and none on the feed-forward's hidden units."""
    return TransformerSpec(
        d_model,
        n_heads,
        1,
        d_ff,
        dropout=dropout,
        attn_dropout=attn_dropout,
        ffn_dropout=0.0,
        activation="swiglu",
        norm_first=True,
        pos_encoding="rope",
        bias=True,
        ffn_bias=False,
        norm="rms",
        layer_norm_eps=1e-5,
    )


def run_blocks(
    blocks: nn.ModuleList,
    x: Tensor,
    rotary: tuple[Tensor, Tensor],
    caches: list[KVCache] | None = None,
) -> Tensor:
    """``x`` (B, T, D) through causal ``blocks`` -> (B, T, D); with ``caches`` (one per block) the T newest
    positions after the cached ones."""
    for i, block in enumerate(blocks):
        x, _ = block(x, is_causal=True, rotary=rotary, cache=None if caches is None else caches[i])
    return x


class HierarchicalEmbedding(nn.Module):
    """A token pair (coarse s1, fine s2) -> one vector: each id's embedding scaled by sqrt(D), the two
    concatenated and projected back to D.

    Args:
        s1_bits: bits of the coarse token (vocabulary ``2 ** s1_bits``).
        s2_bits: bits of the fine token.
        d_model: width D.
    """

    def __init__(self, s1_bits: int, s2_bits: int, d_model: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.emb_s1 = nn.Embedding(2**s1_bits, d_model)
        self.emb_s2 = nn.Embedding(2**s2_bits, d_model)
        self.fusion_proj = nn.Linear(2 * d_model, d_model)
        nn.init.normal_(self.emb_s1.weight, std=d_model**-0.5)
        nn.init.normal_(self.emb_s2.weight, std=d_model**-0.5)

    def forward(self, s1: Tensor, s2: Tensor) -> Tensor:
        """Ids ``(B, T)`` each -> ``(B, T, D)``."""
        scale = math.sqrt(self.d_model)
        pair = torch.cat((self.emb_s1(s1) * scale, self.emb_s2(s2) * scale), dim=-1)  # (B, T, 2D)
        return self.fusion_proj(pair)  # (B, T, D)


class TemporalEmbedding(nn.Module):
    """The sum of five calendar embeddings of a bar's time stamp: minute, hour, weekday, day of the month and
    month (:data:`CALENDAR_FIELDS`). Learned tables (``learned``), or fixed sinusoidal ones that do not train.

    Args:
        d_model: width D.
        learned: learned tables (the published models) or fixed sinusoidal ones.
    """

    def __init__(self, d_model: int, learned: bool = True) -> None:
        super().__init__()
        self.learned = learned
        for name, size in CALENDAR_FIELDS:
            table = nn.Embedding(size, d_model)
            if not learned:
                table.weight.data.copy_(sinusoidal_table(size, d_model))
                table.weight.requires_grad_(False)
            setattr(self, name, table)

    def forward(self, stamp: Tensor) -> Tensor:
        """Stamps ``(B, T, 5)`` (minute, hour, weekday, day, month; any number type) -> ``(B, T, D)``."""
        stamp = stamp.long()
        index = {name: i for i, (name, _) in enumerate(CALENDAR_FIELDS)}
        out = None
        for name in _SUM_ORDER:
            e = getattr(self, name)(stamp[..., index[name]])  # (B, T, D)
            out = e if out is None else out + e
        assert out is not None
        return out


class DependencyLayer(nn.Module):
    """Kronos's dependency-aware layer: the embedding of the coarse token attends to the model's hidden states,
    and ``norm(hidden + attention)`` goes to the fine token's head, so the fine token is drawn knowing the coarse
    one.

    The reference's attention here is causal while training and sees every position otherwise, and it rotates
    queries and keys by RoPE at the queries' positions; so during sampling, where the one query is the newest
    coarse token, no position is rotated (position 0) and every key is seen. :meth:`forward` and :meth:`step`
    keep both behaviours.

    Args:
        d_model: width D.
        n_heads: heads of its attention (4 in the reference, whatever the model's).
        dropout: dropout on the attention output.
        attn_dropout: dropout on the attention weights.
    """

    def __init__(self, d_model: int, n_heads: int = 4, dropout: float = 0.0, attn_dropout: float = 0.0) -> None:
        super().__init__()
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=attn_dropout, cross_attention=True)
        self.dropout = nn.Dropout(dropout)
        self.norm = RMSNorm(d_model, eps=1e-5)
        # its own angles, of its own head dimension (the model's blocks may have other heads), as the reference's
        self.rope = RotaryEmbedding(d_model // n_heads, precision="float32")

    def forward(self, hidden: Tensor, sibling: Tensor, *, causal: bool, rotate: bool = False) -> Tensor:
        """Queries ``sibling`` (B, T, D) on keys ``hidden`` (B, S, D) -> ``(B, T, D)``, the residual taken from
        the last T rows of ``hidden`` (T = S when training on whole sequences, T = 1 for the newest token).

        Args:
            hidden: the model's final hidden states.
            sibling: the embeddings of the coarse tokens.
            causal: query t sees keys up to t (T == S).
            rotate: rotate queries and keys by RoPE at the queries' positions ``0 .. T - 1`` (T == S), as the
                reference does on whole sequences; False: no rotation.
        """
        T = sibling.shape[1]
        rotary = self.rope(T, 0, hidden.device) if rotate else None  # (T, Dh/2) each
        a, _ = self.cross_attn(sibling, hidden, is_causal=causal, rotary=rotary)  # (B, T, D)
        return self.norm(hidden[:, -T:] + self.dropout(a))  # (B, T, D)

    def remember(self, hidden: Tensor, cache: KVCache) -> None:
        """Append the keys and values of the model's newest hidden states ``(B, T, D)`` to ``cache``, for
        :meth:`step` (unrotated, as sampling uses them)."""
        cache.update(*self.cross_attn.project_kv(hidden))

    def step(self, last: Tensor, sibling: Tensor, cache: KVCache) -> Tensor:
        """One sampling step: the newest coarse token's embedding ``sibling`` (B, 1, D) attends, unrotated, to
        every hidden state in ``cache`` (:meth:`remember`); the residual is the newest hidden state ``last``
        (B, 1, D) -> ``(B, 1, D)``. Equals :meth:`forward` with the whole ``hidden`` and ``causal=False``."""
        a, _ = self.cross_attn(sibling, cache=cache)  # (B, 1, D)
        return self.norm(last + self.dropout(a))  # (B, 1, D)


def make_blocks(spec: TransformerSpec, n: int) -> nn.ModuleList:
    """``n`` Kronos blocks of ``spec`` (:func:`block_spec`)."""
    return nn.ModuleList(EncoderLayer(spec) for _ in range(n))
