"""Token embedding scaled by sqrt(d_model) and an output projection that can share its weight
(Vaswani et al. 2017, sec. 3.4; Press & Wolf 2017, "Using the Output Embedding to Improve
Language Models").

Initialisation: the table is N(0, 1/D), so after the sqrt(D) scale every embedded token has
unit variance per channel, the same scale as the sinusoidal encoding it is added to; a tied output
projection then maps a layer-normed hidden state to logits of unit variance.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["TokenEmbedding", "OutputProjection"]


class TokenEmbedding(nn.Module):
    """Token ids ``(B, T)`` -> ``sqrt(D) * E[ids]`` of shape ``(B, T, D)``.

    Args:
        vocab_size: number of tokens V.
        d_model: model width D.
        padding_idx: id whose row stays zero and receives no gradient from lookups.
        scale: multiply by sqrt(D) (set False for schemes that do not).
    """

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None, scale: bool = True) -> None:
        super().__init__()
        if padding_idx is not None and not 0 <= padding_idx < vocab_size:
            raise ValueError(f"padding_idx ({padding_idx}) must lie in [0, vocab_size={vocab_size})")
        self.vocab_size, self.d_model, self.padding_idx = vocab_size, d_model, padding_idx
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=self.d_model**-0.5)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].zero_()

    def forward(self, ids: Tensor) -> Tensor:
        """(B, T) -> (B, T, D)."""
        return F.embedding(ids, self.weight, self.padding_idx) * self.scale  # (B, T, D)


class OutputProjection(nn.Module):
    """Hidden states ``(B, T, D)`` -> logits ``(B, T, V)``, optionally tied to a :class:`TokenEmbedding`.

    Args:
        d_model: model width D.
        vocab_size: number of tokens V.
        bias: add a per-token bias.
        tie_to: share this embedding's ``(V, D)`` weight instead of owning one.
    """

    def __init__(self, d_model: int, vocab_size: int, bias: bool = False, tie_to: TokenEmbedding | None = None) -> None:
        super().__init__()
        if tie_to is not None:
            if tie_to.weight.shape != (vocab_size, d_model):
                raise ValueError(
                    f"cannot tie output projection ({vocab_size}, {d_model}) to an embedding of shape "
                    f"{tuple(tie_to.weight.shape)}"
                )
            self.weight = tie_to.weight
        else:
            self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
            nn.init.normal_(self.weight, std=d_model**-0.5)
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, V)."""
        return F.linear(x, self.weight, self.bias)  # (B, T, V)
