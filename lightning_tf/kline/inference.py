"""The last window of each series of new bars, scaled for a trained forecaster, without its training data.

Both ``predict`` paths use it: :class:`~.data.KLineDataModule` (``setup("predict")`` reads only the
predict file; the training statistics come from the checkpoint) and
:meth:`KLineForecaster.forecast <lightning_tf.kline.KLineForecaster.forecast>` (the statistics of the
model's :class:`~.scale.DataScale`). A series whose ticker the model was trained on is scaled with that
ticker's training statistics. Any other series is never taken for a trained ticker: it is scaled by its
own history (the mean and standard deviation of its own features and targets over all its bars, as a
StandardScaler fit on them), keeps its own name, and its forecast is mapped back to its own units with
those statistics; ``scaled_by`` says which happened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from lightning_tf.core import evaluating

from .features import compute_target, feature_matrix
from .scale import DataScale, rebuild_prices
from .settings import Reading

__all__ = [
    "SeriesWindow",
    "Statistics",
    "forecast_columns",
    "last_windows",
    "predict_outputs",
    "windows_of_series",
    "series_windows",
]

#: a ticker's training statistics: feature mean and std (C,), target mean and std (K,)
Statistics = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class SeriesWindow:
    """The last window of one series, scaled.

    Attributes:
        name: the series' ticker (its ticker column, or its file name).
        x: scaled features of the last ``context_len`` bars ``(L, C)``.
        raw_target: the target over those bars in original units ``(L, K)``.
        anchor: the last close.
        target_mean: ``(K,)`` the target statistics the forecast is mapped back with.
        target_std: ``(K,)``.
        scaled_by: ``training statistics of '<ticker>'`` or ``its own history (<n> bars)``.
        bars: the series' canonical bars (a frame, or its columns as arrays).
        x_future: scaled known-future covariates of the ``horizon`` forecast bars ``(F, Cf)``, or None.
        static: static ids ``(S,)`` (0: a ticker or category not seen in training), or None.
        timestamps: the forecast bars' timestamps (the series' calendar, or the model's exchange calendar).
    """

    name: str
    x: np.ndarray
    raw_target: np.ndarray
    anchor: float
    target_mean: np.ndarray
    target_std: np.ndarray
    scaled_by: str
    bars: pd.DataFrame | Mapping[str, np.ndarray]
    x_future: np.ndarray | None = None
    static: np.ndarray | None = None
    timestamps: pd.DatetimeIndex | None = None


def _own(values: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation per column of the finite rows, as StandardScaler computes them (a
    constant column gets scale 1); ``axis`` 1 for the rows ``(B, m, C)`` of B series at once, each series' own bit
    for bit."""
    mean = values.mean(axis=axis)
    std = values.std(axis=axis)
    return mean, np.where(std > 0, std, 1.0)


def series_windows(
    frame: pd.DataFrame,
    *,
    scale: DataScale,
    context_len: int,
    source: str,
    horizon: int | None = None,
    future: pd.DataFrame | None = None,
) -> list[SeriesWindow]:
    """The scaled last window of every ticker of ``frame`` (canonical bars, see :func:`~.io.read_bars`).

    Args:
        frame: the bars.
        scale: the model's data scale: its features (the past covariates last), target, rolling windows,
            covariate specification and every trained ticker's statistics.
        context_len: bars per window L.
        source: the file (or name) the bars came from, for the errors.
        horizon: bars forecast F (for the known-future covariates and the forecast bars' timestamps).
        future: the user's known-future covariates of the forecast bars: ``ticker`` (optional), ``timestamp``
            and one column per name; needed when the model reads some.
    """
    windows = windows_of_series(
        [(str(name), bars.reset_index(drop=True), source) for name, bars in frame.groupby("ticker", sort=False)],
        scale=scale,
        context_len=context_len,
        horizon=horizon,
        future=future,
    )
    for window in windows:  # the first ticker that cannot be read, as one would read them one by one
        if isinstance(window, ValueError):
            raise window
    return windows  # type: ignore[return-value]


