"""Export to safetensors (every task) and ONNX (ViT, K-line): a reloaded model gives bitwise the same
outputs, onnxruntime agrees with torch at several batch sizes, the CLI reads real checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from safetensors import safe_open

from lightning_tf.__main__ import main
from lightning_tf.export import (
    SIDECAR,
    WEIGHTS,
    export_onnx,
    export_safetensors,
    load_module,
    load_safetensors,
    onnx_metadata,
)
from lightning_tf.kline import KLineDataModule, KLineForecaster
from lightning_tf.text import BPETokenizer, Seq2SeqTransformer, TranslationDataModule
from lightning_tf.vision import ViTClassifier

SENTENCES = ["c f a b", "a b c d e f g h i", "", "t s"]
KLINE_TINY = {
    "context_len": 32,
    "horizon": 4,
    "patch_len": 8,
    "stride": 4,
    "d_model": 16,
    "n_heads": 2,
    "n_layers": 2,
    "d_ff": 32,
}


def fit(model: LightningModule, dm: LightningDataModule, root: Path) -> Path:
    """Two optimizer steps and a checkpoint written by the Trainer."""
    trainer = Trainer(
        max_steps=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        accelerator="cpu",
        devices=1,
    )
    trainer.fit(model, datamodule=dm)
    path = root / "last.ckpt"
    trainer.save_checkpoint(path)
    return path


def write_bars(path: Path, n: int = 300) -> Path:
    rng = np.random.default_rng(0)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = close * np.exp(rng.normal(0, 0.003, n))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.004, n)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.004, n)))
    pd.DataFrame(
        {
            "Date": pd.bdate_range("2020-01-01", periods=n).strftime("%Y-%m-%d"),
            "Open": open_,
            "High": high,
            "Low": low,
            "Close": close,
            "Volume": rng.integers(1000, 5000, n),
        }
    ).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def text_ckpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Seq2SeqTransformer]:
    root = tmp_path_factory.mktemp("text")
    torch.manual_seed(0)
    dm = TranslationDataModule(dataset="copy", n_train=128, n_val=8, n_test=8, vocab_size=64, batch_size=32)
    model = Seq2SeqTransformer(
        vocab_size=64, d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0, beam_size=2, extra_len=6, warmup_steps=1
    )
    return fit(model, dm, root), model.eval()


@pytest.fixture(scope="module")
def kline_ckpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KLineForecaster, KLineDataModule]:
    root = tmp_path_factory.mktemp("kline")
    torch.manual_seed(0)
    dm = KLineDataModule(path=str(write_bars(root / "bars.csv")), context_len=32, horizon=4, batch_size=32)
    model = KLineForecaster(n_features=6, n_targets=1, **KLINE_TINY)
    return fit(model, dm, root), model.eval(), dm


def tiny_vit() -> ViTClassifier:
    model = ViTClassifier(
        num_classes=3, in_chans=3, preset=None, image_size=16, patch_size=4, d_model=32, n_heads=2, n_layers=2, d_ff=64
    )
    # what setup() takes from an ImageDataModule, kept by on_save_checkpoint
    model.class_names, model.mean, model.std = ["cat", "dog", "bird"], [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    return model.eval()


# ------------------------------------------------------------------------------------ safetensors


def test_text_roundtrip_is_bitwise_and_keeps_the_tokenizer(
    text_ckpt: tuple[Path, Seq2SeqTransformer], tmp_path: Path
) -> None:
    _, model = text_ckpt
    out = export_safetensors(model, tmp_path / "export")
    config = json.loads((out / SIDECAR).read_text())
    assert config["class_path"] == "lightning_tf.text.Seq2SeqTransformer"
    # tied output projection: stored once, recorded as an alias, tied again after loading
    assert config["tied"] == {"head.weight": "tgt_embed.weight"}
    with safe_open(out / WEIGHTS, "pt") as f:
        stored = set(f.keys())
    assert "head.weight" not in stored and "tgt_embed.weight" in stored
    loaded = load_safetensors(out)
    assert loaded.head.weight is loaded.tgt_embed.weight
    assert set(loaded.state_dict()) == set(model.state_dict())
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    src, tgt = torch.randint(4, 64, (3, 7)), torch.randint(4, 64, (3, 5))
    assert torch.equal(loaded(src, tgt), model(src, tgt))
    assert loaded.tokenizer == model.tokenizer
    assert loaded.translate(SENTENCES) == model.translate(SENTENCES)
    # the Hugging Face tokenizer files beside it load on their own
    assert BPETokenizer.load(out) == model.tokenizer


def test_vision_roundtrip_keeps_class_names_and_normalisation(tmp_path: Path) -> None:
    model = tiny_vit()
    out = export_safetensors(model, tmp_path)
    # the weights file gets the user's usual permissions (safetensors writes a private temporary file)
    assert (out / WEIGHTS).stat().st_mode & 0o777 == (out / SIDECAR).stat().st_mode & 0o777
    loaded = load_safetensors(out)
    x = torch.randn(4, 3, 16, 16)
    assert torch.equal(loaded(x), model(x))
    assert (loaded.class_names, loaded.mean, loaded.std) == (model.class_names, model.mean, model.std)
    assert loaded.hparams.image_size == 16 and not loaded.training


def test_kline_roundtrip_from_a_checkpoint_keeps_the_data_scale(
    kline_ckpt: tuple[Path, KLineForecaster, KLineDataModule], tmp_path: Path
) -> None:
    path, model, dm = kline_ckpt
    ckpt = torch.load(path, weights_only=True, map_location="cpu")
    scale = ckpt["data_scale"]
    assert scale["feature_names"] == dm.feature_names and scale["target_kind"] == "return"
    assert torch.equal(torch.tensor(scale["target_std"], dtype=torch.float64), dm.target_std.double())
    loaded = load_safetensors(export_safetensors(path, tmp_path))
    assert loaded.target_channels == [0] == model.target_channels  # adopted from the data in setup
    assert loaded.data_scale.to_dict() == scale
    x = torch.randn(5, 32, 6)
    assert torch.equal(loaded(x), model(x))
    # the sidecar's statistics map the forecast to original units as the DataModule does
    y = loaded(x)
    mean, std = (
        torch.tensor(getattr(loaded.data_scale, k), dtype=torch.float64) for k in ("target_mean", "target_std")
    )
    torch.testing.assert_close(y.double() * std[0] + mean[0], dm.inverse_targets(y.double()), rtol=0, atol=0)


def test_load_is_strict(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    out = export_safetensors(tiny_vit(), tmp_path)
    state = load_file(out / WEIGHTS)
    state.pop("net.head.bias")
    save_file(state, out / WEIGHTS)
    with pytest.raises(RuntimeError, match="net.head.bias"):
        load_safetensors(out)


def test_load_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json not found"):
        load_safetensors(tmp_path)
    out = export_safetensors(tiny_vit(), tmp_path / "x")
    config = json.loads((out / SIDECAR).read_text())
    (out / SIDECAR).write_text(json.dumps(config | {"class_path": "os.system"}))
    with pytest.raises(ValueError, match="outside lightning_tf"):
        load_safetensors(out)
    with pytest.raises(FileNotFoundError, match="nope.ckpt: no such checkpoint file"):
        load_module(tmp_path / "nope.ckpt")


# ------------------------------------------------------------------------------------------ ONNX


def needs_onnx() -> Any:
    """Skip without the exporter's packages (onnx, onnxscript) or onnxruntime; return onnxruntime."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    return pytest.importorskip("onnxruntime")


