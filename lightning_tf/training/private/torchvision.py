"""torchvision's private names the package relies on, and why; ``tests/training/private/test_torchvision.py``
fails as soon as a torchvision release moves or changes one of them.

:class:`~lightning_tf.vision.transforms.BatchAutoAugment` runs RandAugment or TrivialAugmentWide on a whole batch
with each image's own draw: it draws as the policy does, then runs each drawn operation once for the images that
drew it. torchvision's policies draw and apply inside one call, for one image, and publish neither step:

* :func:`augmentation_space`: the policy's operations (``_AUGMENTATION_SPACE``), each with its magnitude per
  bin and whether its sign is drawn;
* :func:`apply_augmentation`: one operation at one magnitude, with the policy's interpolation and fill
  (``_apply_image_or_video_transform``, ``_fill``).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor
from torchvision.transforms import v2

__all__ = ["OVERRIDES", "apply_augmentation", "augmentation_space"]

#: torchvision's private methods that classes of the package override -> those classes
OVERRIDES: dict[str, tuple[str, ...]] = {}

#: an operation's magnitudes: ``(num_bins, height, width) -> (num_bins,)`` tensor, or None for no magnitude
Magnitudes = Callable[[int, int, int], Tensor | None]


def augmentation_space(policy: v2.RandAugment | v2.TrivialAugmentWide) -> dict[str, tuple[Magnitudes, bool]]:
    """The operations ``policy`` draws from, by name, in its order: ``(magnitudes, signed)``."""
    return dict(policy._AUGMENTATION_SPACE)


def apply_augmentation(
    policy: v2.RandAugment | v2.TrivialAugmentWide, images: Tensor, name: str, magnitude: float
) -> Tensor:
    """The operation ``name`` at ``magnitude`` on ``images`` ``(..., C, H, W)``, with ``policy``'s interpolation
    and fill, as ``policy`` applies it."""
    return policy._apply_image_or_video_transform(
        images, name, magnitude, interpolation=policy.interpolation, fill=policy._fill
    )
