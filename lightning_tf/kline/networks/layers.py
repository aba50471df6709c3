"""Building blocks of the patch Transformer forecaster: RevIN and channel-independent patching.

* RevIN: Kim et al. 2022, "Reversible Instance Normalization for Accurate Time-Series
  Forecasting against Distribution Shift". Each window is normalised by its own per-channel mean
  and standard deviation; the forecast is mapped back with the same statistics. Here the statistics
  are *returned* to the caller instead of being stored on the module (PatchTST's ``RevIN`` keeps
  them as attributes between two calls), so the module holds no batch state: it is re-entrant,
  safe under DDP and ``torch.compile``, and a checkpoint never carries a stale batch.
* Patching: Nie et al. 2023, "A Time Series is Worth 64 Words" (PatchTST): each channel's context
  of length L is cut into N patches of length P with stride S, after padding the end with S copies
  of the last value (PatchTST's ``padding_patch='end'``), so ``N = (L - P) // S + 2``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RevIN", "RevINStats", "n_patches", "patchify"]


class RevINStats(NamedTuple):
    """Per-window, per-channel statistics of a :class:`RevIN` normalisation, each ``(B, 1, C)``."""

    mean: Tensor
    std: Tensor


class RevIN(nn.Module):
    """Reversible instance normalisation over the time axis of ``(B, L, C)`` windows.

    Args:
        n_channels: number of channels C (sizes the affine parameters).
        eps: added to the variance before the square root.
        affine: learn a per-channel scale and shift applied after normalising (and undone before
            denormalising).
    """

    def __init__(self, n_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__()
        self.n_channels, self.eps, self.affine = n_channels, eps, affine
        if affine:
            self.weight = nn.Parameter(torch.ones(n_channels))
            self.bias = nn.Parameter(torch.zeros(n_channels))

    def normalize(self, x: Tensor) -> tuple[Tensor, RevINStats]:
        """Normalise ``x`` (B, L, C); return the normalised window and its statistics."""
        mean = x.mean(dim=1, keepdim=True).detach()  # (B, 1, C)
        # biased variance, as in the paper and PatchTST; detached so the statistics act as constants
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.eps).detach()  # (B, 1, C)
        x = (x - mean) / std  # (B, L, C)
        if self.affine:
            x = x * self.weight + self.bias  # (B, L, C)
        return x, RevINStats(mean, std)

    def denormalize(self, y: Tensor, stats: RevINStats, channels: list[int] | None = None) -> Tensor:
        """Map ``y`` (B, F, K) back with ``stats``; ``channels`` picks the K channels of the
        statistics that ``y``'s columns belong to (all C, in order, when None)."""
        mean, std = stats
        weight = self.weight if self.affine else None
        bias = self.bias if self.affine else None
        if channels is not None:
            mean, std = mean[..., channels], std[..., channels]  # (B, 1, K)
            if weight is not None and bias is not None:
                weight, bias = weight[channels], bias[channels]  # (K,)
        if weight is not None and bias is not None:
            # PatchTST's eps*eps keeps the division finite if a scale is driven to zero
            y = (y - bias) / (weight + self.eps * self.eps)  # (B, F, K)
        return y * std + mean  # (B, F, K)

    def extra_repr(self) -> str:
        return f"{self.n_channels}, eps={self.eps}, affine={self.affine}"


def n_patches(context_len: int, patch_len: int, stride: int, pad_end: bool = True) -> int:
    """Number of patches N that :func:`patchify` cuts from a context of ``context_len`` bars."""
    return (context_len + (stride if pad_end else 0) - patch_len) // stride + 1


def patchify(x: Tensor, patch_len: int, stride: int, pad_end: bool = True) -> Tensor:
    """Cut each channel of ``x`` (B, L, C) into patches: ``(B, C, N, P)``.

    Patch ``n`` of channel ``c`` is ``x[:, n * stride : n * stride + patch_len, c]``; with
    ``pad_end`` the series is first extended by ``stride`` copies of its last value, so the newest
    bars always fall into a full patch.
    """
    x = x.transpose(1, 2)  # (B, C, L)
    if pad_end:
        x = F.pad(x, (0, stride), mode="replicate")  # (B, C, L + S)
    return x.unfold(-1, patch_len, stride)  # (B, C, N, P)
