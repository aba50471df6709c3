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
from lightning_tf.kline.settings import Covariates, Features, Loading, Splits
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
    dm = KLineDataModule(
        path=str(write_bars(root / "bars.csv")), context_len=32, horizon=4, loading=Loading(batch_size=32)
    )
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
    meta = onnx_metadata(path)
    # a model without covariates: the one input it always had, and nothing said of covariates
    assert meta["inputs"] == {"context": ["batch", 32, 3]} and meta["outputs"] == {"forecast": ["batch", 4, 2]}
    assert "covariates" not in meta


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


def covariate_model(n_future: int, static_sizes: list[int], backbone: str = "patches") -> KLineForecaster:
    """A tiny forecaster with known-future and / or static covariates whose head is not zero (it starts at zero,
    where the covariates would not move the forecast and an input left out of the graph would go unnoticed)."""
    torch.manual_seed(0)
    model = KLineForecaster(
        n_features=3, n_targets=2, target_channels=[2, 0], channel_mixing=True, backbone=backbone, **KLINE_TINY
    )
    model.net.set_covariates(n_future, static_sizes)
    with torch.no_grad():
        for p in model.net.covariates.parameters():
            p.normal_()
    return model.eval()


def _covariate_inputs(batch: int, n_future: int, static_sizes: list[int], seed: int) -> dict[str, torch.Tensor]:
    """Random graph inputs by name: context, x_future, static ids below each vocabulary size."""
    g = torch.Generator().manual_seed(seed)
    inputs = {"context": torch.randn(batch, 32, 3, generator=g)}
    if n_future:
        inputs["x_future"] = torch.randn(batch, 4, n_future, generator=g)
    if static_sizes:
        inputs["static"] = torch.stack([torch.randint(0, s, (batch,), generator=g) for s in static_sizes], dim=1)
    return inputs


def _torch_forecast(model: KLineForecaster, inputs: dict[str, torch.Tensor]) -> np.ndarray:
    with torch.no_grad():
        return model(inputs["context"], inputs.get("x_future"), inputs.get("static")).numpy()


def _ort_forecast(session: Any, inputs: dict[str, torch.Tensor]) -> np.ndarray:
    return session.run(None, {name: t.numpy() for name, t in inputs.items()})[0]


def _check_covariate_onnx(model: KLineForecaster, path: Path, n_future: int, static_sizes: list[int]) -> None:
    """The graph takes exactly the model's inputs, matches torch at batch 1 and 3, and reads each covariate:
    another x_future (another static id) gives another forecast, torch's."""
    ort = needs_onnx()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = ["context", *(["x_future"] if n_future else []), *(["static"] if static_sizes else [])]
    assert [i.name for i in session.get_inputs()] == expected
    assert [i.type for i in session.get_inputs()] == [
        "tensor(int64)" if name == "static" else "tensor(float)" for name in expected
    ]
    for batch in (1, 3):  # the example batch was 2: the batch axis is really dynamic
        inputs = _covariate_inputs(batch, n_future, static_sizes, seed=batch)
        base = _ort_forecast(session, inputs)
        np.testing.assert_allclose(base, _torch_forecast(model, inputs), rtol=0, atol=1e-4)
        changed = {}
        if n_future:
            changed["x_future"] = inputs | {"x_future": inputs["x_future"] + 1.0}
        if static_sizes:
            changed["static"] = inputs | {"static": (inputs["static"] + 1) % torch.tensor(static_sizes)}
        for name, other in changed.items():
            got = _ort_forecast(session, other)
            assert np.abs(got - base).max() > 1e-2, f"changing {name} left the ONNX forecast unchanged"
            np.testing.assert_allclose(got, _torch_forecast(model, other), rtol=0, atol=1e-4)


