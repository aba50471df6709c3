"""The forecaster network: RevIN, a linear path, and a Transformer on the shared core's encoder over one
of three kinds of tokens (the backbone) as a residual.

How a window ``(B, L, C)`` becomes tokens is the backbone (``backbone``), built in :func:`build_backbone`:

* ``patches`` (:class:`~.patches.PatchBackbone`, PatchTST; Nie et al. 2023, "A Time Series is Worth 64
  Words"): each channel cut into patches, every channel its own sequence (channel-independent);
* ``variates`` (:class:`~.variates.VariateBackbone`, iTransformer; Liu et al. 2024): each channel's whole
  window one token, attention across the channels;
* ``bars`` (:class:`~.bars.BarBackbone`): each bar one token, attention across time, the encoded bars
  read together (channel mixing by construction);
* ``chronos_bolt`` (:class:`~.published.ChronosBoltBackbone`): a published forecaster, Chronos-Bolt, reading each
  target's own channel and forecasting it whole with its own quantile head (``pretrained:`` a Chronos-Bolt
  checkpoint gives its weights).

A backbone maps the normalised window to representations ``(B, G, R)``: one per channel (G = C,
``patches`` and ``variates``) or one for the whole window (G = 1, ``bars``). Everything else is shared:
RevIN, a flat linear head from the representations to all F horizons at once (direct multi-horizon
forecasting, no autoregression), the quantile head, the linear path and the residual rule.

Zeng et al. 2023, "Are Transformers Effective for Time Series Forecasting?": one linear map from the
look-back window to the horizon matches or beats such Transformers on the long-term benchmarks. So
the network can forecast ``linear(window) + residual(window)`` on the RevIN-normalised scale
(``residual``):

* ``on``: :class:`~.linear.LinearPath` (its weights set in closed form on the training windows before
  training, see :meth:`ForecastNet.fit_linear`) plus the Transformer, whose output layer starts at
  exactly zero, so training starts from the linear model's forecast and error;
* ``off``: the linear path alone (RLinear, Li et al. 2023);
* ``blend``: both, trained apart: the linear path in closed form and the Transformer alone on the
  target (as ``only``); the Transformer's part is its forecast minus the linear path's, so a weight
  ``w`` forecasts ``(1 - w) linear + w Transformer``: stacking (Wolpert 1992; Breiman 1996,
  "Stacked Regressions"), the weight chosen on validation;
* ``only``: the Transformer alone (PatchTST as published; the default of this class).

``residual_gate`` (a buffer, one weight in [0, 1] per target) scales the residual in evaluation: the
model keeps it only where it beats the linear path on validation by more than noise
(the LightningModule, :class:`lightning_tf.kline.KLineForecaster`, sets it); 0 leaves the linear path alone.

Two heads:

* channel-independent (``channel_mixing=False`` with a per-channel backbone): one head, shared by the
  channels, maps each channel's own representation to that channel's future (PatchTST's ``Flatten_Head``,
  iTransformer's ``projector``). The targets are input channels (``target_channels``), e.g. the ETT
  benchmarks' "M" mode. With ``patches``, channel i's forecast never sees channel j.
* channel-mixing (``channel_mixing=True``, and always with ``bars``): one head over the representations of
  all channels forecasts the K targets, for targets that are not input channels, e.g. future log returns of
  a K-line series predicted from returns, ranges, volume and calendar features.

Quantiles (``quantiles``): the point forecast is the median; the other quantiles are the median minus
or plus cumulative sums of positive gaps (softplus), so they never cross. The gaps come from a second
head over the same representations (zero at the start) plus a learnt offset per target, horizon and
gap, set from the linear fit's training error as a Gaussian's quantiles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_tf.core import TransformerSpec

from .bars import BarBackbone
from .closed_form import RIDGES, choose_candidate
from .covariates import CovariateHead
from .layers import RevIN
from .linear import LinearFit, LinearInput, LinearPath, Pooling
from .patches import PatchBackbone
from .published import PUBLISHED_BACKBONES, ChronosBoltBackbone, published_config
from .variates import VariateBackbone

__all__ = [
    "DEFAULT_SPEC",
    "Backbone",
    "BackboneName",
    "ForecastNet",
    "ForecastParts",
    "Objective",
    "PatchTST",
    "ResidualMode",
    "build_backbone",
    "check_quantiles",
    "check_training",
]

ResidualMode = Literal["on", "off", "only", "blend"]
#: what training minimises: the forecast's loss, or the masked-patch reconstruction (pretraining)
Objective = Literal["forecast", "masked"]
BackboneName = Literal["patches", "variates", "bars", "chronos_bolt"]
Backbone = PatchBackbone | VariateBackbone | BarBackbone | ChronosBoltBackbone
BACKBONES = ("patches", "variates", "bars", *PUBLISHED_BACKBONES)

#: the forecaster's Transformer unless told otherwise: two layers of width 32, learned positions
DEFAULT_SPEC = TransformerSpec(32, 4, 2, 64, dropout=0.2, pos_encoding="learned")


def check_quantiles(quantiles: Sequence[float] | None) -> list[float] | None:
    """``quantiles`` as a sorted list of distinct levels in (0, 1) that holds the median 0.5 (the point
    forecast), or a ValueError naming them."""
    if quantiles is None:
        return None
    levels = [float(q) for q in quantiles]
    if sorted(set(levels)) != levels or any(not 0 < q < 1 for q in levels) or 0.5 not in levels:
        raise ValueError(
            f"quantiles {list(quantiles)} must be distinct levels in (0, 1), ascending, and include 0.5 "
            "(the point forecast)"
        )
    return levels


def check_training(
    residual: ResidualMode | bool,
    linear: str,
    loss: str,
    quantiles: Sequence[float] | None,
    default_quantiles: Sequence[float],
    linear_ridge: float | None = None,
    linear_select_se: float = 0.0,
) -> tuple[ResidualMode, list[float] | None]:
    """The forecaster's ``residual`` (an unquoted YAML ``on`` / ``off`` read as a boolean is taken as meant)
    and quantile levels (``default_quantiles`` for ``loss: quantile`` without any), or a ValueError naming
    the argument that cannot train as asked."""
    if linear_select_se < 0:
        raise ValueError(f"linear_select_se must be >= 0, got {linear_select_se}")
    if linear_ridge is not None and linear_ridge < 0:
        raise ValueError(f"linear_ridge must be >= 0 (or None: chosen on validation), got {linear_ridge}")
    if isinstance(residual, bool):  # an unquoted YAML on / off
        residual = "on" if residual else "off"
    if residual not in ("on", "off", "only", "blend"):
        raise ValueError(f"residual must be 'on', 'off', 'only' or 'blend', got {residual!r}")
    if linear not in ("frozen", "tuned") or (linear == "tuned" and residual == "blend"):
        raise ValueError(f"linear must be 'frozen' or 'tuned' (with residual: blend, 'frozen'), got {linear!r}")
    if loss not in ("mse", "huber", "quantile"):
        raise ValueError(f"loss must be 'mse', 'huber' or 'quantile', got {loss!r}")
    if residual == "off" and linear == "frozen" and loss != "quantile":
        raise ValueError(
            "residual 'off' with linear 'frozen' leaves nothing to train: set linear: tuned, "
            "residual: on, or loss: quantile (the intervals train)"
        )
    if quantiles is not None and loss != "quantile":
        raise ValueError(f"quantiles {list(quantiles)} are trained by the pinball loss: set loss: quantile")
    return residual, check_quantiles(default_quantiles if loss == "quantile" and quantiles is None else quantiles)


def build_backbone(
    backbone: BackboneName,
    n_features: int,
    context_len: int,
    spec: TransformerSpec,
    *,
    patch_len: int,
    stride: int,
    pad_end: bool,
    causal: bool,
    published: Mapping[str, Any] | None = None,
    quantiles: Sequence[float] | None = None,
) -> Backbone:
    """The backbone that turns a window into tokens and encodes them with ``spec``'s encoder, by name: the one
    place they are built. Each reads only its own arguments (see :class:`ForecastNet`); a published one
    (``chronos_bolt``) is built from ``published``'s config, forecasting the ``quantiles`` levels."""
    if backbone == "chronos_bolt":
        if published is None:
            raise ValueError("backbone 'chronos_bolt' is a published model: start from it with pretrained: NAME|DIR")
        return ChronosBoltBackbone(published_config(published), context_len, quantiles)
    if backbone == "patches":
        return PatchBackbone(context_len, patch_len, stride, pad_end, spec)
    if backbone == "variates":
        return VariateBackbone(context_len, spec)
    if backbone == "bars":
        return BarBackbone(n_features, context_len, spec, causal=causal)
    raise ValueError(f"backbone must be one of {list(BACKBONES)}, got {backbone!r}")


