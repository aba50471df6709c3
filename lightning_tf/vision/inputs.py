"""Images as a trained model sees them: files, PIL images or tensors of any size -> a normalised batch.

This is the evaluation pipeline of :class:`~.data.ImageDataModule` for files (``build_transform(train=False,
source="file")``), so an image classified in Python gets the probabilities ``lightning-tf predict`` writes
for the same file: read into the model's channels (the rule of :func:`~.datasets.image_from_pil`; a colour
image given to a greyscale model is turned grey with PIL's luma, since the model cannot see colour),
resize the shorter side to ``image_size``, centre-crop, scale to [0, 1] and normalise with the training
``mean`` and ``std``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Union

import torch
from PIL import Image
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import v2

from .datasets import image_from_pil, load_image
from .transforms import build_transform

__all__ = [
    "ImageInput",
    "as_image_list",
    "normalise_images",
    "prepare_images",
    "read_image",
    "resize_images",
    "tensor_image",
]

#: one image: a file, a PIL image, or a tensor ``(H, W)``, ``(C, H, W)`` or ``(H, W, C)``
ImageInput = Union[str, os.PathLike, Image.Image, Tensor]


def as_image_list(images: ImageInput | Sequence[ImageInput]) -> list[ImageInput]:
    """One image, a batch tensor ``(B, C, H, W)`` or a sequence of images, as a list of single images."""
    if isinstance(images, (str, os.PathLike, Image.Image)):
        return [images]
    if isinstance(images, Tensor):
        if images.ndim == 4:
            return list(images.unbind(0))  # B x (C, H, W)
        return [images]
    return list(images)


def _luma(rgb: Tensor) -> Tensor:
    """``(3, H, W)`` -> ``(1, H, W)`` grey, as PIL converts RGB to ``L`` (bit-exact for uint8)."""
    if rgb.dtype == torch.uint8:
        r, g, b = rgb.to(torch.int64).unbind(0)  # (H, W) each
        return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).to(torch.uint8)[None]  # (1, H, W)
    weights = torch.tensor([0.299, 0.587, 0.114], dtype=rgb.dtype, device=rgb.device).view(3, 1, 1)
    return (rgb * weights).sum(dim=0, keepdim=True)  # (1, H, W)


def tensor_image(image: Tensor, in_chans: int) -> Tensor:
    """A tensor image as ``(in_chans, H, W)``, uint8 or float in [0, 1] (the dtype is kept).

    Layouts: ``(H, W)`` grey; ``(C, H, W)`` when the first axis has 1 to 4 entries, else ``(H, W, C)``
    (as ``numpy.asarray(pil_image)`` gives it) when the last one has. 2 or 4 channels carry alpha,
    which is dropped; grey becomes RGB by repetition, RGB grey by PIL's luma.

    Raises:
        ValueError: another shape, no pixels, a float image outside [0, 1] (NaN included), or integers outside
            0..255.
    """
    x = image.detach()
    if x.ndim == 2:
        x = x[None]  # (1, H, W)
    elif x.ndim == 3 and x.shape[0] > 4 and x.shape[-1] <= 4:
        x = x.permute(2, 0, 1)  # (H, W, C) -> (C, H, W)
    if x.ndim != 3 or not 1 <= x.shape[0] <= 4:
        raise ValueError(
            "an image tensor must be (H, W), (C, H, W) or (H, W, C) with 1 to 4 channels; "
            f"got shape {tuple(image.shape)}"
        )
    if x.numel() == 0:
        raise ValueError(f"an image tensor must hold pixels, got shape {tuple(image.shape)}")
    if x.is_floating_point():
        if not torch.isfinite(x).all():
            raise ValueError(
                f"a float image tensor must hold values in [0, 1], got {int((~torch.isfinite(x)).sum())} NaN or inf"
            )
        lo, hi = float(x.min()), float(x.max())
        if lo < 0 or hi > 1:
            raise ValueError(
                f"a float image tensor must hold values in [0, 1], got {lo:g}..{hi:g}; pass uint8 for values 0..255"
            )
    elif x.dtype != torch.uint8:
        lo, hi = int(x.min()), int(x.max())
        if lo < 0 or hi > 255:
            raise ValueError(f"an integer image tensor must hold values 0..255, got {lo}..{hi}")
        x = x.to(torch.uint8)
    if x.shape[0] in (2, 4):
        x = x[:-1]  # alpha dropped: (C - 1, H, W)
    if x.shape[0] == in_chans:
        return x.contiguous()
    if in_chans == 3:
        return x.expand(3, -1, -1).contiguous()  # (3, H, W)
    if in_chans == 1:
        return _luma(x)  # (1, H, W)
    raise ValueError(f"in_chans ({in_chans}) must be 1 or 3")


def read_image(image: ImageInput, in_chans: int) -> Tensor:
    """One image of any kind as a ``(in_chans, H, W)`` tensor: uint8 for files and PIL images, the
    given dtype for tensors.

    Raises:
        ValueError: an unreadable file (named), or a tensor of another shape or value range.
        TypeError: anything else.
    """
    if isinstance(image, (str, os.PathLike)):
        return load_image(Path(image), in_chans, colour_to_grey=True).as_subclass(Tensor)
    if isinstance(image, Image.Image):
        return image_from_pil(image, in_chans, colour_to_grey=True).as_subclass(Tensor)
    if isinstance(image, Tensor):
        return tensor_image(image, in_chans)
    raise TypeError(f"an image must be a path, a PIL image or a tensor; got {type(image).__name__}")


@functools.lru_cache(maxsize=16)
def _eval_transform(
    image_size: int, mean: tuple[float, ...], std: tuple[float, ...]
) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]:
    """The evaluation pipeline for files in its two halves, built once per size and normalisation (it holds no
    random state; a server prepares every batch with it): the geometry of one image (resize, centre crop;
    its dtype kept) and the scaling of a batch of same-dtype images (to float in [0, 1], normalise). Each
    scaling step acts on each value alone, so a batch scaled at once equals its images scaled one by one."""
    ops = build_transform(train=False, image_size=image_size, mean=mean, std=std, source="file").transforms
    geometry, scaling = ops[:-2], ops[-2:]
    assert [type(op) for op in scaling] == [v2.ToDtype, v2.Normalize], ops  # the pipeline's last two steps
    return v2.Compose(geometry), v2.Compose(scaling)


def resize_images(images: Sequence[ImageInput], image_size: int, in_chans: int) -> list[Tensor]:
    """The geometric half of :func:`prepare_images`: each image read into ``in_chans`` channels, its shorter
    side resized to ``image_size`` and centre-cropped: ``(in_chans, S, S)`` each, uint8 for files and PIL
    images, the given dtype for tensors.

    Images of one size and dtype are resized as one batch (the kernels treat each image alone: the values are
    those of one image at a time, a tenth of the time for 32 small images); an image already ``S x S`` is
    kept as it is, so resizing twice is resizing once."""
    geometry, _ = _eval_transform(int(image_size), (0.0,) * in_chans, (1.0,) * in_chans)
    read = [read_image(image, in_chans) for image in images]  # (C, H_i, W_i) each
    groups: dict[tuple[torch.dtype, torch.Size], list[int]] = {}
    for i, x in enumerate(read):
        groups.setdefault((x.dtype, x.shape), []).append(i)
    out: list[Tensor] = list(read)
    for members in groups.values():
        stacked = tv_tensors.Image(torch.stack([read[i] for i in members]))  # (n, C, H, W)
        for i, x in zip(members, geometry(stacked).as_subclass(Tensor).unbind(0), strict=True):
            out[i] = x  # (C, S, S)
    return out


def normalise_images(images: Sequence[Tensor], mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """The scaling half of :func:`prepare_images`: images of :func:`resize_images` stacked, in [0, 1] and
    normalised with ``mean`` and ``std``: ``(B, C, S, S)`` float32 (images of one dtype are scaled as one
    batch, a mixture one by one; the values are the same)."""
    if not images:
        raise ValueError("no images to normalise")
    size = int(images[0].shape[-1])
    _, scaling = _eval_transform(size, tuple(float(m) for m in mean), tuple(float(s) for s in std))
    if len({x.dtype for x in images}) == 1:
        return scaling(tv_tensors.Image(torch.stack(list(images)))).as_subclass(Tensor)  # (B, C, S, S)
    return torch.stack([scaling(tv_tensors.Image(x)).as_subclass(Tensor) for x in images])  # (B, C, S, S)


def prepare_images(
    images: Sequence[ImageInput], image_size: int, in_chans: int, mean: Sequence[float], std: Sequence[float]
) -> Tensor:
    """Images of any size and kind as the model's normalised evaluation batch ``(B, in_chans, S, S)``
    float32, ``S = image_size``: resize (shorter side), centre crop, scale, normalise."""
    return normalise_images(resize_images(images, image_size, in_chans), mean, std)  # (B, C, S, S)
