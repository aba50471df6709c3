"""The patch Transformer forecaster network (PatchTST) on the shared core's encoder.

Nie et al. 2023, "A Time Series is Worth 64 Words: Long-term Forecasting with Transformers":
each channel's context is normalised by RevIN, cut into patches, each patch embedded linearly,
given a position and encoded by a Transformer encoder shared by all channels (channel-independent);
a flat linear head maps the patch representations to all F horizons at once (direct multi-horizon
forecasting, no autoregression).

Two heads:

* channel-independent (``channel_mixing=False``, PatchTST): one head, shared by the channels, maps
  each channel's own representation to that channel's future. The targets are input channels
  (``target_channels``), e.g. the ETT benchmarks' "M" mode. Channel i's forecast never sees channel j.
* channel-mixing (``channel_mixing=True``): one head over the representations of all channels
  forecasts the K targets, for targets that are not input channels, e.g. future log returns of a
  K-line series predicted from returns, ranges, volume and calendar features.

The layout follows the reference ``PatchTST_backbone`` (``layers/PatchTST_backbone.py``): RevIN, the
patch projection ``W_P``, the encoder over the patches of each channel, the ``Flatten_Head``.
"""

from __future__ import annotations

from torch import Tensor, nn

from lightning_tf.core import Encoder, NormName, PositionalName

from .layers import RevIN, n_patches, patchify

__all__ = ["PatchTST"]