def _future_windows(
    cov: Mapping[str, Any],
    names: list[str],
    bars: list[pd.DataFrame | Mapping[str, np.ndarray]],
    stamps: list[pd.DatetimeIndex],
    future: pd.DataFrame | None,
    trained_tickers: list[str] | None,
    source: str,
) -> list[np.ndarray | None]:
    """The scaled known-future covariates ``(F, Cf)`` of each series' forecast bars ``stamps`` (None without
    any); the calendar's features of all the series' forecast bars in one call."""
    from .panel import PanelSettings, future_matrix
    from .settings import Covariates

    feature_names, user = list(cov.get("future_names", [])), list(cov.get("future", []))
    if not feature_names:
        return [None] * len(names)
    settings = PanelSettings(source, 1, 1, covariates=Covariates(future=user, calendar=cov.get("calendar")))
    if user:  # the user's columns, looked up series by series
        raws = [_user_future(user, name, s, future, settings, source) for name, s in zip(names, stamps, strict=True)]
    else:
        every = np.concatenate([s.to_numpy() for s in stamps]) if stamps else np.zeros(0, "datetime64[ns]")
        raws = np.split(future_matrix({"timestamp": every}, settings), np.cumsum([len(s) for s in stamps])[:-1])
    index = {t: k for k, t in enumerate(trained_tickers or [])}
    trained = [name in index and "future_mean" in cov for name in names]
    # a series not trained on is scaled by its own history's known-future values: all such series' in one call
    others = [i for i, t in enumerate(trained) if not t]
    history = [
        {"timestamp": np.asarray(bars[i]["timestamp"]), **{c: np.asarray(bars[i][c]) for c in user}} for i in others
    ]
    lengths = np.cumsum([len(h["timestamp"]) for h in history])[:-1]
    owns = dict(
        zip(
            others,
            np.split(future_matrix({c: np.concatenate([h[c] for h in history]) for c in history[0]}, settings), lengths)
            if history
            else [],
            strict=True,
        )
    )
    out: list[np.ndarray | None] = []
    for i, (name, raw) in enumerate(zip(names, raws, strict=True)):
        if not np.isfinite(raw).all():
            raise ValueError(f"{source}: known-future covariates {user} of ticker {name!r} are missing or not finite")
        if trained[i]:
            k = index[name]
            mean, std = np.asarray(cov["future_mean"][k]), np.asarray(cov["future_std"][k])
        else:  # its own history's calendar, or no scaling at all
            own = owns[i]
            mean, std = _own(own[np.isfinite(own).all(axis=1)] if np.isfinite(own).any() else raw)
        out.append((raw - mean) / std)  # (F, Cf)
    return out


def _user_future(
    user: list[str], name: str, stamps: pd.DatetimeIndex, future: pd.DataFrame | None, settings: Any, source: str
) -> np.ndarray:
    """The raw known-future values ``(F, Cf)`` of one series' forecast bars: the calendar's, then the user's."""
    from .panel import future_matrix

    if future is None:
        raise ValueError(
            f"{source}: the model reads known-future covariate(s) {user} of the forecast bars; pass them "
            "(forecast(..., future=frame with timestamp, ticker and those columns))"
        )
    rows = future if "ticker" not in future.columns else future[future["ticker"].astype(str) == name]
    rows = rows.assign(timestamp=pd.to_datetime(rows["timestamp"])).set_index("timestamp")
    lacking = [c for c in user if c not in rows.columns]
    if lacking:
        raise ValueError(f"{source}: the known-future covariates lack column(s) {lacking}")
    absent = [str(t) for t in stamps if t not in rows.index]
    if absent:
        raise ValueError(f"{source}: no known-future covariates {user} for ticker {name!r} at {absent}")
    values = {"timestamp": stamps.to_numpy(), **{c: rows.loc[stamps, c].to_numpy(np.float64) for c in user}}
    return future_matrix(values, settings)


@lru_cache(maxsize=8)
def _static_table(path: str, version: tuple[int, int], columns: tuple[str, ...]) -> pd.DataFrame:
    """The static table ``path`` (:func:`~.covariates.read_static`), read once per ``version`` of the file (its
    modification time and size): a server looks up every request's ticker in it."""
    from .covariates import read_static

    return read_static(path, None, list(columns))


def _static_windows(cov: Mapping[str, Any], names: list[str], trained_tickers: list[str] | None) -> np.ndarray:
    """The static ids ``(n, S)`` of the tickers ``names``: 0 for a ticker (or category) not seen in training."""
    from .covariates import static_ids
    from .windows import resolve_path

    vocab = {k: list(v) for k, v in cov.get("static_vocab", {}).items()}
    table = None
    if vocab and cov.get("static_file"):
        path = resolve_path(str(cov["static_file"]))
        if path.exists():
            stat = path.stat()
            table = _static_table(str(path), (stat.st_mtime_ns, stat.st_size), tuple(vocab))
    return static_ids(names, list(trained_tickers or []), table, vocab, bool(cov.get("ticker_embedding")))


