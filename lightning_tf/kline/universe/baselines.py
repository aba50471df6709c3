"""Quant baselines for a universe of tickers, as predictions frames (:mod:`.portfolio`).

* :func:`momentum_predictions`: the cross-sectional momentum factor: the prediction at origin ``t`` is
  the ticker's past log return ``log(close_t / close_{t-window})`` (Jegadeesh and Titman 1993; 20 bars
  is qlib's ``ROC20`` feature). The realised returns come from the same bars (:func:`realised_log_returns`).
* :class:`LightGBMBaseline`: gradient-boosted trees on flattened look-back windows
  (:func:`flatten_windows`), qlib's strongest classical model on Alpha158 (its ``LGBModel``), with
  early stopping on validation and deterministic, seeded training. Needs ``lightgbm``
  (``pip install 'lightning-tf[quant]'``).

Torch-free: NumPy, pandas and (for the trees) LightGBM.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["LightGBMBaseline", "flatten_windows", "momentum_predictions", "realised_log_returns"]


def _check_bars(bars: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(bars, pd.DataFrame):
        raise ValueError(f"bars: expected a pandas DataFrame, got {type(bars).__name__}")
    for column in ("date", "ticker", "close"):
        if column not in bars.columns:
            raise ValueError(f"bars has no column {column!r} (needs date, ticker, close)")
    close = pd.to_numeric(bars["close"], errors="coerce")
    bad = ~(close > 0)
    if bad.any():
        raise ValueError(f"bars: column 'close' has {int(bad.sum())} missing or non-positive value(s)")
    if bars.duplicated(["date", "ticker"]).any():
        first = bars[bars.duplicated(["date", "ticker"])].iloc[0]
        raise ValueError(f"bars: (date, ticker) = ({first['date']}, {first['ticker']}) appears more than once")
    return bars


def _log_close(bars: pd.DataFrame) -> pd.DataFrame:
    """(dates, tickers) log closes; each ticker's own bars in time order (NaN where it has none)."""
    table = bars.assign(date=pd.to_datetime(bars["date"])).pivot(index="date", columns="ticker", values="close")
    return np.log(table.sort_index().astype(np.float64))


def _per_ticker_shift(log_close: pd.DataFrame, periods: int) -> pd.DataFrame:
    """``log_close`` shifted by ``periods`` of each ticker's OWN bars (not calendar rows)."""
    return log_close.apply(lambda s: s.dropna().shift(periods).reindex(s.index))


