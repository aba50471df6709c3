"""ViTClassifier: the LightningModule that trains, evaluates and applies a :class:`~.vit.VisionTransformer`.

Training recipe of DeiT (Touvron et al. 2021) scaled down: AdamW with weight decay on the matrices
only, linear warmup then cosine decay per step, label smoothing or the soft targets of Mixup/CutMix,
stochastic depth.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from lightning.pytorch.loggers import WandbLogger
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from lightning_tf.training import warmup_cosine
from lightning_tf.distributed import gather_objects, interleave, predict_size

from .vit import PoolName, PosEmbedName, PresetName, VisionTransformer, preset_config

__all__ = ["ViTClassifier"]

log = logging.getLogger(__name__)

# parameters that are not weight matrices but still have >= 2 dimensions: kept out of weight decay
NO_DECAY_NAMES = ("pos_embed", "cls_token")


class ViTClassifier(LightningModule):
    """Vision Transformer image classifier.

    The architecture comes from ``preset`` (see :data:`~.vit.PRESETS`); any size argument that is
    not None overrides the preset's value. ``num_classes``, ``in_chans`` and ``image_size`` must agree
    with the DataModule (checked in ``setup``; evaluation and prediction may use another image size,
    the learned position embedding is then resampled).

    Args:
        num_classes: classes K.
        in_chans: image channels C.
        preset: ``tiny``, ``small``, ``base`` (timm's ViT-Ti/S/B at 224), ``cpu28``, ``cpu32``,
            ``digits``, or None to give every size explicitly.
        image_size: training image side; default from the preset.
        patch_size: patch side; must divide ``image_size``; default from the preset.
        d_model: width D; default from the preset.
        n_heads: attention heads H; default from the preset.
        n_layers: encoder layers; default from the preset.
        d_ff: feed-forward width; default from the preset (else ``4 * d_model``).
        pool: ``cls`` (class token) or ``mean`` (mean of the patch tokens).
        class_token: prepend a class token; defaults to ``pool == "cls"``.
        pos_embed: ``learned``, ``sincos2d`` or ``none``.
        dropout: dropout on the embeddings and every residual branch.
        attn_dropout: dropout on the attention weights.
        drop_path: stochastic depth rate of the last layer (0 for the first, linear in between).
        layer_scale: initial LayerScale value; None disables LayerScale.
        head_dropout: dropout before the classification head.
        lr: peak AdamW learning rate.
        weight_decay: AdamW weight decay of the weight matrices (not of norms, biases, LayerScale,
            position embedding, class token).
        betas: AdamW betas.
        warmup_steps: linear warmup steps, then cosine decay to ``min_lr`` at the last step.
        min_lr: final learning rate.
        label_smoothing: label smoothing of the cross-entropy on hard labels (soft Mixup/CutMix
            targets already carry the DataModule's smoothing).
        top_k: classes per image in the prediction CSV (not saved in checkpoints).
        output_file: CSV written by ``predict``; default: ``predictions.csv`` in the run directory
            (``trainer.log_dir``: the logger's directory, else ``trainer.default_root_dir``); a path you
            give is used as given (relative to the working directory); empty: none (not saved in
            checkpoints).
        attention_images: validation images whose attention maps are logged to wandb (only with a
            WandbLogger; 0 disables).
        attention_every_n_epochs: log the attention maps every this many epochs (and after the last).
    """

    def __init__(
        self,
        num_classes: int = 10,
        in_chans: int = 1,
        preset: PresetName | None = "digits",
        image_size: int | None = None,
        patch_size: int | None = None,
        d_model: int | None = None,
        n_heads: int | None = None,
        n_layers: int | None = None,
        d_ff: int | None = None,
        pool: PoolName = "cls",
        class_token: bool | None = None,
        pos_embed: PosEmbedName = "learned",
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        drop_path: float = 0.0,
        layer_scale: float | None = None,
        head_dropout: float = 0.0,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        betas: tuple[float, float] = (0.9, 0.999),
        warmup_steps: int = 100,
        min_lr: float = 1e-6,
        label_smoothing: float = 0.0,
        top_k: int = 5,
        output_file: str | None = None,
        attention_images: int = 4,
        attention_every_n_epochs: int = 5,
    ) -> None:
        super().__init__()
        arch: dict[str, Any] = preset_config(preset) if preset is not None else {}
        given = dict(
            image_size=image_size, patch_size=patch_size, d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=d_ff
        )
        arch.update({k: v for k, v in given.items() if v is not None})
        missing = [k for k in ("image_size", "patch_size", "d_model", "n_heads", "n_layers") if k not in arch]
        if missing:
            raise ValueError(f"preset is None, so {', '.join(missing)} must be given")
        # saved resolved (the preset's size when None), so that a checkpoint rebuilds this model
        image_size = arch["image_size"]
        # what to write at prediction time is not part of the model: kept out of the checkpoint, so that
        # `lightning-tf predict --ckpt_path ... --model.output_file ...` is not overridden by it
        self.save_hyperparameters(ignore=["top_k", "output_file"])
        if self.hparams.get("image_size") is None:  # built by LightningCLI, which saves the given None
            self.hparams["image_size"] = image_size
        self.top_k, self.output_file = top_k, output_file
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        self.net = VisionTransformer(
            in_chans=in_chans, num_classes=num_classes, pool=pool, class_token=class_token, pos_embed=pos_embed,
            dropout=dropout, attn_dropout=attn_dropout, drop_path=drop_path, layer_scale=layer_scale,
            head_dropout=head_dropout, **arch,
        )
        self.class_names: list[str] = [str(i) for i in range(num_classes)]
        self.mean: list[float] | None = None  # the DataModule's normalisation, to draw attention maps
        self.std: list[float] | None = None

        def stage_metrics() -> MetricCollection:
            metrics: dict[str, Any] = {"acc": MulticlassAccuracy(num_classes, average="micro")}
            if num_classes >= 10:
                metrics["top5"] = MulticlassAccuracy(num_classes, top_k=5, average="micro")
            return MetricCollection(metrics)

        self.train_metrics = stage_metrics()
        self.val_metrics = stage_metrics()
        self.test_metrics = stage_metrics()
        self.val_class_acc = MulticlassAccuracy(num_classes, average=None)
        self.test_class_acc = MulticlassAccuracy(num_classes, average=None)
        self.test_confusion = MulticlassConfusionMatrix(num_classes)
        self._attention_batch: Tensor | None = None
        self._predictions: list[dict[str, Any]] = []

    # ----------------------------------------------------------------- construction helpers
    @classmethod
    def from_timm(
        cls,
        name_or_model: str | nn.Module,
        num_classes: int | None = None,
        weights: str | Path | None = None,
        image_size: int | None = None,
        **hparams: Any,
    ) -> ViTClassifier:
        """Our classifier with the architecture and weights of a timm ``VisionTransformer``.

        Args:
            name_or_model: a timm model name (built locally with ``pretrained=False``: nothing is
                downloaded) or a timm ``VisionTransformer`` instance.
            num_classes: a new class count: the head is re-initialised, the body keeps its weights.
            weights: a ``.safetensors`` or torch state-dict file for that timm model (e.g. from the
                Hugging Face hub, fetched by the user); its position table is resampled to the model.
            image_size: a new training resolution; the learned position table is resampled to it.
            hparams: further :class:`ViTClassifier` arguments (``lr``, ``drop_path``, ``label_smoothing``, ...).
        """
        from .timm_interop import load_timm_model, resize_model, timm_config, timm_to_ours

        timm_model = load_timm_model(name_or_model, weights)
        config = timm_config(timm_model)
        eps = config.pop("layer_norm_eps")
        if eps != 1e-6:
            raise ValueError(f"timm model has layer norm eps {eps}; ViTClassifier uses 1e-6")
        source_classes = config["num_classes"]
        num_classes = source_classes if num_classes is None else num_classes
        net = timm_to_ours(timm_model)[0]
        if image_size is not None and image_size != config["image_size"]:
            resize_model(net, image_size)  # the position table resampled to the new grid
            config["image_size"] = image_size
        model = cls(**{**config, "num_classes": num_classes}, preset=None, **hparams)
        state = net.state_dict()
        if num_classes != source_classes:  # head reset: the new head keeps its fresh initialisation
            state = {k: v for k, v in state.items() if not k.startswith("head.")}
        missing, unexpected = model.net.load_state_dict(state, strict=False)
        assert not unexpected and all(k.startswith("head.") for k in missing), (missing, unexpected)
        return model

    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None:
            return
        hp = self.hparams
        for name, ours in (("num_classes", hp.num_classes), ("in_chans", hp.in_chans)):
            theirs = getattr(dm, name, None)
            if theirs is not None and theirs != ours:
                raise ValueError(f"model {name} ({ours}) differs from the DataModule's {name} ({theirs})")
        theirs = getattr(dm, "image_size", None)
        if isinstance(theirs, (tuple, list)):
            theirs = theirs[0] if len(set(theirs)) == 1 else tuple(theirs)
        size, patch = self.net.image_size, self.net.patch_size
        if theirs is not None and theirs != size:
            if stage == "fit":
                raise ValueError(f"model image_size ({size}) differs from the DataModule's image_size ({theirs})")
            if isinstance(theirs, int) and theirs % patch:
                raise ValueError(f"patch_size ({patch}) must divide the DataModule's image_size ({theirs})")
            log.info("evaluating at %s pixels, trained at %s: position embedding resampled", theirs, size)
        if hasattr(dm, "check_patch_size"):
            dm.check_patch_size(self.net.patch_size)
        if getattr(dm, "class_names", None):
            self.class_names = [str(c) for c in dm.class_names]
        self.mean = [float(m) for m in dm.mean] if getattr(dm, "mean", None) is not None else None
        self.std = [float(s) for s in dm.std] if getattr(dm, "std", None) is not None else None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["class_names"] = list(self.class_names)  # plain strings: loads with weights_only=True
        checkpoint["normalization"] = {"mean": self.mean, "std": self.std}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.class_names = list(checkpoint.get("class_names", self.class_names))
        norm = checkpoint.get("normalization") or {}
        self.mean, self.std = norm.get("mean"), norm.get("std")

    # ------------------------------------------------------------------------------ forward
    def forward(self, images: Tensor) -> Tensor:
        """Logits: ``(B, C, H, W)`` normalised images -> ``(B, K)``."""
        return self.net(images)

    def _shared_step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        images, target = batch[0], batch[1]
        logits = self(images)  # (B, K)
        if target.is_floating_point():  # soft targets (B, K) from Mixup/CutMix
            loss = torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()
            labels = target.argmax(dim=-1)  # (B,) the dominant class, for the accuracy
        else:
            smoothing = self.hparams.label_smoothing if stage == "train" else 0.0
            loss = F.cross_entropy(logits, target, label_smoothing=smoothing)
            labels = target
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{stage} loss is {loss.item()} at step {self.global_step}")
        B = images.shape[0]
        metrics = getattr(self, f"{stage}_metrics")
        metrics(logits, labels)
        # a float batch size: Lightning averages the summed count over processes in its dtype, and an integer
        # count truncates (179.5 -> 179) when the processes saw different numbers of images (Lightning #21859)
        self.log(f"{stage}/loss", loss, prog_bar=stage != "test", batch_size=float(B), sync_dist=stage != "train")
        self.log_dict({f"{stage}/{k}": m for k, m in metrics.items()}, prog_bar=True, batch_size=B)
        if stage != "train":
            getattr(self, f"{stage}_class_acc").update(logits, labels)
        if stage == "test":
            self.test_confusion.update(logits, labels)
        return loss

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        if batch_idx == 0 and self._want_attention_maps():
            self._attention_batch = batch[0][: self.hparams.attention_images].detach()
        return self._shared_step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "test")

    def _want_attention_maps(self) -> bool:
        if self.hparams.attention_images <= 0 or not isinstance(self.logger, WandbLogger):
            return False
        if self.trainer.sanity_checking:
            return False
        epoch, every = self.current_epoch + 1, max(self.hparams.attention_every_n_epochs, 1)
        return epoch % every == 0 or epoch == self.trainer.max_epochs or epoch == 1

    def _log_class_accuracy(self, stage: str) -> Tensor:
        metric = getattr(self, f"{stage}_class_acc")
        per_class = metric.compute()  # (K,)
        with metric.sync_context():  # every process's counts (compute() put back this process's own)
            support = (metric.tp + metric.fn).tolist()  # (K,) images of each class seen
        metric.reset()
        # a class absent from the split has no accuracy (torchmetrics reports 0): not logged
        self.log_dict(
            {f"{stage}/acc_class/{name}": acc for name, acc, n in zip(self.class_names, per_class, support) if n > 0}
        )
        return per_class

    def on_validation_epoch_end(self) -> None:
        self._log_class_accuracy("val")
        if isinstance(self.logger, WandbLogger) and self._attention_batch is not None:
            from .attention_maps import plot_attention

            fig = plot_attention(
                self.net, self._attention_batch, mean=self.mean, std=self.std, class_names=self.class_names
            )
            self.logger.log_image("val/attention", [fig], step=self.global_step)
            import matplotlib.pyplot as plt

            plt.close(fig)
        self._attention_batch = None

    def on_test_epoch_end(self) -> None:
        self._log_class_accuracy("test")
        if isinstance(self.logger, WandbLogger):
            import matplotlib.pyplot as plt

            fig = self.confusion_figure()
            self.logger.log_image("test/confusion_matrix", [fig], step=self.global_step)
            plt.close(fig)
        self.test_confusion.reset()

    def confusion_figure(self) -> Any:
        """The test confusion matrix so far as a matplotlib figure (rows: true class, columns: predicted)."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        K = self.hparams.num_classes
        labels = self.class_names if K <= 30 else None
        fig, _ = self.test_confusion.plot(labels=labels, add_text=K <= 20)
        fig.set_size_inches(max(4.0, 0.45 * K), max(4.0, 0.45 * K))
        fig.tight_layout()
        return fig

    # ---------------------------------------------------------------------------- predict
    def predict_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """Top-k classes and probabilities of a predict batch: ImageDataModule's dict
        ``{"image", "path", "target"}``, an ``(images, ...)`` tuple or an image tensor."""
        paths: list[str] | None = None
        target: Tensor | None = None
        index: Any = None
        if isinstance(batch, dict):
            images, paths, target = batch["image"], batch.get("path"), batch.get("target")
            index = batch.get("index")  # the dataset position: restores the input order across processes
        elif isinstance(batch, (tuple, list)):
            images = batch[0]
        else:
            images = batch
        probs = self(images).softmax(dim=-1)  # (B, K)
        top_p, top_i = probs.topk(min(self.top_k, probs.shape[-1]), dim=-1)  # (B, k) each
        out: dict[str, Any] = {"classes": top_i.cpu(), "probs": top_p.cpu()}
        if paths is None:  # images without names are numbered in prediction order (renumbered after a gather)
            start = sum(len(p["file"]) for p in self._predictions)
            paths = [str(i) for i in range(start, start + len(images))]
            out["numbered"] = True
        out["file"] = list(paths)
        if target is not None:
            out["target"] = target.cpu()
        if index is not None:
            out["index"] = torch.as_tensor(index).cpu()
        self._predictions.append(out)
        return out

    def on_predict_epoch_start(self) -> None:
        self._predictions = []

    def on_predict_epoch_end(self) -> None:
        if self.trainer.world_size > 1:  # each process classified its share of the images
            self._predictions = _merge_predictions(gather_objects(self._predictions), predict_size(self.trainer))
        out = self.prediction_file()
        if out is not None and self.trainer.is_global_zero:  # one file, written once
            self.write_predictions(out)

    def prediction_file(self) -> Path | None:
        """Where ``predict`` writes its CSV: ``output_file`` as given, by default ``predictions.csv`` in
        the run directory (``trainer.log_dir``); None when ``output_file`` is empty."""
        if self.output_file is not None:
            return Path(self.output_file) if self.output_file else None
        run_dir = self.trainer.log_dir if self._trainer is not None else None
        return Path(run_dir or ".") / "predictions.csv"

    def write_predictions(self, output_file: str | Path) -> Path:
        """Write the collected predictions as CSV, one row per image in prediction order:
        ``file, top1_class, top1_prob, ..., topk_class, topk_prob`` (and ``label``, the true class,
        when the images have one)."""
        import pandas as pd

        if not self._predictions:
            raise RuntimeError("no predictions collected: run trainer.predict first")
        classes = torch.cat([p["classes"] for p in self._predictions])  # (n, k)
        probs = torch.cat([p["probs"] for p in self._predictions])  # (n, k)
        rows: dict[str, list[Any]] = {"file": [f for p in self._predictions for f in p["file"]]}
        for j in range(classes.shape[1]):
            rows[f"top{j + 1}_class"] = [self.class_names[c] for c in classes[:, j].tolist()]
            rows[f"top{j + 1}_prob"] = [round(p, 6) for p in probs[:, j].tolist()]
        if all("target" in p for p in self._predictions):
            target = torch.cat([p["target"] for p in self._predictions]).tolist()
            if min(target) >= 0:
                rows["label"] = [self.class_names[t] for t in target]
        out = Path(output_file)
        out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(out, index=False)
        print(f"wrote {len(classes)} predictions to {out}")
        return out

    # -------------------------------------------------------------------------- optimizer
    def parameter_groups(self) -> tuple[list[str], list[str]]:
        """Names of the parameters with and without weight decay: decay on weight matrices (linear
        and patch-projection kernels), none on norms, biases, LayerScale, position embedding, class token."""
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            if p.ndim <= 1 or name.rsplit(".", 1)[-1] in NO_DECAY_NAMES:
                no_decay.append(name)
            else:
                decay.append(name)
        return decay, no_decay

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        params = dict(self.named_parameters())
        decay, no_decay = self.parameter_groups()
        optimizer = torch.optim.AdamW(
            [
                {"params": [params[n] for n in decay], "weight_decay": hp.weight_decay},
                {"params": [params[n] for n in no_decay], "weight_decay": 0.0},
            ],
            lr=hp.lr,
            betas=tuple(hp.betas),
        )
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        warmup = min(hp.warmup_steps, total // 2)
        floor = min(hp.min_lr / hp.lr, 1.0) if hp.lr > 0 else 0.0

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(warmup_cosine, warmup_steps=warmup,
                                                                          total_steps=total, floor=floor))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _merge_predictions(parts: list[list[dict[str, Any]]], n: int | None = None) -> list[dict[str, Any]]:
    """Every process's prediction batches (``parts[rank]``) as one batch in input order, each image once.

    Batches that carry the dataset ``index`` (ImageDataModule's) are sorted by it, and an image that a
    padding sampler gave to two processes is kept once; other batches are put back in order from the
    strided shares of Lightning's prediction sampler (process r holds images r, r + R, ... of ``n``).
    """
    shares = [
        [
            (b["file"][i], b["classes"][i], b["probs"][i], b.get("target", [None] * len(b["file"]))[i],
             int(b["index"][i]) if "index" in b else None, "numbered" in b)
            for b in batches
            for i in range(len(b["file"]))
        ]
        for batches in parts
    ]
    rows = [row for share in shares for row in share]
    if rows and all(row[4] is not None for row in rows):
        rows = list({row[4]: row for row in reversed(rows)}.values())  # one row per index
        rows.sort(key=lambda row: row[4])
    else:
        rows = interleave(shares, n)
        rows = [(str(n), *row[1:]) if row[5] else row for n, row in enumerate(rows)]
    if not rows:
        return []
    merged: dict[str, Any] = {
        "file": [row[0] for row in rows],
        "classes": torch.stack([row[1] for row in rows]),  # (n, k)
        "probs": torch.stack([row[2] for row in rows]),  # (n, k)
    }
    if all(row[3] is not None for row in rows):
        merged["target"] = torch.stack([torch.as_tensor(row[3]) for row in rows])  # (n,)
    if all(row[4] is not None for row in rows):
        merged["index"] = torch.tensor([row[4] for row in rows])  # (n,)
    return [merged]
