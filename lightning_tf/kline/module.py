"""KLineForecaster: the LightningModule that trains, evaluates and applies the forecaster network
(:class:`~.networks.ForecastNet`, built in ``__init__`` with one of three backbones: ``patches``,
``variates``, ``bars``).

The forecast is ``linear(window) + residual(window)``: a linear path fit in closed form on the training
windows when training starts (:mod:`.networks.linear`, :mod:`.fitting`; DLinear / RLinear, Zeng et al.
2023, "Are Transformers Effective for Time Series Forecasting?"), plus a Transformer residual that starts
at zero and is kept only where it beats the linear path on validation by more than noise (:mod:`.evaluation`).
What the model must know of its data arrives once, in :meth:`KLineForecaster.setup` (sizes, target
channels, the :class:`~.scale.DataScale`), and lives in every checkpoint. Testing scores the baselines on the
same windows (:mod:`.evaluation.summary`) and backtests the forecasts (:mod:`.evaluation.report`): ``docs/kline.md``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torchmetrics import MeanMetric

from lightning_tf.core import Activation, NormName, PositionalName, TransformerSpec, evaluating
from lightning_tf.training import (
    CheckedLoading,
    SchedulerName,
    check_agreement,
    configure_adamw,
    prediction_path,
    stamp,
)
from lightning_tf.training.private.lightning import attached_trainer

from .evaluation.baselines import LinearBaseline
from .evaluation.metrics import IntervalMetrics, date_correlation, pinball_loss
from .evaluation.report import TestFigures, TestRecord, report_text
from .evaluation.selection import ResidualSelection, selection_line
from .evaluation.summary import BASELINES, SCALES, baseline_forecasts, naive_model_scale, score, stage_metrics
from .fitting import fit_linear_parts
from .handover import DataHandover
from .inference import SeriesWindow, forecast_columns, last_windows, predict_outputs
from .networks import (
    BackboneName,
    ForecastNet,
    ForecastParts,
    LinearInput,
    Objective,
    Pooling,
    ResidualMode,
    check_training,
)
from .pretrained import ARCHITECTURE, load_pretrained, look_ahead, read_pretrained
from .pretrained import summary as pretrained_summary
from .scale import DataScale
from .settings import Reading
from .universe.forecasts import WindowForecast, window_forecasts
from .windows import WindowDataset, check_batch
from .writer import ForecastWriter

__all__ = ["DEFAULT_QUANTILES", "FreezeName", "KLineForecaster"]

log = logging.getLogger(__name__)

DEFAULT_QUANTILES = [0.1, 0.5, 0.9]
FreezeName = Literal["none", "backbone", "first_n_blocks"]


class KLineForecaster(CheckedLoading, LightningModule):
    """A linear path plus a Transformer residual over patches, channels or bars, with RevIN and a direct
    multi-horizon head. The arguments of the Transformer name the backbones that read them.

    Covariates come from the data: past-observed ones are channels of ``x`` (counted in ``n_features``);
    known-future (``x_future``) and static (``static``) ones are sized by the DataModule in ``setup``
    (``n_future``, ``static_sizes``) and added to every backbone's and the linear path's forecast by the
    network's :class:`~.networks.covariates.CovariateHead`; their sizes are saved in checkpoints.
    :attr:`required_columns` lists the columns new bars must have.

    Args:
        n_features: input channels C; must equal the DataModule's ``n_features``.
        n_targets: forecast targets K; must equal the DataModule's ``n_targets``.
        context_len: context length L (bars); must equal the DataModule's ``context_len``.
        horizon: forecast horizon F (bars); must equal the DataModule's ``horizon``.
        target_channels: index among the input channels of each target (targets that are input channels);
            None: the DataModule's ``target_channels``, taken in ``setup``.
        backbone: how a window becomes tokens: ``patches`` (PatchTST: each channel's patches, channels
            apart), ``variates`` (iTransformer: each channel's window one token, attention across channels) or
            ``bars`` (each bar one token, attention across time); docs/kline.md compares them.
        channel_mixing: patches and variates: one head over all channels (targets that are not input channels,
            such as future returns) instead of the channel-independent head (``bars`` always mixes); all:
            the linear path maps every channel to every target.
        residual: ``on``: the linear path plus the Transformer as a residual that starts at zero and is
            kept only where it beats the linear path on validation; ``blend``: the Transformer trained alone,
            stacked with the linear path by weights chosen on validation; ``off``: the linear path alone;
            ``only``: the Transformer alone (PatchTST). An unquoted YAML ``on`` / ``off`` means the same.
        linear: the linear path after its closed-form fit: ``frozen`` or ``tuned`` (trained with the rest).
        linear_pooling: the linear path's maps: ``pooled`` (one shared by the target channels),
            ``per_channel``, or ``auto`` (chosen on validation).
        linear_ridge: the linear path's ridge penalty (relative to the Gram matrix's mean diagonal);
            None: chosen on the validation windows among ``lightning_tf.kline.networks.RIDGES``.
        linear_input: what the linear path reads: ``revin`` (the RevIN-normalised window), ``raw`` (the
            window on the model scale) or ``auto`` (chosen on validation).
        linear_select_se: 0 (default): the linear path's (and baseline's) input, form, pooling and ridge are
            the ones with the lowest validation error; > 0: the ones with the fewest effective degrees of
            freedom within this many block standard errors of the lowest (1: the one-standard-error rule,
            measured on ETTh1 in docs/results/ett_etth1_linear_one_se.md).
        residual_keep_se: how many standard errors (from contiguous blocks of validation windows) the
            residual's cross-validated gain over the linear path must exceed for the residual to be kept
            (1: the one-standard-error rule; 0: any gain); see :mod:`.selection`.
        selection_blocks: contiguous blocks of validation windows for that standard error.
        residual_select_by: what that gain is measured in: the validation ``loss``, or for a universe the
            ``ic``: each validation date's Pearson correlation across tickers between forecast and outcome, or
            the ``rank_ic``: the same of their ranks (Spearman), the residual then kept whole or dropped (see
            :mod:`.selection`). ``val/loss`` stays the loss; ``val/ic`` (``val/rank_ic``) is the selected model's
            (the model's own under ``residual: off`` or ``only``), for a checkpoint and early stopping that judge
            epochs the same way (``configs/kline/us_universe.yaml``).
        quantiles: quantile levels to forecast, with 0.5 (the point forecast) among them; needs
            ``loss: quantile``, which defaults them to ``[0.1, 0.5, 0.9]``.
        patch_len: patches: patch length P.
        stride: patches: stride S between patch starts.
        pad_end: patches: extend the context by S copies of its last bar before patching (PatchTST); without
            it, a context the patches do not cover is refused.
        d_model: all backbones: model width D.
        n_heads: all backbones: attention heads H.
        n_layers: all backbones: encoder layers.
        d_ff: all backbones: feed-forward width; defaults to ``4 * d_model``.
        dropout: all backbones: dropout in the encoder (input, sublayers, feed-forward).
        attn_dropout: all backbones: dropout on the attention weights.
        head_dropout: all backbones: dropout before the flat head.
        activation: all backbones: the feed-forward activation, ``relu``, ``gelu`` (iTransformer's) or ``swiglu``.
        norm_first: all backbones: Pre-LN (True) or Post-LN (False).
        norm: all backbones: the encoder's normalisation, ``layer`` or ``batch`` (over the batch's tokens,
            PatchTST's).
        pos_encoding: patches and bars: positional encoding of the tokens (variates: none, channels have no
            order).
        causal: bars: each bar attends only to itself and older bars.
        revin: normalise each window per channel and map the forecast back (RevIN).
        revin_affine: learn RevIN's per-channel scale and shift.
        loss: ``mse``, ``huber`` or ``quantile`` (pinball loss over ``quantiles``) on the model scale.
        huber_delta: threshold of the Huber loss.
        ic_weight: weight of a rank-aware term added to the training loss: ``ic_weight * (1 - IC)``, with IC the
            mean over the batch's dates of the Pearson correlation across tickers between forecast and label
            (:func:`~.evaluation.metrics.date_correlation`; with ``batch_by_date`` each batch is one date's whole
            universe). It rewards ordering the cross-section, whatever each date's level and scale; validation
            and model selection still use ``loss``. 0: off.
        lr: peak learning rate of AdamW.
        weight_decay: AdamW weight decay (matrices only; never the linear path).
        betas: AdamW betas.
        scheduler: ``cosine``, ``onecycle``, ``decay`` (PatchTST's: ``lr`` for 3 epochs, then x0.9 per
            epoch), ``constant`` or ``noam`` (:func:`lightning_tf.training.build_scheduler`).
        warmup_steps: linear warmup steps of ``cosine``, ``constant`` and ``noam`` (at most half of the run).
        min_lr: the rate the cosine schedule ends at.
        baselines: score the baselines on the test windows (the linear one is fit when training starts).
        dlinear_kernel: moving-average window of the DLinear form of the linear path and the linear baseline.
        backtest_cost_bps: trading cost per side, in basis points, of the test backtest (price data).
        backtest_short: the backtest goes short on a negative forecast (else flat).
        compile: compile the forecast's forward with torch.compile (the attention-map path stays eager).
        objective: what training minimises: ``forecast`` (the loss of the forecast) or ``masked`` (PatchTST's
            masked-patch reconstruction, self-supervised pretraining of a ``patches`` backbone with ``residual:
            only``; its forecast head stays untrained: fine-tune it, ``pretrained:``).
        mask_ratio: ``masked``: the share of each channel's patches hidden from the encoder.
        pretrained: start from a pretrained K-line forecaster (a ``.ckpt`` or an export folder,
            :mod:`.pretrained`): its architecture (backbone, Transformer, RevIN) is taken whole, its backbone's
            weights load, and so does every other tensor of the same name and shape (the head for the same horizon
            and targets); heads for another horizon, targets or covariates start fresh, and the linear path is fit
            on this data. What it was trained on comes along and is checked against this data's dates. Or a
            published Chronos-Bolt (``amazon/chronos-bolt-small``, or a folder of its files): the ``chronos_bolt``
            backbone, forecasting each target from its own channel with the published weights and quantile head.
        freeze: ``none``; ``backbone`` (the Transformer's embedding and encoder stay fixed: only the heads and the
            linear path train); ``first_n_blocks`` (the embedding and the first ``freeze_blocks`` encoder layers).
        freeze_blocks: encoder layers frozen by ``freeze: first_n_blocks``.
        layer_decay: layer-wise learning-rate decay (BEiT): encoder layer ``i`` of ``n`` trains at
            ``lr * layer_decay ** (n - i)``, the embedding (and RevIN) at ``lr * layer_decay ** (n + 1)``, the heads
            at ``lr``; None: one rate.
        published: the ``chronos_bolt`` backbone's settings (its config), set by ``pretrained:`` from a published
            model and kept in checkpoints; not given by hand.
    """

    # ONNX export (lightning_tf.export): the graph's output name (its inputs: onnx_input_names); axis 0 (the
    # batch) is dynamic
    onnx_output_names: list[str] = ["forecast"]

    val_selection: Tensor

    def __init__(
        self,
        n_features: int = 6,
        n_targets: int = 1,
        context_len: int = 64,
        horizon: int = 5,
        target_channels: list[int] | None = None,
        backbone: BackboneName = "patches",
        channel_mixing: bool = False,
        residual: ResidualMode | bool = "on",
        linear: Literal["frozen", "tuned"] = "frozen",
        linear_pooling: Pooling = "auto",
        linear_ridge: float | None = None,
        linear_input: LinearInput = "auto",
        linear_select_se: float = 0.0,
        residual_keep_se: float = 1.0,
        selection_blocks: int = 10,
        residual_select_by: Literal["loss", "ic", "rank_ic"] = "loss",
        quantiles: list[float] | None = None,
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
        activation: Activation = "relu",
        norm_first: bool = True,
        norm: NormName = "layer",
        pos_encoding: PositionalName = "learned",
        causal: bool = False,
        revin: bool = True,
        revin_affine: bool = True,
        loss: Literal["mse", "huber", "quantile"] = "mse",
        huber_delta: float = 1.0,
        ic_weight: float = 0.0,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        betas: tuple[float, float] = (0.9, 0.999),
        scheduler: SchedulerName = "cosine",
        warmup_steps: int = 50,
        min_lr: float = 0.0,
        baselines: bool = True,
        dlinear_kernel: int = 25,
        backtest_cost_bps: float = 5.0,
        backtest_short: bool = False,
        compile: bool = False,
        objective: Objective = "forecast",
        mask_ratio: float = 0.4,
        pretrained: str | None = None,
        freeze: FreezeName = "none",
        freeze_blocks: int = 0,
        layer_decay: float | None = None,
        published: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        source = None
        if pretrained is not None:
            source = read_pretrained(pretrained, model_class=type(self))
            given = {k: v for k, v in locals().items() if k in ARCHITECTURE}
            arch = source.architecture
            ignored = {k: v for k, v in given.items() if k in arch and v != arch[k]}
            if ignored:
                log.info(
                    "pretrained=%s fixes the architecture: %s replaced by the source's %s",
                    pretrained,
                    ignored,
                    {k: arch[k] for k in ignored},
                )
            arch = {**given, **arch}  # a published source sets only what its backbone reads
            backbone, channel_mixing, patch_len = arch["backbone"], arch["channel_mixing"], arch["patch_len"]
            stride, pad_end, d_model, n_heads = arch["stride"], arch["pad_end"], arch["d_model"], arch["n_heads"]
            n_layers, d_ff, activation, norm_first = (
                arch["n_layers"],
                arch["d_ff"],
                arch["activation"],
                arch["norm_first"],
            )
            norm, pos_encoding, causal = arch["norm"], arch["pos_encoding"], arch["causal"]
            revin, revin_affine, published = arch["revin"], arch["revin_affine"], arch["published"]
        if freeze not in ("none", "backbone", "first_n_blocks"):
            raise ValueError(f"freeze must be 'none', 'backbone' or 'first_n_blocks', got {freeze!r}")
        if freeze == "first_n_blocks" and not 0 <= freeze_blocks <= n_layers:
            raise ValueError(f"freeze_blocks ({freeze_blocks}) must be in [0, {n_layers}] (n_layers)")
        if layer_decay is not None and not 0.0 < layer_decay <= 1.0:
            raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
        if not 0.0 < mask_ratio < 1.0:
            raise ValueError(f"mask_ratio must be in (0, 1), got {mask_ratio}")
        if freeze != "none" and residual in ("off", False):
            raise ValueError(f"freeze {freeze!r} freezes the Transformer, and residual 'off' has none")
        residual, levels = check_training(
            residual, linear, loss, quantiles, DEFAULT_QUANTILES, linear_ridge, linear_select_se
        )
        if backtest_cost_bps < 0:
            raise ValueError(f"backtest_cost_bps must be >= 0, got {backtest_cost_bps}")
        if not ic_weight >= 0:
            raise ValueError(f"ic_weight must be >= 0, got {ic_weight}")
        self.save_hyperparameters()
        spec = TransformerSpec(
            d_model,
            n_heads,
            n_layers,
            d_ff,
            dropout=dropout,
            attn_dropout=attn_dropout,
            activation=activation,
            norm_first=norm_first,
            norm=norm,
            pos_encoding=pos_encoding,
        )
        self.net = ForecastNet(
            n_features,
            n_targets,
            context_len,
            horizon,
            target_channels,
            backbone=backbone,
            channel_mixing=channel_mixing,
            residual=residual,
            linear_pooling=linear_pooling,
            linear_trainable=linear == "tuned",
            linear_input=linear_input,
            dlinear_kernel=dlinear_kernel,
            quantiles=levels,
            patch_len=patch_len,
            stride=stride,
            pad_end=pad_end,
            spec=spec,
            head_dropout=head_dropout,
            causal=causal,
            revin=revin,
            revin_affine=revin_affine,
            objective=objective,
            published=published,
        )
        # what this model was trained on (set when it trains, kept in checkpoints), and what its starting
        # weights were trained on, newest first
        self.provenance: dict[str, Any] = {}
        self.pretrained_from: list[dict[str, Any]] = []
        if source is not None:
            loaded, fresh = load_pretrained(self.net, source)
            log.info("pretrained=%s: %s", pretrained, pretrained_summary(loaded, fresh))
            # a checkpoint of this model holds every weight: it rebuilds without the source
            self.hparams.update(source.architecture, pretrained=None)
            self.pretrained_from = [{**source.provenance, "path": source.path}, *source.pretrained_from]
        self._freeze(freeze, freeze_blocks)
        self.metrics = stage_metrics(levels)  # "<stage>_<scale>", "test_<baseline>_<scale>", "<stage>_intervals"
        # the validation loss of the model with its residual; per window, what weighs the residual against
        # the linear path alone (residual: on)
        self.val_loss = MeanMetric()
        self.selection = ResidualSelection(
            n_targets, mse=loss == "mse", blocks=selection_blocks, keep_se=residual_keep_se, by=residual_select_by
        )
        # fit when training starts; buffers, so checkpoints (and test --ckpt_path) keep them
        self.linear_baseline = (
            LinearBaseline(context_len, horizon, dlinear_kernel, n_targets=n_targets) if baselines else None
        )
        # validation loss with the whole residual, of the linear path alone, with the residual weighted per target,
        # the gain judged out of sample and its standard error, at the last decision; -1 (no loss is negative):
        # none yet. Not NaN, so that two checkpoints of the same state compare equal
        self.register_buffer("val_selection", torch.full((5,), -1.0, dtype=torch.float64))
        self.data_scale: DataScale | None = None  # the data's scaling, from setup or a checkpoint
        self.test_summary: dict[str, Any] = {}
        self.backtest_curves: pd.DataFrame | None = None  # equity curves of the last test's backtest
        self._compiled: Any = None  # torch.compile(self.net.parts) under compile: true
        self._record = TestRecord()  # what a test keeps for its report, figures and backtest

    def _freeze(self, freeze: str, n_blocks: int) -> None:
        """``requires_grad=False`` for what ``freeze`` names (left out of the optimizer: no gradient, no step)."""
        if freeze == "none":
            return
        heads = tuple(f"backbone.{h}" for h in getattr(self.net.backbone, "heads", ()))  # a published one's own
        for name, p in self.net.named_parameters():
            if freeze == "backbone":
                p.requires_grad_(not name.startswith("backbone.") or name.startswith(heads))
            elif name.startswith("backbone.") and not name.startswith(heads):
                p.requires_grad_(self.layer_depth(name) > n_blocks)  # depth 0: the embedding; i + 1: layer i

    def layer_depth(self, name: str) -> int:
        """A parameter's depth for layer-wise decay: 0 for the backbone's embedding and positions (and RevIN, which
        reads the input), ``i + 1`` for encoder layer ``i``, ``n_layers + 1`` for the final norm, the heads, the
        linear path and the covariates' head."""
        name = name.removeprefix("net.")
        depth = getattr(self.net.backbone, "layer_depth", None) if self.net.has_encoder else None
        if depth is not None and name.startswith("backbone."):  # a published backbone knows its own
            return depth(name.removeprefix("backbone."))
        layers = "backbone.encoder.layers."
        if name.startswith(layers):
            return int(name[len(layers) :].split(".")[0]) + 1
        if name.startswith("revin.") or (name.startswith("backbone.") and not name.startswith("backbone.encoder.norm")):
            return 0
        return int(self.hparams.n_layers) + 1

    @property
    def target_channels(self) -> list[int] | None:
        """Index among the input channels of each target (given, or adopted from the data in ``setup``;
        saved in checkpoints)."""
        return self.net.target_channels

    @target_channels.setter
    def target_channels(self, channels: list[int] | None) -> None:
        self.net.target_channels = channels

    @property
    def quantiles(self) -> list[float] | None:
        """The forecast's quantile levels (None: point forecasts only)."""
        return self.net.quantiles

    @property
    def example_input_array(self) -> Tensor | tuple[Tensor | None, ...]:
        """One context window ``(1, L, C)`` of zeros on the CPU (with covariates, the tuple of forward's three
        inputs): the input that ONNX export traces and the
        model summary runs."""
        x = torch.zeros(1, self.hparams.context_len, self.hparams.n_features)  # (1, L, C)
        n_future, static_sizes = self.net.covariate_sizes
        if not n_future and not static_sizes:
            return x
        # with covariates: (x, x_future (1, F, Cf) or None, static (1, S) or None), forward's arguments
        x_future = torch.zeros(1, self.hparams.horizon, n_future) if n_future else None
        static = torch.zeros(1, len(static_sizes), dtype=torch.long) if static_sizes else None
        return x, x_future, static

    @property
    def onnx_input_names(self) -> list[str]:
        """The ONNX graph's inputs, in :meth:`onnx_example_inputs`' order: ``context`` (forward's ``x``), then
        ``x_future`` and ``static`` where the model reads them (a model without covariates: ``context`` alone)."""
        n_future, static_sizes = self.net.covariate_sizes
        return ["context", *(["x_future"] if n_future else []), *(["static"] if static_sizes else [])]

    def onnx_example_inputs(self, batch: int) -> dict[str, Tensor]:
        """Random inputs of ``batch`` windows by forward's argument name, only those the model reads, on its
        device: the context ``x`` (batch, L, C) and known-future ``x_future`` (batch, F, Cf) standard normal in the
        weights' dtype, the static ids ``static`` (batch, S) int64 uniform over each id's vocabulary (the unknown
        slot 0 included). ONNX export traces and checks the graph on them."""
        p = next(self.parameters())
        hp = self.hparams
        n_future, static_sizes = self.net.covariate_sizes
        inputs = {"x": torch.randn(batch, hp.context_len, hp.n_features, dtype=p.dtype, device=p.device)}  # (B, L, C)
        if n_future:
            inputs["x_future"] = torch.randn(batch, hp.horizon, n_future, dtype=p.dtype, device=p.device)  # (B, F, Cf)
        if static_sizes:
            ids = [torch.randint(0, size, (batch,), device=p.device) for size in static_sizes]
            inputs["static"] = torch.stack(ids, dim=1)  # (B, S)
        return inputs

    def onnx_sidecar(self) -> dict[str, Any]:
        """What an ONNX file's metadata says of the covariate inputs (empty without known-future or static
        covariates): under ``covariates``, ``x_future``'s shape, dtype (the weights'), columns (calendar features first, then
        the user's known-future columns) and calendar, and ``static``'s shape, dtype, columns (``ticker`` first
        under a ticker embedding, then the static table's), vocabulary sizes and the unknown id 0. Columns and
        calendar come from the data scale (None for a model never given data); its ``covariates`` entry (in
        the sidecar's ``extras``) holds the known-future scaling statistics and the static vocabularies."""
        n_future, static_sizes = self.net.covariate_sizes
        if not n_future and not static_sizes:
            return {}
        cov = dict(self.data_scale.covariates) if self.data_scale is not None else {}
        dtype = str(next(self.parameters()).dtype).removeprefix("torch.")  # the graph's float inputs
        out: dict[str, Any] = {}
        if n_future:
            columns = list(cov.get("future_names") or []) or None
            out["x_future"] = {
                "shape": ["batch", self.hparams.horizon, n_future],
                "dtype": dtype,
                "columns": columns if columns is not None and len(columns) == n_future else None,
                "calendar": cov.get("calendar"),
            }
        if static_sizes:
            names = (["ticker"] if cov.get("ticker_embedding") else []) + list(cov.get("static_vocab") or {})
            out["static"] = {
                "shape": ["batch", len(static_sizes)],
                "dtype": "int64",
                "columns": names if len(names) == len(static_sizes) else None,
                "sizes": list(static_sizes),
                "unknown_id": 0,
            }
        return {"covariates": out}

    def no_weight_decay(self) -> list[str]:
        """The linear path is regularised by its ridge penalty, not pulled towards zero by weight decay."""
        return ["linear.weight"]

    # ------------------------------------------------------------------ model

    def configure_model(self) -> None:
        """Under ``compile: true``, compile the forecast's parts (what every step calls), once; the network
        itself stays as it is (checkpoints of compiled and eager runs are the same)."""
        if self.hparams.compile and self._compiled is None:
            self._compiled = torch.compile(self.net.parts)

    def _parts(self, x: Tensor, batch: dict[str, Tensor] | None = None, **covariates: Tensor | None) -> ForecastParts:
        """The network's parts of context ``x``, with the known-future and static covariates of ``batch`` (or
        given as ``x_future``, ``static``)."""
        fn = self._compiled if self._compiled is not None else self.net.parts
        if batch is not None:
            covariates = {k: batch.get(k) for k in ("x_future", "static")}
        if self.net.covariate_sizes == (0, []):
            return fn(x)[0]
        return fn(x, x_future=covariates.get("x_future"), static=covariates.get("static"))[0]

    def _point(self, y: Tensor) -> Tensor:
        """The point forecast ``(B, F, K)`` of a forecast that may carry quantiles ``(B, F, K, Q)``."""
        return y if self.quantiles is None else y[..., self.quantiles.index(0.5)]

    def forward(self, x: Tensor, x_future: Tensor | None = None, static: Tensor | None = None) -> Tensor:
        """Point forecast ``(B, F, K)`` on the model scale from the context ``x`` (B, L, C) (and, for a model
        with covariates, the known-future ``x_future`` (B, F, Cf) and static ids ``static`` (B, S)) (the median
        with quantiles), as the model was selected (``residual_gate``)."""
        return self._point(self.net.combine(self._parts(x, x_future=x_future, static=static)))

    def forward_quantiles(self, x: Tensor, x_future: Tensor | None = None, static: Tensor | None = None) -> Tensor:
        """Quantile forecasts ``(B, F, K, Q)`` on the model scale from the context ``x`` (B, L, C)."""
        if self.quantiles is None:
            raise ValueError("this model forecasts no quantiles: train it with loss: quantile")
        return self.net.combine(self._parts(x, x_future=x_future, static=static))

    def forecast(
        self,
        bars: pd.DataFrame | str | Path,
        *,
        reading: Reading | None = None,
        name: str | None = None,
        future: pd.DataFrame | None = None,
    ) -> pd.DataFrame:
        """Forecast the ``horizon`` bars after the end of each series of ``bars``, with the features, target
        and scaling this model was trained with (its checkpoint's :class:`~.scale.DataScale`), never its
        training data; in eval mode on the model's device (the previous mode is restored).

        Args:
            bars: OHLCV bars: a DataFrame or a file (or folder) in any layout :func:`~.reader.read_bars` reads;
                several tickers (a ticker column) give one forecast each. Needs ``context_len`` bars after
                the features' warm-up.
            reading: how the bars are read (:class:`~.settings.Reading`: column names, the ticker column of a long
                table, what a bad row becomes, the time zone of epoch timestamps); None: the defaults (columns
                detected, a bad row refused).
            name: the ticker of bars without a ticker column (default: the file name; ``series`` for a DataFrame).
            future: for a model with known-future user covariates, their values for the forecast bars: a
                frame with ``timestamp``, ``ticker`` (several tickers) and one column per covariate.

        Returns:
            One row per future bar and series: ``ticker``, ``timestamp`` (continuing the series' own
            calendar), ``step``, ``pred_<target>`` in the series' own units, ``pred_<target>_q<level>`` for
            a quantile model, ``close`` (rebuilt from the predicted returns, in the series' own price units)
            and ``scaled_by``: a series this model was trained on is scaled with its training statistics;
            any other series by its own history, never as a trained ticker.
        """
        windows = last_windows(
            bars,
            scale=self.data_scale,
            context_len=self.hparams.context_len,
            reading=reading,
            name=name,
            horizon=self.hparams.horizon,
            future=future,
        )
        self._warn_forecast_look_ahead(windows)
        trained = {t.casefold(): t for t in self.data_scale.ticker_names}
        for w in windows:  # a trained ticker in other case ('aapl' for 'AAPL') is another series: say which
            if w.name not in self.data_scale.ticker_names and w.name.casefold() in trained:
                rank_zero_warn(
                    f"forecast: {w.name!r} is not a trained ticker, {trained[w.name.casefold()]!r} is: scaled by its "
                    f"own history; name it {trained[w.name.casefold()]!r} for that ticker's statistics"
                )
        return self.forecast_windows(windows)

    def _warn_forecast_look_ahead(self, windows: list[SeriesWindow]) -> None:
        """A forecast from bars that end on a date a pretrained model (this one, trained with a date cut, or its
        source) has seen is a look-ahead when it is judged against what followed: say so."""
        sources = [p for p in [self.provenance, *self.pretrained_from] if p.get("cut")]
        if not sources or not windows:
            return
        last = min(pd.Timestamp(np.asarray(w.bars["timestamp"])[-1]) for w in windows).isoformat()
        for source in sources:
            line = look_ahead(source, last, "a forecast's context (its last bar)")
            if line:
                log.warning(line)

    def forecast_windows(self, windows: list[SeriesWindow]) -> pd.DataFrame:
        """:meth:`forecast` of series already read into their last windows (:func:`~.inference.last_windows`), in
        one forward pass: ``horizon`` rows per window, in window order (a server's batch of requests)."""
        return pd.DataFrame(self.forecast_columns(windows))

    def forecast_columns(self, windows: list[SeriesWindow]) -> dict[str, np.ndarray]:
        """The columns of :meth:`forecast_windows`' table as arrays (:func:`~.inference.forecast_columns`), without
        the frame (a server writes them as JSON)."""
        return forecast_columns(
            windows,
            net=self.net,
            forward=lambda x, **cov: self.net.combine(self._parts(x, **cov)),
            scale=self.data_scale,
            quantiles=self.quantiles,
            device=self.device,
        )  # type: ignore

    def window_forecasts(
        self, dataset: WindowDataset, scale: DataScale | None = None, batch_size: int = 1024
    ) -> pd.DataFrame:
        """The forecasts of every window of ``dataset`` (as a DataModule's splits hold them) in original units, one
        row per window and step, as a walk-forward fold keeps them (:func:`~.universe.forecasts.window_forecasts`):
        ``prediction``, the model as selected, from the forward of :meth:`forward`, :meth:`forecast` and predict
        (compiled under ``compile: true``), with ``realised``, ``linear`` (the linear path alone), the ``q<level>``
        columns of a quantile model and, under ``residual: on`` or ``blend``, ``residual`` (the whole residual
        added, whatever validation chose) and ``residual_alone`` (``residual - linear``: what the Transformer adds).
        In eval mode on the model's device (the previous mode is restored).

        Args:
            dataset: the windows.
            scale: the scaling of the data the windows come from (its tickers, its target statistics); None: the
                model's own, for windows of the data it was trained on. A model tested on other data (zero-shot)
                reads windows scaled with that data's statistics, and its forecasts are mapped back with them.
            batch_size: windows per forward pass.
        """
        scale = self.data_scale if scale is None else scale
        if scale is None:
            raise ValueError(
                "window_forecasts needs the data's scaling: give scale, fit or test the model first, or load a "
                "checkpoint"
            )
        linear = self.net.linear is not None
        whole = linear and self.hparams.residual in ("on", "blend")

        def forecast(batch: dict[str, Tensor]) -> WindowForecast:
            parts = self._parts(batch["x"], batch)  # one forward; the gates only weigh its parts
            out = self.net.combine(parts)  # (B, F, K[, Q])
            return WindowForecast(
                point=self._point(out),  # (B, F, K)
                quantiles=out if self.quantiles is not None else None,
                linear=self._point(self.net.combine(parts, gate=0.0)) if linear else None,
                residual=self._point(self.net.combine(parts, gate=1.0)) if whole else None,
            )

        with evaluating(self):
            return window_forecasts(forecast, dataset, scale, self.quantiles, batch_size=batch_size, device=self.device)

    @torch.no_grad()
    def attention_maps(self, x: Tensor, layer: int = -1) -> Tensor:
        """Attention of ``layer`` averaged over heads, in eval mode: over each channel's patches ``(B, C, N, N)``,
        across the channels ``(B, 1, C, C)`` or across the bars ``(B, 1, L, L)``, by backbone."""
        with evaluating(self):
            _, weights = self.net.forward_with_attention(x)  # n_layers x (B, G, H, T, T)
        return weights[layer].mean(dim=2)  # (B, G, T, T)

    @property
    def residual_kept(self) -> bool:
        """Whether the forecast includes the Transformer (``only``, or ``on`` / ``blend`` and kept on validation)."""
        hp = self.hparams
        return hp.residual == "only" or (hp.residual != "off" and bool((self.net.residual_gate > 0).any()))

    # ------------------------------------------------------------------ the data, once

    def setup(self, stage: str) -> None:
        """Take what the model must know of the data from the DataModule's :class:`~.handover.DataHandover`, once:
        the sizes (checked), the target channels (adopted when the model has none), the data's scaling and the
        covariates' sizes. Data without a handover (not a K-line DataModule) gives nothing."""
        dm = self.trainer.datamodule
        handover = dm.handover() if dm is not None and callable(getattr(dm, "handover", None)) else None
        if handover is not None:
            self.adopt(handover, stage)

    def adopt(self, data: DataHandover, stage: str = "fit") -> None:
        """Take the data's :class:`~.handover.DataHandover` (see :meth:`setup`)."""
        hp = self.hparams
        for name in ("n_features", "n_targets", "context_len", "horizon"):
            check_agreement(name, hp[name], getattr(data, name))
        scale = data.data_scale
        if scale is not None:
            check_agreement("n_features", hp.n_features, len(scale.feature_names))
            check_agreement("n_targets", hp.n_targets, len(scale.target_names))
            if stage != "predict" or self.data_scale is None:
                # at predict, a trained model keeps its own scale (the checkpoint's); the data's is only
                # the unseen series' own (see KLineDataModule.setup("predict"))
                self.data_scale = scale
        if data.covariate_names and hp.backbone == "patches" and not hp.channel_mixing:
            rank_zero_warn(
                f"past covariates {data.covariate_names} are input channels, but the channel-independent patches "
                "model forecasts each target from its own channel only: set model channel_mixing: true (or "
                "backbone: variates / bars) for the covariates to reach the forecast"
            )
        if data.n_future or data.static_sizes:
            self._set_covariates(int(data.n_future), list(data.static_sizes))
        theirs = None if data.target_channels is None else [int(c) for c in data.target_channels]
        if theirs is None and not hp.channel_mixing:
            raise ValueError(
                "the data's targets are not input channels (target_channels is None), so the "
                "channel-independent head cannot forecast them; set model channel_mixing: true"
            )
        if hp.target_channels is None:
            self.target_channels = theirs  # adopted (the head's shape does not depend on it); saved with the checkpoint
        else:
            check_agreement("target_channels", list(hp.target_channels), theirs)
        self._data_provenance = dict(data.provenance)
        if stage == "fit":
            self._check_look_ahead(data.provenance, stage)
        if stage == "fit" and data.provenance:
            self.provenance = {**data.provenance, "objective": hp.get("objective", "forecast"), "loss": hp.loss}

    def _check_look_ahead(self, data: dict[str, Any], stage: str) -> None:
        """Warn when the data validates or tests on dates a pretrained source of this model has seen, or a trained
        model is tested on dates it has seen itself (a zero-shot test, an earlier walk-forward fold): their weights
        may know what followed."""
        if not data:
            return
        sources = [(source, "the pretrained model") for source in self.pretrained_from]
        if stage in ("test", "validate") and self.provenance:
            # its own training: per-ticker splits of tickers on other dates, a zero-shot test, an earlier fold
            sources.insert(0, (self.provenance, "this model"))
        splits = [("the validation split", "val_from"), ("the test split", "test_from")]
        if stage in ("test", "validate"):
            splits = splits[1:] if stage == "test" else splits[:1]
        for source, model in sources:
            for what, key in splits:
                line = look_ahead(source, data.get(key), f"{what} of {data.get('data')}", model)
                if line:
                    rank_zero_warn(line)

    def _set_covariates(self, n_future: int, static_sizes: list[int]) -> None:
        """Give the network the data's known-future and static covariates (sized by the data, kept in checkpoints)."""
        if self.net.set_covariates(n_future, static_sizes) and self._compiled is not None:
            self._compiled = torch.compile(self.net.parts)

    @property
    def required_columns(self) -> list[str]:
        """The columns new bars must have for this model to forecast them (beside the timestamp and, for a
        long table, the ticker): OHLC, volume and every covariate it reads (from its checkpoint's data scale)."""
        if self.data_scale is None:
            return ["open", "high", "low", "close", "volume"]
        return self.data_scale.required_columns

    @property
    def returns_target(self) -> bool:
        """Whether the targets are returns (persistence = zero return) rather than levels
        (persistence = last value): the data scale's ``target_kind``; without one, targets that are not
        input channels are taken as returns."""
        if self.data_scale is not None:
            return self.data_scale.returns
        return self.target_channels is None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        stamp(checkpoint)  # the package version and format; plain data (weights_only=True, JSON for export)
        checkpoint["target_channels"] = self.target_channels
        n_future, static_sizes = self.net.covariate_sizes
        if n_future or static_sizes:
            checkpoint["covariate_sizes"] = {"n_future": n_future, "static_sizes": static_sizes}
        if self.data_scale is not None:
            checkpoint["data_scale"] = self.data_scale.to_dict()
        if self.provenance:
            checkpoint["provenance"] = dict(self.provenance)
        if self.pretrained_from:
            checkpoint["pretrained_from"] = [dict(p) for p in self.pretrained_from]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "target_channels" in checkpoint:
            self.target_channels = checkpoint["target_channels"]
        sizes = checkpoint.get("covariate_sizes")
        if sizes:  # before the weights load: the covariates' head is built to their sizes
            self._set_covariates(int(sizes["n_future"]), [int(v) for v in sizes["static_sizes"]])
        if checkpoint.get("data_scale") is not None:
            self.data_scale = DataScale.from_dict(checkpoint["data_scale"])
        self.provenance = dict(checkpoint.get("provenance") or {})
        self.pretrained_from = [dict(p) for p in checkpoint.get("pretrained_from") or []]

    # ------------------------------------------------------------------ steps

    def _loss(self, pred: Tensor, y: Tensor, per_window: bool = False) -> Tensor:
        """The training loss of a forecast ``(B, F, K)`` (or quantiles ``(B, F, K, Q)``) against ``y``
        (B, F, K): the mean, or each window's ``(B,)``."""
        if self.hparams.loss == "quantile":
            assert self.quantiles is not None
            loss = pinball_loss(pred, y, self.quantiles, reduce=False)  # (B, F, K, Q)
        elif self.hparams.loss == "huber":
            loss = F.huber_loss(self._point(pred), y, delta=self.hparams.huber_delta, reduction="none")  # (B, F, K)
        else:
            loss = F.mse_loss(self._point(pred), y, reduction="none")  # (B, F, K)
        return loss.flatten(1).mean(1) if per_window else loss.mean()

    def _score(self, key: str, batch: dict[str, Tensor], forecast: Tensor, naive: Tensor | None, **kw: Any) -> None:
        score(
            self.metrics,
            key,
            batch,
            forecast,
            naive,
            scale=self.data_scale,
            returns=self.returns_target,
            horizon=self.hparams.horizon,
            **kw,
        )

    def _masked_step(self, x: Tensor, stage: str) -> Tensor:
        """``objective: masked``: the masked-patch reconstruction loss of the windows ``x`` (B, L, C) is the loss
        of every stage (``val/loss`` chooses the checkpoint; no forecast is scored)."""
        loss = self.net.masked_patch_loss(x, self.hparams.mask_ratio)
        if stage == "val":
            self.val_loss.update(loss.detach(), float(x.shape[0]))
        else:
            self.log(f"{stage}/loss", loss, prog_bar=True, batch_size=float(x.shape[0]), sync_dist=stage != "train")
        return loss

    def _shared_step(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        x, y = batch["x"], batch["y"]
        check_batch(x, y, self.hparams)
        if self.hparams.get("objective", "forecast") == "masked":
            return self._masked_step(x, stage)
        parts = self._parts(x, batch)
        B = float(x.shape[0])
        # training and validation score the model with its residual; test scores it as selected
        out = self.net.combine(parts) if stage == "test" else self.net.combine(parts, gate=1.0)  # (B, F, K[, Q])
        pred = self._point(out)  # (B, F, K)
        loss = self._loss(out, y)
        if stage == "train" and self.hparams.get("ic_weight", 0.0) > 0:
            if "time" not in batch:
                raise ValueError("ic_weight needs the windows' dates: use the K-line data (KLineDataModule)")
            ic = date_correlation(pred, y, batch["time"])
            self.log("train/ic", ic, batch_size=B)
            loss = loss + self.hparams.ic_weight * (1 - ic)
        if stage == "val":
            self.val_loss.update(loss.detach(), B)
            if self.hparams.residual in ("on", "blend"):
                linear = self.net.combine(parts, gate=0.0)  # (B, F, K[, Q])
                time = batch["time"] if "time" in batch else torch.arange(x.shape[0]) + self.selection.count  # (B,)
                losses = (
                    (None, None)
                    if self.hparams.loss == "mse"
                    else (self._loss(linear, y, per_window=True), self._loss(out, y, per_window=True))
                )
                base = self._point(linear)  # (B, F, K): the point forecasts (the same under the MSE loss)
                res = pred - base
                self.selection.update(time, base, res, y, *losses, series=batch.get("ticker"))
            elif self.selection.by != "loss":  # no residual to judge: the model's own per-date IC, for val/<by>
                time = batch["time"] if "time" in batch else torch.arange(x.shape[0]) + self.selection.count  # (B,)
                unused = pred.new_zeros(x.shape[0])  # (B,): no losses to weigh
                self.selection.update(time, pred, torch.zeros_like(pred), y, unused, unused, series=batch.get("ticker"))
        else:
            # a float batch size: Lightning averages the summed count over processes in its dtype, and an integer
            # count truncates (73.5 -> 73) when the processes scored different numbers of windows (Lightning #21859)
            self.log(f"{stage}/loss", loss, prog_bar=True, batch_size=B, sync_dist=stage != "train")
        naive = naive_model_scale(x, self.hparams.horizon, self.target_channels, self.returns_target)
        self._score(f"{stage}_", batch, pred, naive, original=stage != "train")
        if stage != "train" and self.quantiles is not None:
            self.metrics[f"{stage}_intervals"].update(out, y)
        if stage == "test":
            forecasts = self._score_baselines(batch, naive) if self.hparams.baselines else {}
            self._record.add(batch, out, pred, forecasts, self.data_scale, self.net.has_encoder, self.logger)
        return loss

    def _score_baselines(self, batch: dict[str, Tensor], naive: Tensor | None) -> dict[str, tuple[Tensor, bool]]:
        forecasts = baseline_forecasts(batch, self.hparams.horizon, self.target_channels, self.returns_target)
        if self.linear_baseline is not None and self.linear_baseline.fitted:
            forecasts["linear"] = (self.linear_baseline(batch["x"]), True)
        for name, (forecast, model_scale) in forecasts.items():
            self._score(f"test_{name}_", batch, forecast, naive, model_scale=model_scale)
        return forecasts

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "test")

    def on_train_start(self) -> None:
        """Fit the linear path and the linear baseline in closed form once, before the first step
        (:func:`~.fitting.fit_linear_parts`); a run resumed from a checkpoint keeps them."""
        hp, trainer = self.hparams, self.trainer
        if (
            fit := fit_linear_parts(
                self.net,
                self.linear_baseline,
                trainer.train_dataloader,
                trainer.val_dataloaders,
                resumed=trainer.ckpt_path is not None,
                ridge=hp.linear_ridge,
                blocks=hp.selection_blocks,
                select_se=hp.linear_select_se,
            )
        ) is not None:
            self.linear_fit = fit  # what was chosen, for reports (not saved: the path's weights and buffers are)

    # ------------------------------------------------------------------ epoch ends

    def _log_metrics(self, key: str, prefix: str) -> dict[str, float]:
        metric = self.metrics[key]
        updated = metric.total > 0 if isinstance(metric, IntervalMetrics) else metric.mse.update_called
        if not updated:
            return {}
        values = metric.compute()
        metric.reset()
        for name, value in values.items():
            self.log(f"{prefix}{name}", value, sync_dist=True)  # already synced by torchmetrics: exact, and silent
        return values

    def on_train_epoch_end(self) -> None:
        self._log_metrics("train_model", "train/")

    def on_validation_epoch_end(self) -> None:
        """Log the validation metrics and ``val/loss``, the loss of the model as selected. With ``residual:
        on`` the residual is weighed against the linear path alone (:class:`~.selection.ResidualSelection`:
        with the MSE loss weighted per target by the least-squares weight in [0, 1], with other losses all
        or nothing) and kept only when its validation gain exceeds ``residual_keep_se`` standard errors;
        ``residual_gate`` keeps the choice (and each checkpoint its own)."""
        self._log_metrics("val_model", "val/")
        self._log_metrics("val_orig", "val/orig/")
        self._log_metrics("val_price", "val/price/")
        if self.quantiles is not None:
            self._log_metrics("val_intervals", "val/")
        if not self.val_loss.update_called:
            return
        chosen = float(self.val_loss.compute())
        self.val_loss.reset()
        if self.hparams.residual in ("on", "blend") and self.selection.update_called:
            decision = self.selection.compute()
            self.selection.reset()
            chosen = decision.chosen
            self.log("val/loss_linear", decision.linear)
            self.log("val/loss_residual", decision.full)
            by = self.selection.by
            if by != "loss":
                self.log(f"val/{by}_linear", decision.ic_linear)
                self.log(f"val/{by}_residual", decision.ic_full)
                self.log(f"val/{by}", decision.ic_full if decision.kept else decision.ic_linear)  # the selected model's
            if by != "loss" and not math.isfinite(decision.ic_linear) and not self.trainer.sanity_checking:
                raise ValueError(
                    f"residual_select_by: {by} needs validation dates with at least two series each (a universe)"
                )
            if not self.trainer.sanity_checking:
                self.net.residual_gate.copy_(decision.weight.to(self.net.residual_gate))
                values = [decision.full, decision.linear, decision.best, decision.gain, min(decision.gain_se, 1e300)]
                if by != "loss":
                    values[:3] = [decision.ic_full, decision.ic_linear, decision.ic_full]
                self.val_selection.copy_(torch.tensor(values, dtype=torch.float64))
        elif self.selection.update_called:  # residual off or only: nothing to select, the model's own IC
            decision = self.selection.compute()
            self.selection.reset()
            by = self.selection.by
            if not math.isfinite(decision.ic_linear) and not self.trainer.sanity_checking:
                raise ValueError(
                    f"residual_select_by: {by} needs validation dates with at least two series each (a universe)"
                )
            self.log(f"val/{by}", decision.ic_linear)
        self.log("val/loss", chosen, prog_bar=True)

    def on_validation_start(self) -> None:
        if self.trainer.state.fn == "validate":  # a checkpoint's weights and provenance are restored by now
            self._check_look_ahead(getattr(self, "_data_provenance", {}), "validate")

    def on_test_start(self) -> None:
        self._check_look_ahead(getattr(self, "_data_provenance", {}), "test")
        self._record = TestRecord()
        if self.hparams.baselines and self.linear_baseline is not None and not self.linear_baseline.fitted:
            log.info("linear baseline skipped: it is fit when training starts, and this model was never trained")

    def selection_line(self) -> str:
        """One plain line: which model is tested, and why."""
        return selection_line(
            self.hparams.residual,
            self.val_selection,
            self.net.residual_gate,
            self.hparams.residual_keep_se,
            self.hparams.get("residual_select_by", "loss"),
        )

    def on_test_epoch_end(self) -> None:
        if self.hparams.get("objective", "forecast") == "masked":
            self.test_summary = {}  # a reconstruction loss, logged as test/loss: no forecast to report
            return
        summary: dict[str, Any] = {}
        for name in ("model", *BASELINES):  # each scored forecast's metrics per scale, logged as test/[<name>/]...
            key, stem = ("test", "test/") if name == "model" else (f"test_{name}", f"test/{name}/")
            scales = {sc: self._log_metrics(f"{key}_{sc}", stem if sc == "model" else f"{stem}{sc}/") for sc in SCALES}
            if any(scales.values()):
                summary[name] = {sc: values for sc, values in scales.items() if values}
        about = {"selection": self.selection_line()}
        if self.linear_baseline is not None and self.linear_baseline.fitted and "linear" in summary:
            about["linear"] = f"linear baseline: {self.linear_baseline.describe()} (chosen on validation)"
        summary["about"] = about
        if self.quantiles is not None:
            summary["intervals"] = self._log_metrics("test_intervals", "test/")
        trainer, hp = self.trainer, self.hparams
        equity = prediction_path(trainer, None, "backtest.png") if trainer.is_global_zero and trainer.loggers else None
        figures = TestFigures(
            self.logger,
            equity,
            hp.backtest_cost_bps,
            hp.backtest_short,
            self.net.backbone_name,
            self.attention_maps,
            self.data_scale,
            self.target_channels,
            self.quantiles,
        )
        backtest, self.backtest_curves = self._record.finish(figures)
        self.test_summary = summary if backtest is None else {**summary, "backtest": backtest}

    def test_report(self) -> str:
        """The last test in plain words (what ``lightning-tf test`` prints): the model beside the baselines
        with a verdict per baseline, which model was tested and why, interval coverage and the backtest."""
        return report_text(self.test_summary, self.returns_target) if self.test_summary else ""

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """Forecast the F bars after each window: ``pred`` (B, F, K) on the model scale and, with the data's
        scaling, ``pred_orig`` (B, F, K) in original units and, for returns of price data, ``price`` (B, F)
        (the rebuilt closes); with quantiles also ``quantiles_orig`` (B, F, K, Q) (and ``price_quantiles``
        (B, F, Q) for level targets); the batch's ``ticker``, ``time`` and ``anchor`` (B,) as it carries them.
        A batch may carry its own ``scale_mean`` and ``scale_std`` (B, K) (a series the model was not
        trained on, scaled by its own history). Written by :class:`~.writer.ForecastWriter`."""
        x = batch["x"]
        check_batch(x, None, self.hparams)
        out = self.net.combine(self._parts(x, batch))  # (B, F, K[, Q])
        pred = self._point(out)  # (B, F, K)
        return predict_outputs(batch, pred, out if self.quantiles is not None else None, self.data_scale)

    def configure_callbacks(self) -> list[Callback]:
        """A :class:`~.writer.ForecastWriter` for ``predict``, unless the trainer already has a prediction
        writer (one given in the config or on the command line wins)."""
        callbacks = self.trainer.callbacks if attached_trainer(self) is not None else []
        return [] if any(isinstance(cb, BasePredictionWriter) for cb in callbacks) else [ForecastWriter()]

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW (matrices decay; what :meth:`no_weight_decay` lists does not) and the ``scheduler``."""
        return configure_adamw(
            self,
            self.hparams,
            self.trainer.estimated_stepping_batches,
            layer_of=self.layer_depth,
            n_depths=int(self.hparams.n_layers) + 1,
        )