def _ort_matches(model: torch.nn.Module, path: Path, shape: tuple[int, ...]) -> None:
    ort = needs_onnx()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == [session.get_outputs()[0].name]  # no attention weights
    for batch in (1, 3):  # the example batch was 2: the batch axis is really dynamic
        x = torch.randn(batch, *shape)
        with torch.no_grad():
            expected = model(x).numpy()
        got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_vit_onnx_matches_torch(tmp_path: Path) -> None:
    needs_onnx()
    model = tiny_vit()
    path = export_onnx(model, tmp_path / "vit.onnx", verify=False)
    assert not (tmp_path / "vit.onnx.data").exists()  # one self-contained file
    _ort_matches(model, path, (3, 16, 16))
    meta = onnx_metadata(path)
    assert meta["extras"]["class_names"] == ["cat", "dog", "bird"]
    assert meta["extras"]["normalization"] == {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]}
    assert meta["inputs"] == {"images": ["batch", 3, 16, 16]} and meta["outputs"] == {"logits": ["batch", 3]}


@pytest.mark.parametrize("channel_mixing", [False, True])
def test_kline_onnx_matches_torch(channel_mixing: bool, tmp_path: Path) -> None:
    needs_onnx()
    model = KLineForecaster(
        n_features=3, n_targets=2, target_channels=[2, 0], channel_mixing=channel_mixing, **KLINE_TINY
    ).eval()
    path = export_onnx(model, tmp_path / "kline.onnx")  # verify=True runs the same check inside
    _ort_matches(model, path, (32, 3))
    assert onnx_metadata(path)["outputs"] == {"forecast": ["batch", 4, 2]}


