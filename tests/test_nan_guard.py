"""NaNGuard: a non-finite loss, gradient or parameter stops training with one message naming the
step, the quantity and the last good checkpoint; nothing non-finite reaches the weights or a
checkpoint file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from lightning_tf.training import NaNGuard, NonFiniteError, last_checkpoint

ROOT = Path(__file__).resolve().parents[1]


class Regressor(LightningModule):
    """Linear regression whose loss (or one gradient) turns non-finite at ``bad_step``."""

    def __init__(self, bad_step: int = -1, bad_value: float = float("nan"), where: str = "loss", lr: float = 0.05):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.bad_step, self.bad_value, self.where, self.lr = bad_step, bad_value, where, lr

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        out = self.linear(x)
        if self.global_step == self.bad_step and self.where == "grad":
            out.register_hook(lambda g: torch.full_like(g, self.bad_value))  # finite loss, poisoned gradient
        loss = F.mse_loss(out, y)
        if self.global_step == self.bad_step and self.where == "loss":
            loss = loss * self.bad_value
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def trainer(tmp_path: Path, guard: NaNGuard | None = None, every: int = 2, max_steps: int = 40, **ckpt: Any) -> Trainer:
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=every, save_last=True, save_top_k=-1, **ckpt)
    return Trainer(
        max_steps=max_steps,
        callbacks=[guard or NaNGuard(), checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
    )


def all_finite(state: dict[str, Tensor]) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in state.values() if v.is_floating_point())


def test_nan_loss_stops_with_the_step_and_the_last_good_checkpoint(tmp_path: Path) -> None:
    model = Regressor(bad_step=11)  # epoch 1 (8 batches per epoch), batch 3
    t = trainer(tmp_path)
    with pytest.raises(NonFiniteError) as info:
        t.fit(model, loader())
    message = str(info.value)
    last = tmp_path / "last.ckpt"
    assert message.startswith("the training loss is nan at global step 11 (epoch 1, batch 3).")
    assert f"Last good checkpoint: {last}" in message and f"--ckpt_path {last}" in message
    assert all_finite(model.state_dict())  # the step with the NaN was never taken
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["global_step"] == 10  # nothing written after the NaN
    assert all_finite(ckpt["state_dict"])
    assert not any("step=11" in p.name or "step=12" in p.name for p in tmp_path.glob("*.ckpt"))


def test_without_the_guard_the_nan_reaches_the_weights_and_the_checkpoint(tmp_path: Path) -> None:
    """What the guard prevents: a NaN loss is stepped into the weights and saved as last.ckpt."""
    model = Regressor(bad_step=11)
    t = Trainer(
        max_steps=14,
        callbacks=[ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_last=True)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    t.fit(model, loader())
    assert not all_finite(torch.load(tmp_path / "last.ckpt", weights_only=True)["state_dict"])


def test_inf_loss_before_any_checkpoint_says_none_saved(tmp_path: Path) -> None:
    with pytest.raises(NonFiniteError, match=r"loss is inf at global step 1 \(epoch 0, batch 1\)[\s\S]*none saved yet"):
        trainer(tmp_path, every=5).fit(Regressor(bad_step=1, bad_value=float("inf")), loader())


def test_exception_checkpoint_holds_the_finite_weights(tmp_path: Path) -> None:
    """With ``save_on_exception=True`` ModelCheckpoint saves once more on the error: those weights are
    the ones before the bad step, so they are finite too."""
    model = Regressor(bad_step=5)
    with pytest.raises(NonFiniteError):
        trainer(tmp_path, every=100, save_on_exception=True).fit(model, loader())
    files = list(tmp_path.glob("*.ckpt"))
    assert files and all(all_finite(torch.load(f, weights_only=True)["state_dict"]) for f in files)


def test_a_learning_rate_blow_up_is_caught_with_finite_weights(tmp_path: Path) -> None:
    """SGD at lr 10 diverges: the loss grows to inf within a few steps; the guard stops there."""
    model = Regressor(lr=10.0)
    with pytest.raises(NonFiniteError, match=r"the training loss is (inf|nan) at global step \d+"):
        trainer(tmp_path).fit(model, loader())
    assert all_finite(model.state_dict())
    assert 2 < model.global_step < 40


def test_gradient_check_names_the_parameter(tmp_path: Path) -> None:
    model = Regressor(bad_step=3, where="grad")
    with pytest.raises(
        NonFiniteError, match=r"the gradient of linear.weight has 4 NaN and 0 infinite of 4 values at global step 3"
    ):
        trainer(tmp_path, guard=NaNGuard(check_grads=True)).fit(model, loader())
    assert all_finite(model.state_dict())


def test_parameter_check_catches_what_the_loss_check_cannot_see(tmp_path: Path) -> None:
    """A poisoned gradient with a finite loss: the loss check passes, the parameter check stops
    right after the step and before ModelCheckpoint could save it."""
    model = Regressor(bad_step=3, where="grad")
    with pytest.raises(
        NonFiniteError, match=r"parameter linear.weight has 4 NaN .* at global step 4[\s\S]*not checkpointed"
    ):
        trainer(tmp_path, guard=NaNGuard(check_params=True), every=1).fit(model, loader())
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 3
    assert all_finite(torch.load(tmp_path / "last.ckpt", weights_only=True)["state_dict"])


def test_every_n_steps_checks_less_often(tmp_path: Path) -> None:
    model = Regressor(bad_step=3, bad_value=float("inf"))
    t = trainer(tmp_path, guard=NaNGuard(every_n_steps=2), max_steps=8)
    # step 3 is not checked: its inf is stepped into the weights, and step 4's check finds the NaN
    with pytest.raises(NonFiniteError, match=r"nan at global step 4 [\s\S]*linear.weight is already non-finite"):
        t.fit(model, loader())


def test_bad_argument() -> None:
    with pytest.raises(ValueError, match=r"every_n_steps \(0\) must be >= 1"):
        NaNGuard(every_n_steps=0)


class Evaluated(Regressor):
    """The regressor with validation and test steps; from ``bad_epoch`` on its evaluation loss is ``bad_value``
    (as NaN inputs in the evaluation data would make it) while its weights stay finite."""

    def __init__(self, bad_epoch: int = 1, bad_value: float = float("nan")) -> None:
        super().__init__()
        self.bad_epoch, self.eval_bad_value = bad_epoch, bad_value

    def _eval(self, batch: tuple[Tensor, Tensor], stage: str) -> None:
        x, y = batch
        loss = F.mse_loss(self.linear(x), y)
        if self.current_epoch >= self.bad_epoch or stage == "test":
            loss = loss * self.eval_bad_value
        self.log(f"{stage}/loss", loss)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval(batch, "test")


def test_a_nan_validation_loss_stops_before_a_checkpoint_is_saved(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val/loss", save_last=True)
    t = Trainer(
        max_epochs=4,
        callbacks=[NaNGuard(), checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        num_sanity_val_steps=0,
    )
    model = Evaluated(bad_epoch=1)
    with pytest.raises(NonFiniteError) as info:
        t.fit(model, loader(), loader())
    message = str(info.value)
    assert message.startswith(
        "the validation loss is nan after epoch 1, global step 16; the weights are finite: "
        "look for NaN or infinite values in the validation data."
    )
    assert "No checkpoint was saved from this validation." in message
    assert f"Last good checkpoint: {tmp_path / 'last.ckpt'}" in message
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 8  # epoch 0's, not epoch 1's


def test_an_infinite_test_loss_is_an_error_and_can_be_switched_off(tmp_path: Path) -> None:
    def run(guard: NaNGuard) -> None:
        Trainer(
            callbacks=[guard],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=tmp_path,
        ).test(Evaluated(bad_value=float("inf")), loader())

    with pytest.raises(
        NonFiniteError, match=r"^the test loss is inf \(epoch 0, global step 0\); the weights are finite"
    ):
        run(NaNGuard())
    run(NaNGuard(check_eval=False))  # logged as inf, not raised


def test_a_finite_validation_passes(tmp_path: Path) -> None:
    t = Trainer(
        max_epochs=2,
        callbacks=[NaNGuard()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    t.fit(Evaluated(bad_epoch=99), loader(), loader())
    assert torch.isfinite(t.callback_metrics["val/loss"])
    assert last_checkpoint(Trainer(callbacks=[ModelCheckpoint(dirpath=tmp_path / "none")], logger=False)) is None


@pytest.mark.slow  # a subprocess with wandb: ~20 s on a busy machine
def test_cli_exits_non_zero_with_the_message(tmp_path: Path) -> None:
    """Through the real command: the default trainer config plus the guard, a diverging learning rate."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    args = [
        sys.executable,
        "-m",
        "lightning_tf",
        "fit",
        "--config",
        "configs/trainer/default.yaml",
        "--model",
        "tests.helpers.tiny.TinyRegressor",
        "--model.lr",
        "1e4",
        "--data",
        "tests.helpers.tiny.TinyDataModule",  # the default trainer config holds the guard
        "--trainer.max_epochs",
        "50",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path),
        "--trainer.default_root_dir",
        str(tmp_path),
    ]
    proc = subprocess.run(args, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "lightning-tf: training stopped: the training loss is" in proc.stderr
    assert "Last good checkpoint: " in proc.stderr and "Traceback" not in proc.stderr
