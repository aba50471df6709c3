"""Generated equity universes with planted structure, for the covariate and cross-sectional tests.

Every ticker's daily log return is ``r_t = past * s_{t-1} + future * e_t + eps_t`` on business days:

* ``signal``: a past-observed covariate: its value at row ``t`` carries the next day's return (known at
  the close of ``t``, so a model may use it);
* ``event``: a column known in advance (a scheduled event): it moves the return of its own day only, so
  it helps a forecast only when it is read for the forecast bar (declared known-future);
* ``noise``: an unrelated random column;
* ``own_return``, ``turnover``: covariates computed from the bars themselves (legitimate, known at ``t``).

With ``past = future = 0`` the universe is a pure random walk: nothing predicts the next return.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["make_universe", "reversal_universe", "spearman", "write_universe"]


def make_universe(
    n_tickers: int = 30,
    n_days: int = 600,
    *,
    past: float = 0.0,
    future: float = 0.0,
    seed: int = 0,
    start: str = "2015-01-02",
    sigma: float = 0.01,
) -> pd.DataFrame:
    """A long table (``date, ticker, open, high, low, close, volume, signal, event, noise, own_return,
    turnover``) of ``n_tickers`` tickers over ``n_days`` business days, returns as the module docstring says."""
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range(start, periods=n_days)
    parts = []
    for k in range(n_tickers):
        s = rng.normal(0, 1, n_days)
        e = rng.normal(0, 1, n_days)
        r = sigma * (past * np.concatenate([[0.0], s[:-1]]) + future * e + rng.normal(0, 1, n_days))
        close = 20 * (1 + k % 7) * np.exp(np.cumsum(r))
        open_ = close * np.exp(rng.normal(0, 0.002, n_days))
        high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.003, n_days)))
        low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.003, n_days)))
        volume = rng.integers(10_000, 50_000, n_days).astype(float)
        parts.append(
            pd.DataFrame(
                {
                    "date": dates.strftime("%Y-%m-%d"),
                    "ticker": f"T{k:02d}",
                    "open": open_,
                    "high": high,
                    "low": low,
                    "close": close,
                    "volume": volume,
                    "signal": s,
                    "event": e,
                    "noise": rng.normal(0, 1, n_days),
                    "own_return": np.concatenate([[0.0], np.diff(np.log(close))]),
                    "turnover": volume * close,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def reversal_universe(
    n_tickers: int, n_days: int, *, reversal: float, seed: int = 0, start: str = "2015-01-02", sigma: float = 0.01
) -> pd.DataFrame:
    """A long table (``date, ticker, open, high, low, close, volume``) whose every ticker follows one pattern
    learnable from its own bars: after a large move (beyond one ``sigma``) the next day gives back ``reversal`` of
    it, ``r_t = -reversal * r_{t-1} * [|r_{t-1}| > sigma] + eps_t``; ``reversal = 0`` is a pure random walk."""
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range(start, periods=n_days)
    parts = []
    for k in range(n_tickers):
        eps = rng.normal(0, sigma, n_days) * rng.choice([0.5, 1.0, 2.0], n_days)  # calm and wild days
        r = np.zeros(n_days)
        for t in range(n_days):
            back = -reversal * r[t - 1] if t and abs(r[t - 1]) > sigma else 0.0
            r[t] = back + eps[t]
        close = 20 * (1 + k % 7) * np.exp(np.cumsum(r))
        open_ = close * np.exp(rng.normal(0, 0.002, n_days))
        parts.append(
            pd.DataFrame(
                {
                    "date": dates.strftime("%Y-%m-%d"),
                    "ticker": f"R{seed:02d}{k:03d}",
                    "open": open_,
                    "high": np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.003, n_days))),
                    "low": np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.003, n_days))),
                    "close": close,
                    "volume": rng.integers(10_000, 50_000, n_days).astype(float),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def write_universe(path: Path, frame: pd.DataFrame | None = None, **kwargs: object) -> pd.DataFrame:
    """Write ``frame`` (or :func:`make_universe` of ``kwargs``) as a CSV at ``path``; returns the frame."""
    frame = make_universe(**kwargs) if frame is None else frame  # type: ignore[arg-type]
    frame.to_csv(path, index=False)
    return frame


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two 1-D arrays (ranks by argsort; ties are absent in continuous data)."""
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    return float(np.corrcoef(ra, rb)[0, 1])
