"""KLineForecaster: a patch Transformer (PatchTST) on the shared core's encoder.

Nie et al. 2023, "A Time Series is Worth 64 Words: Long-term Forecasting with Transformers":
each channel's context is normalised by RevIN, cut into patches, each patch embedded linearly,
given a learned position and encoded by a Transformer encoder shared by all channels
(channel-independent); a flat linear head maps the patch representations to all F horizons at once
(direct multi-horizon forecasting, no autoregression).

Two heads:

* channel-independent (``channel_mixing=False``, PatchTST): one head, shared by the channels, maps
  each channel's own representation to that channel's future. The targets are input channels
  (``target_channels``), e.g. the ETT benchmarks' "M" mode. Channel i's forecast never sees channel j.
* channel-mixing (``channel_mixing=True``): one head over the representations of all channels
  forecasts the K targets, for targets that are not input channels, e.g. future log returns of a
  K-line series predicted from returns, ranges, volume and calendar features.

The model works on the DataModule's model scale; metrics are also computed in original units
(``datamodule.inverse_targets``) and, for return targets, on the prices rebuilt from the returns
(``datamodule.rebuild_prices``). Testing scores the baselines of :mod:`.baselines` on the same
windows and summarises, in plain words, whether the model beats each.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningModule
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torch.utils.data import DataLoader, DistributedSampler

from lightning_tf.core import Encoder, NormName, PositionalName
from lightning_tf.training import warmup_cosine
from lightning_tf.distributed import gather_objects, interleave, predict_size

from .baselines import DLinearBaseline, drift, mean_forecast, persistence
from .layers import RevIN, n_patches, patchify
from .metrics import ForecastMetrics

__all__ = ["BASELINES", "KLineForecaster"]

log = logging.getLogger(__name__)

BASELINES = ("persistence", "mean", "drift", "dlinear")
SUMMARY_METRICS = ("mse", "mae", "mase", "dir_acc", "up_share", "ic", "rank_ic")


class KLineForecaster(LightningModule):
    """Patch Transformer forecaster with RevIN and a direct multi-horizon head.

    Args:
        n_features: input channels C; must equal the DataModule's ``n_features``.
        n_targets: forecast targets K; must equal the DataModule's ``n_targets``.
        context_len: context length L (bars); must equal the DataModule's ``context_len``.
        horizon: forecast horizon F (bars); must equal the DataModule's ``horizon``.
        target_channels: index among the input channels of each target, for targets that are input
            channels. None: taken from the DataModule (its ``target_channels``) when training starts;
            the channel-independent head needs it, the channel-mixing head uses it only to map the
            forecast back through RevIN.
        channel_mixing: one head over all channels (targets that are not input channels, such as
            future returns) instead of PatchTST's channel-independent head.
        patch_len: patch length P.
        stride: stride S between patch starts.
        pad_end: extend the context by S copies of its last bar before patching (PatchTST).
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
        loss: ``mse`` or ``huber`` on the model scale.
        huber_delta: threshold of the Huber loss.
        lr: peak learning rate of AdamW.
        weight_decay: AdamW weight decay (matrices only).
        scheduler: ``cosine`` (linear warmup, cosine decay to 0), ``onecycle`` (OneCycleLR, 30%
            rise), ``decay`` (PatchTST's default: ``lr`` for 3 epochs, then x0.9 per epoch) or
            ``constant``.
        warmup_steps: warmup steps of the cosine schedule.
        baselines: score the baselines on the test windows and print the comparison.
        dlinear_kernel: moving-average window of the DLinear baseline's trend.
        output_dir: where ``predict`` writes its CSV and chart; defaults to
            ``<trainer.default_root_dir>/predictions``.
        plot_bars: bars of history drawn before the forecast in the prediction chart.
    """

    def __init__(
        self,
        n_features: int = 6,
        n_targets: int = 1,
        context_len: int = 64,
        horizon: int = 5,
        target_channels: list[int] | None = None,
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
        loss: Literal["mse", "huber"] = "mse",
        huber_delta: float = 1.0,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        scheduler: Literal["cosine", "onecycle", "decay", "constant"] = "cosine",
        warmup_steps: int = 50,
        baselines: bool = True,
        dlinear_kernel: int = 25,
        output_dir: str | None = None,
        plot_bars: int = 90,
    ) -> None:
        super().__init__()
        for name, value in (("n_features", n_features), ("n_targets", n_targets), ("context_len", context_len),
                            ("horizon", horizon), ("patch_len", patch_len), ("stride", stride)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if patch_len > context_len:
            raise ValueError(f"patch_len ({patch_len}) must not exceed context_len ({context_len})")
        if target_channels is not None:
            if len(target_channels) != n_targets:
                raise ValueError(f"target_channels {target_channels} must list n_targets ({n_targets}) channels")
            if any(not 0 <= c < n_features for c in target_channels):
                raise ValueError(f"target_channels {target_channels} must index the n_features ({n_features}) inputs")
        self.save_hyperparameters()
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

        self.metrics = nn.ModuleDict()
        for stage in ("train", "val", "test"):
            self.metrics[f"{stage}_model"] = ForecastMetrics(full=stage != "train")
        for stage in ("val", "test"):
            self.metrics[f"{stage}_orig"] = ForecastMetrics()
            self.metrics[f"{stage}_price"] = ForecastMetrics()
        for name in BASELINES:
            for scale in ("model", "orig", "price"):
                self.metrics[f"test_{name}_{scale}"] = ForecastMetrics()
        self.dlinear: DLinearBaseline | None = None
        self.test_summary: dict[str, Any] = {}
        self._attention_window: Tensor | None = None
        self._forecast_windows: tuple[Tensor, Tensor, Tensor] | None = None  # x, y, pred of a few test windows
        self._predictions: list[dict[str, Tensor]] = []
        self._first_batch = True

    # ------------------------------------------------------------------ model

    def forward(self, x: Tensor, need_weights: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Forecast ``(B, F, K)`` on the model scale from the context ``x`` (B, L, C).

        With ``need_weights`` also return each encoder layer's attention over patches,
        ``(B, C, H, N, N)``.
        """
        B, _L, C = x.shape
        stats = None
        if self.revin is not None:
            x, stats = self.revin.normalize(x)  # (B, L, C)
        patches = patchify(x, self.hparams.patch_len, self.hparams.stride, self.hparams.pad_end)  # (B, C, N, P)
        N = patches.shape[2]
        h = self.patch_embed(patches)  # (B, C, N, D)
        h = h.reshape(B * C, N, -1)  # (B*C, N, D): every channel is its own sequence
        weights: list[Tensor] = []
        if need_weights:
            h, weights = self.encoder(h, need_weights=True)  # (B*C, N, D), n_layers x (B*C, H, N, N)
            weights = [w.view(B, C, *w.shape[1:]) for w in weights]  # n_layers x (B, C, H, N, N)
        else:
            h = self.encoder(h)  # (B*C, N, D)
        K, Fh = self.hparams.n_targets, self.hparams.horizon
        if self.hparams.channel_mixing:
            h = h.reshape(B, C * N * h.shape[-1])  # (B, C*N*D)
            y = self.head(self.head_dropout(h)).view(B, Fh, K)  # (B, F, K)
            if self.revin is not None and stats is not None and self.target_channels is not None:
                y = self.revin.denormalize(y, stats, self.target_channels)  # (B, F, K)
        else:
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
                return (y, weights) if need_weights else y
            y = y[..., self.target_channels]  # (B, F, K)
        return (y, weights) if need_weights else y

    @torch.no_grad()
    def attention_maps(self, x: Tensor, layer: int = -1) -> Tensor:
        """Attention over patches of ``layer`` averaged over heads, ``(B, C, N, N)``, in eval mode."""
        was_training = self.training
        self.eval()
        _, weights = self(x, need_weights=True)
        self.train(was_training)
        return weights[layer].mean(dim=2)  # (B, C, N, N)

    # ------------------------------------------------------------------ data agreement

    def _dm(self) -> Any:
        trainer = self._trainer
        return getattr(trainer, "datamodule", None) if trainer is not None else None

    def setup(self, stage: str) -> None:
        self._first_batch = True
        dm = self._dm()
        if dm is None:
            return
        for name in ("n_features", "n_targets", "context_len", "horizon"):
            ours, theirs = self.hparams[name], getattr(dm, name, None)
            if theirs is not None and theirs != ours:
                raise ValueError(f"model {name} ({ours}) differs from the data's {name} ({theirs})")
        if not hasattr(dm, "target_channels"):
            return
        theirs = None if dm.target_channels is None else list(dm.target_channels)
        if theirs is None and not self.hparams.channel_mixing:
            raise ValueError(
                "the data's targets are not input channels (target_channels is None), so the channel-independent "
                "head cannot forecast them; set model channel_mixing: true"
            )
        if self.hparams.target_channels is None:
            # adopt the data's (the head's shape does not depend on it); saved with the checkpoint
            self.target_channels = theirs
            self.hparams["target_channels"] = theirs
        elif theirs is not None and list(self.hparams.target_channels) != theirs:
            raise ValueError(f"model target_channels {self.hparams.target_channels} differ from the data's {theirs}")

    @property
    def returns_target(self) -> bool:
        """Whether the targets are returns (persistence = zero return) rather than levels
        (persistence = last value). A DataModule may say so with ``target_kind`` (``"return"`` or
        ``"level"``); otherwise targets named ``log_return`` (K-line data) are returns and all others
        levels. Without a DataModule, targets that are not input channels are taken as returns."""
        dm = self._dm()
        kind = getattr(dm, "target_kind", None)
        if kind is not None:
            if kind not in ("return", "level"):
                raise ValueError(f"the data's target_kind must be 'return' or 'level', got {kind!r}")
            return kind == "return"
        names = getattr(dm, "target_names", None)
        if names:
            return all(n == "log_return" for n in names)
        return self.target_channels is None

    def _check_batch(self, x: Tensor, y: Tensor | None) -> None:
        L, C = self.hparams.context_len, self.hparams.n_features
        if x.dim() != 3 or x.shape[1:] != (L, C):
            raise ValueError(f"batch 'x' must be (B, context_len={L}, n_features={C}), got {tuple(x.shape)}")
        if y is not None and (y.dim() != 3 or y.shape[1:] != (self.hparams.horizon, self.hparams.n_targets)):
            raise ValueError(
                f"batch 'y' must be (B, horizon={self.hparams.horizon}, n_targets={self.hparams.n_targets}), "
                f"got {tuple(y.shape)}"
            )
        if self._first_batch and not torch.isfinite(x).all():
            # checked on the first batch of each run only: a per-step check would stall a GPU every step
            raise ValueError("batch 'x' holds NaN or infinite values; check the data's gap/NaN policy")
        self._first_batch = False

    # ------------------------------------------------------------------ steps

    def _loss(self, pred: Tensor, y: Tensor) -> Tensor:
        if self.hparams.loss == "huber":
            return F.huber_loss(pred, y, delta=self.hparams.huber_delta)
        return F.mse_loss(pred, y)

    def _naive_model(self, x: Tensor) -> Tensor | None:
        """Persistence on the model scale for level targets that are input channels, else None."""
        if self.target_channels is None or self.returns_target:
            return None
        return persistence(x[..., self.target_channels], self.hparams.horizon)  # (B, F, K)

    def _shared_step(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        x, y = batch["x"], batch["y"]
        self._check_batch(x, y)
        pred = self(x)  # (B, F, K)
        loss = self._loss(pred, y)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{stage} loss is {loss.item()} at step {self.global_step}")
        # a float batch size: Lightning averages the summed count over processes in its dtype, and an integer
        # count truncates (73.5 -> 73) when the processes scored different numbers of windows (Lightning #21859)
        self.log(f"{stage}/loss", loss, prog_bar=True, batch_size=float(x.shape[0]), sync_dist=stage != "train")
        naive = self._naive_model(x)
        self.metrics[f"{stage}_model"].update(pred, y, naive)
        if stage != "train":
            self._update_original(stage, "", batch, pred, naive)
        if stage == "test":
            if self._attention_window is None:
                self._attention_window = x[:1].detach()  # the first test window, for the attention image
            if self._forecast_windows is None and isinstance(self.logger, WandbLogger):
                pick = torch.linspace(0, x.shape[0] - 1, min(4, x.shape[0]), device=x.device).long()  # (W,)
                self._forecast_windows = (x[pick].detach(), y[pick].detach(), pred[pick].detach())
            if self.hparams.baselines:
                self._update_baselines(batch, naive)
        return loss

    def _update_original(self, stage: str, prefix: str, batch: dict[str, Tensor], pred: Tensor,
                         naive: Tensor | None) -> None:
        """Metrics of ``pred`` (model scale) in original units and, for returns, on rebuilt prices."""
        dm = self._dm()
        if dm is None or not hasattr(dm, "inverse_targets"):
            return
        ticker = batch.get("ticker")
        y_orig = dm.inverse_targets(batch["y"], ticker)
        pred_orig = dm.inverse_targets(pred, ticker).to(y_orig.dtype)
        self._update_original_units(f"{stage}_{prefix}", batch, pred_orig, y_orig, naive)

    def _update_original_units(self, key: str, batch: dict[str, Tensor], pred_orig: Tensor, y_orig: Tensor,
                               naive: Tensor | None) -> None:
        dm = self._dm()
        self.metrics[f"{key}orig"].update(pred_orig, y_orig, self._naive_orig(batch, y_orig, naive))
        if self.returns_target and hasattr(dm, "rebuild_prices") and "anchor" in batch:
            self._update_prices(f"{key}price", batch["anchor"], pred_orig, y_orig)

    def _naive_orig(self, batch: dict[str, Tensor], y_orig: Tensor, naive: Tensor | None) -> Tensor | None:
        """Persistence in original units: zero returns, or the last past value of a level target."""
        if self.returns_target:
            return torch.zeros_like(y_orig)
        past = self._past_targets(batch)
        if past is not None:
            return persistence(past.to(y_orig.dtype), self.hparams.horizon)
        if naive is not None:
            return self._dm().inverse_targets(naive, batch.get("ticker")).to(y_orig.dtype)
        return None

    def _update_prices(self, key: str, anchor: Tensor, pred_orig: Tensor, y_orig: Tensor) -> None:
        dm = self._dm()
        anchor = anchor.double()
        true_p = dm.rebuild_prices(y_orig[..., 0].double(), anchor)  # (B, F)
        pred_p = dm.rebuild_prices(pred_orig[..., 0].double(), anchor)  # (B, F)
        naive_p = anchor[:, None].expand_as(true_p)  # (B, F)
        self.metrics[key].update(pred_p[..., None], true_p[..., None], naive_p[..., None])

    def _baseline_forecasts(self, batch: dict[str, Tensor]) -> dict[str, tuple[Tensor, bool]]:
        """Each baseline's forecast and whether it is on the model scale (True) or in original units."""
        x, Fh = batch["x"], self.hparams.horizon
        out: dict[str, tuple[Tensor, bool]] = {}
        if self.target_channels is not None and not self.returns_target:
            past = x[..., self.target_channels]  # (B, L, K), model scale (the ETT protocol)
            out["persistence"] = (persistence(past, Fh), True)
            out["mean"] = (mean_forecast(past, Fh), True)
            out["drift"] = (drift(past, Fh), True)
        else:
            past = self._past_targets(batch)  # (B, L, K), original units
            if past is not None:
                returns = self.returns_target
                out["persistence"] = (persistence(past, Fh, returns=returns), False)
                out["mean"] = (mean_forecast(past, Fh, returns=returns, cumulative=False), False)
                if not returns:
                    out["drift"] = (drift(past, Fh), False)
        if self.dlinear is not None:
            out["dlinear"] = (self.dlinear(x), True)
        return out

    def _past_targets(self, batch: dict[str, Tensor]) -> Tensor | None:
        """The target quantity over the context in original units (``x_raw_target``, (B, L, K)), if the
        batch carries it: one-bar returns or past levels."""
        past = batch.get("x_raw_target")
        return None if past is None else past.to(batch["y"].dtype)

    def _update_baselines(self, batch: dict[str, Tensor], naive_model: Tensor | None) -> None:
        dm = self._dm()
        y = batch["y"]
        for name, (fc, model_scale) in self._baseline_forecasts(batch).items():
            if model_scale:
                self.metrics[f"test_{name}_model"].update(fc, y, naive_model)
                self._update_original("test", f"{name}_", batch, fc, naive_model)
            elif dm is not None and hasattr(dm, "inverse_targets"):
                y_orig = dm.inverse_targets(y, batch.get("ticker"))
                self._update_original_units(f"test_{name}_", batch, fc.to(y_orig.dtype), y_orig, naive_model)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "test")

    # ------------------------------------------------------------------ epoch ends

    def _log_metrics(self, key: str, prefix: str) -> dict[str, float]:
        metric: ForecastMetrics = self.metrics[key]  # type: ignore[assignment]
        if not metric.mse.update_called:
            return {}
        values = metric.compute()
        metric.reset()
        for name, value in values.items():
            self.log(f"{prefix}{name}", value, sync_dist=True)  # already synced by torchmetrics: exact, and silent
        return values

    def on_train_epoch_end(self) -> None:
        self._log_metrics("train_model", "train/")

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val_model", "val/")
        self._log_metrics("val_orig", "val/orig/")
        self._log_metrics("val_price", "val/price/")

    def on_test_start(self) -> None:
        self.dlinear = None
        self._attention_window = None
        self._forecast_windows = None
        dm = self._dm()
        if not self.hparams.baselines or dm is None or not hasattr(dm, "train_dataloader"):
            return
        baseline = DLinearBaseline(
            self.hparams.context_len, self.hparams.horizon, self.hparams.dlinear_kernel,
            target_channels=self.target_channels, n_targets=self.hparams.n_targets,
        )

        def pairs(loader: Any) -> Any:
            return ((b["x"], b["y"]) for b in loader)

        try:
            val = dm.val_dataloader()
        except (RuntimeError, NotImplementedError, MisconfigurationException):
            # a DataModule without validation windows: fit without choosing the ridge
            val = None
        if isinstance(getattr(val, "sampler", None), DistributedSampler):
            # under DDP every process fits the same baseline, on all validation windows (not its share)
            val = DataLoader(val.dataset, batch_size=val.batch_size, collate_fn=val.collate_fn)
        self.dlinear = baseline.fit(pairs(dm.train_dataloader()), None if val is None else pairs(val))
        log.info("DLinear baseline fit on the training windows (%s mode, ridge %s)", baseline.mode, baseline.ridge)

    def on_test_epoch_end(self) -> None:
        summary: dict[str, dict[str, dict[str, float]]] = {}
        for name in ("model", *BASELINES):
            stem = "test/" if name == "model" else f"test/{name}/"
            key = "test" if name == "model" else f"test_{name}"
            scales = {scale: self._log_metrics(f"{key}_{scale}", stem if scale == "model" else f"{stem}{scale}/")
                      for scale in ("model", "orig", "price")}
            scales = {scale: values for scale, values in scales.items() if values}
            if scales:
                summary[name] = scales
        self.test_summary = summary
        if self.hparams.baselines and len(summary) > 1:
            # levels are read on the model scale (the ETT protocol); returns in their own units and as prices
            for scale in ("orig", "price") if self.returns_target else ("model",):
                if scale in summary.get("model", {}):
                    rank_zero_info(summary_text(summary, scale))
        self._log_attention()
        self._log_forecasts()

    def _log_attention(self) -> None:
        if self._attention_window is None or not isinstance(self.logger, WandbLogger):
            return
        from .plots import attention_figure

        maps = self.attention_maps(self._attention_window)[0].float().cpu().numpy()  # (C, N, N)
        names = getattr(self._dm(), "feature_names", None) or [f"ch{i}" for i in range(maps.shape[0])]
        fig = attention_figure(maps, names, "attention over patches, last layer, first test window")
        self.logger.log_image(key="test/attention", images=[fig])

    def _log_forecasts(self) -> None:
        """Log the forecast of the first target against what happened, for a few windows of the first
        test batch, on the model's scale (the target's context drawn when it is an input channel)."""
        if self._forecast_windows is None or not isinstance(self.logger, WandbLogger):
            return
        from .plots import forecast_figure

        x, y, pred = (t.float().cpu().numpy() for t in self._forecast_windows)  # (W, L, C), (W, F, K), (W, F, K)
        past = x[..., self.target_channels[0]] if self.target_channels else None  # (W, L)
        names = getattr(self._dm(), "target_names", None) or ["target"]
        fig = forecast_figure(past, y[..., 0], pred[..., 0], names[0], "test forecasts (first test batch, model scale)")
        self.logger.log_image(key="test/forecast", images=[fig])

    # ------------------------------------------------------------------ predict

    def on_predict_epoch_start(self) -> None:
        self._predictions = []

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """Forecast the F bars after each window: model scale ``pred`` (B, F, K), original units
        ``pred_orig`` and, for returns, ``price`` (B, F)."""
        x = batch["x"]
        self._check_batch(x, None)
        pred = self(x)  # (B, F, K)
        out = {"pred": pred}
        dm = self._dm()
        ticker = batch.get("ticker")
        if ticker is not None:
            out["ticker"] = ticker
        if "time" in batch:
            out["time"] = batch["time"]
        if dm is not None and hasattr(dm, "inverse_targets"):
            out["pred_orig"] = dm.inverse_targets(pred, ticker)
            if self.returns_target and hasattr(dm, "rebuild_prices") and "anchor" in batch:
                out["price"] = dm.rebuild_prices(out["pred_orig"][..., 0].double(), batch["anchor"].double())
        self._predictions.append({k: v.detach().cpu() for k, v in out.items()})
        return out

    def on_predict_epoch_end(self) -> None:
        if self.trainer.world_size > 1:  # each process forecast its share of the windows: one file, in order
            self._predictions = _merge_windows(gather_objects(self._predictions), predict_size(self.trainer))
        if self._predictions and self._dm() is not None and self.trainer.is_global_zero:
            write_forecast(self, self._dm(), self._predictions, self._output_dir())

    def _output_dir(self) -> Path:
        if self.hparams.output_dir:
            return Path(self.hparams.output_dir)
        root = self.trainer.default_root_dir if self._trainer is not None else "."
        return Path(root) / "predictions"

    # ------------------------------------------------------------------ checkpoint

    #: The data's scaling, kept in checkpoints and exports so that forecasts can be mapped back to
    #: original units without the DataModule: feature/target names, target kind, ticker names and the
    #: training statistics ``feature_mean``/``feature_std`` (n_tickers, C), ``target_mean``/``target_std``
    #: (n_tickers, K) as nested lists: original = model scale * std[ticker] + mean[ticker].
    data_scale: dict[str, Any] | None = None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        dm = self._dm()
        if dm is not None and getattr(dm, "target_mean", None) is not None:
            self.data_scale = {
                "feature_names": list(getattr(dm, "feature_names", None) or []),
                "target_names": list(getattr(dm, "target_names", None) or []),
                "target_kind": getattr(dm, "target_kind", None),
                "ticker_names": [str(t) for t in getattr(dm, "ticker_names", None) or []],
                **{k: torch.as_tensor(getattr(dm, k)).double().tolist()
                   for k in ("feature_mean", "feature_std", "target_mean", "target_std") if hasattr(dm, k)},
            }  # plain lists and strings: loads with weights_only=True
        if self.data_scale is not None:
            checkpoint["data_scale"] = self.data_scale

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.data_scale = checkpoint.get("data_scale")

    # ------------------------------------------------------------------ optimisation

    def configure_optimizers(self) -> Any:
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.hparams.lr,
        )
        if self.hparams.scheduler == "constant":
            return optimizer
        if self.hparams.scheduler == "decay":  # PatchTST's "type3": the peak for 3 epochs, then x0.9 per epoch
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.9 ** max(epoch - 2, 0))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        if self.hparams.scheduler == "onecycle":
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr, total_steps=total,
                                                            pct_start=0.3)
        else:
            warmup = min(self.hparams.warmup_steps, total // 2)
            schedule = partial(warmup_cosine, warmup_steps=warmup, total_steps=total)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


# ---------------------------------------------------------------------- summary and output


def summary_text(summary: dict[str, dict[str, dict[str, float]]], scale: str) -> str:
    """A plain-text table of the model and the baselines on ``scale`` and one line per baseline
    saying whether the model beats it: lower MSE and lower MAE ("beats"), neither ("does NOT beat"),
    or only one of them."""
    unit = {"model": "model scale", "orig": "original units", "price": "prices"}[scale]
    rows = [(name, r[scale]) for name, r in summary.items() if scale in r]
    lines = [f"Test windows, {unit}:", f"{'':14s}" + "".join(f"{m:>12s}" for m in SUMMARY_METRICS)]
    for name, values in rows:
        lines.append(f"{name:14s}" + "".join(f"{values.get(m, float('nan')):12.5g}" for m in SUMMARY_METRICS))
    model = summary["model"].get(scale, {})
    for name, values in rows:
        if name == "model" or not model:
            continue
        wins = [m.upper() for m in ("mse", "mae") if model[m] < values[m]]
        if len(wins) == 2:
            verdict = f"beats {name}"
        elif wins:
            verdict = f"beats {name} on {wins[0]} only"
        else:
            verdict = f"does NOT beat {name}"
        lines.append(
            f"model {verdict}: MSE {model['mse']:.5g} vs {values['mse']:.5g}, "
            f"MAE {model['mae']:.5g} vs {values['mae']:.5g}"
        )
    return "\n".join(lines)


def write_forecast(model: KLineForecaster, dm: Any, predictions: list[dict[str, Tensor]], output_dir: Path) -> Path:
    """Write ``forecast.csv`` (one row per ticker and future bar, original units, rebuilt closes) and a
    candlestick chart per ticker with the forecast overlaid; log the charts to wandb under a
    WandbLogger. Returns the CSV path."""
    from .plots import candlestick_figure

    output_dir.mkdir(parents=True, exist_ok=True)
    Fh = model.hparams.horizon
    target_names = list(getattr(dm, "target_names", None) or [f"target{k}" for k in range(model.hparams.n_targets)])
    frames = []
    figures = []
    for part in predictions:
        B = part["pred"].shape[0]
        for b in range(B):
            ticker_id = int(part["ticker"][b]) if "ticker" in part else 0
            ticker = _ticker_name(dm, ticker_id)
            stamps = _future_timestamps(dm, Fh, ticker_id, part, b)
            values = part.get("pred_orig", part["pred"])[b].double().numpy()  # (F, K)
            frame = pd.DataFrame({"ticker": ticker, "timestamp": stamps, "step": np.arange(1, Fh + 1)})
            for k, name in enumerate(target_names):
                frame[f"pred_{name}"] = values[:, k]
            if "price" in part:
                frame["close"] = part["price"][b].numpy()
            frames.append(frame)
            bars = _recent_bars(dm, ticker_id, model.hparams.plot_bars)
            closes = frame["close"] if "close" in frame else frame.get("pred_close")
            if bars is not None and closes is not None:
                fig = candlestick_figure(bars, stamps, closes.to_numpy(), title=f"{ticker}: next {Fh} bars")
                path = output_dir / f"forecast_{_safe(ticker)}.png"
                fig.savefig(path)
                figures.append((ticker, fig))
    table = pd.concat(frames, ignore_index=True)
    csv = output_dir / "forecast.csv"
    table.to_csv(csv, index=False)
    rank_zero_info(f"forecast of the next {Fh} bars written to {csv}")
    if isinstance(model.logger, WandbLogger) and figures:
        model.logger.log_image(key="predict/forecast", images=[f for _, f in figures], caption=[t for t, _ in figures])
    return csv


def _merge_windows(parts: list[list[dict[str, Tensor]]], n: int | None = None) -> list[dict[str, Tensor]]:
    """Every process's prediction batches (``parts[rank]``) as one batch of the ``n`` windows in input
    order: process r forecast windows r, r + R, ... (the strided, unrepeated prediction sampler)."""
    shares = [[{k: v[b] for k, v in batch.items()} for batch in batches for b in range(len(batch["pred"]))]
              for batches in parts]
    windows = interleave(shares, n)
    if not windows:
        return []
    return [{k: torch.stack([w[k] for w in windows]) for k in windows[0]}]  # (W, ...) per key


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "series"


def _ticker_name(dm: Any, ticker_id: int) -> str:
    names = getattr(dm, "ticker_names", None)
    if names is not None and 0 <= ticker_id < len(names):
        return str(names[ticker_id])
    return str(ticker_id)


def _future_timestamps(dm: Any, n: int, ticker_id: int, part: dict[str, Tensor], b: int) -> pd.DatetimeIndex:
    fn = getattr(dm, "future_timestamps", None)
    if fn is not None:
        try:
            return pd.DatetimeIndex(fn(n, ticker_id))
        except TypeError:
            return pd.DatetimeIndex(fn(n))
    # the data cannot say when its next bars fall: leave the timestamps empty rather than guess
    log.warning("the DataModule has no future_timestamps(n, ticker); forecast timestamps are left empty")
    return pd.DatetimeIndex([pd.NaT] * n)


def _recent_bars(dm: Any, ticker_id: int, n: int) -> pd.DataFrame | None:
    """The last ``n`` bars (timestamp, open, high, low, close) of the predict data of one ticker."""
    fn = getattr(dm, "recent_bars", None)
    if fn is not None:
        return fn(n, ticker_id)
    h = getattr(dm, "hparams", {})
    path = h.get("predict_path") or h.get("path")
    if path is None or "columns" not in h:  # not K-line bars (e.g. a multivariate CSV): no candles to draw
        return None
    from .data import _resolve
    from .io import read_bars

    frame = read_bars(_resolve(path), columns=h.get("columns"), ticker_column=h.get("ticker_column"),
                      on_error=h.get("on_error", "error"), max_gap=h.get("max_gap"))
    names = list(pd.unique(frame["ticker"]))
    wanted = _ticker_name(dm, ticker_id)
    name = wanted if wanted in names else names[0] if len(names) == 1 else None
    if name is None:
        return None
    return frame[frame["ticker"] == name].tail(n).reset_index(drop=True)
