"""Forecast metrics: errors, error relative to persistence, direction and information coefficient.

Every metric compares a forecast ``pred`` with the realised ``target`` (both ``(B, F, K)``) and, where
a reference is needed, with the persistence forecast ``naive`` of the same windows (the last value
for level targets, a zero return for return targets):

* ``mse``, ``mae``, ``rmse``: torchmetrics' regression metrics over every window, horizon and target.
* ``mase``: mean absolute error divided by the persistence forecast's mean absolute error on the
  same windows (Hyndman and Koehler 2006 scale by the in-sample naive error; scaling by the naive
  error on the evaluated windows is the out-of-sample variant): below 1 beats persistence.
* ``dir_acc``: share of forecasts whose predicted change ``pred - naive`` has the sign of the realised
  change ``target - naive`` (for returns: the sign of the return). Flat realised moves (change exactly
  0) are left out; a predicted change of exactly 0 counts as a "not up" call, so persistence scores
  ``1 - up_share``. Read it beside ``up_share``, the share of realised up moves among the same cases:
  always guessing "up" scores ``up_share``.
* ``ic``, ``rank_ic``: Pearson and Spearman correlation between predicted and realised changes (for
  returns: predicted and realised returns), pooled over windows, horizons and targets. A constant
  forecast (persistence) has no defined correlation: NaN.


Quantile forecasts (``(B, F, K, Q)``): :func:`pinball_loss` (the quantile loss, Koenker and Bassett
1978) and :class:`IntervalMetrics`, the share of outcomes inside each central interval (``coverage``,
to compare with its nominal level) and the interval's mean width.
"""

from __future__ import annotations

import warnings

import pandas as pd
import torch
from torch import Tensor, nn
from torchmetrics import MeanAbsoluteError, MeanSquaredError, Metric, PearsonCorrCoef, SpearmanCorrCoef

__all__ = [
    "METRIC_NAMES",
    "DirectionalAccuracy",
    "ForecastMetrics",
    "IntervalMetrics",
    "MeanAbsoluteScaledError",
    "central_intervals",
    "date_correlation",
    "date_correlations",
    "date_ranks",
    "pinball_loss",
]

METRIC_NAMES = ("mse", "mae", "rmse", "mase", "dir_acc", "up_share", "ic", "rank_ic")


