"""Closed-form (ridge) least squares over windows, and the forecaster's linear path.

Zeng et al. 2023, "Are Transformers Effective for Time Series Forecasting?" (DLinear, NLinear): one
linear map from the look-back window to the whole horizon, shared by the channels or one per
channel, rivals the long-term forecasting Transformers. Li et al. 2023, "Revisiting Long-term Time
Series Forecasting: An Investigation on Linear Mapping" (RLinear): the same map on the RevIN-normalised
window. Because such a map is linear in its weights, the least-squares weights over every training
window have a closed form; only the Gram matrices ``Z'WZ`` and ``Z'WY`` of the windows are
accumulated, so any number of windows fits in memory, and the error of any candidate weights on the
validation windows follows from the validation Gram matrices without another pass.

* :class:`GramStats`, :func:`ridge_solutions`, :func:`validation_error`: the closed form, used here and
  by :class:`~.baselines.LinearBaseline`.
* :class:`LinearPath`: the linear part of :class:`~.network.PatchTST` (``residual: on`` / ``off``): a
  map from each target channel's normalised window to its normalised future (``pooled``: one map for
  every channel; ``per_channel``: one each), or from every channel's window to every target
  (``mixing``), plus an intercept. Its weights are parameters (saved in every checkpoint), set by
  :meth:`LinearPath.fit` before the first training step and then frozen or fine-tuned.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from .module import KLineForecaster

__all__ = [
    "RIDGES",
    "GramStats",
    "LinearFit",
    "LinearInput",
    "LinearPath",
    "Pooling",
    "fit_closed_form",
    "fold_decomposed",
    "moving_average",
    "plain_stats",
    "ridge_solutions",
    "sum_halves",
    "trend_matrix",
    "validation_error",
]

log = logging.getLogger(__name__)

Pooling = Literal["auto", "pooled", "per_channel"]
LinearInput = Literal["auto", "revin", "raw"]

#: ridge penalties tried, relative to the mean diagonal of the Gram matrix (the intercept is never shrunk)
RIDGES = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)


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


def validation_error(w: Tensor, stats: GramStats) -> float:
    """The weighted squared error of ``w`` (D, O) on the rows of ``stats`` up to a term that does not
    depend on ``w`` (``sum w t^2``): ``-2 tr(W'Z'WT) + tr(W'Z'WZ W)``."""
    assert stats.gram is not None and stats.cross is not None
    return float(-2 * (w * stats.cross).sum() + (w * (stats.gram @ w)).sum())


@dataclass(frozen=True)
class LinearFit:
    """What :meth:`LinearPath.fit` chose: the input (``revin`` or ``raw``), the form (``linear``: the window;
    ``dlinear``: its trend and remainder, folded back into one map of the window), the pooling, the ridge, the
    training and validation mean squared errors on the model scale (None without validation windows), the
    training error's root mean square per target and horizon on the normalised scale, and the mean
    squared window scale per target (the weights)."""

    input: str
    form: str
    pooling: str
    ridge: float
    train_mse: float
    val_mse: float | None
    residual_std: Tensor  # (K, F)
    mean_weight: Tensor  # (K,)


class LinearPath(nn.Module):
    """The linear part of the forecaster: normalised window to normalised horizon, plus an intercept.

    ``per target`` layout (``mixing=False``): weight ``(K, L + 1, F)``; target k's forecast is
    ``x[:, :, c_k] @ weight[k, :L] + weight[k, L]`` from its own channel ``c_k``. ``pooled`` fills every
    target's slot with one map fit on all of them (they may part when fine-tuned); ``per_channel``
    fits one map per target. ``mixing=True``: weight ``(1, L C + 1, F K)`` over every channel's window.

    Args:
        context_len: context length L.
        horizon: forecast horizon F.
        n_features: input channels C.
        n_targets: targets K.
        mixing: map every channel to every target instead of each target from its own channel.
        pooling: ``pooled``, ``per_channel``, or ``auto`` (the one with the lower validation error).
        trainable: fine-tune the closed-form weights with the rest of the model (else frozen).
        kernel_size: moving-average window of the DLinear form tried by :meth:`fit`.
    """

    fitted: Tensor
    ridge: Tensor
    pooled: Tensor
    normalized: Tensor

    def __init__(
        self,
        context_len: int,
        horizon: int,
        n_features: int,
        n_targets: int,
        mixing: bool = False,
        pooling: Pooling = "auto",
        trainable: bool = False,
        kernel_size: int = 25,
    ) -> None:
        super().__init__()
        if pooling not in ("auto", "pooled", "per_channel"):
            raise ValueError(f"pooling must be 'auto', 'pooled' or 'per_channel', got {pooling!r}")
        self.context_len, self.horizon, self.n_features, self.n_targets = context_len, horizon, n_features, n_targets
        self.mixing, self.pooling, self.kernel_size = mixing, pooling, kernel_size
        L, F, C, K = context_len, horizon, n_features, n_targets
        shape = (1, L * C + 1, F * K) if mixing else (K, L + 1, F)
        # zeros: no draw from the random state, so the rest of the model initialises as without this path
        self.weight = nn.Parameter(torch.zeros(shape), requires_grad=trainable)
        self.register_buffer("fitted", torch.tensor(False))
        self.register_buffer("ridge", torch.tensor(float("nan"), dtype=torch.float64))
        self.register_buffer("pooled", torch.tensor(False))
        # whether the map reads the RevIN-normalised window (True) or the window itself; set by fit. The buffer
        # carries it in checkpoints; ``reads_normalized`` mirrors it as a Python bool, so forward never
        # branches on a tensor (torch.export and torch.compile would see a data-dependent branch)
        self.register_buffer("normalized", torch.tensor(True))
        self.reads_normalized = True

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: object, **kwargs: object) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)  # type: ignore[arg-type]
        self.reads_normalized = bool(self.normalized)

    def extra_repr(self) -> str:
        mode = "mixing" if self.mixing else self.pooling
        return f"context_len={self.context_len}, horizon={self.horizon}, {mode}, trainable={self.weight.requires_grad}"

    def forward(self, x: Tensor, channels: Sequence[int]) -> Tensor:
        """Forecast ``(B, F, K)`` from the window ``x`` (B, L, C), both normalised or both on the model
        scale (``normalized``); ``channels`` (K,) is each target's input channel (per-target layout)."""
        B, L = x.shape[0], self.context_len
        w = self.weight.to(x.dtype)
        if self.mixing:
            out = x.reshape(B, -1) @ w[0, :-1] + w[0, -1]  # (B, F*K)
            return out.view(B, self.horizon, self.n_targets)  # (B, F, K)
        own = x[..., list(channels)]  # (B, L, K)
        return torch.einsum("blk,klf->bfk", own, w[:, :L]) + w[:, L].T  # (B, F, K)

    def _rows(self, x: Tensor, y: Tensor, w: Tensor, channels: Sequence[int]) -> list[tuple[Tensor, Tensor, Tensor]]:
        """Decomposed design rows per group: per target k ``(z (B, 2L+1), t (B, F), weight (B,))`` with
        ``z = [remainder, trend, 1]`` of its own channel; mixing one group ``(z (B, 2 L C + 1), t (B, F K), mean
        weight over the targets (B,))``."""
        B = x.shape[0]
        own = x if self.mixing else x[..., list(channels)]  # (B, L, C')
        trend = moving_average(own, self.kernel_size)  # (B, L, C')
        parts = torch.cat((own - trend, trend), dim=1)  # (B, 2L, C')
        ones = x.new_ones(B, 1)
        if self.mixing:
            return [(torch.cat((parts.reshape(B, -1), ones), dim=1), y.reshape(B, -1), w.mean(dim=1))]
        return [(torch.cat((parts[:, :, k], ones), dim=1), y[:, :, k], w[:, k]) for k in range(len(channels))]

    def _folded(self, ws: list[Tensor], form: str) -> Tensor:
        """The chosen weights per group as maps of the window ``(groups, L C' + 1, O)``."""
        if form == "linear":
            return torch.stack(ws)
        trend = trend_matrix(self.context_len, self.kernel_size)
        channels = self.n_features if self.mixing else 1
        return torch.stack([fold_decomposed(w, trend, channels) for w in ws])

    @torch.no_grad()
    def fit(
        self,
        train: Iterable[tuple[Tensor, Tensor, Tensor]],
        val: Iterable[tuple[Tensor, Tensor, Tensor]] | None,
        channels: Sequence[int],
        ridges: Sequence[float] = RIDGES,
        normalized: bool = True,
    ) -> LinearFit:
        """Set the weights to the weighted ridge least-squares solution on the training windows.

        Args:
            train: batches ``(x (B, L, C), y (B, F, K), w (B, K))``: normalised windows, normalised
                targets and each window's weight per target (the squared scale that maps the normalised
                error back to the model scale, so the fit minimises the training loss itself).
            val: validation batches of the same form, or None; they choose the form (``linear`` or
                ``dlinear``), the ridge and the pooling (with None: the plain form, the smallest ridge, and
                ``pooled`` under ``auto``).
            channels: each target's input channel (per-target layout).
            ridges: the penalties tried (relative to the Gram matrix's mean diagonal).
            normalized: whether the batches are RevIN-normalised (recorded in ``normalized``).

        Returns:
            What was chosen and its errors.
        """
        groups = 1 if self.mixing else len(channels)
        tr = [GramStats() for _ in range(groups)]
        for x, y, w in train:
            for stats, rows in zip(tr, self._rows(x, y, w, channels), strict=True):
                stats.add(*rows)
        va: list[GramStats] | None = None
        if val is not None:
            va = [GramStats() for _ in range(groups)]
            for x, y, w in val:
                for stats, rows in zip(va, self._rows(x, y, w, channels), strict=True):
                    stats.add(*rows)
            if va[0].rows == 0:
                va = None
        poolings = ["per_channel"] if self.mixing or groups == 1 else (
            ["pooled", "per_channel"] if self.pooling == "auto" else [self.pooling]
        )
        forms = {
            "linear": ([plain_stats(s) for s in tr], None if va is None else [plain_stats(s) for s in va]),
            "dlinear": (tr, va),
        }
        best: tuple[float, str, str, float, list[Tensor], list[GramStats], list[GramStats] | None] | None = None
        for form, (train_stats, val_stats) in forms.items():
            for pooling in poolings:
                if pooling == "pooled":
                    total = train_stats[0]
                    for s in train_stats[1:]:
                        total = total + s
                    candidates = [(r, [w] * groups) for r, w in ridge_solutions(total, ridges)]
                else:
                    per = [ridge_solutions(s, ridges) for s in train_stats]
                    candidates = [(per[0][i][0], [p[i][1] for p in per]) for i in range(len(ridges))]
                for r, ws in candidates:
                    pairs = zip(ws, val_stats, strict=True) if val_stats else ()
                    score = sum(validation_error(w, s) for w, s in pairs)
                    # strictly lower: ties (and no validation) keep the first, the plainest candidate tried
                    if best is None or score < best[0]:
                        best = (score, form, pooling, r, ws, train_stats, val_stats)
                if val_stats is None:
                    break  # without validation: the smallest ridge of the first pooling
        assert best is not None
        _, form, pooling, ridge, ws, tr, va = best
        self.weight.data.copy_(self._folded(ws, form).to(self.weight.dtype).view_as(self.weight))
        self.fitted.fill_(True)
        self.ridge.fill_(ridge)
        self.pooled.fill_(pooling == "pooled")
        self.normalized.fill_(normalized)
        self.reads_normalized = normalized
        train_ms = torch.stack([s.residual_mean_square(w) for s, w in zip(tr, ws, strict=True)])  # (groups, O)

        def model_scale_mse(stats: list[GramStats]) -> float:
            # residual_mean_square divides the weighted error by the summed weights; times those, over
            # the rows and outputs, it is the mean squared error on the model scale
            sse = sum(float((s.residual_mean_square(w) * s.weight).sum()) for s, w in zip(stats, ws, strict=True))
            return sse / sum(s.rows * w.shape[1] for s, w in zip(stats, ws, strict=True))

        train_mse = model_scale_mse(tr)
        val_mse = model_scale_mse(va) if va is not None else None
        if self.mixing:
            residual_std = train_ms[0].view(self.horizon, self.n_targets).T.sqrt()  # (K, F)
        else:
            residual_std = train_ms.sqrt()  # (K, F)
        if self.mixing:
            mean_weight = torch.full((self.n_targets,), tr[0].weight / max(tr[0].rows, 1))
        else:
            mean_weight = torch.tensor([s.weight / max(s.rows, 1) for s in tr])
        return LinearFit("revin" if normalized else "raw", form, pooling, ridge, train_mse, val_mse,
                         residual_std.float(),
                         mean_weight.float())