@pytest.mark.integration  # two more exports: the default backbone's are in the unit tier above
@pytest.mark.parametrize(("backbone", "causal"), [("variates", False), ("bars", True)])
def test_kline_onnx_matches_torch_for_every_backbone(backbone: str, causal: bool, tmp_path: Path) -> None:
    needs_onnx()
    model = KLineForecaster(
        n_features=3, n_targets=2, target_channels=[2, 0], backbone=backbone, causal=causal, **KLINE_TINY
    ).eval()
    path = export_onnx(model, tmp_path / "kline.onnx")  # verify=True runs the same check inside
    _ort_matches(model, path, (32, 3))
    assert onnx_metadata(path)["outputs"] == {"forecast": ["batch", 4, 2]}


def test_onnx_refuses_the_translation_model(text_ckpt: tuple[Path, Seq2SeqTransformer], tmp_path: Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"Seq2SeqTransformer cannot be exported to ONNX: it has no example_input_array.*--format safetensors",
    ):
        export_onnx(text_ckpt[1], tmp_path / "text.onnx")


# ------------------------------------------------------------------------------------------- CLI


def test_cli_exports_a_trainer_checkpoint(
    kline_ckpt: tuple[Path, KLineForecaster, KLineDataModule], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    needs_onnx()
    path, model, _ = kline_ckpt
    main(["export", "--ckpt_path", str(path), "--format", "safetensors", "--output", str(tmp_path / "st")])
    main(["export", "--ckpt_path", str(path), "--format", "onnx", "--output", str(tmp_path / "m.onnx")])
    printed = capsys.readouterr().out
    assert "model.safetensors" in printed and "m.onnx" in printed
    x = torch.randn(3, 32, 6)
    assert torch.equal(load_safetensors(tmp_path / "st")(x), model(x))
    _ort_matches(model, tmp_path / "m.onnx", (32, 6))


def test_cli_default_output_and_text_checkpoint(
    text_ckpt: tuple[Path, Seq2SeqTransformer], capsys: pytest.CaptureFixture
) -> None:
    path, model = text_ckpt
    main(["export", "--ckpt_path", str(path)])  # safetensors, next to the checkpoint
    out = path.with_name("last_safetensors")
    assert load_safetensors(out).translate(SENTENCES) == model.translate(SENTENCES)


def test_cli_errors(text_ckpt: tuple[Path, Seq2SeqTransformer], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    missing = tmp_path / "missing.ckpt"
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", str(missing), "--format", "onnx"])
    assert f"{missing}: no such checkpoint file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", str(text_ckpt[0]), "--format", "onnx", "--output", str(tmp_path / "t.onnx")])
    err = capsys.readouterr().err
    assert err.startswith("lightning-tf: error: Seq2SeqTransformer cannot be exported to ONNX") and err.count("\n") == 1
    assert "--format safetensors" in err
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", str(text_ckpt[0]), "--format", "tflite"])
    assert "invalid choice: 'tflite'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a Pre-LN model with BPE has no Marian form
        main(["export", "--ckpt_path", str(text_ckpt[0]), "--format", "marian", "--output", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert err.startswith("lightning-tf: error: to_marian: norm_first is True; a Marian model is Post-LN")
    assert err.count("\n") == 1


def test_cli_marian_format_is_for_translation_models(
    kline_ckpt: tuple[Path, KLineForecaster, KLineDataModule], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", str(kline_ckpt[0]), "--format", "marian", "--output", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert "--format marian is for translation models; KLineForecaster has no Marian form" in err
    assert not (tmp_path / "m").exists()
