"""One walk-forward fold's test forecasts as a predictions frame (:mod:`.portfolio`'s contract): the model,
its linear path alone, LightGBM on the same windows and the momentum factor, on the fold's test windows.

Every frame has one row per test window and horizon step: ``date`` (the window's last context bar, the
origin), ``ticker``, ``step`` (1..F), ``prediction``, ``realised`` (the target of that step in original
units: the step's log return) and, for a quantile model, ``q<level>`` columns. The baselines are columns
beside the model's (``linear``, ``lightgbm``, ``momentum``), NaN where a baseline has no forecast.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..scale import DataScale
from ..windows import WindowDataset
from .universe_baselines import LightGBMBaseline, flatten_windows, momentum_predictions, realised_log_returns

__all__ = ["lightgbm_column", "momentum_column", "realised_column", "window_forecasts"]

#: forecast(batch) -> point (B, F, K), quantiles (B, F, K, Q) or None, linear path alone (B, F, K) or None, on the
#: model scale, from a batch of windows (``x`` and, where the data has them, ``x_future`` and ``static``)
Forecast = Callable[[dict[str, Tensor]], tuple[Tensor, Tensor | None, Tensor | None]]


@torch.no_grad()
def window_forecasts(
    forecast: Forecast,
    dataset: WindowDataset,
    scale: DataScale,
    quantiles: list[float] | None,
    batch_size: int = 1024,
    device: torch.device | str = "cpu",
) -> pd.DataFrame:
    """The model's (and its linear path's) forecasts of every window of ``dataset``, in original units.

    Args:
        forecast: the model's forecast on the model scale (see :data:`Forecast`).
        dataset: the windows (in their order).
        scale: the data's scaling (ticker names, target statistics).
        quantiles: the model's quantile levels, or None.
        batch_size: windows per forward pass.
        device: where the model is.
    """
    rows: dict[str, list[np.ndarray]] = {"date": [], "ticker": [], "prediction": [], "realised": [], "linear": []}
    levels = list(quantiles or [])
    qs: list[list[np.ndarray]] = [[] for _ in levels]
    for lo in range(0, len(dataset), batch_size):
        batch = dataset.__getitems__(list(range(lo, min(lo + batch_size, len(dataset)))))
        ticker = batch["ticker"]
        inputs = {k: batch[k].to(device) for k in ("x", "x_future", "static") if k in batch}
        point, quant, linear = forecast(inputs)
        inverse = lambda y: scale.inverse_targets(y.double().cpu(), ticker)[..., 0].numpy()  # noqa: E731 (B, F)
        f = point.shape[1]
        rows["prediction"].append(inverse(point))
        rows["realised"].append(inverse(batch["y"]))
        rows["linear"].append(inverse(linear) if linear is not None else np.full((len(ticker), f), np.nan))
        for q in range(len(levels)):
            assert quant is not None
            qs[q].append(inverse(quant[..., q]))
        rows["date"].append(np.repeat(batch["time"].numpy(), f))
        rows["ticker"].append(np.repeat(ticker.numpy(), f))
    names = np.asarray(scale.ticker_names, dtype=object)
    horizon = dataset.target_offsets.numel()
    n = len(dataset)
    frame = pd.DataFrame(
        {
            "date": pd.to_datetime(np.concatenate(rows["date"]) if n else np.array([], dtype=np.int64)),
            "ticker": names[np.concatenate(rows["ticker"])] if n else np.array([], dtype=object),
            "step": np.tile(np.arange(1, horizon + 1), n),
        }
    )
    for key in ("prediction", "realised", "linear"):
        frame[key] = np.concatenate([a.reshape(-1) for a in rows[key]]) if n else np.array([])
    for q, level in enumerate(levels):
        frame[f"q{level:g}"] = np.concatenate([a.reshape(-1) for a in qs[q]]) if n else np.array([])
    return frame


def _windows(dataset: WindowDataset, last_bars: int, rows: np.ndarray) -> np.ndarray:
    """The last ``last_bars`` bars of the windows ``rows`` of ``dataset``, flattened ``(n, last_bars * C)``, and
    the windows' known-future and static covariates where the data has them."""
    batch = dataset.__getitems__(rows.tolist())
    x = batch["x"][:, -last_bars:]  # (n, l, C)
    extra = [batch[k].reshape(len(rows), -1).double() for k in ("x_future", "static") if k in batch]
    covariates = torch.cat(extra, dim=1).numpy() if extra else None  # (n, F * Cf + S): known future, static
    return flatten_windows(x.numpy(), covariates)


