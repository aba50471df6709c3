"""Checkpoint averaging (``lightning-tf average``, :func:`lightning_tf.training.average_checkpoints`): the
averaged checkpoint's parameters are the mean of the inputs', it predicts, exports and serves like any
checkpoint, and incompatible checkpoints are refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_tf.__main__ import main
from lightning_tf.export import load_module
from lightning_tf.training import average_checkpoints, average_state_dicts
from lightning_tf.vision import ImageDataModule, ViTClassifier


def fit(root: Path, d_model: int = 16, epochs: int = 3) -> list[Path]:
    """A tiny ViT trained ``epochs`` epochs of 3 steps on the digits, a checkpoint after each."""
    torch.manual_seed(0)
    model = ViTClassifier(preset="digits", d_model=d_model, n_heads=2, n_layers=1, d_ff=32, warmup_steps=2, lr=1e-2)
    trainer = Trainer(
        max_epochs=epochs,
        limit_train_batches=3,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[ModelCheckpoint(dirpath=root, filename="{epoch}", save_top_k=-1)],
    )
    trainer.fit(model, ImageDataModule(batch_size=16))
    return [root / f"epoch={e}.ckpt" for e in range(epochs)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return fit(tmp_path_factory.mktemp("average"))


def test_the_average_is_the_mean_and_predicts_exports_and_serves(
    checkpoints: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "avg.ckpt"
    main(["average", *map(str, checkpoints), "-o", str(out)])
    assert "averaged 3 checkpoints" in capsys.readouterr().out
    states = [torch.load(p, map_location="cpu", weights_only=True)["state_dict"] for p in checkpoints]
    averaged = torch.load(out, map_location="cpu", weights_only=True)
    assert set(averaged["state_dict"]) == set(states[0])
    assert not torch.equal(states[0]["net.head.weight"], states[2]["net.head.weight"])  # there is something to average
    for key, value in averaged["state_dict"].items():
        if value.is_floating_point():
            torch.testing.assert_close(
                value, (states[0][key] + states[1][key] + states[2][key]) / 3, rtol=1e-6, atol=1e-7
            )
    assert averaged["averaged_from"] == [str(p) for p in checkpoints] and "optimizer_states" not in averaged
    # it loads as any checkpoint: Python, export/serve (load_module), a Trainer's predict
    model = ViTClassifier.load_from_checkpoint(out)
    torch.testing.assert_close(model.net.head.weight.detach(), averaged["state_dict"]["net.head.weight"])
    served = load_module(out)
    x = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(served(x), model.eval()(x))
    assert model.class_names == [str(i) for i in range(10)] and model.mean is not None
    trainer = Trainer(
        logger=False, enable_progress_bar=False, accelerator="cpu", limit_predict_batches=1, default_root_dir=tmp_path
    )
    probs = trainer.predict(model, ImageDataModule(batch_size=8), ckpt_path=str(out), return_predictions=True)
    assert probs[0]["probs"].shape == (8, 10)
    pytest.importorskip("litserve")
    from lightning_tf.serve.api import Serving
    from lightning_tf.serve.vision import VisionAPI

    api = VisionAPI(str(out), Serving(max_batch_size=1))
    api.load("cpu")
    torch.testing.assert_close(api.model.net.head.weight, model.net.head.weight)


def test_incompatible_checkpoints_are_refused_in_one_line(checkpoints: list[Path], tmp_path: Path, capsys) -> None:
    (wider,) = fit(tmp_path / "wide", d_model=32, epochs=1)
    with pytest.raises(
        ValueError, match=r"is not compatible with .*epoch=0\.ckpt: 'net\.\S+' is \(.*32.*\) torch\.float32 there"
    ):
        average_checkpoints([checkpoints[0], wider], tmp_path / "out.ckpt")
    with pytest.raises(SystemExit) as done:
        main(["average", str(checkpoints[0]), str(wider), "-o", str(tmp_path / "out.ckpt")])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not compatible with" in err
    assert not (tmp_path / "out.ckpt").exists()
    with pytest.raises(ValueError, match="is one of the checkpoints averaged"):
        average_checkpoints(checkpoints, checkpoints[0])


def test_checkpoints_that_predict_with_other_state_are_refused(checkpoints: list[Path], tmp_path: Path) -> None:
    """The same weights' shapes, but other class names (another folder's classes in another order): an average of
    their rows would mean nothing, and the output would keep one side's names. Refused, naming what differs."""
    other = torch.load(checkpoints[1], map_location="cpu", weights_only=True)
    other["class_names"] = [*other["class_names"][1:], other["class_names"][0]]
    torch.save(other, tmp_path / "other_classes.ckpt")
    with pytest.raises(ValueError, match=r"other_classes.ckpt is not compatible with .*: its 'class_names' \(what"):
        average_checkpoints([checkpoints[0], tmp_path / "other_classes.ckpt"], tmp_path / "out.ckpt")
    assert not (tmp_path / "out.ckpt").exists()
    # what differs between any two checkpoints of a run (its metrics, random state, data module settings) does not
    later = torch.load(checkpoints[2], map_location="cpu", weights_only=True)
    later |= {"callback_metrics": {"ranks": [{"val/loss": 0.5}]}, "rng_states": {"torch": torch.ones(3)}}
    later |= {"datamodule_hyper_parameters": {"batch_size": 99}, "MixedPrecision": {"scale": 2.0}}
    torch.save(later, tmp_path / "later.ckpt")
    average_checkpoints([checkpoints[0], tmp_path / "later.ckpt"], tmp_path / "out.ckpt")


def test_state_dicts_differing_in_keys_or_counters_are_refused() -> None:
    a = {"w": torch.ones(2), "n": torch.tensor(3)}
    torch.testing.assert_close(
        average_state_dicts([a, {"w": torch.zeros(2), "n": torch.tensor(3)}])["w"], torch.full((2,), 0.5)
    )
    with pytest.raises(ValueError, match=r"#1 is not compatible with #0: parameter 'n' is in one and not the other"):
        average_state_dicts([a, {"w": torch.ones(2)}])
    with pytest.raises(ValueError, match=r"integer tensor 'n' differs"):
        average_state_dicts([a, {"w": torch.ones(2), "n": torch.tensor(4)}])
