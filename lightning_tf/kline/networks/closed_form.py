"""Closed-form (ridge) least squares over windows, and the one-standard-error choice among such maps.

Because a map from the look-back window to the horizon is linear in its weights, the least-squares
weights over every training window have a closed form; only the Gram matrices ``Z'WZ`` and ``Z'WY`` of
the windows are accumulated, so any number of windows fits in memory. Each candidate map (input, plain
or DLinear form, pooled or per channel, ridge) is scored on every validation window, and
:func:`choose_candidate` keeps the one with the lowest validation error or, with ``select_se > 0``, the
simplest (fewest effective degrees of freedom) whose validation error is within that many standard
errors of the lowest, the standard error taken from contiguous blocks of windows (the
one-standard-error rule; Hastie, Tibshirani and Friedman, *The Elements of Statistical Learning*,
3.4.1 and 7.10). On ETTh1 the rule chose more strongly shrunk maps that tested worse more often than
better (``docs/results/ett_etth1_linear_one_se.md``): on the window itself (not
RevIN-normalised), a strong ridge shrinks the forecast toward the training months' mean, which a
later period need not share. So the lowest validation error is the default.

Used by :class:`~.linear.LinearPath` (the forecaster's linear path) and
:class:`lightning_tf.kline.evaluation.baselines.LinearBaseline` (the baseline its verdicts use).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "FORM_NAMES",
    "RIDGES",
    "Candidate",
    "GramStats",
    "ValidationRows",
    "block_standard_error",
    "choose_candidate",
    "closed_form_candidates",
    "effective_dof",
    "fold_decomposed",
    "last_value_matrix",
    "last_value_stats",
    "moving_average",
    "plain_stats",
    "ridge_solutions",
    "sum_halves",
    "trend_matrix",
]

#: the forms of a linear map: of the window, of its trend and remainder (DLinear), of its change from the
#: last value (NLinear); Zeng et al. 2023
FORM_NAMES = {"linear": "Linear", "dlinear": "DLinear", "nlinear": "NLinear"}

#: ridge penalties tried, relative to the mean diagonal of the Gram matrix (the intercept is never shrunk)
RIDGES = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)


def block_standard_error(values: Tensor, blocks: int) -> float:
    """Standard error of the mean of ``values`` (N,) (in time order) from the means of ``blocks``
    contiguous blocks: ``std(block means) / sqrt(blocks)``; ``inf`` with fewer than two blocks."""
    n = min(blocks, values.numel())
    if n < 2:
        return math.inf
    means = torch.stack([part.mean() for part in torch.tensor_split(values.double(), n)])  # (n,)
    return float(means.std(unbiased=True) / math.sqrt(n))


class GramStats:
    """Weighted least-squares statistics of rows ``z`` (R, D) with outputs ``t`` (R, O) and row weights
    ``w`` (R,): ``gram = Z'WZ`` (D, D), ``cross = Z'WT`` (D, O), ``sq = sum w t^2`` (O,), ``weight = sum w``,
    all float64."""

    def __init__(self) -> None:
        self.gram: Tensor | None = None
        self.cross: Tensor | None = None
        self.sq: Tensor | None = None
        self.weight = 0.0
        self.rows = 0

    def add(self, z: Tensor, t: Tensor, w: Tensor | None = None) -> None:
        z, t = z.double(), t.double()
        zw = z if w is None else z * w.double()[:, None]  # (R, D)
        g, c = zw.T @ z, zw.T @ t  # (D, D), (D, O)
        s = (t * t).sum(0) if w is None else (w.double()[:, None] * t * t).sum(0)  # (O,)
        self.gram = g if self.gram is None else self.gram + g
        self.cross = c if self.cross is None else self.cross + c
        self.sq = s if self.sq is None else self.sq + s
        self.weight += float(z.shape[0] if w is None else w.double().sum())
        self.rows += int(z.shape[0])

    def __add__(self, other: GramStats) -> GramStats:
        out = GramStats()
        for stats in (self, other):
            if stats.gram is not None:
                out.gram = stats.gram if out.gram is None else out.gram + stats.gram
                out.cross = stats.cross if out.cross is None else out.cross + stats.cross
                out.sq = stats.sq if out.sq is None else out.sq + stats.sq
                out.weight += stats.weight
                out.rows += stats.rows
        return out

    def residual_mean_square(self, w: Tensor) -> Tensor:
        """The weighted mean squared error of weights ``w`` (D, O) on these rows, per output ``(O,)``."""
        assert self.gram is not None and self.cross is not None and self.sq is not None
        sse = self.sq - 2 * (w * self.cross).sum(0) + (w * (self.gram @ w)).sum(0)  # (O,)
        return sse.clamp_min(0.0) / max(self.weight, 1e-300)


def moving_average(x: Tensor, kernel_size: int) -> Tensor:
    """DLinear's trend: a centred moving average of ``x`` (B, L, C) along time, the ends padded with
    copies of the first and last values (``series_decomp``), ``(B, L, C)``."""
    front, back = (kernel_size - 1) // 2, kernel_size // 2
    x = x.transpose(1, 2)  # (B, C, L)
    x = F.pad(x, (front, back), mode="replicate")  # (B, C, L + k - 1)
    return F.avg_pool1d(x, kernel_size, stride=1).transpose(1, 2)  # (B, L, C)


def sum_halves(z: Tensor) -> Tensor:
    """``[remainder, trend, 1]`` columns (..., 2n + 1) as ``[window, 1]`` columns (..., n + 1): the window is
    the sum of its remainder and trend."""
    n = (z.shape[-1] - 1) // 2
    return torch.cat((z[..., :n] + z[..., n : 2 * n], z[..., -1:]), dim=-1)


def plain_stats(stats: GramStats) -> GramStats:
    """The Gram statistics of the ``[window, 1]`` rows, from those of the ``[remainder, trend, 1]`` rows
    (``T G T'`` and ``T C`` with ``T`` the sum of the halves): one pass serves both forms."""
    assert stats.gram is not None and stats.cross is not None
    out = GramStats()
    out.gram = sum_halves(sum_halves(stats.gram).T).T
    out.cross = sum_halves(stats.cross.T).T
    out.sq, out.weight, out.rows = stats.sq, stats.weight, stats.rows
    return out


def last_value_matrix(features: int) -> Tensor:
    """``M`` (D, D) float64 with ``[window - last, 1] = [window, 1] @ M`` for ``[window, 1]`` rows of ``D - 1``
    values: NLinear's input, each value less the window's last."""
    m = torch.eye(features, dtype=torch.float64)
    m[features - 2, : features - 1] -= 1.0
    return m


def last_value_stats(stats: GramStats) -> GramStats:
    """The statistics of NLinear's rows ``[window - last, 1]`` with outputs ``t - last`` (Zeng et al. 2023: the
    map forecasts the change from the last value, so its weights over the window sum to one and a ridge
    shrinks the forecast toward persistence rather than toward the training mean), from those of the
    ``[window, 1]`` rows: ``M'GM``, ``M'(C - G e 1')`` and ``sq - 2 C_e + G_ee`` with ``e`` the last value's
    column."""
    assert stats.gram is not None and stats.cross is not None and stats.sq is not None
    g, c = stats.gram, stats.cross
    last = g.shape[0] - 2
    m = last_value_matrix(g.shape[0])
    out = GramStats()
    out.gram = m.T @ g @ m
    out.cross = m.T @ (c - g[:, last : last + 1])  # (D, O): the outputs less the last value
    out.sq = stats.sq - 2 * c[last] + g[last, last]
    out.weight, out.rows = stats.weight, stats.rows
    return out


def trend_matrix(context_len: int, kernel_size: int) -> Tensor:
    """``M`` (L, L) float64 with ``trend = window @ M``: DLinear's moving average (ends padded with the
    first and last values) as a matrix."""
    eye = torch.eye(context_len, dtype=torch.float64)[:, :, None]  # (L, L, 1): one unit series per row
    return moving_average(eye, kernel_size)[..., 0]  # (L, L): row j is the trend of unit series j


def fold_decomposed(w: Tensor, trend: Tensor, channels: int = 1) -> Tensor:
    """Weights over ``[remainder, trend, 1]`` rows ``(2 L C + 1, O)`` as the same map over ``[window, 1]``
    rows ``(L C + 1, O)``: ``x (I - M) W_r + x M W_t = x ((I - M) W_r + M W_t)``."""
    L = trend.shape[0]
    n = L * channels
    w_r = w[:n].reshape(L, channels, -1)  # (L, C, O)
    w_t = w[n : 2 * n].reshape(L, channels, -1)  # (L, C, O)
    eye = torch.eye(L, dtype=w.dtype)
    folded = torch.einsum("lm,mco->lco", eye - trend, w_r) + torch.einsum("lm,mco->lco", trend, w_t)  # (L, C, O)
    return torch.cat((folded.reshape(n, -1), w[-1:]), dim=0)  # (L C + 1, O)


def ridge_solutions(stats: GramStats, ridges: Sequence[float] = RIDGES) -> list[tuple[float, Tensor]]:
    """``(ridge, weights (D, O))`` for each penalty: ``(Z'WZ + r s I) W = Z'WT`` with ``s`` the mean
    diagonal of the Gram matrix; the last feature (the intercept) is never penalised."""
    if stats.gram is None or stats.cross is None or stats.rows == 0:
        raise ValueError("closed-form fit: the training windows are empty")
    gram, cross = stats.gram, stats.cross
    scale = float(gram.diagonal().mean())
    eye = torch.eye(gram.shape[0], dtype=gram.dtype)
    eye[-1, -1] = 0.0
    out = []
    for r in ridges:
        if r > 0:  # positive definite (up to the intercept, which the data pins): a fast solve
            try:
                out.append((float(r), torch.linalg.solve(gram + r * scale * eye, cross)))
                continue
            except RuntimeError:  # singular after all (e.g. a constant feature): least squares below
                pass
        # lstsq rather than solve: without a ridge the Gram matrix may be singular
        out.append((float(r), torch.linalg.lstsq(gram + r * scale * eye, cross, driver="gelsd").solution))
    return out


class ValidationRows:
    """Validation windows kept row by row, per group: ``[window, 1]`` rows ``z`` (N, D), outputs ``t`` (N, O)
    and row weights ``w`` (N,), float64, in the order they arrive (the loader's: each series in time order),
    so any candidate's error on each window, and its spread over contiguous blocks, can be scored."""

    def __init__(self) -> None:
        self.parts: list[list[tuple[Tensor, Tensor, Tensor]]] = []

    def add(self, rows: Sequence[tuple[Tensor, Tensor, Tensor]]) -> None:
        """Add one batch: per group ``(z (B, 2D - 1), t (B, O), w (B,))`` with ``z = [remainder, trend, 1]``."""
        if not self.parts:
            self.parts = [[] for _ in rows]
        for part, (z, t, w) in zip(self.parts, rows, strict=True):
            part.append((sum_halves(z.double()), t.double(), w.double()))

    @property
    def rows(self) -> int:
        return sum(z.shape[0] for z, _, _ in self.parts[0]) if self.parts else 0

    def window_errors(self, folded: Sequence[Tensor]) -> Tensor:
        """Each window's squared error on the model scale, averaged over groups and outputs, for weights
        ``folded`` (one (D, O) per group over ``[window, 1]`` rows): ``(N,)``; its mean is the MSE."""
        total: Tensor | None = None
        for part, w in zip(self.parts, folded, strict=True):
            per = torch.cat([((z @ w - t) ** 2).mean(1) * r for z, t, r in part])  # (N,)
            total = per if total is None else total + per
        assert total is not None
        return total / len(self.parts)


def effective_dof(stats: GramStats, ridges: Sequence[float]) -> list[float]:
    """The effective degrees of freedom ``tr(Z (Z'WZ + r s P)^-1 Z'W)`` of the ridge fit on ``stats`` for each
    penalty (Hastie, Tibshirani and Friedman, *The Elements of Statistical Learning*, 3.4.1): 1 for the
    intercept, which is never penalised, plus ``sum e / (e + r s)`` over the eigenvalues ``e`` of the other
    features' Gram matrix with the intercept projected out (its rank without a ridge)."""
    assert stats.gram is not None
    g = stats.gram
    scale = float(g.diagonal().mean())
    centred = g[:-1, :-1] - torch.outer(g[:-1, -1], g[-1, :-1]) / g[-1, -1].clamp_min(1e-300)  # (D-1, D-1)
    ev = torch.linalg.eigvalsh(centred).clamp_min(0.0)  # (D-1,)
    rank = int((ev > ev.max() * ev.numel() * 1e-13).sum())
    return [1.0 + (rank if r == 0 else float((ev / (ev + r * scale)).sum())) for r in ridges]


@dataclass
class Candidate:
    """One closed-form linear map tried on validation: its input, form, pooling and ridge, its effective
    degrees of freedom (summed over the groups' maps), the groups' training statistics of its form, and its
    squared error on each validation window ``(N,)`` (None without validation). The weights are solved
    again on demand (:meth:`weights`), so a long list of candidates holds no weights."""

    input: str
    form: str
    pooling: str
    ridge: float
    dof: float
    train_stats: list[GramStats]
    val_errors: Tensor | None
    trend: Tensor  # (L, L): folds DLinear weights into maps of the window
    channels: int = 1  # channels per group's window

    @property
    def val_mse(self) -> float | None:
        return None if self.val_errors is None else float(self.val_errors.mean())

    def weights(self) -> list[Tensor]:
        """The weights per group over the form's rows, ``(D, O)`` each."""
        if self.pooling == "pooled":
            total = self.train_stats[0]
            for s in self.train_stats[1:]:
                total = total + s
            return [ridge_solutions(total, (self.ridge,))[0][1]] * len(self.train_stats)
        return [ridge_solutions(s, (self.ridge,))[0][1] for s in self.train_stats]

    def fold(self, weights: Sequence[Tensor]) -> list[Tensor]:
        """``weights`` (per group, over the form's rows) as maps of ``[window, 1]`` rows."""
        if self.form == "dlinear":
            return [fold_decomposed(w, self.trend, self.channels) for w in weights]
        if self.form == "nlinear":  # Z_n W + z_last 1' = Z (M W + e_last 1')
            m = last_value_matrix(weights[0].shape[0])
            out = []
            for w in weights:
                folded = m @ w  # (D, O)
                folded[-2] += 1.0
                out.append(folded)
            return out
        return list(weights)

    def describe(self) -> str:
        """E.g. ``pooled DLinear on the RevIN-normalised window, ridge 0.1``."""
        words = {"pooled": "pooled", "per_channel": "per-channel", "mixing": "all-channel"}[self.pooling]
        source = {"revin": " on the RevIN-normalised window", "raw": ""}.get(self.input, "")
        return f"{words} {FORM_NAMES[self.form]}{source}, ridge {self.ridge:g}"


def closed_form_candidates(
    train: list[GramStats],
    val: ValidationRows | None,
    poolings: Sequence[str],
    forms: Sequence[str],
    ridges: Sequence[float],
    trend: Tensor,
    channels: int = 1,
    source: str = "raw",
) -> list[Candidate]:
    """Every (form, pooling, ridge) fit on the groups' training statistics of ``[remainder, trend, 1]`` rows,
    scored on each validation window, in the order tried (forms, then poolings, then ridges ascending).
    ``pooled`` fits one map on all groups; ``trend`` (L, L) folds DLinear weights into maps of the window
    of ``channels`` channels per group. Without validation only the first is returned."""
    if "nlinear" in forms and channels != 1:
        raise ValueError("the NLinear form needs each group's own window (not mixing)")
    out: list[Candidate] = []
    groups = len(train)
    for form in forms:
        stats = train if form == "dlinear" else [plain_stats(s) for s in train]
        if form == "nlinear":
            stats = [last_value_stats(s) for s in stats]
        for pooling in poolings:
            if val is None:
                return [Candidate(source, form, pooling, float(ridges[0]), math.nan, stats, None, trend, channels)]
            if pooling == "pooled":
                total = stats[0]
                for s in stats[1:]:
                    total = total + s
                fits = [(r, [w] * groups) for r, w in ridge_solutions(total, ridges)]
                dofs = effective_dof(total, ridges)
            else:
                per = [ridge_solutions(s, ridges) for s in stats]
                fits = [(per[0][i][0], [p[i][1] for p in per]) for i in range(len(ridges))]
                each = [effective_dof(s, ridges) for s in stats]
                dofs = [sum(d[i] for d in each) for i in range(len(ridges))]
            for (r, ws), dof in zip(fits, dofs, strict=True):
                c = Candidate(source, form, pooling, r, dof, stats, None, trend, channels)
                c.val_errors = val.window_errors(c.fold(ws))
                out.append(c)
    return out


def choose_candidate(candidates: Sequence[Candidate], blocks: int = 10, select_se: float = 0.0) -> Candidate:
    """The candidate with the lowest validation error (``select_se: 0``), or by the one-standard-error rule:
    the fewest effective degrees of freedom among those whose validation error exceeds the lowest by at most
    ``select_se`` standard errors of the difference (from ``blocks`` contiguous blocks of validation
    windows). Ties (and no validation) keep the first tried."""
    if not candidates:
        raise ValueError("no linear candidate to choose from")
    if candidates[0].val_errors is None or candidates[0].val_errors.numel() == 0:
        return candidates[0]
    lowest = min(candidates, key=lambda c: float(c.val_errors.mean()))  # type: ignore[union-attr]
    if select_se == 0:
        return lowest
    eligible = []
    for c in candidates:
        diff = c.val_errors - lowest.val_errors  # type: ignore[operator]
        if float(diff.mean()) <= select_se * block_standard_error(diff, blocks):
            eligible.append(c)
    return min(eligible, key=lambda c: (c.dof, float(c.val_errors.mean())))  # type: ignore[union-attr]
