"""The forecaster's networks: torch modules and the closed-form fit, nothing of Lightning or of the data.

* :class:`ForecastNet` (:mod:`.network`): RevIN, the linear path and a backbone's Transformer as a residual,
  with a direct multi-horizon head and quantiles; :func:`build_backbone` builds the backbone by name.
* The backbones, how a window ``(B, L, C)`` becomes tokens for the core's encoder: :class:`PatchBackbone`
  (:mod:`.patches`, PatchTST), :class:`VariateBackbone` (:mod:`.variates`, iTransformer),
  :class:`BarBackbone` (:mod:`.bars`, one token per bar).
* :class:`RevIN` and patching (:mod:`.layers`), the shared layers.
* :class:`LinearPath` (:mod:`.linear`), the linear path, and its closed-form fit and choice (:mod:`.closed_form`).
"""

from .bars import BarBackbone
from .closed_form import RIDGES
from .layers import RevIN, RevINStats, n_patches, patchify
from .linear import LinearFit, LinearInput, LinearPath, Pooling
from .network import (
    DEFAULT_SPEC,
    Backbone,
    BackboneName,
    ForecastNet,
    ForecastParts,
    Objective,
    PatchTST,
    ResidualMode,
    build_backbone,
    check_quantiles,
    check_training,
)
from .patches import PatchBackbone, check_patching
from .variates import VariateBackbone

__all__ = [
    "DEFAULT_SPEC",
    "RIDGES",
    "Backbone",
    "BackboneName",
    "BarBackbone",
    "ForecastNet",
    "ForecastParts",
    "LinearFit",
    "LinearInput",
    "LinearPath",
    "Objective",
    "PatchBackbone",
    "PatchTST",
    "Pooling",
    "ResidualMode",
    "RevIN",
    "RevINStats",
    "VariateBackbone",
    "build_backbone",
    "check_patching",
    "check_quantiles",
    "check_training",
    "n_patches",
    "patchify",
]