def fit_closed_form(model: KLineForecaster) -> None:
    """Fit ``model``'s linear path and linear baseline on its trainer's training windows, once: closed form
    on every training window, the ridge (and the path's input and pooling, the baseline's variant) chosen
    on the validation windows when the trainer validates. Every process reads all windows in order, so
    all fit the same weights. A fitted path is kept; a fitted baseline is kept when resuming."""
    from lightning.pytorch.utilities import rank_zero_info

    from .windows import in_order, xy_pairs

    trainer = model.trainer
    path, base = model.net.linear, model.linear_baseline
    fit_path = path is not None and not bool(path.fitted)
    fit_base = base is not None and not (base.fitted and trainer.ckpt_path is not None)
    if not (fit_path or fit_base):
        return
    train = in_order(trainer.train_dataloader)
    if train is None:
        log.info("linear fits skipped: the training loader has no dataset to read in order")
        return
    val = in_order(trainer.val_dataloaders)
    if fit_path:
        ridge = model.hparams.linear_ridge
        val_pairs = None if val is None else (lambda: xy_pairs(val))
        fit = model.net.fit_linear(lambda: xy_pairs(train), val_pairs,
                                   ridges=RIDGES if ridge is None else (float(ridge),))
        val_mse = f", validation MSE {fit.val_mse:.5g}" if fit.val_mse is not None else ""
        rank_zero_info(f"linear path fit in closed form on the training windows: {fit.input} input, {fit.form}, "
                       f"{fit.pooling}, ridge {fit.ridge:g}, training MSE {fit.train_mse:.5g}{val_mse}")
    if fit_base:
        assert base is not None
        base.target_channels = model.target_channels
        base.fit(xy_pairs(train), None if val is None else xy_pairs(val))
        log.info("linear baseline fit on the training windows: %s", base.describe())
