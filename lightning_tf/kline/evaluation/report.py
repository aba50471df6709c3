"""What a test of :class:`~lightning_tf.kline.module.KLineForecaster` reports beside its metrics: the cost-aware backtest
of the forecasts on the test windows, the figures (attention, forecasts, equity curves) and the report
in plain words that ``lightning-tf test`` prints.

Functions of the batch and the forecast, or of the finished summary; the module calls them and keeps
nothing of the data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from lightning.pytorch.loggers import Logger, WandbLogger
from torch import Tensor

from lightning_tf.training import gather_objects

from ..scale import DataScale
from .backtest import STATS as BACKTEST_STATS
from .backtest import backtest, beats_line, format_stat
from .summary import BASELINES, summary_text

__all__ = [
    "TestFigures",
    "TestRecord",
    "backtest_row",
    "backtest_text",
    "intervals_text",
    "log_attention",
    "log_forecasts",
    "report_text",
    "run_backtest",
    "write_equity",
]

log = logging.getLogger(__name__)


@dataclass
class TestFigures:
    """What the end of a test needs to write its backtest and figures, as plain values.

    Args:
        logger: the run's logger (figures go to wandb only).
        equity_path: where the equity curves' PNG (and CSV beside it) go; None writes none (another rank,
            or a run without a logger).
        cost_bps: the backtest's cost per side in basis points.
        short: the backtest's strategy may go short.
        backbone: ``patches``, ``variates`` or ``bars`` (what the attention's tokens are).
        attention: a window ``(1, L, C)`` -> the last layer's attention ``(1, G, T, T)``.
        scale: the data's scaling (feature and target names; None: unknown).
        target_channels: index among the input channels of each target, if any.
        quantiles: the forecast's quantile levels, if any.
    """

    logger: Logger | None
    equity_path: Path | None
    cost_bps: float
    short: bool
    backbone: str
    attention: Callable[[Tensor], Tensor]
    scale: DataScale | None
    target_channels: list[int] | None
    quantiles: list[float] | None


class TestRecord:
    """What one test keeps beside its metrics: the first test window (the attention image), a few windows
    of the first batch with their forecasts (the forecast image, with wandb), and every window's next-bar
    returns (the backtest)."""

    def __init__(self) -> None:
        self.attention_window: Tensor | None = None
        self.forecast_windows: tuple[Tensor, Tensor, Tensor] | None = None  # x, y, forecast of a few windows
        self.rows: list[dict[str, Tensor]] = []

    def add(
        self,
        batch: dict[str, Tensor],
        out: Tensor,
        pred: Tensor,
        forecasts: dict[str, tuple[Tensor, bool]],
        scale: DataScale | None,
        attention: bool,
        logger: Logger | None,
    ) -> None:
        """Keep what the report needs of a test batch: the forecast ``out`` (B, F, K[, Q]), its point
        forecast ``pred`` (B, F, K) and the baselines' ``forecasts``, in the data's ``scale``; with
        ``attention`` (the model has an encoder) its first window, with a wandb ``logger`` a few forecast
        windows."""
        x, y = batch["x"], batch["y"]  # (B, L, C), (B, F, K)
        if self.attention_window is None and attention:
            self.attention_window = x[:1].detach()  # (1, L, C)
        if self.forecast_windows is None and isinstance(logger, WandbLogger):
            pick = torch.linspace(0, x.shape[0] - 1, min(4, x.shape[0]), device=x.device).long()  # (W,)
            self.forecast_windows = (x[pick].detach(), y[pick].detach(), out[pick].detach())
        row = backtest_row(batch, pred, forecasts, scale)
        if row is not None:
            self.rows.append(row)

    def finish(self, figures: TestFigures) -> tuple[dict[str, Any] | None, pd.DataFrame | None]:
        """At the end of the test: the backtest's summary entry and equity curves (written to
        ``figures.equity_path``), the figures to wandb."""
        result = run_backtest(self.rows, figures.cost_bps, figures.short)
        self.rows = []
        entry, curves = result if result is not None else (None, None)
        if curves is not None:
            write_equity(curves, figures.cost_bps, figures.equity_path, figures.logger)
        if isinstance(figures.logger, WandbLogger):
            scale = figures.scale
            if self.attention_window is not None:
                maps = figures.attention(self.attention_window)[0].float().cpu().numpy()  # (G, T, T)
                names = list(scale.feature_names) if scale else [f"ch{i}" for i in range(maps.shape[-1])]
                log_attention(figures.logger, maps, figures.backbone, names)
            if self.forecast_windows is not None:
                names = list(scale.target_names) if scale else ["target"]
                log_forecasts(
                    figures.logger, self.forecast_windows, figures.target_channels, names[0], figures.quantiles
                )
        return entry, curves


def backtest_row(
    batch: dict[str, Tensor], pred: Tensor, forecasts: dict[str, tuple[Tensor, bool]], scale: DataScale | None
) -> dict[str, Tensor] | None:
    """For every window of a test batch, the realised and forecast return of the next bar (first target,
    original units) of the model (``pred`` (B, F, K), model scale) and of the mean and linear baselines
    (``forecasts``: name -> (forecast, on the model scale?)); None without prices."""
    if scale is None or not scale.rebuilds_prices or "anchor" not in batch:
        return None
    ticker, anchor = batch.get("ticker"), batch["anchor"].double()  # (B,), (B,)

    def next_return(forecast: Tensor, model_scale: bool) -> Tensor:
        f = scale.inverse_targets(forecast, ticker) if model_scale else forecast  # (B, F, K)
        first = f[:, 0, 0].double()  # (B,)
        return first if scale.returns else torch.log(first.clamp_min(1e-12) / anchor)  # (B,)

    row = {
        "time": batch["time"],
        "ticker": ticker if ticker is not None else torch.zeros_like(batch["time"]),
        "realised": next_return(batch["y"], True),
        "model": next_return(pred, True),
    }
    for name in ("mean", "linear"):
        if name in forecasts:
            row[name] = next_return(*forecasts[name])
    return {k: v.detach().cpu() for k, v in row.items()}


def run_backtest(
    rows: list[dict[str, Tensor]], cost_bps: float, short: bool
) -> tuple[dict[str, Any], pd.DataFrame] | None:
    """The backtest of the model's and the baselines' next-bar forecasts on every test window of every
    process (``rows`` of :func:`backtest_row`): the summary entry and the equity curves."""
    rows = [r for part in gather_objects(rows) for r in part]
    if not rows:
        return None
    frame = pd.DataFrame({k: torch.cat([r[k] for r in rows]).numpy() for k in rows[0]})
    frame["time"] = pd.to_datetime(frame["time"])
    frame = frame.drop_duplicates(["ticker", "time"])  # a distributed sampler repeats windows to even out
    signals = ["model", "buy_and_hold", *[n for n in ("mean", "linear") if n in frame]]
    stats, curves = backtest(frame, signals, cost_bps=cost_bps, short=short)
    entry = {
        "cost_bps": float(cost_bps),
        "short": bool(short),
        "bars": len(curves),
        "strategies": stats,
        "verdict": beats_line(stats, cost_bps, short),
    }
    return entry, curves


def write_equity(curves: pd.DataFrame, cost_bps: float, path: Path | None, logger: Logger | None) -> None:
    """The equity curves to ``path`` (PNG, and the CSV beside it; None: nothing written) and to wandb
    (``test/equity``)."""
    if path is None:
        return
    from .plots import equity_figure

    fig = equity_figure(curves, f"test backtest, {cost_bps:g} bp per side")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    curves.to_csv(path.with_suffix(".csv"))
    log.info("backtest equity curves written to %s", path)
    if isinstance(logger, WandbLogger):
        logger.log_image(key="test/equity", images=[fig])


def log_attention(logger: WandbLogger, maps: Any, backbone: str, feature_names: list[str]) -> None:
    """The last layer's attention ``maps`` (G, T, T) over the tokens (patches, channels or bars, by
    ``backbone``) of one test window, to wandb."""
    from .plots import attention_figure

    token = {"patches": "patch", "variates": "channel", "bars": "bar"}[backbone]
    plural = "patches" if token == "patch" else f"{token}s"
    fig = attention_figure(
        maps,
        feature_names if token == "patch" else ["window"],
        f"attention over {plural}, last layer, first test window",
        token=token,
        token_names=feature_names if token == "channel" else None,
    )
    logger.log_image(key="test/attention", images=[fig])


def log_forecasts(
    logger: WandbLogger,
    windows: tuple[Tensor, Tensor, Tensor],
    target_channels: list[int] | None,
    target_name: str,
    quantiles: list[float] | None,
) -> None:
    """The forecast of the first target against what happened for a few test windows ``(x, y, forecast)``,
    on the model's scale (the target's context drawn when it is an input channel), the central interval
    shaded for quantile forecasts; to wandb."""
    from .metrics import central_intervals
    from .plots import forecast_figure

    x, y, out = (t.float().cpu().numpy() for t in windows)  # (W, L, C), (W, F, K), (W, F, K[, Q])
    past = x[..., target_channels[0]] if target_channels else None  # (W, L)
    band = None
    if quantiles is not None:
        pred = out[..., 0, quantiles.index(0.5)]  # (W, F)
        pairs = central_intervals(quantiles)
        if pairs:
            lo, hi = pairs[0]
            band = (out[..., 0, lo], out[..., 0, hi])  # (W, F) each
    else:
        pred = out[..., 0]  # (W, F)
    fig = forecast_figure(
        past, y[..., 0], pred, target_name, "test forecasts (first test batch, model scale)", band=band
    )
    logger.log_image(key="test/forecast", images=[fig])


def intervals_text(values: dict[str, float]) -> str:
    """One line per central interval: coverage against its nominal level, and the mean width."""
    lines = []
    for key, coverage in values.items():
        if key.startswith("coverage_"):
            lo, hi = (float(v) for v in key.removeprefix("coverage_").split("_"))
            lines.append(
                f"{lo:g}%-{hi:g}% interval: coverage {coverage:.1%} (nominal {(hi - lo) / 100:.0%}), "
                f"mean width {values['width_' + key.removeprefix('coverage_')]:.4g} (model scale)"
            )
    return "\n".join(lines)


def backtest_text(bt: dict[str, Any]) -> str:
    """The backtest as a plain table and its verdict line."""
    kind = "long/short" if bt["short"] else "long/flat"
    title = (
        f"Backtest on the test windows ({kind} by the sign of the next-bar forecast, {bt['cost_bps']:g} bp "
        f"per side, {bt['bars']} bars):"
    )
    lines = [title, f"{'':14s}" + "".join(f"{m:>14s}" for m in BACKTEST_STATS)]
    for name, values in bt["strategies"].items():
        lines.append(f"{name:14s}" + "".join(f"{format_stat(m, values[m]):>14s}" for m in BACKTEST_STATS))
    lines.append(bt["verdict"])
    return "\n".join(lines)


def report_text(summary: dict[str, Any], returns: bool) -> str:
    """The test in plain words: the model beside the baselines (levels on the model scale, the ETT
    protocol; returns in their own units and as prices) with a verdict per baseline, which model was
    tested and why, the intervals' coverage and the backtest. Empty when nothing was scored."""
    blocks = []
    if "model" in summary and any(name in summary for name in BASELINES):
        for scale in ("orig", "price") if returns else ("model",):
            if scale in summary.get("model", {}):
                blocks.append(summary_text(summary, scale))
    blocks.extend(summary.get("about", {}).values())
    if summary.get("intervals"):
        blocks.append(intervals_text(summary["intervals"]))
    if summary.get("backtest"):
        blocks.append(backtest_text(summary["backtest"]))
    return "\n".join(blocks)
