"""ViTClassifier: the LightningModule that trains, evaluates and applies a :class:`~.vit.VisionTransformer`.

Training recipe of DeiT (Touvron et al. 2021) scaled down: AdamW with weight decay on the matrices
only, linear warmup then cosine decay per step, label smoothing or the soft targets of Mixup/CutMix,
stochastic depth. ``predict`` returns class probabilities; :class:`~.writer.ClassificationWriter`
writes them to CSV. :meth:`ViTClassifier.classify` names the likely classes of image files, PIL images
or tensors straight from a loaded checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.loggers import WandbLogger
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from lightning_tf.core import evaluating
from lightning_tf.training import CheckedLoading, SchedulerName, check_agreement, configure_adamw, stamp
from lightning_tf.training.private.lightning import attached_trainer

from .inputs import ImageInput, as_image_list, prepare_images
from .vit import PoolName, PosEncodingName, PresetName, VisionTransformer, preset_config
from .writer import ClassificationWriter

__all__ = ["FreezeName", "ViTClassifier"]

FreezeName = Literal["none", "backbone", "first_n_blocks"]

log = logging.getLogger(__name__)


class ViTClassifier(CheckedLoading, LightningModule):
    """Vision Transformer image classifier.

    The architecture comes from ``preset`` (see :data:`~.vit.PRESETS`); any size argument that is
    not None overrides the preset's value. ``num_classes``, ``in_chans`` and ``image_size`` must agree
    with the data (checked in ``setup``; evaluation and prediction may use another image size that
    ``patch_size`` divides, the learned position embedding is then resampled). ``predict`` returns
    class probabilities, written to CSV by a :class:`~.writer.ClassificationWriter` (added unless
    the trainer already has a prediction writer). The class names, input shape and normalisation are
    saved in every checkpoint, so ``ViTClassifier.load_from_checkpoint(path).classify(images)`` works on
    its own.

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
        pos_encoding: ``learned`` (a trained table, the parameter ``pos_embed``), ``sincos2d`` or ``none``.
        dropout: dropout on the embeddings and every residual branch.
        attn_dropout: dropout on the attention weights.
        drop_path: stochastic depth rate of the last layer (0 for the first, linear in between).
        layer_scale: initial LayerScale value; None disables LayerScale.
        head_dropout: dropout before the classification head.
        lr: peak AdamW learning rate.
        weight_decay: AdamW weight decay of the weight matrices (not of norms, biases, LayerScale,
            position embedding, class token).
        betas: AdamW betas.
        scheduler: learning-rate schedule (see :func:`lightning_tf.training.build_scheduler`);
            ``cosine``: linear warmup, then cosine decay to ``min_lr`` at the last step.
        warmup_steps: linear warmup steps (at most half of the run).
        min_lr: final learning rate of ``cosine``.
        label_smoothing: label smoothing of the cross-entropy on hard labels (soft Mixup/CutMix
            targets already carry the DataModule's smoothing).
        attention_images: validation images whose attention maps are logged to wandb (only with a
            WandbLogger; 0 disables).
        attention_every_n_epochs: log the attention maps every this many epochs (and after the last).
        compile: compile the training and evaluation forward with torch.compile (the attention-map path
            and ``classify`` stay eager).
        pretrained: start from pretrained weights: a timm model name (fetched by timm through the Hugging
            Face hub or its cache), a timm checkpoint file (``.safetensors``/``.pth``; ``n_heads`` defaults
            to ``d_model // 64``), a folder of ``lightning-tf export`` or a ViT checkpoint (``.ckpt``). The
            architecture is the source's (``preset`` and the sizes are ignored, except ``n_heads`` for a
            file and ``image_size``); the head is re-initialised when ``num_classes`` differs, the
            position table resampled to ``image_size``, RGB weights summed for 1-channel images. The
            checkpoints of this model then hold the resolved architecture (they rebuild without the source).
        layer_decay: layer-wise learning-rate decay (BEiT): block ``i`` of ``n`` trains at
            ``lr * layer_decay ** (n - i)``, the embeddings at ``lr * layer_decay ** (n + 1)``, the head
            and final norm at ``lr``. None: one rate.
        freeze: ``none``; ``backbone`` (only the head trains: a linear probe); ``first_n_blocks`` (the
            embeddings and the first ``freeze_blocks`` blocks stay fixed).
        freeze_blocks: blocks frozen by ``freeze: first_n_blocks``.
    """

    # ONNX export (lightning_tf.export): the graph's input and output names; axis 0 (the batch) is dynamic
    onnx_input_names: list[str] = ["images"]
    onnx_output_names: list[str] = ["logits"]

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
        pos_encoding: PosEncodingName = "learned",
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        drop_path: float = 0.0,
        layer_scale: float | None = None,
        head_dropout: float = 0.0,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        betas: tuple[float, float] = (0.9, 0.999),
        scheduler: SchedulerName = "cosine",
        warmup_steps: int = 100,
        min_lr: float = 1e-6,
        label_smoothing: float = 0.0,
        attention_images: int = 4,
        attention_every_n_epochs: int = 5,
        compile: bool = False,
        pretrained: str | None = None,
        layer_decay: float | None = None,
        freeze: FreezeName = "none",
        freeze_blocks: int = 0,
    ) -> None:
        super().__init__()
        given = dict(
            image_size=image_size, patch_size=patch_size, d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=d_ff
        )
        weights: dict[str, Tensor] | None = None
        if pretrained is not None:
            from .pretrained import ARCH_KEYS, adapt_pretrained, resolve_pretrained

            source_arch, weights = resolve_pretrained(pretrained, n_heads=n_heads)
            target_size = image_size if image_size is not None else source_arch["image_size"]
            weights = adapt_pretrained(
                weights, source_arch, num_classes=num_classes, in_chans=in_chans, image_size=target_size
            )
            arch = {k: source_arch[k] for k in ("patch_size", "d_model", "n_heads", "n_layers", "d_ff")}
            ignored = {k: v for k, v in given.items() if k in arch and k != "n_heads" and v not in (None, arch[k])}
            if ignored:
                log.warning(
                    "pretrained=%s fixes the architecture: %s ignored (the source has %s)",
                    pretrained,
                    ignored,
                    {k: arch[k] for k in ignored},
                )
            arch["image_size"] = target_size
            pool, class_token = source_arch["pool"], source_arch["class_token"]
            pos_encoding, layer_scale = source_arch["pos_encoding"], source_arch["layer_scale"]
        else:
            arch = preset_config(preset) if preset is not None else {}
            arch.update({k: v for k, v in given.items() if v is not None})
        missing = [k for k in ("image_size", "patch_size", "d_model", "n_heads", "n_layers") if k not in arch]
        if missing:
            raise ValueError(f"preset is None, so {', '.join(missing)} must be given")
        # save_hyperparameters reads the arguments' local values: a model built in Python saves its resolved
        # size. LightningCLI saves the arguments as given (a None stays None); the saved preset then gives
        # the same size back, so a checkpoint rebuilds this model either way.
        image_size = arch["image_size"]
        self.save_hyperparameters()
        if pretrained is not None:
            # the checkpoints and exports rebuild the resolved architecture, without the source (their weights
            # replace the pretrained ones anyway)
            resolved = dict(
                arch, pool=pool, class_token=class_token, pos_encoding=pos_encoding, layer_scale=layer_scale
            )
            self.hparams.update(resolved, preset=None, pretrained=None)
            self.pretrained_from = str(pretrained)
            assert set(resolved) <= set(ARCH_KEYS)
        if layer_decay is not None and not 0.0 < layer_decay <= 1.0:
            raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
        if freeze not in get_args(FreezeName):
            raise ValueError(f"unknown freeze {freeze!r}; expected one of {list(get_args(FreezeName))}")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        if scheduler not in get_args(SchedulerName):
            raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {list(get_args(SchedulerName))}")
        self.net = VisionTransformer(
            in_chans=in_chans,
            num_classes=num_classes,
            pool=pool,
            class_token=class_token,
            pos_encoding=pos_encoding,
            dropout=dropout,
            attn_dropout=attn_dropout,
            drop_path=drop_path,
            layer_scale=layer_scale,
            head_dropout=head_dropout,
            **arch,
        )
        if weights is not None:
            missing_keys, unexpected = self.net.load_state_dict(weights, strict=False)
            if unexpected or any(not k.startswith("head.") for k in missing_keys):
                raise ValueError(
                    f"pretrained={pretrained!r} does not fit: missing {missing_keys[:6]}, unexpected {unexpected[:6]}"
                )
        self._freeze(freeze, freeze_blocks)
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
        self._attention_batch: tuple[Tensor, Tensor] | None = None  # validation images and their labels
        # torch.compile of self.net.forward (configure_model); a function, not a child module, so the
        # state-dict keys stay those of an eager run
        self._compiled_forward: Callable[[Tensor], Tensor] | None = None

    def _freeze(self, freeze: str, n_blocks: int) -> None:
        """``requires_grad=False`` for what ``freeze`` names (left out of the optimizer: no gradient, no step)."""
        if freeze == "none":
            return
        if freeze == "first_n_blocks" and not 0 <= n_blocks <= len(self.net.encoder.layers):
            raise ValueError(f"freeze_blocks ({n_blocks}) must be in [0, {len(self.net.encoder.layers)}] (n_layers)")
        for name, p in self.net.named_parameters():
            if freeze == "backbone":
                p.requires_grad_(name.startswith("head."))
            else:
                depth = self.layer_depth(f"net.{name}")
                p.requires_grad_(not (depth <= n_blocks))  # depth 0: the embeddings; i + 1: block i

    def layer_depth(self, name: str) -> int:
        """A parameter's depth for layer-wise decay: 0 for the embeddings (patch embedding, class token,
        position table), ``i + 1`` for encoder block ``i``, ``n_layers + 1`` for the final norm and the head."""
        name = name.removeprefix("net.")
        if name.startswith(("patch_embed.", "cls_token", "pos_embed")):
            return 0
        if name.startswith("encoder.layers."):
            return int(name.split(".")[2]) + 1
        return len(self.net.encoder.layers) + 1

    @property
    def example_input_array(self) -> Tensor:
        """One image of the training size, ``(1, in_chans, H, W)`` zeros on the CPU: the input that ONNX
        export traces and the model summary runs."""
        size = self.net.image_size
        return torch.zeros(1, self.net.in_chans, size, size)  # (1, C, H, W)

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
        """Check the model against its data and take what inference needs of it (class names,
        normalisation), from the DataModule's plain attributes."""
        dm = getattr(attached_trainer(self), "datamodule", None)
        if dm is None:
            return
        hp = self.hparams
        check_agreement("num_classes", hp.num_classes, getattr(dm, "num_classes", None))
        check_agreement("in_chans", hp.in_chans, getattr(dm, "in_chans", None))
        theirs = getattr(dm, "image_size", None)
        if isinstance(theirs, (tuple, list)):
            theirs = theirs[0] if len(set(theirs)) == 1 else tuple(theirs)
        size, patch = self.net.image_size, self.net.patch_size
        if stage == "fit":  # training fixes the size; evaluation and prediction may use another one
            check_agreement("image_size", size, theirs)
        if theirs is not None:
            if any(side % patch for side in (theirs if isinstance(theirs, tuple) else (theirs,))):
                raise ValueError(
                    f"image_size ({theirs}) must be divisible by patch_size ({patch}); "
                    f"set data.image_size to a multiple of {patch}"
                )
            if theirs != size:
                log.info("evaluating at %s pixels, trained at %s: position embedding resampled", theirs, size)
        # what the data does not know yet (predicting after the training folder moved) stays the model's:
        # a checkpoint restores it after setup
        if getattr(dm, "class_names", None):
            self.class_names = [str(c) for c in dm.class_names]
        if getattr(dm, "mean", None) is not None and getattr(dm, "std", None) is not None:
            self.mean, self.std = [float(m) for m in dm.mean], [float(s) for s in dm.std]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """What inference needs, as plain data (loads with ``weights_only=True``): the class names, the
        input shape ``[C, H, W]`` and the normalisation."""
        stamp(checkpoint)  # the package version and checkpoint format
        checkpoint["class_names"] = list(self.class_names)
        checkpoint["input_shape"] = [self.net.in_chans, self.net.image_size, self.net.image_size]
        checkpoint["normalization"] = {"mean": self.mean, "std": self.std}
        if getattr(self, "pretrained_from", None):
            checkpoint["pretrained_from"] = self.pretrained_from  # where the starting weights came from

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the class names and normalisation, after checking that this model was built for the
        checkpoint's classes and input shape (a CLI run whose data differs from the training data's
        builds another model)."""
        names = [str(c) for c in checkpoint.get("class_names", self.class_names)]
        shape = checkpoint.get("input_shape")
        ours = [self.net.in_chans, self.net.image_size, self.net.image_size]
        if len(names) != self.net.num_classes or (shape is not None and list(shape) != ours):
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            theirs = "x".join(map(str, shape)) if shape is not None else "?"
            raise ValueError(
                f"the checkpoint holds a model of {len(names)} classes ({shown}) for {theirs} images; this one was "
                f"built for {self.net.num_classes} classes and {'x'.join(map(str, ours))} images (num_classes, "
                "in_chans and image_size come from the data): use the training run's config.yaml"
            )
        self.class_names = names
        norm = checkpoint.get("normalization") or {}
        self.mean, self.std = norm.get("mean"), norm.get("std")

    def configure_model(self) -> None:
        """With ``compile``: compile the network's forward once, for the training and evaluation steps."""
        if self.hparams.get("compile", False) and self._compiled_forward is None:
            self._compiled_forward = torch.compile(self.net.forward)

    # ------------------------------------------------------------------------------ forward
    def forward(self, images: Tensor) -> Tensor:
        """Logits: ``(B, C, H, W)`` normalised images -> ``(B, K)``."""
        return self.net(images)

    def _shared_step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        images, target = batch[0], batch[1]
        logits = self(images) if self._compiled_forward is None else self._compiled_forward(images)  # (B, K)
        if target.is_floating_point():  # soft targets (B, K) from Mixup/CutMix
            loss = torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()
            labels = target.argmax(dim=-1)  # (B,) the dominant class, for the accuracy
        else:
            smoothing = self.hparams.label_smoothing if stage == "train" else 0.0
            loss = F.cross_entropy(logits, target, label_smoothing=smoothing)
            labels = target
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
            n = self.hparams.attention_images
            self._attention_batch = (batch[0][:n].detach(), batch[1][:n].detach())  # (n, C, H, W), (n,)
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

            images, labels = self._attention_batch
            if labels.is_floating_point():  # soft targets (B, K): the dominant class
                labels = labels.argmax(dim=-1)  # (B,)
            fig = plot_attention(
                self.net, images, mean=self.mean, std=self.std, class_names=self.class_names, labels=labels.tolist()
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
        if fig.get_layout_engine() is None:  # torchmetrics' figure may already have one
            fig.tight_layout()
        return fig

    # ---------------------------------------------------------------------------- predict
    def predict_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """Class probabilities of a predict batch: ImageDataModule's dict ``{"image", "path", "target",
        "index"}``, an ``(images, ...)`` tuple or an image tensor.

        Returns:
            ``{"probs": (B, K)}``, plus what the batch carries: ``"file"`` (its paths), ``"target"`` (B,)
            and ``"index"`` (B,), the dataset positions that put every process's share back in order.
        """
        out: dict[str, Any] = {}
        if isinstance(batch, dict):
            images = batch["image"]
            if batch.get("path") is not None:
                out["file"] = list(batch["path"])
            if batch.get("target") is not None:
                out["target"] = torch.as_tensor(batch["target"])  # (B,)
            if batch.get("index") is not None:
                out["index"] = torch.as_tensor(batch["index"])  # (B,)
        elif isinstance(batch, (tuple, list)):
            images = batch[0]
        else:
            images = batch
        out["probs"] = self(images).softmax(dim=-1)  # (B, K)
        return out

    @torch.no_grad()
    def classify(
        self, images: ImageInput | Sequence[ImageInput], top_k: int = 5, batch_size: int = 64
    ) -> list[list[tuple[str, float]]]:
        """The ``top_k`` most probable classes of each image, most probable first: :meth:`prepare`, then
        :meth:`top_classes`, ``batch_size`` images at a time.

        Images are prepared as the model was trained, whatever their size and colour mode: read into
        the checkpoint's channels, resized (shorter side) and centre-cropped to its image size as in
        evaluation, normalised with its mean and std (:func:`~.inputs.prepare_images`).

        Args:
            images: an image file, a PIL image, a tensor (uint8, or float in [0, 1]; ``(C, H, W)``,
                ``(H, W, C)`` as PIL gives it, or ``(H, W)``), a batch tensor ``(B, C, H, W)``, or a
                sequence of these.
            top_k: classes per image (all of them when there are fewer).
            batch_size: images per forward pass.

        Returns:
            One list per image of ``(class name, probability)``; the probabilities are the softmax over
            all classes. Runs on the module's device in eval mode (the previous mode is restored).

        Raises:
            ValueError: ``top_k`` below 1, a model without normalisation, an unreadable image (named).
        """
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        items = as_image_list(images)
        results: list[list[tuple[str, float]]] = []
        for start in range(0, len(items), batch_size):
            results += self.top_classes(self.prepare(items[start : start + batch_size]), top_k)
        return results

    def prepare(self, images: Sequence[ImageInput]) -> Tensor:
        """Images of any size and kind as this model's normalised evaluation batch ``(B, C, S, S)``
        (:func:`~.inputs.prepare_images` with the checkpoint's image size, channels, mean and std).

        Raises:
            ValueError: a model without normalisation, an unreadable image (named).
        """
        if self.mean is None or self.std is None:
            raise ValueError(
                "this model has no normalisation (it was not trained with an ImageDataModule): "
                f"set model.mean and model.std ({self.net.in_chans} values each) first"
            )
        return prepare_images(images, self.net.image_size, self.net.in_chans, self.mean, self.std)  # (B, C, S, S)

    @torch.no_grad()
    def top_classes(self, x: Tensor, top_k: int | Sequence[int]) -> list[list[tuple[str, float]]]:
        """The most probable classes of a prepared batch ``x (B, C, S, S)`` (:meth:`prepare`), most probable
        first: ``top_k`` per image, or one count per image (at most the number of classes); the
        probabilities are the softmax over all classes, in eval mode on the module's device."""
        param = next(self.parameters())
        ks = [top_k] * x.shape[0] if isinstance(top_k, int) else list(top_k)
        with evaluating(self):
            probs = self.net(x.to(param.device, param.dtype)).float().softmax(dim=-1)  # (B, K)
        top_p, top_i = probs.topk(min(max(ks, default=1), self.net.num_classes), dim=-1)  # (B, k) each
        return [
            [(self.class_names[i], p) for i, p in zip(i_row[:k], p_row[:k], strict=True)]
            for p_row, i_row, k in zip(top_p.tolist(), top_i.tolist(), ks, strict=True)
        ]

    def configure_callbacks(self) -> list[Callback]:
        """A :class:`~.writer.ClassificationWriter` for ``predict``, unless the trainer already has a
        prediction writer (one given in the config or on the command line wins)."""
        trainer = attached_trainer(self)
        callbacks = trainer.callbacks if trainer is not None else []
        if any(isinstance(cb, BasePredictionWriter) for cb in callbacks):
            return []
        return [ClassificationWriter()]

    # -------------------------------------------------------------------------- optimizer
    def no_weight_decay(self) -> set[str]:
        """Parameters with two or more dimensions kept out of weight decay (as timm's ViT lists them):
        the position table and the class token. Norms, biases and LayerScale are 1-D, exempt anyway."""
        return {"pos_embed", "cls_token"}

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW (matrices decay; what :meth:`no_weight_decay` lists does not) and the ``scheduler``."""
        return configure_adamw(
            self,
            self.hparams,
            self.trainer.estimated_stepping_batches,
            layer_of=self.layer_depth,
            n_depths=len(self.net.encoder.layers) + 1,
        )
