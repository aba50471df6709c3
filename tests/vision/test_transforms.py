"""Transforms: the batched shift-and-flip, augmentation presets, normalisation, random erasing
and timm's Mixup/CutMix targets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchvision import tv_tensors
from torchvision.transforms import v2

from lightning_tf.vision.transforms import (
    AUGMENTS,
    BatchAutoAugment,
    PerImage,
    RandomErasingNoise,
    RandomShiftFlip,
    build_mixup,
    build_transform,
    denormalize,
)


def _all_shifts(image: torch.Tensor, p: int, hflip: bool) -> list[torch.Tensor]:
    """Every crop of the zero-padded image, flipped or not: what RandomCrop + flip can produce."""
    padded = F.pad(image, (p, p, p, p))  # (C, H + 2p, W + 2p)
    H, W = image.shape[-2:]
    crops = [padded[:, y : y + H, x : x + W] for y in range(2 * p + 1) for x in range(2 * p + 1)]
    return crops + [c.flip(-1) for c in crops] if hflip else crops


@pytest.mark.parametrize("hflip", [False, True])
def test_shift_flip_draws_per_image_from_the_random_crop_outcomes(hflip: bool) -> None:
    image = torch.randint(0, 256, (2, 6, 7), dtype=torch.uint8)
    batch = image.expand(64, -1, -1, -1)  # 64 copies of one image
    out = RandomShiftFlip(padding=2, hflip=hflip)(batch)  # (64, 2, 6, 7)
    outcomes = _all_shifts(image, 2, hflip)
    seen = set()
    for o in out:
        match = [k for k, c in enumerate(outcomes) if torch.equal(o, c)]
        assert match, "an output that RandomCrop(padding) + flip cannot produce"
        seen.add(match[0])
    assert len(seen) > 15  # each image draws its own shift (one draw per batch would give 1)
    assert any(k >= 25 for k in seen) == hflip  # flipped outcomes appear exactly when hflip is on


def test_shift_flip_matches_torchvision_for_the_same_draw() -> None:
    image = torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8)
    torch.manual_seed(5)
    ours = RandomShiftFlip(padding=3, hflip=False)(image)
    torch.manual_seed(5)
    dy, dx = torch.randint(0, 7, (2, 1, 1))  # replay the draw: torchvision's pad + crop at that offset
    ref = v2.functional.crop(v2.functional.pad(image, [3]), int(dy), int(dx), 8, 8)
    assert torch.equal(ours, ref)


@pytest.mark.parametrize(
    "policy",
    [
        v2.RandAugment(num_ops=1, magnitude=9),
        v2.RandAugment(num_ops=1, magnitude=20),
        v2.TrivialAugmentWide(num_magnitude_bins=3),  # few magnitudes, so 1500 draws see every outcome
    ],
)
def test_batch_auto_augment_draws_per_image_from_the_policy_outcomes(policy: v2.Transform) -> None:
    image = torch.randint(0, 256, (3, 10, 10), dtype=torch.uint8)
    image[:, :5] //= 3  # some structure for the geometric and histogram operations
    reference = {policy(image).numpy().tobytes() for _ in range(1500)}  # torchvision, image by image
    out = BatchAutoAugment(policy)(image.expand(256, -1, -1, -1))  # (256, 3, 10, 10)
    seen = {o.numpy().tobytes() for o in out}
    assert seen <= reference  # only outcomes torchvision's own policy produces
    assert len(seen) >= 0.85 * len(reference)  # ... and nearly all of them: drawn image by image, signs included


def test_batch_auto_augment_applies_num_ops_rounds() -> None:
    image = torch.randint(0, 256, (1, 8, 8), dtype=torch.uint8)
    torch.manual_seed(0)
    none = BatchAutoAugment(v2.RandAugment(num_ops=0))(image.expand(4, -1, -1, -1))
    assert torch.equal(none, image.expand(4, -1, -1, -1))
    two = BatchAutoAugment(v2.RandAugment(num_ops=2))(image.expand(64, -1, -1, -1))
    one_op = {v2.RandAugment(num_ops=1)(image).numpy().tobytes() for _ in range(1000)}
    assert any(o.numpy().tobytes() not in one_op for o in two)  # compositions of two operations appear


@pytest.mark.parametrize("augment", AUGMENTS)
@pytest.mark.parametrize(("source", "chans"), [("array", 1), ("array", 3), ("file", 3)])
def test_presets_give_normalised_float_images(augment: str, source: str, chans: int) -> None:
    stats = {"image_size": 16, "mean": [0.5] * chans, "std": [0.25] * chans, "augment": augment, "source": source}
    x = tv_tensors.Image(torch.randint(0, 256, (chans, 12, 9 if source == "file" else 12), dtype=torch.uint8))
    y = build_transform(train=True, random_erasing=0.5, **stats)(x)
    assert y.shape == (chans, 16, 16) and y.dtype == torch.float32
    if source == "array":
        batch = build_transform(train=True, **stats)(tv_tensors.Image(x.expand(8, -1, -1, -1)))  # (8, C, 16, 16)
        assert batch.shape == (8, chans, 16, 16)
        assert batch.min() >= -2 - 1e-6 and batch.max() <= 2 + 1e-6  # [0, 1] normalised by (0.5, 0.25)
        identical = all(torch.equal(b, batch[0]) for b in batch[1:])
        assert identical == (augment == "none")  # augmentation is drawn per image, not per batch


def test_eval_transform_is_deterministic_and_normalises_exactly() -> None:
    t = build_transform(train=False, image_size=4, mean=[0.2, 0.4, 0.6], std=[0.5, 0.25, 0.125])
    x = torch.randint(0, 256, (3, 4, 4), dtype=torch.uint8)
    expected = (x.float() / 255 - torch.tensor([0.2, 0.4, 0.6])[:, None, None]) / torch.tensor([0.5, 0.25, 0.125])[
        :, None, None
    ]
    assert torch.allclose(t(tv_tensors.Image(x)), expected, atol=1e-6)
    assert torch.allclose(denormalize(t(tv_tensors.Image(x)), [0.2, 0.4, 0.6], [0.5, 0.25, 0.125]), x / 255, atol=1e-6)


def test_eval_resize_then_centre_crop_for_files() -> None:
    t = build_transform(train=False, image_size=8, mean=[0.0], std=[1.0], source="file")
    x = torch.zeros(1, 16, 32, dtype=torch.uint8)
    x[..., 4:28] = 255  # dark left and right edges: a squashing resize would keep them
    assert torch.allclose(t(tv_tensors.Image(x)), torch.ones(1, 8, 8))  # shorter side to 8, centre 8x8 kept


def test_to_rgb_replicates_the_channel() -> None:
    t = build_transform(train=False, image_size=8, mean=[0.5] * 3, std=[0.5] * 3, to_rgb=True)
    y = t(tv_tensors.Image(torch.randint(0, 256, (1, 8, 8), dtype=torch.uint8)))
    assert y.shape == (3, 8, 8) and torch.equal(y[0], y[1]) and torch.equal(y[0], y[2])


def test_random_erasing_fills_one_box_with_noise() -> None:
    x = torch.zeros(3, 20, 20)
    assert torch.equal(RandomErasingNoise(0.0)(x), x)
    out = RandomErasingNoise(1.0)(x)
    changed = (out != 0).any(0)  # (20, 20)
    rows, cols = changed.any(1).nonzero().flatten(), changed.any(0).nonzero().flatten()
    assert changed.sum() == len(rows) * len(cols) > 0  # exactly one filled rectangle
    assert rows.diff().eq(1).all() and cols.diff().eq(1).all()
    per_image = PerImage(RandomErasingNoise(1.0))(torch.zeros(8, 1, 20, 20))  # (8, 1, 20, 20)
    boxes = {tuple((b[0] != 0).nonzero().min(0).values.tolist()) for b in per_image}
    assert len(boxes) > 1  # a box of its own for each image


# ------------------------------------------------------------------------------ Mixup, CutMix
def _batch(B: int = 8, K: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(B, 1, 6, 6), torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])[:B] % K


def test_no_alpha_means_no_mixup() -> None:
    assert build_mixup(10) is None


def test_mixup_targets_sum_to_one_and_weight_the_mixed_pair() -> None:
    x, y = _batch()
    mixup = build_mixup(5, mixup_alpha=0.4)
    mixed, soft = mixup(x.clone(), y)
    assert soft.shape == (8, 5) and torch.allclose(soft.sum(1), torch.ones(8))
    lam = soft[0, y[0]].item() if y[0] != y[-1] else None
    assert lam is not None and 0 < lam <= 1
    assert torch.allclose(mixed, lam * x + (1 - lam) * x.flip(0), atol=1e-6)  # sample i with B - 1 - i
    for i in range(8):
        j = 7 - i
        expected = torch.zeros(5)
        expected[y[i]] += lam
        expected[y[j]] += 1 - lam
        assert torch.allclose(soft[i], expected, atol=1e-6)  # the two labels, weights lam and 1 - lam


def test_cutmix_weights_are_the_pasted_area() -> None:
    x = torch.arange(8.0)[:, None, None, None].expand(8, 1, 10, 10).clone()  # image i is constant i
    y = torch.arange(8) % 5
    mixed, soft = build_mixup(5, cutmix_alpha=1.0)(x.clone(), y)
    for i in range(8):
        from_partner = (mixed[i] == 7 - i).float().mean().item()
        if y[i] != y[7 - i]:
            assert soft[i, y[7 - i]].item() == pytest.approx(from_partner, abs=1e-6)
            assert soft[i, y[i]].item() == pytest.approx(1 - from_partner, abs=1e-6)
    assert torch.allclose(soft.sum(1), torch.ones(8))


def test_label_smoothing_keeps_the_sum_and_the_pair() -> None:
    x, y = _batch()
    s, K = 0.1, 5
    _, soft = build_mixup(K, mixup_alpha=1.0, cutmix_alpha=1.0, label_smoothing=s, mode="elem")(x.clone(), y)
    assert torch.allclose(soft.sum(1), torch.ones(8)) and (soft >= s / K - 1e-7).all()
    mixed_part = soft - s / K  # (1 - s) * (lam * onehot(y_i) + (1 - lam) * onehot(y_j))
    for i in range(8):
        outside = [k for k in range(K) if k not in (int(y[i]), int(y[7 - i]))]
        assert torch.allclose(mixed_part[i, outside], torch.zeros(len(outside)), atol=1e-6)
        assert mixed_part[i].sum().item() == pytest.approx(1 - s, abs=1e-6)


@pytest.mark.parametrize(("name", "value"), [("mixup_alpha", -1.0), ("label_smoothing", 1.5), ("mixup_prob", -0.1)])
def test_mixup_arguments_are_checked(name: str, value: float) -> None:
    kwargs = {"mixup_alpha": 1.0, name: value} if name != "mixup_prob" else {"mixup_alpha": 1.0, "prob": value}
    with pytest.raises(ValueError, match=rf"{name} \({value}\)"):
        build_mixup(5, **kwargs)
