"""KLineDataModule: OHLCV bars (one file, a folder of files or a long table of tickers) to windows of
per-bar features, with future log returns or closes as targets.

Every ticker is split chronologically (by fractions, or by dates common to the panel) and scaled
with statistics of its own training rows only, never of validation or test rows (qlib's fit period;
PatchTST's borders). The windows and their batches are described in :mod:`.windows`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor
from torch.utils.data import DataLoader

from .covariates import (
    LABELS,
    MISSING_POLICIES,
    CovariateMissing,
    Label,
    apply_missing,
    check_calendar,
    check_covariate_names,
    read_static,
    static_ids,
)
from .features import DEFAULT_FEATURES, Target, check_feature_names
from .panel import PanelSettings, build_panel, load_panel, panel_spec, prepare_panel, ticker_spans
from .reader.formats import check_number_options
from .reader.io import read_bars
from .reader.parsing import check_timezone
from .reader.pool import pool_workers
from .reader.validation import ON_ERROR_CHOICES, OnError
from .scale import DataScale, TargetKind, rebuild_prices
from .windows import WindowDataset, next_timestamps, resolve_path, window_loader

__all__ = ["KLineDataModule"]

log = logging.getLogger(__name__)


def _parse_date(name: str, value: str) -> pd.Timestamp:
    """``value`` as a timestamp, or a ValueError naming the argument ``name``."""
    try:
        return pd.Timestamp(value)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{name} {value!r} is not a date such as '2011-07-13' ({e})") from None


class KLineDataModule(LightningDataModule):
    """Windows of OHLCV bars for direct multi-horizon forecasting of returns or closes.

    Reads one file, a folder with one file per ticker or a long table (see
    :func:`lightning_tf.kline.reader.io.read_bars`), builds per-bar features (see
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
        train_start: first date of the training split (with ``val_start``); earlier bars serve only as the
            features' warm-up (a rolling walk-forward window). None: each ticker's first usable bar.
        test_end: last date of the test split (with ``test_start``); later bars belong to no split. None: the
            last bar.
        embargo: bars before each border (validation, test) whose targets are dropped from the split before
            it, so the last training target lies ``embargo`` bars before the first validation target (purged
            and embargoed splits, de Prado 2018).
        batch_size: windows per batch.
        num_workers: DataLoader worker processes.
        on_error: bad rows raise (``error``), are dropped (``drop``) or forward-filled (``ffill``).
        max_gap: no window spans a gap between bars longer than this (pandas Timedelta string,
            e.g. ``"10D"``); under ``on_error="error"`` such a gap raises. None: no limit.
        columns: canonical name -> file column, overriding the column detection.
        ticker_column: ticker column of a long table (detected by name when None).
        decimal: decimal separator of text files (``"."`` or ``","``); None: detected per file.
        thousands: thousands separator of text files (``""`` for none, ``","``, ``"."``, ``" "``, ``"'"``);
            None: detected per file.
        timezone: the exchange's time zone (e.g. ``"Asia/Shanghai"``) that Unix epoch timestamps are
            converted to from UTC; None: epochs stay in UTC. Local time strings are never shifted.
        volatility_window: bars in the rolling volatility feature.
        volume_window: bars in the rolling volume z-score feature.
        predict_path: bars whose last ``context_len`` rows are forecast by ``predict``; None: ``path``.
        seed: seed of the training-window shuffle.
        read_workers: processes reading the files of a folder side by side (the bars, errors and log
            lines are the same for any number); 0: this process reads them; None: one per idle CPU core
            (by the load average) for folders of 8 MB per worker or more, else 0.
        cache_dir: a folder to prepare the panel in once (``prepare_data``: the scaled rows, borders,
            statistics and windows as flat arrays, keyed by the bar files' content and these settings),
            which every later run, DDP rank and loader worker memory-maps instead of reading the bars
            (:mod:`lightning_tf.kline.panel`); None: every process reads and builds it in memory.
        covariates: past-observed covariates: numeric columns of the bar files beyond OHLCV (factors,
            turnover, fundamentals; English or Chinese names, see ``read_bars(extra_columns=...)``), known at
            the close of their row; extra input channels after ``features``, scaled on training rows.
        future_covariates: columns known in advance for the forecast bars (a planned event, an index
            rebalance date): fed for the horizon steps as ``x_future``, never as past inputs.
        covariate_missing: a missing covariate value is forward-filled (``ffill``, at most ``ffill_limit``
            rows in a row), its row dropped (``drop``) or refused (``error``).
        ffill_limit: the longest run of missing values ``ffill`` fills (None: any).
        calendar: an exchange calendar (``XNYS``, ``XSHG``, ``XSHE``, ... of ``exchange_calendars``, or
            ``business``: Monday-Friday): adds its calendar features of the forecast bars to ``x_future``
            (day of week, month, days since the previous session, holiday-adjacent flags), and forecast
            timestamps of daily bars follow its sessions. None: no calendar features.
        static_file: a ticker -> category table (CSV or Parquet: a ticker column and columns such as sector,
            industry, board), each category a learned embedding; every ticker must have a row.
        static_columns: the category columns of ``static_file`` to use (None: all).
        ticker_embedding: a learned embedding per training ticker, with a slot for tickers never seen in
            training (which still forecast).
        label: the target as it is (``raw``) or cross-sectionally per date across the tickers, as qlib's
            processors: ``cs_zscore`` (z-score) or ``cs_rank`` (centred rank, unit variance), each split's
            from its own rows.
        batch_by_date: training batches of one date's universe each (for rank-aware losses; ``batch_size``
            is then unused in training).
        predict_future_path: for ``predict`` with ``future_covariates``: a CSV or Parquet file of their values
            for the forecast bars (``timestamp``, ``ticker`` for several tickers, one column per covariate).
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
        train_start: str | None = None,
        test_end: str | None = None,
        embargo: int = 0,
        batch_size: int = 64,
        num_workers: int = 0,
        on_error: OnError = "error",
        max_gap: str | None = None,
        columns: dict[str, str] | None = None,
        ticker_column: str | None = None,
        decimal: str | None = None,
        thousands: str | None = None,
        timezone: str | None = None,
        volatility_window: int = 20,
        volume_window: int = 20,
        predict_path: str | None = None,
        seed: int = 0,
        read_workers: int | None = None,
        cache_dir: str | None = None,
        covariates: list[str] | None = None,
        future_covariates: list[str] | None = None,
        covariate_missing: CovariateMissing = "error",
        ffill_limit: int | None = None,
        calendar: str | None = None,
        static_file: str | None = None,
        static_columns: list[str] | None = None,
        ticker_embedding: bool = False,
        label: Label = "raw",
        batch_by_date: bool = False,
        predict_future_path: str | None = None,
    ) -> None:
        super().__init__()
        features = list(DEFAULT_FEATURES if features is None else features)
        check_feature_names(features)
        covariates, future_covariates = list(covariates or []), list(future_covariates or [])
        check_covariate_names(covariates, future_covariates, features)
        if covariate_missing not in MISSING_POLICIES:
            raise ValueError(f"covariate_missing must be one of {MISSING_POLICIES}, got {covariate_missing!r}")
        if ffill_limit is not None and ffill_limit < 1:
            raise ValueError(f"ffill_limit ({ffill_limit}) must be >= 1 (or None: any run of missing values)")
        if label not in LABELS:
            raise ValueError(f"label must be one of {LABELS}, got {label!r}")
        check_calendar(calendar)
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
        if (train_start is not None or test_end is not None) and val_start is None:
            raise ValueError(
                f"train_start ({train_start!r}) and test_end ({test_end!r}) need the date split: give val_start "
                "and test_start too"
            )
        if train_start is not None and _parse_date("train_start", train_start) >= _parse_date("val_start", val_start):
            raise ValueError(f"train_start ({train_start}) must come before val_start ({val_start})")
        if test_end is not None and _parse_date("test_end", test_end) < _parse_date("test_start", test_start):
            raise ValueError(f"test_end ({test_end}) must not come before test_start ({test_start})")
        if embargo < 0:
            raise ValueError(f"embargo ({embargo}) must be >= 0 bars")
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
        pool_workers(read_workers, 0, 0)  # a negative count fails here, not in setup
        check_number_options(decimal, thousands)
        check_timezone(timezone)
        self.save_hyperparameters()
        self.context_len, self.horizon = context_len, horizon
        self.builtin_features: list[str] = features
        self.feature_names: list[str] = features + covariates  # past covariates: channels after the features
        self.target_names: list[str] = [target if label == "raw" else f"{label}_{target}"]
        # Returns are forecast against a zero return and rebuilt into prices; levels against the last value.
        self.target_kind: TargetKind = "return" if target == "log_return" or label != "raw" else "level"
        self.n_features, self.n_targets = len(self.feature_names), 1
        # Where the target is itself an input channel, the model may read its scaled history there.
        self.target_channels: list[int] | None = (
            [features.index(target)] if target in features and label == "raw" else None
        )
        self.covariate_names, self.future_covariate_names = covariates, future_covariates
        self.future_names: list[str] = self._settings().future_names  # the columns of x_future
        self.n_future: int = len(self.future_names)
        self.static_sizes: list[int] = []  # the static ids' vocabulary sizes (slot 0 unknown), after setup
        self.static_vocab: dict[str, list[str]] = {}
        self.ticker_names: list[str] = []
        self.datasets: dict[str, WindowDataset] = {}
        self.data_scale: DataScale | None = None  # the training statistics, after setup
        self._frame: pd.DataFrame | None = None
        self._panel_folder: Path | None = None  # the prepared panel of this process (cache_dir)
        self._checkpoint_state: dict = {}  # a checkpoint's training statistics (load_state_dict)
        self.predict_ticker_names: list[str] = []  # the series to forecast, indexed by predict batches' ``ticker``
        self.predict_scaling: dict[str, str] = {}  # how each was scaled: a trained ticker's statistics or its own

    # ------------------------------------------------------------------ building
    def _read(self, path: str) -> pd.DataFrame:
        h = self.hparams
        names = [*self.covariate_names, *self.future_covariate_names]
        frame = read_bars(
            resolve_path(path),
            columns=h.columns,
            ticker_column=h.ticker_column,
            on_error=h.on_error,
            max_gap=h.max_gap,
            decimal=h.decimal,
            thousands=h.thousands,
            timezone=h.timezone,
            read_workers=h.read_workers,
            progress=rank_zero_only.rank == 0,
            extra_columns=names,
        )
        return apply_missing(frame, names, h.covariate_missing, h.ffill_limit, str(path))

    def _settings(self) -> PanelSettings:
        h = self.hparams
        return PanelSettings(
            path=str(h.path),
            features=tuple(self.builtin_features),
            target=h.target,
            context_len=self.context_len,
            horizon=self.horizon,
            train_fraction=h.train_fraction,
            val_fraction=h.val_fraction,
            val_start=h.val_start,
            test_start=h.test_start,
            max_gap=h.max_gap,
            volatility_window=h.volatility_window,
            volume_window=h.volume_window,
            train_start=h.train_start,
            test_end=h.test_end,
            embargo=h.embargo,
            covariates=tuple(h.covariates or ()),
            future_covariates=tuple(h.future_covariates or ()),
            calendar=h.calendar,
            label=h.label,
        )

    def _prepared(self) -> Path:
        """The prepared panel's folder under ``cache_dir``, built first unless it exists."""
        if self._panel_folder is not None:  # prepared by this process: the folder is finished and checked
            return self._panel_folder
        h = self.hparams
        keys = ("columns", "ticker_column", "on_error", "decimal", "thousands", "timezone")
        reader = {k: h[k] for k in (*keys, "covariate_missing", "ffill_limit")}
        spec = panel_spec(self._settings(), resolve_path(h.path), reader)
        self._panel_folder = prepare_panel(spec, h.cache_dir, lambda: self._read(h.path))
        return self._panel_folder

    def prepare_data(self) -> None:
        """With a ``cache_dir``: prepare the panel once (Lightning runs this on one process per machine before
        ``setup``). Prediction prepares nothing: it reads only the bars to forecast."""
        if self.trainer is not None and self.trainer.state.fn == "predict":
            return
        if self.hparams.cache_dir is not None:
            self._prepared()

    def _build(self) -> None:
        h = self.hparams
        if h.cache_dir is not None:
            folder = self._prepared()
            panel, warnings = load_panel(folder)
            for name, level, message in warnings:  # what the build said, said again: nothing is lost on reuse
                logging.getLogger(name).log(level, "%s (when the panel was prepared)", message)
        else:
            self._frame = self._read(h.path)
            panel = build_panel(self._frame, self._settings())
        self.ticker_names, self.borders = panel.ticker_names, panel.borders
        self._warn_overlapping_fraction_splits()
        stats = panel.statistics
        self.feature_mean, self.feature_std = stats["feature_mean"], stats["feature_std"]  # (n_tickers, C)
        self.target_mean, self.target_std = stats["target_mean"], stats["target_std"]  # (n_tickers, K)
        self.future_mean, self.future_std = stats["future_mean"], stats["future_std"]  # (n_tickers, Cf)
        static = self._static_table(self.ticker_names)  # (n_tickers, S)
        self.data_scale = DataScale(
            feature_names=self.feature_names,
            target_names=self.target_names,
            target_kind=self.target_kind,
            ticker_names=self.ticker_names,
            feature_mean=self.feature_mean,
            feature_std=self.feature_std,
            target_mean=self.target_mean,
            target_std=self.target_std,
            has_prices=True,
            volatility_window=h.volatility_window,
            volume_window=h.volume_window,
            label=h.label,
            covariates=self.covariate_spec(),
        )
        self._rows = dict(panel.rows)
        if static is not None:
            self._rows["static"] = static[self._rows["ticker"]]  # (N, S)
        for split, ends in panel.ends.items():
            self.datasets[split] = WindowDataset(
                ends=ends, context_len=self.context_len, horizon=self.horizon, **self._rows
            )
        self._check_splits()
        log.info(
            "%s: %d tickers, windows train/val/test = %d/%d/%d",
            h.path,
            len(self.ticker_names),
            *(len(self.datasets[s]) for s in ("train", "val", "test")),
        )

    def _static_table(self, tickers: list[str]) -> torch.Tensor | None:
        """The static ids of the training ``tickers`` ``(n, S)`` (None without static covariates), setting the
        vocabulary (each category's values among the training tickers) and ``static_sizes``."""
        h = self.hparams
        if h.static_file is None and not h.ticker_embedding:
            return None
        table = None
        if h.static_file is not None:
            table = read_static(resolve_path(h.static_file), tickers, h.static_columns)
            self.static_vocab = {c: sorted(set(table[c])) for c in table.columns}
        self.static_sizes = [len(tickers) + 1] * bool(h.ticker_embedding) + [
            len(v) + 1 for v in self.static_vocab.values()
        ]
        return torch.from_numpy(static_ids(tickers, tickers, table, self.static_vocab, h.ticker_embedding))

    def covariate_spec(self) -> dict:
        """The covariate specification a checkpoint carries (plain data): past and known-future names, the
        calendar, the known-future training statistics, the missing-value policy and the static vocabulary."""
        h = self.hparams
        spec: dict = {
            "past": list(self.covariate_names),
            "future": list(self.future_covariate_names),
            "future_names": list(self.future_names),
            "horizon": self.horizon,
            "calendar": h.calendar,
            "missing": h.covariate_missing,
            "ffill_limit": h.ffill_limit,
            "ticker_embedding": bool(h.ticker_embedding),
            "static_file": h.static_file,
            "static_vocab": {k: list(v) for k, v in self.static_vocab.items()},
            "static_sizes": list(self.static_sizes),
        }
        if getattr(self, "future_mean", None) is not None:
            spec["future_mean"] = self.future_mean.tolist()
            spec["future_std"] = self.future_std.tolist()
        return spec

    def _check_splits(self) -> None:
        """One line naming the split, its length and what a window needs, for a training or validation split
        left without windows (an empty test split is refused when testing starts: a fit need not test)."""
        h = self.hparams
        L, F = self.context_len, self.horizon
        lengths = {
            "train": max(b["train_end"] - b["first"] for b in self.borders.values()),
            "val": max(b["val_end"] - b["train_end"] for b in self.borders.values()),
            "test": max(b.get("end", b["n"]) - b["val_end"] for b in self.borders.values()),
        }
        names = {"train": "training", "val": "validation", "test": "test"}
        for split in ("train", "val"):
            if len(self.datasets[split]) or (split == "val" and h.val_fraction == 0 and h.val_start is None):
                continue
            n = lengths[split]
            if split == "train":
                need = f"a training window needs context_len + horizon = {L} + {F} = {L + F} bars"
            else:
                bars = f"horizon ({F})" if not h.embargo else f"horizon + embargo = {F} + {h.embargo} = {F + h.embargo}"
                need = f"a {names[split]} window needs {bars} bars in the split (its context may come before)"
            warm_up = " (after the warm-up)" if split == "train" else ""
            raise ValueError(
                f"{h.path}: the {names[split]} split has {n} usable bars{warm_up}, too few: {need}; lower horizon or "
                "context_len, or move the split borders"
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

    def _read_predict(self) -> None:
        """Read the bars to forecast (``predict_path``, else ``path``) and nothing else."""
        h = self.hparams
        self._predict_source = str(h.predict_path or h.path)
        frame = self._frame if h.predict_path is None and self._frame is not None else self._read(self._predict_source)
        self._predict_frame = frame
        spans = ticker_spans(frame["ticker"].to_numpy())
        self.predict_ticker_names = [name for name, _, _ in spans]
        self._predict_bars = {}
        self._predict_times = {}
        for k, (_, start, stop) in enumerate(spans):
            bars = frame.iloc[start:stop].reset_index(drop=True)
            self._predict_bars[k] = bars
            self._predict_times[k] = pd.DatetimeIndex(bars["timestamp"])
        self.datasets.pop("predict", None)

    def _trained_statistics(self) -> dict[str, tuple[np.ndarray, ...]]:
        """Each trained ticker's statistics: from this process's training data, or from the checkpoint
        (:meth:`load_state_dict`); empty when neither is known."""
        if "train" in self.datasets:
            names, stats = self.ticker_names, (self.feature_mean, self.feature_std, self.target_mean, self.target_std)
        elif self._checkpoint_state:
            state = self._checkpoint_state
            names = list(state["ticker_names"])
            keys = ("feature_mean", "feature_std", "target_mean", "target_std")
            stats = tuple(torch.as_tensor(state[k]) for k in keys)
        else:
            return {}
        return {name: tuple(s[k].double().numpy() for s in stats) for k, name in enumerate(names)}

    def _build_predict(self) -> None:
        from .inference import series_windows

        h = self.hparams
        trained = self._trained_statistics()
        if "train" in self.datasets:
            cov, tickers = self.covariate_spec(), list(self.ticker_names)
        else:
            state = self._checkpoint_state
            cov, tickers = state.get("covariates") or self.covariate_spec(), list(state.get("ticker_names", []))
        if not trained:
            log.warning(
                "%s: no training statistics (predict without --ckpt_path and without training in this process): "
                "every series is scaled by its own history",
                self._predict_source,
            )
        windows = series_windows(
            self._predict_frame,
            feature_names=self.feature_names,
            target=h.target,
            context_len=self.context_len,
            volatility_window=h.volatility_window,
            volume_window=h.volume_window,
            trained=trained,
            source=self._predict_source,
            covariates=cov,
            horizon=self.horizon,
            future=self._predict_future(),
            trained_tickers=tickers,
        )
        self.predict_scaling = {w.name: w.scaled_by for w in windows}
        for w in windows:
            log.info("%s: ticker %r scaled by %s", self._predict_source, w.name, w.scaled_by)
        L, n = self.context_len, len(windows)
        # each series' L context rows, then (with known-future covariates) its F forecast rows
        R = L + (self.horizon if windows[0].x_future is not None else 0)

        def rows(a: np.ndarray) -> np.ndarray:  # (L, ...) -> (R, ...), the forecast rows zero
            return np.concatenate([a, np.zeros((R - L, *a.shape[1:]), a.dtype)]) if R > L else a

        ids = [self.predict_ticker_names.index(w.name) for w in windows]
        times = [self._predict_times[k][-1].value for k in ids]
        extra = {}
        if windows[0].x_future is not None:
            future = [np.concatenate([np.zeros((L, w.x_future.shape[1])), w.x_future]) for w in windows]
            extra["x_future"] = torch.tensor(np.concatenate(future), dtype=torch.float32)  # (n R, Cf)
        if windows[0].static is not None:
            extra["static"] = torch.tensor(np.repeat(np.stack([w.static for w in windows]), R, axis=0))  # (n R, S)
        self.datasets["predict"] = WindowDataset(
            x=torch.tensor(np.concatenate([rows(w.x) for w in windows]), dtype=torch.float32),  # (n R, C)
            ends=torch.arange(n) * R + L - 1,  # (n,): each series' last context row
            context_len=L,
            horizon=self.horizon,
            y=None,
            raw_target=torch.tensor(np.concatenate([rows(w.raw_target) for w in windows]), dtype=torch.float32),
            anchor=torch.tensor(np.repeat([w.anchor for w in windows], R), dtype=torch.float64),  # (n R,)
            ticker=torch.tensor(np.repeat(ids, R)),  # (n R,)
            time=torch.tensor(np.repeat(times, R)),  # (n R,)
            scale_mean=torch.tensor(np.repeat(np.stack([w.target_mean for w in windows]), R, axis=0)),  # (n R, K)
            scale_std=torch.tensor(np.repeat(np.stack([w.target_std for w in windows]), R, axis=0)),  # (n R, K)
            **extra,
        )

    def _predict_future(self) -> pd.DataFrame | None:
        """The known-future covariates of the forecast bars (``predict_future_path``), or None."""
        path = self.hparams.predict_future_path
        if path is None:
            return None
        p = resolve_path(path)
        if not p.exists():
            raise FileNotFoundError(f"{path}: predict_future_path not found")
        frame = pd.read_parquet(p) if p.suffix in (".parquet", ".pq") else pd.read_csv(p)
        frame.columns = [str(c).strip() for c in frame.columns]
        stamp = next((c for c in frame.columns if c.lower() in ("timestamp", "date", "datetime")), None)
        if stamp is None:
            raise ValueError(f"{path}: no timestamp (or date) column; columns are {list(frame.columns)}")
        return frame.rename(columns={stamp: "timestamp"})

    def __str__(self) -> str:
        # Lightning's __str__ builds every loader (training data, and predict windows without statistics);
        # jsonargparse formats the DataModule into a debug line for every link it skips
        return f"{type(self).__name__}(path={self.hparams.path!r})"

    def setup(self, stage: str | None = None) -> None:
        """``fit``, ``validate``, ``test``: read ``path``, build the splits and fit the scalers on the
        training rows. ``predict``: read only the bars to forecast (``predict_path``, else ``path``); the
        training statistics come from this process's training or from the checkpoint
        (:meth:`load_state_dict`, which Lightning calls after ``setup``), and the windows are built by
        :meth:`predict_dataloader`."""
        if stage != "predict" and "train" not in self.datasets:
            self._build()
        if stage in (None, "predict"):
            self._read_predict()

    # ------------------------------------------------------------------ loaders
    def _loader(self, split: str) -> DataLoader:
        h = self.hparams
        return window_loader(
            self.datasets,
            split,
            batch_size=h.batch_size,
            num_workers=h.num_workers,
            seed=h.seed,
            source=h.path,
            horizon=self.horizon,
            by_date=h.batch_by_date,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        if "predict" not in self.datasets:
            if not hasattr(self, "_predict_frame"):
                self._read_predict()
            self._build_predict()
        return self._loader("predict")

    # ------------------------------------------------------------------ units
    def _scale(self) -> DataScale:
        if self.data_scale is None:
            raise RuntimeError("no training statistics yet: call setup() first")
        return self.data_scale

    def inverse_targets(self, y: Tensor, ticker: Tensor | None = None) -> Tensor:
        """Model-scale targets ``(B, F, K)`` of tickers ``(B,)`` (None: ticker 0) back to original
        units ``(B, F, K)`` (see :meth:`DataScale.inverse_targets`)."""
        return self._scale().inverse_targets(y, ticker)

    def scale_targets(self, y: Tensor, ticker: Tensor | None = None) -> Tensor:
        """Original-unit targets ``(B, F, K)`` to the model scale (inverse of :meth:`inverse_targets`)."""
        return self._scale().scale_targets(y, ticker)

    @staticmethod
    def rebuild_prices(returns: Tensor, anchor: Tensor) -> Tensor:
        """Close prices ``(B, F)`` from per-bar log returns ``(B, F)`` and the last known close
        ``(B,)``: ``anchor * exp(cumsum(returns))``."""
        return rebuild_prices(returns, anchor)  # (B, F)

    def target_to_prices(self, y: Tensor, anchor: Tensor) -> Tensor:
        """Original-unit targets ``(B, F, K=1)`` to close prices ``(B, F)`` for either target."""
        return self._scale().to_prices(y, anchor)  # (B, F)

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
            "covariates": self.covariate_spec(),
        }

    def load_state_dict(self, state: dict) -> None:
        """A checkpoint's training statistics: kept for ``predict`` (which never reads the training file);
        when this process has built the training data, compared with it (a difference means the training
        file changed since the checkpoint and the model would see inputs on another scale)."""
        if not state:
            return
        self._checkpoint_state = {
            k: state[k]
            for k in ("ticker_names", "feature_mean", "feature_std", "target_mean", "target_std", "covariates")
            if k in state
        }
        self.datasets.pop("predict", None)  # scale the predict windows with these
        if "train" not in self.datasets:
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
        """The canonical bars of ``path`` (all tickers, validated), read by ``setup`` (with a ``cache_dir``,
        which reads no bars, when first asked for)."""
        if "train" not in self.datasets:
            self.setup("fit")
        if self._frame is None:
            self._frame = self._read(self.hparams.path)
        return self._frame

    def trading_dates(self) -> pd.DatetimeIndex:
        """Every timestamp any ticker of ``path`` has, ascending: the panel's calendar, on which walk-forward
        folds are laid (:func:`lightning_tf.kline.walkforward.folds`). Reads the bars, builds no panel."""
        if self._frame is None:
            self._frame = self._read(self.hparams.path)
        return pd.DatetimeIndex(np.unique(self._frame["timestamp"].to_numpy()))

    def recent_bars(self, n: int, ticker: int = 0) -> pd.DataFrame:
        """The last ``n`` canonical bars of the predict data of ticker id ``ticker`` (for charts)."""
        if not self.predict_ticker_names:
            self.setup("predict")
        return self._predict_bars[ticker].tail(n).reset_index(drop=True)

    def future_timestamps(self, n: int | None = None, ticker: int = 0) -> pd.DatetimeIndex:
        """Timestamps of the ``n`` (default ``horizon``) bars after the end of the predict data of ticker
        id ``ticker``, on the series' own calendar (see :func:`~lightning_tf.kline.windows.next_timestamps`)."""
        if not self.predict_ticker_names:
            self.setup("predict")
        n = self.horizon if n is None else n
        return next_timestamps(self._predict_times[ticker], n, calendar=self.hparams.calendar)

    def split_frame(self, split: Literal["train", "val", "test"]) -> pd.DataFrame:
        """The canonical bars whose rows the windows of ``split`` forecast (for reports and plots)."""
        frame = self.bars
        parts = []
        rows = {name: (start, stop) for name, start, stop in ticker_spans(frame["ticker"].to_numpy())}
        for name in self.ticker_names:
            b = self.borders[name]
            lo, hi = {
                "train": (b["first"], b["train_end"]),
                "val": (b["train_end"], b["val_end"]),
                "test": (b["val_end"], b.get("end", b["n"])),
            }[split]
            parts.append(frame.iloc[rows[name][0] : rows[name][1]].iloc[lo:hi])
        return pd.concat(parts, ignore_index=True)
