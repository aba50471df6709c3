"""Positional encodings, selectable by name.

* ``sinusoidal``: the fixed table of Vaswani et al. 2017, "Attention Is All You Need", sec. 3.5:
  ``PE(pos, 2i) = sin(pos / 10000^(2i/D))``, ``PE(pos, 2i+1) = cos(pos / 10000^(2i/D))``.
* ``sinusoidal_halves``: the same frequencies with the sines in the first half of the vector and the
  cosines in the second, ``PE(pos, i) = sin(...)``, ``PE(pos, D/2 + i) = cos(...)``: the layout of
  tensor2tensor and of Marian (OPUS-MT) models.
* ``learned``: a trained ``(max_len, D)`` table (BERT, GPT-2, ViT).
* ``rope``: rotary position embedding, Su et al. 2021, "RoFormer"; rotates queries and keys
  so that their dot product depends only on the relative position.
* ``alibi``: attention with linear biases, Press et al. 2022, "Train Short, Test Long";
  adds ``-m_h * |i - j|`` to the scores of head ``h``.
* ``relative``: T5's bucketed relative position bias, Raffel et al. 2020, "Exploring the Limits of Transfer
  Learning with a Unified Text-to-Text Transformer", sec. 2.1: a learned scalar per head and bucket of the
  distance ``j - i``, exact for short distances and log-spaced up to ``max_distance``.
* 2-D sin-cos for patch grids (MAE, He et al. 2021), :func:`sincos_2d`.

The absolute ones (``sinusoidal``, ``learned``) are added to the input of a stack; the relative
ones (``rope``, ``alibi``, ``relative``) act inside self-attention. :class:`PositionalEncoding` puts all of them
behind one interface so the stacks need not know which is in use.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor, nn

__all__ = [
    "PositionalName",
    "SinusoidalLayout",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
    "RotaryEmbedding",
    "apply_rotary",
    "ALiBi",
    "alibi_slopes",
    "RelativePositionBias",
    "relative_position_buckets",
    "RopePrecision",
    "sinusoidal_table",
    "sincos_2d",
    "PositionalEncoding",
]

PositionalName = Literal["sinusoidal", "sinusoidal_halves", "learned", "rope", "alibi", "relative", "none"]
SinusoidalLayout = Literal["interleaved", "halves"]
RopePrecision = Literal["float64", "float32"]


def sinusoidal_table(max_len: int, d_model: int, layout: SinusoidalLayout = "interleaved") -> Tensor:
    """The ``(max_len, D)`` sinusoidal table, computed in float64 and returned as float32: sines at the
    even and cosines at the odd channels (``interleaved``, the paper's), or sines in the first half and
    cosines in the second (``halves``)."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (max_len, D/2)
    if layout == "halves":
        return torch.cat((torch.sin(angle), torch.cos(angle)), dim=1).float()  # (max_len, D)
    if layout != "interleaved":
        raise ValueError(f"sinusoidal layout must be 'interleaved' or 'halves', got {layout!r}")
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


def _check_length(kind: str, T: int, offset: int, max_len: int) -> None:
    if offset + T > max_len:
        raise ValueError(
            f"{kind} positional encoding: positions up to {offset + T} requested "
            f"(length {T}, offset {offset}) but max_len is {max_len}; raise max_len"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to ``(B, T, D)`` inputs.

    Args:
        d_model: model width D (even).
        max_len: number of positions in the table.
        layout: ``interleaved`` (the paper's) or ``halves`` (sines, then cosines; see :func:`sinusoidal_table`).
    """

    def __init__(self, d_model: int, max_len: int = 512, layout: SinusoidalLayout = "interleaved") -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"sinusoidal positional encoding needs an even d_model, got {d_model}")
        self.max_len = max_len
        # non-persistent: derived from (max_len, D), so it never bloats or constrains checkpoints
        self.register_buffer("table", sinusoidal_table(max_len, d_model, layout), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """(B, T, D) -> (B, T, D), positions ``offset .. offset + T - 1``."""
        T = x.shape[1]
        _check_length("sinusoidal", T, offset, self.max_len)
        return x + self.table[offset : offset + T].to(x.dtype)  # (B, T, D)


class LearnedPositionalEncoding(nn.Module):
    """Adds a learned ``(max_len, D)`` table to ``(B, T, D)`` inputs (initialised N(0, 0.02)).

    Args:
        d_model: model width D.
        max_len: number of positions in the table.
    """

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """(B, T, D) -> (B, T, D), positions ``offset .. offset + T - 1``."""
        T = x.shape[1]
        _check_length("learned", T, offset, self.max_len)
        return x + self.weight[offset : offset + T].to(x.dtype)  # (B, T, D)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` of shape ``(B, H, T, Dh)`` by angles given as ``cos``/``sin`` of shape ``(T, Dh/2)``.

    The head dimension is split in halves ``(x1, x2)``; pair ``(x1[k], x2[k])`` is rotated by the
    angle of frequency ``k`` (the GPT-NeoX layout of RoFormer's rotation).
    """
    x1, x2 = x.chunk(2, dim=-1)  # (B, H, T, Dh/2) each
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, T, Dh)


class RotaryEmbedding(nn.Module):
    """Angles for rotary position embedding; the table grows on demand (RoPE has no fixed max_len).

    The angles are kept as float32 outside the module's state, so neither a checkpoint nor a cast of the
    module to 16 bits (``.half()``, ``precision="bf16-true"``) changes them.

    Args:
        d_head: head dimension Dh (even).
        base: frequency base; frequency k is ``base^(-2k/Dh)``.
        precision: ``float64``: the angles are computed in float64 and rounded once; ``float32``: frequencies,
            positions and their products in float32, as most reference code computes them. The two differ by
            up to about 1e-4 at position 2048 (a float32 angle near 2048 rad is only known to 1.2e-4); a model
            trained with float32 angles (Kronos) sees exactly its own angles with ``float32``.
    """

    def __init__(self, d_head: int, base: float = 10000.0, precision: RopePrecision = "float64") -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"RoPE needs an even head dimension, got d_head={d_head}")
        if precision not in get_args(RopePrecision):
            raise ValueError(f"RoPE precision must be one of {list(get_args(RopePrecision))}, got {precision!r}")
        self.d_head, self.base, self.precision = d_head, base, precision
        self._cos: Tensor | None = None
        self._sin: Tensor | None = None

    def _angles(self, n: int) -> Tensor:
        """``(n, Dh/2)`` angles of positions ``0 .. n - 1``."""
        if self.precision == "float32":
            inv_freq = 1.0 / (self.base ** (torch.arange(0, self.d_head, 2).float() / self.d_head))  # (Dh/2,)
            return torch.outer(torch.arange(n).float(), inv_freq)  # (n, Dh/2)
        inv_freq = self.base ** (-torch.arange(0, self.d_head, 2, dtype=torch.float64) / self.d_head)  # (Dh/2,)
        return torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)  # (n, Dh/2)

    def forward(self, T: int, offset: int = 0, device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
        """cos and sin of shape ``(T, Dh/2)`` for positions ``offset .. offset + T - 1``."""
        end = offset + T
        device = torch.device("cpu") if device is None else torch.device(device)
        if self._cos is None or self._cos.shape[0] < end or self._cos.device != device:
            n = max(end, 2 * (self._cos.shape[0] if self._cos is not None else 0), 256)
            # plain tensors even when first asked under inference_mode (a validation before training): an
            # inference tensor cannot enter a computation autograd records
            with torch.inference_mode(False):
                angle = self._angles(n)
                self._cos, self._sin = angle.cos().float().to(device), angle.sin().float().to(device)
        assert self._sin is not None
        return self._cos[offset:end], self._sin[offset:end]  # (T, Dh/2) each


def alibi_slopes(n_heads: int) -> Tensor:
    """Head slopes of ALiBi: the geometric sequence ``2^(-8/n), 2^(-16/n), ...`` for ``n`` a power
    of two; otherwise the slopes of the nearest lower power of two followed by every other slope
    of twice that count, as in the paper's reference code."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_heads & (n_heads - 1) == 0:
        slopes = power_of_two(n_heads)
    else:
        lower = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_two(lower) + power_of_two(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBi(nn.Module):
    """Additive attention bias ``-m_h * |i - j|`` between query position i and key position j.

    In a causal layer the keys ``j > i`` are masked anyway, so this is the paper's bias; in a
    bidirectional layer it is its symmetric extension.

    Args:
        n_heads: number of heads H.
    """

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        # kept off the module's state (like RoPE's angles) so a 16-bit cast cannot round the slopes
        self._slopes = alibi_slopes(n_heads)  # (H,)

    def forward(self, T: int, S: int, offset: int | None = None, device: torch.device | str | None = None) -> Tensor:
        """Bias of shape ``(H, T, S)`` on ``device``; the first query sits at key position ``offset``
        (default ``S - T``, the newest T of S positions)."""
        offset = S - T if offset is None else offset
        q_pos = torch.arange(T, device=device).unsqueeze(1) + offset  # (T, 1)
        k_pos = torch.arange(S, device=device).unsqueeze(0)  # (1, S)
        distance = (q_pos - k_pos).abs().float()  # (T, S)
        return -self._slopes.to(device)[:, None, None] * distance  # (H, T, S)


def relative_position_buckets(relative: Tensor, n_buckets: int, max_distance: int, bidirectional: bool) -> Tensor:
    """T5's bucket of each relative position ``key - query`` (integer tensor of any shape, same shape out).

    Bidirectional: half of the buckets hold keys after the query, half keys at or before it. In each half,
    the first half of the buckets are the distances ``0 .. n/2 - 1`` one by one and the rest are log-spaced up
    to ``max_distance``; farther keys share the last bucket. Unidirectional (causal): keys after the query all
    fall in bucket 0 and every bucket serves the distances backwards.
    """
    buckets = torch.zeros_like(relative)
    if bidirectional:
        n_buckets //= 2
        buckets = buckets + (relative > 0).long() * n_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    exact = n_buckets // 2
    # the float expression is the reference's, operation for operation: a bucket edge such as distance 16 of
    # 8 exact buckets lands on an integer, and another rounding there would move it to the neighbouring bucket
    far = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact) * (n_buckets - exact)).to(
        torch.long
    )
    far = torch.minimum(far, torch.full_like(far, n_buckets - 1))
    return buckets + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """T5's learned bias of the attention scores by bucketed relative position, one scalar per head and bucket.

    Computed once per stack and shared by its layers, as ALiBi is (T5 keeps the table in the first layer).

    Args:
        n_heads: number of heads H.
        n_buckets: number of buckets (T5: 32).
        max_distance: the distance from which all keys share the last bucket (T5: 128).
        bidirectional: an encoder's bias (keys on both sides); False for a causal decoder.
    """

    def __init__(self, n_heads: int, n_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True) -> None:
        super().__init__()
        smallest = 4 if bidirectional else 2
        if n_buckets < smallest:
            raise ValueError(f"relative position bias needs at least {smallest} buckets, got {n_buckets}")
        exact = (n_buckets // 2 if bidirectional else n_buckets) // 2
        if max_distance <= exact:
            raise ValueError(
                f"relative position bias: max_distance ({max_distance}) must exceed the {exact} exact buckets"
            )
        self.n_buckets, self.max_distance, self.bidirectional = n_buckets, max_distance, bidirectional
        self.embedding = nn.Embedding(n_buckets, n_heads)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, T: int, S: int, offset: int | None = None, device: torch.device | str | None = None) -> Tensor:
        """Bias of shape ``(H, T, S)``; the first query sits at key position ``offset`` (default ``S - T``)."""
        offset = S - T if offset is None else offset
        device = self.embedding.weight.device if device is None else device
        q_pos = torch.arange(T, device=device).unsqueeze(1) + offset  # (T, 1)
        k_pos = torch.arange(S, device=device).unsqueeze(0)  # (1, S)
        buckets = relative_position_buckets(k_pos - q_pos, self.n_buckets, self.max_distance, self.bidirectional)
        return self.embedding(buckets).permute(2, 0, 1)  # (T, S, H) -> (H, T, S)

    def extra_repr(self) -> str:
        return f"n_buckets={self.n_buckets}, max_distance={self.max_distance}, bidirectional={self.bidirectional}"


def sincos_2d(d_model: int, grid_h: int, grid_w: int, temperature: float = 10000.0) -> Tensor:
    """Fixed 2-D sin-cos encoding of a ``grid_h x grid_w`` patch grid, shape ``(grid_h * grid_w, D)``,
    row-major like the patch sequence. A quarter of the channels each holds ``sin(y)``, ``cos(y)``,
    ``sin(x)``, ``cos(x)`` at the 1-D sinusoidal frequencies (MAE)."""
    if d_model % 4:
        raise ValueError(f"2-D sin-cos positional encoding needs d_model divisible by 4, got {d_model}")
    quarter = d_model // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64) / quarter)  # (D/4,)
    ys, xs = torch.meshgrid(
        torch.arange(grid_h, dtype=torch.float64), torch.arange(grid_w, dtype=torch.float64), indexing="ij"
    )  # (gh, gw) each
    y = ys.reshape(-1, 1) * omega  # (N, D/4)
    x = xs.reshape(-1, 1) * omega  # (N, D/4)
    return torch.cat((y.sin(), y.cos(), x.sin(), x.cos()), dim=1).float()  # (N, D)


class PositionalEncoding(nn.Module):
    """Every scheme behind one interface, chosen by name.

    ``forward`` adds absolute encodings to the stack input (identity for the relative schemes);
    ``rotary`` and ``bias`` give what self-attention needs for ``rope``, and for ``alibi`` and ``relative``
    (``None`` for the others).

    Args:
        name: one of ``sinusoidal``, ``sinusoidal_halves``, ``learned``, ``rope``, ``alibi``, ``relative``, ``none``.
        d_model: model width D.
        n_heads: number of heads H (sets the slopes for ALiBi and the bias rows of ``relative``).
        max_len: number of positions of the absolute tables.
        d_head: head dimension Dh for RoPE; None: ``d_model // n_heads``.
        relative_buckets: buckets of ``relative``.
        relative_max_distance: the distance from which ``relative`` puts all keys in one bucket.
        bidirectional: ``relative`` for keys on both sides (an encoder); False for a causal decoder.
    """

    def __init__(
        self,
        name: PositionalName,
        d_model: int,
        n_heads: int,
        max_len: int = 512,
        *,
        d_head: int | None = None,
        relative_buckets: int = 32,
        relative_max_distance: int = 128,
        bidirectional: bool = True,
    ) -> None:
        super().__init__()
        if n_heads <= 0 or (d_head is None and d_model % n_heads):
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if name not in get_args(PositionalName):
            raise ValueError(f"unknown pos_encoding {name!r}; expected one of {list(get_args(PositionalName))}")
        self.name = name
        self.absolute: nn.Module | None = None
        self.rope: RotaryEmbedding | None = None
        self.alibi: ALiBi | None = None
        self.relative: RelativePositionBias | None = None
        if name in ("sinusoidal", "sinusoidal_halves"):
            layout = "halves" if name == "sinusoidal_halves" else "interleaved"
            self.absolute = SinusoidalPositionalEncoding(d_model, max_len, layout)
        elif name == "learned":
            self.absolute = LearnedPositionalEncoding(d_model, max_len)
        elif name == "rope":
            head = d_model // n_heads if d_head is None else d_head
            if head % 2:
                raise ValueError(
                    f"pos_encoding 'rope' needs an even head dimension; d_model ({d_model}) / "
                    f"n_heads ({n_heads}) = {head}"
                    if d_head is None
                    else f"pos_encoding 'rope' needs an even head dimension, got d_head={d_head}"
                )
            self.rope = RotaryEmbedding(head)
        elif name == "alibi":
            self.alibi = ALiBi(n_heads)
        elif name == "relative":
            self.relative = RelativePositionBias(n_heads, relative_buckets, relative_max_distance, bidirectional)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """(B, T, D) -> (B, T, D): adds the absolute encoding of positions ``offset ..``."""
        return x if self.absolute is None else self.absolute(x, offset)

    def rotary(self, T: int, offset: int = 0, device: torch.device | str | None = None) -> tuple[Tensor, Tensor] | None:
        """RoPE angles ``(cos, sin)``, each ``(T, Dh/2)`` on ``device``, or None."""
        return None if self.rope is None else self.rope(T, offset, device)

    def bias(
        self, T: int, S: int, offset: int | None = None, device: torch.device | str | None = None
    ) -> Tensor | None:
        """ALiBi's or the relative scheme's bias ``(H, T, S)`` on ``device``, or None."""
        if self.alibi is not None:
            return self.alibi(T, S, offset, device)
        if self.relative is not None:
            return self.relative(T, S, offset, device)
        return None
