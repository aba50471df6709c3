"""torchvision v2 transform presets, normalisation and batch Mixup/CutMix (timm).

Pipeline (uint8 images in, normalised float32 ``(C, image_size, image_size)`` out)::

    [to RGB] -> resize / crop to image_size -> [flip, augmentation] -> float in [0, 1]
             -> normalise (mean, std) -> [random erasing]

For the in-memory datasets it runs on whole uint8 batches ``(B, C, H, W)``, with random
parameters still drawn image by image; image files go through it one at a time.

Augmentation presets (training only; evaluation always resizes, centre-crops and normalises):

- ``none``: resize only.
- ``flip_crop``: random crop after zero padding by ``image_size // 8`` for the small built-in
  datasets (the CIFAR recipe, computed for a whole batch at once by :class:`RandomShiftFlip`),
  ``RandomResizedCrop(scale=(0.25, 1))`` for image files, plus a horizontal flip where the flip
  keeps the label.
- ``randaugment``: ``flip_crop`` then RandAugment (2 ops, magnitude 9; Cubuk et al., 2020).
- ``trivialaugment``: ``flip_crop`` then TrivialAugmentWide (Muller & Hutter, 2021).

Both policies are torchvision's; for batches, :class:`BatchAutoAugment` draws per image and runs
each drawn operation once for all the images that drew it.

Random erasing (Zhong et al., 2020) runs after normalisation with per-pixel normal noise, as
DeiT and timm's ``re_mode="pixel"``. Mixup (Zhang et al., 2018) and CutMix (Yun et al., 2019) act
on whole batches through ``timm.data.Mixup``; see :func:`build_mixup`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, get_args

import torch
from torch import Tensor
from torchvision.transforms import RandomErasing as RandomErasingV1
from torchvision.transforms import v2

from lightning_tf.training.private.torchvision import apply_augmentation, augmentation_space

if TYPE_CHECKING:
    from timm.data import Mixup

__all__ = [
    "AUGMENTS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "AugmentName",
    "BatchAutoAugment",
    "PerImage",
    "RandomErasingNoise",
    "RandomShiftFlip",
    "build_mixup",
    "build_transform",
    "denormalize",
]

AugmentName = Literal["none", "flip_crop", "randaugment", "trivialaugment"]
AUGMENTS: tuple[str, ...] = get_args(AugmentName)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class PerImage(torch.nn.Module):
    """Apply a random transform to each image of a batch with its own random draw.

    torchvision's v2 transforms draw one set of parameters per call, so on a ``(B, C, H, W)``
    batch every image would get the same crop or RandAugment ops; this loops instead.

    Args:
        transform: a transform of one ``(C, H, W)`` image.
    """

    def __init__(self, transform: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.transform = transform

    def forward(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` or ``(C, H, W)`` -> same shape."""
        if images.ndim == 3:
            return self.transform(images)
        return torch.stack([self.transform(image) for image in images])  # (B, C, H, W)

    def extra_repr(self) -> str:
        return repr(self.transform)


