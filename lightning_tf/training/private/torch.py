"""torch's private names the package relies on, and why; ``tests/training/private/test_torch.py`` fails as soon as
a torch release changes one of them.

* :data:`OVERRIDES`: ``Module._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
  unexpected_keys, error_msgs)``, which ``load_state_dict`` calls on every submodule with the submodule's
  ``prefix``, the hook torch's own modules override to read older checkpoints. The K-line networks override it
  to read a checkpoint written before a layout change, to size buffers to the checkpoint's shape, and to mirror a
  loaded buffer as a Python value. (``register_load_state_dict_pre_hook`` is its public form from torch 2.5 on;
  the package supports 2.4.)
"""

from __future__ import annotations

__all__ = ["OVERRIDES"]

#: torch's private methods that classes of the package override -> those classes
OVERRIDES = {
    "torch.nn.modules.module.Module._load_from_state_dict": (
        "lightning_tf.kline.evaluation.baselines.LinearBaseline",
        "lightning_tf.kline.networks.linear.LinearPath",
        "lightning_tf.kline.networks.network.ForecastNet",
    )
}
