"""Random-walk OHLCV bars for data tests: consistent candles, distinct values, any length."""

from __future__ import annotations

import numpy as np
import pandas as pd


def make_bars(n: int, seed: int = 0, start: str = "2000-01-03", freq: str = "B") -> pd.DataFrame:
    """``n`` bars with English column names (Date, Open, High, Low, Close, Volume), oldest first."""
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
