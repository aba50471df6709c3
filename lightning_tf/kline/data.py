"""Sliding windows over OHLCV bars (``KLineDataModule``) and over any multivariate CSV
(``MultivariateDataModule``, the ETT long-term forecasting protocol of PatchTST and DLinear).

A window is named by ``t``, the row of its last context bar: inputs are rows ``t-L+1 .. t``, targets
rows ``t+1 .. t+F``. A window belongs to the split that holds all its targets, so validation and test
windows begin ``L`` rows before their border (their context may come from the earlier split) and no
target ever lies in an earlier split. Scalers are fit on the rows before the validation border only
(per ticker), never on validation or test rows.

Batches are dicts:

==================  =============  ===========================================================
``x``               (B, L, C)      float32 model-scale inputs (train-fit StandardScaler)
``y``               (B, F, K)      float32 model-scale targets (absent from predict batches)
``x_raw_target``    (B, L, K)      float32 the target quantity over the context, original units
``anchor``          (B,)           float64 close of the last context bar (zeros for ETT)
``ticker``          (B,)           int64 ticker id (index into ``ticker_names``)
``time``            (B,)           int64 timestamp (ns since epoch) of the last context bar
==================  =============  ===========================================================
"""

from __future__ import annotations

import logging
from collections.abc import Sized
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule
from sklearn.preprocessing import StandardScaler
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, RandomSampler

from lightning_tf.distributed import eval_sampler

from .features import DEFAULT_FEATURES, Target, check_feature_names, compute_features, compute_target
from .io import parse_timestamps, read_bars
from .validation import ON_ERROR_CHOICES, OnError

__all__ = [
    "EpochShuffleSampler",
    "KLineDataModule",
    "MultivariateDataModule",
    "WindowDataset",
    "chronological_borders",
    "ett_borders",
    "next_timestamps",
]

log = logging.getLogger(__name__)

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _resolve(path: str) -> Path:
    """``path`` as given, or relative to the repository root when it is not found from here (so the
    default ``data/msft.csv`` works from any working directory)."""
    p = Path(path).expanduser()
    if not p.exists() and not p.is_absolute() and (_REPO_ROOT / p).exists():
        return _REPO_ROOT / p
    return p


def _parse_date(name: str, value: str) -> pd.Timestamp:
    """``value`` as a timestamp, or a ValueError naming the argument ``name``."""
    try:
        return pd.Timestamp(value)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{name} {value!r} is not a date such as '2011-07-13' ({e})") from None


