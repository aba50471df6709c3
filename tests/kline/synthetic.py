"""A stand-in DataModule for the model tests: noisy sinusoids whose targets are the input channels
(level targets, like the ETT "M" mode), with the batch dict and the methods of the real ones."""

from __future__ import annotations

import math

import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

SCALE, SHIFT = 2.0, 1.0  # a fixed affine "scaler": original = model * SCALE + SHIFT


class Windows(Dataset):
    def __init__(self, series: Tensor, start: int, end: int, L: int, F: int) -> None:
        self.series, self.L, self.F = series, L, F
        self.starts = list(range(start, end - L - F + 1))

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        s = self.starts[i]
        x = self.series[s : s + self.L]  # (L, C)
        return {
            "x": x,
            "y": self.series[s + self.L : s + self.L + self.F],  # (F, C)
            "anchor": torch.tensor(1.0, dtype=torch.float64),
            "ticker": torch.tensor(0),
            "time": torch.tensor(s + self.L - 1, dtype=torch.int64),
        }


class SineDataModule(LightningDataModule):
    """Channel c is ``sin(2 pi t / period_c + phase_c) + noise``; chronological 60/20/20 splits.

    Args:
        n_features: channels C (all of them are targets).
        context_len: context length L.
        horizon: horizon F.
        n_bars: length of the series.
        noise: standard deviation of the noise.
        batch_size: windows per batch.
    """

    def __init__(self, n_features: int = 2, context_len: int = 48, horizon: int = 8, n_bars: int = 1200,
                 noise: float = 0.1, batch_size: int = 64) -> None:
        super().__init__()
        self.n_features = self.n_targets = n_features
        self.context_len, self.horizon, self.batch_size = context_len, horizon, batch_size
        self.target_channels = list(range(n_features))
        g = torch.Generator().manual_seed(0)
        t = torch.arange(n_bars, dtype=torch.float32)[:, None]  # (T, 1)
        periods = torch.tensor([24.0 + 7 * c for c in range(n_features)])  # (C,)
        phases = torch.rand(n_features, generator=g) * 2 * math.pi
        self.series = torch.sin(2 * math.pi * t / periods + phases) + noise * torch.randn(n_bars, n_features, generator=g)
        self.n_bars = n_bars

    def setup(self, stage: str | None = None) -> None:
        L, F, T = self.context_len, self.horizon, self.n_bars
        a, b = int(0.6 * T), int(0.8 * T)
        self.feature_names = [f"sine{c}" for c in range(self.n_features)]
        self.target_names = list(self.feature_names)
        self.train_set = Windows(self.series, 0, a, L, F)
        self.val_set = Windows(self.series, a - L, b, L, F)
        self.test_set = Windows(self.series, b - L, T, L, F)

    def inverse_targets(self, y: Tensor, ticker: Tensor | None = None) -> Tensor:
        return y.double() * SCALE + SHIFT

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.batch_size)
