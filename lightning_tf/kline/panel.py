"""The panel of a :class:`~lightning_tf.kline.KLineDataModule`: every ticker's scaled features and targets
stored end to end, its split borders, training statistics and window ends.

:func:`build_panel` makes one from the canonical bars in memory. With a ``cache_dir``, the DataModule
instead prepares it once (:func:`prepare_panel`, what ``prepare_data`` runs on one process per machine)
into a folder keyed by the bar files' content and every setting the panel depends on, and every rank and
DataLoader worker memory-maps that folder (:func:`load_panel`): the pages are shared, a later start reads
no bar file, and the warnings of the build are said again when it is reused. The folder is built and
checked as the text corpora are (:mod:`lightning_tf.training.prepared`: temporary folder, manifest of sizes and
checksums, rename, lock).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from lightning_tf.training import file_identity, prepare_folder, sha256, write_manifest

from .covariates import CALENDAR_FEATURES, cross_sectional
from .covariates import calendar_features as calendar_matrix
from .features import compute_target, feature_matrix
from .reader.io import list_bar_files
from .reader.pool import RecordKeeper
from .scale import standard_scaler_fit
from .settings import Covariates, Features, Reading, Splits
from .windows import chronological_borders, split_ends

__all__ = [
    "PANEL_VERSION",
    "STATISTICS",
    "Panel",
    "PanelSettings",
    "build_panel",
    "load_panel",
    "panel_spec",
    "prepare_panel",
    "ticker_spans",
]

log = logging.getLogger(__name__)

#: the layout of a prepared panel; a change makes every older folder a different key
PANEL_VERSION = 1
ROWS = ("x", "y", "raw_target", "anchor", "ticker", "time")
STATISTICS = ("feature_mean", "feature_std", "target_mean", "target_std")
FUTURE_STATISTICS = ("future_mean", "future_std")  # (n_tickers, Cf) of the known-future values
SPLITS = ("train", "val", "test")
_HANDFUL = 5  # tickers whose warnings are said one by one; more are counted in one line
_LEFT_OUT = "have fewer than 2 usable training rows and are left out of the panel"


def ticker_spans(tickers: np.ndarray) -> list[tuple[str, int, int]]:
    """``(ticker, first row, end row)`` of each ticker of a column sorted by ticker (the canonical frame's),
    found by bisection: a few comparisons per ticker, none per row."""
    spans, start = [], 0
    while start < len(tickers):
        name = tickers[start]
        stop = int(np.searchsorted(tickers, name, side="right"))
        spans.append((str(name), start, stop))
        start = stop
    return spans


@dataclass(frozen=True)
class PanelSettings:
    """What a panel depends on beyond the bars: the :class:`~lightning_tf.kline.KLineDataModule`'s window sizes and
    settings groups (``path`` names the data in messages; ``max_gap`` is the reading's)."""

    path: str
    context_len: int
    horizon: int
    features: Features = Features()
    splits: Splits = Splits()
    covariates: Covariates = Covariates()
    max_gap: str | None = None
    cut: str | None = None  # the reading's date cut: on or before test_start, no test window is expected

    @property
    def tests(self) -> bool:
        """Whether the test split can hold windows (not when the bars are cut before it: a pretraining corpus)."""
        sp = self.splits
        return not (self.cut and sp.test_start and pd.Timestamp(self.cut) <= pd.Timestamp(sp.test_start))

    @property
    def future_names(self) -> list[str]:
        """The known-future columns of ``x_future``: the calendar's features, then the user's."""
        return [*(CALENDAR_FEATURES if self.covariates.calendar else ()), *self.covariates.future]

    def fingerprint(self) -> dict[str, Any]:
        """The settings a prepared panel is keyed by, by their names before the settings were grouped (so a panel
        prepared then keeps its key)."""
        f, sp, c = self.features, self.splits, self.covariates
        flat: dict[str, Any] = {
            "features": list(f.chosen),
            "target": f.target,
            "context_len": self.context_len,
            "horizon": self.horizon,
            "train_fraction": sp.train_fraction,
            "val_fraction": sp.val_fraction,
            "val_start": sp.val_start,
            "test_start": sp.test_start,
            "max_gap": self.max_gap,
            "volatility_window": f.volatility_window,
            "volume_window": f.volume_window,
            "covariates": list(c.past),
            "future_covariates": list(c.future),
            "calendar": c.calendar,
            "label": f.label,
        }
        # settings added later enter the key only when set
        for name, value, unset in (
            ("train_start", sp.train_start, None),
            ("test_end", sp.test_end, None),
            ("embargo", sp.embargo, 0),
        ):
            if value != unset:
                flat[name] = value
        return flat


def future_matrix(bars: dict[str, np.ndarray] | pd.DataFrame, s: PanelSettings) -> np.ndarray:
    """The known-future values of every bar ``(n, Cf)`` float64: calendar features of its timestamp, then the
    ``future_covariates`` columns."""
    n = len(bars["timestamp"])
    calendar = s.covariates.calendar
    parts = [calendar_matrix(np.asarray(bars["timestamp"]), calendar)] if calendar else []
    parts += [np.asarray(bars[c], dtype=np.float64)[:, None] for c in s.covariates.future]
    return np.concatenate(parts, axis=1) if parts else np.zeros((n, 0))


@dataclass
class Panel:
    """A built panel.

    Attributes:
        ticker_names: the tickers kept, in row order (id ``k`` is ``ticker_names[k]``).
        borders: per ticker: ``first`` (first row with finite features, and not before ``train_start``),
            ``train_end``, ``val_end``, ``end`` (the row after the last test bar: ``n``, or the row after
            ``test_end``), ``n``, and the first timestamps of validation and test (``val_start``, ``test_start``,
            or None).
        rows: ``x (N, C)``, ``y (N, 1)``, ``raw_target (N, 1)`` float32, ``anchor (N,)`` float64, ``ticker (N,)``
            and ``time (N,)`` int64 of every row of every kept ticker.
        ends: per split, the row of the last context bar of each window ``(W,)`` int64.
        statistics: ``feature_mean``, ``feature_std`` ``(n_tickers, C)``, ``target_mean``, ``target_std``
            ``(n_tickers, 1)`` float64, of each ticker's training rows.
    """

    ticker_names: list[str]
    borders: dict[str, dict[str, Any]]
    rows: dict[str, Tensor]
    ends: dict[str, Tensor]
    statistics: dict[str, Tensor]


def _series(
    name: str, bars: dict[str, np.ndarray], s: PanelSettings
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """Features ``(n, C)`` (the built-in ones, then the past covariates), target ``(n,)``, the first row
    where they and the known-future values are finite, segment ids ``(n,)`` (a new segment after every gap
    longer than ``max_gap``) and known-future values ``(n, Cf)`` of ticker ``name``'s bars (its canonical
    columns as arrays)."""
    f, past = s.features, s.covariates.past
    feats = feature_matrix(bars, f.chosen, f.volatility_window, f.volume_window)
    if past:
        feats = np.concatenate([feats, np.stack([np.asarray(bars[c], np.float64) for c in past], 1)], 1)
    future = future_matrix(bars, s)
    target = compute_target(bars, f.target)
    n = len(target)
    finite = np.isfinite(feats).all(axis=1) & np.isfinite(target) & np.isfinite(future).all(axis=1)
    first = int(np.argmax(finite)) if finite.any() else n
    bad = np.flatnonzero(~finite[first:])
    if len(bad):
        i = first + int(bad[0])
        names = [*f.chosen, *past]
        col = [f for f, ok in zip(names, np.isfinite(feats[i]), strict=True) if not ok]
        col += [f for f, ok in zip(s.future_names, np.isfinite(future[i]), strict=True) if not ok]
        col = col or [f.target]
        raise ValueError(
            f"{s.path}: ticker {name!r} at {pd.Timestamp(bars['timestamp'][i])}: feature(s) {col} "
            "are not finite after the warm-up rows"
        )
    segment = np.zeros(n, dtype=np.int64)
    if s.max_gap is not None:
        gaps = np.diff(bars["timestamp"]) > np.timedelta64(pd.Timedelta(s.max_gap))
        segment[1:] = np.cumsum(gaps)
    return feats, target, first, segment, future


def _borders(ts: np.ndarray, s: PanelSettings) -> tuple[int, int]:
    sp = s.splits
    if sp.by_date:
        return (
            int(np.searchsorted(ts, np.datetime64(pd.Timestamp(sp.val_start)))),
            int(np.searchsorted(ts, np.datetime64(pd.Timestamp(sp.test_start)))),
        )
    return chronological_borders(len(ts), sp.train_fraction, sp.val_fraction)


def _date_range(ts: np.ndarray, s: PanelSettings) -> tuple[int, int]:
    """The first row at or after ``train_start`` (0 without one) and the row after the last one on or before
    ``test_end`` (``len(ts)`` without one)."""
    sp = s.splits
    lo = 0 if sp.train_start is None else int(np.searchsorted(ts, np.datetime64(pd.Timestamp(sp.train_start))))
    hi = len(ts)
    if sp.test_end is not None:
        hi = int(np.searchsorted(ts, np.datetime64(pd.Timestamp(sp.test_end)), side="right"))
    return lo, hi


def build_panel(frame: pd.DataFrame, s: PanelSettings) -> Panel:
    """The panel of the canonical bars ``frame`` (sorted by ticker, then time). Every ticker is split
    chronologically and scaled with the statistics of its own training rows only; a ticker of a panel
    without two training rows is left out with a warning (a single one is refused). Past a handful of
    tickers, those left out, and those without windows of a split, are counted in one line each."""
    L, F = s.context_len, s.horizon
    past, future_cols = s.covariates.past, s.covariates.future
    n_rows, C, Cf = len(frame), len(s.features.chosen) + len(past), len(s.future_names)
    # Every row's arrays, allocated once and filled ticker by ticker in the dtypes the batches use
    # (rows of a ticker left out of the panel are cut off the end).
    x = np.empty((n_rows, C), dtype=np.float32)
    y = np.empty((n_rows, 1), dtype=np.float32)
    raw = np.empty((n_rows, 1), dtype=np.float32)
    anchor = np.empty(n_rows, dtype=np.float64)
    ids = np.empty(n_rows, dtype=np.int64)
    times = np.empty(n_rows, dtype=np.int64)
    fut = np.empty((n_rows, Cf), dtype=np.float32)
    extra = [c for c in (*past, *future_cols) if c not in frame.columns]
    if extra:
        raise ValueError(f"{s.path}: covariate column(s) {extra} not found among the bars' columns")
    names_read = ("timestamp", "open", "high", "low", "close", "volume", *past, *future_cols)
    columns = {c: frame[c].to_numpy() for c in dict.fromkeys(names_read)}
    close, stamps = columns["close"], columns["timestamp"].view(np.int64)
    spans = ticker_spans(frame["ticker"].to_numpy())
    labels = _labels(frame, spans, s) if s.features.label != "raw" else None
    names: list[str] = []
    ends: dict[str, list[np.ndarray]] = {split: [] for split in SPLITS}
    stats: list[tuple[np.ndarray, ...]] = []  # per ticker: feature mean, std, target mean, std
    borders: dict[str, dict[str, Any]] = {}
    said: list[tuple[str, str, str]] = []  # per-ticker warnings (what, ticker, warning): one by one, or counted
    offset = 0
    for name, start, stop in spans:
        bars = {c: v[start:stop] for c, v in columns.items()}  # views
        feats, target, first, segment, future = _series(name, bars, s)
        n = stop - start
        train_end, val_end = _borders(bars["timestamp"], s)
        # rows before train_start are only the features' warm-up; rows after test_end belong to no split
        lo, end = _date_range(bars["timestamp"], s)
        first = max(first, lo)
        if labels is not None:
            target = labels[start:stop]
        if train_end - first < 2:
            problem = (
                f"{s.path}: ticker {name!r} has {max(train_end - first, 0)} usable training rows "
                f"(of {n} bars, {first} warm-up)"
            )
            if len(spans) == 1:
                raise ValueError(f"{problem}; need more bars or a later val_start")
            # In a panel, a ticker listed after val_start has no training statistics to scale it by.
            said.append((_LEFT_OUT, name, f"{problem}; it is left out of the panel"))
            continue
        k = len(names)
        names.append(name)
        # Statistics from the training rows only: validation and test rows never shape the scale.
        f_mean, f_std = standard_scaler_fit(feats[first:train_end])
        t_mean, t_std = standard_scaler_fit(target[first:train_end, None])
        if labels is not None:  # a cross-sectional label is already on a common scale: never per ticker
            t_mean, t_std = np.zeros(1), np.ones(1)
        u_mean, u_std = standard_scaler_fit(future[first:train_end]) if Cf else (np.zeros(0), np.ones(0))
        stats.append((f_mean, f_std, t_mean, t_std, u_mean, u_std))
        borders[name] = {
            "first": first,
            "train_end": train_end,
            "val_end": val_end,
            "end": max(end, val_end),
            "n": n,
            "val_start": pd.Timestamp(bars["timestamp"][train_end]) if train_end < n else None,
            "test_start": pd.Timestamp(bars["timestamp"][val_end]) if val_end < n else None,
        }
        for split, e in split_ends(train_end, val_end, end, first, L, F, embargo=s.splits.embargo).items():
            e = e[segment[e - L + 1] == segment[np.minimum(e + F, n - 1)]]  # no window across a long gap
            ends[split].append(e + offset)
            if len(e) == 0 and (split != "test" or s.tests):
                said.append(
                    (f"have no {split} windows", name, f"{s.path}: ticker {name!r} has no {split} windows ({n} bars)")
                )
        rows = slice(offset, offset + n)
        x[rows] = np.where(np.isfinite(feats), (feats - f_mean) / f_std, 0.0)  # warm-up rows are never read
        y[rows, 0] = np.where(np.isfinite(target), (target - t_mean[0]) / t_std[0], 0.0)
        raw[rows, 0] = np.nan_to_num(target)
        anchor[rows] = close[start:stop]
        ids[rows] = k
        times[rows] = stamps[start:stop]
        fut[rows] = np.where(np.isfinite(future), (future - u_mean) / u_std, 0.0)
        offset += n
    _warn_each_or_count(s.path, said)
    if not names:
        raise ValueError(f"{s.path}: no ticker has training rows before the validation border")
    arrays = (x, y, raw, anchor, ids, times)
    rows = {key: torch.from_numpy(a[:offset]) for key, a in zip(ROWS, arrays, strict=True)}
    if Cf:
        rows["x_future"] = torch.from_numpy(fut[:offset])
    keys = STATISTICS + FUTURE_STATISTICS
    return Panel(
        ticker_names=names,
        borders=borders,
        rows=rows,
        ends={split: torch.from_numpy(np.concatenate(parts)) for split, parts in ends.items()},
        statistics={key: torch.tensor(np.stack(v)) for key, v in zip(keys, zip(*stats, strict=True), strict=True)},
    )


def _warn_each_or_count(path: str, said: list[tuple[str, str, str]]) -> None:
    """The tickers' warnings ``(what, ticker, warning)`` in order, each kind (``what``) one by one when a handful
    of tickers have it; more (a corpus of thousands of tickers) are counted in one line naming a few."""
    counts = Counter(what for what, _, _ in said)
    for what, _, warning in said:
        if counts[what] <= _HANDFUL:
            log.warning("%s", warning)
    for what, n in counts.items():
        if n > _HANDFUL:
            names = ", ".join([repr(name) for kind, name, _ in said if kind == what][:_HANDFUL])
            log.warning("%s: %s tickers %s: %s and %s more", path, f"{n:,}", what, names, f"{n - _HANDFUL:,}")


def _labels(frame: pd.DataFrame, spans: list[tuple[str, int, int]], s: PanelSettings) -> np.ndarray:
    """The cross-sectional label of every row (:func:`~.covariates.cross_sectional`), grouped by the split
    each row's target belongs to (from its ticker's borders) and its date: each split's labels come from its
    own rows alone."""
    target = np.full(len(frame), np.nan)
    split = np.zeros(len(frame), dtype=np.int64)
    stamps = frame["timestamp"].to_numpy()
    for _, start, stop in spans:
        bars = {"close": frame["close"].to_numpy()[start:stop]}
        target[start:stop] = compute_target(bars, s.features.target)
        train_end, val_end = _borders(stamps[start:stop], s)
        split[start + train_end : stop] = 1
        split[start + val_end : stop] = 2
    return cross_sectional(target, stamps, split, s.features.label)


# ------------------------------------------------------------------------------------------- prepared


@dataclass(frozen=True)
class PanelSpec:
    """Everything a prepared panel depends on: the panel's settings and the reader's (the
    :class:`~lightning_tf.kline.KLineDataModule` arguments ``columns``, ``ticker_column``, ``on_error``,
    ``decimal``, ``thousands``, ``timezone``), and the bar files, by name, size and CRC-32."""

    settings: PanelSettings
    reader: tuple[tuple[str, Any], ...]
    files: tuple[Path, ...]

    def fingerprint(self) -> dict[str, Any]:
        """The settings and every bar file's identity (:func:`lightning_tf.training.prepared.file_identity`)."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> dict[str, Any]:  # the files are read once per spec
        return {
            "settings": self.settings.fingerprint(),  # without the path: a moved folder of the same files is the same panel
            "reader": {k: v for k, v in self.reader},
            "files": [file_identity(p) for p in self.files],
            "version": PANEL_VERSION,
        }

    def key(self) -> str:
        """The folder name: the data's name and 16 hex digits of the fingerprint's hash."""
        label = Path(self.settings.path).name.split(".")[0] or "bars"
        return f"{label}-{sha256(self.fingerprint())[:16]}"


def panel_spec(settings: PanelSettings, path: Path, reading: Reading) -> PanelSpec:
    """The :class:`PanelSpec` of the bars at ``path`` (a file or a folder of files) read as ``reading`` says."""
    keys = ("columns", "ticker_column", "on_error", "decimal", "thousands", "timezone")
    reader = {k: getattr(reading, k) for k in keys}
    reader.update(covariate_missing=settings.covariates.missing, ffill_limit=settings.covariates.ffill_limit)
    # settings added later enter the key only when set, so a panel prepared before them keeps its key
    reader.update(
        {k: v for k, v, unset in (("cut", reading.cut, None), ("bad_files", reading.bad_files, "error")) if v != unset}
    )
    return PanelSpec(settings, tuple(sorted(reader.items())), tuple(list_bar_files(path)))


@contextmanager
def _kept_warnings() -> Iterator[list[list[Any]]]:
    """The warnings of ``lightning_tf`` loggers while in the block, as ``[logger, level, message]`` (to be said
    again when the panel is reused)."""
    logger, keep = logging.getLogger("lightning_tf"), RecordKeeper(logging.WARNING)
    kept: list[list[Any]] = []
    logger.addHandler(keep)
    try:
        yield kept
    finally:
        logger.removeHandler(keep)
        kept += [[r.name, r.levelno, r.getMessage()] for r in keep.records]


def _write(panel: Panel, spec: PanelSpec, out: Path, warnings: list[list[Any]], times: dict[str, float]) -> dict:
    for key in panel.rows:
        np.save(out / f"{key}.npy", panel.rows[key].numpy())
    for split in SPLITS:
        np.save(out / f"ends_{split}.npy", panel.ends[split].numpy())
    for key in panel.statistics:
        np.save(out / f"{key}.npy", panel.statistics[key].numpy())
    stamp = lambda t: None if t is None else t.isoformat()  # noqa: E731
    borders = {
        name: {**b, "val_start": stamp(b["val_start"]), "test_start": stamp(b["test_start"])}
        for name, b in panel.borders.items()
    }
    manifest = {
        "version": PANEL_VERSION,
        "key": spec.key(),
        "spec": spec.fingerprint(),
        "ticker_names": panel.ticker_names,
        "borders": borders,
        "warnings": warnings,
        "seconds": round(sum(times.values()), 2),
        "phase_seconds": times,
    }
    return write_manifest(out, manifest)


def prepare_panel(spec: PanelSpec, root: str | Path, read: Callable[[], pd.DataFrame]) -> Path:
    """The folder of ``spec``'s prepared panel under ``root/kline``, built first (``read()`` gives the canonical
    bars) unless a finished, intact one exists; a folder that does not match its manifest (a killed build, a
    truncated or changed file) is said to be unusable and built again."""

    def build(out: Path) -> dict[str, Any]:
        times: dict[str, float] = {}
        with _kept_warnings() as kept:
            t0 = time.perf_counter()
            frame = read()
            times["read"] = round(time.perf_counter() - t0, 2)
            t0 = time.perf_counter()
            panel = build_panel(frame, spec.settings)
            del frame
            times["features"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        manifest = _write(panel, spec, out, kept, times)
        manifest["phase_seconds"]["write"] = round(time.perf_counter() - t0, 2)
        manifest["seconds"] = round(sum(manifest["phase_seconds"].values()), 2)
        return manifest

    base = Path(root).expanduser() / "kline"
    return prepare_folder(base, spec.key(), PANEL_VERSION, build, "panel")


def load_panel(folder: str | Path) -> tuple[Panel, list[list[Any]]]:
    """A prepared panel, its row arrays memory-mapped (copy-on-write: shared pages, never written back), and
    the warnings its build gave (``[logger, level, message]``)."""
    folder = Path(folder)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    stamp = lambda t: None if t is None else pd.Timestamp(t)  # noqa: E731
    borders = {
        name: {**b, "val_start": stamp(b["val_start"]), "test_start": stamp(b["test_start"])}
        for name, b in manifest["borders"].items()
    }
    panel = Panel(
        ticker_names=list(manifest["ticker_names"]),
        borders=borders,
        rows={
            key: torch.from_numpy(np.load(folder / f"{key}.npy", mmap_mode="c"))
            for key in (*ROWS, "x_future")
            if (folder / f"{key}.npy").exists()
        },
        ends={split: torch.from_numpy(np.load(folder / f"ends_{split}.npy")) for split in SPLITS},
        statistics={key: torch.from_numpy(np.load(folder / f"{key}.npy")) for key in STATISTICS + FUTURE_STATISTICS},
    )
    return panel, manifest["warnings"]
