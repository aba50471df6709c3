"""Attention rollout and class-token attention: known values on hand-made weights, real weights, drawing."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from PIL import Image

from lightning_tf.vision.attention_maps import (
    attention_maps,
    attention_rollout,
    draw_attention,
    last_layer_attention,
    plot_attention,
)
from lightning_tf.vision.vit import VisionTransformer


def one_hot_attention(B: int, H: int, S: int, targets: list[int]) -> torch.Tensor:
    """Every query attends only to key ``targets[q]``: ``(B, H, S, S)``."""
    w = torch.zeros(B, H, S, S)
    for q, k in enumerate(targets):
        w[:, :, q, k] = 1.0
    return w


def test_last_layer_map_points_at_the_attended_patch() -> None:
    """The class token attends only to patch 7 of a 3x4 grid: the map is 1 at row 1, column 3."""
    S = 1 + 12
    w = one_hot_attention(2, 3, S, [1 + 7] + list(range(1, S)))
    m = last_layer_attention([w], n_prefix=1, grid=(3, 4))
    expected = torch.zeros(3, 4)
    expected[1, 3] = 1.0
    assert torch.equal(m[0], expected) and torch.equal(m[1], expected)


def test_rollout_follows_attention_through_layers() -> None:
    """Layer 1: patch 2 attends to patch 5; layer 2: the class token attends to patch 2. Half of the
    class token's flow goes through its residual (stays on itself), so patch 2 gets 0.25 directly and
    patch 5 the 0.25 passed on by patch 2 through its own attention."""
    S, grid = 1 + 6, (2, 3)
    identity = list(range(S))
    layer1 = identity.copy()
    layer1[1 + 2] = 1 + 5
    layer2 = identity.copy()
    layer2[0] = 1 + 2
    r = attention_rollout([one_hot_attention(1, 2, S, layer1), one_hot_attention(1, 2, S, layer2)], 1, grid)
    expected = torch.zeros(6)
    expected[2], expected[5] = 0.25, 0.25
    torch.testing.assert_close(r[0].flatten(), expected)


def test_rollout_of_uniform_attention_is_uniform_and_mean_pool_readout() -> None:
    S = 1 + 4
    w = torch.full((1, 2, S, S), 1 / S)
    r = attention_rollout([w, w, w], 1, (2, 2))
    torch.testing.assert_close(r, torch.full_like(r, r[0, 0, 0].item()))
    # without a class token the readout averages the patch rows
    w = torch.rand(2, 2, 4, 4).softmax(-1)
    torch.testing.assert_close(last_layer_attention([w], 0, (2, 2)), w.mean(1).mean(1).reshape(2, 2, 2))


def test_maps_of_a_real_model(tmp_path: Path) -> None:
    model = VisionTransformer(
        image_size=16, patch_size=4, in_chans=3, num_classes=4, d_model=32, n_heads=4, n_layers=3
    ).train()
    x = torch.randn(2, 3, 16, 16)
    maps = attention_maps(model, x)
    assert model.training  # mode restored
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(maps["logits"], model(x))  # the explicit-weights path computes the same logits
        _, weights = model.forward_with_attention(x)
    assert len(weights) == 3 and weights[0].shape == (2, 4, 17, 17)
    torch.testing.assert_close(weights[-1].sum(-1), torch.ones(2, 4, 17))
    assert maps["rollout"].shape == maps["last_layer"].shape == (2, 4, 4)
    assert (maps["rollout"] >= 0).all() and (maps["rollout"].flatten(1).sum(1) < 1).all()
    torch.testing.assert_close(maps["last_layer"], weights[-1].mean(1)[:, 0, 1:].reshape(2, 4, 4))
    with pytest.raises(ValueError, match="unknown head_fusion"):
        attention_maps(model, x, head_fusion="median")  # type: ignore[arg-type]


def test_drawing_on_tensors_and_files(tmp_path: Path) -> None:
    model = VisionTransformer(image_size=16, patch_size=4, in_chans=3, num_classes=3, d_model=32, n_heads=4, n_layers=2)
    fig = plot_attention(model, torch.randn(2, 3, 16, 16), mean=[0.5] * 3, std=[0.2] * 3, class_names=["a", "b", "c"])
    assert len(fig.axes) == 6 and fig.axes[0].get_title().startswith("predicted: ")
    fig.savefig(tmp_path / "maps.png")
    assert (tmp_path / "maps.png").stat().st_size > 1000
    path = tmp_path / "photo.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(path)
    fig = plot_attention(model, [path])  # any image file: resized and centre-cropped to 16x16
    assert len(fig.axes) == 3
    ax = draw_attention(torch.randn(1, 8, 8), torch.rand(2, 2))  # grey image, new figure
    assert len(ax.images) == 2  # the image and the map over it


def test_panels_name_the_true_and_the_predicted_class() -> None:
    model = VisionTransformer(image_size=8, patch_size=4, in_chans=1, num_classes=3, d_model=16, n_heads=2, n_layers=1)
    images, names = torch.randn(3, 1, 8, 8), ["ant", "bee", "cow"]
    pred = attention_maps(model, images)["logits"].argmax(-1).tolist()
    fig = plot_attention(model, images, class_names=names, labels=[2, 0, 1])
    titles = [fig.axes[3 * b].get_title() for b in range(3)]
    assert titles == [f"true: {t}\npredicted: {names[p]}" for t, p in zip(["cow", "ant", "bee"], pred, strict=True)]
    unnamed = plot_attention(model, images[:1], labels=torch.tensor([1]))
    assert unnamed.axes[0].get_title() == f"true: 1\npredicted: {pred[0]}"
    with pytest.raises(ValueError, match="labels has 2 entries for 3 images"):
        plot_attention(model, images, labels=[0, 1])


def test_mean_pooling_with_a_class_token_reads_the_patch_rows() -> None:
    """With ``pool="mean"`` the head reads the average patch token even when a class token exists, so the
    maps average the patch rows instead of reading the (unused) class-token row."""
    model = VisionTransformer(
        image_size=8,
        patch_size=4,
        in_chans=1,
        num_classes=3,
        d_model=16,
        n_heads=2,
        n_layers=2,
        pool="mean",
        class_token=True,
    )
    x = torch.randn(2, 1, 8, 8)
    maps = attention_maps(model, x)
    with torch.no_grad():
        _, weights = model.forward_with_attention(x.clone())
    last = weights[-1].mean(1)  # (B, 5, 5)
    torch.testing.assert_close(maps["last_layer"], last[:, 1:, 1:].mean(1).reshape(2, 2, 2))
    assert not torch.allclose(maps["last_layer"], last[:, 0, 1:].reshape(2, 2, 2))
    with pytest.raises(ValueError, match="unknown pool"):
        last_layer_attention(weights, 1, (2, 2), pool="max")  # type: ignore[arg-type]
