"""The ``bars`` backbone: the classic time-series Transformer, each bar one token.

Each bar's C features (a K-line's returns, range, volume, calendar, ...) are embedded together by one
linear map into a token of width D, so a window is a sequence of L tokens ``(B, L, D)``; the shared
core's encoder gives them positions (sinusoidal, learned, RoPE or ALiBi, :mod:`lightning_tf.core.positional`)
and attends across time, optionally causally (bar t attends to bars 0..t only). The representation is
the L encoded bars, flattened, read by a direct multi-horizon head: every feature of every bar reaches
every target, so this backbone mixes channels by construction. (Vaswani et al. 2017's encoder over
time steps, as in the time-series Transformers before patching: Zerveas et al. 2021, "A Transformer-based
Framework for Multivariate Time Series Representation Learning", and the encoders of Informer and
Autoformer, without their decoders.)
"""

from __future__ import annotations

from torch import Tensor, nn

from lightning_tf.core import Encoder, TransformerSpec, causal_mask

__all__ = ["BarBackbone"]


class BarBackbone(nn.Module):
    """Each bar embedded as one token, encoded across time.

    Args:
        n_features: input channels C (the features of a bar).
        context_len: context length L (bars): the number of tokens.
        spec: the encoder's settings; its ``max_len`` is set to ``context_len``.
        causal: bar t attends to bars 0..t only (a causal mask); else to the whole window.
    """

    per_channel = False  # one representation of the whole window

    def __init__(self, n_features: int, context_len: int, spec: TransformerSpec, causal: bool = False) -> None:
        super().__init__()
        if causal and spec.norm == "batch":
            raise ValueError(
                "causal: true needs norm: layer; BatchNorm's training statistics mix every bar of the "
                "window, the later ones included"
            )
        self.context_len, self.causal = context_len, causal
        self.width = context_len * spec.d_model  # R = L * D
        self.embed = nn.Linear(n_features, spec.d_model)  # a bar's features -> its token
        self.encoder = Encoder(spec.replace(max_len=context_len))

    def encode(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """The encoded bars ``(B, L, D)`` of the normalised window ``x`` (B, L, C) and, with ``need_weights``,
        each layer's attention ``(B, H, L, L)``."""
        h = self.embed(x)  # (B, L, D): a bar's features are one token
        mask = causal_mask(x.shape[1], device=x.device) if self.causal else None  # (L, L), True = may attend
        if need_weights:
            h, weights = self.encoder(h, mask, need_weights=True)  # (B, L, D), n_layers x (B, H, L, L)
            return h, weights
        return self.encoder(h, mask), []  # (B, L, D)

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """The window's representation ``(B, 1, L*D)`` of the normalised window ``x`` (B, L, C) and, with
        ``need_weights``, each layer's attention across the bars ``(B, 1, H, L, L)``."""
        h, weights = self.encode(x, need_weights)  # (B, L, D)
        return h.flatten(1)[:, None], [w[:, None] for w in weights]  # (B, 1, L*D), n_layers x (B, 1, H, L, L)
