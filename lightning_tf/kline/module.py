"""KLineForecaster: the LightningModule that trains, evaluates and applies a :class:`~.network.PatchTST`.

The network forecasts on the data's model scale (standardised by the DataModule's training
statistics). What the model must know of its data arrives once, in :meth:`KLineForecaster.setup`: the
sizes (checked), the target channels (adopted when not given) and the :class:`~.scale.DataScale`, kept in
every checkpoint, so that a loaded model reports and forecasts in original units and prices on its own.
Validation and test score the forecast on the model scale, in original units and, for return targets,
on the closes rebuilt from the returns (:mod:`.summary`); testing also scores the baselines of
:mod:`.baselines` on the same windows and says, in plain words, whether the model beats each. Forecasts
of ``predict`` are written by :class:`~.writer.ForecastWriter`.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torch.utils.data import DataLoader

from lightning_tf.core import NormName, PositionalName
from lightning_tf.training import SchedulerName, build_scheduler, check_agreement, parameter_groups

from .baselines import DLinearBaseline
from .metrics import ForecastMetrics
from .network import PatchTST
from .scale import DataScale, rebuild_prices
from .summary import BASELINES, SCALES, baseline_forecasts, naive_model_scale, score, summary_text
from .writer import ForecastWriter

__all__ = ["KLineForecaster"]

log = logging.getLogger(__name__)


class KLineForecaster(LightningModule):
    """Patch Transformer forecaster with RevIN and a direct multi-horizon head.

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
        betas: AdamW betas.
        scheduler: ``cosine`` (linear warmup, cosine decay to ``min_lr``), ``onecycle`` (OneCycleLR,
            30% rise), ``decay`` (PatchTST's default: ``lr`` for 3 epochs, then x0.9 per epoch),
            ``constant`` (linear warmup, then ``lr``) or ``noam`` (see
            :func:`lightning_tf.training.build_scheduler`).
        warmup_steps: linear warmup steps of ``cosine``, ``constant`` and ``noam`` (at most half of the run).
        min_lr: the rate the cosine schedule ends at.
        baselines: score the baselines on the test windows and print the comparison; DLinear's
            closed-form weights are fit when training starts and saved with the model.
        dlinear_kernel: moving-average window of the DLinear baseline's trend.
    """

    # ONNX export (lightning_tf.export): the graph's input and output names; axis 0 (the batch) is dynamic
    onnx_input_names: list[str] = ["context"]
    onnx_output_names: list[str] = ["forecast"]

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
        betas: tuple[float, float] = (0.9, 0.999),
        scheduler: SchedulerName = "cosine",
        warmup_steps: int = 50,
        min_lr: float = 0.0,
        baselines: bool = True,
        dlinear_kernel: int = 25,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = PatchTST(
            n_features, n_targets, context_len, horizon, target_channels, channel_mixing=channel_mixing,
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
        for name in BASELINES:
            for scale in SCALES:
                self.metrics[f"test_{name}_{scale}"] = ForecastMetrics()
        # fit when training starts; buffers, so checkpoints (and test --ckpt_path) keep them
        self.dlinear = DLinearBaseline(context_len, horizon, dlinear_kernel, n_targets=n_targets) if baselines else None
        self.data_scale: DataScale | None = None  # the data's scaling, from setup or a checkpoint
        self.test_summary: dict[str, Any] = {}
        self._attention_window: Tensor | None = None
        self._forecast_windows: tuple[Tensor, Tensor, Tensor] | None = None  # x, y, pred of a few test windows

    @property
    def target_channels(self) -> list[int] | None:
        """Index among the input channels of each target (given, or adopted from the data in ``setup``;
        saved in checkpoints)."""
        return self.net.target_channels

    @target_channels.setter
    def target_channels(self, channels: list[int] | None) -> None:
        self.net.target_channels = channels

    @property
    def example_input_array(self) -> Tensor:
        """One context window ``(1, L, C)`` of zeros on the CPU: the input that ONNX export traces and the
        model summary runs."""
        return torch.zeros(1, self.hparams.context_len, self.hparams.n_features)  # (1, L, C)

    # ------------------------------------------------------------------ model

    def forward(self, x: Tensor) -> Tensor:
        """Forecast ``(B, F, K)`` on the model scale from the context ``x`` (B, L, C)."""
        return self.net(x)

    @torch.no_grad()
    def attention_maps(self, x: Tensor, layer: int = -1) -> Tensor:
        """Attention over patches of ``layer`` averaged over heads, ``(B, C, N, N)``, in eval mode."""
        was_training = self.training
        self.eval()
        _, weights = self.net.forward_with_attention(x)  # n_layers x (B, C, H, N, N)
        self.train(was_training)
        return weights[layer].mean(dim=2)  # (B, C, N, N)

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
        if self.hparams.loss == "huber":
            return F.huber_loss(pred, y, delta=self.hparams.huber_delta)
        return F.mse_loss(pred, y)

    def _score(self, key: str, batch: dict[str, Tensor], forecast: Tensor, naive: Tensor | None, **kw: Any) -> None:
        score(self.metrics, key, batch, forecast, naive, scale=self.data_scale, returns=self.returns_target,
              horizon=self.hparams.horizon, **kw)

    def _shared_step(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        x, y = batch["x"], batch["y"]
        self._check_batch(x, y)
        pred = self(x)  # (B, F, K)
        loss = self._loss(pred, y)
        # a float batch size: Lightning averages the summed count over processes in its dtype, and an integer
        # count truncates (73.5 -> 73) when the processes scored different numbers of windows (Lightning #21859)
        self.log(f"{stage}/loss", loss, prog_bar=True, batch_size=float(x.shape[0]), sync_dist=stage != "train")
        naive = naive_model_scale(x, self.hparams.horizon, self.target_channels, self.returns_target)
        self._score(f"{stage}_", batch, pred, naive, original=stage != "train")
        if stage == "test":
            if self._attention_window is None:
                self._attention_window = x[:1].detach()  # the first test window, for the attention image
            if self._forecast_windows is None and isinstance(self.logger, WandbLogger):
                pick = torch.linspace(0, x.shape[0] - 1, min(4, x.shape[0]), device=x.device).long()  # (W,)
                self._forecast_windows = (x[pick].detach(), y[pick].detach(), pred[pick].detach())
            if self.hparams.baselines:
                self._score_baselines(batch, naive)
        return loss

    def _score_baselines(self, batch: dict[str, Tensor], naive: Tensor | None) -> None:
        forecasts = baseline_forecasts(batch, self.hparams.horizon, self.target_channels, self.returns_target)
        if self.dlinear is not None and self.dlinear.fitted:
            forecasts["dlinear"] = (self.dlinear(batch["x"]), True)
        for name, (forecast, model_scale) in forecasts.items():
            self._score(f"test_{name}_", batch, forecast, naive, model_scale=model_scale)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "test")

    # ------------------------------------------------------------------ the DLinear baseline

    def on_train_start(self) -> None:
        """Fit the DLinear baseline once, before the first step: closed form on every training window,
        the ridge chosen on the validation windows (when the trainer validates). Every process reads all
        windows in order, so all fit the same map. A run resumed from a checkpoint keeps its weights."""
        if self.dlinear is None or (self.dlinear.fitted and self.trainer.ckpt_path is not None):
            return
        train = _in_order(self.trainer.train_dataloader)
        if train is None:
            log.info("DLinear baseline not fitted: the training loader has no dataset to read in order")
            return
        val = _in_order(self.trainer.val_dataloaders)
        self.dlinear.target_channels = self.target_channels
        self.dlinear.fit(_pairs(train), None if val is None else _pairs(val))
        log.info(
            "DLinear baseline fit on the training windows (%s mode, ridge %s)", self.dlinear.mode, self.dlinear.ridge
        )

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
        self._attention_window = None
        self._forecast_windows = None
        if self.hparams.baselines and self.dlinear is not None and not self.dlinear.fitted:
            log.info("DLinear baseline skipped: it is fit when training starts, and this model was never trained")

    def on_test_epoch_end(self) -> None:
        summary: dict[str, dict[str, dict[str, float]]] = {}
        for name in ("model", *BASELINES):
            stem = "test/" if name == "model" else f"test/{name}/"
            key = "test" if name == "model" else f"test_{name}"
            scales = {scale: self._log_metrics(f"{key}_{scale}", stem if scale == "model" else f"{stem}{scale}/")
                      for scale in SCALES}
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
        names = list(self.data_scale.feature_names) if self.data_scale else [f"ch{i}" for i in range(maps.shape[0])]
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
        names = list(self.data_scale.target_names) if self.data_scale else ["target"]
        fig = forecast_figure(past, y[..., 0], pred[..., 0], names[0], "test forecasts (first test batch, model scale)")
        self.logger.log_image(key="test/forecast", images=[fig])

    # ------------------------------------------------------------------ predict

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """Forecast the F bars after each window: ``pred`` (B, F, K) on the model scale and, with the data's
        scaling, ``pred_orig`` (B, F, K) in original units and, for returns of price data, ``price`` (B, F)
        (the rebuilt closes); the batch's ``ticker``, ``time`` and ``anchor`` (B,) as it carries them.
        Written by :class:`~.writer.ForecastWriter`."""
        x = batch["x"]
        self._check_batch(x, None)
        pred = self(x)  # (B, F, K)
        out = {"pred": pred}
        out.update({k: batch[k] for k in ("ticker", "time", "anchor") if k in batch})
        scale = self.data_scale
        if scale is not None:
            out["pred_orig"] = scale.inverse_targets(pred, batch.get("ticker"))  # (B, F, K)
            if scale.returns and scale.has_prices and "anchor" in batch:
                out["price"] = rebuild_prices(out["pred_orig"][..., 0].double(), batch["anchor"].double())  # (B, F)
        return out

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


def _in_order(loaders: Any) -> DataLoader | None:
    """A plain, unsharded, in-order loader over the dataset of a trainer's (first) loader, in its batch
    size; its own generator leaves the global random state (dropout, shuffling) untouched."""
    loader = loaders[0] if isinstance(loaders, (list, tuple)) and loaders else loaders
    dataset = getattr(loader, "dataset", None)
    if dataset is None or not hasattr(dataset, "__len__"):
        return None
    return DataLoader(dataset, batch_size=loader.batch_size or 1, collate_fn=loader.collate_fn,
                      generator=torch.Generator())


def _pairs(loader: DataLoader) -> Any:
    return ((b["x"], b["y"]) for b in loader)
