"""The K-line data settings, declared once as a few typed objects and handed down whole.

A :class:`~lightning_tf.kline.KLineDataModule` is the path of its bars, the window's sizes and five groups of
settings, each a frozen dataclass that checks its own values when it is built (so a wrong value is one line
naming ``group.field``, before any file is read):

* :class:`Reading`: how the bar files are read (:func:`~lightning_tf.kline.reader.io.read_bars`);
* :class:`Features`: what each bar becomes: the input features, the target and its label, the rolling windows;
* :class:`Splits`: the chronological split borders (fractions or dates) and the embargo;
* :class:`Covariates`: past-observed, known-future and static covariates and the missing-value policy;
* :class:`Loading`: batches, loader workers, the shuffle's seed.

YAML nests them under the DataModule's ``init_args`` (``splits: {val_start: ..., test_start: ...}``) and the
command line reaches each field by its dotted name (``--data.init_args.splits.val_start 2011-01-01``). Configs
written when these were flat arguments of the DataModule still load: :func:`nest_flat_arguments` moves each old
name to its group (the commands apply it to every config file and flag).

The same objects travel on: the panel is keyed by them (:class:`~lightning_tf.kline.panel.PanelSettings`), the
reader takes :class:`Reading` whole, and :meth:`KLineForecaster.forecast
<lightning_tf.kline.KLineForecaster.forecast>` reads new bars with a :class:`Reading`. (qlib's ``DatasetH(handler,
segments)`` and nanoGPT's ``GPTConfig`` are the shape.)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from .covariates import LABELS, MISSING_POLICIES, CovariateMissing, Label, check_calendar, check_covariate_names
from .features import DEFAULT_FEATURES, Target, check_feature_names
from .reader.formats import check_number_options
from .reader.parsing import check_timezone
from .reader.pool import pool_workers
from .reader.validation import ON_ERROR_CHOICES, OnError

__all__ = [
    "FLAT_NAMES",
    "GROUPS",
    "Covariates",
    "Features",
    "Loading",
    "Reading",
    "Splits",
    "build_groups",
    "nest_flat_arguments",
    "parse_date",
    "read_with_settings",
]

log = logging.getLogger(__name__)


def parse_date(name: str, value: str) -> pd.Timestamp:
    """``value`` as a timestamp, or a ValueError naming the setting ``name``."""
    try:
        return pd.Timestamp(value)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{name} {value!r} is not a date such as '2011-07-13' ({e})") from None


@dataclass(frozen=True)
class Reading:
    """How the bar files are read.

    Args:
        columns: canonical name -> file column, overriding the column detection.
        ticker_column: ticker column of a long table (detected by name when None).
        on_error: bad rows raise (``error``), are dropped (``drop``) or forward-filled (``ffill``).
        max_gap: no window spans a gap between bars longer than this (pandas Timedelta string, e.g. ``"10D"``);
            under ``on_error="error"`` such a gap raises. None: no limit.
        decimal: decimal separator of text files (``"."`` or ``","``); None: detected per file.
        thousands: thousands separator of text files (``""`` for none, ``","``, ``"."``, ``" "``, ``"'"``);
            None: detected per file.
        timezone: the exchange's time zone (e.g. ``"Asia/Shanghai"``) that Unix epoch timestamps are converted to
            from UTC; None: epochs stay in UTC. Local time strings are never shifted.
        read_workers: processes reading the files of a folder side by side (the bars, errors and log lines are the
            same for any number); 0: this process reads them; None: one per idle CPU core (by the load average) for
            folders of 8 MB per worker or more, else 0.
        cut: bars at or after this date are never read (a pretraining corpus cut before an evaluation's dates);
            None: every bar.
        bad_files: a file of a folder that is empty, unreadable or refused by validation stops the run
            (``error``) or is left out and counted in one summary line (``skip``: a corpus of thousands of files).
    """

    columns: dict[str, str] | None = None
    ticker_column: str | None = None
    on_error: OnError = "error"
    max_gap: str | None = None
    decimal: str | None = None
    thousands: str | None = None
    timezone: str | None = None
    read_workers: int | None = None
    cut: str | None = None
    bad_files: Literal["error", "skip"] = "error"

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR_CHOICES:
            raise ValueError(f"reading.on_error must be one of {ON_ERROR_CHOICES}, got {self.on_error!r}")
        if self.max_gap is not None:
            try:  # fail here, not in setup, on a malformed string
                pd.Timedelta(self.max_gap)
            except ValueError as e:
                raise ValueError(
                    f"reading.max_gap {self.max_gap!r} is not a duration such as '10D' or '2h' ({e})"
                ) from None
        pool_workers(self.read_workers, 0, 0)  # a negative count fails here, not in setup
        check_number_options(self.decimal, self.thousands)
        check_timezone(self.timezone)
        if self.cut is not None:
            parse_date("reading.cut", self.cut)
        if self.bad_files not in ("error", "skip"):
            raise ValueError(f"reading.bad_files must be 'error' or 'skip', got {self.bad_files!r}")

    def options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~lightning_tf.kline.reader.io.read_bars` these settings give."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class Features:
    """What each bar becomes: input features and the forecast target.

    Args:
        names: input features per bar (names in ``lightning_tf.kline.features.FEATURES``); None: ``log_return,
            open_rel, high_rel, low_rel, log_volume_change, volatility``.
        target: forecast ``log_return`` (per-bar log returns) or ``close``.
        label: the target as it is (``raw``) or cross-sectionally per date across the tickers, as qlib's processors:
            ``cs_zscore`` (z-score) or ``cs_rank`` (centred rank, unit variance), each split's from its own rows.
        volatility_window: bars in the rolling volatility feature.
        volume_window: bars in the rolling volume z-score feature.
    """

    names: list[str] | None = None
    target: Target = "log_return"
    label: Label = "raw"
    volatility_window: int = 20
    volume_window: int = 20

    def __post_init__(self) -> None:
        check_feature_names(list(self.chosen))
        if self.target not in ("log_return", "close"):
            raise ValueError(f"features.target must be 'log_return' or 'close', got {self.target!r}")
        if self.label not in LABELS:
            raise ValueError(f"features.label must be one of {LABELS}, got {self.label!r}")
        for name in ("volatility_window", "volume_window"):
            if getattr(self, name) < 2:  # a rolling std of one bar is NaN everywhere
                raise ValueError(f"features.{name} ({getattr(self, name)}) must be at least 2 bars")

    @property
    def chosen(self) -> list[str]:
        """The feature names in order (the default set when ``names`` is None)."""
        return list(DEFAULT_FEATURES if self.names is None else self.names)


@dataclass(frozen=True)
class Splits:
    """Chronological split borders: fractions of each ticker's bars, or dates common to the panel.

    Args:
        train_fraction: share of each ticker's bars for training (when no dates are given).
        val_fraction: share for validation; the test split takes the rest.
        val_start: first date of the validation split (with ``test_start``; overrides fractions).
        test_start: first date of the test split.
        train_start: first date of the training split (with ``val_start``); earlier bars serve only as the features'
            warm-up (a rolling walk-forward window). None: each ticker's first usable bar.
        test_end: last date of the test split (with ``test_start``); later bars belong to no split. None: the last bar.
        embargo: bars before each border (validation, test) whose targets are dropped from the split before it, so
            the last training target lies ``embargo`` bars before the first validation target (purged and embargoed
            splits, de Prado 2018).
    """

    train_fraction: float = 0.7
    val_fraction: float = 0.1
    val_start: str | None = None
    test_start: str | None = None
    train_start: str | None = None
    test_end: str | None = None
    embargo: int = 0

    def __post_init__(self) -> None:
        tf, vf = self.train_fraction, self.val_fraction
        if not (0 < tf < 1 and 0 <= vf < 1 and tf + vf < 1):
            raise ValueError(
                f"need 0 < splits.train_fraction ({tf}), 0 <= splits.val_fraction ({vf}) and train_fraction + "
                "val_fraction < 1 (the test split takes the rest)"
            )
        if (self.val_start is None) != (self.test_start is None):
            raise ValueError(
                f"give both splits.val_start ({self.val_start!r}) and splits.test_start ({self.test_start!r}) "
                "or neither"
            )
        if self.val_start is not None:
            val, test = parse_date("splits.val_start", self.val_start), parse_date("splits.test_start", self.test_start)
            if val >= test:
                raise ValueError(
                    f"splits.val_start ({self.val_start}) must come before splits.test_start ({test.date()})"
                )
        if (self.train_start is not None or self.test_end is not None) and self.val_start is None:
            raise ValueError(
                f"splits.train_start ({self.train_start!r}) and splits.test_end ({self.test_end!r}) need the date "
                "split: give val_start and test_start too"
            )
        if self.train_start is not None and parse_date("splits.train_start", self.train_start) >= pd.Timestamp(
            self.val_start
        ):
            raise ValueError(
                f"splits.train_start ({self.train_start}) must come before splits.val_start ({self.val_start})"
            )
        if self.test_end is not None and parse_date("splits.test_end", self.test_end) < pd.Timestamp(self.test_start):
            raise ValueError(
                f"splits.test_end ({self.test_end}) must not come before splits.test_start ({self.test_start})"
            )
        if self.embargo < 0:
            raise ValueError(f"splits.embargo ({self.embargo}) must be >= 0 bars")

    @property
    def by_date(self) -> bool:
        """Whether the borders are dates (else fractions of each ticker's bars)."""
        return self.val_start is not None


@dataclass(frozen=True)
class Covariates:
    """Covariates in neuralforecast's three kinds: observed in the past, known in the future, static per series.

    Args:
        past: past-observed covariates: numeric columns of the bar files beyond OHLCV (factors, turnover,
            fundamentals; English or Chinese names, see ``read_bars(extra_columns=...)``), known at the close of
            their row; extra input channels after the features, scaled on training rows.
        future: columns known in advance for the forecast bars (a planned event, an index rebalance date): fed for
            the horizon steps as ``x_future``, never as past inputs.
        missing: a missing covariate value is forward-filled (``ffill``, at most ``ffill_limit`` rows in a row), its
            row dropped (``drop``) or refused (``error``).
        ffill_limit: the longest run of missing values ``ffill`` fills (None: any).
        calendar: an exchange calendar (``XNYS``, ``XSHG``, ``XSHE``, ... of ``exchange_calendars``, or
            ``business``: Monday-Friday): adds its calendar features of the forecast bars to ``x_future`` (day of
            week, month, days since the previous session, holiday-adjacent flags), and forecast timestamps of daily
            bars follow its sessions. None: no calendar features.
        static_file: a ticker -> category table (CSV or Parquet: a ticker column and columns such as sector,
            industry, board), each category a learned embedding; every ticker must have a row.
        static_columns: the category columns of ``static_file`` to use (None: all).
        ticker_embedding: a learned embedding per training ticker, with a slot for tickers never seen in training
            (which still forecast).
    """

    past: list[str] = field(default_factory=list)
    future: list[str] = field(default_factory=list)
    missing: CovariateMissing = "error"
    ffill_limit: int | None = None
    calendar: str | None = None
    static_file: str | None = None
    static_columns: list[str] | None = None
    ticker_embedding: bool = False

    def __post_init__(self) -> None:
        # a YAML null or a tuple reads as no list; the frozen object keeps lists
        object.__setattr__(self, "past", list(self.past or []))
        object.__setattr__(self, "future", list(self.future or []))
        if self.missing not in MISSING_POLICIES:
            raise ValueError(f"covariates.missing must be one of {MISSING_POLICIES}, got {self.missing!r}")
        if self.ffill_limit is not None and self.ffill_limit < 1:
            raise ValueError(
                f"covariates.ffill_limit ({self.ffill_limit}) must be >= 1 (or None: any run of missing values)"
            )
        check_calendar(self.calendar)

    def check_against(self, features: Features) -> None:
        """Refuse a covariate named twice, or named like a built-in or calendar feature."""
        check_covariate_names(self.past, self.future, features.chosen)


@dataclass(frozen=True)
class Loading:
    """How windows are batched and loaded.

    Args:
        batch_size: windows per batch.
        num_workers: DataLoader worker processes.
        seed: seed of the training-window shuffle.
        batch_by_date: training batches of one date's universe each (for rank-aware losses; ``batch_size`` is then
            unused in training).
    """

    batch_size: int = 64
    num_workers: int = 0
    seed: int = 0
    batch_by_date: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"loading.batch_size ({self.batch_size}) must be >= 1")
        if self.num_workers < 0:
            raise ValueError(f"loading.num_workers ({self.num_workers}) must be >= 0")


#: the groups of the DataModule, by argument name
GROUPS: dict[str, type] = {
    "reading": Reading,
    "features": Features,
    "splits": Splits,
    "covariates": Covariates,
    "loading": Loading,
}

#: every flat argument of the DataModule before the groups: its group and its name there
FLAT_NAMES: dict[str, tuple[str, str]] = {
    **{
        name: ("reading", name)
        for name in ("columns", "ticker_column", "on_error", "max_gap", "decimal", "thousands", "timezone")
    },
    "read_workers": ("reading", "read_workers"),
    "features": ("features", "names"),
    "target": ("features", "target"),
    "label": ("features", "label"),
    "volatility_window": ("features", "volatility_window"),
    "volume_window": ("features", "volume_window"),
    **{
        name: ("splits", name)
        for name in ("train_fraction", "val_fraction", "val_start", "test_start", "train_start", "test_end", "embargo")
    },
    "covariates": ("covariates", "past"),
    "future_covariates": ("covariates", "future"),
    "covariate_missing": ("covariates", "missing"),
    **{
        name: ("covariates", name)
        for name in ("ffill_limit", "calendar", "static_file", "static_columns", "ticker_embedding")
    },
    **{name: ("loading", name) for name in ("batch_size", "num_workers", "seed", "batch_by_date")},
}


def is_flat(name: str, value: Any) -> bool:
    """Whether ``name: value`` among a KLineDataModule's arguments is an old flat one (``features`` and
    ``covariates`` are both: a list is the old argument, a mapping the new group)."""
    if name not in FLAT_NAMES:
        return False
    if name in GROUPS:  # features, covariates: the group's name too
        return value is None or isinstance(value, (list, tuple))
    return True


def _as_dict(value: Any) -> dict[str, Any]:
    """A group given as a dataclass, a mapping or a jsonargparse Namespace, as a plain dict."""
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)  # type: ignore[arg-type]
    if isinstance(value, Mapping):
        return dict(value)
    return dict(vars(value)) if value is not None else {}


