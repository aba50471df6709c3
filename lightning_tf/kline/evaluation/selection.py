"""Whether the Transformer residual earns its place: a decision on the validation windows, made before
any test window is read, by a rule fixed in advance.

Validation windows overlap and neighbouring errors are correlated, so a gain of a few hundredths of a
percent in the mean validation loss says nothing. :class:`ResidualSelection` keeps, per validation
window, what the decision needs; :meth:`ResidualSelection.compute` sorts the windows by time, cuts them
into ``blocks`` contiguous blocks, and keeps the residual only when its mean gain over the linear path
alone exceeds ``keep_se`` standard errors of that gain, the standard error taken from the spread of the
block means (a block bootstrap's variance in closed form; the "one-standard-error rule" of Hastie,
Tibshirani and Friedman, *The Elements of Statistical Learning*, 7.10, with ``keep_se: 1``). Under the
MSE loss the residual is weighted per target by the least-squares weight in [0, 1]; weights fit on the
windows they are judged on flatter the residual, so the gain is measured by blocked cross-validation
(each block with the weights of the other blocks), and the model keeps the weights fit on all windows.
Under other losses the residual is kept or dropped whole. With ``residual: blend`` the residual is the
forecast of the Transformer trained alone less the linear path's, so the weight stacks the two models.

``by="ic"`` judges a universe as a quant would: by the information coefficient, each validation date's Pearson
correlation across tickers between forecast and outcome (mean over the horizon steps and targets). The gain is the
per-date IC with the whole residual less the linear path's, its standard error from contiguous blocks of dates,
and the residual is kept whole (or dropped) by the same rule; the losses are still reported. ``by="rank_ic"`` does
the same with each date's Spearman correlation (the RankIC): one stock's jump moves it no more than any other rank,
where it can swing a date's Pearson IC, so the decision follows the measure a universe's forecasts are judged by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from ..networks.closed_form import block_standard_error
from .metrics import date_correlations, date_ranks

__all__ = ["SELECT_BY", "Decision", "ResidualSelection", "block_standard_error", "selection_line"]

#: what a residual's validation gain can be measured in
SELECT_BY = ("loss", "ic", "rank_ic")


@dataclass
class Decision:  # not frozen: torchmetrics rebuilds what compute() returns
    """The residual's validation verdict.

    Attributes:
        weight: the residual's weight per target ``(K,)``: zeros when it is not kept.
        full: validation loss with the whole residual.
        linear: validation loss of the linear path alone.
        best: validation loss of the best weighting (before the keep rule).
        chosen: validation loss of the model as selected.
        gain: the mean gain over the linear path, out of sample (MSE: each block of windows weighted by
            the weights fit on the other blocks).
        gain_se: the standard error of ``gain`` (``inf``: too few windows).
        kept: whether the residual is kept.
        ic_linear: ``by="ic"`` (``"rank_ic"``): the mean per-date validation IC (RankIC) of the linear path alone
            (else NaN).
        ic_full: the same with the whole residual.
    """

    weight: Tensor
    full: float
    linear: float
    best: float
    chosen: float
    gain: float
    gain_se: float
    kept: bool
    ic_linear: float = float("nan")
    ic_full: float = float("nan")


class ResidualSelection(Metric):
    """Per validation window: its time and, per target, the sums over the horizon of ``e^2``, ``e r`` and
    ``r^2`` (``e = y - linear``, ``r`` the residual) under MSE, or the window's loss with and without the
    residual under other losses. States are concatenated across processes; windows are ordered by time
    (then series).

    Args:
        n_targets: targets K.
        mse: whether the loss is the MSE (weights per target) or another loss (all or nothing).
        blocks: contiguous blocks for the standard error.
        keep_se: standard errors the mean gain must exceed (0: any gain keeps the residual).
        by: what the gain is measured in: the validation ``loss``, or the per-date ``ic`` (Pearson) or
            ``rank_ic`` (Spearman) across series (a universe: several tickers per date).
    """

    full_state_update = False

    def __init__(
        self, n_targets: int, mse: bool = True, blocks: int = 10, keep_se: float = 1.0, by: str = "loss"
    ) -> None:
        super().__init__()
        if blocks < 2:
            raise ValueError(f"selection_blocks must be >= 2, got {blocks}")
        if keep_se < 0:
            raise ValueError(f"residual_keep_se must be >= 0, got {keep_se}")
        if by not in SELECT_BY:
            raise ValueError(f"residual_select_by must be one of {', '.join(SELECT_BY)}, got {by!r}")
        self.n_targets, self.mse, self.blocks, self.keep_se, self.by = n_targets, mse, blocks, keep_se, by
        for name in ("time", "series", "ee", "er", "rr", "loss_linear", "loss_full", "base", "res", "y"):
            self.add_state(name, default=[], dist_reduce_fx="cat")
        self.add_state("count", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(
        self,
        time: Tensor,
        base: Tensor,
        residual: Tensor,
        target: Tensor,
        loss_linear: Tensor | None = None,
        loss_full: Tensor | None = None,
        series: Tensor | None = None,
    ) -> None:
        """Add windows: their times ``(B,)``, the linear forecast, the residual and the outcome ``(B, F, K)``;
        under a loss other than MSE, each window's loss without and with the residual ``(B,)``; ``series``
        (B,) tells windows of several series at the same time apart (their order then does not depend on
        how processes shared them)."""
        self.time.append(time.detach().long())
        self.series.append(torch.zeros_like(self.time[-1]) if series is None else series.detach().long())
        self.count += base.shape[0]
        if self.by != "loss":  # the forecasts themselves: an IC needs every window of a date together
            self.base.append(base.detach().double().flatten(1))  # (B, F*K)
            self.res.append(residual.detach().double().flatten(1))  # (B, F*K)
            self.y.append(target.detach().double().flatten(1))  # (B, F*K)
        if self.mse:
            e = (target - base).detach().double()  # (B, F, K)
            r = residual.detach().double()  # (B, F, K)
            self.ee.append((e * e).mean(dim=1))  # (B, K) means over the horizon
            self.er.append((e * r).mean(dim=1))  # (B, K)
            self.rr.append((r * r).mean(dim=1))  # (B, K)
        else:
            if loss_linear is None or loss_full is None:
                raise ValueError("ResidualSelection(mse=False) needs each window's loss_linear and loss_full")
            self.loss_linear.append(loss_linear.detach().double())
            self.loss_full.append(loss_full.detach().double())

    def compute(self) -> Decision:
        series = dim_zero_cat(self.series)  # (N,)
        by_series = torch.argsort(series, stable=True)  # (N,)
        order = by_series[torch.argsort(dim_zero_cat(self.time)[by_series], stable=True)]  # (N,) by time, then series
        if self.mse:
            ee, er, rr = (dim_zero_cat(s)[order] for s in (self.ee, self.er, self.rr))  # (N, K) each
            weight = _clipped_weight(er.sum(0), rr.sum(0))  # (K,) least squares in one variable per target
            per_linear = ee.mean(1)  # (N,) each window's MSE without the residual
            per_full = (ee - 2 * er + rr).mean(1)  # (N,) with the whole residual
            per_best = (ee - 2 * weight * er + weight * weight * rr).mean(1)  # (N,) with the weighted residual
            # the gain is judged out of sample: each block's windows with the weights fit on the other blocks
            per_judged = torch.empty_like(per_linear)  # (N,)
            blocks = torch.tensor_split(torch.arange(len(per_linear)), min(self.blocks, len(per_linear)))
            for idx in blocks if len(blocks) > 1 else ():
                w = _clipped_weight(er.sum(0) - er[idx].sum(0), rr.sum(0) - rr[idx].sum(0))  # (K,)
                per_judged[idx] = (ee[idx] - 2 * w * er[idx] + w * w * rr[idx]).mean(1)
            if len(blocks) < 2:
                per_judged = per_best
        else:
            per_linear = dim_zero_cat(self.loss_linear)[order]  # (N,)
            per_full = dim_zero_cat(self.loss_full)[order]  # (N,)
            keep_all = bool(per_full.mean() < per_linear.mean())  # ties go to the simpler model
            weight = torch.full((self.n_targets,), 1.0 if keep_all else 0.0, dtype=torch.float64)
            per_best = per_judged = per_full if keep_all else per_linear
        if self.by != "loss":
            return self._by_ic(order, per_linear, per_full)
        gain = per_linear - per_judged  # (N,) in time order
        se = block_standard_error(gain, self.blocks)
        linear, full, best, judged = (float(v.mean()) for v in (per_linear, per_full, per_best, gain))
        threshold = self.keep_se * se if self.keep_se > 0 else 0.0
        kept = bool((weight > 0).any()) and judged > threshold
        if not kept:
            weight = torch.zeros_like(weight)
        return Decision(weight.float(), full, linear, best, best if kept else linear, judged, se, kept)

    def _by_ic(self, order: Tensor, per_linear: Tensor, per_full: Tensor) -> Decision:
        """The decision by the per-date IC or RankIC: the whole residual or none (see the module's docstring)."""
        time = dim_zero_cat(self.time)[order]  # (N,)
        base, res, y = (dim_zero_cat(s)[order] for s in (self.base, self.res, self.y))  # (N, F*K) each
        full_forecast = base + res
        if self.by == "rank_ic":  # Spearman: the Pearson correlation of each date's ranks
            base, full_forecast, y = (date_ranks(v, time) for v in (base, full_forecast, y))
        ic_linear, valid_l = date_correlations(base, y, time)  # (G, E): dates in increasing order
        ic_full, valid_f = date_correlations(full_forecast, y, time)
        both = valid_l & valid_f  # (G, E)
        dated = both.any(1)  # (G,): dates with an IC
        linear, full = float(per_linear.mean()), float(per_full.mean())
        if not bool(dated.any()):  # no cross-section (one series, or the few batches of a sanity check): no IC
            weight = torch.zeros(self.n_targets)
            return Decision(weight, full, linear, full, linear, math.nan, math.inf, False)
        n = both.sum(1).clamp_min(1)  # (G,)
        per_l = ((ic_linear * both).sum(1) / n)[dated]  # (D,) each date's IC, mean over steps and targets
        per_f = ((ic_full * both).sum(1) / n)[dated]
        gain = per_f - per_l  # (D,) in date order
        se = block_standard_error(gain, self.blocks)
        judged = float(gain.mean())
        kept = judged > (self.keep_se * se if self.keep_se > 0 else 0.0)
        weight = torch.full((self.n_targets,), 1.0 if kept else 0.0)
        chosen = full if kept else linear
        return Decision(weight, full, linear, full, chosen, judged, se, kept, float(per_l.mean()), float(per_f.mean()))


def _clipped_weight(er: Tensor, rr: Tensor) -> Tensor:
    """``clip(sum e r / sum r^2, 0, 1)`` per target (0 where the residual is zero)."""
    return torch.where(rr > 0, er / rr.clamp_min(1e-300), torch.zeros_like(rr)).clamp(0.0, 1.0)


def selection_line(residual: str, values: Tensor, gate: Tensor, keep_se: float, by: str = "loss") -> str:
    """One plain line: which model is tested, and why. ``values``: the last decision's validation losses
    with the whole residual, of the linear path alone and with the weighted residual, the gain judged
    out of sample and its standard error (``-1``: no decision yet; ``by="ic"`` or ``"rank_ic"``: the validation
    ICs with the whole residual, of the linear path, with the whole residual again, the gain and its standard error);
    ``gate``: the residual's weight per target."""
    if residual == "only":
        return "tested model: the Transformer alone (residual: only)"
    if residual == "off":
        return "tested model: the linear path alone (residual: off)"
    full, linear, best, gain, se = (float(v) for v in values)
    what = "Transformer residual" if residual == "on" else "Transformer (trained alone)"
    if by != "loss":
        if se < 0:
            return f"tested model: linear path + {what} (no validation decided between them)"
        noise = f"; gain {gain:.3g}, {keep_se:g} standard error {keep_se * se:.3g}"
        ic = "RankIC" if by == "rank_ic" else "IC"
        if not bool((gate > 0).any()):
            return (
                f"tested model: the linear path alone; the {what} did not raise the validation {ic} by more than "
                f"noise ({ic} {full:.4f} with it vs {linear:.4f}{noise})"
            )
        return (
            f"tested model: linear path + {what}, which raised the validation {ic} ({ic} {full:.4f} vs "
            f"{linear:.4f}{noise})"
        )
    if full < 0:
        return f"tested model: linear path + {what} (no validation decided between them)"
    noise = "" if se >= 1e300 else f"; gain out of sample {gain:.3g}, {keep_se:g} standard error {keep_se * se:.3g}"
    if not bool((gate > 0).any()):
        return (
            f"tested model: the linear path alone; the {what} did not beat it on validation by more "
            f"than noise (loss {best:.5g} with it vs {linear:.5g}{noise})"
        )
    if bool((gate == 1).all()):
        model = "the Transformer alone (weight 1 on every target)" if residual == "blend" else f"linear path + {what}"
        return (
            f"tested model: {model}, which beat the linear path alone on validation "
            f"(loss {full:.5g} vs {linear:.5g}{noise})"
        )
    weights = ", ".join(f"{float(w):.2f}" for w in gate)
    model = (
        f"linear path + {what} weighted per target by [{weights}]"
        if residual == "on"
        else f"(1 - w) linear path + w {what}, w per target [{weights}]"
    )
    return (
        f"tested model: {model} (least squares on validation): validation loss {best:.5g}, vs {linear:.5g} "
        f"for the linear path alone and {full:.5g} with the whole {what}{noise}"
    )
