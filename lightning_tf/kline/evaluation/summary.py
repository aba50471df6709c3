"""Scoring a forecast of a batch on three scales, the baselines of the same windows, and the plain-words
test summary.

* **model scale**: the DataModule's standardised targets (the ETT protocol reports errors here);
* **original units** (``orig``): mapped back with the data's :class:`~.scale.DataScale` (log returns,
  prices, loads);
* **prices** (``price``), for return targets: the closes rebuilt from the returns and the last known
  close of each window.

The baselines (:mod:`.baselines`) are scored on exactly the model's windows: level targets that are
input channels on the model scale (persistence, mean and drift of the scaled context), other targets in
original units from the batch's ``x_raw_target`` (the target over the context), and the linear
baseline (:class:`~.baselines.LinearBaseline`) on the model scale. Every score also gets the persistence
forecast of its scale (``naive``), which MASE, direction and IC are measured against.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..scale import DataScale, rebuild_prices
from .baselines import drift, mean_forecast, persistence
from .metrics import ForecastMetrics, IntervalMetrics

__all__ = [
    "BASELINES",
    "SCALES",
    "SUMMARY_METRICS",
    "baseline_forecasts",
    "naive_model_scale",
    "score",
    "stage_metrics",
    "summary_text",
]

BASELINES = ("persistence", "mean", "drift", "linear")
SCALES = ("model", "orig", "price")
SUMMARY_METRICS = ("mse", "mae", "mase", "dir_acc", "up_share", "ic", "rank_ic")

Batch = Mapping[str, Tensor]


def naive_model_scale(x: Tensor, horizon: int, target_channels: list[int] | None, returns: bool) -> Tensor | None:
    """Persistence ``(B, F, K)`` on the model scale for level targets that are input channels of the
    context ``x`` (B, L, C), else None (a zero return has no model-scale value)."""
    if target_channels is None or returns:
        return None
    return persistence(x[..., target_channels], horizon)  # (B, F, K)


def _past_targets(batch: Batch) -> Tensor | None:
    """The target quantity over the context in original units (``x_raw_target``, (B, L, K)), if the
    batch carries it: one-bar returns or past levels."""
    past = batch.get("x_raw_target")
    return None if past is None else past.to(batch["y"].dtype)


def baseline_forecasts(
    batch: Batch, horizon: int, target_channels: list[int] | None, returns: bool
) -> dict[str, tuple[Tensor, bool]]:
    """Persistence, mean and (for levels) drift forecasts ``(B, F, K)`` of a batch's windows, each with
    whether it is on the model scale (True) or in original units (False). The linear baseline is the model's."""
    x = batch["x"]
    out: dict[str, tuple[Tensor, bool]] = {}
    if target_channels is not None and not returns:
        past = x[..., target_channels]  # (B, L, K), model scale (the ETT protocol)
        out["persistence"] = (persistence(past, horizon), True)
        out["mean"] = (mean_forecast(past, horizon), True)
        out["drift"] = (drift(past, horizon), True)
        return out
    past = _past_targets(batch)  # (B, L, K), original units
    if past is not None:
        out["persistence"] = (persistence(past, horizon, returns=returns), False)
        out["mean"] = (mean_forecast(past, horizon, returns=returns, cumulative=False), False)
        if not returns:
            out["drift"] = (drift(past, horizon), False)
    return out


def _naive_original(
    batch: Batch, y_orig: Tensor, naive: Tensor | None, scale: DataScale, returns: bool, horizon: int
) -> Tensor | None:
    """Persistence in original units: zero returns, or the last past value of a level target."""
    if returns:
        return torch.zeros_like(y_orig)
    past = _past_targets(batch)
    if past is not None:
        return persistence(past.to(y_orig.dtype), horizon)  # (B, F, K)
    if naive is not None:
        return scale.inverse_targets(naive, batch.get("ticker")).to(y_orig.dtype)  # (B, F, K)
    return None


