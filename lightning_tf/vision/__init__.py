"""Vision Transformer classification: ImageDataModule, ViTClassifier and ClassificationWriter.

* :mod:`.vit`: the network (patch embedding, class token or mean pooling, position embedding, the
  core encoder, head) and its presets;
* :mod:`.module`: :class:`ViTClassifier`, training, evaluation and prediction of class probabilities;
* :mod:`.writer`: :class:`ClassificationWriter`, the top-k classes of ``predict`` as CSV;
* :mod:`.inputs`: files, PIL images or tensors prepared as a trained model expects (``classify``);
* :mod:`.timm_interop`: ``ViTClassifier.from_timm``, timm ViT weights in our model;
* :mod:`.attention_maps`: attention rollout and class-token attention, drawn over images.
"""

from .attention_maps import attention_maps, attention_rollout, draw_attention, last_layer_attention, plot_attention
from .data import ImageDataModule
from .module import ViTClassifier
from .vit import PRESETS, PatchEmbed, VisionTransformer, patchify, preset_config, resample_pos_embed, unpatchify
from .writer import ClassificationWriter

__all__ = [
    "PRESETS",
    "ClassificationWriter",
    "ImageDataModule",
    "PatchEmbed",
    "ViTClassifier",
    "VisionTransformer",
    "attention_maps",
    "attention_rollout",
    "draw_attention",
    "last_layer_attention",
    "patchify",
    "plot_attention",
    "preset_config",
    "resample_pos_embed",
    "unpatchify",
]
