"""Kronos's model: a decoder-only Transformer over the tokenizer's token pairs.

Each position embeds its pair (coarse s1, fine s2) and its calendar stamp; the backbone is a stack of the
core's causal blocks (:mod:`.kronos_layers`, ``blocks.{i}``) and a final RMSNorm. Two heads read it: the coarse
head gives the next s1's logits; the fine head gives the next s2's logits from the dependency-aware layer, where
the chosen s1's embedding attends to the hidden states. Parameters are named so that the backbone
(``embed``, ``time_embed``, ``blocks``, ``norm``) and the heads (``dep_layer``, ``head``) split by prefix, and
:meth:`KronosModel.layer_depth` gives each its depth for layer-wise learning rates.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_tf.core import KVCache, RMSNorm, RotaryEmbedding

from .configs import KronosConfig
from .kronos_layers import (
    DependencyLayer,
    HierarchicalEmbedding,
    TemporalEmbedding,
    block_spec,
    make_blocks,
    run_blocks,
)

__all__ = ["DualHead", "KronosModel", "token_loss"]


class DualHead(nn.Module):
    """The two output projections: hidden states -> coarse logits, the dependency layer's output -> fine logits.

    Args:
        s1_bits: bits of the coarse token.
        s2_bits: bits of the fine token.
        d_model: width D.
    """

    def __init__(self, s1_bits: int, s2_bits: int, d_model: int) -> None:
        super().__init__()
        self.proj_s1 = nn.Linear(d_model, 2**s1_bits)
        self.proj_s2 = nn.Linear(d_model, 2**s2_bits)


class KronosModel(nn.Module):
    """Token pairs (and calendar stamps) -> the next pair's logits.

    Args:
        config: the sizes (:class:`KronosConfig`; :meth:`KronosConfig.from_reference` reads the reference's
            config.json).
    """

    def __init__(self, config: KronosConfig) -> None:
        super().__init__()
        self.config = config
        D = config.d_model
        self.embed = HierarchicalEmbedding(config.s1_bits, config.s2_bits, D)
        self.time_embed = TemporalEmbedding(D, config.learned_calendar)
        self.token_dropout = nn.Dropout(config.token_dropout)
        spec = block_spec(D, config.n_heads, config.d_ff, config.dropout, config.attn_dropout)
        self.blocks = make_blocks(spec, config.n_layers)
        self.norm = RMSNorm(D, eps=1e-5)
        self.dep_layer = DependencyLayer(D, config.dependency_heads)
        self.head = DualHead(config.s1_bits, config.s2_bits, D)
        self.rope = RotaryEmbedding(D // config.n_heads, precision="float32")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The reference's initialisation: Xavier-normal matrices, zero biases, embeddings N(0, 1/D), unit norms
        (fixed calendar tables stay as they are)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding) and m.weight.requires_grad:
                nn.init.normal_(m.weight, std=self.config.d_model**-0.5)

    # ------------------------------------------------------------------------------------------ backbone

    def init_cache(self, capacity: int = 0) -> list[KVCache]:
        """Empty key/value caches, one per block, for :meth:`hidden`'s incremental decoding, each preallocating
        ``capacity`` positions."""
        return [KVCache(capacity) for _ in self.blocks]

    def hidden(
        self, s1: Tensor, s2: Tensor, stamp: Tensor | None = None, *, cache: list[KVCache] | None = None
    ) -> Tensor:
        """The backbone: token pairs ``(B, T)`` each and stamps ``(B, T, 5)`` -> final hidden states ``(B, T, D)``.

        With ``cache`` (:meth:`init_cache`, updated in place) the T positions follow the cached ones.
        """
        x = self.embed(s1, s2)  # (B, T, D)
        if stamp is not None:
            x = x + self.time_embed(stamp)
        x = self.token_dropout(x)
        offset = cache[0].length if cache is not None else 0
        x = run_blocks(self.blocks, x, self.rope(x.shape[1], offset, x.device), cache)
        return self.norm(x)  # (B, T, D)

    # ------------------------------------------------------------------------------------------ heads

    def s1_logits(self, hidden: Tensor) -> Tensor:
        """Hidden states ``(B, T, D)`` -> the next coarse token's logits ``(B, T, 2^s1_bits)``."""
        return self.head.proj_s1(hidden)

    def s2_logits(self, hidden: Tensor, s1: Tensor, *, causal: bool) -> Tensor:
        """The next fine token's logits ``(B, T, 2^s2_bits)`` given the next coarse tokens ``s1`` (B, T) and the
        hidden states ``(B, T, D)``; ``causal`` as the reference trains (see :class:`.DependencyLayer`)."""
        # rotated at the queries' positions, given to the keys too
        x2 = self.dep_layer(hidden, self.embed.emb_s1(s1), causal=causal, rotate=True)  # (B, T, D)
        return self.head.proj_s2(x2)

    def forward(
        self,
        s1: Tensor,
        s2: Tensor,
        stamp: Tensor | None = None,
        s1_targets: Tensor | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Both heads' logits at every position, as the reference trains.

        Args:
            s1: coarse tokens ``(B, T)``.
            s2: fine tokens ``(B, T)``.
            stamp: calendar stamps ``(B, T, 5)`` (minute, hour, weekday, day, month), or None.
            s1_targets: the next coarse tokens ``(B, T)`` that condition the fine head (teacher forcing); None:
                drawn from the coarse head's distribution, as the reference's training does by default.
            generator: the random generator of those draws; None: torch's global one.

        Returns:
            Coarse logits ``(B, T, 2^s1_bits)`` and fine logits ``(B, T, 2^s2_bits)``. The dependency layer is
            causal in training mode only (the reference's choice), so in eval mode the fine logits at t also see
            the hidden states after t.
        """
        h = self.hidden(s1, s2, stamp)  # (B, T, D)
        logits1 = self.s1_logits(h)  # (B, T, V1)
        if s1_targets is None:
            probs = F.softmax(logits1.detach(), dim=-1)
            s1_targets = torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=generator).view(s1.shape)
        return logits1, self.s2_logits(h, s1_targets, causal=self.training)

    # ------------------------------------------------------------------------------------------ fine-tuning

    @property
    def n_depths(self) -> int:
        """Depths of :meth:`layer_depth`: the embeddings (0), each block, then the heads."""
        return len(self.blocks) + 1

    def layer_depth(self, name: str) -> int:
        """A parameter's depth for layer-wise learning-rate decay: 0 for the embeddings, ``i + 1`` for block
        ``i``, ``n_layers + 1`` for the final norm and the heads."""
        if name.startswith(("embed.", "time_embed.")):
            return 0
        if name.startswith("blocks."):
            return int(name.split(".")[1]) + 1
        return len(self.blocks) + 1


def token_loss(s1_logits: Tensor, s2_logits: Tensor, s1_next: Tensor, s2_next: Tensor) -> Tensor:
    """The reference's training loss: the mean of the coarse and the fine cross-entropies against the next
    tokens (logits ``(B, T, V)``, targets ``(B, T)``)."""
    ce1 = F.cross_entropy(s1_logits.reshape(-1, s1_logits.shape[-1]), s1_next.reshape(-1))
    ce2 = F.cross_entropy(s2_logits.reshape(-1, s2_logits.shape[-1]), s2_next.reshape(-1))
    return (ce1 + ce2) / 2
