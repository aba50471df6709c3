"""Baseline forecasts scored on exactly the windows the model is scored on.

* :func:`persistence`: the naive forecast. Level targets (prices, ETT loads): the last observed
  value for every horizon. Return targets: a zero return (the price stays where it is).
* :func:`mean_forecast`: level targets: the mean of the context window. Return targets: the drift,
  the mean one-bar return of the context, accumulated over the horizon for cumulative returns
  (the random walk with drift).
* :func:`drift`: level targets: the line through the first and last context values, extended
  (Hyndman and Athanasopoulos, "Forecasting: Principles and Practice", sec. 5.2).
* :class:`DLinearBaseline`: Zeng et al. 2023, "Are Transformers Effective for Time Series
  Forecasting?" (DLinear): the context is split by a moving average into trend and remainder, and
  one linear map of each gives the forecast. Both parts are linear in the input, so the least-squares
  weights have a closed form; they are fit on the training windows (ridge penalty chosen on the
  validation windows), accumulating only Gram matrices, so any number of windows fits in memory.
  ``shared`` (DLinear's ``individual=False``) maps each target channel's own history with one set
  of weights; ``mixing`` maps every input channel of the window to every target (for targets that
  are not input channels, such as future returns built from several price features).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DLinearBaseline", "drift", "mean_forecast", "moving_average", "persistence"]


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


def moving_average(x: Tensor, kernel_size: int) -> Tensor:
    """DLinear's trend: a centred moving average of ``x`` (B, L, C) along time, the ends padded with
    copies of the first and last values (``series_decomp``), ``(B, L, C)``."""
    front, back = (kernel_size - 1) // 2, kernel_size // 2
    x = x.transpose(1, 2)  # (B, C, L)
    x = F.pad(x, (front, back), mode="replicate")  # (B, C, L + k - 1)
    return F.avg_pool1d(x, kernel_size, stride=1).transpose(1, 2)  # (B, L, C)


class DLinearBaseline(nn.Module):
    """DLinear with weights from (ridge) least squares, kept as buffers (saved with the module that
    holds it, never trained by its optimizer).

    Args:
        context_len: context length L.
        horizon: forecast horizon F.
        kernel_size: moving-average window of the trend.
        target_channels: ``shared`` mode: the input channels that are the targets (each is
            forecast from its own history with one weight set). None selects ``mixing``: every
            input channel feeds every target. May be set until :meth:`fit`.
        n_targets: number of targets K (``mixing`` mode).
    """

    weight: Tensor
    channels: Tensor
    penalty: Tensor

    def __init__(
        self,
        context_len: int,
        horizon: int,
        kernel_size: int = 25,
        target_channels: Sequence[int] | None = None,
        n_targets: int = 1,
    ) -> None:
        super().__init__()
        self.context_len, self.horizon, self.kernel_size = context_len, horizon, kernel_size
        self.n_mixing_targets = n_targets
        # empty until fit: (2 L C_in + 1, F K_out) float64 weights, the shared mode's target channels (K,)
        # and the chosen ridge penalty; _load_from_state_dict takes a checkpoint's shapes
        self.register_buffer("weight", torch.zeros(0, 0, dtype=torch.float64))
        self.register_buffer("channels", torch.zeros(0, dtype=torch.long))
        self.register_buffer("penalty", torch.tensor(float("nan"), dtype=torch.float64))
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
    def mode(self) -> str:
        return "shared" if self.channels.numel() else "mixing"

    @property
    def fitted(self) -> bool:
        return self.weight.numel() > 0

    @property
    def ridge(self) -> float | None:
        """The ridge penalty chosen by :meth:`fit` (None before)."""
        return None if self.penalty.isnan() else float(self.penalty)

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

    def _features(self, x: Tensor) -> Tensor:
        """Design matrix rows ``[remainder, trend, 1]`` of each sample: ``(B * K, 2L + 1)`` in shared
        mode, ``(B, 2 L C + 1)`` in mixing mode."""
        x = x.double()
        channels = self.target_channels
        if channels is not None:
            x = x[..., channels]  # (B, L, K)
        trend = moving_average(x, self.kernel_size)  # (B, L, C')
        parts = torch.cat((x - trend, trend), dim=1)  # (B, 2L, C')
        if channels is not None:
            z = parts.transpose(1, 2).reshape(-1, parts.shape[1])  # (B * K, 2L)
        else:
            z = parts.reshape(parts.shape[0], -1)  # (B, 2L * C)
        return torch.cat((z, z.new_ones(z.shape[0], 1)), dim=1)  # (rows, features + 1)

    def _targets(self, y: Tensor) -> Tensor:
        y = y.double()
        if self.channels.numel():
            return y.transpose(1, 2).reshape(-1, y.shape[1])  # (B * K, F)
        return y.reshape(y.shape[0], -1)  # (B, F * K)

    @torch.no_grad()
    def fit(
        self,
        train: Iterable[tuple[Tensor, Tensor]],
        val: Iterable[tuple[Tensor, Tensor]] | None = None,
        ridges: Sequence[float] = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0),
    ) -> DLinearBaseline:
        """Fit on ``(x (B, L, C), y (B, F, K))`` training batches; with validation batches, pick the
        ridge penalty (relative to the mean diagonal of the Gram matrix) with the lowest validation
        MSE, otherwise use the smallest. Returns self."""
        gram, cross, n = self._accumulate(train)
        if n == 0:
            raise ValueError("DLinearBaseline.fit: the training windows are empty")
        scale = float(gram.diagonal().mean())
        eye = torch.eye(gram.shape[0], dtype=gram.dtype)
        eye[-1, -1] = 0.0  # never shrink the intercept
        solutions = []
        for r in ridges:
            # lstsq rather than solve: with no ridge the Gram matrix may be singular
            w = torch.linalg.lstsq(gram + r * scale * eye, cross, driver="gelsd").solution  # (features, outputs)
            solutions.append((r, w))
        ridge, weight = solutions[0]
        if val is not None and len(ridges) > 1:
            vgram, vcross, vn = self._accumulate(val)
            if vn > 0:
                # validation squared error from the Gram statistics: sum ||y||^2 - 2 tr(W' Z'y) + tr(W' Z'Z W);
                # the first term is the same for every W, so it is left out of the comparison
                def score(w: Tensor) -> float:
                    return float(-2 * (w * vcross).sum() + (w * (vgram @ w)).sum())

                ridge, weight = min(solutions, key=lambda s: score(s[1]))
        self._set("weight", weight.to(self.weight.device))
        self._set("penalty", torch.tensor(float(ridge), dtype=torch.float64))
        return self

    def _accumulate(self, batches: Iterable[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor, int]:
        gram: Tensor | None = None
        cross: Tensor | None = None
        n = 0
        for x, y in batches:
            z, t = self._features(x.cpu()), self._targets(y.cpu())  # (rows, features), (rows, outputs)
            g, c = z.T @ z, z.T @ t
            gram = g if gram is None else gram + g
            cross = c if cross is None else cross + c
            n += z.shape[0]
        if gram is None or cross is None:
            return torch.zeros(1, 1, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64), 0
        return gram, cross, n

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        """Forecast ``(B, F, K)`` from ``x`` (B, L, C), in ``x``'s dtype and device."""
        if not self.fitted:
            raise RuntimeError("DLinearBaseline is not fitted: call fit() first")
        B = x.shape[0]
        out = self._features(x) @ self.weight.to(x.device)  # (rows, outputs)
        if self.channels.numel():
            out = out.view(B, self.n_targets, self.horizon).transpose(1, 2)  # (B, F, K)
        else:
            out = out.view(B, self.horizon, self.n_targets)  # (B, F, K)
        return out.to(x.dtype)