class BatchAutoAugment(torch.nn.Module):
    """torchvision's RandAugment or TrivialAugmentWide for a whole uint8 batch, each image with its
    own draw of operations, signs and magnitudes, as if the policy ran image by image.

    Images that drew the same operation and magnitude are transformed together in one call of the
    policy's own operation (every operation acts on each image of a batch separately), so the result
    has exactly the per-image distribution at a fraction of the cost: RandAugment's fixed magnitude
    leaves at most 24 groups per round.

    Args:
        policy: a configured ``v2.RandAugment`` (``num_ops`` rounds at ``magnitude``) or
            ``v2.TrivialAugmentWide`` (one round at a random magnitude).
    """

    def __init__(self, policy: v2.RandAugment | v2.TrivialAugmentWide) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` or ``(C, H, W)`` uint8 -> same shape."""
        if images.ndim == 3:
            return self.forward(images[None])[0]
        policy = self.policy
        space = list(augmentation_space(policy).items())
        B, _, H, W = images.shape
        trivial = isinstance(policy, v2.TrivialAugmentWide)
        bins = policy.num_magnitude_bins
        tables = [fn(bins, H, W) for _, (fn, _) in space]  # each op's magnitude per bin, or None
        tables = [None if t is None else t.tolist() for t in tables]
        out = images.as_subclass(Tensor).clone()  # plain tensors skip the tv_tensors dispatch
        for _ in range(1 if trivial else policy.num_ops):
            ops = torch.randint(len(space), (B,)).tolist()
            levels = torch.randint(bins, (B,)).tolist() if trivial else [policy.magnitude] * B
            negative = (torch.rand(B) <= 0.5).tolist()
            groups: dict[tuple[str, float], list[int]] = {}
            for b, op in enumerate(ops):
                name, (_, signed) = space[op]
                magnitude = 0.0 if tables[op] is None else float(tables[op][levels[b]])
                if signed and negative[b]:
                    magnitude = -magnitude
                groups.setdefault((name, magnitude), []).append(b)
            for (name, magnitude), members in groups.items():
                if name != "Identity":
                    idx = torch.tensor(members)
                    out[idx] = apply_augmentation(policy, out[idx], name, magnitude)  # (G, C, H, W)
        return out

    def extra_repr(self) -> str:
        return repr(self.policy)


class RandomShiftFlip(torch.nn.Module):
    """Random crop of a zero-padded image (a shift by up to ``padding`` pixels each way) and an
    optional horizontal flip, drawn per image but computed for the whole batch at once.

    Equivalent to ``v2.RandomCrop(size, padding=padding)`` then ``v2.RandomHorizontalFlip()``
    applied image by image, at a fraction of their per-call cost.

    Args:
        padding: largest shift in pixels.
        hflip: also flip half of the images horizontally.
    """

    def __init__(self, padding: int, hflip: bool = True) -> None:
        super().__init__()
        self.padding, self.hflip = padding, hflip

    def forward(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` or ``(C, H, W)`` -> same shape."""
        if images.ndim == 3:
            return self.forward(images[None])[0]
        B, _, H, W = images.shape
        p = self.padding
        padded = torch.nn.functional.pad(images, (p, p, p, p))  # (B, C, H + 2p, W + 2p)
        dy, dx = torch.randint(0, 2 * p + 1, (2, B, 1), device=images.device)  # (B, 1) each
        rows = dy + torch.arange(H, device=images.device)  # (B, H)
        cols = dx + torch.arange(W, device=images.device)  # (B, W)
        if self.hflip:
            flip = torch.rand(B, 1, device=images.device) < 0.5  # (B, 1)
            cols = torch.where(flip, cols.flip(-1), cols)  # (B, W)
        b = torch.arange(B, device=images.device)[:, None, None]  # (B, 1, 1)
        out = padded.permute(0, 2, 3, 1)[b, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
        return out.permute(0, 3, 1, 2).contiguous()  # (B, C, H, W)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, hflip={self.hflip}"


class RandomErasingNoise(torch.nn.Module):
    """Random erasing that fills the box with standard-normal noise (timm's ``mode="pixel"``),
    which after normalisation matches the data's scale; torchvision's v2 version fills a constant.

    Args:
        p: probability of erasing one box per image.
        scale: range of the box area as a fraction of the image.
        ratio: range of the box aspect ratio.
    """

    def __init__(self, p: float, scale: Sequence[float] = (0.02, 0.33), ratio: Sequence[float] = (0.3, 3.3)) -> None:
        super().__init__()
        self.p, self.scale, self.ratio = p, tuple(scale), tuple(ratio)

    def forward(self, image: Tensor) -> Tensor:
        """``(C, H, W)`` normalised image -> same, with at most one box replaced by noise."""
        if torch.rand(()) >= self.p:
            return image
        # value=None: torchvision draws the box and a standard-normal fill of shape (C, h, w)
        i, j, h, w, noise = RandomErasingV1.get_params(image, scale=self.scale, ratio=self.ratio, value=None)
        out = image.clone()
        out[..., i : i + h, j : j + w] = noise
        return out

    def extra_repr(self) -> str:
        return f"p={self.p}, scale={self.scale}, ratio={self.ratio}"


def build_transform(
    *,
    train: bool,
    image_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    augment: AugmentName = "none",
    hflip: bool = True,
    random_erasing: float = 0.0,
    to_rgb: bool = False,
    source: Literal["array", "file"] = "array",
) -> v2.Compose:
    """The pipeline of one split.

    Args:
        train: training pipeline (augmentation, erasing) or evaluation pipeline.
        image_size: output height = width.
        mean: per-channel mean of the [0, 1] images.
        std: per-channel standard deviation.
        augment: training preset, see the module docstring.
        hflip: whether the crop presets also flip horizontally.
        random_erasing: probability of erasing one box (training only).
        to_rgb: replicate a greyscale channel to three.
        source: ``array`` for square in-memory datasets: the pipeline takes a uint8 batch
            ``(B, C_in, H_in, W_in)`` (or one image) and draws random parameters per image;
            ``file`` for arbitrary image files, one at a time: resize the shorter side and
            centre-crop, or a random resized crop.

    Returns:
        A ``v2.Compose`` mapping uint8 ``([B,] C_in, H_in, W_in)`` to float32
        ``([B,] C, image_size, image_size)``.
    """
    if augment not in AUGMENTS:
        raise ValueError(f"augment '{augment}' is not one of {list(AUGMENTS)}")
    ops: list[Callable] = [v2.RGB()] if to_rgb else []
    augmenting = train and augment != "none"
    if augmenting and source == "file":
        ops.append(v2.RandomResizedCrop(image_size, scale=(0.25, 1.0), antialias=True))
        if hflip:
            ops.append(v2.RandomHorizontalFlip())
    else:
        ops += [v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
    if augmenting and source == "array":
        ops.append(RandomShiftFlip(max(1, image_size // 8), hflip=hflip))
    policy = {"randaugment": v2.RandAugment(num_ops=2, magnitude=9), "trivialaugment": v2.TrivialAugmentWide()}
    if train and augment in policy:
        ops.append(BatchAutoAugment(policy[augment]) if source == "array" else policy[augment])
    ops += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))]
    if train and random_erasing > 0:
        erase = RandomErasingNoise(random_erasing)
        ops.append(PerImage(erase) if source == "array" else erase)
    return v2.Compose(ops)


def build_mixup(
    num_classes: int,
    mixup_alpha: float = 0.0,
    cutmix_alpha: float = 0.0,
    prob: float = 1.0,
    switch_prob: float = 0.5,
    mode: Literal["batch", "pair", "elem"] = "batch",
    label_smoothing: float = 0.0,
) -> Mixup | None:
    """timm's batch Mixup/CutMix, or None when both alphas are 0.

    Called as ``images, targets = mixup(images, targets)`` on a batch of even size: images
    ``(B, C, H, W)`` are mixed in place with the reversed batch (sample ``i`` with ``B - 1 - i``)
    and long targets ``(B,)`` become soft targets ``(B, num_classes)``
    ``lam * smooth(y_i) + (1 - lam) * smooth(y_{B-1-i})`` that sum to 1.

    Args:
        num_classes: number of classes.
        mixup_alpha: Beta(alpha, alpha) of the Mixup weight; 0 turns Mixup off.
        cutmix_alpha: Beta(alpha, alpha) of the CutMix box area; 0 turns CutMix off.
        prob: probability that a batch (or pair, element) is mixed at all.
        switch_prob: with both on, probability of CutMix instead of Mixup.
        mode: one weight per batch, per pair or per element.
        label_smoothing: smoothing of the one-hot targets before mixing.
    """
    for name, value in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
        if value < 0:
            raise ValueError(f"{name} ({value}) must be >= 0")
    for name, value in (("mixup_prob", prob), ("mixup_switch_prob", switch_prob), ("label_smoothing", label_smoothing)):
        if not 0 <= value <= 1:
            raise ValueError(f"{name} ({value}) must be in [0, 1]")
    if mixup_alpha == 0 and cutmix_alpha == 0:
        return None
    from timm.data import Mixup  # imported here: timm costs about a second at every start

    return Mixup(
        mixup_alpha=mixup_alpha,
        cutmix_alpha=cutmix_alpha,
        prob=prob,
        switch_prob=switch_prob,
        mode=mode,
        label_smoothing=label_smoothing,
        num_classes=num_classes,
    )


def denormalize(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """Undo the normalisation for display: ``(B, C, H, W)`` or ``(C, H, W)`` back to [0, 1]."""
    shape = (-1, 1, 1)
    m = torch.as_tensor(mean, dtype=images.dtype, device=images.device).view(shape)  # (C, 1, 1)
    s = torch.as_tensor(std, dtype=images.dtype, device=images.device).view(shape)  # (C, 1, 1)
    return (images * s + m).clamp(0, 1)
