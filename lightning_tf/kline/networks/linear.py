"""The forecaster's linear path: a closed-form linear map from the look-back window to the horizon.

Zeng et al. 2023, "Are Transformers Effective for Time Series Forecasting?" (DLinear, NLinear): one
linear map from the look-back window to the whole horizon, shared by the channels or one per
channel, rivals the long-term forecasting Transformers. Li et al. 2023, "Revisiting Long-term Time
Series Forecasting: An Investigation on Linear Mapping" (RLinear): the same map on the RevIN-normalised
window. The closed form and the choice among maps are in :mod:`.closed_form`.

:class:`LinearPath` is the linear part of :class:`~.network.ForecastNet` (``residual: on`` / ``off``): a
map from each target channel's normalised window to its normalised future (``pooled``: one map for
every channel; ``per_channel``: one each), or from every channel's window to every target
(``mixing``), plus an intercept. Its weights are parameters (saved in every checkpoint), set by
:meth:`LinearPath.fit` before the first training step and then frozen or fine-tuned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from .closed_form import (
    RIDGES,
    Candidate,
    GramStats,
    ValidationRows,
    choose_candidate,
    closed_form_candidates,
    moving_average,
    trend_matrix,
)

__all__ = ["LinearFit", "LinearInput", "LinearPath", "Pooling"]

Pooling = Literal["auto", "pooled", "per_channel"]
LinearInput = Literal["auto", "revin", "raw"]


@dataclass(frozen=True)
class LinearFit:
    """What :meth:`LinearPath.fit` chose: the input (``revin`` or ``raw``), the form (``linear``: the window;
    ``dlinear``: its trend and remainder; ``nlinear``: its change from the last value; each folded back into
    one map of the window), the pooling, the ridge, the training and validation mean squared errors on the model scale (None without validation windows), the
    training error's root mean square per target and horizon on the normalised scale, the mean squared
    window scale per target (the weights), the effective degrees of freedom, and the candidate with the
    lowest validation error when the one-standard-error rule chose a simpler one (else None) with its error."""

    input: str
    form: str
    pooling: str
    ridge: float
    train_mse: float
    val_mse: float | None
    residual_std: Tensor  # (K, F)
    mean_weight: Tensor  # (K,)
    dof: float = math.nan
    lowest: str | None = None
    lowest_val_mse: float | None = None


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

    @torch.no_grad()
    def candidates(
        self,
        train: Iterable[tuple[Tensor, Tensor, Tensor]],
        val: Iterable[tuple[Tensor, Tensor, Tensor]] | None,
        channels: Sequence[int],
        ridges: Sequence[float] = RIDGES,
        normalized: bool = True,
    ) -> list[Candidate]:
        """Every closed-form map this path may take, fit on the training windows and scored on each
        validation window.

        Args:
            train: batches ``(x (B, L, C), y (B, F, K), w (B, K))``: normalised windows, normalised
                targets and each window's weight per target (the squared scale that maps the normalised
                error back to the model scale, so the fit minimises the training loss itself).
            val: validation batches of the same form, or None.
            channels: each target's input channel (per-target layout).
            ridges: the penalties tried (relative to the Gram matrix's mean diagonal).
            normalized: whether the batches are RevIN-normalised.

        Returns:
            The candidates in the order tried: the plain form, DLinear, NLinear (not with ``mixing``),
            ``pooled`` before ``per_channel`` (under ``auto``), ridges ascending.
        """
        groups = 1 if self.mixing else len(channels)
        tr = [GramStats() for _ in range(groups)]
        for x, y, w in train:
            for stats, rows in zip(tr, self._rows(x, y, w, channels), strict=True):
                stats.add(*rows)
        va: ValidationRows | None = None
        if val is not None:
            va = ValidationRows()
            for x, y, w in val:
                va.add(self._rows(x, y, w, channels))
            if va.rows == 0:
                va = None
        poolings = (
            ["per_channel"]
            if self.mixing or groups == 1
            else (["pooled", "per_channel"] if self.pooling == "auto" else [self.pooling])
        )
        trend = trend_matrix(self.context_len, self.kernel_size)
        # without validation: only the first, the plain form with the smallest ridge and the first pooling
        forms = ("linear", "dlinear") if self.mixing else ("linear", "dlinear", "nlinear")
        return closed_form_candidates(
            tr,
            va,
            poolings,
            forms,
            ridges,
            trend,
            self.n_features if self.mixing else 1,
            "revin" if normalized else "raw",
        )

    @torch.no_grad()
    def apply(self, chosen: Candidate, lowest: Candidate | None = None) -> LinearFit:
        """Take ``chosen``'s weights (``lowest``: the candidate with the lowest validation error, reported
        when it is not the one chosen) and return what was chosen with its errors."""
        ws = chosen.weights()
        self.weight.data.copy_(torch.stack(chosen.fold(ws)).to(self.weight.dtype).view_as(self.weight))
        self.fitted.fill_(True)
        self.ridge.fill_(chosen.ridge)
        self.pooled.fill_(chosen.pooling == "pooled")
        normalized = chosen.input == "revin"
        self.normalized.fill_(normalized)
        self.reads_normalized = normalized
        tr = chosen.train_stats
        train_ms = torch.stack([s.residual_mean_square(w) for s, w in zip(tr, ws, strict=True)])  # (groups, O)
        # residual_mean_square divides the weighted error by the summed weights; times those, over the rows
        # and outputs, it is the mean squared error on the model scale
        sse = sum(float((s.residual_mean_square(w) * s.weight).sum()) for s, w in zip(tr, ws, strict=True))
        train_mse = sse / sum(s.rows * w.shape[1] for s, w in zip(tr, ws, strict=True))
        if self.mixing:
            residual_std = train_ms[0].view(self.horizon, self.n_targets).T.sqrt()  # (K, F)
            mean_weight = torch.full((self.n_targets,), tr[0].weight / max(tr[0].rows, 1))
        else:
            residual_std = train_ms.sqrt()  # (K, F)
            mean_weight = torch.tensor([s.weight / max(s.rows, 1) for s in tr])
        other = lowest is not None and lowest is not chosen
        return LinearFit(
            chosen.input,
            chosen.form,
            chosen.pooling,
            chosen.ridge,
            train_mse,
            chosen.val_mse,
            residual_std.float(),
            mean_weight.float(),
            chosen.dof,
            lowest.describe() if other else None,
            lowest.val_mse if other else None,
        )  # type: ignore[union-attr]

    @torch.no_grad()
    def fit(
        self,
        train: Iterable[tuple[Tensor, Tensor, Tensor]],
        val: Iterable[tuple[Tensor, Tensor, Tensor]] | None,
        channels: Sequence[int],
        ridges: Sequence[float] = RIDGES,
        normalized: bool = True,
        blocks: int = 10,
        select_se: float = 0.0,
    ) -> LinearFit:
        """Set the weights to the weighted ridge least-squares solution on the training windows, the form
        (``linear`` or ``dlinear``), the ridge and the pooling chosen on the validation windows by
        :func:`choose_candidate` (without them: the plain form, the smallest ridge, ``pooled`` under
        ``auto``). Arguments as :meth:`candidates`; ``blocks`` and ``select_se`` as :func:`choose_candidate`."""
        found = self.candidates(train, val, channels, ridges, normalized)
        chosen = choose_candidate(found, blocks, select_se)
        return self.apply(chosen, min(found, key=lambda c: c.val_mse if c.val_mse is not None else 0.0))
