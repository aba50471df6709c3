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

from lightning_tf.core import Encoder, TransformerSpec

__all__ = ["VariateBackbone"]


class VariateBackbone(nn.Module):
    """Each channel's window embedded as one token, encoded across the channels.

    Args:
        context_len: context length L (bars): the width of each channel's embedding.
        spec: the encoder's settings (iTransformer's: ``activation: gelu``, ``norm_first: false``,
            ``norm: layer``); ``dropout`` is also the embedded tokens'. The encoder has no positional
            encoding and, Post-LN included, a final norm.
    """

    per_channel = True  # one representation per input channel

    def __init__(self, context_len: int, spec: TransformerSpec) -> None:
        super().__init__()
        self.width = spec.d_model  # R = D
        self.embed = nn.Linear(context_len, spec.d_model)  # iTransformer's value_embedding
        # no positional encoding (channels are a set); a final norm as iTransformer's, Post-LN included;
        # the encoder's input dropout is the embedding's dropout
        self.encoder = Encoder(spec.replace(final_norm=True, pos_encoding="none"))

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """Each channel's representation ``(B, C, D)`` of the normalised window ``x`` (B, L, C) and, with
        ``need_weights``, each layer's attention across the channels ``(B, 1, H, C, C)``."""
        h = self.embed(x.transpose(1, 2))  # (B, C, D): a channel's whole window is one token
        if not need_weights:
            return self.encoder(h), []  # (B, C, D)
        h, weights = self.encoder(h, need_weights=True)  # (B, C, D), n_layers x (B, H, C, C)
        return h, [w[:, None] for w in weights]  # (B, C, D), n_layers x (B, 1, H, C, C)
