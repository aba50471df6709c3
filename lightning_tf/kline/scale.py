"""DataScale: what a forecaster must know of its data to speak in the data's units.

A DataModule fits its scalers on the training rows (per ticker) and feeds the model standardised
windows; the model forecasts on that scale. :class:`DataScale` holds, as plain values, what maps a
forecast back: the feature and target names, whether the targets are returns or levels, the ticker
names and every ticker's training means and standard deviations. Both DataModules expose one as
``data_scale`` after ``setup``; :class:`~lightning_tf.kline.KLineForecaster` takes it once and keeps it
in its checkpoints (:meth:`DataScale.to_dict`: lists, strings and floats, loadable with
``torch.load(weights_only=True)`` and storable as JSON), so a loaded model forecasts in original units
and prices without the DataModule. :func:`standard_scaler_fit` computes those statistics, as
scikit-learn's ``StandardScaler`` does, at the cost of a few numpy reductions per ticker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

__all__ = ["DataScale", "TargetKind", "rebuild_prices", "standard_scaler_fit"]

TargetKind = Literal["return", "level"]
_STATISTICS = ("feature_mean", "feature_std", "target_mean", "target_std")


def rebuild_prices(returns: Tensor, anchor: Tensor) -> Tensor:
    """Close prices ``(B, F)`` from per-bar log returns ``(B, F)`` and the last known close ``(B,)``:
    ``anchor * exp(cumsum(returns))``."""
    return anchor.to(returns.dtype)[:, None] * torch.exp(torch.cumsum(returns, dim=1))  # (B, F)


def standard_scaler_fit(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and scale per column of finite ``(n, C)`` float64 rows, bit for bit what
    ``sklearn.preprocessing.StandardScaler().fit(values)`` gives as ``mean_`` and ``scale_`` (its
    corrected two-pass variance; a column constant to rounding gets scale 1), without its per-call cost."""
    n = values.shape[0]
    total = np.sum(values, axis=0)
    mean = total / float(n)
    centred = values - mean
    correction = np.sum(centred, axis=0)
    centred **= 2
    var = (np.sum(centred, axis=0) - correction**2 / n) / n
    eps = np.finfo(np.float64).eps
    constant = var <= n * eps * var + (n * mean * eps) ** 2
    scale = np.sqrt(var)
    scale[constant] = 1.0
    return mean, scale


def _rows(name: str, value: Any, n_rows: int, n_cols: int) -> tuple[tuple[float, ...], ...]:
    """``value`` (nested sequence or tensor) as a ``(n_rows, n_cols)`` tuple of float tuples."""
    if isinstance(value, Tensor):
        value = value.detach().double().cpu().tolist()
    rows = tuple(tuple(float(v) for v in row) for row in value)
    if len(rows) != n_rows or any(len(r) != n_cols for r in rows):
        shape = (len(rows), *{len(r) for r in rows})
        raise ValueError(f"{name} must be (n_tickers={n_rows}, {n_cols}) values, got shape {shape}")
    return rows


