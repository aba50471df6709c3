"""The shared Transformer engine: torch only, nothing about tasks.

Every module maps ``(B, T, D)`` to ``(B, T, D)`` (plus masks and caches).

Shape glossary (used in every shape comment of the package):

====  ==========================================
B     batch
T     query / target length
S     key / source length
D     d_model
H     heads
Dh    head dimension, D / H
N     patches
P     patch length
C     channels / features
V     vocabulary
L     context length
F     forecast horizon
====  ==========================================

Masks are bool and True means "may attend", broadcastable to ``(B, H, T, S)``. A stack's settings are one
:class:`TransformerSpec` (``Encoder(spec)``, ``Decoder(spec)``), built once by the task from its flat arguments.
"""

from .attention import KVCache, MultiHeadAttention, masked_bias
from .blocks import DecoderLayer, DropPath, EncoderLayer, LayerScale, RMSNorm, TokenBatchNorm, make_norm
from .feedforward import Activation, FeedForward
from .masks import causal_mask, combine_masks, padding_mask
from .modes import evaluating
from .positional import (
    ALiBi,
    LearnedPositionalEncoding,
    PositionalEncoding,
    PositionalName,
    RelativePositionBias,
    RopePrecision,
    RotaryEmbedding,
    SinusoidalLayout,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    apply_rotary,
    relative_position_buckets,
    sincos_2d,
    sinusoidal_table,
)
from .spec import NormName, TransformerSpec
from .transformer import Decoder, DecoderCache, Encoder

__all__ = [
    "ALiBi",
    "Activation",
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "DropPath",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "KVCache",
    "LayerScale",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "NormName",
    "PositionalEncoding",
    "PositionalName",
    "RMSNorm",
    "RelativePositionBias",
    "RopePrecision",
    "RotaryEmbedding",
    "SinusoidalLayout",
    "SinusoidalPositionalEncoding",
    "TokenBatchNorm",
    "TransformerSpec",
    "alibi_slopes",
    "apply_rotary",
    "causal_mask",
    "evaluating",
    "combine_masks",
    "make_norm",
    "masked_bias",
    "padding_mask",
    "relative_position_buckets",
    "sincos_2d",
    "sinusoidal_table",
]