def realised_log_returns(bars: pd.DataFrame, dates: Iterable, horizon: int = 1) -> pd.DataFrame:
    """The realised log returns of steps ``1..horizon`` after each origin date, per ticker.

    Returns a long frame ``date, ticker, step, realised`` where step ``h`` is
    ``log(close_{t+h} / close_{t+h-1})`` in the ticker's own bars; rows whose bar ``t+h`` does not exist
    (the end of the data) or whose ticker has no bar at ``t`` are left out.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be at least 1, got {horizon}")
    log_close = _log_close(_check_bars(bars))
    origins = pd.DatetimeIndex(pd.unique(pd.DatetimeIndex(list(dates))))
    frames = []
    for step in range(1, horizon + 1):
        ahead = _per_ticker_shift(log_close, -step) - _per_ticker_shift(log_close, -(step - 1))
        table = ahead.reindex(origins)
        long = table.stack().dropna().rename("realised").reset_index()
        long.columns = ["date", "ticker", "realised"]
        long.insert(2, "step", step)
        frames.append(long)
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["date", "ticker", "step"], kind="stable").reset_index(drop=True)


def momentum_predictions(bars: pd.DataFrame, dates: Iterable, window: int = 20, horizon: int = 1) -> pd.DataFrame:
    """A predictions frame of past-``window``-bar log returns at each origin date.

    Args:
        bars: long table with ``date``, ``ticker``, ``close`` (one row per ticker and bar).
        dates: the origin dates.
        window: look-back of the momentum, in the ticker's bars.
        horizon: steps of realised return attached (the prediction is the same score for every step).

    Returns ``date, ticker, step, prediction, realised``; a ticker without ``window`` bars of history or
    without the realised bar at an origin is left out of that origin.
    """
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    log_close = _log_close(_check_bars(bars))
    origins = pd.DatetimeIndex(pd.unique(pd.DatetimeIndex(list(dates))))
    momentum = (log_close - _per_ticker_shift(log_close, window)).reindex(origins)
    scores = momentum.stack().dropna().rename("prediction").reset_index()
    scores.columns = ["date", "ticker", "prediction"]
    realised = realised_log_returns(bars, origins, horizon=horizon)
    out = realised.merge(scores, on=["date", "ticker"], how="inner")
    out = out[["date", "ticker", "step", "prediction", "realised"]]
    return out.sort_values(["date", "ticker", "step"], kind="stable").reset_index(drop=True)


def flatten_windows(x: Any, covariates: Any | None = None) -> np.ndarray:
    """Look-back windows ``x`` (N, L, C) as rows (N, L*C) (bar-major: bar 0's C values first), with
    ``covariates`` (N, K) appended when given: (N, L*C + K). Accepts NumPy arrays or CPU tensors."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"flatten_windows: x must be (N, L, C), got shape {x.shape}")
    flat = x.reshape(x.shape[0], -1)  # (N, L*C)
    if covariates is None:
        return flat
    covariates = np.asarray(covariates, dtype=np.float64)
    if covariates.ndim == 1:
        covariates = covariates[:, None]
    if covariates.ndim != 2 or covariates.shape[0] != x.shape[0]:
        raise ValueError(f"flatten_windows: covariates must be (N={x.shape[0]}, K), got shape {covariates.shape}")
    return np.concatenate([flat, covariates], axis=1)  # (N, L*C + K)


def _lightgbm():
    try:
        return importlib.import_module("lightgbm")
    except ImportError as error:
        raise ImportError(f"LightGBMBaseline needs lightgbm: pip install 'lightning-tf[quant]' ({error})") from None


class LightGBMBaseline:
    """Gradient-boosted trees (LightGBM) from flattened windows to a target, qlib's ``LGBModel`` recipe
    scaled to a CPU: MSE objective, early stopping on the validation set, deterministic and seeded.

    Args:
        learning_rate: shrinkage per tree.
        num_leaves: leaves per tree (qlib's Alpha158 setting is 210; 64 keeps a CPU fit short).
        max_depth: depth limit (-1: none).
        colsample_bytree: share of features sampled per tree.
        subsample: share of rows bagged per iteration (every iteration).
        lambda_l1: L1 penalty on leaf values.
        lambda_l2: L2 penalty on leaf values.
        min_data_in_leaf: fewest rows in a leaf.
        n_estimators: most boosting rounds.
        early_stopping_rounds: stop after this many rounds without a better validation loss.
        seed: the seed of every random choice (bagging, feature sampling).
        num_threads: threads LightGBM uses.
        deterministic: LightGBM's ``deterministic`` (same model for the same data, seed and threads).
    """

    def __init__(
        self,
        learning_rate: float = 0.05,
        num_leaves: int = 64,
        max_depth: int = -1,
        colsample_bytree: float = 0.8,
        subsample: float = 0.8,
        lambda_l1: float = 1.0,
        lambda_l2: float = 1.0,
        min_data_in_leaf: int = 20,
        n_estimators: int = 1000,
        early_stopping_rounds: int = 50,
        seed: int = 0,
        num_threads: int = 1,
        deterministic: bool = True,
    ) -> None:
        self.params: dict[str, Any] = {
            "objective": "regression",
            "learning_rate": learning_rate,
            "num_leaves": num_leaves,
            "max_depth": max_depth,
            "feature_fraction": colsample_bytree,
            "bagging_fraction": subsample,
            "bagging_freq": 1,
            "lambda_l1": lambda_l1,
            "lambda_l2": lambda_l2,
            "min_data_in_leaf": min_data_in_leaf,
            "seed": seed,
            "num_threads": num_threads,
            "deterministic": deterministic,
            "force_row_wise": True,
            "verbosity": -1,
        }
        self.n_estimators = n_estimators
        self.early_stopping_rounds = early_stopping_rounds
        self.booster: Any = None

    @property
    def best_iteration(self) -> int:
        """Rounds kept: the best validation round, or every round without validation."""
        if self.booster is None:
            raise RuntimeError("LightGBMBaseline: call fit() first")
        return int(self.booster.best_iteration or self.booster.current_iteration())

    def fit(
        self,
        x_train: Any,
        y_train: Any,
        x_val: Any | None = None,
        y_val: Any | None = None,
    ) -> LightGBMBaseline:
        """Fit on ``x_train`` (N, P), ``y_train`` (N,); with ``x_val``/``y_val`` stop early on their MSE."""
        lgb = _lightgbm()
        x_train, y_train = _check_xy(x_train, y_train, "train")
        train = lgb.Dataset(x_train, label=y_train, free_raw_data=True)
        valid_sets, callbacks = [], []
        if (x_val is None) != (y_val is None):
            raise ValueError("LightGBMBaseline.fit: give both x_val and y_val, or neither")
        if x_val is not None:
            x_val, y_val = _check_xy(x_val, y_val, "val")
            if x_val.shape[1] != x_train.shape[1]:
                raise ValueError(
                    f"LightGBMBaseline.fit: x_val has {x_val.shape[1]} features, x_train {x_train.shape[1]}"
                )
            valid_sets = [lgb.Dataset(x_val, label=y_val, reference=train)]
            callbacks = [lgb.early_stopping(self.early_stopping_rounds, verbose=False)]
        self.booster = lgb.train(
            self.params, train, num_boost_round=self.n_estimators, valid_sets=valid_sets, callbacks=callbacks
        )
        return self

    def predict(self, x: Any) -> np.ndarray:
        """Predictions (N,) for ``x`` (N, P), with the best validation round's trees."""
        if self.booster is None:
            raise RuntimeError("LightGBMBaseline: call fit() first")
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.booster.num_feature():
            raise ValueError(f"LightGBMBaseline.predict: x must be (N, {self.booster.num_feature()}), got {x.shape}")
        return np.asarray(self.booster.predict(x, num_iteration=self.best_iteration), dtype=np.float64)


def _check_xy(x: Any, y: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if x.ndim != 2:
        raise ValueError(f"LightGBMBaseline.fit: x_{name} must be (N, P), got shape {x.shape}")
    if len(y) != len(x):
        raise ValueError(f"LightGBMBaseline.fit: x_{name} has {len(x)} rows, y_{name} {len(y)}")
    if not np.isfinite(y).all():
        raise ValueError(f"LightGBMBaseline.fit: y_{name} has {int((~np.isfinite(y)).sum())} NaN value(s)")
    return x, y