def nest_flat_arguments(init_args: Mapping[str, Any], source: str = "the config") -> dict[str, Any]:
    """``init_args`` of a KLineDataModule with every old flat argument moved into its group; what moved is said in
    one warning.

    Args:
        init_args: the arguments as written (a config's ``data.init_args``, or a checkpoint's hyperparameters).
        source: where they were written, for the warning.

    Raises:
        ValueError: an old name and its new place both given, with different values.
    """
    out = {name: value for name, value in init_args.items() if not is_flat(name, value)}
    moved: list[str] = []
    for name, value in init_args.items():
        if not is_flat(name, value):
            continue
        group, key = FLAT_NAMES[name]
        nested = out[group] = _as_dict(out.get(group))
        if key in nested and nested[key] != value:
            raise ValueError(
                f"{source}: data {group}.{key} is given twice: {nested[key]!r}, and {value!r} by its old name {name}"
            )
        nested[key] = value
        moved.append(f"{name} -> {group}.{key}")
    if moved:
        log.warning(
            "%s: KLineDataModule's flat arguments moved into groups (%s); the old names still work",
            source,
            ", ".join(moved),
        )
    return out


def build_groups(init_args: Mapping[str, Any], source: str = "the config") -> dict[str, Any]:
    """``init_args`` of a KLineDataModule as its constructor takes them: old flat names moved into their groups
    (:func:`nest_flat_arguments`), each group given as a mapping built into its settings object.

    Raises:
        ValueError: a group's unknown field, or a value its object refuses, named as ``group.field``.
    """
    out = nest_flat_arguments(init_args, source)
    for name, kind in GROUPS.items():
        value = out.get(name)
        if value is None or isinstance(value, kind):
            continue
        given = _as_dict(value)
        known = {f.name for f in dataclasses.fields(kind)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"{source}: data {name} has no field(s) {unknown}; its fields are {sorted(known)}")
        out[name] = kind(**given)
    return out


def read_with_settings(
    path: str | Path | pd.DataFrame,
    reading: Reading,
    covariates: Covariates,
    *,
    source: str,
    progress: bool = False,
    name: str | None = None,
) -> pd.DataFrame:
    """The canonical bars of ``path`` (a file, a folder or a frame) read as ``reading`` says, with the covariate
    columns ``covariates`` names and its missing-value policy applied.

    Args:
        path: the bars.
        reading: how they are read.
        covariates: the past and known-future columns to read, and what a missing value becomes.
        source: the bars' name in messages.
        progress: show a progress bar over a folder's files.
        name: the ticker of bars without a ticker column (default: the file name).
    """
    from .covariates import apply_missing
    from .reader.io import read_bars

    names = [*covariates.past, *covariates.future]
    frame = read_bars(path, **reading.options(), progress=progress, extra_columns=names, name=name)
    return apply_missing(frame, names, covariates.missing, covariates.ffill_limit, source)
