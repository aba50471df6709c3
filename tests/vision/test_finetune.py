"""Fine-tuning a ViT: ``pretrained=`` (timm files, timm names offline, exports), layer-wise decay, freezing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file
from timm.models.vision_transformer import VisionTransformer as TimmViT

from lightning_tf.vision import ViTClassifier
from lightning_tf.vision.vit import resample_pos_embed
from tests.vision.test_timm_interop import randomized

ROOT = Path(__file__).resolve().parents[2]


def timm_vit(**kw) -> TimmViT:
    """A small timm ViT with random values in every parameter (64-wide heads: its head count is inferred)."""
    args = dict(img_size=32, patch_size=8, in_chans=3, num_classes=7, embed_dim=128, depth=3, num_heads=2, mlp_ratio=2)
    return randomized(TimmViT(**(args | kw)))


def save(model: torch.nn.Module, path: Path) -> Path:
    if path.suffix == ".safetensors":
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    else:
        torch.save(model.state_dict(), path)
    return path


# ------------------------------------------------------------------------------ pretrained=


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_a_timm_checkpoint_file_gives_timms_logits(tmp_path: Path, suffix: str) -> None:
    theirs = timm_vit()
    ours = ViTClassifier(pretrained=str(save(theirs, tmp_path / f"vit{suffix}")), num_classes=7, in_chans=3).eval()
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        expected = theirs(x)
        assert expected.std() > 0.1
        torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=1e-5)
    hp = ours.hparams
    assert (hp.d_model, hp.n_heads, hp.n_layers, hp.d_ff, hp.patch_size, hp.image_size) == (128, 2, 3, 256, 8, 32)
    assert hp.pretrained is None and hp.preset is None  # checkpoints rebuild without the file


def test_mean_pool_and_layer_scale_files_and_an_explicit_head_count(tmp_path: Path) -> None:
    theirs = timm_vit(global_pool="avg", init_values=0.1, embed_dim=48, num_heads=3)
    path = save(theirs, tmp_path / "vit.safetensors")
    ours = ViTClassifier(pretrained=str(path), num_classes=7, in_chans=3, n_heads=3).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)
    assert ours.hparams.pool == "mean" and ours.hparams.layer_scale is not None


def test_new_classes_grey_images_and_another_size(tmp_path: Path) -> None:
    theirs = timm_vit()
    path = save(theirs, tmp_path / "vit.safetensors")
    ours = ViTClassifier(pretrained=str(path), num_classes=10, in_chans=1, image_size=16)
    net, src = ours.net, theirs.state_dict()
    # the head is new, the body is the source's
    assert net.head.weight.shape == (10, 128)
    torch.testing.assert_close(net.encoder.layers[1].ff.linear1.weight, src["blocks.1.mlp.fc1.weight"])
    # RGB weights summed over the input channels (timm's adapt_input_conv)
    torch.testing.assert_close(net.patch_embed.proj.weight, src["patch_embed.proj.weight"].sum(1, keepdim=True))
    # a grey image through the summed weights = the grey image repeated in the three channels through timm's
    ours.net.reset_classifier(7)
    ours.net.head.load_state_dict(theirs.head.state_dict())
    ours.net.pos_embed.data.copy_(resample_pos_embed(src["pos_embed"], (2, 2), (4, 4), 1))
    # position table 4x4 -> 2x2, as resample_pos_embed (timm's scheme) makes it
    assert net.pos_embed.shape == (1, 5, 128)
    grey = torch.randn(2, 1, 16, 16)
    theirs_16 = timm_vit(img_size=16)
    theirs_16.load_state_dict({**src, "pos_embed": net.pos_embed.detach().clone()})
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(grey), theirs_16(grey.expand(-1, 3, -1, -1)), atol=1e-4, rtol=1e-4)


def test_checkpoint_and_export_of_a_finetuned_model_rebuild_without_the_source(tmp_path: Path) -> None:
    from lightning_tf.export import export_safetensors, load_safetensors

    path = save(timm_vit(), tmp_path / "vit.safetensors")
    model = ViTClassifier(pretrained=str(path), num_classes=5, in_chans=1, image_size=16, lr=3e-4)
    out = export_safetensors(model, tmp_path / "export")
    path.unlink()  # the source is gone: the export holds the resolved architecture
    again = load_safetensors(out)
    x = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(again(x), model.eval()(x))
    # an export is itself a pretrained source: new classes, the body kept
    child = ViTClassifier(pretrained=str(out), num_classes=3, in_chans=1)
    torch.testing.assert_close(
        child.net.encoder.layers[0].self_attn.qkv_proj.weight, model.net.encoder.layers[0].self_attn.qkv_proj.weight
    )
    assert child.net.image_size == 16 and child.net.head.weight.shape == (3, 128)


def test_pretrained_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"pretrained weights .*missing\.safetensors do not exist"):
        ViTClassifier(pretrained=str(tmp_path / "missing.safetensors"))
    with pytest.raises(ValueError, match=r"pretrained='no_such_vit' is neither a file nor a folder, nor a timm model"):
        ViTClassifier(pretrained="no_such_vit")
    bad = tmp_path / "bad.safetensors"
    save_file({"weight": torch.zeros(2, 2)}, str(bad))
    with pytest.raises(ValueError, match=r"not a timm VisionTransformer state dict"):
        ViTClassifier(pretrained=str(bad))


def test_a_timm_name_offline_is_one_line_saying_how_to_pass_a_file() -> None:
    code = "from lightning_tf.vision import ViTClassifier\nViTClassifier(pretrained='vit_tiny_patch16_224')"
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": "/nonexistent-hf-home", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: pretrained='vit_tiny_patch16_224': HF_HUB_OFFLINE=1")
    assert "pretrained=path/to/model.safetensors" in last and "Retrying" not in done.stderr


# ---------------------------------------------------------------------------- layer decay


def configure(model: ViTClassifier, steps: int = 100) -> dict:
    model._trainer = SimpleNamespace(estimated_stepping_batches=steps)  # what configure_optimizers reads
    return model.configure_optimizers()


def test_layer_decay_gives_each_parameter_the_heads_rate_times_decay_to_its_depth() -> None:
    model = ViTClassifier(preset="digits", d_model=32, n_heads=2, n_layers=3, d_ff=64, lr=1e-3, layer_decay=0.75)
    optimizer = configure(model, steps=1000)["optimizer"]
    name_of = {id(p): n for n, p in model.named_parameters()}
    expected = {  # head's rate x 0.75 ** (4 - depth): embeddings at depth 0, block i at i + 1, head 4
        "net.patch_embed.proj.weight": 0.75**4,
        "net.cls_token": 0.75**4,
        "net.pos_embed": 0.75**4,
        "net.encoder.layers.0.self_attn.qkv_proj.weight": 0.75**3,
        "net.encoder.layers.1.norm1.bias": 0.75**2,
        "net.encoder.layers.2.ff.linear2.weight": 0.75,
        "net.encoder.norm.weight": 1.0,
        "net.head.weight": 1.0,
        "net.head.bias": 1.0,
    }
    seen = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            seen[name_of[id(p)]] = (group["initial_lr"], group["lr_scale"], group["weight_decay"])
    assert set(seen) == {n for n, _ in model.named_parameters()}  # every parameter once
    for name, scale in expected.items():
        assert seen[name][0] == pytest.approx(1e-3 * scale) and seen[name][1] == pytest.approx(scale), name
    assert seen["net.head.weight"][2] == 0.05 and seen["net.head.bias"][2] == 0.0  # weight decay groups kept
    assert seen["net.pos_embed"][2] == 0.0 and seen["net.encoder.layers.2.ff.linear2.weight"][2] == 0.05
    # the schedule multiplies every group's own rate
    scheduler = configure(model, steps=1000)["lr_scheduler"]["scheduler"]
    opt = scheduler.optimizer
    for _ in range(5):
        opt.step()
        scheduler.step()
    ratios = {round(g["lr"] / g["initial_lr"], 12) for g in opt.param_groups}
    assert len(ratios) == 1


def test_onecycle_keeps_each_groups_peak() -> None:
    model = ViTClassifier(preset="digits", n_layers=2, lr=1e-3, layer_decay=0.5, scheduler="onecycle")
    scheduler = configure(model, steps=100)["lr_scheduler"]["scheduler"]
    peaks = sorted({round(g["max_lr"], 12) for g in scheduler.optimizer.param_groups})
    assert peaks == pytest.approx([1e-3 * 0.5**3, 1e-3 * 0.5**2, 1e-3 * 0.5, 1e-3])


def test_layer_decay_out_of_range_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"layer_decay must be in \(0, 1\], got 1.5"):
        ViTClassifier(layer_decay=1.5)


# -------------------------------------------------------------------------------- freezing


def train_steps(model: ViTClassifier, steps: int = 3) -> dict[str, torch.Tensor]:
    """``steps`` AdamW steps on random images; the parameters before them."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = configure(model)["optimizer"]
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, y = torch.randn(8, 1, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        for name, p in model.named_parameters():
            assert (p.grad is None) == (not p.requires_grad), name
        optimizer.step()
    return before


@pytest.mark.parametrize(
    ("freeze", "blocks", "trained"),
    [
        ("backbone", 0, lambda n: n.startswith("net.head.")),
        (
            "first_n_blocks",
            2,
            lambda n: (
                not n.startswith(
                    (
                        "net.patch_embed",
                        "net.cls_token",
                        "net.pos_embed",
                        "net.encoder.layers.0.",
                        "net.encoder.layers.1.",
                    )
                )
            ),
        ),
    ],
    ids=["linear-probe", "first-2-blocks"],
)
def test_frozen_parameters_get_no_gradient_and_do_not_change(freeze: str, blocks: int, trained) -> None:
    model = ViTClassifier(preset="digits", n_layers=3, lr=1e-2, weight_decay=0.1, freeze=freeze, freeze_blocks=blocks)
    before = train_steps(model)
    names = [n for n, _ in model.named_parameters()]
    assert any(trained(n) for n in names) and any(not trained(n) for n in names)
    for name, p in model.named_parameters():
        if trained(name):
            assert p.requires_grad and not torch.equal(p, before[name]), name
        else:
            assert not p.requires_grad and torch.equal(p, before[name]), name


def test_freeze_blocks_out_of_range_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"freeze_blocks \(9\) must be in \[0, 4\]"):
        ViTClassifier(preset="digits", freeze="first_n_blocks", freeze_blocks=9)


