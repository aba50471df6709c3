"""Published forecasting foundation models, on the shared core, loaded from their checkpoints.

* :class:`Kronos` (:mod:`.kronos`): Kronos for K-lines (MIT licence): a tokenizer that turns OHLCV bars into
  pairs of coarse and fine tokens (:class:`KronosTokenizer`) and a decoder-only Transformer over them
  (:class:`KronosModel`); ``forecast(bars, stamps, future_stamps)`` samples future bars as the reference's
  ``KronosPredictor.predict`` does. Checkpoints ``NeoQuasar/Kronos-mini``, ``-small`` and ``-base``.
* :class:`ChronosBolt` (:mod:`.chronos_bolt`): Amazon's Chronos-Bolt for any series (Apache-2.0): a T5
  encoder-decoder over patches with quantile heads; ``forecast(context)`` gives quantiles. Checkpoints
  ``amazon/chronos-bolt-tiny``, ``-mini``, ``-small`` and ``-base``.

Each is a plain torch module built from the reference's config (:mod:`.configs`), with ``from_pretrained(name
or folder)`` (:mod:`.hub`) and an export back to the reference's layout (``to_kronos``, ``to_chronos_bolt``).
The backbone and the heads split by parameter name, and ``layer_depth(name)`` gives the depth for layer-wise
learning rates.
"""

from .chronos_bolt import CHRONOS_BOLT_MODELS, CHRONOS_BOLT_PRESETS, ChronosBolt, ResidualBlock
from .configs import ChronosBoltConfig, KronosConfig, KronosTokenizerConfig
from .kronos import KRONOS_MODELS, KRONOS_PRESETS, Kronos, calendar_stamps, sample_tokens
from .kronos_model import KronosModel, token_loss
from .kronos_tokenizer import KronosTokenizer

__all__ = [
    "CHRONOS_BOLT_MODELS",
    "CHRONOS_BOLT_PRESETS",
    "ChronosBolt",
    "ChronosBoltConfig",
    "KRONOS_MODELS",
    "KRONOS_PRESETS",
    "Kronos",
    "KronosConfig",
    "KronosModel",
    "KronosTokenizer",
    "KronosTokenizerConfig",
    "ResidualBlock",
    "calendar_stamps",
    "sample_tokens",
    "token_loss",
]
