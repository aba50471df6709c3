"""The torchvision private names that ``lightning_tf/training/private/torchvision.py`` relies on still exist and
still mean what it assumes: each policy's operations with their magnitudes per bin and signs, and one operation
applied with the policy's interpolation and fill as torchvision's functional transforms apply it."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import InterpolationMode, v2
from torchvision.transforms.v2 import functional as TF

from lightning_tf.training.private.torchvision import OVERRIDES, apply_augmentation, augmentation_space

RAND_AUGMENT = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color"]
RAND_AUGMENT += ["Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]
#: the operations whose magnitude's sign is drawn
SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness"}


@pytest.mark.parametrize(("policy", "largest_rotation"), [(v2.RandAugment(), 30.0), (v2.TrivialAugmentWide(), 135.0)])
def test_the_augmentation_space_names_each_operation_its_magnitudes_and_whether_its_sign_is_drawn(
    policy: v2.RandAugment | v2.TrivialAugmentWide, largest_rotation: float
) -> None:
    space = augmentation_space(policy)
    assert list(space) == RAND_AUGMENT  # both policies draw from the same operations, in this order
    bins = policy.num_magnitude_bins
    for name, (magnitudes, signed) in space.items():
        table = magnitudes(bins, 32, 24)
        assert (table is None) == (name in ("Identity", "AutoContrast", "Equalize")), name
        assert table is None or table.shape == (bins,), name
        assert signed == (name in SIGNED), name
    assert torch.allclose(space["Rotate"][0](bins, 32, 24), torch.linspace(0.0, largest_rotation, bins))


def test_an_operation_is_applied_with_the_policys_interpolation_and_fill() -> None:
    torch.manual_seed(0)
    images = torch.randint(0, 256, (3, 3, 16, 12), dtype=torch.uint8)
    policy = v2.RandAugment(interpolation=InterpolationMode.BILINEAR, fill=[7, 8, 9])
    rotated = apply_augmentation(policy, images, "Rotate", 30.0)
    expected = TF.rotate(images, 30.0, interpolation=InterpolationMode.BILINEAR, fill=[7.0, 8.0, 9.0])
    assert torch.equal(rotated, expected)
    assert rotated[:, :, 0, 0].tolist() == [[7, 8, 9]] * 3  # the corner rotated in from outside: the fill
    assert torch.equal(apply_augmentation(policy, images, "Brightness", 0.5), TF.adjust_brightness(images, 1.5))
    assert torch.equal(apply_augmentation(policy, images, "Identity", 0.0), images)
    assert OVERRIDES == {}
