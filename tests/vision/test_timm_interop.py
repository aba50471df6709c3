"""Our ViT computes timm's function with timm's weights: same logits within 1e-5."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from timm.models.vision_transformer import VisionTransformer as TimmViT

from lightning_tf.vision import ViTClassifier
from lightning_tf.vision.timm_interop import timm_to_ours

ATOL = 1e-5


def randomized(model: TimmViT) -> TimmViT:
    """Random values in every parameter, biases and norms included, so that no mapping error hides
    behind an initialisation of zeros and ones."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.2 if p.ndim > 1 else 0.5) + (1.0 if p.ndim == 1 else 0.0))
    return model.eval()


def small_timm(**kw) -> TimmViT:
    args = dict(img_size=32, patch_size=8, in_chans=3, num_classes=7, embed_dim=48, depth=2, num_heads=3, mlp_ratio=2.0)
    return randomized(TimmViT(**(args | kw)))


def max_diff(ours: torch.nn.Module, theirs: torch.nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        return (ours(x) - theirs(x)).abs().max().item()


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(global_pool="avg"),
        dict(global_pool="avg", class_token=False),
        dict(init_values=0.1),
        dict(qkv_bias=False),
        dict(pos_embed="none"),
    ],
    ids=["token", "avg", "avg-no-cls", "layer-scale", "no-qkv-bias", "no-pos-embed"],
)
def test_small_custom_vit_matches(kw: dict) -> None:
    theirs = small_timm(**kw)
    ours, _ = timm_to_ours(theirs)
    x = torch.randn(3, 3, 32, 32)
    assert max_diff(ours.eval(), theirs, x) <= ATOL
    with torch.no_grad():
        assert theirs(x).std() > 0.1  # the comparison is not between two near-constant outputs


def test_vit_tiny_patch16_224_matches() -> None:
    theirs = randomized(timm.create_model("vit_tiny_patch16_224", pretrained=False))
    ours = ViTClassifier.from_timm(theirs).eval()
    assert ours.hparams.d_model == 192 and ours.hparams.n_layers == 12 and ours.hparams.num_classes == 1000
    assert max_diff(ours, theirs, torch.randn(1, 3, 224, 224)) <= ATOL


def test_dynamic_image_size_matches_timm() -> None:
    """At another resolution our resampled position table gives timm's dynamic_img_size logits."""
    theirs = small_timm(dynamic_img_size=True)
    ours = ViTClassifier.from_timm(theirs).eval()
    assert max_diff(ours, theirs, torch.randn(2, 3, 48, 40)) <= ATOL
    resized = ViTClassifier.from_timm(theirs, image_size=48).eval()  # the table resampled once, stored
    assert resized.net.grid == (6, 6) and resized.hparams.image_size == resized.hparams_initial.image_size == 48
    assert max_diff(resized, theirs, torch.randn(2, 3, 48, 48)) <= 1e-4


def test_head_reset_keeps_the_body() -> None:
    theirs = small_timm(global_pool="avg")
    ours = ViTClassifier.from_timm(theirs, num_classes=4).eval()
    assert ours.net.head.out_features == 4 and ours.hparams.num_classes == 4
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ours_feat = ours.net.pre_logits(ours.net.forward_features(x))
        their_feat = theirs.forward_head(theirs.forward_features(x), pre_logits=True)
        assert ours(x).shape == (2, 4)
    torch.testing.assert_close(ours_feat, their_feat, atol=ATOL, rtol=0)
    assert not torch.equal(ours.net.head.weight[:4], theirs.head.weight[:4])  # a fresh head, not a slice


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_weights_from_a_file(tmp_path: Path, suffix: str) -> None:
    """Weights saved from a model at 48 px load into the 32 px architecture by name; the position
    table is resampled (as timm does), and our logits equal timm's with the same loaded weights."""
    source = small_timm(img_size=48)
    path = tmp_path / f"weights{suffix}"
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
    else:
        torch.save({"model": source.state_dict()}, path)
    target = TimmViT(
        img_size=32, patch_size=8, in_chans=3, num_classes=7, embed_dim=48, depth=2, num_heads=3, mlp_ratio=2.0
    )
    ours = ViTClassifier.from_timm(target, weights=path).eval()
    assert ours.net.pos_embed.shape == (1, 1 + 16, 48)
    assert torch.equal(target.blocks[1].mlp.fc2.weight, source.blocks[1].mlp.fc2.weight)
    assert max_diff(ours, target.eval(), torch.randn(2, 3, 32, 32)) <= ATOL


def test_weights_file_for_a_timm_name(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    source = randomized(timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=3))
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "w.safetensors"))
    ours = ViTClassifier.from_timm("vit_tiny_patch16_224", weights=tmp_path / "w.safetensors").eval()
    assert ours.hparams.num_classes == 3  # the head the weights have
    assert max_diff(ours, source, torch.randn(1, 3, 224, 224)) <= ATOL


def test_unsupported_timm_models_are_named() -> None:
    with pytest.raises(ValueError, match="reg_tokens=2 is not supported"):
        ViTClassifier.from_timm(small_timm(reg_tokens=2))
    with pytest.raises(ValueError, match="qk_norm"):
        ViTClassifier.from_timm(small_timm(qk_norm=True))
    with pytest.raises(ValueError, match="timm has no model 'vit_nonexistent'"):
        ViTClassifier.from_timm("vit_nonexistent")
    with pytest.raises(TypeError, match="expected a timm VisionTransformer"):
        ViTClassifier.from_timm(torch.nn.Linear(2, 2))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ViTClassifier.from_timm(small_timm(), weights="/nonexistent/w.safetensors")
