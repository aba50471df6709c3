"""One walk-forward fold's test forecasts as a predictions frame (:mod:`.predictions`): the model's on the fold's
test windows (:func:`window_forecasts`, which :meth:`~lightning_tf.kline.KLineForecaster.window_forecasts` calls with
the model's own forward), and beside them the baselines on the same rows (:func:`fold_predictions`): LightGBM on the
model's own inputs, the momentum factor and, where asked, a published Kronos on the raw bars (:mod:`.kronos`); for a
model whose target is not the step's log return, the realised returns come from the bars.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..scale import DataScale
from ..windows import WindowDataset
from .baselines import LightGBMBaseline, flatten_windows, momentum_predictions, realised_log_returns
from .kronos import KronosColumn, kronos_column
from .predictions import arrange, quantile_column

if TYPE_CHECKING:
    from ..published import Kronos

__all__ = [
    "WindowForecast",
    "fold_predictions",
    "lightgbm_column",
    "momentum_column",
    "realised_column",
    "window_forecasts",
]


class WindowForecast(NamedTuple):
    """A batch of windows' forecasts, on the model scale.

    Attributes:
        point: the point forecast ``(B, F, K)``, the model as tested.
        quantiles: a quantile model's forecast ``(B, F, K, Q)``, else None.
        linear: the linear path alone ``(B, F, K)``, or None for a model without one.
        residual: the model with its whole Transformer residual ``(B, F, K)`` whatever validation chose, or None.
    """

    point: Tensor
    quantiles: Tensor | None = None
    linear: Tensor | None = None
    residual: Tensor | None = None


#: forecast(batch) -> the batch's :class:`WindowForecast`, from a batch of windows (``x`` and, where the data has
#: them, ``x_future`` and ``static``) on the model's device
Forecast = Callable[[dict[str, Tensor]], WindowForecast]


@torch.no_grad()
def window_forecasts(
    forecast: Forecast,
    dataset: WindowDataset,
    scale: DataScale,
    quantiles: list[float] | None,
    batch_size: int = 1024,
    device: torch.device | str = "cpu",
) -> pd.DataFrame:
    """The forecasts of every window of ``dataset`` in original units, one row per window and step: ``date``,
    ``ticker``, ``step``, ``prediction``, with the whole residual ``residual`` and ``residual_alone``
    (``residual - linear``) where the forecast gives it, ``realised`` (the windows' targets), ``linear`` (NaN
    without a linear path) and the ``q<level>`` columns of ``quantiles``.

    Args:
        forecast: the model's forecast of a batch (see :data:`Forecast`).
        dataset: the windows (in their order).
        scale: the data's scaling (ticker names, target statistics).
        quantiles: the model's quantile levels, or None.
        batch_size: windows per forward pass.
        device: where the model is.
    """
    levels = list(quantiles or [])
    names = ["prediction", "realised", "linear", *map(quantile_column, levels)]
    rows: dict[str, list[np.ndarray]] = {name: [] for name in ["date", "ticker", *names]}
    for lo in range(0, len(dataset), batch_size):
        batch = dataset.__getitems__(list(range(lo, min(lo + batch_size, len(dataset)))))
        ticker = batch["ticker"]
        out = forecast({k: batch[k].to(device) for k in ("x", "x_future", "static") if k in batch})
        inverse = lambda y: scale.inverse_targets(y.double().cpu(), ticker)[..., 0].numpy()  # noqa: E731 (B, F)
        f = out.point.shape[1]
        rows["prediction"].append(inverse(out.point))
        rows["realised"].append(inverse(batch["y"]))
        rows["linear"].append(inverse(out.linear) if out.linear is not None else np.full((len(ticker), f), np.nan))
        for q, level in enumerate(levels):
            assert out.quantiles is not None
            rows[quantile_column(level)].append(inverse(out.quantiles[..., q]))
        if out.residual is not None:
            rows.setdefault("residual", []).append(inverse(out.residual))
        rows["date"].append(np.repeat(batch["time"].numpy(), f))
        rows["ticker"].append(np.repeat(ticker.numpy(), f))
    tickers = np.asarray(scale.ticker_names, dtype=object)
    horizon = dataset.target_offsets.numel()
    n = len(dataset)
    frame = pd.DataFrame(
        {
            "date": pd.to_datetime(np.concatenate(rows["date"]) if n else np.array([], dtype=np.int64)),
            "ticker": tickers[np.concatenate(rows["ticker"])] if n else np.array([], dtype=object),
            "step": np.tile(np.arange(1, horizon + 1), n),
        }
    )
    for key in [k for k in rows if k not in ("date", "ticker")]:
        frame[key] = np.concatenate([a.reshape(-1) for a in rows[key]]) if n else np.array([])
    if "residual" in frame:
        frame["residual_alone"] = frame["residual"] - frame["linear"]
    return arrange(frame)


def fold_predictions(
    frame: pd.DataFrame,
    bars: pd.DataFrame,
    datasets: Mapping[str, WindowDataset],
    scale: DataScale,
    *,
    lightgbm: bool = True,
    kronos: tuple[Kronos, KronosColumn] | None = None,
    calendar: str | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """A fold's predictions frame: the model's test forecasts ``frame`` (:func:`window_forecasts`) with the baselines
    on the same rows, and notes on what was left out.

    A model whose target is not the step's log return (a cross-sectional label, a close) keeps it as ``target``,
    and ``realised`` becomes the bars' own log return, so every forecaster is judged on the same returns.

    Args:
        frame: the model's forecasts of the test windows.
        bars: the data's bars (``timestamp``, ``ticker``, ``close``).
        datasets: the fold's windows by split: ``train``, ``val`` and ``test`` (the windows of ``frame``).
        scale: the data's scaling.
        lightgbm: also fit LightGBM on the fold's windows (left out, with a note, where ``lightgbm`` is not
            installed).
        kronos: a published Kronos and its settings: its zero-shot forecasts from the raw bars
            (:func:`~.kronos.kronos_column`) as the column ``kronos``.
        calendar: the data's exchange calendar (the future bars' stamps Kronos reads).
    """
    frame, notes = frame.copy(), []
    if scale.target_names[0] != "log_return":
        frame["target"] = frame["realised"]
        frame["realised"] = realised_column(frame, bars)
    if lightgbm:
        try:
            frame["lightgbm"] = lightgbm_column(frame, datasets["train"], datasets["val"], datasets["test"], scale)
        except ImportError as err:
            notes.append(f"LightGBM left out: {err}")
    frame["momentum"] = momentum_column(frame, bars)
    if kronos is not None:
        frame["kronos"], more = kronos_column(frame, bars, *kronos, calendar=calendar)
        notes += more
    return arrange(frame), notes


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
    """LightGBM (:class:`~.baselines.LightGBMBaseline`, early stopping on the validation windows) on the
    model's own inputs: the last ``last_bars`` bars of each window's scaled features, flattened, with its
    known-future and static covariates (:func:`~.baselines.flatten_windows`), to the next bar's
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
    """The momentum factor (past ``window``-bar log return, :func:`~.baselines.momentum_predictions`) at
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
