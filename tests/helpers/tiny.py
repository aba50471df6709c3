"""Test-only LightningModules and a DataModule: linear regression on generated data, small enough
that the real CLI runs fit, validate, test and predict in seconds."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset


class TinyDataModule(LightningDataModule):
    """``y = x @ w + noise`` with a fixed ``w``.

    Args:
        n: samples per split.
        n_features: input width.
        batch_size: samples per batch.
    """

    def __init__(self, n: int = 64, n_features: int = 4, batch_size: int = 16) -> None:
        super().__init__()
        self.n, self.n_features, self.batch_size = n, n_features, batch_size

    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        w = torch.randn(self.n_features, 1, generator=g)
        x = torch.randn(3 * self.n, self.n_features, generator=g)
        y = x @ w + 0.01 * torch.randn(3 * self.n, 1, generator=g)
        self.splits = [
            TensorDataset(x[i * self.n : (i + 1) * self.n], y[i * self.n : (i + 1) * self.n]) for i in range(3)
        ]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.splits[0], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits[1], batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits[2], batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.splits[2], batch_size=self.batch_size)


class TinyRegressor(LightningModule):
    """One linear layer.

    Args:
        n_features: input width.
        lr: SGD learning rate.
    """

    def __init__(self, n_features: int = 4, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.linear = torch.nn.Linear(n_features, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)

    def _shared_step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log(f"{stage}/loss", loss)
        return loss

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "test")

    def predict_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class ReportingRegressor(TinyRegressor):
    """TinyRegressor with its own test report (``test_report()``), which the CLI prints instead of the
    table of test metrics."""

    def test_report(self) -> str:
        loss = float(self.trainer.callback_metrics["test/loss"])
        return f"tiny report: test loss {loss:.6f}"
