"""EMA of the weights through Lightning's own ``EMAWeightAveraging`` (configs/trainer/ema.yaml): the average
equals one computed by hand, validation runs on it, checkpoints hold it (and the raw weights beside it), and
what loads a checkpoint (test, predict, export, serve) gets it."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import EMAWeightAveraging, ModelCheckpoint

from lightning_tf.export import load_module
from lightning_tf.vision import ImageDataModule, ViTClassifier

ROOT = Path(__file__).resolve().parents[1]
DECAY = 0.8


class Record(Callback):
    """The raw weights after every optimizer step (before the EMA callback, listed after this one, updates),
    and the weights validation runs on."""

    def __init__(self) -> None:
        self.steps: list[dict[str, torch.Tensor]] = []
        self.validated: list[tuple[int, dict[str, torch.Tensor]]] = []

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        self.steps.append({n: p.detach().clone() for n, p in pl_module.named_parameters()})

    def on_validation_batch_start(self, trainer, pl_module, *args) -> None:
        if not self.validated or self.validated[-1][0] != trainer.global_step:
            self.validated.append(
                (trainer.global_step, {n: p.detach().clone() for n, p in pl_module.named_parameters()})
            )


def by_hand(steps: list[dict[str, torch.Tensor]], decay: float) -> list[dict[str, torch.Tensor]]:
    """EMA after each step: the first step's weights, then ``decay * ema + (1 - decay) * weights``."""
    out: list[dict[str, torch.Tensor]] = []
    for w in steps:
        out.append(dict(w) if not out else {k: decay * out[-1][k] + (1 - decay) * w[k] for k in w})
    return out


def close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return set(a) == set(b) and all(torch.allclose(a[k], b[k], atol=1e-7, rtol=1e-6) for k in a)


def test_ema_is_the_hand_computed_average_and_validation_checkpoints_and_loading_use_it(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = ViTClassifier(preset="digits", d_model=16, n_heads=2, n_layers=1, d_ff=32, warmup_steps=2, lr=1e-2)
    record = Record()
    every = ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=3, save_top_k=-1)
    trainer = Trainer(
        max_steps=6,
        val_check_interval=3,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[record, EMAWeightAveraging(decay=DECAY), every],
    )
    trainer.fit(model, ImageDataModule(batch_size=16))
    ema = by_hand(record.steps, DECAY)
    assert len(ema) == 6 and not close(ema[-1], record.steps[-1])  # the average is not the last weights
    # after fit the model holds the average
    assert close({n: p.detach() for n, p in model.named_parameters()}, ema[-1])
    # validation ran on the average of its step
    assert [s for s, _ in record.validated] == [3, 6]
    for step, weights in record.validated:
        assert close(weights, ema[step - 1]), step
    # training continued from the raw weights after validation: step 4's raw weights are not the EMA's
    assert not close(record.steps[3], ema[3])
    # a checkpoint holds the average as its state_dict and the raw weights beside it
    ckpt = torch.load(tmp_path / "step=3.ckpt", map_location="cpu", weights_only=True)
    assert close({k: v for k, v in ckpt["state_dict"].items() if k in ema[2]}, ema[2])
    assert close({k: v for k, v in ckpt["current_model_state"].items() if k in ema[2]}, record.steps[2])
    assert int(ckpt["averaging_state"]["n_averaged"]) == 3
    # what loads a checkpoint (test, predict, export, serve) gets the average
    for loaded in (ViTClassifier.load_from_checkpoint(tmp_path / "step=3.ckpt"), load_module(tmp_path / "step=3.ckpt")):
        assert close({n: p.detach() for n, p in loaded.named_parameters()}, ema[2])


def test_the_ema_config_adds_lightnings_callback() -> None:
    config = yaml.safe_load((ROOT / "configs/trainer/ema.yaml").read_text())
    (callback,) = config["trainer"]["callbacks+"]
    assert callback["class_path"] == "lightning.pytorch.callbacks.EMAWeightAveraging"
    assert 0 < callback["init_args"]["decay"] < 1
