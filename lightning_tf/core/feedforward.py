"""Position-wise feed-forward network (Vaswani et al. 2017, sec. 3.3) with gated options, SwiGLU and GeGLU
(Shazeer 2020, "GLU Variants Improve Transformer"; GeGLU with the tanh approximation of GELU is T5 v1.1's
``gated-gelu``), SiLU ("swish", Ramachandran et al. 2017; the activation of Marian / OPUS-MT models) and the
tanh approximation of GELU (Hendrycks and Gimpel 2016; GPT-2's and T5's ``gelu_new``). Without biases,
``relu`` is T5's feed-forward and ``swiglu`` LLaMA's (and Kronos's)."""

from __future__ import annotations

from typing import Literal, get_args

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Activation", "FeedForward"]

Activation = Literal["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"]
#: the gated activations: ``linear1`` makes a gate and a value half
GATED = ("swiglu", "geglu")


class FeedForward(nn.Module):
    """``linear2(dropout(act(linear1(x))))``; for SwiGLU and GeGLU ``linear1`` produces gate and value halves
    and the hidden is ``silu(gate) * value`` (``gelu_tanh(gate) * value``).

    Args:
        d_model: model width D.
        d_ff: hidden width; defaults to ``4 * d_model``. (A gated activation has 1.5x the parameters of the
            others at the same ``d_ff``; set ``d_ff = 8 * d_model // 3`` to match them.)
        activation: ``relu``, ``gelu`` (exact, erf-based), ``gelu_tanh`` (its tanh approximation), ``silu``
            (``x * sigmoid(x)``), or the gated ``swiglu`` and ``geglu``.
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
        self.linear1 = nn.Linear(d_model, 2 * d_ff if activation in GATED else d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D)."""
        h = self.linear1(x)  # (B, T, d_ff) or (B, T, 2 d_ff)
        if self.activation == "swiglu":
            gate, value = h.chunk(2, dim=-1)  # (B, T, d_ff) each
            h = F.silu(gate) * value
        elif self.activation == "geglu":
            gate, value = h.chunk(2, dim=-1)  # (B, T, d_ff) each
            h = F.gelu(gate, approximate="tanh") * value
        elif self.activation == "gelu":
            h = F.gelu(h)
        elif self.activation == "gelu_tanh":
            h = F.gelu(h, approximate="tanh")
        elif self.activation == "silu":
            h = F.silu(h)
        else:
            h = F.relu(h, inplace=True)  # linear1 does not need its output for backward
        return self.linear2(self.dropout(h))  # (B, T, D)