@pytest.mark.integration  # three exports of about 3 s each
@pytest.mark.parametrize(("n_future", "static_sizes"), [(2, [4, 3]), (2, []), (0, [5])])
def test_kline_onnx_with_covariates_takes_them_as_inputs(
    n_future: int, static_sizes: list[int], tmp_path: Path
) -> None:
    model = covariate_model(n_future, static_sizes)
    path = export_onnx(model, tmp_path / "kline.onnx")  # verify=True feeds random inputs of every kind
    _check_covariate_onnx(model, path, n_future, static_sizes)
    meta = onnx_metadata(path)
    inputs = {"context": ["batch", 32, 3]}
    if n_future:
        inputs["x_future"] = ["batch", 4, n_future]
    if static_sizes:
        inputs["static"] = ["batch", len(static_sizes)]
    assert meta["inputs"] == inputs and meta["outputs"] == {"forecast": ["batch", 4, 2]}
    cov = meta["covariates"]
    assert list(cov) == [k for k in ("x_future", "static") if k in inputs]
    if n_future:  # built without data: no column names to tell
        assert cov["x_future"] == {"shape": inputs["x_future"], "dtype": "float32", "columns": None, "calendar": None}
    if static_sizes:
        assert cov["static"]["sizes"] == static_sizes and cov["static"]["unknown_id"] == 0
    assert meta["extras"]["covariate_sizes"] == {"n_future": n_future, "static_sizes": static_sizes}


@pytest.mark.integration
@pytest.mark.parametrize("backbone", ["variates", "bars"])
def test_kline_onnx_with_covariates_for_every_backbone(backbone: str, tmp_path: Path) -> None:
    model = covariate_model(2, [4, 3], backbone=backbone)
    _check_covariate_onnx(model, export_onnx(model, tmp_path / "kline.onnx"), 2, [4, 3])


def test_kline_covariate_model_safetensors_roundtrip_is_bitwise(tmp_path: Path) -> None:
    model = covariate_model(2, [4, 3])
    loaded = load_safetensors(export_safetensors(model, tmp_path / "st"))
    assert loaded.net.covariate_sizes == (2, [4, 3])
    inputs = _covariate_inputs(3, 2, [4, 3], seed=0)
    assert np.array_equal(_torch_forecast(loaded, inputs), _torch_forecast(model, inputs))


