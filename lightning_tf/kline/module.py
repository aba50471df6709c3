"""KLineForecaster: the LightningModule that trains, evaluates and applies the forecaster network
(:class:`~.network.PatchTST`).

The forecast is ``linear(window) + residual(window)`` (``residual: on``, the default): a linear map from
the RevIN-normalised look-back to the horizon (:class:`~.linear.LinearPath`), as in DLinear / RLinear
(Zeng et al. 2023, "Are Transformers Effective for Time Series Forecasting?"; Li et al. 2023), plus the
patch Transformer's forecast of what the linear map gets wrong. The linear part is set in closed form
(ridge least squares, weighted so that it minimises the model-scale training loss) on every training
window when training starts, from the trainer's loaders read in order, the ridge and the pooling over
channels chosen on the validation windows; a run resumed from a checkpoint keeps it (its weights are
parameters, saved in every checkpoint). It then stays frozen (``linear: frozen``) or is fine-tuned
(``tuned``). The Transformer's output layer starts at exactly zero, so training starts from the linear
model's forecast and error. At every validation the loss of the linear path alone is measured beside
the full model's, and the residual is kept only in the measure that it lowers the validation loss: with
the MSE loss, weighted per target by the weight in [0, 1] that minimises the validation MSE (least
squares in one variable), with other losses all or nothing (``residual_gate``, saved with each
checkpoint); ``val/loss`` (what ``EarlyStopping`` and ``ModelCheckpoint`` read) is the loss of the model
so chosen. If the residual never beats the linear path on validation, the tested model is the linear
path, and the test summary says so. ``residual: off`` is the linear path alone,
``only`` the Transformer alone (PatchTST).

The network forecasts on the data's model scale (standardised by the DataModule's training
statistics). What the model must know of its data arrives once, in :meth:`KLineForecaster.setup`: the
sizes (checked), the target channels (adopted when not given) and the :class:`~.scale.DataScale`, kept in
every checkpoint, so that a loaded model reports and forecasts in original units and prices on its own
(:meth:`KLineForecaster.forecast`). Validation and test score the forecast on the model scale, in
original units and, for return targets, on the closes rebuilt from the returns (:mod:`.summary`);
testing also scores the baselines of :mod:`.baselines` on the same windows (the strongest of them the
closed-form :class:`~.baselines.LinearBaseline`, fit when training starts) and says, in plain words,
whether the model beats each, and backtests the sign of each forecast after trading costs
(:mod:`.backtest`). Quantile forecasts (``loss: quantile``) add interval coverage and width. Forecasts of
``predict`` are written by :class:`~.writer.ForecastWriter`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torch.utils.data import DataLoader
from torchmetrics import MeanMetric

from lightning_tf.core import NormName, PositionalName
from lightning_tf.distributed import gather_objects
from lightning_tf.training import SchedulerName, build_scheduler, check_agreement, parameter_groups

from .backtest import STATS as BACKTEST_STATS
from .backtest import backtest, beats_line
from .baselines import LinearBaseline
from .linear import RIDGES, LinearInput, Pooling
from .metrics import ForecastMetrics, IntervalMetrics, ResidualWeight, pinball_loss
from .network import ForecastParts, PatchTST, ResidualMode, check_quantiles
from .scale import DataScale, rebuild_prices
from .summary import BASELINES, SCALES, baseline_forecasts, naive_model_scale, score, summary_text
from .validation import OnError
from .writer import ForecastWriter

__all__ = ["DEFAULT_QUANTILES", "KLineForecaster"]

log = logging.getLogger(__name__)

DEFAULT_QUANTILES = [0.1, 0.5, 0.9]


class KLineForecaster(LightningModule):
    """A linear path plus a patch Transformer residual, with RevIN and a direct multi-horizon head.

    Args:
        n_features: input channels C; must equal the DataModule's ``n_features``.
        n_targets: forecast targets K; must equal the DataModule's ``n_targets``.
        context_len: context length L (bars); must equal the DataModule's ``context_len``.
        horizon: forecast horizon F (bars); must equal the DataModule's ``horizon``.
        target_channels: index among the input channels of each target, for targets that are input
            channels. None: taken from the DataModule (its ``target_channels``) in ``setup``;
            the channel-independent head needs it, the channel-mixing head uses it only to map the
            forecast back through RevIN.
        channel_mixing: one head over all channels (targets that are not input channels, such as
            future returns) instead of PatchTST's channel-independent head.
        residual: ``on``: the linear path plus the Transformer as a residual that starts at zero and is
            kept only where it lowers the validation loss; ``off``: the linear path alone; ``only``: the
            Transformer alone (PatchTST). YAML reads an unquoted ``on`` / ``off`` as true / false, which
            mean the same here.
        linear: the linear path after its closed-form fit: ``frozen`` or ``tuned`` (trained with the rest).
        linear_pooling: the linear path's maps: ``pooled`` (one shared by the target channels),
            ``per_channel``, or ``auto`` (the one with the lower validation error).
        linear_ridge: the linear path's ridge penalty (relative to the Gram matrix's mean diagonal);
            None: chosen on the validation windows among ``lightning_tf.kline.linear.RIDGES``.
        linear_input: what the linear path reads: ``revin`` (the RevIN-normalised window), ``raw`` (the
            window on the model scale) or ``auto`` (the one with the lower validation error).
        residual_min_gain: the share by which the residual must lower the linear path's validation loss
            to be kept (0: any gain); below it the model is the linear path alone. A noisy target (daily
            returns) can show a validation gain of a few hundredths of a percent that is only noise.
        quantiles: quantile levels to forecast, with 0.5 (the point forecast) among them; needs
            ``loss: quantile``, which defaults them to ``[0.1, 0.5, 0.9]``.
        patch_len: patch length P.
        stride: stride S between patch starts.
        pad_end: extend the context by S copies of its last bar before patching (PatchTST); without it,
            a context the patches do not cover is refused.
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
        loss: ``mse``, ``huber`` or ``quantile`` (pinball loss over ``quantiles``) on the model scale.
        huber_delta: threshold of the Huber loss.
        lr: peak learning rate of AdamW.
        weight_decay: AdamW weight decay (matrices only; never the linear path).
        betas: AdamW betas.
        scheduler: ``cosine`` (linear warmup, cosine decay to ``min_lr``), ``onecycle`` (OneCycleLR,
            30% rise), ``decay`` (PatchTST's default: ``lr`` for 3 epochs, then x0.9 per epoch),
            ``constant`` (linear warmup, then ``lr``) or ``noam`` (see
            :func:`lightning_tf.training.build_scheduler`).
        warmup_steps: linear warmup steps of ``cosine``, ``constant`` and ``noam`` (at most half of the run).
        min_lr: the rate the cosine schedule ends at.
        baselines: score the baselines on the test windows and print the comparison; the linear
            baseline's closed-form weights are fit when training starts and saved with the model.
        dlinear_kernel: moving-average window of the DLinear form of the linear path and the linear baseline.
        backtest_cost_bps: trading cost per side, in basis points, of the test backtest (price data).
        backtest_short: the backtest goes short on a negative forecast (else flat).
        compile: compile the training and evaluation forward with torch.compile (the decoding loop /
            attention-map path stay eager).
    """

    # ONNX export (lightning_tf.export): the graph's input and output names; axis 0 (the batch) is dynamic
    onnx_input_names: list[str] = ["context"]
    onnx_output_names: list[str] = ["forecast"]

    val_selection: Tensor

    def __init__(
        self,
        n_features: int = 6,
        n_targets: int = 1,
        context_len: int = 64,
        horizon: int = 5,
        target_channels: list[int] | None = None,
        channel_mixing: bool = False,
        residual: ResidualMode | bool = "on",
        linear: Literal["frozen", "tuned"] = "frozen",
        linear_pooling: Pooling = "auto",
        linear_ridge: float | None = None,
        linear_input: LinearInput = "auto",
        residual_min_gain: float = 0.0,
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
        norm_first: bool = True,
        norm: NormName = "layer",
        pos_encoding: PositionalName = "learned",
        revin: bool = True,
        revin_affine: bool = True,
        loss: Literal["mse", "huber", "quantile"] = "mse",
        huber_delta: float = 1.0,
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
    ) -> None:
        super().__init__()
        if isinstance(residual, bool):  # an unquoted YAML on / off
            residual = "on" if residual else "off"
        if residual not in ("on", "off", "only"):
            raise ValueError(f"residual must be 'on', 'off' or 'only', got {residual!r}")
        if linear not in ("frozen", "tuned"):
            raise ValueError(f"linear must be 'frozen' or 'tuned', got {linear!r}")
        if loss not in ("mse", "huber", "quantile"):
            raise ValueError(f"loss must be 'mse', 'huber' or 'quantile', got {loss!r}")
        if residual == "off" and linear == "frozen" and loss != "quantile":
            raise ValueError("residual 'off' with linear 'frozen' leaves nothing to train: set linear: tuned, "
                             "residual: on, or loss: quantile (the intervals train)")
        if quantiles is not None and loss != "quantile":
            raise ValueError(f"quantiles {quantiles} are trained by the pinball loss: set loss: quantile")
        levels = check_quantiles(DEFAULT_QUANTILES if loss == "quantile" and quantiles is None else quantiles)
        if not 0.0 <= residual_min_gain < 1.0:
            raise ValueError(f"residual_min_gain must be in [0, 1), got {residual_min_gain}")
        if linear_ridge is not None and linear_ridge < 0:
            raise ValueError(f"linear_ridge must be >= 0 (or None: chosen on validation), got {linear_ridge}")
        if backtest_cost_bps < 0:
            raise ValueError(f"backtest_cost_bps must be >= 0, got {backtest_cost_bps}")
        self.save_hyperparameters()
        self.net = PatchTST(
            n_features, n_targets, context_len, horizon, target_channels, channel_mixing=channel_mixing,
            residual=residual, linear_pooling=linear_pooling, linear_trainable=linear == "tuned",
            linear_input=linear_input, dlinear_kernel=dlinear_kernel, quantiles=levels,
            patch_len=patch_len, stride=stride, pad_end=pad_end, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
            d_ff=d_ff, dropout=dropout, attn_dropout=attn_dropout, head_dropout=head_dropout, norm_first=norm_first,
            norm=norm, pos_encoding=pos_encoding, revin=revin, revin_affine=revin_affine,
        )
        self.metrics = nn.ModuleDict()
        for stage in ("train", "val", "test"):
            self.metrics[f"{stage}_model"] = ForecastMetrics(full=stage != "train")
        for stage in ("val", "test"):
            self.metrics[f"{stage}_orig"] = ForecastMetrics()
            self.metrics[f"{stage}_price"] = ForecastMetrics()
            if levels is not None:
                self.metrics[f"{stage}_intervals"] = IntervalMetrics(levels)
        for name in BASELINES:
            for scale in SCALES:
                self.metrics[f"test_{name}_{scale}"] = ForecastMetrics()
        # the validation loss of the model with its residual and of the linear path alone, and (MSE) the
        # statistics that weigh the residual per target
        self.val_losses = nn.ModuleDict(
            {"full": MeanMetric(), "linear": MeanMetric(), "weight": ResidualWeight(n_targets)}
        )
        # fit when training starts; buffers, so checkpoints (and test --ckpt_path) keep them
        self.linear_baseline = (
            LinearBaseline(context_len, horizon, dlinear_kernel, n_targets=n_targets) if baselines else None
        )
        # validation loss with the whole residual, of the linear path alone and with the residual weighted per target
        # (the best the residual did), at the last decision; -1 (no loss is negative): none yet. Not NaN, so that
        # two checkpoints of the same state compare equal
        self.register_buffer("val_selection", torch.full((3,), -1.0, dtype=torch.float64))
        self.data_scale: DataScale | None = None  # the data's scaling, from setup or a checkpoint
        self.test_summary: dict[str, Any] = {}
        self.backtest_curves: pd.DataFrame | None = None  # equity curves of the last test's backtest
        self._compiled: Any = None  # torch.compile(self.net.parts) under compile: true
        self._attention_window: Tensor | None = None
        self._forecast_windows: tuple[Tensor, Tensor, Tensor] | None = None  # x, y, forecast of a few test windows
        self._backtest_rows: list[dict[str, Tensor]] = []

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
    def example_input_array(self) -> Tensor:
        """One context window ``(1, L, C)`` of zeros on the CPU: the input that ONNX export traces and the
        model summary runs."""
        return torch.zeros(1, self.hparams.context_len, self.hparams.n_features)  # (1, L, C)

    def no_weight_decay(self) -> list[str]:
        """The linear path is regularised by its ridge penalty, not pulled towards zero by weight decay."""
        return ["linear.weight"]

    # ------------------------------------------------------------------ model

    def configure_model(self) -> None:
        """Under ``compile: true``, compile the forecast's parts (what every step calls), once; the network
        itself stays as it is (checkpoints of compiled and eager runs are the same)."""
        if self.hparams.compile and self._compiled is None:
            self._compiled = torch.compile(self.net.parts)

    def _parts(self, x: Tensor) -> ForecastParts:
        fn = self._compiled if self._compiled is not None else self.net.parts
        return fn(x)[0]

    def _point(self, y: Tensor) -> Tensor:
        """The point forecast ``(B, F, K)`` of a forecast that may carry quantiles ``(B, F, K, Q)``."""
        return y if self.quantiles is None else y[..., self.quantiles.index(0.5)]

    def forward(self, x: Tensor) -> Tensor:
        """Point forecast ``(B, F, K)`` on the model scale from the context ``x`` (B, L, C) (the median
        with quantiles), as the model was selected (``residual_gate``)."""
        return self._point(self.net.combine(self._parts(x)))

    def forward_quantiles(self, x: Tensor) -> Tensor:
        """Quantile forecasts ``(B, F, K, Q)`` on the model scale from the context ``x`` (B, L, C)."""
        if self.quantiles is None:
            raise ValueError("this model forecasts no quantiles: train it with loss: quantile")
        return self.net.combine(self._parts(x))

    def forecast(
        self,
        bars: pd.DataFrame | str | Path,
        *,
        columns: dict[str, str] | None = None,
        ticker_column: str | None = None,
        on_error: OnError = "error",
        timezone: str | None = None,
        name: str | None = None,
    ) -> pd.DataFrame:
        """Forecast the ``horizon`` bars after the end of each series of ``bars``, with the features, target
        and scaling this model was trained with (its checkpoint's :class:`~.scale.DataScale`), never its
        training data; in eval mode on the model's device (the previous mode is restored).

        Args:
            bars: OHLCV bars: a DataFrame or a file (or folder) in any layout :func:`~.io.read_bars` reads;
                several tickers (a ticker column) give one forecast each. Needs ``context_len`` bars after
                the features' warm-up.
            columns: canonical name -> column, overriding the column detection.
            ticker_column: the ticker column of a long table (detected by name when None).
            on_error: bad rows raise (``error``), are dropped (``drop``) or forward-filled (``ffill``).
            timezone: the exchange's time zone for Unix epoch timestamps.
            name: the ticker of bars without a ticker column (default: the file name; ``series`` for a
                DataFrame).

        Returns:
            One row per future bar and series: ``ticker``, ``timestamp`` (continuing the series' own
            calendar), ``step``, ``pred_<target>`` in the series' own units, ``pred_<target>_q<level>`` for
            a quantile model, ``close`` (rebuilt from the predicted returns, in the series' own price units)
            and ``scaled_by``: a series this model was trained on is scaled with its training statistics;
            any other series by its own history, never as a trained ticker.
        """
        from .inference import forecast_table

        return forecast_table(self, bars, columns=columns, ticker_column=ticker_column, on_error=on_error,
                              timezone=timezone, name=name)

    @torch.no_grad()
    def attention_maps(self, x: Tensor, layer: int = -1) -> Tensor:
        """Attention over patches of ``layer`` averaged over heads, ``(B, C, N, N)``, in eval mode."""
        was_training = self.training
        self.eval()
        _, weights = self.net.forward_with_attention(x)  # n_layers x (B, C, H, N, N)
        self.train(was_training)
        return weights[layer].mean(dim=2)  # (B, C, N, N)

    @property
    def residual_kept(self) -> bool:
        """Whether the forecast includes the Transformer (``residual: only``, or ``on`` and kept on validation)."""
        if self.hparams.residual == "off":
            return False
        return self.hparams.residual == "only" or bool((self.net.residual_gate > 0).any())

    # ------------------------------------------------------------------ the data, once

    def setup(self, stage: str) -> None:
        """Take what the model must know of the data from the DataModule's plain attributes, once: the
        sizes (checked), the target channels (adopted when the model has none) and the data's scaling."""
        dm = self.trainer.datamodule
        if dm is None:
            return
        hp = self.hparams
        for name in ("n_features", "n_targets", "context_len", "horizon"):
            check_agreement(name, hp[name], getattr(dm, name, None))
        scale = getattr(dm, "data_scale", None)
        if scale is not None:
            scale = scale if isinstance(scale, DataScale) else DataScale.from_dict(scale)
            check_agreement("n_features", hp.n_features, len(scale.feature_names))
            check_agreement("n_targets", hp.n_targets, len(scale.target_names))
            if stage != "predict" or self.data_scale is None:
                # at predict, a trained model keeps its own scale (the checkpoint's); the data's is only
                # the unseen series' own (see KLineDataModule.setup("predict"))
                self.data_scale = scale
        if not hasattr(dm, "target_channels"):
            return
        theirs = None if dm.target_channels is None else [int(c) for c in dm.target_channels]
        if theirs is None and not hp.channel_mixing:
            raise ValueError(
                "the data's targets are not input channels (target_channels is None), so the channel-independent "
                "head cannot forecast them; set model channel_mixing: true"
            )
        if hp.target_channels is None:
            self.target_channels = theirs  # adopted (the head's shape does not depend on it); saved with the checkpoint
        else:
            check_agreement("target_channels", list(hp.target_channels), theirs)

    @property
    def returns_target(self) -> bool:
        """Whether the targets are returns (persistence = zero return) rather than levels
        (persistence = last value): the data scale's ``target_kind``; without one, targets that are not
        input channels are taken as returns."""
        if self.data_scale is not None:
            return self.data_scale.returns
        return self.target_channels is None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # plain lists, strings and floats: loads with weights_only=True, and dumps as JSON for export
        checkpoint["target_channels"] = self.target_channels
        if self.data_scale is not None:
            checkpoint["data_scale"] = self.data_scale.to_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "target_channels" in checkpoint:
            self.target_channels = checkpoint["target_channels"]
        if checkpoint.get("data_scale") is not None:
            self.data_scale = DataScale.from_dict(checkpoint["data_scale"])

    # ------------------------------------------------------------------ steps

    def _check_batch(self, x: Tensor, y: Tensor | None) -> None:
        L, C = self.hparams.context_len, self.hparams.n_features
        if x.dim() != 3 or x.shape[1:] != (L, C):
            raise ValueError(f"batch 'x' must be (B, context_len={L}, n_features={C}), got {tuple(x.shape)}")
        if y is not None and (y.dim() != 3 or y.shape[1:] != (self.hparams.horizon, self.hparams.n_targets)):
            raise ValueError(
                f"batch 'y' must be (B, horizon={self.hparams.horizon}, n_targets={self.hparams.n_targets}), "
                f"got {tuple(y.shape)}"
            )

    def _loss(self, pred: Tensor, y: Tensor) -> Tensor:
        """The training loss of a forecast ``(B, F, K)`` (or quantiles ``(B, F, K, Q)``) against ``y`` (B, F, K)."""
        if self.hparams.loss == "quantile":
            assert self.quantiles is not None
            return pinball_loss(pred, y, self.quantiles)
        pred = self._point(pred)
        if self.hparams.loss == "huber":
            return F.huber_loss(pred, y, delta=self.hparams.huber_delta)
        return F.mse_loss(pred, y)

    def _score(self, key: str, batch: dict[str, Tensor], forecast: Tensor, naive: Tensor | None, **kw: Any) -> None:
        score(self.metrics, key, batch, forecast, naive, scale=self.data_scale, returns=self.returns_target,
              horizon=self.hparams.horizon, **kw)

    def _shared_step(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        x, y = batch["x"], batch["y"]
        self._check_batch(x, y)
        parts = self._parts(x)
        B = float(x.shape[0])
        # training and validation score the model with its residual; test scores it as selected
        out = self.net.combine(parts) if stage == "test" else self.net.combine(parts, gate=1.0)  # (B, F, K[, Q])
        pred = self._point(out)  # (B, F, K)
        loss = self._loss(out, y)
        if stage == "val":
            self.val_losses["full"].update(loss.detach(), B)
            if self.hparams.residual == "on":
                linear = self.net.combine(parts, gate=0.0)  # (B, F, K[, Q])
                self.val_losses["linear"].update(self._loss(linear, y).detach(), B)
                if self.hparams.loss == "mse":
                    self.val_losses["weight"].update(linear, out - linear, y)
        else:
            # a float batch size: Lightning averages the summed count over processes in its dtype, and an integer
            # count truncates (73.5 -> 73) when the processes scored different numbers of windows (Lightning #21859)
            self.log(f"{stage}/loss", loss, prog_bar=True, batch_size=B, sync_dist=stage != "train")
        naive = naive_model_scale(x, self.hparams.horizon, self.target_channels, self.returns_target)
        self._score(f"{stage}_", batch, pred, naive, original=stage != "train")
        if stage != "train" and self.quantiles is not None:
            self.metrics[f"{stage}_intervals"].update(out, y)
        if stage == "test":
            if self._attention_window is None and self.net.has_encoder:
                self._attention_window = x[:1].detach()  # the first test window, for the attention image
            if self._forecast_windows is None and isinstance(self.logger, WandbLogger):
                pick = torch.linspace(0, x.shape[0] - 1, min(4, x.shape[0]), device=x.device).long()  # (W,)
                self._forecast_windows = (x[pick].detach(), y[pick].detach(), out[pick].detach())
            forecasts = self._score_baselines(batch, naive) if self.hparams.baselines else {}
            self._collect_backtest(batch, pred, forecasts)
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

    # ------------------------------------------------------------------ the closed-form fits

    def on_train_start(self) -> None:
        """Fit the linear path and the linear baseline once, before the first step: closed form on every
        training window, the ridge (and the linear path's pooling, the baseline's variant) chosen on the
        validation windows (when the trainer validates). Every process reads all windows in order, so all
        fit the same weights. A run resumed from a checkpoint keeps them."""
        path = self.net.linear
        fit_path = path is not None and not bool(path.fitted)
        base = self.linear_baseline
        fit_base = base is not None and not (base.fitted and self.trainer.ckpt_path is not None)
        if not (fit_path or fit_base):
            return
        train = _in_order(self.trainer.train_dataloader)
        if train is None:
            log.info("linear fits skipped: the training loader has no dataset to read in order")
            return
        val = _in_order(self.trainer.val_dataloaders)
        if fit_path:
            ridges = RIDGES if self.hparams.linear_ridge is None else (float(self.hparams.linear_ridge),)
            val_pairs = None if val is None else (lambda: _pairs(val))
            fit = self.net.fit_linear(lambda: _pairs(train), val_pairs, ridges=ridges)
            rank_zero_info(
                f"linear path fit in closed form on the training windows: {fit.input} input, {fit.form}, "
                f"{fit.pooling}, "
                f"ridge {fit.ridge:g}, "
                f"training MSE {fit.train_mse:.5g}"
                + (f", validation MSE {fit.val_mse:.5g}" if fit.val_mse is not None else "")
            )
        if fit_base:
            assert base is not None
            base.target_channels = self.target_channels
            base.fit(_pairs(train), None if val is None else _pairs(val))
            log.info("linear baseline fit on the training windows: %s", base.describe())

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
        on`` the residual is weighed against the linear path alone: with the MSE loss, by the weight per
        target in [0, 1] that minimises the validation MSE (closed form); with other losses, all or nothing,
        whichever validates better. ``residual_gate`` keeps the choice (and each checkpoint its own)."""
        self._log_metrics("val_model", "val/")
        self._log_metrics("val_orig", "val/orig/")
        self._log_metrics("val_price", "val/price/")
        if self.quantiles is not None:
            self._log_metrics("val_intervals", "val/")
        metrics = self.val_losses
        if not metrics["full"].update_called:
            return
        chosen = float(metrics["full"].compute())
        if self.hparams.residual == "on" and metrics["linear"].update_called:
            if metrics["weight"].update_called:
                weight, linear, full, chosen = metrics["weight"].compute()
            else:
                full, linear = float(metrics["full"].compute()), float(metrics["linear"].compute())
                keep = full < linear  # ties go to the simpler model
                weight = torch.full_like(self.net.residual_gate, 1.0 if keep else 0.0)
                chosen = full if keep else linear
            best = chosen
            if chosen > linear * (1.0 - self.hparams.residual_min_gain):  # too small a gain: the linear path alone
                weight, chosen = torch.zeros_like(self.net.residual_gate), linear
            self.log("val/loss_linear", linear)
            self.log("val/loss_residual", full)
            if not self.trainer.sanity_checking:
                self.net.residual_gate.copy_(weight.to(self.net.residual_gate))
                self.val_selection.copy_(torch.tensor([full, linear, best], dtype=torch.float64))
        self.log("val/loss", chosen, prog_bar=True)
        for metric in metrics.values():
            metric.reset()

    def on_test_start(self) -> None:
        self._attention_window = None
        self._forecast_windows = None
        self._backtest_rows = []
        if self.hparams.baselines and self.linear_baseline is not None and not self.linear_baseline.fitted:
            log.info("linear baseline skipped: it is fit when training starts, and this model was never trained")

    def selection_line(self) -> str:
        """One plain line: which model is tested, and why."""
        residual = self.hparams.residual
        if residual == "only":
            return "tested model: the Transformer alone (residual: only)"
        if residual == "off":
            return "tested model: the linear path alone (residual: off)"
        full, linear, weighted = (float(v) for v in self.val_selection)
        if full < 0:
            return "tested model: linear path + Transformer residual (no validation decided between them)"
        weight = self.net.residual_gate
        if not self.residual_kept:
            gain = self.hparams.residual_min_gain
            by = f" by at least {gain:.2%}" if gain > 0 else ""
            return (f"tested model: the linear path alone; the Transformer residual did not beat it{by} on validation "
                    f"(loss {min(full, weighted):.5g} with it vs {linear:.5g})")
        if bool((weight == 1).all()):
            return (f"tested model: linear path + Transformer residual, which beat the linear path alone on validation "
                    f"(loss {full:.5g} vs {linear:.5g})")
        weights = ", ".join(f"{float(w):.2f}" for w in weight)
        return (f"tested model: linear path + Transformer residual weighted per target by [{weights}] (least squares "
                f"on validation): validation loss {weighted:.5g}, vs {linear:.5g} for the linear path alone and "
                f"{full:.5g} with the whole residual")

    def on_test_epoch_end(self) -> None:
        summary: dict[str, Any] = {}
        for name in ("model", *BASELINES):
            stem = "test/" if name == "model" else f"test/{name}/"
            key = "test" if name == "model" else f"test_{name}"
            scales = {scale: self._log_metrics(f"{key}_{scale}", stem if scale == "model" else f"{stem}{scale}/")
                      for scale in SCALES}
            scales = {scale: values for scale, values in scales.items() if values}
            if scales:
                summary[name] = scales
        about = {"selection": self.selection_line()}
        if self.linear_baseline is not None and self.linear_baseline.fitted and "linear" in summary:
            about["linear"] = f"linear baseline: {self.linear_baseline.describe()} (chosen on validation)"
        summary["about"] = about
        if self.quantiles is not None:
            summary["intervals"] = self._log_metrics("test_intervals", "test/")
        bt = self._run_backtest()
        if bt is not None:
            summary["backtest"] = bt
        self.test_summary = summary
        if self.hparams.baselines and len([k for k in summary if k in ("model", *BASELINES)]) > 1:
            # levels are read on the model scale (the ETT protocol); returns in their own units and as prices
            for scale in ("orig", "price") if self.returns_target else ("model",):
                if scale in summary.get("model", {}):
                    rank_zero_info(summary_text(summary, scale))
        for line in about.values():
            rank_zero_info(line)
        if summary.get("intervals"):
            rank_zero_info(_intervals_text(summary["intervals"]))
        if bt is not None:
            rank_zero_info(_backtest_text(bt))
        self._log_attention()
        self._log_forecasts()
        self._log_equity()

    # ------------------------------------------------------------------ the backtest

    def _collect_backtest(
        self, batch: dict[str, Tensor], pred: Tensor, forecasts: dict[str, tuple[Tensor, bool]]
    ) -> None:
        """Keep, for every test window, the realised and forecast return of the next bar (first target, original
        units) of the model and of the baselines, for the backtest at the end of the test."""
        scale = self.data_scale
        if scale is None or not scale.has_prices or "anchor" not in batch:
            return
        ticker, anchor = batch.get("ticker"), batch["anchor"].double()

        def next_return(forecast: Tensor, model_scale: bool) -> Tensor:
            f = scale.inverse_targets(forecast, ticker) if model_scale else forecast  # (B, F, K)
            first = f[:, 0, 0].double()  # (B,)
            return first if scale.returns else torch.log(first.clamp_min(1e-12) / anchor)  # (B,)

        row = {"time": batch["time"], "ticker": ticker if ticker is not None else torch.zeros_like(batch["time"]),
               "realised": next_return(batch["y"], True), "model": next_return(pred, True)}
        for name in ("mean", "linear"):
            if name in forecasts:
                row[name] = next_return(*forecasts[name])
        self._backtest_rows.append({k: v.detach().cpu() for k, v in row.items()})

    def _run_backtest(self) -> dict[str, Any] | None:
        """The backtest of the model's and the baselines' next-bar forecasts on every test window (all processes)."""
        rows = [r for part in gather_objects(self._backtest_rows) for r in part]
        self._backtest_rows = []
        if not rows:
            return None
        cols = {k: torch.cat([r[k] for r in rows]).numpy() for k in rows[0]}
        frame = pd.DataFrame(cols)
        frame["time"] = pd.to_datetime(frame["time"])
        frame = frame.drop_duplicates(["ticker", "time"])
        signals = ["model", "buy_and_hold", *[n for n in ("mean", "linear") if n in frame]]
        hp = self.hparams
        stats, curves = backtest(frame, signals, cost_bps=hp.backtest_cost_bps, short=hp.backtest_short)
        self.backtest_curves = curves
        return {
            "cost_bps": float(hp.backtest_cost_bps), "short": bool(hp.backtest_short), "bars": int(len(curves)),
            "strategies": stats, "verdict": beats_line(stats, hp.backtest_cost_bps, hp.backtest_short),
        }

    def _log_equity(self) -> None:
        """The equity curves to wandb (``test/equity``) and, with a logger, beside the run's checkpoints."""
        if self.backtest_curves is None or self.trainer is None or not self.trainer.is_global_zero:
            return
        if not self.trainer.loggers:
            return
        from lightning_tf.training import prediction_path

        from .plots import equity_figure

        bt = self.test_summary.get("backtest", {})
        fig = equity_figure(self.backtest_curves, f"test backtest, {bt.get('cost_bps', 0):g} bp per side")
        path = prediction_path(self.trainer, None, "backtest.png")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        self.backtest_curves.to_csv(path.with_suffix(".csv"))
        log.info("backtest equity curves written to %s", path)
        if isinstance(self.logger, WandbLogger):
            self.logger.log_image(key="test/equity", images=[fig])

    # ------------------------------------------------------------------ figures

    def _log_attention(self) -> None:
        if self._attention_window is None or not isinstance(self.logger, WandbLogger):
            return
        from .plots import attention_figure

        maps = self.attention_maps(self._attention_window)[0].float().cpu().numpy()  # (C, N, N)
        names = list(self.data_scale.feature_names) if self.data_scale else [f"ch{i}" for i in range(maps.shape[0])]
        fig = attention_figure(maps, names, "attention over patches, last layer, first test window")
        self.logger.log_image(key="test/attention", images=[fig])

    def _log_forecasts(self) -> None:
        """Log the forecast of the first target against what happened, for a few windows of the first
        test batch, on the model's scale (the target's context drawn when it is an input channel), with
        the central interval shaded for quantile forecasts."""
        if self._forecast_windows is None or not isinstance(self.logger, WandbLogger):
            return
        from .metrics import central_intervals
        from .plots import forecast_figure

        x, y, out = (t.float().cpu().numpy() for t in self._forecast_windows)  # (W, L, C), (W, F, K), (W, F, K[, Q])
        past = x[..., self.target_channels[0]] if self.target_channels else None  # (W, L)
        names = list(self.data_scale.target_names) if self.data_scale else ["target"]
        band = None
        if self.quantiles is not None:
            pairs = central_intervals(self.quantiles)
            pred = out[..., 0, self.quantiles.index(0.5)]  # (W, F)
            if pairs:
                lo, hi = pairs[0]
                band = (out[..., 0, lo], out[..., 0, hi])
        else:
            pred = out[..., 0]  # (W, F)
        fig = forecast_figure(past, y[..., 0], pred, names[0], "test forecasts (first test batch, model scale)",
                              band=band)
        self.logger.log_image(key="test/forecast", images=[fig])

    # ------------------------------------------------------------------ predict

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """Forecast the F bars after each window: ``pred`` (B, F, K) on the model scale and, with the data's
        scaling, ``pred_orig`` (B, F, K) in original units and, for returns of price data, ``price`` (B, F)
        (the rebuilt closes); with quantiles also ``quantiles_orig`` (B, F, K, Q) (and ``price_quantiles``
        (B, F, Q) for level targets); the batch's ``ticker``, ``time`` and ``anchor`` (B,) as it carries them.
        A batch may carry its own ``scale_mean`` and ``scale_std`` (B, K) (a series the model was not
        trained on, scaled by its own history). Written by :class:`~.writer.ForecastWriter`."""
        x = batch["x"]
        self._check_batch(x, None)
        out = self.net.combine(self._parts(x))  # (B, F, K[, Q])
        pred = self._point(out)  # (B, F, K)
        result = {"pred": pred}
        result.update({k: batch[k] for k in ("ticker", "time", "anchor") if k in batch})
        scale = self.data_scale
        if "scale_mean" in batch:  # the series' own statistics
            mean, std = batch["scale_mean"][:, None, :], batch["scale_std"][:, None, :]  # (B, 1, K)
            inverse = lambda y: y * std.to(y.dtype) + mean.to(y.dtype)  # noqa: E731
        elif scale is not None:
            inverse = lambda y: scale.inverse_targets(y, batch.get("ticker"))  # noqa: E731
        else:
            return result
        result["pred_orig"] = inverse(pred)  # (B, F, K)
        if self.quantiles is not None:
            result["quantiles_orig"] = torch.stack([inverse(out[..., q]) for q in range(out.shape[-1])], dim=-1)
        if scale is not None and scale.has_prices and "anchor" in batch:
            if scale.returns:
                returns = result["pred_orig"][..., 0].double()  # (B, F)
                result["price"] = rebuild_prices(returns, batch["anchor"].double())  # (B, F)
            elif self.quantiles is not None:
                result["price_quantiles"] = result["quantiles_orig"][..., 0, :].double()  # (B, F, Q)
        return result

    def configure_callbacks(self) -> list[Callback]:
        """A :class:`~.writer.ForecastWriter` for ``predict``, unless the trainer already has a prediction
        writer (one given in the config or on the command line wins)."""
        callbacks = self.trainer.callbacks if self._trainer is not None else []
        if any(isinstance(cb, BasePredictionWriter) for cb in callbacks):
            return []
        return [ForecastWriter()]

    # ------------------------------------------------------------------ optimisation

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        optimizer = torch.optim.AdamW(parameter_groups(self, hp.weight_decay), lr=hp.lr, betas=tuple(hp.betas))
        scheduler = build_scheduler(
            optimizer, hp.scheduler, lr=hp.lr, warmup_steps=hp.warmup_steps,
            total_steps=self.trainer.estimated_stepping_batches, min_lr=hp.min_lr,
        )
        return {"optimizer": optimizer} if scheduler is None else {"optimizer": optimizer, "lr_scheduler": scheduler}


def _intervals_text(values: dict[str, float]) -> str:
    """One line per central interval: coverage against its nominal level, and the mean width."""
    lines = []
    for key, coverage in values.items():
        if key.startswith("coverage_"):
            lo, hi = (float(v) for v in key.removeprefix("coverage_").split("_"))
            lines.append(f"{lo:g}%-{hi:g}% interval: coverage {coverage:.1%} (nominal {(hi - lo) / 100:.0%}), "
                         f"mean width {values['width_' + key.removeprefix('coverage_')]:.4g} (model scale)")
    return "\n".join(lines)


def _backtest_text(bt: dict[str, Any]) -> str:
    """The backtest as a plain table and its verdict line."""
    kind = "long/short" if bt["short"] else "long/flat"
    lines = [f"Backtest on the test windows ({kind} by the sign of the next-bar forecast, {bt['cost_bps']:g} bp "
             f"per side, {bt['bars']} bars):", f"{'':14s}" + "".join(f"{m:>14s}" for m in BACKTEST_STATS)]
    for name, values in bt["strategies"].items():
        lines.append(f"{name:14s}" + "".join(f"{values[m]:14.4g}" for m in BACKTEST_STATS))
    lines.append(bt["verdict"])
    return "\n".join(lines)


def _in_order(loaders: Any) -> DataLoader | None:
    """A plain, unsharded, in-order loader over the dataset of a trainer's (first) loader, in its batch
    size; its own generator leaves the global random state (dropout, shuffling) untouched."""
    loader = loaders[0] if isinstance(loaders, (list, tuple)) and loaders else loaders
    dataset = getattr(loader, "dataset", None)
    if dataset is None or not hasattr(dataset, "__len__") or len(dataset) == 0:
        return None
    return DataLoader(dataset, batch_size=loader.batch_size or 1, collate_fn=loader.collate_fn,
                      generator=torch.Generator())


def _pairs(loader: DataLoader) -> Any:
    return ((b["x"], b["y"]) for b in loader)
