"""Position-wise feed-forward network (Vaswani et al. 2017, sec. 3.3) with a SwiGLU option
(Shazeer 2020, "GLU Variants Improve Transformer") and SiLU ("swish", Ramachandran et al. 2017; the
activation of Marian / OPUS-MT models)."""

from __future__ import annotations

from typing import Literal, get_args

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Activation", "FeedForward"]

Activation = Literal["relu", "gelu", "silu", "swiglu"]


class FeedForward(nn.Module):
    """``linear2(dropout(act(linear1(x))))``; for SwiGLU ``linear1`` produces gate and value halves
    and the hidden is ``silu(gate) * value``.

    Args:
        d_model: model width D.
        d_ff: hidden width; defaults to ``4 * d_model``. (SwiGLU has 1.5x the parameters of the
            others at the same ``d_ff``; set ``d_ff = 8 * d_model // 3`` to match them.)
        activation: ``relu``, ``gelu`` (exact, erf-based), ``silu`` (``x * sigmoid(x)``) or ``swiglu``.
        dropout: dropout on the hidden activations.
        bias: whether the linear layers have biases.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        activation: Activation = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if activation not in get_args(Activation):
            raise ValueError(f"unknown activation {activation!r}; expected one of {list(get_args(Activation))}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.activation = activation
        self.linear1 = nn.Linear(d_model, 2 * d_ff if activation == "swiglu" else d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D)."""
        h = self.linear1(x)  # (B, T, d_ff) or (B, T, 2 d_ff)
        if self.activation == "swiglu":
            gate, value = h.chunk(2, dim=-1)  # (B, T, d_ff) each
            h = F.silu(gate) * value
        elif self.activation == "gelu":
            h = F.gelu(h)
        elif self.activation == "silu":
            h = F.silu(h)
        else:
            h = F.relu(h, inplace=True)  # linear1 does not need its output for backward
        return self.linear2(self.dropout(h))  # (B, T, D)