@dataclass(frozen=True)
class DataScale:
    """The data's naming and training statistics, as plain values.

    ``original = model scale * std[ticker] + mean[ticker]``, per target (or feature) column.

    Args:
        feature_names: the C input channels, in order.
        target_names: the K targets, in order.
        target_kind: ``return`` (persistence is a zero change; closes are rebuilt from the returns) or
            ``level`` (persistence repeats the last value); None: ``return`` when every target is named
            ``log_return``, else ``level``.
        ticker_names: the series, indexed by the batches' ``ticker`` ids.
        feature_mean: ``(n_tickers, C)`` training means of the features.
        feature_std: ``(n_tickers, C)`` training standard deviations of the features.
        target_mean: ``(n_tickers, K)`` training means of the targets.
        target_std: ``(n_tickers, K)`` training standard deviations of the targets.
        has_prices: whether the batches' ``anchor`` is the last close of each window, so that closes
            can be rebuilt from return targets (K-line bars; not a generic CSV).
        volatility_window: bars in the rolling volatility feature (K-line bars; how features are built).
        volume_window: bars in the rolling volume z-score feature.
        label: ``raw`` (the target itself, scaled per ticker) or a cross-sectional label (``cs_zscore``,
            ``cs_rank``: a per-date score across the tickers, not scaled further; no prices are rebuilt
            from it).
        covariates: the covariate specification (plain data, see
            :meth:`lightning_tf.kline.KLineDataModule.covariate_spec`): past covariate names (the last
            channels of ``feature_names``), known-future names and their training statistics, the calendar,
            the missing-value policy and the static vocabulary; empty without covariates.
    """

    feature_names: tuple[str, ...]
    target_names: tuple[str, ...]
    target_kind: TargetKind | None
    ticker_names: tuple[str, ...]
    feature_mean: tuple[tuple[float, ...], ...] = field(repr=False)
    feature_std: tuple[tuple[float, ...], ...] = field(repr=False)
    target_mean: tuple[tuple[float, ...], ...] = field(repr=False)
    target_std: tuple[tuple[float, ...], ...] = field(repr=False)
    has_prices: bool = False
    volatility_window: int = 20
    volume_window: int = 20
    label: str = "raw"
    covariates: dict[str, Any] = field(default_factory=dict, repr=False, compare=True)

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)  # frozen: normalised once, here

        put("feature_names", tuple(str(n) for n in self.feature_names))
        put("target_names", tuple(str(n) for n in self.target_names))
        put("ticker_names", tuple(str(n) for n in self.ticker_names))
        kind = self.target_kind
        if kind is None:
            kind = "return" if self.target_names and all(n == "log_return" for n in self.target_names) else "level"
        if kind not in ("return", "level"):
            raise ValueError(f"target_kind must be 'return' or 'level', got {kind!r}")
        put("target_kind", kind)
        put("has_prices", bool(self.has_prices))
        put("volatility_window", int(self.volatility_window))
        put("volume_window", int(self.volume_window))
        put("label", str(self.label))
        put("covariates", dict(self.covariates or {}))
        n, C, K = len(self.ticker_names), len(self.feature_names), len(self.target_names)
        for name, cols in zip(_STATISTICS, (C, C, K, K), strict=True):
            put(name, _rows(name, getattr(self, name), n, cols))

    # ------------------------------------------------------------------------------ plain data
    def to_dict(self) -> dict[str, Any]:
        """Lists, strings and floats only: loads with ``torch.load(weights_only=True)``, dumps as JSON."""
        return {
            "feature_names": list(self.feature_names),
            "target_names": list(self.target_names),
            "target_kind": self.target_kind,
            "ticker_names": list(self.ticker_names),
            **{k: [list(row) for row in getattr(self, k)] for k in _STATISTICS},
            "has_prices": self.has_prices,
            "volatility_window": self.volatility_window,
            "volume_window": self.volume_window,
            "label": self.label,
            "covariates": self.covariates,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataScale:
        """The inverse of :meth:`to_dict`."""
        keys = ("feature_names", "target_names", "target_kind", "ticker_names", *_STATISTICS)
        missing = [k for k in keys if k not in data]
        if missing:
            raise ValueError(f"data scale lacks {missing}; it has {sorted(data)}")
        return cls(
            **{k: data[k] for k in keys},
            has_prices=bool(data.get("has_prices", False)),
            volatility_window=int(data.get("volatility_window", 20)),
            volume_window=int(data.get("volume_window", 20)),
            label=str(data.get("label", "raw")),
            covariates=dict(data.get("covariates") or {}),
        )

    # ------------------------------------------------------------------------------ units
    @property
    def returns(self) -> bool:
        """Whether the targets are returns (rather than levels)."""
        return self.target_kind == "return"

    @property
    def rebuilds_prices(self) -> bool:
        """Whether closes can be rebuilt from the forecast: price data with a raw (not cross-sectional) target."""
        return self.has_prices and self.label == "raw"

    @property
    def required_columns(self) -> list[str]:
        """The columns new bars must have beside the timestamp (and ticker): OHLC, volume, and every past
        and known-future covariate the model reads."""
        cov = self.covariates
        return ["open", "high", "low", "close", "volume", *cov.get("past", []), *cov.get("future", [])]

    @property
    def target(self) -> str:
        """The quantity forecast, of the bars: ``log_return`` or ``close`` (a cross-sectional label's own)."""
        name = self.target_names[0]
        prefix = f"{self.label}_"
        return name[len(prefix) :] if self.label != "raw" and name.startswith(prefix) else name

    @cached_property
    def statistics(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Each trained ticker's training statistics, by name: feature mean and std ``(C,)``, target mean and std
        ``(K,)`` float64."""
        rows = zip(self.feature_mean, self.feature_std, self.target_mean, self.target_std, strict=True)
        return {
            name: tuple(np.asarray(v, dtype=np.float64) for v in row)  # type: ignore[misc]
            for name, row in zip(self.ticker_names, rows, strict=True)
        }

    @cached_property
    def _target_stats(self) -> tuple[Tensor, Tensor]:
        return torch.tensor(self.target_mean, dtype=torch.float64), torch.tensor(self.target_std, dtype=torch.float64)

    def _per_window(self, y: Tensor, ticker: Tensor | None) -> tuple[Tensor, Tensor]:
        """Each window's target mean and std ``(B, K)`` in ``y``'s dtype and device (ticker None: ticker 0)."""
        if ticker is None:
            ticker = torch.zeros(y.shape[0], dtype=torch.long, device=y.device)
        ticker = ticker.to(y.device)
        mean, std = self._target_stats
        return mean.to(y.device, y.dtype)[ticker], std.to(y.device, y.dtype)[ticker]  # (B, K) each

    def inverse_targets(self, y: Tensor, ticker: Tensor | None = None) -> Tensor:
        """Model-scale targets ``(B, F, K)`` of tickers ``(B,)`` back to original units ``(B, F, K)``."""
        mean, std = self._per_window(y, ticker)  # (B, K)
        return y * std[:, None, :] + mean[:, None, :]  # (B, F, K)

    def scale_targets(self, y: Tensor, ticker: Tensor | None = None) -> Tensor:
        """Original-unit targets ``(B, F, K)`` to the model scale (inverse of :meth:`inverse_targets`)."""
        mean, std = self._per_window(y, ticker)  # (B, K)
        return (y - mean[:, None, :]) / std[:, None, :]  # (B, F, K)

    def ticker_index(self, name: str) -> int | None:
        """The index of ticker ``name`` among the trained tickers, or None for a series not trained on."""
        return self.ticker_names.index(name) if name in self.ticker_names else None

    def to_prices(self, y: Tensor, anchor: Tensor) -> Tensor:
        """Original-unit targets ``(B, F, K)`` to the prices ``(B, F)`` of the first target: rebuilt from
        the last close ``anchor`` (B,) for returns, the level itself otherwise."""
        if self.returns:
            return rebuild_prices(y[..., 0], anchor)  # (B, F)
        return y[..., 0]  # (B, F)
