"""The ``chronos_bolt`` backbone: a published forecaster (:class:`~lightning_tf.kline.published.ChronosBolt`) as
the forecaster network's Transformer.

Where the other backbones give representations that the network's own head maps to the horizon, this one
forecasts whole: each target's own channel of the window (the model-scale values, which Chronos-Bolt standardises
by itself) is a context, and the model's quantile head gives that target's next steps. So the network starts from
the published model's zero-shot forecast, and fine-tuning trains the published weights on the forecaster's loss
(``freeze`` and ``layer_decay`` as for the other backbones: :attr:`ChronosBoltBackbone.heads` names what
``freeze: backbone`` leaves trainable, :meth:`~lightning_tf.kline.published.ChronosBolt.layer_depth` the depths).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_tf.kline.published import ChronosBolt, ChronosBoltConfig

__all__ = ["PUBLISHED_BACKBONES", "ChronosBoltBackbone", "published_config"]

#: the backbones that are published forecasters, by name
PUBLISHED_BACKBONES = ("chronos_bolt",)


def published_config(settings: Mapping[str, Any]) -> ChronosBoltConfig:
    """The published model's config from the forecaster's ``published`` argument (``{"config": {...}}``, what a
    checkpoint keeps), or a ValueError naming what is wrong."""
    config = settings.get("config")
    if not isinstance(config, Mapping):
        raise ValueError(f"published must hold the model's config ({{'config': {{...}}}}), got {dict(settings)}")
    try:
        return ChronosBoltConfig(**config)
    except TypeError as e:
        raise ValueError(f"published config: {e}") from None


class ChronosBoltBackbone(ChronosBolt):
    """Chronos-Bolt forecasting each target from its own channel of the window.

    Args:
        config: the published model's sizes.
        context_len: the window's length L (at most the model's ``context_length``).
        levels: the forecaster's quantile levels (each among the model's), or None for the median alone.
    """

    per_channel = True  # each target forecast from its own channel
    forecasts = True  # the backbone gives the forecast itself, not representations for the network's head
    width = 0  # no representation for a head
    heads = ("decoder.", "head.")  # what turns the encoded context into a forecast: trained under freeze: backbone

    def __init__(self, config: ChronosBoltConfig, context_len: int, levels: Sequence[float] | None) -> None:
        super().__init__(config)
        if context_len > config.context_length:
            raise ValueError(
                f"context_len ({context_len}) is longer than the published model's context_length "
                f"({config.context_length})"
            )
        wanted = [0.5] if levels is None else [float(q) for q in levels]
        own = [round(q, 6) for q in config.quantiles]
        missing = [q for q in wanted if round(q, 6) not in own]
        if missing:
            raise ValueError(
                f"quantiles {missing} are not among the published model's levels {list(config.quantiles)}: choose "
                "the forecaster's quantiles among them"
            )
        self.register_buffer(
            "level_index", torch.tensor([own.index(round(q, 6)) for q in wanted], dtype=torch.long), persistent=False
        )

    def forecast_channels(self, x: Tensor, horizon: int) -> Tensor:
        """Quantiles ``(B, F, K, Q)`` at the forecaster's levels (the median alone without quantiles: Q = 1) of
        the next ``horizon`` steps of each channel of ``x`` ``(B, L, K)``, in ``x``'s units, in increasing order."""
        B, L, K = x.shape
        context = x.transpose(1, 2).reshape(B * K, L).float()  # (B*K, L): every channel its own series
        # sorted, so that the forecaster's quantiles never cross (the published head does not promise it)
        q = self.roll_out(context, horizon).sort(dim=-1).values[..., self.level_index]  # (B*K, F, Q)
        return q.view(B, K, horizon, -1).transpose(1, 2).to(x.dtype)  # (B, F, K, Q)