class MeanAbsoluteScaledError(Metric):
    """``sum |pred - target| / sum |naive - target|`` over all elements seen."""

    full_state_update = False
    higher_is_better = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("abs_error", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("naive_abs_error", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, pred: Tensor, target: Tensor, naive: Tensor) -> None:
        self.abs_error += (pred - target).abs().sum().double()
        self.naive_abs_error += (naive - target).abs().sum().double()

    def compute(self) -> Tensor:
        return (self.abs_error / self.naive_abs_error).float()


class DirectionalAccuracy(Metric):
    """Share of non-flat realised changes whose sign the predicted change gets right; ``up_share``
    gives the share of those realised changes that went up."""

    full_state_update = False
    higher_is_better = True

    def __init__(self) -> None:
        super().__init__()
        self.add_state("correct", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("up", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, pred_change: Tensor, true_change: Tensor) -> None:
        moved = true_change != 0
        true_up = true_change > 0
        self.correct += ((pred_change > 0) == true_up)[moved].sum()
        self.up += true_up[moved].sum()
        self.total += moved.sum()

    def compute(self) -> Tensor:
        return self.correct.float() / self.total

    def up_share(self) -> Tensor:
        """Share of realised up moves among the scored (non-flat) changes, over every process."""
        with self.sync_context():  # compute() syncs only for itself, then puts back this process's counts
            return self.up.float() / self.total


class ForecastMetrics(nn.Module):
    """All the metrics of this module for one stage and one scale.

    Args:
        full: also compute MASE, direction and IC, from the updates that pass the persistence
            forecast ``naive``; otherwise only MSE, MAE, RMSE (cheap enough for every training step).
    """

    def __init__(self, full: bool = True) -> None:
        super().__init__()
        self.full = full
        self.mse = MeanSquaredError()
        self.mae = MeanAbsoluteError()
        if full:
            self.mase = MeanAbsoluteScaledError()
            self.direction = DirectionalAccuracy()
            # float64 sums: in float32, torchmetrics calls the variance "close to zero" (and answers NaN) when
            # var / max|deviation|^2 < 3.5e-4, which one outlier among many returns already makes true
            self.ic = PearsonCorrCoef().set_dtype(torch.float64)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "will save all targets and predictions": that is intended
                self.rank_ic = SpearmanCorrCoef()

    @torch.no_grad()
    def update(self, pred: Tensor, target: Tensor, naive: Tensor | None = None) -> None:
        """Add windows ``pred``, ``target`` and the persistence forecast ``naive`` (None: errors
        only), all of the same shape ``(B, F, K)``."""
        pred, target = pred.detach().double().reshape(-1), target.detach().double().reshape(-1)  # (B*F*K,)
        self.mse.update(pred, target)
        self.mae.update(pred, target)
        if self.full and naive is not None:
            naive = naive.detach().double().reshape(-1)  # (B*F*K,)
            self.mase.update(pred, target, naive)
            pred_change, true_change = pred - naive, target - naive  # float64
            self.direction.update(pred_change, true_change)
            self.ic.update(pred_change, true_change)
            self.rank_ic.update(pred_change.float(), true_change.float())

    def compute(self) -> dict[str, float]:
        """The metric values as plain floats (NaN where undefined)."""
        mse = float(self.mse.compute())
        out = {"mse": mse, "mae": float(self.mae.compute()), "rmse": mse**0.5}
        if self.full and self.mase.update_called:
            with warnings.catch_warnings():
                # a constant forecast has zero variance: the correlation is NaN, which is the answer
                warnings.simplefilter("ignore")
                out["mase"] = float(self.mase.compute())
                out["dir_acc"] = float(self.direction.compute())
                out["up_share"] = float(self.direction.up_share())
                out["ic"] = _correlation(self.ic)
                out["rank_ic"] = _correlation(self.rank_ic)
        return out

    def reset(self) -> None:
        for m in self.children():
            if isinstance(m, Metric):
                m.reset()


def _correlation(metric: Metric) -> float:
    if isinstance(metric, SpearmanCorrCoef) and metric.preds and float(torch.cat(metric.preds).double().var()) == 0:
        return float("nan")  # torchmetrics answers 0 for a constant input; the correlation is undefined
    return float(metric.compute())  # Pearson already answers NaN for a constant input


def pinball_loss(quantiles: Tensor, target: Tensor, levels: list[float], reduce: bool = True) -> Tensor:
    """Pinball loss of ``quantiles`` (B, F, K, Q) at ``levels`` (Q,) against ``target`` (B, F, K):
    ``max(tau e, (tau - 1) e)`` with ``e = target - quantile``, averaged over every element (or each
    element's ``(B, F, K, Q)`` with ``reduce=False``)."""
    tau = torch.tensor(levels, dtype=quantiles.dtype, device=quantiles.device)  # (Q,)
    e = target[..., None] - quantiles  # (B, F, K, Q)
    loss = torch.maximum(tau * e, (tau - 1) * e)  # (B, F, K, Q)
    return loss.mean() if reduce else loss


def date_correlations(pred: Tensor, target: Tensor, dates: Tensor) -> tuple[Tensor, Tensor]:
    """Per date, the Pearson correlation across that date's windows between ``pred`` and ``target`` (B, ...),
    each trailing element on its own: ``(corr, valid)``, both ``(G, E)`` for the G distinct ``dates`` (B,) in
    increasing order and the E trailing elements; ``valid`` is False (and ``corr`` 0) where a date has fewer
    than two windows or a constant forecast or target. Differentiable in ``pred``."""
    _, group = torch.unique(dates, return_inverse=True)  # (B,) in 0..G-1
    G = int(group.max()) + 1
    p = pred.reshape(pred.shape[0], -1).double()  # (B, E)
    t = target.reshape(target.shape[0], -1).double()  # (B, E)
    index = group[:, None].expand_as(p)  # (B, E)

    def per_date(values: Tensor) -> Tensor:  # (B, E) -> (G, E) sums
        return torch.zeros(G, values.shape[1], dtype=values.dtype, device=values.device).scatter_add(0, index, values)

    count = per_date(torch.ones_like(p))  # (G, E)
    pc = p - (per_date(p) / count).gather(0, index)  # (B, E) centred per date
    tc = t - (per_date(t) / count).gather(0, index)
    cov, var_p, var_t = per_date(pc * tc), per_date(pc * pc), per_date(tc * tc)  # (G, E)
    valid = (count >= 2) & (var_p > 1e-24) & (var_t > 1e-24)  # (G, E)
    corr = torch.where(valid, cov / (var_p * var_t).clamp_min(1e-48).sqrt(), torch.zeros_like(cov))
    return corr, valid


def date_ranks(values: Tensor, dates: Tensor) -> Tensor:
    """Each of ``values`` (B, E) replaced by its rank among the windows of its date (``dates`` (B,)), each column
    on its own, ties sharing their mean rank (pandas' ``rank(method="average")``): the Pearson correlation of
    ranks, :func:`date_correlations` of them, is each date's Spearman correlation (a RankIC)."""
    frame = pd.DataFrame(values.detach().double().cpu().numpy())  # (B, E)
    ranks = frame.groupby(dates.detach().cpu().numpy()).rank(method="average").to_numpy()  # (B, E)
    return torch.tensor(ranks, device=values.device)  # a copy: pandas may hand back a read-only array


def date_correlation(pred: Tensor, target: Tensor, dates: Tensor) -> Tensor:
    """The mean over dates of the Pearson correlation across the windows of one date (the IC of a cross-section)
    between ``pred`` and ``target`` (B, ...), each trailing element on its own; ``dates`` (B,) groups the
    windows. Dates with fewer than two windows, or with a constant forecast or target, do not count; 0 when
    none counts. Differentiable: ``1 - date_correlation`` is a rank-aware loss that ignores each date's level
    and scale (``batch_by_date`` makes every training batch one whole date)."""
    corr, valid = date_correlations(pred, target, dates)  # (G, E)
    return (corr.sum() / valid.sum().clamp_min(1)).to(pred.dtype)


def central_intervals(levels: list[float]) -> list[tuple[int, int]]:
    """Index pairs ``(lo, hi)`` of the central intervals among ``levels``: ``tau`` and ``1 - tau``, both
    present, ``tau < 0.5``; the widest first."""
    pairs = []
    for i, tau in enumerate(levels):
        if tau < 0.5:
            for j, other in enumerate(levels):
                if abs(other - (1 - tau)) < 1e-9:
                    pairs.append((i, j))
    return pairs


class IntervalMetrics(Metric):
    """Coverage and mean width of the central intervals of quantile forecasts.

    Args:
        levels: the quantile levels, ascending (the forecast's last axis).
    """

    full_state_update = False

    def __init__(self, levels: list[float]) -> None:
        super().__init__()
        self.levels = list(levels)
        self.pairs = central_intervals(self.levels)
        n = max(len(self.pairs), 1)
        self.add_state("inside", torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("width", torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, quantiles: Tensor, target: Tensor) -> None:
        """Add forecasts ``quantiles`` (B, F, K, Q) of outcomes ``target`` (B, F, K)."""
        q, t = quantiles.detach().double(), target.detach().double()
        for p, (lo, hi) in enumerate(self.pairs):
            self.inside[p] += ((t >= q[..., lo]) & (t <= q[..., hi])).sum()
            self.width[p] += (q[..., hi] - q[..., lo]).sum()
        self.total += t.numel()

    def compute(self) -> dict[str, float]:
        """``coverage_<lo>_<hi>`` and ``width_<lo>_<hi>`` per interval, e.g. ``coverage_10_90``."""
        out = {}
        for p, (lo, hi) in enumerate(self.pairs):
            name = f"{100 * self.levels[lo]:g}_{100 * self.levels[hi]:g}"
            out[f"coverage_{name}"] = float(self.inside[p] / self.total)
            out[f"width_{name}"] = float(self.width[p] / self.total)
        return out