def windows_of_series(
    series: list[tuple[str, pd.DataFrame | Mapping[str, np.ndarray], str]],
    *,
    scale: DataScale,
    context_len: int,
    horizon: int | None = None,
    future: pd.DataFrame | None = None,
) -> list[SeriesWindow | ValueError]:
    """The scaled last window of each ``(ticker, bars, source)`` of ``series`` (the arguments are
    :func:`series_windows`'s), read together: the features of series of the same length in one call (as each
    series' alone), the forecast bars' timestamps and calendar features of all in one call each. A series that
    cannot be read (too few usable bars, a missing known-future value) gets its ValueError in its place."""
    from .windows import next_timestamps_of

    cov, trained, trained_tickers = scale.covariates, scale.statistics, list(scale.ticker_names)
    past = list(cov.get("past", []))
    builtin = list(scale.feature_names[: len(scale.feature_names) - len(past)])
    volatility_window, volume_window, target = scale.volatility_window, scale.volume_window, scale.target
    columns = ["open", "high", "low", "close", "volume", *past]
    if {"day_of_week", "time_of_day"} & set(builtin):
        columns.append("timestamp")
    out: list[SeriesWindow | ValueError] = [ValueError("unread")] * len(series)
    by_length: dict[int, list[int]] = {}
    for i, (_, bars, _) in enumerate(series):
        by_length.setdefault(len(bars["close"]), []).append(i)
    for members in by_length.values():
        stacked = {c: np.stack([np.asarray(series[i][1][c]) for i in members]) for c in columns}  # (B, n)
        feats = feature_matrix(stacked, builtin, volatility_window, volume_window)  # (B, n, C0)
        if past:
            covs = np.stack([stacked[c].astype(np.float64) for c in past], axis=-1)  # (B, n, P)
            feats = np.concatenate([feats, covs], axis=-1)  # (B, n, C)
        tgt = compute_target(stacked, target)[..., None]  # (B, n, 1)
        windows = _scaled_windows([series[i] for i in members], feats, tgt, context_len, trained)
        for i, window in zip(members, windows, strict=True):
            out[i] = window
    read = [i for i, w in enumerate(out) if isinstance(w, SeriesWindow)]
    if horizon is not None and read:
        stamps = next_timestamps_of([series[i][1]["timestamp"] for i in read], horizon, cov.get("calendar"))
        futures: list[np.ndarray | None] = [None] * len(read)
        if cov:
            sources = {series[i][2] for i in read}
            try:
                futures = _future_windows(
                    cov,
                    [series[i][0] for i in read],
                    [series[i][1] for i in read],
                    stamps,
                    future,
                    trained_tickers,
                    sources.pop() if len(sources) == 1 else "the bars",
                )
            except ValueError:  # one series' own error: each alone
                futures = []
                for i, s in zip(read, stamps, strict=True):
                    try:
                        futures += _future_windows(
                            cov, [series[i][0]], [series[i][1]], [s], future, trained_tickers, series[i][2]
                        )
                    except ValueError as err:
                        futures.append(err)  # type: ignore[arg-type]
        for i, s, f in zip(read, stamps, futures, strict=True):
            window = out[i]
            assert isinstance(window, SeriesWindow)
            if isinstance(f, ValueError):
                out[i] = f
            else:
                window.timestamps, window.x_future = s, f
    read = [i for i, w in enumerate(out) if isinstance(w, SeriesWindow)]
    if cov.get("static_sizes") and read:
        ids = _static_windows(cov, [series[i][0] for i in read], trained_tickers)  # (n, S)
        for i, row in zip(read, ids, strict=True):
            out[i].static = row  # type: ignore[union-attr]
    return out


