"""Known-future and static covariates as a term of the forecast, for every backbone and the linear path alike.

``x_future`` (B, F, Cf): the known-future covariates of the forecast bars (calendar features, the user's
columns declared known in advance) go through one linear map per horizon step, ``x_future[:, h] @ W[h]``
(Cf -> K), so step h reads only its own bar's values. ``static`` (B, S) int64: each static id (the ticker's,
each category's; 0 = not seen in training) is an embedding of ``F * K`` numbers, a bias per step and target.
Both start at exactly zero, so a network with covariates forecasts at its first step what it would without
them; the term is added on the model scale to the linear path's forecast and to the Transformer's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["CovariateHead"]


class CovariateHead(nn.Module):
    """The covariates' term of the forecast ``(B, F, K)``.

    Args:
        horizon: forecast horizon F.
        n_targets: targets K.
        n_future: known-future covariates per bar Cf (0: none).
        static_sizes: vocabulary size of each static id (slot 0 included); empty: none.
    """

    def __init__(self, horizon: int, n_targets: int, n_future: int, static_sizes: Sequence[int]) -> None:
        super().__init__()
        self.horizon, self.n_targets, self.n_future = horizon, n_targets, n_future
        self.static_sizes = [int(s) for s in static_sizes]
        if n_future < 0 or any(s < 1 for s in self.static_sizes):
            raise ValueError(f"n_future ({n_future}) must be >= 0 and static sizes {self.static_sizes} >= 1")
        self.future_weight = nn.Parameter(torch.zeros(horizon, n_future, n_targets))  # (F, Cf, K)
        self.static = nn.ModuleList(nn.Embedding(size, horizon * n_targets) for size in self.static_sizes)
        for table in self.static:
            nn.init.zeros_(table.weight)

    def forward(self, x_future: Tensor | None, static: Tensor | None) -> Tensor | None:
        """The term ``(B, F, K)``, or None when the batch carries neither input."""
        out = None
        if self.n_future:
            if x_future is None or x_future.shape[1:] != (self.horizon, self.n_future):
                got = None if x_future is None else tuple(x_future.shape)
                raise ValueError(
                    f"batch 'x_future' must be (B, horizon={self.horizon}, n_future={self.n_future}), got {got}"
                )
            out = torch.einsum("bfc,fck->bfk", x_future.to(self.future_weight.dtype), self.future_weight)
        if self.static_sizes:
            if static is None or static.shape[1:] != (len(self.static_sizes),):
                got = None if static is None else tuple(static.shape)
                raise ValueError(f"batch 'static' must be (B, {len(self.static_sizes)}) ids, got {got}")
            ids = static.long().clamp(min=0)
            ids = torch.where(ids < torch.tensor(self.static_sizes, device=ids.device), ids, torch.zeros_like(ids))
            bias = sum(table(ids[:, j]) for j, table in enumerate(self.static))  # (B, F*K)
            bias = bias.view(-1, self.horizon, self.n_targets)  # (B, F, K)
            out = bias if out is None else out + bias
        return out