def _batched(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Collate for :class:`WindowDataset`, whose ``__getitems__`` already returns a batch."""
    return batch


class WindowDataset(Dataset):
    """Windows over a panel of series stored end to end (one ticker after another).

    Args:
        x: scaled inputs ``(N, C)`` float32 of every row of every ticker.
        ends: row index ``t`` of the last context bar of each window ``(W,)``.
        context_len: context length L.
        horizon: forecast horizon F.
        y: scaled targets ``(N, K)`` float32, or None for prediction windows.
        raw_target: the target quantity in original units ``(N, K)`` float32.
        anchor: close price per row ``(N,)`` float64 (zeros where meaningless).
        ticker: ticker id per row ``(N,)`` int64.
        time: timestamp per row ``(N,)`` int64 nanoseconds.
    """

    def __init__(
        self,
        x: Tensor,
        ends: Tensor,
        context_len: int,
        horizon: int,
        y: Tensor | None,
        raw_target: Tensor,
        anchor: Tensor,
        ticker: Tensor,
        time: Tensor,
    ) -> None:
        self.x, self.y, self.raw_target = x, y, raw_target
        self.anchor, self.ticker, self.time = anchor, ticker, time
        self.ends = ends
        self.context_offsets = torch.arange(-context_len + 1, 1)  # (L,)
        self.target_offsets = torch.arange(1, horizon + 1)  # (F,)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitems__(self, indices: list[int]) -> dict[str, Tensor]:
        t = self.ends[torch.as_tensor(indices, dtype=torch.long)]  # (B,)
        ctx = t[:, None] + self.context_offsets  # (B, L)
        batch = {
            "x": self.x[ctx],  # (B, L, C)
            "x_raw_target": self.raw_target[ctx],  # (B, L, K)
            "anchor": self.anchor[t],  # (B,)
            "ticker": self.ticker[t],  # (B,)
            "time": self.time[t],  # (B,)
        }
        if self.y is not None:
            batch["y"] = self.y[t[:, None] + self.target_offsets]  # (B, F, K)
        return batch

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def target_rows(self) -> Tensor:
        """Row indices of every window's targets ``(W, F)`` (used by the leakage tests)."""
        return self.ends[:, None] + self.target_offsets  # (W, F)

    def context_rows(self) -> Tensor:
        """Row indices of every window's context ``(W, L)``."""
        return self.ends[:, None] + self.context_offsets  # (W, L)


def chronological_borders(n: int, train_fraction: float, val_fraction: float) -> tuple[int, int]:
    """``(train_end, val_end)`` row borders of ``n`` rows split by fractions, as PatchTST's
    ``Dataset_Custom`` computes them: ``n_train = int(n * train)``, ``n_test = int(n * test)`` and
    validation takes the rest, with ``test = 1 - train - val``."""
    test_fraction = round(1.0 - train_fraction - val_fraction, 10)
    n_train, n_test = int(n * train_fraction), int(n * test_fraction)
    return n_train, n - n_test


def ett_borders(kind: Literal["ett_hour", "ett_minute"]) -> tuple[int, int, int]:
    """``(train_end, val_end, test_end)`` of the ETT benchmark: 12/4/4 months of 30 days, hourly or
    every 15 minutes (PatchTST/DLinear ``Dataset_ETT_hour`` and ``Dataset_ETT_minute``)."""
    per_day = 24 if kind == "ett_hour" else 24 * 4
    month = 30 * per_day
    return 12 * month, 16 * month, 20 * month


def _split_ends(
    train_end: int, val_end: int, n: int, first: int, context_len: int, horizon: int
) -> dict[str, np.ndarray]:
    """Window ends ``t`` for each split of one series of ``n`` rows whose features are valid from
    row ``first`` on. A window's targets are rows ``t+1 .. t+F``; it belongs to the split that holds
    all of them."""
    lo = first + context_len - 1
    spans = {
        "train": (lo, train_end - horizon - 1),
        "val": (max(lo, train_end - 1), val_end - horizon - 1),
        "test": (max(lo, val_end - 1), n - horizon - 1),
    }
    return {k: np.arange(a, b + 1, dtype=np.int64) for k, (a, b) in spans.items()}


def next_timestamps(ts: pd.DatetimeIndex, n: int, session_days: int = 20) -> pd.DatetimeIndex:
    """Timestamps of the ``n`` bars after ``ts`` (ascending), following the series' own calendar.

    Daily bars without weekend rows continue on business days. Intraday bars continue on the
    trading session seen in the data: the times of day that bars had on the last ``session_days``
    days before the last one (so an exchange's lunch break and close are skipped: after 11:30 come
    13:05 ... on an A-share 5-minute series, after the close the next business day's open), moving
    on by business days, or calendar days where the series has weekend bars. Holidays are not
    known. Other spacings, and intraday data of a single day, continue at the median spacing.
    """
    step = pd.Series(ts).diff().median()
    last = ts[-1]
    weekends = bool((ts.day_of_week >= 5).any())
    if step == pd.Timedelta(days=1) and not weekends:
        return pd.bdate_range(last + pd.offsets.BDay(1), periods=n, freq="B") + (last - last.normalize())
    days = ts.normalize()
    earlier = days.unique()[:-1][-session_days:]  # whole days before the (possibly partial) last one
    if step < pd.Timedelta(days=1) and len(earlier):
        seen = ts[days.isin(earlier) | (days == days[-1])]
        slots = np.unique((seen - seen.normalize()).to_numpy())  # times of day with bars, ascending
        day, out = last.normalize(), []
        later = slots[slots > (last - day).to_timedelta64()]
        while len(out) < n:
            out.extend(day + pd.Timedelta(s) for s in later[: n - len(out)])
            day = day + (pd.Timedelta(days=1) if weekends else pd.offsets.BDay(1))
            later = slots
        return pd.DatetimeIndex(out)
    return pd.DatetimeIndex([last + step * (i + 1) for i in range(n)])


class EpochShuffleSampler(RandomSampler):
    """A random order that depends only on ``seed`` and the epoch (Lightning calls :meth:`set_epoch`
    before each one), not on how many epochs this process has run: a run resumed from a checkpoint
    shuffles its next epoch exactly as the uninterrupted run does. Under DDP Lightning replaces it
    with a ``DistributedSampler``, which is epoch-seeded likewise.

    Args:
        data_source: the dataset.
        seed: base seed of the order.
    """

    def __init__(self, data_source: Sized, seed: int = 0) -> None:
        super().__init__(data_source, generator=torch.Generator())  # type: ignore[arg-type]
        self.seed = seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.generator.manual_seed(int(np.random.SeedSequence([self.seed, epoch]).generate_state(1)[0]))


class _WindowDataModule(LightningDataModule):
    """Loaders shared by both data modules: shuffled training windows, every evaluation window."""

    datasets: dict[str, WindowDataset]

    def _loader(self, split: str) -> DataLoader:
        if split not in getattr(self, "datasets", {}):
            raise RuntimeError(f"no {split} windows: call setup() first")
        if split == "test" and len(self.datasets[split]) == 0:
            # an empty test would "pass" without scoring anything
            raise ValueError(
                f"{self.hparams.path}: no test windows; the test split has fewer than horizon "
                f"({self.horizon}) bars after its border (check test_start / the split fractions)"
            )
        train = split == "train"
        # training: an order set by seed and epoch alone, so a resumed run shuffles as the uninterrupted one;
        # under DDP: every evaluation window on exactly one process (Lightning's sampler would repeat some)
        sampler = (
            EpochShuffleSampler(self.datasets[split], self.hparams.seed)
            if train
            else eval_sampler(self.datasets[split], predict=split == "predict")
        )
        return DataLoader(
            self.datasets[split],
            batch_size=self.hparams.batch_size,
            sampler=sampler,
            drop_last=False,  # every evaluation window is scored; a short last training batch is fine
            collate_fn=_batched,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("predict")

    def _ticker(self, y: Tensor, ticker: Tensor | None) -> Tensor:
        if ticker is None:
            return torch.zeros(y.shape[0], dtype=torch.long, device=y.device)
        return ticker.to(y.device)

    def inverse_targets(self, y: Tensor, ticker: Tensor | None = None) -> Tensor:
        """Model-scale targets ``(B, F, K)`` of tickers ``(B,)`` (None: ticker 0) back to original
        units ``(B, F, K)``."""
        ticker = self._ticker(y, ticker)
        mean = self.target_mean.to(y.device, y.dtype)[ticker]  # (B, K)
        std = self.target_std.to(y.device, y.dtype)[ticker]  # (B, K)
        return y * std[:, None, :] + mean[:, None, :]  # (B, F, K)

    def scale_targets(self, y: Tensor, ticker: Tensor | None = None) -> Tensor:
        """Original-unit targets ``(B, F, K)`` to the model scale (inverse of :meth:`inverse_targets`)."""
        ticker = self._ticker(y, ticker)
        mean = self.target_mean.to(y.device, y.dtype)[ticker]  # (B, K)
        std = self.target_std.to(y.device, y.dtype)[ticker]  # (B, K)
        return (y - mean[:, None, :]) / std[:, None, :]  # (B, F, K)

    def future_timestamps(self, n: int | None = None, ticker: int = 0) -> pd.DatetimeIndex:
        """Timestamps of the ``n`` (default ``horizon``) bars after the end of the predict data.

        See :func:`next_timestamps`.
        """
        if "predict" not in self.datasets:
            self.setup("predict")
        return next_timestamps(self._predict_times[ticker], self.horizon if n is None else n)


class KLineDataModule(_WindowDataModule):
    """Windows of OHLCV bars for direct multi-horizon forecasting of returns or closes.

    Reads one file, a folder with one file per ticker or a long table (see
    :func:`lightning_tf.kline.io.read_bars`), builds per-bar features (see
    :mod:`lightning_tf.kline.features`), splits every ticker chronologically and scales it with
    statistics of its own training rows. A panel of tickers trains one model. ``target_kind`` tells
    the model how to read the target: ``"return"`` for ``log_return``, ``"level"`` for ``close``.

    Args:
        path: CSV/Parquet file or folder of bars; relative paths not found from the working
            directory are looked up from the repository root.
        context_len: bars of context L per window.
        horizon: bars to forecast F.
        features: input features per bar (names in ``lightning_tf.kline.features.FEATURES``);
            None: ``log_return, open_rel, high_rel, low_rel, log_volume_change, volatility``.
        target: forecast ``log_return`` (per-bar log returns, default) or ``close``.
        train_fraction: share of each ticker's bars for training (when no dates are given).
        val_fraction: share for validation; the test split takes the rest.
        val_start: first date of the validation split (with ``test_start``; overrides fractions).
        test_start: first date of the test split.
        batch_size: windows per batch.
        num_workers: DataLoader worker processes.
        on_error: bad rows raise (``error``), are dropped (``drop``) or forward-filled (``ffill``).
        max_gap: no window spans a gap between bars longer than this (pandas Timedelta string,
            e.g. ``"10D"``); under ``on_error="error"`` such a gap raises. None: no limit.
        columns: canonical name -> file column, overriding the column detection.
        ticker_column: ticker column of a long table (detected by name when None).
        volatility_window: bars in the rolling volatility feature.
        volume_window: bars in the rolling volume z-score feature.
        predict_path: bars whose last ``context_len`` rows are forecast by ``predict``; None: ``path``.
        seed: seed of the training-window shuffle.
    """

    def __init__(
        self,
        path: str = "data/msft.csv",
        context_len: int = 64,
        horizon: int = 5,
        features: list[str] | None = None,
        target: Target = "log_return",
        train_fraction: float = 0.7,
        val_fraction: float = 0.1,
        val_start: str | None = None,
        test_start: str | None = None,
        batch_size: int = 64,
        num_workers: int = 0,
        on_error: OnError = "error",
        max_gap: str | None = None,
        columns: dict[str, str] | None = None,
        ticker_column: str | None = None,
        volatility_window: int = 20,
        volume_window: int = 20,
        predict_path: str | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        features = list(DEFAULT_FEATURES if features is None else features)
        check_feature_names(features)
        if context_len < 1 or horizon < 1:
            raise ValueError(f"context_len ({context_len}) and horizon ({horizon}) must be >= 1")
        if target not in ("log_return", "close"):
            raise ValueError(f"target must be 'log_return' or 'close', got {target!r}")
        if not (0 < train_fraction < 1 and 0 <= val_fraction < 1 and train_fraction + val_fraction < 1):
            raise ValueError(
                f"need 0 < train_fraction ({train_fraction}), 0 <= val_fraction ({val_fraction}) "
                "and train_fraction + val_fraction < 1 (the test split takes the rest)"
            )
        if (val_start is None) != (test_start is None):
            raise ValueError(f"give both val_start ({val_start!r}) and test_start ({test_start!r}) or neither")
        if val_start is not None and _parse_date("val_start", val_start) >= _parse_date("test_start", test_start):
            raise ValueError(f"val_start ({val_start}) must come before test_start ({test_start})")
        if on_error not in ON_ERROR_CHOICES:
            raise ValueError(f"on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}")
        if max_gap is not None:
            try:  # fail here, not in setup, on a malformed string
                pd.Timedelta(max_gap)
            except ValueError as e:
                raise ValueError(f"max_gap {max_gap!r} is not a duration such as '10D' or '2h' ({e})") from None
        for name, window in (("volatility_window", volatility_window), ("volume_window", volume_window)):
            if window < 2:  # a rolling std of one bar is NaN everywhere
                raise ValueError(f"{name} ({window}) must be at least 2 bars")
        if batch_size < 1:
            raise ValueError(f"batch_size ({batch_size}) must be >= 1")
        self.save_hyperparameters()
        self.context_len, self.horizon = context_len, horizon
        self.feature_names: list[str] = features
        self.target_names: list[str] = [target]
        # Returns are forecast against a zero return and rebuilt into prices; levels against the last value.
        self.target_kind: Literal["return", "level"] = "return" if target == "log_return" else "level"
        self.n_features, self.n_targets = len(features), 1
        # Where the target is itself an input channel, the model may read its scaled history there.
        self.target_channels: list[int] | None = [features.index(target)] if target in features else None
        self.ticker_names: list[str] = []
        self.datasets = {}
        self._frame: pd.DataFrame | None = None

    # ------------------------------------------------------------------ building
    def _read(self, path: str) -> pd.DataFrame:
        h = self.hparams
        return read_bars(
            _resolve(path), columns=h.columns, ticker_column=h.ticker_column, on_error=h.on_error, max_gap=h.max_gap
        )

    def _series(self, bars: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
        """Features ``(n, C)``, target ``(n,)``, the first row where both are finite, and segment ids
        ``(n,)`` (a new segment after every gap longer than ``max_gap``)."""
        h = self.hparams
        feats = compute_features(bars, self.feature_names, h.volatility_window, h.volume_window).to_numpy()
        target = compute_target(bars, h.target)
        finite = np.isfinite(feats).all(axis=1) & np.isfinite(target)
        first = int(np.argmax(finite)) if finite.any() else len(bars)
        bad = np.flatnonzero(~finite[first:])
        if len(bad):
            i = first + int(bad[0])
            col = [n for n, ok in zip(self.feature_names, np.isfinite(feats[i]), strict=True) if not ok] or [h.target]
            raise ValueError(
                f"{h.path}: ticker {bars['ticker'].iloc[0]!r} at {bars['timestamp'].iloc[i]}: feature(s) {col} "
                "are not finite after the warm-up rows"
            )
        segment = np.zeros(len(bars), dtype=np.int64)
        if h.max_gap is not None:
            gaps = np.diff(bars["timestamp"].to_numpy()) > np.timedelta64(pd.Timedelta(h.max_gap))
            segment[1:] = np.cumsum(gaps)
        return feats, target, first, segment

    def _borders(self, ts: pd.Series) -> tuple[int, int]:
        h = self.hparams
        if h.val_start is not None:
            values = ts.to_numpy()
            return (
                int(np.searchsorted(values, np.datetime64(pd.Timestamp(h.val_start)))),
                int(np.searchsorted(values, np.datetime64(pd.Timestamp(h.test_start)))),
            )
        return chronological_borders(len(ts), h.train_fraction, h.val_fraction)

    def _build(self) -> None:
        h = self.hparams
        L, F = self.context_len, self.horizon
        frame = self._read(h.path)
        self._frame = frame
        names = list(pd.unique(frame["ticker"]))
        self.ticker_names = []
        xs, ys, raws, closes, times, ids = [], [], [], [], [], []
        ends: dict[str, list[np.ndarray]] = {"train": [], "val": [], "test": []}
        stats: list[tuple[np.ndarray, ...]] = []  # per ticker: feature mean, std, target mean, std
        self.borders: dict[str, dict] = {}
        offset = 0
        groups = dict(list(frame.groupby("ticker", sort=False)))
        for name in names:
            bars = groups[name].reset_index(drop=True)
            feats, target, first, segment = self._series(bars)
            n = len(bars)
            train_end, val_end = self._borders(bars["timestamp"])
            if train_end - first < 2:
                problem = (
                    f"{h.path}: ticker {name!r} has {max(train_end - first, 0)} usable training rows "
                    f"(of {n} bars, {first} warm-up)"
                )
                if len(names) == 1:
                    raise ValueError(f"{problem}; need more bars or a later val_start")
                # In a panel, a ticker listed after val_start has no training statistics to scale it by.
                log.warning("%s; it is left out of the panel", problem)
                continue
            k = len(self.ticker_names)
            self.ticker_names.append(name)
            # Statistics from the training rows only: validation and test rows never shape the scale.
            fs = StandardScaler().fit(feats[first:train_end])
            ts_ = StandardScaler().fit(target[first:train_end, None])
            stats.append((fs.mean_, fs.scale_, ts_.mean_, ts_.scale_))
            self.borders[name] = {
                "first": first,
                "train_end": train_end,
                "val_end": val_end,
                "n": n,
                "val_start": bars["timestamp"].iloc[train_end] if train_end < n else None,
                "test_start": bars["timestamp"].iloc[val_end] if val_end < n else None,
            }
            for split, e in _split_ends(train_end, val_end, n, first, L, F).items():
                e = e[segment[e - L + 1] == segment[np.minimum(e + F, n - 1)]]  # no window across a long gap
                ends[split].append(e + offset)
                if len(e) == 0:
                    log.warning("%s: ticker %r has no %s windows (%d bars)", h.path, name, split, n)
            x = np.where(np.isfinite(feats), (feats - fs.mean_) / fs.scale_, 0.0)  # warm-up rows are never read
            y = np.where(np.isfinite(target), (target - ts_.mean_[0]) / ts_.scale_[0], 0.0)
            xs.append(x)
            ys.append(y[:, None])
            raws.append(np.nan_to_num(target)[:, None])
            closes.append(bars["close"].to_numpy(np.float64))
            times.append(bars["timestamp"].to_numpy().astype("datetime64[ns]").astype(np.int64))
            ids.append(np.full(n, k, dtype=np.int64))
            offset += n
        if not self.ticker_names:
            raise ValueError(f"{h.path}: no ticker has training rows before the validation border")
        self._warn_overlapping_fraction_splits()
        f_mean, f_std, t_mean, t_std = (torch.tensor(np.stack(s)) for s in zip(*stats, strict=True))
        self.feature_mean, self.feature_std = f_mean, f_std  # (n_tickers, C)
        self.target_mean, self.target_std = t_mean, t_std  # (n_tickers, K)
        self._rows = {
            "x": torch.tensor(np.concatenate(xs), dtype=torch.float32),  # (N, C)
            "y": torch.tensor(np.concatenate(ys), dtype=torch.float32),  # (N, K)
            "raw_target": torch.tensor(np.concatenate(raws), dtype=torch.float32),  # (N, K)
            "anchor": torch.tensor(np.concatenate(closes), dtype=torch.float64),  # (N,)
            "ticker": torch.tensor(np.concatenate(ids)),  # (N,)
            "time": torch.tensor(np.concatenate(times)),  # (N,)
        }
        for split, parts in ends.items():
            self.datasets[split] = WindowDataset(
                ends=torch.tensor(np.concatenate(parts)), context_len=L, horizon=F, **self._rows
            )
        if len(self.datasets["train"]) == 0:
            raise ValueError(
                f"{h.path}: no training windows; context_len + horizon ({L + F}) exceeds the training rows"
            )
        log.info(
            "%s: %d tickers, windows train/val/test = %d/%d/%d",
            h.path,
            len(self.ticker_names),
            *(len(self.datasets[s]) for s in ("train", "val", "test")),
        )

    def _warn_overlapping_fraction_splits(self) -> None:
        """Fraction splits are per ticker: in a panel whose tickers cover different years, one
        ticker may train on days that are another's test days, and the model then learns market
        moves of the test period from the other ticker. Say so; date borders cannot overlap."""
        if self.hparams.val_start is not None or len(self.ticker_names) < 2:
            return
        starts = [(b["val_start"], b["test_start"], name) for name, b in self.borders.items()]
        latest_train = max((s for s in starts if s[0] is not None), key=lambda s: s[0], default=None)
        earliest_test = min((s for s in starts if s[1] is not None), key=lambda s: s[1], default=None)
        if latest_train is not None and earliest_test is not None and latest_train[0] > earliest_test[1]:
            log.warning(
                "%s: fraction splits are per ticker and overlap in time: ticker %r trains on bars until %s, "
                "after the test split of ticker %r starts (%s); the model may learn test-period market moves. "
                "Set val_start and test_start for one calendar border across the panel.",
                self.hparams.path,
                latest_train[2],
                latest_train[0],
                earliest_test[2],
                earliest_test[1],
            )

    def _build_predict(self) -> None:
        h = self.hparams
        L = self.context_len
        path = h.predict_path or h.path
        frame = self._frame if h.predict_path is None else self._read(path)
        names = list(pd.unique(frame["ticker"]))
        xs, raws, closes, times, ids, ends = [], [], [], [], [], []
        self._predict_times: dict[int, pd.DatetimeIndex] = {}
        self._predict_bars: dict[int, pd.DataFrame] = {}
        offset = 0
        for name in names:
            if name in self.ticker_names:
                k = self.ticker_names.index(name)
            elif len(names) == 1 and len(self.ticker_names) == 1:
                k = 0  # one series trained, one series to forecast: the same instrument under another file name
            else:
                raise ValueError(f"{path}: ticker {name!r} was not in the training data {self.ticker_names}")
            bars = frame[frame["ticker"] == name].reset_index(drop=True)
            feats, target, first, _ = self._series(bars)
            n = len(bars)
            if n - first < L:
                raise ValueError(
                    f"{path}: ticker {name!r} has {n - first} usable bars; predict needs context_len ({L})"
                )
            x = (feats - self.feature_mean[k].numpy()) / self.feature_std[k].numpy()
            xs.append(np.nan_to_num(x))  # warm-up rows are never read
            raws.append(np.nan_to_num(target)[:, None])
            closes.append(bars["close"].to_numpy(np.float64))
            times.append(bars["timestamp"].to_numpy().astype("datetime64[ns]").astype(np.int64))
            ids.append(np.full(n, k, dtype=np.int64))
            ends.append(offset + n - 1)
            self._predict_times[k] = pd.DatetimeIndex(bars["timestamp"])
            self._predict_bars[k] = bars
            offset += n
        self.datasets["predict"] = WindowDataset(
            x=torch.tensor(np.concatenate(xs), dtype=torch.float32),  # (N, C)
            ends=torch.tensor(ends),
            context_len=L,
            horizon=self.horizon,
            y=None,
            raw_target=torch.tensor(np.concatenate(raws), dtype=torch.float32),  # (N, K)
            anchor=torch.tensor(np.concatenate(closes), dtype=torch.float64),  # (N,)
            ticker=torch.tensor(np.concatenate(ids)),  # (N,)
            time=torch.tensor(np.concatenate(times)),  # (N,)
        )

    def setup(self, stage: str | None = None) -> None:
        if "train" not in self.datasets:
            self._build()
        if stage in (None, "predict") and "predict" not in self.datasets:
            self._build_predict()

    # ------------------------------------------------------------------ helpers for the model
    @staticmethod
    def rebuild_prices(returns: Tensor, anchor: Tensor) -> Tensor:
        """Close prices ``(B, F)`` from per-bar log returns ``(B, F)`` and the last known close
        ``(B,)``: ``anchor * exp(cumsum(returns))``."""
        return anchor.to(returns.dtype)[:, None] * torch.exp(torch.cumsum(returns, dim=1))  # (B, F)

    def target_to_prices(self, y: Tensor, anchor: Tensor) -> Tensor:
        """Original-unit targets ``(B, F, K=1)`` to close prices ``(B, F)`` for either target."""
        if self.hparams.target == "close":
            return y[..., 0]  # (B, F)
        return self.rebuild_prices(y[..., 0], anchor)  # (B, F)

    def state_dict(self) -> dict:
        """The training statistics, saved in checkpoints (plain tensors and strings)."""
        if "train" not in self.datasets:
            return {}
        return {
            "ticker_names": list(self.ticker_names),
            "feature_mean": self.feature_mean.clone(),
            "feature_std": self.feature_std.clone(),
            "target_mean": self.target_mean.clone(),
            "target_std": self.target_std.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Compare a checkpoint's training statistics with the ones just computed from ``path``: a
        difference means the training file changed since the checkpoint and the model would see
        inputs on another scale."""
        if not state or "train" not in self.datasets:
            return
        same = state["ticker_names"] == self.ticker_names and all(
            torch.allclose(state[k], getattr(self, k))
            for k in ("feature_mean", "feature_std", "target_mean", "target_std")
        )
        if not same:
            log.warning(
                "%s: the scaler statistics differ from the checkpoint's; the training data changed since training",
                self.hparams.path,
            )

    @property
    def bars(self) -> pd.DataFrame:
        """The canonical bars of ``path`` (all tickers, validated), read by ``setup``."""
        if self._frame is None:
            self.setup("fit")
        return self._frame

    def recent_bars(self, n: int, ticker: int = 0) -> pd.DataFrame:
        """The last ``n`` canonical bars of the predict data of ticker id ``ticker`` (for charts)."""
        if "predict" not in self.datasets:
            self.setup("predict")
        return self._predict_bars[ticker].tail(n).reset_index(drop=True)

    def split_frame(self, split: Literal["train", "val", "test"]) -> pd.DataFrame:
        """The canonical bars whose rows the windows of ``split`` forecast (for reports and plots)."""
        if self._frame is None:
            self.setup("fit")
        parts = []
        for name in self.ticker_names:
            b = self.borders[name]
            lo, hi = {
                "train": (b["first"], b["train_end"]),
                "val": (b["train_end"], b["val_end"]),
                "test": (b["val_end"], b["n"]),
            }[split]
            parts.append(self._frame[self._frame["ticker"] == name].iloc[lo:hi])
        return pd.concat(parts, ignore_index=True)


class MultivariateDataModule(_WindowDataModule):
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
        target_kind: Literal["return", "level"] | None = None,
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
        self.path = _resolve(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        # The header alone fixes the channel counts the model must agree with.
        header = list(pd.read_csv(self.path, nrows=0).columns)
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
        self.target_kind: Literal["return", "level"] = target_kind
        self.n_features, self.n_targets = len(self.feature_names), len(self.target_names)
        self.ticker_names = [self.path.stem]
        self.datasets = {}

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

    def setup(self, stage: str | None = None) -> None:
        if "train" in self.datasets:
            return
        h = self.hparams
        L, F = self.context_len, self.horizon
        df = pd.read_csv(self.path, keep_default_na=False)  # keep 'n/a' and '' as written, for the message
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
        for split, e in _split_ends(train_end, val_end, test_end, 0, L, F).items():
            self.datasets[split] = WindowDataset(ends=torch.tensor(e), context_len=L, horizon=F, **rows)
        if len(self.datasets["train"]) == 0:
            raise ValueError(
                f"{self.path}: no training windows; context_len + horizon ({L + F}) exceeds the "
                f"{train_end} training rows"
            )
        last = torch.tensor([len(df) - 1])
        self.datasets["predict"] = WindowDataset(ends=last, context_len=L, horizon=F, **{**rows, "y": None})
        log.info(
            "%s: windows train/val/test = %d/%d/%d",
            self.path,
            *(len(self.datasets[s]) for s in ("train", "val", "test")),
        )
