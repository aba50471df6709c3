"""Figures: a candlestick chart with the forecast overlaid, attention over patches, and test
forecasts against what happened.

Each returns a ``matplotlib.figure.Figure`` made without pyplot: no display, no global figure
registry to close, and the user's matplotlib backend is left alone. The caller saves it
(``fig.savefig``) or hands it to a logger.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

__all__ = ["attention_figure", "candlestick_figure", "equity_figure", "forecast_figure"]

UP, DOWN, FORECAST = "#26a69a", "#ef5350", "#1f4e9c"


def candlestick_figure(
    bars: pd.DataFrame,
    forecast_time: Sequence | pd.DatetimeIndex,
    forecast_close: np.ndarray,
    title: str = "",
    forecast_band: tuple[np.ndarray, np.ndarray] | None = None,
) -> Figure:
    """Candlesticks of ``bars`` (columns open, high, low, close; a datetime index or a ``timestamp``
    column) with the forecast closes drawn after the last bar.

    Bars are drawn at consecutive integer positions (no gaps for weekends or nights) and labelled
    with their dates; the forecast continues the positions from the last close.

    Args:
        bars: the recent history to draw.
        forecast_time: timestamps of the F forecast bars.
        forecast_close: forecast closes, ``(F,)``.
        title: figure title.
        forecast_band: optional lower and upper closes ``(F,)`` each, shaded.
    """
    if "timestamp" in bars.columns:
        bars = bars.set_index("timestamp")
    o, h, lo, c = (bars[k].to_numpy(dtype=float) for k in ("open", "high", "low", "close"))
    n, f = len(bars), len(forecast_close)
    fig = Figure(figsize=(10, 4.5), dpi=100)
    ax = fig.subplots()
    width = 0.6
    for i in range(n):
        color = UP if c[i] >= o[i] else DOWN
        ax.vlines(i, lo[i], h[i], color=color, linewidth=0.8)
        bottom, height = min(o[i], c[i]), abs(c[i] - o[i])
        ax.add_patch(Rectangle((i - width / 2, bottom), width, max(height, 1e-12), color=color))
    xs = np.arange(n - 1, n + f)
    ys = np.concatenate(([c[-1]], np.asarray(forecast_close, dtype=float)))
    if forecast_band is not None:
        low_band = np.concatenate(([c[-1]], forecast_band[0]))
        high_band = np.concatenate(([c[-1]], forecast_band[1]))
        ax.fill_between(xs, low_band, high_band, color=FORECAST, alpha=0.15, linewidth=0)
    ax.plot(xs, ys, color=FORECAST, marker="o", markersize=3, linewidth=1.5, label=f"forecast ({f} bars)")
    ax.axvline(n - 0.5, color="grey", linestyle=":", linewidth=1)
    labels = [pd.Timestamp(t) for t in list(bars.index) + list(forecast_time)]
    ticks = np.linspace(0, n + f - 1, num=min(8, n + f)).round().astype(int)
    ax.set_xticks(ticks)
    ax.set_xticklabels(
        [labels[t].strftime("%Y-%m-%d\n%H:%M") if _intraday(labels) else labels[t].strftime("%Y-%m-%d") for t in ticks],
        fontsize=8,
    )
    ax.set_xlim(-1, n + f)
    ax.set_ylabel("price")
    ax.set_title(title)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.2)
    fig.tight_layout()
    return fig


def _intraday(stamps: list[pd.Timestamp]) -> bool:
    return any(t.hour or t.minute for t in stamps)


def attention_figure(
    weights: np.ndarray,
    channel_names: Sequence[str],
    title: str = "",
    token: str = "patch",
    token_names: Sequence[str] | None = None,
) -> Figure:
    """Attention over the tokens of one window.

    Args:
        weights: ``(G, T, T)`` attention (query x key) averaged over heads: of each channel's patches
            (G = C), or of the window's channels or bars (G = 1).
        channel_names: the G row names (the channels, or one name for the whole window).
        title: figure title.
        token: what a token is (``patch``, ``channel``, ``bar``), for the axis labels.
        token_names: the T tokens' names for the map's ticks (the channels' names for ``channel``).

    Left: the map averaged over the rows; right: the attention each key token receives (mean over
    queries), one row per G. Patch and bar 0 are the oldest.
    """
    weights = np.asarray(weights, dtype=float)
    G, T, _ = weights.shape
    fig = Figure(figsize=(11, 4.2), dpi=100)
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.4]})
    im = ax1.imshow(weights.mean(0), cmap="viridis", aspect="auto")
    if token_names is not None:
        ax1.set_xticks(range(T), list(token_names), fontsize=7, rotation=90)
        ax1.set_yticks(range(T), list(token_names), fontsize=7)
    else:
        ax1.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax1.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax1.set_xlabel(f"key {token}")
    ax1.set_ylabel(f"query {token}")
    ax1.set_title("mean over channels" if G > 1 else "attention")
    fig.colorbar(im, ax=ax1, fraction=0.046)
    received = weights.mean(1)  # (G, T)
    im2 = ax2.imshow(received, cmap="magma", aspect="auto")
    ax2.set_yticks(range(G))
    ax2.set_yticklabels(list(channel_names), fontsize=8)
    if token_names is not None:
        ax2.set_xticks(range(T), list(token_names), fontsize=7, rotation=90)
    ax2.set_xlabel(f"key {token}" + ("" if token == "channel" else " (oldest to newest)"))
    ax2.set_title("attention received" + (", per channel" if G > 1 else ""))
    fig.colorbar(im2, ax=ax2, fraction=0.046)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def forecast_figure(
    past: np.ndarray | None,
    true: np.ndarray,
    pred: np.ndarray,
    target_name: str = "target",
    title: str = "",
    band: tuple[np.ndarray, np.ndarray] | None = None,
) -> Figure:
    """Forecast against what happened, for a few windows (one panel each).

    Args:
        past: ``(W, L)`` the target over each window's context, or None when the target is not an
            input channel.
        true: ``(W, F)`` the target over the horizon.
        pred: ``(W, F)`` the forecast.
        target_name: the y-axis label.
        title: figure title.
        band: optional ``(W, F)`` lower and upper quantiles of the forecast, shaded.

    Step 0 is the first forecast bar; the context is drawn at negative steps.
    """
    true, pred = np.asarray(true, dtype=float), np.asarray(pred, dtype=float)
    W, F = true.shape
    fig = Figure(figsize=(11, 2.4 * W), dpi=100)
    axes = np.atleast_1d(fig.subplots(W, 1, sharex=True))
    future = np.arange(F)
    for w, ax in enumerate(axes):
        if past is not None:
            L = past.shape[1]
            ax.plot(np.arange(-L, 0), past[w], color="0.45", lw=1, label="context")
        ax.plot(future, true[w], color=UP, lw=1.6, marker="o", ms=3, label="actual")
        if band is not None:
            ax.fill_between(future, band[0][w], band[1][w], color=FORECAST, alpha=0.15, linewidth=0, label="interval")
        ax.plot(future, pred[w], color=FORECAST, lw=1.6, marker="o", ms=3, ls="--", label="forecast")
        ax.axvline(-0.5, color="0.7", lw=0.8)
        ax.set_ylabel(target_name)
    axes[0].legend(loc="upper left", fontsize=8, ncol=4)
    axes[-1].set_xlabel("bar (0 = first forecast bar)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def equity_figure(curves: pd.DataFrame, title: str = "") -> Figure:
    """Equity curves (one column per strategy, indexed by time, starting near 1) on a log scale."""
    fig = Figure(figsize=(10, 4.2), dpi=100)
    ax = fig.subplots()
    for name in curves.columns:
        style = {"color": FORECAST, "lw": 1.8} if name == "model" else {"lw": 1.1}
        ax.plot(curves.index, curves[name].to_numpy(dtype=float), label=name, **style)
    ax.set_yscale("log")
    ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
    ax.set_ylabel("equity (start = 1)")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.2)
    fig.tight_layout()
    return fig
