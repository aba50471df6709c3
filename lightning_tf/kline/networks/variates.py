"""The ``variates`` backbone: iTransformer's tokens, each channel's whole window one token.

Liu et al. 2024, "iTransformer: Inverted Transformers Are Effective for Time Series Forecasting" (ICLR):
each channel's (normalised) look-back of L bars is embedded by one linear map into a token of width D,
so a window of C channels is a sequence of C tokens; the shared core's encoder attends across the
channels (the multivariate correlations) while its feed-forward network acts on each channel's token
alone; a linear projection of each token forecasts that channel's horizon. The channels have no order,
so there is no positional encoding: permuting the channels permutes the tokens and their outputs.

The layout follows the reference ``model/iTransformer.py``: ``DataEmbedding_inverted`` (a linear map of
the look-back, then dropout), an encoder of Post-LN layers with a final LayerNorm, the ``projector``
(here the forecaster's head, shared by the channels).
"""

from __future__ import annotations

from torch import Tensor, nn

from lightning_tf.core import Activation, Encoder, NormName

__all__ = ["VariateBackbone"]


class VariateBackbone(nn.Module):
    """Each channel's window embedded as one token, encoded across the channels.

    Args:
        context_len: context length L (bars): the width of each channel's embedding.
        d_model: model width D.
        n_heads: attention heads H.
        n_layers: encoder layers.
        d_ff: feed-forward width; defaults to ``4 * d_model``.
        dropout: dropout on the embedded tokens, the sublayers and in the feed-forward network.
        attn_dropout: dropout on the attention weights.
        activation: the feed-forward activation (iTransformer's is ``gelu``).
        norm_first: Pre-LN (True) or Post-LN (False, iTransformer's); either ends with a norm.
        norm: ``layer`` (iTransformer's) or ``batch``.
    """

    per_channel = True  # one representation per input channel

    def __init__(
        self,
        context_len: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int | None,
        *,
        dropout: float,
        attn_dropout: float,
        activation: Activation,
        norm_first: bool,
        norm: NormName,
    ) -> None:
        super().__init__()
        self.width = d_model  # R = D
        self.embed = nn.Linear(context_len, d_model)  # iTransformer's value_embedding
        # no positional encoding (channels are a set); a final norm as iTransformer's, Post-LN included;
        # the encoder's input dropout is the embedding's dropout
        self.encoder = Encoder(
            d_model,
            n_heads,
            n_layers,
            d_ff,
            dropout=dropout,
            attn_dropout=attn_dropout,
            activation=activation,
            norm_first=norm_first,
            final_norm=True,
            norm=norm,
            pos_encoding="none",
        )

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """Each channel's representation ``(B, C, D)`` of the normalised window ``x`` (B, L, C) and, with
        ``need_weights``, each layer's attention across the channels ``(B, 1, H, C, C)``."""
        h = self.embed(x.transpose(1, 2))  # (B, C, D): a channel's whole window is one token
        if not need_weights:
            return self.encoder(h), []  # (B, C, D)
        h, weights = self.encoder(h, need_weights=True)  # (B, C, D), n_layers x (B, H, C, C)
        return h, [w[:, None] for w in weights]  # (B, C, D), n_layers x (B, 1, H, C, C)
