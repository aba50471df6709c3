"""The settings of a Transformer stack, declared once.

A task builds one :class:`TransformerSpec` from its flat, typed arguments (what LightningCLI turns into
flags) and hands it down: :class:`~.transformer.Encoder` and :class:`~.transformer.Decoder` read it, and
pass it on to every :class:`~.blocks.EncoderLayer` / :class:`~.blocks.DecoderLayer` (nanoGPT's
``GPTConfig`` handed to ``GPT``, then ``Block(config)``). A layer that needs one setting changed builds
its own copy with :meth:`TransformerSpec.replace`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

from .feedforward import Activation
from .positional import PositionalName

__all__ = ["NormName", "TransformerSpec"]

NormName = Literal["layer", "rms", "batch"]


@dataclass(frozen=True)
class TransformerSpec:
    """Sizes and options of an encoder or decoder stack (the paper's names).

    Args:
        d_model: model width D.
        n_heads: number of heads H; must divide ``d_model`` unless ``d_head`` is given.
        n_layers: number of layers (a single layer ignores it).
        d_ff: feed-forward hidden width; None: ``4 * d_model``.
        dropout: dropout on the input (embeddings + positions), on every sublayer output and (unless
            ``ffn_dropout`` is given) on the feed-forward hidden units.
        attn_dropout: dropout on the attention weights.
        ffn_dropout: dropout on the feed-forward hidden units; None: ``dropout`` (``torch.nn``'s
            convention; Marian's ``activation_dropout`` is another rate).
        activation: feed-forward activation, ``relu``, ``gelu``, ``gelu_tanh``, ``silu``, or the gated
            ``swiglu`` and ``geglu``.
        norm_first: Pre-LN (True) or Post-LN (False).
        final_norm: a norm after the last layer; None: ``norm_first``.
        pos_encoding: ``sinusoidal``, ``sinusoidal_halves``, ``learned``, ``rope``, ``alibi``, ``relative``
            (T5's bucketed bias) or ``none``.
        max_len: positions of the absolute encodings (``sinusoidal``/``learned``).
        bias: whether linear layers have biases.
        layer_norm_eps: epsilon of the norms.
        drop_path: stochastic-depth rate of the last layer of an encoder; layer ``i`` of ``n`` uses
            ``drop_path * i / (n - 1)`` (0 for the first). Pre-LN encoders only.
        layer_scale: initial value of LayerScale on every residual branch; None = off. Pre-LN encoders only.
        norm: ``layer`` (LayerNorm), ``rms`` (RMSNorm: T5, LLaMA) or ``batch`` (BatchNorm over all tokens of
            the batch, PatchTST's choice for time series; unpadded inputs only, encoders only).
        d_head: head dimension Dh; None: ``d_model // n_heads`` (T5's sizes set it apart).
        attn_scale: the factor of the attention dot products; None: ``1 / sqrt(Dh)`` (T5: 1).
        ffn_bias: whether the feed-forward layers have biases; None: ``bias`` (Kronos: attention with biases,
            its SwiGLU without).
        relative_buckets: buckets of ``pos_encoding: relative``.
        relative_max_distance: the distance from which ``relative`` puts all keys in one bucket.
    """

    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int | None = None
    _: KW_ONLY
    dropout: float = 0.1
    attn_dropout: float = 0.0
    ffn_dropout: float | None = None
    activation: Activation = "relu"
    norm_first: bool = True
    final_norm: bool | None = None
    pos_encoding: PositionalName = "sinusoidal"
    max_len: int = 512
    bias: bool = True
    layer_norm_eps: float = 1e-5
    drop_path: float = 0.0
    layer_scale: float | None = None
    norm: NormName = "layer"
    d_head: int | None = None
    attn_scale: float | None = None
    ffn_bias: bool | None = None
    relative_buckets: int = 32
    relative_max_distance: int = 128

    def __post_init__(self) -> None:
        if self.n_heads <= 0 or (self.d_head is None and self.d_model % self.n_heads):
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.d_head is not None and self.d_head <= 0:
            raise ValueError(f"d_head must be positive, got {self.d_head}")
        if self.n_layers < 1:
            raise ValueError(f"n_layers must be at least 1, got {self.n_layers}")
        if not 0.0 <= self.drop_path < 1.0:
            raise ValueError(f"drop_path must be in [0, 1), got {self.drop_path}")
        if (self.drop_path > 0 or self.layer_scale is not None) and not self.norm_first:
            raise ValueError("drop_path and layer_scale need a Pre-LN layer (norm_first=True)")
        if self.norm not in ("layer", "rms", "batch"):
            raise ValueError(f"norm must be 'layer', 'rms' or 'batch', got {self.norm!r}")

    @property
    def ffn_rate(self) -> float:
        """The feed-forward hidden units' dropout: ``ffn_dropout``, else ``dropout``."""
        return self.dropout if self.ffn_dropout is None else self.ffn_dropout

    @property
    def use_ffn_bias(self) -> bool:
        """Whether the feed-forward layers have biases: ``ffn_bias``, else ``bias``."""
        return self.bias if self.ffn_bias is None else self.ffn_bias

    @property
    def use_final_norm(self) -> bool:
        """Whether the stack ends with a norm: ``final_norm``, else ``norm_first``."""
        return self.norm_first if self.final_norm is None else self.final_norm

    def replace(self, **changes: Any) -> TransformerSpec:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)