def score(
    metrics: Mapping[str, ForecastMetrics],
    key: str,
    batch: Batch,
    forecast: Tensor,
    naive: Tensor | None,
    *,
    scale: DataScale | None,
    returns: bool,
    horizon: int,
    model_scale: bool = True,
    original: bool = True,
) -> None:
    """Add one forecast ``(B, F, K)`` of a batch's windows to ``metrics[key + scale]`` for each scale.

    Args:
        metrics: the metrics by name; ``{key}model``, ``{key}orig`` and ``{key}price`` are updated.
        key: the name prefix, e.g. ``"val_"`` or ``"test_linear_"``.
        batch: the batch (``y``, and ``ticker``, ``anchor``, ``x_raw_target`` when it has them).
        forecast: the forecast, on the model scale (``model_scale``) or in original units.
        naive: persistence on the model scale (:func:`naive_model_scale`), or None.
        scale: the data's scaling; None: the model scale only.
        returns: whether the targets are returns (prices are then rebuilt and scored, where the data has
            them).
        horizon: forecast horizon F.
        model_scale: whether ``forecast`` is on the model scale (else in original units).
        original: also score in original units and prices.
    """
    y = batch["y"]
    if model_scale:
        metrics[f"{key}model"].update(forecast, y, naive)
    if not original or scale is None:
        return
    ticker = batch.get("ticker")
    y_orig = scale.inverse_targets(y, ticker)  # (B, F, K)
    orig = scale.inverse_targets(forecast, ticker) if model_scale else forecast  # (B, F, K)
    orig = orig.to(y_orig.dtype)
    metrics[f"{key}orig"].update(orig, y_orig, _naive_original(batch, y_orig, naive, scale, returns, horizon))
    if returns and scale.rebuilds_prices and "anchor" in batch:
        anchor = batch["anchor"].double()  # (B,)
        true_p = rebuild_prices(y_orig[..., 0].double(), anchor)  # (B, F)
        pred_p = rebuild_prices(orig[..., 0].double(), anchor)  # (B, F)
        naive_p = anchor[:, None].expand_as(true_p)  # (B, F)
        metrics[f"{key}price"].update(pred_p[..., None], true_p[..., None], naive_p[..., None])


def summary_text(summary: dict[str, dict[str, dict[str, float]]], scale: str) -> str:
    """A plain-text table of the model and the baselines on ``scale`` and one line per baseline
    saying whether the model beats it: lower MSE and lower MAE ("beats"), neither ("does NOT beat"),
    only one of them, or equal errors ("ties", e.g. a model that is the linear baseline's own map)."""
    unit = {"model": "model scale", "orig": "original units", "price": "prices"}[scale]
    rows = [(name, r[scale]) for name, r in summary.items() if isinstance(r, dict) and scale in r and "mse" in r[scale]]
    lines = [f"Test windows, {unit}:", f"{'':14s}" + "".join(f"{m:>12s}" for m in SUMMARY_METRICS)]
    for name, values in rows:
        lines.append(f"{name:14s}" + "".join(f"{values.get(m, float('nan')):12.5g}" for m in SUMMARY_METRICS))
    model = summary["model"].get(scale, {})
    for name, values in rows:
        if name == "model" or not model:
            continue
        wins = [m.upper() for m in ("mse", "mae") if model[m] < values[m]]
        if all(model[m] == values[m] for m in ("mse", "mae")):
            verdict = f"ties {name} (the same forecast)"
        elif len(wins) == 2:
            verdict = f"beats {name}"
        elif wins:
            verdict = f"beats {name} on {wins[0]} only"
        else:
            verdict = f"does NOT beat {name}"
        lines.append(
            f"model {verdict}: MSE {model['mse']:.5g} vs {values['mse']:.5g}, "
            f"MAE {model['mae']:.5g} vs {values['mae']:.5g}"
        )
    return "\n".join(lines)


def stage_metrics(levels: list[float] | None) -> nn.ModuleDict:
    """The metrics of a forecaster's stages: ``<stage>_model`` (train, val, test), ``<stage>_orig`` and
    ``<stage>_price`` (val, test), ``test_<baseline>_<scale>`` for every baseline and scale, and
    ``<stage>_intervals`` (val, test) for quantile ``levels``."""
    metrics = nn.ModuleDict()
    for stage in ("train", "val", "test"):
        metrics[f"{stage}_model"] = ForecastMetrics(full=stage != "train")
    for stage in ("val", "test"):
        metrics[f"{stage}_orig"] = ForecastMetrics()
        metrics[f"{stage}_price"] = ForecastMetrics()
        if levels is not None:
            metrics[f"{stage}_intervals"] = IntervalMetrics(levels)
    for name in BASELINES:
        for scale in SCALES:
            metrics[f"test_{name}_{scale}"] = ForecastMetrics()
    return metrics
