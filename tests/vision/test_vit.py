"""The ViT network: patching, position embeddings at other resolutions, pooling, presets, gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lightning_tf.core import sincos_2d
from lightning_tf.vision.vit import (
    PRESETS,
    PatchEmbed,
    VisionTransformer,
    patchify,
    preset_config,
    resample_pos_embed,
    unpatchify,
)


def tiny(**kw) -> VisionTransformer:
    args = dict(image_size=16, patch_size=4, in_chans=3, num_classes=5, d_model=32, n_heads=4, n_layers=2)
    return VisionTransformer(**(args | kw)).eval()


def test_patchify_round_trip_and_order() -> None:
    x = torch.randn(2, 3, 12, 8)
    p = patchify(x, 4)  # (2, 6, 48)
    assert p.shape == (2, 6, 48)
    assert torch.equal(unpatchify(p, 4, (3, 2), 3), x)
    # patch n = (row, col) in row-major order, flattened as (C, p, p)
    assert torch.equal(p[:, 3], x[:, :, 4:8, 4:8].reshape(2, -1))


def test_patch_embedding_is_a_linear_map_of_the_flattened_patch() -> None:
    embed = PatchEmbed(4, 3, 16)
    x = torch.randn(2, 3, 16, 12)
    w = embed.proj.weight.reshape(16, -1)  # (D, C p p)
    expected = patchify(x, 4) @ w.T + embed.proj.bias  # (B, N, D)
    torch.testing.assert_close(embed(x), expected, atol=1e-5, rtol=1e-5)


def test_resample_to_the_training_grid_is_the_identity() -> None:
    pos = torch.randn(1, 1 + 7 * 5, 16)
    torch.testing.assert_close(resample_pos_embed(pos, (7, 5), (7, 5), 1), pos, atol=1e-5, rtol=0)
    model = tiny()
    assert model.position_table((4, 4)) is model.pos_embed


def test_resample_matches_timm() -> None:
    from timm.layers import resample_abs_pos_embed

    pos = torch.randn(1, 1 + 4 * 4, 16)
    ours = resample_pos_embed(pos, (6, 3), (4, 4), 1)
    assert ours.shape == (1, 1 + 18, 16)
    torch.testing.assert_close(ours, resample_abs_pos_embed(pos, [6, 3], [4, 4], 1), atol=0, rtol=0)
    assert torch.equal(ours[:, :1], pos[:, :1])  # the class-token row is not resampled


@pytest.mark.parametrize("pos_encoding", ["learned", "sincos2d"])
def test_other_resolution_forward(pos_encoding: str) -> None:
    model = tiny(pos_encoding=pos_encoding)
    with torch.no_grad():
        out = model(torch.randn(2, 3, 24, 20))
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    if pos_encoding == "sincos2d":  # recomputed exactly for the new grid; the class token has no position
        table = model.position_table((6, 5))
        torch.testing.assert_close(table[0, 1:], sincos_2d(32, 6, 5))
        assert torch.equal(table[0, 0], torch.zeros(32))


def test_sincos_table_is_fixed_and_not_saved() -> None:
    model = tiny(pos_encoding="sincos2d")
    assert "pos_embed" not in model.state_dict()
    assert all("pos_embed" not in n for n, _ in model.named_parameters())
    torch.testing.assert_close(model.pos_embed[0, 1:], sincos_2d(32, 4, 4))


def test_position_embedding_makes_the_model_order_aware() -> None:
    """Permuting the patches changes the output with a position embedding; without one and with mean
    pooling the model is exactly permutation invariant (a check that positions enter at all)."""
    x = torch.randn(2, 3, 16, 16)
    perm = torch.randperm(16)
    shuffled = unpatchify(patchify(x, 4)[:, perm], 4, (4, 4), 3)
    with torch.no_grad():
        for pos in ("learned", "sincos2d"):
            model = tiny(pos_encoding=pos, pool="mean")
            if pos == "learned":
                torch.nn.init.normal_(model.pos_embed, std=1.0)
            assert (model(x) - model(shuffled)).abs().max() > 1e-3
        model = tiny(pos_encoding="none", pool="mean")
        torch.testing.assert_close(model(x), model(shuffled), atol=1e-5, rtol=1e-5)


def test_cls_pooling_reads_the_class_token() -> None:
    model = tiny()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        tokens = model.forward_features(x)  # (B, 1 + N, D)
        torch.testing.assert_close(model(x), model.head(tokens[:, 0]))
    model = tiny(pool="mean", class_token=True)
    with torch.no_grad():
        tokens = model.forward_features(x)
        torch.testing.assert_close(model(x), model.head(model.fc_norm(tokens[:, 1:].mean(1))))


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(pool="mean", pos_encoding="sincos2d", layer_scale=0.1, drop_path=0.2),
        dict(pool="mean", class_token=True, dropout=0.1, attn_dropout=0.1, head_dropout=0.1),
    ],
    ids=["cls-learned", "mean-sincos-layerscale-droppath", "mean-with-cls-dropout"],
)
def test_every_parameter_gets_a_gradient(kw: dict) -> None:
    model = tiny(**kw).train()
    torch.manual_seed(1)
    loss = F.cross_entropy(model(torch.randn(4, 3, 16, 16)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, missing


def test_layer_scale_and_drop_path_reach_the_layers() -> None:
    model = tiny(layer_scale=0.1, drop_path=0.3, n_layers=4)
    assert torch.equal(model.encoder.layers[2].ls1.gamma, torch.full((32,), 0.1))
    rates = [getattr(layer.drop_path1, "p", 0.0) for layer in model.encoder.layers]
    assert rates == pytest.approx([0.0, 0.1, 0.2, 0.3])
    x = torch.randn(8, 3, 16, 16)
    model.train()
    assert not torch.allclose(model(x), model(x))  # stochastic depth draws per call
    model.eval()
    assert torch.equal(model(x), model(x))


def test_presets_match_timm_sizes() -> None:
    import timm

    for name in ("tiny", "small"):
        ours = VisionTransformer(**preset_config(name), in_chans=3, num_classes=1000)
        theirs = timm.create_model(f"vit_{name}_patch16_224", pretrained=False)
        assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert PRESETS["base"]["d_model"] == 768 and PRESETS["base"]["n_heads"] == 12
    cpu28 = VisionTransformer(**preset_config("cpu28"), in_chans=1, num_classes=10)
    assert 195_000 < sum(p.numel() for p in cpu28.parameters()) < 215_000  # the ~210k of the quoted baseline


def test_bad_configuration_messages() -> None:
    with pytest.raises(ValueError, match=r"patch_size \(3\) must divide image_size \(16\)"):
        tiny(patch_size=3)
    with pytest.raises(ValueError, match="pool 'cls' needs the class token"):
        tiny(class_token=False)
    with pytest.raises(ValueError, match="unknown pool"):
        tiny(pool="max")
    with pytest.raises(ValueError, match="unknown pos_encoding"):
        tiny(pos_encoding="rope")
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        preset_config("huge")
    model = tiny()
    with pytest.raises(ValueError, match=r"images have 1 channels but the model expects in_chans=3"):
        model(torch.randn(1, 1, 16, 16))
    with pytest.raises(ValueError, match=r"patch_size \(4\) must divide the image size \(18x16\)"):
        model(torch.randn(1, 3, 18, 16))
    with pytest.raises(ValueError, match=r"images must be \(B, C, H, W\), got shape \(3, 16, 16\)"):
        model(torch.randn(3, 16, 16))  # one image without the batch dimension
