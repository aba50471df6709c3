"""Where a ViT looks: attention rollout and the last layer's class-token attention, drawn over images.

Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers") follows the
attention through the residual stream: each layer's head-averaged attention ``A`` becomes
``0.5 * A + 0.5 * I`` (the skip connection carries half), and the layers multiply,
``R = A_L ... A_2 A_1``. The row of the class token (for mean pooling, the average of the patch
rows, with or without a class token) over the patches is the map. The last layer's class-token attention is the single-layer view
of DINO (Caron et al. 2021).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_tf.core import evaluating

from .vit import VisionTransformer

__all__ = [
    "attention_maps",
    "attention_rollout",
    "draw_attention",
    "last_layer_attention",
    "load_image",
    "plot_attention",
]

HeadFusion = Literal["mean", "max", "min"]


def _fuse(weights: Tensor, head_fusion: HeadFusion) -> Tensor:
    if head_fusion == "mean":
        return weights.mean(dim=1)  # (B, S, S)
    if head_fusion == "max":
        return weights.amax(dim=1)
    if head_fusion == "min":
        return weights.amin(dim=1)
    raise ValueError(f"unknown head_fusion {head_fusion!r}; expected 'mean', 'max' or 'min'")


def _readout(rows: Tensor, n_prefix: int, grid: tuple[int, int], pool: str = "cls") -> Tensor:
    """What the head reads, over the patches, as ``(B, gh, gw)``: the class-token row for ``pool="cls"``,
    the mean of the patch rows for ``pool="mean"`` (also when a class token is present)."""
    if pool == "cls" and n_prefix:
        r = rows[:, 0, n_prefix:]  # (B, N)
    elif pool in ("cls", "mean"):
        r = rows[:, n_prefix:, n_prefix:].mean(dim=1)  # (B, N)
    else:
        raise ValueError(f"unknown pool {pool!r}; expected 'cls' or 'mean'")
    return r.reshape(r.shape[0], *grid)  # (B, gh, gw)


def attention_rollout(
    weights: Sequence[Tensor],
    n_prefix: int,
    grid: tuple[int, int],
    head_fusion: HeadFusion = "mean",
    pool: Literal["cls", "mean"] = "cls",
) -> Tensor:
    """Attention rollout over the layers' weights, each ``(B, H, S, S)``, -> ``(B, gh, gw)``, each map
    summing to at most 1 (the class token's own share is left out)."""
    S = weights[0].shape[-1]
    eye = torch.eye(S, device=weights[0].device, dtype=weights[0].dtype)  # (S, S)
    rollout = eye.expand(weights[0].shape[0], S, S)  # (B, S, S)
    for w in weights:
        a = 0.5 * _fuse(w, head_fusion) + 0.5 * eye  # (B, S, S), rows sum to 1
        a = a / a.sum(dim=-1, keepdim=True)
        rollout = a @ rollout  # (B, S, S)
    return _readout(rollout, n_prefix, grid, pool)


def last_layer_attention(
    weights: Sequence[Tensor],
    n_prefix: int,
    grid: tuple[int, int],
    head_fusion: HeadFusion = "mean",
    pool: Literal["cls", "mean"] = "cls",
) -> Tensor:
    """The last layer's attention from the class token (or the mean patch row) to the patches,
    heads fused, ``(B, gh, gw)``."""
    return _readout(_fuse(weights[-1], head_fusion), n_prefix, grid, pool)


@torch.no_grad()
def attention_maps(model: VisionTransformer, images: Tensor, head_fusion: HeadFusion = "mean") -> dict[str, Tensor]:
    """Logits and both maps for normalised images ``(B, C, H, W)``: ``logits (B, K)``, ``rollout``
    and ``last_layer`` ``(B, gh, gw)``. The model runs in eval mode (its mode is restored)."""
    with evaluating(model):
        logits, weights = model.forward_with_attention(images)  # (B, K), L x (B, H, S, S)
    grid = (images.shape[-2] // model.patch_size, images.shape[-1] // model.patch_size)
    return {
        "logits": logits,
        "rollout": attention_rollout(weights, model.n_prefix, grid, head_fusion, model.pool),
        "last_layer": last_layer_attention(weights, model.n_prefix, grid, head_fusion, model.pool),
    }


def _denormalize(image: Tensor, mean: Sequence[float] | None, std: Sequence[float] | None) -> Any:
    """``(C, H, W)`` normalised -> ``(H, W, C)`` in [0, 1] for ``imshow``."""
    x = image.detach().float().cpu()
    if mean is not None and std is not None:
        x = x * torch.tensor(std).view(-1, 1, 1) + torch.tensor(mean).view(-1, 1, 1)
    else:  # unknown normalisation: stretch to [0, 1]
        x = (x - x.min()) / (x.max() - x.min()).clamp_min(1e-8)
    return x.clamp(0, 1).permute(1, 2, 0).numpy()  # (H, W, C)


def draw_attention(
    image: Tensor,
    attention: Tensor,
    ax: Any = None,
    *,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    alpha: float = 0.55,
    cmap: str = "inferno",
    title: str | None = None,
) -> Any:
    """Draw one map ``(gh, gw)`` over one normalised image ``(C, H, W)`` on a matplotlib axis (a new
    figure's when ``ax`` is None); the map is upsampled bilinearly to the image and scaled to [0, 1]."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(3, 3))
    H, W = image.shape[-2:]
    m = attention.detach().float().cpu()[None, None]  # (1, 1, gh, gw)
    m = F.interpolate(m, size=(H, W), mode="bilinear", align_corners=False)[0, 0]  # (H, W)
    m = (m - m.min()) / (m.max() - m.min()).clamp_min(1e-8)
    rgb = _denormalize(image, mean, std)  # (H, W, C)
    ax.imshow(rgb[..., 0] if rgb.shape[-1] == 1 else rgb, cmap="gray" if rgb.shape[-1] == 1 else None)
    ax.imshow(m.numpy(), cmap=cmap, alpha=alpha)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=8)
    return ax


def load_image(path: str | Path, image_size: int, in_chans: int, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """An image file as a normalised ``(C, image_size, image_size)`` tensor, prepared as for prediction
    (:func:`~.inputs.prepare_images`: resize the shorter side, centre crop, normalise)."""
    from .inputs import prepare_images

    return prepare_images([path], image_size, in_chans, mean, std)[0]  # (C, S, S)


def plot_attention(
    model: VisionTransformer,
    images: Tensor | Sequence[str | Path],
    *,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    class_names: Sequence[str] | None = None,
    labels: Sequence[int] | None = None,
    head_fusion: HeadFusion = "mean",
) -> Any:
    """A figure with one row per image: the image titled with its true class (when ``labels`` are
    given) and its predicted class, the attention rollout and the last layer's class-token attention
    drawn over it.

    Args:
        model: the network (``ViTClassifier.net``).
        images: normalised images ``(B, C, H, W)`` or image files (loaded at the model's size with
            ``mean``/``std``, default 0.5).
        mean: per-channel normalisation mean of the images (to show them in their colours).
        std: per-channel normalisation std.
        class_names: names of the classes in the titles.
        labels: the true class of each image (an index into ``class_names``), shown above the prediction.
        head_fusion: how the heads combine: ``mean``, ``max`` or ``min``.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if not isinstance(images, Tensor):
        C = model.in_chans
        mean = list(mean) if mean is not None else [0.5] * C
        std = list(std) if std is not None else [0.5] * C
        images = torch.stack([load_image(p, model.image_size, C, mean, std) for p in images])  # (B, C, H, W)
    param = next(model.parameters())
    maps = attention_maps(model, images.to(param), head_fusion)
    pred = maps["logits"].argmax(-1).tolist()
    B = images.shape[0]
    fig, axes = plt.subplots(B, 3, figsize=(6.6, 2.2 * B), squeeze=False)
    if labels is not None and len(labels) != B:
        raise ValueError(f"labels has {len(labels)} entries for {B} images")

    def name(c: int) -> str:
        return class_names[c] if class_names is not None else str(c)

    for b in range(B):
        rgb = _denormalize(images[b], mean, std)  # (H, W, C)
        axes[b, 0].imshow(rgb[..., 0] if rgb.shape[-1] == 1 else rgb, cmap="gray" if rgb.shape[-1] == 1 else None)
        axes[b, 0].set_axis_off()
        title = f"predicted: {name(pred[b])}"
        if labels is not None:
            title = f"true: {name(int(labels[b]))}\n{title}"
        axes[b, 0].set_title(title, fontsize=8)
        draw_attention(images[b], maps["rollout"][b], axes[b, 1], mean=mean, std=std, title="rollout")
        draw_attention(images[b], maps["last_layer"][b], axes[b, 2], mean=mean, std=std, title="last layer")
    fig.tight_layout()
    return fig