class ForecastParts(NamedTuple):
    """The parts of a forecast before they are added and mapped back to the model scale.

    Attributes:
        linear: the linear path's forecast ``(B, F, K)`` on the normalised scale, or None.
        residual: the Transformer's forecast ``(B, F, K)`` on the normalised scale (``blend``: less the
            linear path's), or None.
        gaps: raw quantile gaps ``(B, F, K, Q - 1)`` of the Transformer (None without quantiles or encoder).
        mean: the targets' window means ``(B, 1, K)`` (zeros without RevIN).
        std: the targets' window scales ``(B, 1, K)`` (ones without RevIN).
        covariate: the known-future and static covariates' term ``(B, F, K)`` on the model scale
            (:class:`~.covariates.CovariateHead`), or None without covariates.
        spread: a forecasting backbone's quantiles less its median ``(B, F, K, Q)`` on the normalised scale, or
            None (the quantiles come from the gaps).
    """

    linear: Tensor | None
    residual: Tensor | None
    gaps: Tensor | None
    mean: Tensor
    std: Tensor
    covariate: Tensor | None = None
    spread: Tensor | None = None


class ForecastNet(nn.Module):
    """RevIN, a linear path and/or a backbone's Transformer with a flat direct multi-horizon head.

    Args:
        n_features: input channels C.
        n_targets: forecast targets K.
        context_len: context length L (bars).
        horizon: forecast horizon F (bars).
        target_channels: index among the input channels of each target (targets that are input
            channels); the channel-independent head needs it unless every channel is a target (K = C),
            the channel-mixing head uses it only to map the forecast back through RevIN. May be set
            later (the attribute of the same name).
        backbone: how a window becomes tokens: ``patches`` (PatchTST), ``variates`` (iTransformer) or
            ``bars`` (one token per bar); or a published forecaster, ``chronos_bolt``, that forecasts each target
            from its own channel (its part is its forecast, less the linear path's under ``on`` and ``blend``);
            see :func:`build_backbone`.
        channel_mixing: one head over all channels instead of the channel-independent head (and a linear
            path from every channel's window to every target); ``bars`` always mixes in its head.
        residual: ``only`` (the Transformer alone), ``on`` (linear path plus the Transformer as a
            residual that starts at zero), ``blend`` (the Transformer trained alone, its part the
            difference from the linear path) or ``off`` (the linear path alone).
        linear_pooling: the linear path's maps: ``pooled`` (one for every target), ``per_channel`` or
            ``auto`` (chosen on the validation windows by :meth:`fit_linear`).
        linear_trainable: fine-tune the linear path after its closed-form fit (else it stays frozen).
        linear_input: what the linear path reads: ``revin`` (the RevIN-normalised window, forecasting the
            normalised future), ``raw`` (the window on the model scale), or ``auto`` (the one with the
            lower validation error, see :meth:`fit_linear`); ``raw`` without RevIN.
        dlinear_kernel: moving-average window of the DLinear form the linear path's fit also tries.
        quantiles: forecast these quantile levels (must include 0.5, the point forecast); None: the
            point forecast only.
        patch_len: patches: patch length P.
        stride: patches: stride between patch starts.
        pad_end: patches: extend the context by ``stride`` copies of its last bar before patching (PatchTST).
        spec: all backbones: the encoder's settings (:class:`~lightning_tf.core.TransformerSpec`: width, heads,
            layers, feed-forward width, dropout, activation, Pre-/Post-LN, ``norm`` ``layer`` or ``batch``
            (BatchNorm over the tokens of the batch, PatchTST's choice), the positional encoding of ``patches``
            and ``bars``; ``variates`` has none: the channels have no order).
        head_dropout: all backbones: dropout before the flat head.
        causal: bars: each bar attends only to itself and older bars.
        revin: normalise each window per channel and map the forecast back (RevIN).
        revin_affine: learn RevIN's per-channel scale and shift (on the Transformer's input).
        objective: ``forecast`` (training minimises the forecast's loss) or ``masked`` (masked-patch
            reconstruction, :meth:`masked_patch_loss`: self-supervised pretraining of a ``patches`` backbone).
        published: a published backbone's settings (``{"config": {...}}``, its sizes), or None.
    """

    residual_gate: Tensor

    def __init__(
        self,
        n_features: int,
        n_targets: int,
        context_len: int,
        horizon: int,
        target_channels: list[int] | None = None,
        *,
        backbone: BackboneName = "patches",
        channel_mixing: bool = False,
        residual: ResidualMode = "only",
        linear_pooling: Pooling = "auto",
        linear_trainable: bool = False,
        linear_input: LinearInput = "auto",
        dlinear_kernel: int = 25,
        quantiles: Sequence[float] | None = None,
        patch_len: int = 8,
        stride: int = 4,
        pad_end: bool = True,
        spec: TransformerSpec = DEFAULT_SPEC,
        head_dropout: float = 0.2,
        causal: bool = False,
        revin: bool = True,
        revin_affine: bool = True,
        objective: Objective = "forecast",
        published: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("n_features", n_features),
            ("n_targets", n_targets),
            ("context_len", context_len),
            ("horizon", horizon),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if backbone not in BACKBONES:
            raise ValueError(f"backbone must be one of {list(BACKBONES)}, got {backbone!r}")
        if backbone in PUBLISHED_BACKBONES and channel_mixing:
            raise ValueError(
                f"backbone {backbone!r} forecasts each target from its own channel: channel_mixing must be false"
            )
        if residual not in ("on", "off", "only", "blend"):
            raise ValueError(f"residual must be 'on', 'off', 'only' or 'blend', got {residual!r}")
        if linear_input not in ("auto", "revin", "raw"):
            raise ValueError(f"linear_input must be 'auto', 'revin' or 'raw', got {linear_input!r}")
        if linear_input == "revin" and not revin:
            raise ValueError("linear_input 'revin' needs revin: true")
        if objective not in ("forecast", "masked"):
            raise ValueError(f"objective must be 'forecast' or 'masked', got {objective!r}")
        if objective == "masked" and (backbone != "patches" or residual != "only"):
            raise ValueError(
                f"objective 'masked' (masked-patch pretraining) needs backbone: patches and residual: only, got "
                f"backbone {backbone!r} and residual {residual!r}"
            )
        self.objective = objective
        self.n_features, self.n_targets, self.context_len, self.horizon = n_features, n_targets, context_len, horizon
        self.backbone_name, self.channel_mixing, self.residual = backbone, channel_mixing, residual
        self.linear_input = linear_input if revin else "raw"
        self.target_channels = target_channels
        self.quantiles = check_quantiles(quantiles)

        self.revin = RevIN(n_features, affine=revin_affine) if revin else None
        # the head reads every channel's representation at once: asked for, or a backbone without per-channel ones
        self.mixing_head = channel_mixing or backbone == "bars"
        # a published backbone forecasts whole, from each target's own channel (no head of this network's)
        self.forecasting = backbone in PUBLISHED_BACKBONES and residual != "off"
        if residual != "off":
            self.backbone = build_backbone(
                backbone,
                n_features,
                context_len,
                spec,
                patch_len=patch_len,
                stride=stride,
                pad_end=pad_end,
                causal=causal,
                published=published,
                quantiles=self.quantiles,
            )
            self.head_dropout = nn.Dropout(head_dropout)
            flat = self.backbone.width  # R
            groups = n_features if self.backbone.per_channel else 1  # G
            if not self.forecasting:  # a published backbone has its own head
                if self.mixing_head:
                    self.head = nn.Linear(groups * flat, horizon * n_targets)
                else:
                    self.head = nn.Linear(flat, horizon)  # shared by all channels
                if residual == "on":
                    # the residual starts at exactly zero: training starts from the linear path's forecast
                    nn.init.zeros_(self.head.weight)
                    nn.init.zeros_(self.head.bias)
        # built after the Transformer, from zeros: the Transformer initialises as without them
        self.linear = (
            LinearPath(
                context_len,
                horizon,
                n_features,
                n_targets,
                mixing=channel_mixing,
                pooling=linear_pooling,
                trainable=linear_trainable,
                kernel_size=dlinear_kernel,
            )
            if residual != "only"
            else None
        )
        if self.quantiles is not None and not (self.forecasting and residual == "only"):
            G = len(self.quantiles) - 1
            # per target, horizon and gap; a unit Gaussian's gaps until fit_linear sets them from the fit's error (a
            # published backbone alone has its own quantiles: no gaps, and no parameter that no loss would reach)
            self.quantile_offset = nn.Parameter(self._gap_offsets(torch.ones(n_targets, horizon)))  # (K, F, Q-1)
            if residual != "off" and not self.forecasting:
                outputs = horizon * n_targets * G if self.mixing_head else horizon * G
                self.quantile_head = nn.Linear(groups * flat if self.mixing_head else flat, outputs)
                nn.init.zeros_(self.quantile_head.weight)
                nn.init.zeros_(self.quantile_head.bias)
        self.register_buffer("residual_gate", torch.ones(n_targets))  # (K,)
        if objective == "masked":
            # PatchTST's self-supervised head: every patch token back to its patch's values
            self.reconstruct = nn.Linear(spec.d_model, patch_len)

    def set_covariates(self, n_future: int, static_sizes: Sequence[int]) -> bool:
        """Give the network known-future (``n_future`` per bar) and static (``static_sizes``: each id's
        vocabulary) covariates: a :class:`~.covariates.CovariateHead` starting at zero, on the network's device,
        added to every forecast. Without either, none (the network is what it was, bit for bit). Returns
        whether the head changed (a new one was built, or one was removed)."""
        sizes = [int(s) for s in static_sizes]
        old = getattr(self, "covariates", None)
        if old is not None and (old.n_future, old.static_sizes) == (int(n_future), sizes):
            return False
        if not n_future and not sizes:
            self.covariates = None
            return old is not None
        device = next(self.parameters()).device if any(True for _ in self.parameters()) else None
        self.covariates = CovariateHead(self.horizon, self.n_targets, int(n_future), sizes).to(device)
        return True

    @property
    def covariate_sizes(self) -> tuple[int, list[int]]:
        """``(n_future, static_sizes)`` of the network's covariates (``(0, [])``: none)."""
        head = getattr(self, "covariates", None)
        return (0, []) if head is None else (head.n_future, list(head.static_sizes))

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: object, **kwargs: object) -> None:
        # checkpoints written before the backbones kept the patch Transformer's embedding and encoder at the top
        for key in [k for k in state_dict if k.startswith((f"{prefix}patch_embed.", f"{prefix}encoder."))]:
            state_dict[f"{prefix}backbone.{key[len(prefix) :]}"] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ targets

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

    def _own_channels(self) -> list[int]:
        """Each target's input channel, for the channel-independent head and linear path."""
        if self.target_channels is not None:
            return self.target_channels
        if self.n_targets != self.n_features and self.forecasting:
            raise ValueError(
                f"backbone {self.backbone_name!r} forecasts each target from its own history, so each target must be "
                "an input channel: give the data the target among its features with label: raw (or model "
                "target_channels)"
            )
        if self.n_targets != self.n_features:
            raise ValueError(
                "the channel-independent head forecasts input channels, but target_channels is unknown: "
                "pass model target_channels, attach a DataModule that has them, or set channel_mixing: true"
            )
        return list(range(self.n_features))

    @property
    def has_encoder(self) -> bool:
        """Whether the network has the Transformer (``residual`` is ``on`` or ``only``)."""
        return self.residual != "off"

    # ------------------------------------------------------------------ the parts

    def _target_scale(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The window normalised without RevIN's affine map ``(B, L, C)`` and the targets' window means
        and scales ``(B, 1, K)`` each (zeros and ones where the forecast is not mapped back)."""
        B = x.shape[0]
        one = x.new_ones(B, 1, self.n_targets)
        if self.revin is None:
            return x, torch.zeros_like(one), one
        mean = x.mean(dim=1, keepdim=True).detach()  # (B, 1, C), as RevIN.normalize
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.revin.eps).detach()  # (B, 1, C)
        plain = (x - mean) / std  # (B, L, C)
        channels = self._own_channels() if not self.channel_mixing else self.target_channels
        if channels is None:  # mixing targets that are not input channels: forecast on the model scale
            return plain, torch.zeros_like(one), one
        return plain, mean[..., channels], std[..., channels]  # (B, L, C), (B, 1, K), (B, 1, K)

    def _transformer(self, x: Tensor, need_weights: bool) -> tuple[Tensor, Tensor | None, list[Tensor]]:
        """The Transformer's forecast ``(B, F, K)`` on the normalised scale (RevIN's affine map undone),
        its raw quantile gaps ``(B, F, K, Q-1)`` or None, and with ``need_weights`` each layer's attention
        (the backbone's: ``(B, C, H, N, N)`` over patches, ``(B, 1, H, C, C)`` across channels,
        ``(B, 1, H, L, L)`` across bars)."""
        stats = None
        if self.revin is not None:
            x, stats = self.revin.normalize(x)  # (B, L, C)
        h, weights = self.backbone(x, need_weights)  # (B, G, R)
        B, G, _R = h.shape
        K, Fh = self.n_targets, self.horizon
        gaps = None
        if self.mixing_head:
            h = h.reshape(B, -1)  # (B, G*R)
            y = self.head(self.head_dropout(h)).view(B, Fh, K)  # (B, F, K)
            if self.quantiles is not None:
                gaps = self.quantile_head(self.head_dropout(h)).view(B, Fh, K, -1)  # (B, F, K, Q-1)
            channels = self.target_channels if self.channel_mixing else self._own_channels()
        else:
            channels = self._own_channels()
            y = self.head(self.head_dropout(h)).transpose(1, 2)[..., channels]  # (B, F, K)
            if self.quantiles is not None:
                g = self.quantile_head(self.head_dropout(h)).view(B, G, Fh, -1)  # (B, C, F, Q-1)
                gaps = g.transpose(1, 2)[:, :, channels]  # (B, F, K, Q-1)
        if self.revin is not None and stats is not None and self.revin.affine and channels is not None:
            # undo RevIN's affine map: the residual lives on the plainly normalised scale, as the linear path
            weight, bias = self.revin.weight[channels], self.revin.bias[channels]  # (K,)
            y = (y - bias) / (weight + self.revin.eps * self.revin.eps)  # (B, F, K)
        return y, gaps, weights

    def parts(
        self, x: Tensor, need_weights: bool = False, x_future: Tensor | None = None, static: Tensor | None = None
    ) -> tuple[ForecastParts, list[Tensor]]:
        """The forecast's parts (:class:`ForecastParts`) from the context ``x`` (B, L, C) (and the covariates
        ``x_future`` (B, F, Cf), ``static`` (B, S) of a network given some, :meth:`set_covariates`) and, with
        ``need_weights``, each encoder layer's attention (see :meth:`_transformer`)."""
        plain, mean, std = self._target_scale(x)
        linear = None
        if self.linear is not None:
            channels = list(range(self.n_features)) if self.channel_mixing else self._own_channels()
            linear = self.linear(plain if self.linear.reads_normalized else x, channels)  # (B, F, K)
        residual, gaps, weights, spread = None, None, [], None
        if self.forecasting:
            residual, spread = self._published(x, mean, std)
        elif self.has_encoder:
            residual, gaps, weights = self._transformer(x, need_weights)
        if (self.residual == "blend" or self.forecasting) and linear is not None and residual is not None:
            # the Transformer's forecast less the linear path's, both on the normalised scale
            assert self.linear is not None
            residual = residual - (linear if self.linear.reads_normalized else (linear - mean) / std)  # (B, F, K)
        head = getattr(self, "covariates", None)
        covariate = None if head is None else head(x_future, static)  # (B, F, K)
        return ForecastParts(linear, residual, gaps, mean, std, covariate, spread), weights

    def _published(self, x: Tensor, mean: Tensor, std: Tensor) -> tuple[Tensor, Tensor | None]:
        """A published backbone's median forecast ``(B, F, K)`` and its quantiles less the median ``(B, F, K, Q)``
        (None without quantiles), both on the normalised scale of the targets' ``mean`` and ``std`` (B, 1, K)."""
        assert isinstance(self.backbone, ChronosBoltBackbone)
        q = self.backbone.forecast_channels(x[..., self._own_channels()], self.horizon)  # (B, F, K, Q), model scale
        q = (q - mean[..., None]) / std[..., None]  # (B, F, K, Q)
        if self.quantiles is None:
            return q[..., 0], None  # (B, F, K): the median alone
        median = q[..., self.quantiles.index(0.5)]  # (B, F, K)
        return median, q - median[..., None]

    def combine(self, parts: ForecastParts, gate: float | None = None) -> Tensor:
        """The forecast on the model scale: ``(B, F, K)``, or ``(B, F, K, Q)`` with quantiles. The
        Transformer's part is weighted by ``gate`` (1: added, 0: the linear path alone; None: the
        ``residual_gate`` buffer, one weight per target, what the model was selected as)."""
        linear, res, gaps, mean, std, covariate, spread = parts
        gate_t = self.residual_gate if gate is None else torch.full_like(self.residual_gate, gate)
        if linear is None:
            assert res is not None
            point = res * std + mean  # (B, F, K): the Transformer alone, mapped back as RevIN does
        else:
            assert self.linear is not None
            base = linear * std + mean if self.linear.reads_normalized else linear  # (B, F, K), model scale
            # the residual is on the normalised scale; a gate of 1 adds it bit for bit, a zero residual adds nothing
            point = base if res is None else base + res * gate_t.to(res.dtype) * std  # (B, F, K)
        if covariate is not None:
            point = point + covariate.to(point.dtype)  # (B, F, K): the covariates' term, on the model scale
        if self.quantiles is None:
            return point  # (B, F, K)
        if spread is not None and linear is None:
            return point[..., None] + spread * std[..., None]  # (B, F, K, Q): the published model's quantiles
        raw = self.quantile_offset.to(point.dtype).expand(point.shape[0], -1, -1, -1).transpose(1, 2)  # (B, F, K, Q-1)
        if gaps is not None:
            raw = raw + (gaps * gate_t.to(gaps.dtype)[:, None] if linear is not None else gaps)  # (B, F, K, Q-1)
        g = F.softplus(raw)  # (B, F, K, Q-1) > 0: quantiles never cross
        m = self.quantiles.index(0.5)
        below = g[..., :m].flip(-1).cumsum(-1).flip(-1)  # (B, F, K, m): distance of each lower quantile
        above = g[..., m:].cumsum(-1)  # (B, F, K, Q-1-m)
        offsets = torch.cat((-below, torch.zeros_like(point)[..., None], above), dim=-1)  # (B, F, K, Q)
        if spread is not None:
            # the published model's spread weighed as its forecast is: quantiles averaged level by level
            w = gate_t.to(spread.dtype)[:, None]  # (K, 1)
            offsets = (1 - w) * offsets + w * spread  # (B, F, K, Q)
        return point[..., None] + offsets * std[..., None]  # (B, F, K, Q)

    # ------------------------------------------------------------------ masked-patch pretraining

    def masked_patch_loss(self, x: Tensor, mask_ratio: float) -> Tensor:
        """The masked-patch reconstruction loss of the context ``x`` (B, L, C) (PatchTST's self-supervised
        objective, Nie et al. 2023, section 3.3): each channel's patches of the RevIN-normalised window, a share
        ``mask_ratio`` of them (at least one per sequence) zeroed before the encoder, and the mean squared error of
        their reconstruction by :attr:`reconstruct` from the encoded tokens. Randomness from torch's global
        generator (the training's RNG state, so a resumed run masks the same patches)."""
        backbone = self.backbone
        assert isinstance(backbone, PatchBackbone)
        if self.revin is not None:
            x, _ = self.revin.normalize(x)  # (B, L, C)
        patches = backbone.patches(x)  # (B, C, N, P)
        B, C, N, _P = patches.shape
        scores = torch.rand(B, C, N, device=x.device)  # (B, C, N)
        mask = scores < mask_ratio  # (B, C, N)
        mask |= scores == scores.min(dim=-1, keepdim=True).values  # every sequence hides at least one patch
        hidden = patches.masked_fill(mask[..., None], 0.0)  # (B, C, N, P)
        h, _ = backbone.encode_patches(hidden)  # (B, C, N*D)
        recon = self.reconstruct(h.view(B, C, N, -1))  # (B, C, N, P)
        error = (recon - patches).pow(2).mean(dim=-1)  # (B, C, N)
        return error[mask].mean()

    # ------------------------------------------------------------------ forward

    def forward_quantiles(self, x: Tensor) -> Tensor:
        """Forecast ``(B, F, K, Q)`` (or ``(B, F, K)`` without quantiles) on the model scale from ``x`` (B, L, C)."""
        return self.combine(self.parts(x)[0])

    def forward(self, x: Tensor) -> Tensor:
        """Point forecast ``(B, F, K)`` on the model scale (the median with quantiles) from the context
        ``x`` (B, L, C)."""
        y = self.forward_quantiles(x)
        return y if self.quantiles is None else y[..., self.quantiles.index(0.5)]  # (B, F, K)

    def forward_with_attention(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Forecast ``(B, F, K)`` and each encoder layer's attention: over patches ``(B, C, H, N, N)``, across
        channels ``(B, 1, H, C, C)`` or across bars ``(B, 1, H, L, L)``, by backbone."""
        if not self.has_encoder:
            raise ValueError("residual 'off' has no Transformer, so no attention over patches, channels or bars")
        parts, weights = self.parts(x, need_weights=True)
        y = self.combine(parts)
        return (y if self.quantiles is None else y[..., self.quantiles.index(0.5)]), weights

    # ------------------------------------------------------------------ the closed-form fit

    @staticmethod
    def _gap_offsets_for(quantiles: Sequence[float], sigma: Tensor) -> Tensor:
        """Raw offsets ``(K, F, Q-1)`` whose softplus are a Gaussian's quantile gaps of scale ``sigma`` (K, F)."""
        normal = torch.distributions.Normal(0.0, 1.0)
        z = normal.icdf(torch.tensor(quantiles, dtype=torch.float64))  # (Q,)
        gaps = sigma.double()[..., None] * (z[1:] - z[:-1])  # (K, F, Q-1)
        gaps = gaps.clamp_min(1e-6)
        return (gaps + torch.log(-torch.expm1(-gaps))).float()  # softplus^-1(g) = g + log(1 - exp(-g))

    def _gap_offsets(self, sigma: Tensor) -> Tensor:
        assert self.quantiles is not None
        return self._gap_offsets_for(self.quantiles, sigma)

    def _linear_batches(
        self, batches: Iterable[tuple[Tensor, Tensor]], normalized: bool
    ) -> Iterable[tuple[Tensor, Tensor, Tensor]]:
        """``(x, y)`` model-scale batches as the linear path's ``(x, y, weight)`` in float64: RevIN-normalised
        with the squared window scale as weight, or as they are with weight 1."""
        for x, y in batches:
            x, y = x.double(), y.double()
            if not normalized:
                yield x, y, x.new_ones(x.shape[0], self.n_targets)
                continue
            plain, mean, std = self._target_scale(x)
            yield plain, (y - mean) / std, (std * std)[:, 0, :]  # (B, L, C), (B, F, K), (B, K)

    @torch.no_grad()
    def fit_linear(
        self,
        train: Callable[[], Iterable[tuple[Tensor, Tensor]]],
        val: Callable[[], Iterable[tuple[Tensor, Tensor]]] | None = None,
        ridges: Sequence[float] = RIDGES,
        blocks: int = 10,
        select_se: float = 0.0,
    ) -> LinearFit:
        """Set the linear path to the closed-form ridge least-squares fit on the training windows.

        Args:
            train: returns an iterable of ``(x (B, L, C), y (B, F, K))`` training batches on the model scale
                (called once per input tried).
            val: the same for the validation windows, or None; they choose the input (``linear_input:
                auto``), the form, the ridge and the pooling by the model-scale validation error
                (:func:`~.closed_form.choose_candidate`).
            ridges: the penalties tried.
            blocks: contiguous blocks of validation windows for the rule's standard error.
            select_se: standard errors a richer map must win by (0: the lowest validation error).

        The fit on the RevIN-normalised window is weighted by each window's squared scale, so both inputs
        minimise the model-scale squared error. With quantiles, the gaps start as a Gaussian's with the
        fit's training error per target and horizon.
        """
        if self.linear is None:
            raise ValueError("residual 'only' has no linear path to fit")
        channels = list(range(self.n_features)) if self.channel_mixing else self._own_channels()
        inputs = {"auto": [True, False], "revin": [True], "raw": [False]}[self.linear_input]
        found = []
        for normalized in inputs:  # without validation: the first input (revin)
            found += self.linear.candidates(
                self._linear_batches(train(), normalized),
                None if val is None else self._linear_batches(val(), normalized),
                channels,
                ridges,
                normalized,
            )
        chosen = choose_candidate(found, blocks, select_se)
        lowest = min(found, key=lambda c: c.val_mse if c.val_mse is not None else 0.0)
        fit = self.linear.apply(chosen, lowest)
        if self.quantiles is not None:
            sigma = fit.residual_std  # (K, F)
            if fit.input == "raw" and self.revin is not None:
                # a model-scale error, while the gaps are scaled by each window's RevIN scale
                sq = [(self._target_scale(x.double())[2] ** 2).mean(dim=(0, 1)) for x, _ in train()]
                sigma = sigma / torch.stack(sq).mean(0).sqrt()[:, None]
            self.quantile_offset.data.copy_(self._gap_offsets(sigma))
        return fit


# the network's name from when it held the patch Transformer only; ``backbone="patches"`` (the default) is PatchTST
PatchTST = ForecastNet
