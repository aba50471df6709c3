"""What a :class:`~lightning_tf.kline.KLineForecaster` takes from its data, once (in ``setup``), as one typed value.

Both K-line DataModules (:class:`~lightning_tf.kline.KLineDataModule`, :class:`~lightning_tf.kline.MultivariateDataModule`)
give a :class:`DataHandover` (``handover()``); the model checks the sizes against its own, adopts the target
channels and the data's scale, and sizes its covariate head. The model never imports a DataModule: this value is the
whole interface between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .scale import DataScale

__all__ = ["DataHandover"]


@dataclass(frozen=True)
class DataHandover:
    """What the data tells the model.

    Attributes:
        n_features: input channels C of the windows.
        n_targets: forecast targets K.
        context_len: context length L.
        horizon: forecast horizon F.
        target_channels: index among the input channels of each target, or None (targets that are not inputs,
            such as future returns).
        data_scale: the training statistics and names (None before ``setup``).
        covariate_names: past-observed covariates (the last input channels).
        n_future: known-future covariate columns per forecast bar.
        static_sizes: the static ids' vocabulary sizes (slot 0: unknown).
        provenance: what the data is, as a trained model records it (plain data): ``data`` (its path),
            ``tickers`` (how many), ``first`` (the first bar a training window reads), ``val_from`` and ``test_from``
            (the first validation and test dates), ``seen_until`` (the last bar a training or validation window
            reads: all a model trained on it has seen), ``cut`` (the reader's date cut); empty before ``setup``.
    """

    n_features: int
    n_targets: int
    context_len: int
    horizon: int
    target_channels: list[int] | None
    data_scale: DataScale | None
    covariate_names: list[str] = field(default_factory=list)
    n_future: int = 0
    static_sizes: list[int] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
