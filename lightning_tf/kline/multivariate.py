"""MultivariateDataModule: any CSV of numeric columns under the long-term forecasting protocol of
PatchTST and DLinear (Nie et al. 2023; Zeng et al. 2023): ETTh/ETTm borders of 12/4/4 months or
fractions, one StandardScaler fit on the training rows, the ``M`` / ``S`` / ``MS`` modes, and every
test window scored (the published loaders drop the last incomplete test batch)."""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule
from sklearn.preprocessing import StandardScaler
from torch import Tensor
from torch.utils.data import DataLoader

from .handover import DataHandover
from .reader.io import parse_timestamps
from .scale import DataScale, TargetKind
from .windows import WindowDataset, ett_borders, next_timestamps, resolve_path, split_ends, window_loader

__all__ = ["MultivariateDataModule"]

log = logging.getLogger(__name__)


class MultivariateDataModule(LightningDataModule):
    """Any CSV with a date column and numeric columns, windowed as the long-term forecasting
    benchmarks do it (PatchTST / DLinear ``Dataset_ETT_hour``, ``Dataset_ETT_minute``,
    ``Dataset_Custom``), except that every test window is scored (no ``drop_last``).

    Columns are ordered as in the file with ``target`` moved last. ``M``: all columns in, all out;
    ``S``: the target in and out; ``MS``: all in, the target out. One StandardScaler is fit on the
    training rows and metrics are meant on that normalised scale. The targets are levels
    (``target_kind="level"``: persistence repeats the last value) unless said otherwise.

    Args:
        path: CSV file (e.g. ``ETTh1.csv``).
        context_len: look-back window L (the papers' ``seq_len``).
        horizon: forecast horizon F (``pred_len``).
        features: ``M``, ``S`` or ``MS``.
        target: target column for ``S`` and ``MS``.
        borders: ``ett_hour`` (12/4/4 months of hourly rows), ``ett_minute`` (15-minute rows),
            ``fraction`` (``train_fraction`` / ``test_fraction``, validation the rest), or ``auto``:
            the ETT borders for files named ``ETTh*`` / ``ETTm*``, fractions otherwise.
        train_fraction: training share for ``fraction`` borders.
        test_fraction: test share for ``fraction`` borders.
        date_column: the date column; None: ``date`` or the first column.
        scale: standardise with the training statistics (the benchmarks do).
        target_kind: ``level`` (persistence repeats the last value: loads, prices, temperatures) or
            ``return`` (persistence is a zero change); None: ``return`` when every target column is
            named ``log_return``, else ``level``.
        batch_size: windows per batch.
        num_workers: DataLoader worker processes.
        seed: seed of the training-window shuffle.
    """

    def __init__(
        self,
        path: str,
        context_len: int = 336,
        horizon: int = 96,
        features: Literal["M", "S", "MS"] = "M",
        target: str = "OT",
        borders: Literal["auto", "ett_hour", "ett_minute", "fraction"] = "auto",
        train_fraction: float = 0.7,
        test_fraction: float = 0.2,
        date_column: str | None = None,
        scale: bool = True,
        target_kind: TargetKind | None = None,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if features not in ("M", "S", "MS"):
            raise ValueError(f"features must be 'M', 'S' or 'MS', got {features!r}")
        if borders not in ("auto", "ett_hour", "ett_minute", "fraction"):
            raise ValueError(f"borders must be auto, ett_hour, ett_minute or fraction, got {borders!r}")
        if context_len < 1 or horizon < 1:
            raise ValueError(f"context_len ({context_len}) and horizon ({horizon}) must be >= 1")
        if not (0 < train_fraction < 1 and 0 < test_fraction < 1 and train_fraction + test_fraction < 1):
            raise ValueError(f"need train_fraction ({train_fraction}) + test_fraction ({test_fraction}) < 1")
        if target_kind not in (None, "return", "level"):
            raise ValueError(f"target_kind must be 'return' or 'level' (or None), got {target_kind!r}")
        self.save_hyperparameters()
        self.context_len, self.horizon = context_len, horizon
        self.path = resolve_path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        # The header alone fixes the channel counts the model must agree with.
        try:
            header = list(pd.read_csv(self.path, nrows=0).columns)
        except pd.errors.EmptyDataError:
            raise ValueError(f"{path}: the file is empty (no header, no rows)") from None
        self._date_column = date_column or ("date" if "date" in header else header[0])
        if self._date_column not in header:
            raise ValueError(f"{path}: date_column {date_column!r} not found; columns are {header}")
        data_cols = [c for c in header if c != self._date_column]
        if target not in data_cols:
            raise ValueError(f"{path}: target {target!r} not found; columns are {header}")
        self.columns = [c for c in data_cols if c != target] + [target]
        self.feature_names = [target] if features == "S" else list(self.columns)
        self.target_names = [target] if features in ("S", "MS") else list(self.columns)
        self.target_channels = [self.feature_names.index(t) for t in self.target_names]
        if target_kind is None:
            target_kind = "return" if all(t == "log_return" for t in self.target_names) else "level"
        self.target_kind: TargetKind = target_kind
        self.n_features, self.n_targets = len(self.feature_names), len(self.target_names)
        self.ticker_names = [self.path.stem]
        self.datasets: dict[str, WindowDataset] = {}
        self.data_scale: DataScale | None = None  # the training statistics, after setup

    def resolved_borders(self, n: int) -> tuple[int, int, int]:
        """``(train_end, val_end, test_end)`` rows for a file of ``n`` rows."""
        h = self.hparams
        kind = h.borders
        if kind == "auto":
            stem = self.path.stem.lower()
            kind = "ett_hour" if stem.startswith("etth") else "ett_minute" if stem.startswith("ettm") else "fraction"
        if kind == "fraction":
            n_train, n_test = int(n * h.train_fraction), int(n * h.test_fraction)
            return n_train, n - n_test, n
        train_end, val_end, test_end = ett_borders(kind)
        if n < test_end:
            raise ValueError(f"{self.path}: {n} rows, but borders={kind!r} needs {test_end}")
        return train_end, val_end, test_end

    def __str__(self) -> str:
        # Lightning's __str__ builds every loader (training data, and predict windows without statistics);
        # jsonargparse formats the DataModule into a debug line for every link it skips
        return f"{type(self).__name__}(path={self.hparams.path!r})"

    def setup(self, stage: str | None = None) -> None:
        if "train" in self.datasets:
            return
        h = self.hparams
        L, F = self.context_len, self.horizon
        df = pd.read_csv(self.path, keep_default_na=False)  # keep 'n/a' and '' as written, for the message
        if df.empty:
            raise ValueError(f"{self.path}: the file is empty (a header but no rows)")
        numbers = df[self.feature_names].apply(pd.to_numeric, errors="coerce")
        values = numbers.to_numpy(np.float64)  # (n, C)
        if not np.isfinite(values).all():
            r, c = np.argwhere(~np.isfinite(values))[0]
            col = self.feature_names[c]
            raise ValueError(
                f"{self.path}: line {r + 2}, column {col!r}: {str(df[col].iloc[r])!r} is not a finite number"
            )
        stamps = parse_timestamps(df[self._date_column])
        if stamps.isna().any():
            r = int(np.flatnonzero(stamps.isna())[0])
            raise ValueError(
                f"{self.path}: line {r + 2}, column {self._date_column!r}: cannot parse "
                f"{df[self._date_column].iloc[r]!r} as a date"
            )
        # Chronological splits need rows in time order: newest-first exports are reversed, anything
        # else (shuffled rows, repeated dates) would put future rows in the training split.
        step = np.diff(stamps.to_numpy())
        if len(step) and (step < np.timedelta64(0)).all():
            log.info("%s: rows are newest first; reversed to time order", self.path)
            values, stamps = values[::-1].copy(), stamps.iloc[::-1].reset_index(drop=True)
        elif (step <= np.timedelta64(0)).any():
            r = int(np.flatnonzero(step <= np.timedelta64(0))[0]) + 1
            raise ValueError(
                f"{self.path}: line {r + 2}, column {self._date_column!r}: {stamps.iloc[r]} does not come after "
                f"{stamps.iloc[r - 1]}; rows must be in time order without repeated dates"
            )
        train_end, val_end, test_end = self.resolved_borders(len(df))
        self.borders = {"train_end": train_end, "val_end": val_end, "test_end": test_end}
        scaler = StandardScaler()
        if h.scale:
            scaler.fit(values[:train_end])  # training rows only
        else:
            scaler.mean_, scaler.scale_ = np.zeros(values.shape[1]), np.ones(values.shape[1])
        x = (values - scaler.mean_) / scaler.scale_  # (n, C)
        idx = [self.feature_names.index(t) for t in self.target_names]
        self.feature_mean = torch.tensor(scaler.mean_)[None]  # (1, C)
        self.feature_std = torch.tensor(scaler.scale_)[None]  # (1, C)
        self.target_mean, self.target_std = self.feature_mean[:, idx], self.feature_std[:, idx]  # (1, K)
        self.data_scale = DataScale(
            feature_names=self.feature_names,
            target_names=self.target_names,
            target_kind=self.target_kind,
            ticker_names=self.ticker_names,
            feature_mean=self.feature_mean,
            feature_std=self.feature_std,
            target_mean=self.target_mean,
            target_std=self.target_std,
        )
        self._predict_times = {0: pd.DatetimeIndex(stamps)}
        time = stamps.to_numpy().astype("datetime64[ns]").astype(np.int64)
        rows = {
            "x": torch.tensor(x, dtype=torch.float32),  # (n, C)
            "y": torch.tensor(x[:, idx], dtype=torch.float32),  # (n, K)
            "raw_target": torch.tensor(values[:, idx], dtype=torch.float32),  # (n, K)
            "anchor": torch.zeros(len(df), dtype=torch.float64),  # (n,)
            "ticker": torch.zeros(len(df), dtype=torch.long),  # (n,)
            "time": torch.tensor(time),  # (n,)
        }
        # Rows past test_end (ETT files hold 20 months of 30 days and a few days more) are unused.
        for split, e in split_ends(train_end, val_end, test_end, 0, L, F).items():
            self.datasets[split] = WindowDataset(ends=torch.tensor(e), context_len=L, horizon=F, **rows)
        # an empty test split is refused when testing starts (window_loader): a fit need not test
        lengths = {"training": train_end, "validation": val_end - train_end}
        for (name, n), split in zip(lengths.items(), ("train", "val"), strict=True):
            if len(self.datasets[split]) == 0:
                need = (
                    f"a training window needs context_len + horizon = {L} + {F} = {L + F} rows"
                    if split == "train"
                    else f"a {name} window needs horizon ({F}) rows in the split (its context may come before)"
                )
                raise ValueError(
                    f"{self.path}: the {name} split has {n} rows, too few: {need}; lower horizon or "
                    "context_len, or move the split borders"
                )
        last = torch.tensor([len(df) - 1])
        self.datasets["predict"] = WindowDataset(ends=last, context_len=L, horizon=F, **{**rows, "y": None})
        log.info(
            "%s: windows train/val/test = %d/%d/%d",
            self.path,
            *(len(self.datasets[s]) for s in ("train", "val", "test")),
        )

    # ------------------------------------------------------------------ loaders
    def handover(self) -> DataHandover:
        """What the model takes from this data (:class:`~.handover.DataHandover`): sizes, target channels, scale."""
        return DataHandover(
            n_features=self.n_features,
            n_targets=self.n_targets,
            context_len=self.context_len,
            horizon=self.horizon,
            target_channels=self.target_channels,
            data_scale=self.data_scale,
        )

    def _loader(self, split: str) -> DataLoader:
        h = self.hparams
        return window_loader(
            self.datasets,
            split,
            batch_size=h.batch_size,
            num_workers=h.num_workers,
            seed=h.seed,
            source=self.path,
            horizon=self.horizon,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("predict")

    # ------------------------------------------------------------------ units and calendar
    def _scale(self) -> DataScale:
        if self.data_scale is None:
            raise RuntimeError("no training statistics yet: call setup() first")
        return self.data_scale

    def inverse_targets(self, y: Tensor, ticker: Tensor | None = None) -> Tensor:
        """Model-scale targets ``(B, F, K)`` back to original units (see :meth:`DataScale.inverse_targets`)."""
        return self._scale().inverse_targets(y, ticker)

    def scale_targets(self, y: Tensor, ticker: Tensor | None = None) -> Tensor:
        """Original-unit targets ``(B, F, K)`` to the model scale (see :meth:`DataScale.scale_targets`)."""
        return self._scale().scale_targets(y, ticker)

    def future_timestamps(self, n: int | None = None, ticker: int = 0) -> pd.DatetimeIndex:
        """Timestamps of the ``n`` (default ``horizon``) rows after the end of the file (see
        :func:`~lightning_tf.kline.windows.next_timestamps`); ``ticker`` is always 0 here."""
        if "predict" not in self.datasets:
            self.setup("predict")
        return next_timestamps(self._predict_times[ticker], self.horizon if n is None else n)