class PatchTST(nn.Module):
    """RevIN, patching, patch embedding, the core encoder and a flat direct multi-horizon head.

    Args:
        n_features: input channels C.
        n_targets: forecast targets K.
        context_len: context length L (bars).
        horizon: forecast horizon F (bars).
        target_channels: index among the input channels of each target (targets that are input
            channels); the channel-independent head needs it unless every channel is a target (K = C),
            the channel-mixing head uses it only to map the forecast back through RevIN. May be set
            later (the attribute of the same name).
        channel_mixing: one head over all channels instead of PatchTST's channel-independent head.
        patch_len: patch length P.
        stride: stride between patch starts.
        pad_end: extend the context by ``stride`` copies of its last bar before patching (PatchTST).
        d_model: model width D.
        n_heads: attention heads H.
        n_layers: encoder layers.
        d_ff: feed-forward width; defaults to ``4 * d_model``.
        dropout: dropout in the encoder (input, sublayers, feed-forward).
        attn_dropout: dropout on the attention weights.
        head_dropout: dropout before the flatten head.
        norm_first: Pre-LN (True) or Post-LN (False).
        norm: normalisation in the encoder: ``layer`` (LayerNorm) or ``batch`` (BatchNorm over the
            patch tokens of the batch, PatchTST's choice).
        pos_encoding: positional encoding of the patches.
        revin: normalise each window per channel and map the forecast back (RevIN).
        revin_affine: learn RevIN's per-channel scale and shift.
    """

    def __init__(
        self,
        n_features: int,
        n_targets: int,
        context_len: int,
        horizon: int,
        target_channels: list[int] | None = None,
        *,
        channel_mixing: bool = False,
        patch_len: int = 8,
        stride: int = 4,
        pad_end: bool = True,
        d_model: int = 32,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = 64,
        dropout: float = 0.2,
        attn_dropout: float = 0.0,
        head_dropout: float = 0.2,
        norm_first: bool = True,
        norm: NormName = "layer",
        pos_encoding: PositionalName = "learned",
        revin: bool = True,
        revin_affine: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (("n_features", n_features), ("n_targets", n_targets), ("context_len", context_len),
                            ("horizon", horizon), ("patch_len", patch_len), ("stride", stride)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if patch_len > context_len:
            raise ValueError(f"patch_len ({patch_len}) must not exceed context_len ({context_len})")
        self.n_features, self.n_targets, self.context_len, self.horizon = n_features, n_targets, context_len, horizon
        self.patch_len, self.stride, self.pad_end = patch_len, stride, pad_end
        self.channel_mixing = channel_mixing
        self.target_channels = target_channels
        self.n_patches = n_patches(context_len, patch_len, stride, pad_end)  # N

        self.revin = RevIN(n_features, affine=revin_affine) if revin else None
        self.patch_embed = nn.Linear(patch_len, d_model)  # PatchTST's W_P
        self.encoder = Encoder(
            d_model, n_heads, n_layers, d_ff, dropout=dropout, attn_dropout=attn_dropout,
            norm_first=norm_first, norm=norm, pos_encoding=pos_encoding, max_len=self.n_patches,
        )
        self.head_dropout = nn.Dropout(head_dropout)
        flat = self.n_patches * d_model
        if channel_mixing:
            self.head = nn.Linear(n_features * flat, horizon * n_targets)
        else:
            self.head = nn.Linear(flat, horizon)  # shared by all channels

    @property
    def target_channels(self) -> list[int] | None:
        """Index among the input channels of each target, or None when unknown / not input channels."""
        return self._target_channels

    @target_channels.setter
    def target_channels(self, channels: list[int] | None) -> None:
        if channels is not None:
            channels = [int(c) for c in channels]
            if len(channels) != self.n_targets:
                raise ValueError(f"target_channels {channels} must list n_targets ({self.n_targets}) channels")
            if any(not 0 <= c < self.n_features for c in channels):
                raise ValueError(f"target_channels {channels} must index the n_features ({self.n_features}) inputs")
        self._target_channels = channels

    def _encode(self, x: Tensor, need_weights: bool) -> tuple[Tensor, list[Tensor]]:
        """Forecast ``(B, F, K)`` and, with ``need_weights``, each layer's attention ``(B, C, H, N, N)``."""
        B, _L, C = x.shape
        stats = None
        if self.revin is not None:
            x, stats = self.revin.normalize(x)  # (B, L, C)
        patches = patchify(x, self.patch_len, self.stride, self.pad_end)  # (B, C, N, P)
        N = patches.shape[2]
        h = self.patch_embed(patches)  # (B, C, N, D)
        h = h.reshape(B * C, N, -1)  # (B*C, N, D): every channel is its own sequence
        weights: list[Tensor] = []
        if need_weights:
            h, weights = self.encoder(h, need_weights=True)  # (B*C, N, D), n_layers x (B*C, H, N, N)
            weights = [w.view(B, C, *w.shape[1:]) for w in weights]  # n_layers x (B, C, H, N, N)
        else:
            h = self.encoder(h)  # (B*C, N, D)
        K, Fh = self.n_targets, self.horizon
        if self.channel_mixing:
            h = h.reshape(B, C * N * h.shape[-1])  # (B, C*N*D)
            y = self.head(self.head_dropout(h)).view(B, Fh, K)  # (B, F, K)
            if self.revin is not None and stats is not None and self.target_channels is not None:
                y = self.revin.denormalize(y, stats, self.target_channels)  # (B, F, K)
            return y, weights
        h = h.reshape(B, C, N * h.shape[-1])  # (B, C, N*D)
        y = self.head(self.head_dropout(h)).transpose(1, 2)  # (B, F, C)
        if self.revin is not None and stats is not None:
            y = self.revin.denormalize(y, stats)  # (B, F, C)
        if self.target_channels is None:
            if K != C:
                raise ValueError(
                    "the channel-independent head forecasts input channels, but target_channels is unknown: "
                    "pass model target_channels, attach a DataModule that has them, or set channel_mixing: true"
                )
            return y, weights
        return y[..., self.target_channels], weights  # (B, F, K)

    def forward(self, x: Tensor) -> Tensor:
        """Forecast ``(B, F, K)`` on the model scale from the context ``x`` (B, L, C)."""
        return self._encode(x, need_weights=False)[0]

    def forward_with_attention(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Forecast ``(B, F, K)`` and each encoder layer's attention over patches ``(B, C, H, N, N)``."""
        return self._encode(x, need_weights=True)
