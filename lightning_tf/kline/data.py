"""KLineDataModule: OHLCV bars (one file, a folder of files or a long table of tickers) to windows of
per-bar features, with future log returns or closes as targets.

Every ticker is split chronologically (by fractions, or by dates common to the panel) and scaled
with statistics of its own training rows only, never of validation or test rows (qlib's fit period;
PatchTST's borders). The windows and their batches are described in :mod:`.windows`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor
from torch.utils.data import DataLoader

from .covariates import read_static, static_ids
from .handover import DataHandover
from .panel import STATISTICS, PanelSettings, build_panel, load_panel, panel_spec, prepare_panel, ticker_spans
from .scale import DataScale, TargetKind, rebuild_prices
from .settings import GROUPS, Covariates, Features, Loading, Reading, Splits, build_groups, read_with_settings
from .windows import WindowDataset, next_timestamps, resolve_path, window_loader

__all__ = ["KLineDataModule"]

log = logging.getLogger(__name__)


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
        reading: how the bar files are read (:class:`~.settings.Reading`).
        features: the input features, the target and its label (:class:`~.settings.Features`).
        splits: the chronological split borders and embargo (:class:`~.settings.Splits`).
        covariates: past-observed, known-future and static covariates (:class:`~.settings.Covariates`).
        loading: batch size, loader workers, the shuffle's seed (:class:`~.settings.Loading`).
        cache_dir: a folder to prepare the panel in once (``prepare_data``: the scaled rows, borders,
            statistics and windows as flat arrays, keyed by the bar files' content and these settings),
            which every later run, DDP rank and loader worker memory-maps instead of reading the bars
            (:mod:`lightning_tf.kline.panel`); None: every process reads and builds it in memory.
        predict_path: bars whose last ``context_len`` rows are forecast by ``predict``; None: ``path``.
        predict_future_path: for ``predict`` with known-future covariates: a CSV or Parquet file of their values
            for the forecast bars (``timestamp``, ``ticker`` for several tickers, one column per covariate).
    """

    def __init__(
        self,
        path: str = "data/msft.csv",
        context_len: int = 64,
        horizon: int = 5,
        reading: Reading = Reading(),
        features: Features = Features(),
        splits: Splits = Splits(),
        covariates: Covariates = Covariates(),
        loading: Loading = Loading(),
        cache_dir: str | None = None,
        predict_path: str | None = None,
        predict_future_path: str | None = None,
    ) -> None:
        super().__init__()
        if context_len < 1 or horizon < 1:
            raise ValueError(f"context_len ({context_len}) and horizon ({horizon}) must be >= 1")
        for name, value, kind in (
            ("reading", reading, Reading),
            ("features", features, Features),
            ("splits", splits, Splits),
            ("covariates", covariates, Covariates),
            ("loading", loading, Loading),
        ):
            if not isinstance(value, kind):
                raise TypeError(f"{name} must be a lightning_tf.kline.{kind.__name__}, got {type(value).__name__}")
        covariates.check_against(features)
        self.reading, self.features, self.splits = reading, features, splits
        self.covariates, self.loading = covariates, loading
        # plain values in checkpoints (loadable with weights_only=True) and in the logged hyperparameters
        self.save_hyperparameters(
            {
                "path": path,
                "context_len": context_len,
                "horizon": horizon,
                **{name: asdict(getattr(self, name)) for name in GROUPS},
                "cache_dir": cache_dir,
                "predict_path": predict_path,
                "predict_future_path": predict_future_path,
            }
        )
        self.path, self.cache_dir = path, cache_dir
        self.predict_path, self.predict_future_path = predict_path, predict_future_path
        self.context_len, self.horizon = context_len, horizon
        names, label, target = features.chosen, features.label, features.target
        self.builtin_features: list[str] = names
        self.feature_names: list[str] = names + covariates.past  # past covariates: channels after the features
        self.target_names: list[str] = [target if label == "raw" else f"{label}_{target}"]
        # Returns are forecast against a zero return and rebuilt into prices; levels against the last value.
        self.target_kind: TargetKind = "return" if target == "log_return" or label != "raw" else "level"
        self.n_features, self.n_targets = len(self.feature_names), 1
        # Where the target is itself an input channel, the model may read its scaled history there.
        self.target_channels: list[int] | None = [names.index(target)] if target in names and label == "raw" else None
        self.covariate_names, self.future_covariate_names = list(covariates.past), list(covariates.future)
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

    @classmethod
    def from_arguments(cls, init_args: Mapping[str, Any], source: str = "the arguments") -> KLineDataModule:
        """A DataModule from plain arguments: a config's ``init_args`` or a checkpoint's hyperparameters, the
        groups as mappings or objects, old flat names included (:func:`~.settings.build_groups`)."""
        return cls(**build_groups(init_args, source))

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls,
        checkpoint_path: str | Path,
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        **kwargs: Any,
    ) -> KLineDataModule:
        """The DataModule of a checkpoint (its saved arguments, flat ones of older checkpoints included, and its
        training statistics), with ``kwargs`` overriding arguments."""
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
        saved = dict(checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_KEY) or {})
        saved = {k: v for k, v in saved.items() if not k.startswith("_")}  # LightningCLI's own entries
        dm = cls.from_arguments({**saved, **kwargs}, source=str(checkpoint_path))
        state = checkpoint.get(cls.__qualname__)
        if state:
            dm.load_state_dict(state)
        return dm

    # ------------------------------------------------------------------ building
    def _read(self, path: str) -> pd.DataFrame:
        return read_with_settings(
            resolve_path(path), self.reading, self.covariates, progress=rank_zero_only.rank == 0, source=str(path)
        )

    def _settings(self) -> PanelSettings:
        return PanelSettings(
            path=str(self.path),
            context_len=self.context_len,
            horizon=self.horizon,
            features=self.features,
            splits=self.splits,
            covariates=self.covariates,
            max_gap=self.reading.max_gap,
            cut=self.reading.cut,
        )

    def _prepared(self) -> Path:
        """The prepared panel's folder under ``cache_dir``, built first unless it exists."""
        if self._panel_folder is not None:  # prepared by this process: the folder is finished and checked
            return self._panel_folder
        spec = panel_spec(self._settings(), resolve_path(self.path), self.reading)
        self._panel_folder = prepare_panel(spec, self.cache_dir, lambda: self._read(self.path))
        return self._panel_folder

    def prepare_data(self) -> None:
        """With a ``cache_dir``: prepare the panel once (Lightning runs this on one process per machine before
        ``setup``). Prediction prepares nothing: it reads only the bars to forecast."""
        if self.trainer is not None and self.trainer.state.fn == "predict":
            return
        if self.cache_dir is not None:
            self._prepared()

    def _build(self) -> None:
        if self.cache_dir is not None:
            folder = self._prepared()
            panel, warnings = load_panel(folder)
            for name, level, message in warnings:  # what the build said, said again: nothing is lost on reuse
                logging.getLogger(name).log(level, "%s (when the panel was prepared)", message)
        else:
            self._frame = self._read(self.path)
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
            volatility_window=self.features.volatility_window,
            volume_window=self.features.volume_window,
            label=self.features.label,
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
            self.path,
            len(self.ticker_names),
            *(len(self.datasets[s]) for s in ("train", "val", "test")),
        )

    def _static_table(self, tickers: list[str]) -> torch.Tensor | None:
        """The static ids of the training ``tickers`` ``(n, S)`` (None without static covariates), setting the
        vocabulary (each category's values among the training tickers) and ``static_sizes``."""
        c = self.covariates
        if c.static_file is None and not c.ticker_embedding:
            return None
        table = None
        if c.static_file is not None:
            table = read_static(resolve_path(c.static_file), tickers, c.static_columns)
            self.static_vocab = {col: sorted(set(table[col])) for col in table.columns}
        self.static_sizes = [len(tickers) + 1] * bool(c.ticker_embedding) + [
            len(v) + 1 for v in self.static_vocab.values()
        ]
        return torch.from_numpy(static_ids(tickers, tickers, table, self.static_vocab, c.ticker_embedding))

    def covariate_spec(self) -> dict:
        """The covariate specification a checkpoint carries (plain data): past and known-future names, the
        calendar, the known-future training statistics, the missing-value policy and the static vocabulary."""
        c = self.covariates
        spec: dict = {
            "past": list(self.covariate_names),
            "future": list(self.future_covariate_names),
            "future_names": list(self.future_names),
            "horizon": self.horizon,
            "calendar": c.calendar,
            "missing": c.missing,
            "ffill_limit": c.ffill_limit,
            "ticker_embedding": bool(c.ticker_embedding),
            "static_file": c.static_file,
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
        sp = self.splits
        L, F = self.context_len, self.horizon
        lengths = {
            "train": max(b["train_end"] - b["first"] for b in self.borders.values()),
            "val": max(b["val_end"] - b["train_end"] for b in self.borders.values()),
            "test": max(b.get("end", b["n"]) - b["val_end"] for b in self.borders.values()),
        }
        names = {"train": "training", "val": "validation", "test": "test"}
        for split in ("train", "val"):
            if len(self.datasets[split]) or (split == "val" and sp.val_fraction == 0 and not sp.by_date):
                continue
            n = lengths[split]
            if split == "train":
                need = f"a training window needs context_len + horizon = {L} + {F} = {L + F} bars"
            else:
                bars = (
                    f"horizon ({F})" if not sp.embargo else f"horizon + embargo = {F} + {sp.embargo} = {F + sp.embargo}"
                )
                need = f"a {names[split]} window needs {bars} bars in the split (its context may come before)"
            warm_up = " (after the warm-up)" if split == "train" else ""
            raise ValueError(
                f"{self.path}: the {names[split]} split has {n} usable bars{warm_up}, too few: {need}; lower horizon or "
                "context_len, or move the split borders"
            )

    def _warn_overlapping_fraction_splits(self) -> None:
        """Fraction splits are per ticker: in a panel whose tickers cover different years, one
        ticker may train on days that are another's test days, and the model then learns market
        moves of the test period from the other ticker. Say so; date borders cannot overlap."""
        if self.splits.by_date or len(self.ticker_names) < 2:
            return
        starts = [(b["val_start"], b["test_start"], name) for name, b in self.borders.items()]
        latest_train = max((s for s in starts if s[0] is not None), key=lambda s: s[0], default=None)
        earliest_test = min((s for s in starts if s[1] is not None), key=lambda s: s[1], default=None)
        if latest_train is not None and earliest_test is not None and latest_train[0] > earliest_test[1]:
            log.warning(
                "%s: fraction splits are per ticker and overlap in time: ticker %r trains on bars until %s, "
                "after the test split of ticker %r starts (%s); the model may learn test-period market moves. "
                "Set splits.val_start and splits.test_start for one calendar border across the panel.",
                self.path,
                latest_train[2],
                latest_train[0],
                earliest_test[2],
                earliest_test[1],
            )

    def _read_predict(self) -> None:
        """Read the bars to forecast (``predict_path``, else ``path``) and nothing else."""
        self._predict_source = str(self.predict_path or self.path)
        frame = (
            self._frame if self.predict_path is None and self._frame is not None else self._read(self._predict_source)
        )
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

    def _predict_scale(self) -> DataScale:
        """The scaling the predict windows take: this process's training statistics, or the checkpoint's
        (:meth:`load_state_dict`), or none (every series then scaled by its own history)."""
        if "train" in self.datasets and self.data_scale is not None:
            return self.data_scale
        state = self._checkpoint_state
        names = list(state.get("ticker_names", []))
        stats = {k: torch.as_tensor(state[k]).double() for k in STATISTICS if k in state}
        C, K = len(self.feature_names), len(self.target_names)
        empty = {k: torch.zeros(0, C if k.startswith("feature") else K) for k in STATISTICS}
        return DataScale(
            feature_names=self.feature_names,
            target_names=self.target_names,
            target_kind=self.target_kind,
            ticker_names=names,
            **(stats if names else empty),
            has_prices=True,
            volatility_window=self.features.volatility_window,
            volume_window=self.features.volume_window,
            label=self.features.label,
            covariates=state.get("covariates") or self.covariate_spec(),
        )

    def _build_predict(self) -> None:
        from .inference import series_windows

        scale = self._predict_scale()
        if not scale.ticker_names:
            log.warning(
                "%s: no training statistics (predict without --ckpt_path and without training in this process): "
                "every series is scaled by its own history",
                self._predict_source,
            )
        windows = series_windows(
            self._predict_frame,
            scale=scale,
            context_len=self.context_len,
            horizon=self.horizon,
            source=self._predict_source,
            future=self._predict_future(),
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
        path = self.predict_future_path
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
        return f"{type(self).__name__}(path={self.path!r})"

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
        ld = self.loading
        return window_loader(
            self.datasets,
            split,
            batch_size=ld.batch_size,
            num_workers=ld.num_workers,
            seed=ld.seed,
            source=self.path,
            horizon=self.horizon,
            by_date=ld.batch_by_date,
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

    def handover(self) -> DataHandover:
        """What the model takes from this data (:class:`~.handover.DataHandover`)."""
        return DataHandover(
            n_features=self.n_features,
            n_targets=self.n_targets,
            context_len=self.context_len,
            horizon=self.horizon,
            target_channels=self.target_channels,
            data_scale=self.data_scale,
            covariate_names=list(self.covariate_names),
            n_future=self.n_future,
            static_sizes=list(self.static_sizes),
            provenance=self.provenance(),
        )

    def provenance(self) -> dict[str, Any]:
        """What this data is, as a model trained on it records it (see :class:`~.handover.DataHandover`); empty
        before ``setup``."""
        if "train" not in self.datasets:
            return {}
        L, F = self.context_len, self.horizon

        time = self._rows["time"]  # (N,): rows of every ticker, ticker by ticker: the earliest is not the first row

        def day(stamp: Tensor) -> str:
            return pd.Timestamp(int(stamp)).isoformat()

        train, val = self.datasets["train"].ends, self.datasets["val"].ends
        last = val if len(val) else train
        firsts = {
            k: min((b[k] for b in self.borders.values() if b.get(k) is not None), default=None)
            for k in ("val_start", "test_start")
        }
        return {
            "data": str(self.path),
            "tickers": len(self.ticker_names),
            "first": day(time[train - L + 1].min()) if len(train) else None,
            "seen_until": day(time[last + F].max()) if len(last) else None,
            "val_from": None if firsts["val_start"] is None else firsts["val_start"].isoformat(),
            "test_from": None if firsts["test_start"] is None else firsts["test_start"].isoformat(),
            "cut": self.reading.cut,
            "features": list(self.feature_names),
            "target": self.target_names[0],
        }

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
        if "train" not in self.datasets or not set(state["ticker_names"]) & set(self.ticker_names):
            return  # nothing built to compare, or another data set (a pretrained model tested zero-shot)
        same = state["ticker_names"] == self.ticker_names and all(
            torch.allclose(state[k], getattr(self, k))
            for k in ("feature_mean", "feature_std", "target_mean", "target_std")
        )
        if not same:
            log.warning(
                "%s: the scaler statistics differ from the checkpoint's; the training data changed since training",
                self.path,
            )

    @property
    def bars(self) -> pd.DataFrame:
        """The canonical bars of ``path`` (all tickers, validated), read by ``setup`` (with a ``cache_dir``,
        which reads no bars, when first asked for)."""
        if "train" not in self.datasets:
            self.setup("fit")
        if self._frame is None:
            self._frame = self._read(self.path)
        return self._frame

    def trading_dates(self) -> pd.DatetimeIndex:
        """Every timestamp any ticker of ``path`` has, ascending: the panel's calendar, on which walk-forward
        folds are laid (:func:`lightning_tf.kline.universe.folds`). Reads the bars, builds no panel."""
        if self._frame is None:
            self._frame = self._read(self.path)
        return pd.DatetimeIndex(np.unique(self._frame["timestamp"].to_numpy()))

    def path_tickers(self) -> list[str]:
        """The tickers of ``path``, in the order read (as :meth:`trading_dates`, reads the bars, builds no panel)."""
        if self._frame is None:
            self._frame = self._read(self.path)
        return list(pd.unique(self._frame["ticker"]))

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
        return next_timestamps(self._predict_times[ticker], n, calendar=self.covariates.calendar)

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
