"""Sliding windows over series stored end to end, their chronological split borders, the calendar of
the bars after the last one, and the loaders both DataModules serve them with.

A window is named by ``t``, the row of its last context bar: inputs are rows ``t-L+1 .. t``, targets
rows ``t+1 .. t+F``. A window belongs to the split that holds all its targets, so validation and test
windows begin ``L`` rows before their border (their context may come from the earlier split) and no
target ever lies in an earlier split. The borders follow PatchTST's and DLinear's data loaders
(``Dataset_Custom``, ``Dataset_ETT_hour``, ``Dataset_ETT_minute``).

Batches are dicts:

==================  =============  ===========================================================
``x``               (B, L, C)      float32 model-scale inputs (train-fit StandardScaler)
``y``               (B, F, K)      float32 model-scale targets (absent from predict batches)
``x_raw_target``    (B, L, K)      float32 the target quantity over the context, original units
``anchor``          (B,)           float64 close of the last context bar (zeros for ETT)
``ticker``          (B,)           int64 ticker id (index into ``ticker_names``)
``time``            (B,)           int64 timestamp (ns since epoch) of the last context bar
``scale_mean``      (B, K)         float64 predict only: the target statistics the window's series
``scale_std``       (B, K)         was scaled with (a trained ticker's, or the series' own)
``x_future``        (B, F, Cf)     float32 known-future covariates of the F forecast bars (calendar
                                   features, then the user's ``future_covariates``), scaled;
                                   only with known-future covariates
``static``          (B, S)         int64 static ids: the ticker's (0: not seen in training), then
                                   each static category's (0: unknown); only with static covariates
==================  =============  ===========================================================

Past-observed covariates are channels of ``x`` after the built-in features. A window ending at ``t``
reads ``x`` at rows ``t-L+1 .. t`` and ``x_future`` at rows ``t+1 .. t+F`` only: known-future values
are the one input that comes from after ``t``, and only for the columns declared known in advance.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from lightning_tf.training import (
    EpochBatchSampler,
    IgnoreStopSignals,
    ResumableDataLoader,
    ShuffledBatchSampler,
    eval_sampler,
    find,
)

__all__ = [
    "check_batch",
    "WindowDataset",
    "DateBatchSampler",
    "chronological_borders",
    "ett_borders",
    "in_order",
    "next_timestamps",
    "resolve_path",
    "split_ends",
    "window_loader",
    "xy_pairs",
]


def check_batch(x: Tensor, y: Tensor | None, sizes: Mapping[str, Any]) -> None:
    """Refuse a batch whose context ``x`` is not ``(B, context_len, n_features)`` or whose targets ``y``
    are not ``(B, horizon, n_targets)``, with the sizes of ``sizes`` (a model's hyperparameters)."""
    (L, C), (F, K) = (sizes["context_len"], sizes["n_features"]), (sizes["horizon"], sizes["n_targets"])
    if x.dim() != 3 or x.shape[1:] != (L, C):
        raise ValueError(f"batch 'x' must be (B, context_len={L}, n_features={C}), got {tuple(x.shape)}")
    if y is not None and (y.dim() != 3 or y.shape[1:] != (F, K)):
        raise ValueError(f"batch 'y' must be (B, horizon={F}, n_targets={K}), got {tuple(y.shape)}")


def resolve_path(path: str) -> Path:
    """``path`` as given, or else one of the package's own files (:func:`lightning_tf.training.resources.find`:
    the clone's or the installed package's), so the default ``data/msft.csv`` works from any working
    directory, in a clone or after ``pip install``."""
    p = Path(path).expanduser()
    if p.exists() or p.is_absolute():
        return p
    return find(p) or p


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
        scale_mean: the target mean each row's series was scaled with ``(N, K)`` float64 (predict), or None.
        scale_std: the target standard deviation likewise, or None.
        x_future: known-future covariates ``(N, Cf)`` float32 of every row (read for a window's target rows),
            or None.
        static: static ids ``(N, S)`` int64 of every row (read at the window's last row), or None.
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
        scale_mean: Tensor | None = None,
        scale_std: Tensor | None = None,
        x_future: Tensor | None = None,
        static: Tensor | None = None,
    ) -> None:
        self.x, self.y, self.raw_target = x, y, raw_target
        self.x_future, self.static = x_future, static
        self.scale_mean, self.scale_std = scale_mean, scale_std
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
        if self.scale_mean is not None and self.scale_std is not None:
            batch["scale_mean"], batch["scale_std"] = self.scale_mean[t], self.scale_std[t]  # (B, K) each
        if self.x_future is not None:
            batch["x_future"] = self.x_future[t[:, None] + self.target_offsets]  # (B, F, Cf)
        if self.static is not None:
            batch["static"] = self.static[t]  # (B, S)
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


def split_ends(
    train_end: int, val_end: int, n: int, first: int, context_len: int, horizon: int, embargo: int = 0
) -> dict[str, np.ndarray]:
    """Window ends ``t`` for each split of one series of ``n`` rows whose features are valid from
    row ``first`` on. A window's targets are rows ``t+1 .. t+F``; it belongs to the split that holds
    all of them. ``embargo`` rows before each border hold no target of the split before it (purged
    and embargoed, de Prado 2018, ch. 7): the last training target is ``embargo`` rows before the first
    validation target, and likewise between validation and test."""
    lo = first + context_len - 1
    spans = {
        "train": (lo, train_end - horizon - 1 - embargo),
        "val": (max(lo, train_end - 1), val_end - horizon - 1 - embargo),
        "test": (max(lo, val_end - 1), n - horizon - 1),
    }
    return {k: np.arange(a, b + 1, dtype=np.int64) for k, (a, b) in spans.items()}


def next_timestamps(
    ts: pd.DatetimeIndex, n: int, session_days: int = 20, calendar: str | None = None
) -> pd.DatetimeIndex:
    """Timestamps of the ``n`` bars after ``ts`` (ascending), following the series' own calendar.

    With an exchange ``calendar`` (``XNYS``, ``XSHG``, ... or ``business``), bars a day or more apart
    continue on that calendar's sessions (an A-share forecast skips the Spring Festival and the
    National Day week).

    Daily bars without weekend rows continue on business days. Intraday bars continue on the
    trading session seen in the data: the times of day that bars had on the last ``session_days``
    days before the last one (so an exchange's lunch break and close are skipped: after 11:30 come
    13:05 ... on an A-share 5-minute series, after the close the next business day's open), moving
    on by business days, or calendar days where the series has weekend bars. Holidays are not
    known. Other spacings, and intraday data of a single day, continue at the median spacing; a single bar
    without a calendar is refused (ValueError).
    """
    if len(ts) < 2 and calendar is None:
        raise ValueError(
            f"one bar ({ts[0] if len(ts) else 'none'}) has no spacing to continue its timestamps: give two or "
            "more bars, or an exchange calendar"
        )
    daily = _next_business_days(ts, n) if calendar is None else None
    if daily is not None:
        return daily
    last = ts[-1]
    if calendar is not None and (len(ts) < 2 or _median_step_ns(ts) >= 86_400_000_000_000):
        from .covariates import next_sessions

        return next_sessions(calendar, last, n)  # bars a day or more apart
    step = pd.Series(ts).diff().median()
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


class DateBatchSampler(EpochBatchSampler):
    """One batch per date: the windows whose last context bar has that timestamp (one date's universe),
    the dates in an order drawn from ``seed`` and the epoch (``shuffle``) or in time order; resumable inside an
    epoch as every training loader (:class:`~lightning_tf.training.loaders.EpochBatchSampler`). Under DDP
    each rank takes every R-th date.

    Args:
        times: the timestamp of each window ``(W,)``.
        shuffle: a new order of the dates each epoch, or time order.
        seed: base seed of the order.
    """

    def __init__(self, times: Tensor, shuffle: bool = True, seed: int = 0) -> None:
        super().__init__(seed)
        order = torch.argsort(times, stable=True)
        _, counts = torch.unique_consecutive(times[order], return_counts=True)
        self.groups = list(torch.split(order, counts.tolist()))
        self.shuffle = shuffle

    def _build(self, epoch: int) -> list[Tensor]:
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(int(np.random.SeedSequence([self.seed, epoch]).generate_state(1)[0]))
            dates = torch.randperm(len(self.groups), generator=generator).tolist()
        else:
            dates = list(range(len(self.groups)))
        return [self.groups[k] for k in dates[self.rank :: self.num_replicas]]


def next_timestamps_of(series: list[Any], n: int, calendar: str | None = None) -> list[pd.DatetimeIndex]:
    """:func:`next_timestamps` of each of several series' timestamps (an index, a column or an array), those of
    series of one length and unit at once (a server's batch of requests): daily bars on an exchange ``calendar``
    (without a time zone) in one lookup of the calendar for all, daily bars without one on business days in one
    numpy call; any other series alone."""
    from .covariates import next_sessions_of

    out: list[pd.DatetimeIndex | None] = [None] * len(series)
    groups: dict[tuple[int, str], list[int]] = {}  # (length, unit) -> series
    naive = {k: np.asarray(t) for k, t in enumerate(series) if getattr(t, "tz", None) is None}
    for k, t in naive.items():
        unit = np.datetime_data(t.dtype)[0] if t.dtype.kind == "M" else ""  # datetime64: no time zone
        if unit in ("s", "ms", "us", "ns") and (calendar is not None or len(t) > 1):
            groups.setdefault((len(t), unit), []).append(k)
    sessions, found = [], []  # (series, their timestamps (B, n))
    for members in groups.values():
        stamps = np.stack([naive[k] for k in members])  # (B, m)
        if calendar is not None:
            steps, day = _median_steps(stamps)
            sessions += [k for k, step in zip(members, steps, strict=True) if step >= day]  # a day or more apart
            continue
        rows, stamped = _business_days_after(stamps, n)
        if len(rows):
            found.append(([members[r] for r in rows], stamped))
    if sessions:
        lasts = np.array([naive[k][-1] for k in sessions], dtype="datetime64[ns]")
        found.append((sessions, next_sessions_of(calendar, lasts, n)))
    for members, stamped in found:
        every = pd.DatetimeIndex(stamped.reshape(-1))  # (B n,): one index, sliced
        for j, k in enumerate(members):
            out[k] = every[j * n : (j + 1) * n]
    return [
        next_timestamps(pd.DatetimeIndex(t), n, calendar=calendar) if o is None else o
        for t, o in zip(series, out, strict=True)
    ]


def _median_step_ns(ts: pd.DatetimeIndex) -> float:
    """The median step between the bars ``ts`` in nanoseconds, with numpy (as ``pd.Series(ts).diff().median()``)."""
    return float(np.median(np.diff(ts.as_unit("ns").asi8)))


def _next_business_days(ts: pd.DatetimeIndex, n: int) -> pd.DatetimeIndex | None:
    """:func:`next_timestamps` of daily bars without weekend rows, with numpy (a server's answer runs it once per
    request); None for any other series."""
    if ts.tz is not None or len(ts) < 2:
        return None
    rows, stamped = _business_days_after(ts.to_numpy()[None], n)
    return pd.DatetimeIndex(stamped[0]) if len(rows) else None


def _median_steps(stamps: np.ndarray) -> tuple[np.ndarray, int]:
    """The median step between the bars of each of B series ``(B, m)`` (datetime64 of one unit; inf for a single
    bar), and a day, both in that unit."""
    unit = np.datetime_data(stamps.dtype)[0]
    day = int(np.timedelta64(1, "D") // np.timedelta64(1, unit))
    if stamps.shape[1] < 2:
        return np.full(len(stamps), np.inf), day
    return np.median(np.diff(stamps.view(np.int64), axis=1), axis=1), day


def _business_days_after(stamps: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Of B series ``(B, m)`` (naive datetime64 of one unit, s to ns): the rows that are daily bars without weekend
    rows (a median step of one business day: a Friday and a Monday are daily bars too), and the ``n`` business days
    after each of them at its last bar's time of day ``(B', n)``, in the unit pandas' business-day range gives (ns
    stays ns, any other becomes us)."""
    dates = stamps.astype("datetime64[D]")  # (B, m)
    if stamps.shape[1] < 2:
        return np.zeros(0, dtype=np.int64), np.zeros((0, n), dtype="datetime64[us]")
    steps = np.median(np.busday_count(dates[:, :-1], dates[:, 1:]), axis=1)  # (B,) in business days
    weekend = ((dates.view(np.int64) + 3) % 7 >= 5).any(axis=1)  # 1970-01-01: Thursday
    rows = np.flatnonzero((steps == 1) & ~weekend)
    lasts = stamps[rows, -1]  # (B',)
    days = lasts.astype("datetime64[D]")
    after = np.busday_offset(days[:, None], np.arange(1, n + 1)[None, :])  # (B', n) the next business days
    unit = "ns" if np.datetime_data(stamps.dtype)[0] == "ns" else "us"
    return rows, (after + (lasts - days)[:, None]).astype(f"datetime64[{unit}]")


def _batched(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Collate for :class:`WindowDataset`, whose ``__getitems__`` already returns a batch."""
    return batch


def window_loader(
    datasets: dict[str, WindowDataset],
    split: str,
    *,
    batch_size: int,
    num_workers: int,
    seed: int,
    source: object,
    horizon: int,
    by_date: bool = False,
) -> DataLoader:
    """The loader of one split: training windows in an order set by ``seed`` and the epoch alone, resumable
    inside an epoch (:class:`~lightning_tf.training.loaders.ResumableDataLoader`; under DDP each rank takes its
    share), every evaluation window in order (under DDP on exactly one process; Lightning's own sampler
    would repeat some).

    Args:
        datasets: the DataModule's windows by split.
        split: ``train``, ``val``, ``test`` or ``predict``.
        batch_size: windows per batch.
        num_workers: DataLoader worker processes.
        seed: seed of the training order.
        source: the data's file, named in the errors.
        horizon: forecast horizon F, named in the errors.
        by_date: training batches of one date's windows each (:class:`DateBatchSampler`).
    """
    if split not in datasets:
        raise RuntimeError(f"no {split} windows: call setup() first")
    dataset = datasets[split]
    if split == "test" and len(dataset) == 0:
        # an empty test would "pass" without scoring anything
        raise ValueError(
            f"{source}: no test windows; the test split has fewer than horizon "
            f"({horizon}) bars after its border (check test_start / the split fractions)"
        )
    if split == "train":
        # the order depends on (seed, epoch) alone and the position inside the epoch is checkpointed
        sampler = (
            DateBatchSampler(dataset.time[dataset.ends], seed=seed)
            if by_date
            else ShuffledBatchSampler(len(dataset), batch_size, seed=seed)
        )
        return ResumableDataLoader(
            dataset, sampler, collate_fn=_batched, num_workers=num_workers, persistent_workers=num_workers > 0
        )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=eval_sampler(dataset, predict=split == "predict"),
        drop_last=False,  # every evaluation window is scored
        collate_fn=_batched,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        worker_init_fn=IgnoreStopSignals() if num_workers > 0 else None,  # the main process stops the run
    )


def in_order(loaders: object, default_batch: int = 1024) -> DataLoader | None:
    """A plain, unsharded, in-order loader over the dataset of a trainer's (first) loader, in its batch
    size (``default_batch`` when its batches have none, as one date's universe per batch); its own generator
    leaves the global random state (dropout, shuffling) untouched."""
    loader: Any = loaders[0] if isinstance(loaders, (list, tuple)) and loaders else loaders
    dataset = getattr(loader, "dataset", None)
    if dataset is None or not hasattr(dataset, "__len__") or len(dataset) == 0:
        return None
    batch_size = loader.batch_size or getattr(loader.batch_sampler, "batch_size", None) or default_batch
    return DataLoader(dataset, batch_size=batch_size, collate_fn=loader.collate_fn, generator=torch.Generator())


def xy_pairs(loader: DataLoader) -> Iterator[tuple[Tensor, Tensor]]:
    """The ``(x, y)`` of every batch of ``loader``."""
    return ((b["x"], b["y"]) for b in loader)
