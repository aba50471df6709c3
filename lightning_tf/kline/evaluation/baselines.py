"""Baseline forecasts scored on exactly the windows the model is scored on.

* :func:`persistence`: the naive forecast. Level targets (prices, ETT loads): the last observed
  value for every horizon. Return targets: a zero return (the price stays where it is).
* :func:`mean_forecast`: level targets: the mean of the context window. Return targets: the drift,
  the mean one-bar return of the context, accumulated over the horizon for cumulative returns
  (the random walk with drift).
* :func:`drift`: level targets: the line through the first and last context values, extended
  (Hyndman and Athanasopoulos, "Forecasting: Principles and Practice", sec. 5.2).
* :class:`LinearBaseline`: the strongest simple linear model, Zeng et al. 2023, "Are Transformers
  Effective for Time Series Forecasting?": a linear map from the context to the horizon, either of
  the context itself (Linear) or of its moving-average trend and the remainder (DLinear), one map
  shared by the target channels (``pooled``, DLinear's ``individual=False``) or one per channel
  (``per_channel``), each from the channel's own history; for targets that are not input channels,
  one map from every channel's window (``mixing``). Every variant is linear in its weights, so the
  least-squares weights have a closed form (:mod:`.networks.linear`); all are fit on the training windows in
  one pass, and the variant and ridge penalty with the lowest validation error are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..networks.closed_form import (
    FORM_NAMES,
    RIDGES,
    GramStats,
    ValidationRows,
    choose_candidate,
    closed_form_candidates,
    moving_average,
    sum_halves,
    trend_matrix,
)

__all__ = ["LinearBaseline", "drift", "mean_forecast", "moving_average", "persistence"]


def persistence(past: Tensor, horizon: int, returns: bool = False) -> Tensor:
    """Naive forecast from ``past`` (B, L, K): the last value (levels) or zero (returns), ``(B, F, K)``."""
    last = past[:, -1:, :]  # (B, 1, K)
    if returns:
        last = torch.zeros_like(last)
    return last.expand(-1, horizon, -1).clone()  # (B, F, K)


def mean_forecast(past: Tensor, horizon: int, returns: bool = False, cumulative: bool = True) -> Tensor:
    """Mean forecast from ``past`` (B, L, K) -> ``(B, F, K)``.

    Levels: the context mean for every horizon. Returns (``past`` holds one-bar returns): the mean
    one-bar return ``mu``; for cumulative targets (return from the last close to horizon h) the
    forecast at horizon h is ``h * mu``, for one-bar targets it is ``mu``.
    """
    mu = past.mean(dim=1, keepdim=True)  # (B, 1, K)
    if returns and cumulative:
        steps = torch.arange(1, horizon + 1, dtype=past.dtype, device=past.device)  # (F,)
        return mu * steps[None, :, None]  # (B, F, K)
    return mu.expand(-1, horizon, -1).clone()  # (B, F, K)


def drift(past: Tensor, horizon: int) -> Tensor:
    """Level forecast ``last + h * (last - first) / (L - 1)`` from ``past`` (B, L, K) -> ``(B, F, K)``."""
    L = past.shape[1]
    slope = (past[:, -1:] - past[:, :1]) / max(L - 1, 1)  # (B, 1, K)
    steps = torch.arange(1, horizon + 1, dtype=past.dtype, device=past.device)  # (F,)
    return past[:, -1:] + slope * steps[None, :, None]  # (B, F, K)


class LinearBaseline(nn.Module):
    """The best of the closed-form linear forecasts on the validation windows, kept as buffers (saved with
    the module that holds it, never trained by its optimizer).

    Variants (``variant`` names): ``pooled`` / ``per_channel`` (one map for every target channel, or one
    each, from the channel's own history) or ``mixing`` (every input channel to every target), each as
    ``linear`` (the context), ``dlinear`` (its trend and remainder) or, from a channel's own history,
    ``nlinear`` (its change from the last value: the weights over the window sum to one, so a level shift
    of the window shifts the forecast alike). ``linear`` and ``dlinear`` span the same maps and differ
    only under the ridge penalty; a ridge shrinks ``linear`` toward the training mean and ``nlinear``
    toward persistence.

    Args:
        context_len: context length L.
        horizon: forecast horizon F.
        kernel_size: moving-average window of the DLinear trend.
        target_channels: the input channels that are the targets (each forecast from its own history);
            None selects ``mixing``. May be set until :meth:`fit`.
        n_targets: number of targets K (``mixing``).
        variants: the variants tried, as ``"<pooled|per_channel>_<linear|dlinear|nlinear>"`` or
            ``"mixing_<linear|dlinear>"``; None: all that apply.
    """

    weight: Tensor
    channels: Tensor
    penalty: Tensor
    form: Tensor

    def __init__(
        self,
        context_len: int,
        horizon: int,
        kernel_size: int = 25,
        target_channels: Sequence[int] | None = None,
        n_targets: int = 1,
        variants: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        self.context_len, self.horizon, self.kernel_size = context_len, horizon, kernel_size
        self.n_mixing_targets = n_targets
        known = {f"{p}_{f}" for p in ("pooled", "per_channel") for f in FORM_NAMES}
        known |= {"mixing_linear", "mixing_dlinear"}  # NLinear needs each target's own window
        if variants is not None and (not variants or set(variants) - known):
            raise ValueError(f"variants {list(variants)} must be some of {sorted(known)}")
        self.variants = None if variants is None else list(variants)
        self._channels_seen = 0  # input channels of the training windows (mixing rows hold each one's window)
        # empty until fit: weights (groups, features, outputs) float64, the target channels (K,) (empty:
        # mixing), the chosen ridge and form (pooled, index in FORM_NAMES); _load_from_state_dict takes a
        # checkpoint's shapes
        self.register_buffer("weight", torch.zeros(0, 0, 0, dtype=torch.float64))
        self.register_buffer("channels", torch.zeros(0, dtype=torch.long))
        self.register_buffer("penalty", torch.tensor(float("nan"), dtype=torch.float64))
        self.register_buffer("form", torch.zeros(2, dtype=torch.long))
        self.target_channels = target_channels

    @property
    def target_channels(self) -> list[int] | None:
        return self.channels.tolist() if self.channels.numel() else None

    @target_channels.setter
    def target_channels(self, channels: Sequence[int] | None) -> None:
        value = torch.tensor(list(channels) if channels is not None else [], dtype=torch.long)
        self._set("channels", value)

    @property
    def n_targets(self) -> int:
        return int(self.channels.numel()) if self.channels.numel() else self.n_mixing_targets

    @property
    def fitted(self) -> bool:
        return self.weight.numel() > 0

    @property
    def ridge(self) -> float | None:
        """The ridge penalty chosen by :meth:`fit` (None before)."""
        return None if self.penalty.isnan() else float(self.penalty)

    @property
    def variant(self) -> str | None:
        """The variant chosen by :meth:`fit`, e.g. ``per_channel_dlinear`` (None before)."""
        if not self.fitted:
            return None
        pooling = "mixing" if not self.channels.numel() else ("pooled" if self.form[0] else "per_channel")
        return f"{pooling}_{list(FORM_NAMES)[int(self.form[1])]}"

    def describe(self) -> str:
        """The chosen variant in words, e.g. ``per-channel DLinear, ridge 0.01``."""
        if not self.fitted:
            return "not fitted"
        pooling, form = self.variant.rsplit("_", 1)  # type: ignore[union-attr]
        words = {"pooled": "pooled", "per_channel": "per-channel", "mixing": "all-channel"}[pooling]
        return f"{words} {FORM_NAMES[form]}, ridge {self.ridge:g}"

    def _set(self, name: str, value: Tensor) -> None:
        """Replace buffer ``name`` in place (same tensor object: data-parallel wrappers keep theirs)."""
        buf = getattr(self, name)
        with torch.no_grad():
            buf.resize_(value.shape).copy_(value)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        for name in ("weight", "channels"):  # fitted weights have the checkpoint's shape, not the empty one
            if prefix + name in state_dict:
                getattr(self, name).resize_(state_dict[prefix + name].shape)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _decomposed(self, x: Tensor) -> list[Tensor]:
        """DLinear design rows ``[remainder, trend, 1]`` per group: per target channel ``(B, 2L + 1)``, or
        one group ``(B, 2 L C + 1)`` in mixing mode (remainder then trend, each flattened as (L, C))."""
        x = x.double()
        channels = self.target_channels
        if channels is not None:
            x = x[..., channels]  # (B, L, K)
        trend = moving_average(x, self.kernel_size)  # (B, L, C')
        parts = torch.cat((x - trend, trend), dim=1)  # (B, 2L, C')
        ones = parts.new_ones(parts.shape[0], 1)
        if channels is not None:
            return [torch.cat((parts[:, :, k], ones), dim=1) for k in range(parts.shape[2])]  # K x (B, 2L + 1)
        return [torch.cat((parts.reshape(parts.shape[0], -1), ones), dim=1)]  # 1 x (B, 2 L C + 1)

    def _targets(self, y: Tensor) -> list[Tensor]:
        y = y.double()
        if self.channels.numel():
            return [y[:, :, k] for k in range(y.shape[2])]  # K x (B, F)
        return [y.reshape(y.shape[0], -1)]  # 1 x (B, F * K)

    def _accumulate(
        self, batches: Iterable[tuple[Tensor, Tensor]], rows: ValidationRows | None = None
    ) -> list[GramStats]:
        """Training statistics per group, or (``rows`` given) the validation windows kept row by row."""
        stats: list[GramStats] = []
        for x, y in batches:
            self._channels_seen = x.shape[2]
            parts = list(zip(self._decomposed(x.cpu()), self._targets(y.cpu()), strict=True))
            if rows is not None:
                rows.add([(z, t, z.new_ones(z.shape[0])) for z, t in parts])
                continue
            if not stats:
                stats = [GramStats() for _ in parts]
            for s, (z, t) in zip(stats, parts, strict=True):
                s.add(z, t)
        return stats

    @torch.no_grad()
    def fit(
        self,
        train: Iterable[tuple[Tensor, Tensor]],
        val: Iterable[tuple[Tensor, Tensor]] | None = None,
        ridges: Sequence[float] = RIDGES,
        blocks: int = 10,
        select_se: float = 0.0,
    ) -> LinearBaseline:
        """Fit every variant on ``(x (B, L, C), y (B, F, K))`` training batches; with validation batches,
        keep the variant and ridge penalty (relative to the mean diagonal of the Gram matrix) with the lowest
        validation MSE (``select_se > 0``: the one-standard-error rule of
        :func:`~.networks.closed_form.choose_candidate`), otherwise the first variant with the smallest ridge.
        Returns self."""
        tr = self._accumulate(train)
        if not tr or tr[0].rows == 0:
            raise ValueError("LinearBaseline.fit: the training windows are empty")
        va: ValidationRows | None = None
        if val is not None:
            va = ValidationRows()
            self._accumulate(val, va)
            va = va if va.rows else None
        mixing = not self.channels.numel()
        poolings = ["mixing"] if mixing else (["pooled", "per_channel"] if len(tr) > 1 else ["per_channel"])
        forms = ("dlinear", "linear") if mixing else ("dlinear", "linear", "nlinear")
        names = [f"{p}_{f}" for p in poolings for f in forms]
        if self.variants is not None:  # with one target channel, pooled is per-channel
            wanted = {v.replace("pooled", "per_channel") if len(tr) == 1 else v for v in self.variants}
            names = [n for n in names if n in wanted]
        if not names:
            kind = "mixing" if mixing else "channel"
            raise ValueError(f"none of the variants {self.variants} applies to {kind} targets")
        trend = trend_matrix(self.context_len, self.kernel_size)
        found = []
        for name in names:
            pooling, form = name.rsplit("_", 1)
            found += closed_form_candidates(
                tr, va, [pooling], [form], ridges, trend, self._channels_seen if mixing else 1
            )
            if va is None:
                break
        chosen = choose_candidate(found, blocks, select_se)
        ws = chosen.weights()  # over the form's rows; NLinear's folded into a map of the window
        self._set("weight", torch.stack(chosen.fold(ws) if chosen.form == "nlinear" else ws).to(self.weight.device))
        self._set("penalty", torch.tensor(float(chosen.ridge), dtype=torch.float64))
        self._set("form", torch.tensor([int(chosen.pooling == "pooled"), list(FORM_NAMES).index(chosen.form)]))
        return self

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        """Forecast ``(B, F, K)`` from ``x`` (B, L, C), in ``x``'s dtype and device."""
        if not self.fitted:
            raise RuntimeError("LinearBaseline is not fitted: call fit() first")
        B = x.shape[0]
        rows = self._decomposed(x)
        if int(self.form[1]) != 1:  # Linear, and NLinear folded into a map of the window
            rows = [sum_halves(z) for z in rows]
        w = self.weight.to(x.device)
        outs = [z @ w[g] for g, z in enumerate(rows)]  # groups x (B, outputs)
        if self.channels.numel():
            out = torch.stack(outs, dim=2)  # (B, F, K)
        else:
            out = outs[0].view(B, self.horizon, self.n_targets)  # (B, F, K)
        return out.to(x.dtype)