def lightgbm_column(
    frame: pd.DataFrame,
    train: WindowDataset,
    val: WindowDataset,
    test: WindowDataset,
    scale: DataScale,
    *,
    last_bars: int = 20,
    max_rows: int = 50_000,
    seed: int = 0,
    num_threads: int = 1,
) -> pd.Series:
    """LightGBM (:class:`~.universe_baselines.LightGBMBaseline`, early stopping on the validation windows) on the
    model's own inputs: the last ``last_bars`` bars of each window's scaled features, flattened, with its
    known-future and static covariates (:func:`~.universe_baselines.flatten_windows`), to the next bar's
    scaled target; at most ``max_rows`` training windows (a seeded sample). Returned as the column of ``frame``
    (the test windows' frame, window-major, ``F`` rows a window): the forecast at step 1, NaN at later steps
    (the portfolios trade step 1)."""
    rng = np.random.default_rng(seed)

    def sample(dataset: WindowDataset, cap: int) -> np.ndarray:
        n = len(dataset)
        return np.sort(rng.choice(n, cap, replace=False)) if n > cap else np.arange(n)

    tr, va = sample(train, max_rows), sample(val, max_rows // 4)
    last = min(last_bars, train.context_offsets.numel())
    y = lambda ds, rows: ds.__getitems__(rows.tolist())["y"][:, 0, 0].numpy()  # noqa: E731 (n,) next bar, scaled
    model = LightGBMBaseline(seed=seed, num_threads=num_threads)
    model.fit(_windows(train, last, tr), y(train, tr), _windows(val, last, va), y(val, va))
    scaled = model.predict(_windows(test, last, np.arange(len(test))))  # (W,)
    # back to original units with each window's ticker's statistics
    ticker = test.ticker[test.ends]  # (W,)
    horizon = test.target_offsets.numel()
    out = np.full((len(test), horizon), np.nan)
    scaled_t = torch.as_tensor(scaled, dtype=torch.float64)[:, None, None]  # (W, 1, 1)
    out[:, 0] = scale.inverse_targets(scaled_t, ticker)[:, 0, 0].numpy()
    return pd.Series(out.reshape(-1), index=frame.index, name="lightgbm")


def momentum_column(frame: pd.DataFrame, bars: pd.DataFrame, window: int = 20) -> pd.Series:
    """The momentum factor (past ``window``-bar log return, :func:`~.universe_baselines.momentum_predictions`) at
    each row's origin, as a column of ``frame`` (NaN where a ticker lacks the history)."""
    table = bars[["timestamp", "ticker", "close"]].rename(columns={"timestamp": "date"})
    scores = momentum_predictions(table, frame["date"].unique(), window=window, horizon=1)
    scores = scores[["date", "ticker", "prediction"]].rename(columns={"prediction": "momentum"})
    merged = frame[["date", "ticker"]].merge(scores, on=["date", "ticker"], how="left")
    return pd.Series(merged["momentum"].to_numpy(), index=frame.index, name="momentum")


def realised_column(frame: pd.DataFrame, bars: pd.DataFrame) -> pd.Series:
    """The log return of bar ``t + step`` of each row's ticker, ``t`` its origin, from the bars themselves (for
    a model whose target is not that return: a cross-sectional label, a close)."""
    table = bars[["timestamp", "ticker", "close"]].rename(columns={"timestamp": "date"})
    horizon = int(frame["step"].max()) if len(frame) else 1
    realised = realised_log_returns(table, frame["date"].unique(), horizon=horizon)
    merged = frame[["date", "ticker", "step"]].merge(realised, on=["date", "ticker", "step"], how="left")
    return pd.Series(merged["realised"].to_numpy(), index=frame.index, name="realised")