class _TwoInputs(LightningModule):
    """A module with two forward inputs, to check what the ONNX export asks of such modules."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    @property
    def example_input_array(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(1, 4), torch.zeros(1, 4)

    def forward(self, x: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        return self.lin(x + extra)


def test_onnx_export_of_several_inputs_needs_their_names(tmp_path: Path) -> None:
    needs_onnx()
    model = _TwoInputs()
    with pytest.raises(ValueError, match=r"_TwoInputs cannot be exported to ONNX: its example_input_array is a tuple"):
        export_onnx(model, tmp_path / "m.onnx")
    model.onnx_example_inputs = lambda batch: {"x": torch.randn(batch, 4), "extra": torch.randn(batch, 4)}
    model.onnx_input_names = ["x"]
    with pytest.raises(ValueError, match=r"onnx_input_names \['x'\] do not name its example inputs \['x', 'extra'\]"):
        export_onnx(model, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


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


@pytest.mark.integration  # a fit on a generated universe and an export through the command
def test_cli_exports_a_covariate_checkpoint_that_forecasts_as_the_model_does(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A checkpoint with past, known-future (calendar and a user column) and static (ticker, sector) covariates:
    the graph takes context, x_future and static, the metadata names their columns, and fed with the windows that
    forecast() builds (lightning_tf.kline.inference.last_windows) it gives forecast()'s numbers."""
    ort = needs_onnx()
    from lightning_tf.kline.inference import last_windows
    from lightning_tf.kline.scale import DataScale
    from lightning_tf.kline.windows import next_timestamps
    from tests.helpers.universe import write_universe

    frame = write_universe(tmp_path / "u.csv", n_tickers=4, n_days=320, past=1.0, future=1.0)
    pd.DataFrame({"ticker": [f"T{k:02d}" for k in range(4)], "sector": ["a", "b", "a", "b"]}).to_csv(
        tmp_path / "sectors.csv", index=False
    )
    dm = KLineDataModule(
        str(tmp_path / "u.csv"),
        context_len=16,
        horizon=2,
        features=Features(names=["log_return"]),
        splits=Splits(val_start="2015-10-01", test_start="2015-12-15"),
        covariates=Covariates(
            past=["signal"],
            future=["event"],
            calendar="XNYS",
            ticker_embedding=True,
            static_file=str(tmp_path / "sectors.csv"),
        ),
        loading=Loading(batch_size=64),
    )
    torch.manual_seed(0)
    model = KLineForecaster(n_features=2, context_len=16, horizon=2, channel_mixing=True, d_model=8, n_heads=2)
    ckpt = fit(model, dm, tmp_path)
    main(["export", "--ckpt_path", str(ckpt), "--format", "onnx", "--output", str(tmp_path / "cov.onnx")])
    assert "inputs: context (batch, 16, 2), x_future (batch, 2, 6), static (batch, 2)" in capsys.readouterr().out
    meta = onnx_metadata(tmp_path / "cov.onnx")
    cov = meta["covariates"]
    spec = meta["extras"]["data_scale"]["covariates"]
    assert cov["x_future"]["columns"] == spec["future_names"] and spec["future_names"][-1] == "event"
    assert cov["x_future"]["calendar"] == "XNYS" and len(spec["future_mean"]) == 4  # per trained ticker
    assert cov["static"] == {
        "shape": ["batch", 2],
        "dtype": "int64",
        "columns": ["ticker", "sector"],
        "sizes": [5, 3],
        "unknown_id": 0,
    }
    # fed as forecast() feeds the model: the scaled last windows, the forecast mapped back with their statistics
    loaded = load_module(ckpt)
    bars = frame[frame["ticker"].isin(["T01", "T02"])].groupby("ticker").head(200)
    last = pd.DatetimeIndex(bars["date"].iloc[198:200])
    stamps = next_timestamps(last, 2, calendar="XNYS")
    future = pd.DataFrame({"ticker": ["T01", "T01", "T02", "T02"], "timestamp": [*stamps, *stamps]})
    future["event"] = [2.0, -1.0, 0.5, 1.5]
    table = loaded.forecast(bars, future=future)
    # the ONNX file alone: its metadata's data scale builds the inputs
    scale = DataScale.from_dict(meta["extras"]["data_scale"])
    windows = last_windows(bars, scale=scale, context_len=16, horizon=2, future=future)
    session = ort.InferenceSession(str(tmp_path / "cov.onnx"), providers=["CPUExecutionProvider"])
    feed = {
        "context": np.stack([w.x for w in windows]).astype(np.float32),  # (2, 16, 2)
        "x_future": np.stack([w.x_future for w in windows]).astype(np.float32),  # (2, 2, 6)
        "static": np.stack([w.static for w in windows]).astype(np.int64),  # (2, 2)
    }
    out = session.run(None, feed)[0]  # (2, 2, 1) on the model scale
    std = np.stack([w.target_std for w in windows])[:, None, :]
    mean = np.stack([w.target_mean for w in windows])[:, None, :]
    np.testing.assert_allclose((out * std + mean).reshape(-1), table["pred_log_return"], rtol=1e-4, atol=1e-6)


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
    (tmp_path / "a_file").write_text("mine")  # a folder format over a file: refused, the file kept
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", str(text_ckpt[0]), "--output", str(tmp_path / "a_file")])
    err = capsys.readouterr().err
    assert err == f"lightning-tf: error: --output {tmp_path / 'a_file'}: a file is there; --format safetensors " + (
        "writes a folder (name a new one)\n"
    )
    assert (tmp_path / "a_file").read_text() == "mine"


def test_cli_marian_format_is_for_translation_models(
    kline_ckpt: tuple[Path, KLineForecaster, KLineDataModule], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", str(kline_ckpt[0]), "--format", "marian", "--output", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert "--format marian is for translation models; KLineForecaster has no Marian form" in err
    assert not (tmp_path / "m").exists()
