"""Generated series for the K-line tests: random-walk OHLCV bars, an ETTh1-shaped CSV, and a stand-in
DataModule of noisy sinusoids with the batch dict, the sizes and the data scale of the real ones."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule, Trainer
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from lightning_tf.core import TransformerSpec
from lightning_tf.kline import DataHandover, DataScale
from lightning_tf.kline.networks import DEFAULT_SPEC

__all__ = [
    "SCALE",
    "SHIFT",
    "TINY",
    "SineDataModule",
    "make_bars",
    "net_args",
    "quiet_trainer",
    "write_bars",
    "write_etth1",
]

# a small forecaster: patches of 8 with stride 4, two layers of width 16
TINY = {"patch_len": 8, "stride": 4, "d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32}

SPEC_FIELDS = {f.name for f in dataclasses.fields(TransformerSpec)}


def quiet_trainer(max_epochs: int = 1, **kw: Any) -> Trainer:
    """A test's Trainer: no logger, checkpoints, progress bar or model summary unless ``kw`` asks for them."""
    kw = {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        **kw,
    }
    return Trainer(max_epochs=max_epochs, **kw)


def net_args(**flat: Any) -> dict[str, Any]:
    """The network's arguments from flat ones as the LightningModule takes them (``TINY``, ``dropout=0.0``):
    the encoder's settings gathered into one ``spec`` (the network's default one, changed), the rest as given."""
    changes = {k: flat.pop(k) for k in list(flat) if k in SPEC_FIELDS}
    return flat | {"spec": DEFAULT_SPEC.replace(**changes)}


SCALE, SHIFT = 2.0, 1.0  # SineDataModule's fixed affine "scaler": original = model * SCALE + SHIFT


def make_bars(n: int, seed: int = 0, start: str = "2000-01-03", freq: str = "B") -> pd.DataFrame:
    """``n`` consistent random-walk bars with distinct values and English column names (Date, Open,
    High, Low, Close, Volume), oldest first."""
    rng = np.random.default_rng(seed)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, n)))
    open_ = close * np.exp(rng.normal(0, 0.01, n))
    wick = np.exp(np.abs(rng.normal(0, 0.01, (2, n))))
    return pd.DataFrame(
        {
            "Date": pd.date_range(start, periods=n, freq=freq),
            "Open": open_,
            "High": np.maximum(open_, close) * wick[0],
            "Low": np.minimum(open_, close) / wick[1],
            "Close": close,
            "Volume": rng.integers(1_000, 100_000, n).astype(float),
        }
    )


def write_bars(path: Path, n: int = 400, seed: int = 0) -> pd.DataFrame:
    """A random-walk daily OHLCV file on business days (``Date`` as ``YYYY-MM-DD``); returns its frame."""
    rng = np.random.default_rng(seed)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = close * np.exp(rng.normal(0, 0.003, n))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.004, n)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.004, n)))
    df = pd.DataFrame(
        {
            "Date": pd.bdate_range("2020-01-01", periods=n).strftime("%Y-%m-%d"),
            "Open": open_,
            "High": high,
            "Low": low,
            "Close": close,
            "Volume": rng.integers(1000, 5000, n),
        }
    )
    df.to_csv(path, index=False)
    return df


def write_etth1(folder: Path) -> Path:
    """``folder/ETTh1.csv`` with ETTh1's columns and the 20 months of 30 days its borders need."""
    rows = 20 * 30 * 24  # the 12/4/4-month ETT-hour borders
    t = np.arange(rows)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"date": pd.date_range("2016-07-01", periods=rows, freq="h").strftime("%Y-%m-%d %H:%M:%S")})
    for k, name in enumerate(["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]):
        frame[name] = np.sin(2 * np.pi * t / 24 + k) + 0.1 * rng.standard_normal(rows)
    frame.to_csv(folder / "ETTh1.csv", index=False)
    return folder / "ETTh1.csv"


class _Windows(Dataset):
    def __init__(self, series: Tensor, start: int, end: int, L: int, F: int) -> None:
        self.series, self.L, self.F = series, L, F
        self.starts = list(range(start, end - L - F + 1))

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        s = self.starts[i]
        return {
            "x": self.series[s : s + self.L],  # (L, C)
            "y": self.series[s + self.L : s + self.L + self.F],  # (F, C)
            "anchor": torch.tensor(1.0, dtype=torch.float64),
            "ticker": torch.tensor(0),
            "time": torch.tensor(s + self.L - 1, dtype=torch.int64),
        }


class SineDataModule(LightningDataModule):
    """Channel c is ``sin(2 pi t / period_c + phase_c) + noise``; chronological 60/20/20 splits; every
    channel is a target (level targets, like the ETT "M" mode) on a scale whose original units are
    ``model * SCALE + SHIFT``.

    Args:
        n_features: channels C (all of them are targets).
        context_len: context length L.
        horizon: horizon F.
        n_bars: length of the series.
        noise: standard deviation of the noise.
        batch_size: windows per batch.
    """

    def __init__(
        self,
        n_features: int = 2,
        context_len: int = 48,
        horizon: int = 8,
        n_bars: int = 1200,
        noise: float = 0.1,
        batch_size: int = 64,
    ) -> None:
        super().__init__()
        self.n_features = self.n_targets = n_features
        self.context_len, self.horizon, self.batch_size = context_len, horizon, batch_size
        self.target_channels = list(range(n_features))
        g = torch.Generator().manual_seed(0)
        t = torch.arange(n_bars, dtype=torch.float32)[:, None]  # (T, 1)
        periods = torch.tensor([24.0 + 7 * c for c in range(n_features)])  # (C,)
        phases = torch.rand(n_features, generator=g) * 2 * math.pi
        wave = torch.sin(2 * math.pi * t / periods + phases)  # (T, C)
        self.series = wave + noise * torch.randn(n_bars, n_features, generator=g)  # (T, C)
        self.n_bars = n_bars
        self.data_scale: DataScale | None = None

    def setup(self, stage: str | None = None) -> None:
        L, F, T = self.context_len, self.horizon, self.n_bars
        a, b = int(0.6 * T), int(0.8 * T)
        names = [f"sine{c}" for c in range(self.n_features)]
        stats = [[SHIFT] * self.n_features], [[SCALE] * self.n_features]
        self.data_scale = DataScale(
            feature_names=names,
            target_names=names,
            target_kind="level",
            ticker_names=["sine"],
            feature_mean=stats[0],
            feature_std=stats[1],
            target_mean=stats[0],
            target_std=stats[1],
        )
        self.train_set = _Windows(self.series, 0, a, L, F)
        self.val_set = _Windows(self.series, a - L, b, L, F)
        self.test_set = _Windows(self.series, b - L, T, L, F)

    def handover(self) -> DataHandover:
        return DataHandover(
            self.n_features, self.n_targets, self.context_len, self.horizon, self.target_channels, self.data_scale
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.batch_size)