def _scaled_windows(
    series: list[tuple[str, pd.DataFrame | Mapping[str, np.ndarray], str]],
    feats: np.ndarray,
    tgt: np.ndarray,
    context_len: int,
    trained: Mapping[str, Statistics],
) -> list[SeriesWindow | ValueError]:
    """The windows of B series ``(ticker, bars, source)`` of n bars from their features ``(B, n, C)`` and targets
    ``(B, n, 1)``: each series' last ``context_len`` bars, scaled by its ticker's training statistics, or by the
    series' own history (its rows after the features' warm-up; those of one warm-up computed together). A series
    with too few usable bars gets its ValueError in its place."""
    b_count, n = tgt.shape[:2]
    finite = np.isfinite(feats).all(axis=2) & np.isfinite(tgt[..., 0])  # (B, n)
    firsts = np.where(finite.any(axis=1), finite.argmax(axis=1), n)  # (B,) the first usable bar
    f_mean = np.zeros((b_count, feats.shape[2]))
    f_std, t_mean, t_std = np.ones_like(f_mean), np.zeros((b_count, tgt.shape[2])), np.ones((b_count, tgt.shape[2]))
    out: list[SeriesWindow | ValueError | None] = [None] * b_count
    own_by_first: dict[int, list[int]] = {}  # warm-up rows -> the series scaled by their own history
    for b, (name, _, source) in enumerate(series):
        usable = n - int(firsts[b])
        if usable < context_len:
            out[b] = ValueError(
                f"{source}: ticker {name!r} has {usable} usable bars ({n} bars, {firsts[b]} warm-up rows for "
                f"the features); a forecast needs context_len ({context_len})"
            )
        elif name in trained:
            f_mean[b], f_std[b], t_mean[b], t_std[b] = (np.asarray(v, dtype=np.float64) for v in trained[name])
        else:
            # never another ticker's scale: a series in other units (or another market) would be misread
            own_by_first.setdefault(int(firsts[b]), []).append(b)
    for first, rows in own_by_first.items():  # the series of one warm-up at once, each its own (tests/kline)
        (f_mean[rows], f_std[rows]), (t_mean[rows], t_std[rows]) = (
            _own(feats[rows, first:], 1),
            _own(tgt[rows, first:], 1),
        )
    x = (feats[:, -context_len:] - f_mean[:, None, :]) / f_std[:, None, :]  # (B, L, C)
    for b, (name, bars, _) in enumerate(series):
        if out[b] is not None:  # too few bars
            continue
        usable, own = n - int(firsts[b]), name not in trained
        out[b] = SeriesWindow(
            name=name,
            x=x[b],  # (L, C)
            raw_target=tgt[b, -context_len:],
            anchor=float(np.asarray(bars["close"], dtype=np.float64)[-1]),
            target_mean=t_mean[b],
            target_std=t_std[b],
            scaled_by=f"its own history ({usable} bars)" if own else f"training statistics of {name!r}",
            bars=bars,
        )
    return out  # type: ignore[return-value]  # every None was replaced


def last_windows(
    bars: pd.DataFrame | str | Path,
    *,
    scale: DataScale | None,
    context_len: int,
    reading: Reading | None = None,
    name: str | None = None,
    horizon: int | None = None,
    future: pd.DataFrame | None = None,
) -> list[SeriesWindow]:
    """The scaled last window of every series of ``bars`` (read as ``reading`` says, see
    :meth:`KLineForecaster.forecast <lightning_tf.kline.KLineForecaster.forecast>` for the arguments), for a
    model of this ``scale`` and ``context_len``."""
    from .settings import Covariates, read_with_settings
    from .windows import resolve_path

    if scale is None or not scale.has_prices:
        raise ValueError(
            "forecast() needs a model trained on K-line bars: its checkpoint holds no bar data scale "
            "(train it on a KLineDataModule, or load a checkpoint of such a run)"
        )
    source = name or (str(bars) if not isinstance(bars, pd.DataFrame) else "the bars")
    data = bars if isinstance(bars, pd.DataFrame) else resolve_path(str(bars))
    cov = scale.covariates
    covariates = Covariates(
        past=list(cov.get("past", [])),
        future=list(cov.get("future", [])),
        missing=cov.get("missing", "error"),
        ffill_limit=cov.get("ffill_limit"),
    )
    frame = read_with_settings(data, reading or Reading(), covariates, source=source, name=name)
    return series_windows(
        frame,
        scale=scale,
        context_len=context_len,
        source=source,
        horizon=horizon if horizon is not None else cov.get("horizon"),
        future=future,
    )