@pytest.mark.integration
def test_cli_fine_tune_with_ema_then_average_and_predict_without_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configs/vision/finetune.yaml on a stand-in timm file with configs/trainer/ema.yaml, two epochs; the two
    epoch checkpoints averaged by ``lightning-tf average``; the average predicts through the CLI after the
    source file is gone (its hyperparameters hold the resolved architecture)."""
    import pandas as pd

    from lightning_tf.__main__ import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["lightning-tf"])
    source = save(timm_vit(img_size=64, patch_size=16, embed_dim=64, depth=2, num_heads=1), tmp_path / "vit.pth")
    configs = ROOT / "configs"
    common = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"]
    common += ["--trainer.default_root_dir", str(tmp_path / "run")]
    every = tmp_path / "every_epoch.yaml"
    every.write_text(
        "trainer:\n  callbacks+:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        '      init_args:\n        filename: "{epoch}"\n        save_top_k: -1\n'
    )
    main(
        [
            "fit",
            *("--config", str(configs / "trainer/default.yaml"), "--config", str(configs / "trainer/ema.yaml")),
            *("--config", str(configs / "vision/finetune.yaml"), "--config", str(every)),
            *("--model.init_args.pretrained", str(source), "--trainer.max_epochs", "2"),
            *("--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--data.image_size", "32"),
            *common,
        ]
    )
    epochs = [tmp_path / "run" / "checkpoints" / f"epoch={e}.ckpt" for e in (0, 1)]
    assert "current_model_state" in torch.load(epochs[1], map_location="cpu", weights_only=True)  # EMA kept
    main(["average", *map(str, epochs), "-o", str(tmp_path / "avg.ckpt")])
    source.unlink()
    main(
        [
            "predict",
            *("--config", str(configs / "trainer/default.yaml"), "--config", str(configs / "vision/finetune.yaml")),
            *("--ckpt_path", str(tmp_path / "avg.ckpt"), "--trainer.limit_predict_batches", "1"),
            *("--data.image_size", "32", "--data.batch_size", "8"),
            *common,
        ]
    )
    table = pd.read_csv(tmp_path / "run" / "predictions.csv")
    assert len(table) == 8 and table["top1_prob"].between(0, 1).all()
    averaged = ViTClassifier.load_from_checkpoint(tmp_path / "avg.ckpt")
    assert averaged.hparams.pretrained is None and averaged.net.image_size == 32 and averaged.net.d_model == 64