def forecast_columns(
    windows: list[SeriesWindow],
    *,
    net: torch.nn.Module,
    forward: Callable[..., Tensor],
    scale: DataScale,
    quantiles: list[float] | None,
    device: torch.device | str = "cpu",
) -> dict[str, np.ndarray]:
    """The forecast of :meth:`KLineForecaster.forecast <lightning_tf.kline.KLineForecaster.forecast>` for
    ``windows`` (:func:`last_windows`), one forward pass for all, as the columns of its table:
    ``horizon`` rows per window, in window order, in each series' own units (see there); ``ticker`` and
    ``scaled_by`` as object arrays of strings, ``timestamp`` as datetime64, ``step`` as int64, the rest float64.
    ``forward`` maps windows ``(n, L, C)`` to forecasts ``(n, F, K[, Q])`` on the model scale; it runs with ``net``
    in eval mode (the previous mode is restored), without gradients, on ``device``; ``scale`` and ``quantiles`` are
    the model's. :meth:`KLineForecaster.forecast_windows <lightning_tf.kline.KLineForecaster.forecast_windows>`
    makes them its table."""
    from .windows import next_timestamps

    x = torch.tensor(np.stack([w.x for w in windows]), dtype=torch.float32, device=device)  # (n, L, C)
    extra: dict[str, Tensor] = {}
    if windows[0].x_future is not None:
        extra["x_future"] = torch.tensor(np.stack([w.x_future for w in windows]), dtype=torch.float32, device=device)
    if windows[0].static is not None:
        extra["static"] = torch.tensor(np.stack([w.static for w in windows]), dtype=torch.long, device=device)
    with evaluating(net), torch.no_grad():
        out = forward(x, **extra).double().cpu()  # (n, F, K[, Q])
    mean = torch.tensor(np.stack([w.target_mean for w in windows]))[:, None, :]  # (n, 1, K)
    std = torch.tensor(np.stack([w.target_std for w in windows]))[:, None, :]  # (n, 1, K)
    point = out if quantiles is None else out[..., quantiles.index(0.5)]  # (n, F, K)
    values = point * std + mean  # (n, F, K)
    n, horizon = point.shape[:2]
    # the columns of all windows at once (one small frame per window costs more than the forward pass)
    calendar = scale.covariates.get("calendar")
    stamps = [
        w.timestamps
        if w.timestamps is not None and len(w.timestamps) == horizon
        else next_timestamps(pd.DatetimeIndex(w.bars["timestamp"]), horizon, calendar=calendar)
        for w in windows
    ]
    columns: dict[str, np.ndarray] = {
        "ticker": np.repeat(np.array([w.name for w in windows], dtype=object), horizon),
        "timestamp": np.concatenate([np.asarray(s) for s in stamps]),  # (n F,)
        "step": np.tile(np.arange(1, horizon + 1), n),
    }
    for k, target in enumerate(scale.target_names):
        columns[f"pred_{target}"] = values[:, :, k].reshape(-1).numpy()
        if quantiles is not None:
            for j, level in enumerate(quantiles):
                level_values = out[:, :, k, j] * std[:, :, k] + mean[:, :, k]  # (n, F)
                columns[f"pred_{target}_q{level:g}"] = level_values.reshape(-1).numpy()
    if scale.returns and scale.rebuilds_prices:
        anchors = torch.tensor([w.anchor for w in windows], dtype=torch.float64)  # (n,)
        columns["close"] = rebuild_prices(values[:, :, 0], anchors).reshape(-1).numpy()  # (n F,)
    columns["scaled_by"] = np.repeat(np.array([w.scaled_by for w in windows], dtype=object), horizon)
    return columns


def predict_outputs(
    batch: dict[str, Tensor], pred: Tensor, quantiles: Tensor | None, scale: DataScale | None
) -> dict[str, Tensor]:
    """What ``predict`` returns for a batch of windows: ``pred`` (B, F, K) on the model scale and, with the
    data's scaling, ``pred_orig`` (B, F, K) in original units and, for returns of price data, ``price``
    (B, F) (the rebuilt closes); with ``quantiles`` (B, F, K, Q) also ``quantiles_orig`` (B, F, K, Q) (and
    ``price_quantiles`` (B, F, Q) for level targets); the batch's ``ticker``, ``time`` and ``anchor`` (B,)
    as it carries them. A batch may carry its own ``scale_mean`` and ``scale_std`` (B, K) (a series the
    model was not trained on, scaled by its own history), which win over ``scale``."""
    result: dict[str, Tensor] = {"pred": pred}
    result.update({k: batch[k] for k in ("ticker", "time", "anchor") if k in batch})
    if "scale_mean" in batch:  # the series' own statistics
        mean, std = batch["scale_mean"][:, None, :], batch["scale_std"][:, None, :]  # (B, 1, K)

        def inverse(y: Tensor) -> Tensor:
            return y * std.to(y.dtype) + mean.to(y.dtype)

    elif scale is not None:
        known = scale

        def inverse(y: Tensor) -> Tensor:
            return known.inverse_targets(y, batch.get("ticker"))

    else:
        return result
    result["pred_orig"] = inverse(pred)  # (B, F, K)
    if quantiles is not None:
        levels = [inverse(quantiles[..., q]) for q in range(quantiles.shape[-1])]  # Q x (B, F, K)
        result["quantiles_orig"] = torch.stack(levels, dim=-1)  # (B, F, K, Q)
    if scale is not None and scale.rebuilds_prices and "anchor" in batch:
        if scale.returns:
            returns = result["pred_orig"][..., 0].double()  # (B, F)
            result["price"] = rebuild_prices(returns, batch["anchor"].double())  # (B, F)
        elif quantiles is not None:
            result["price_quantiles"] = result["quantiles_orig"][..., 0, :].double()  # (B, F, Q)
    return result
