"""Build our :class:`~.vit.VisionTransformer` from a timm ``VisionTransformer`` and its weights.

timm's ``Block`` is ``x + ls1(attn(norm1(x)))``, ``x + ls2(mlp(norm2(x)))`` with a fused
``qkv`` projection laid out ``(3, H, Dh)`` along the output dimension, exactly as our
:class:`~lightning_tf.core.MultiHeadAttention` splits its ``qkv_proj``; so the weights copy one
to one (a ``qkv_bias=False`` model gets a zero bias). Weights supplied as a file go through timm's
own ``checkpoint_filter_fn`` first, which converts other layouts (OpenCLIP, DINOv2, ...) and resamples
the position table to the model's grid.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .vit import VisionTransformer, resample_pos_embed

__all__ = [
    "convert_timm_state_dict",
    "load_timm_model",
    "load_weights_file",
    "resize_model",
    "timm_config",
    "timm_to_ours",
]

log = logging.getLogger(__name__)


def load_weights_file(path: str | Path) -> dict[str, Tensor]:
    """A state dict from a ``.safetensors`` file or a torch checkpoint (``.pth``/``.pt``/``.bin``,
    loaded with ``weights_only=True``; a ``model``/``state_dict`` wrapper is unwrapped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} does not exist")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("model", "state_dict", "model_ema"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
            break
    if not isinstance(state, dict):
        raise TypeError(f"{path}: expected a state dict, got {type(state).__name__}")
    return state


def timm_config(model: nn.Module) -> dict[str, Any]:
    """The :class:`~.vit.VisionTransformer` arguments that reproduce a timm ``VisionTransformer``.

    Raises:
        ValueError: for timm features our model does not have (register tokens, qk-norm, pre-norm,
            attention pooling, other norms or activations, ...), naming the feature.
    """
    from timm.layers import LayerScale
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    if not isinstance(model, TimmViT):
        raise TypeError(f"expected a timm VisionTransformer, got {type(model).__name__}")
    name = getattr(model, "default_cfg", {}).get("architecture", type(model).__name__)

    def unsupported(what: str) -> ValueError:
        return ValueError(f"timm model {name!r}: {what} is not supported by lightning_tf's VisionTransformer")

    img_size, patch_size = tuple(model.patch_embed.img_size), tuple(model.patch_embed.patch_size)
    if img_size[0] != img_size[1] or patch_size[0] != patch_size[1]:
        raise unsupported(f"a non-square image ({img_size}) or patch ({patch_size})")
    if model.num_reg_tokens:
        raise unsupported(f"reg_tokens={model.num_reg_tokens}")
    if model.global_pool not in ("token", "avg"):
        raise unsupported(f"global_pool={model.global_pool!r} (only 'token' and 'avg')")
    if model.has_class_token and model.no_embed_class:
        raise unsupported("no_embed_class=True")
    if not isinstance(model.norm_pre, nn.Identity):
        raise unsupported("pre_norm=True")
    if not isinstance(getattr(model.patch_embed, "norm", nn.Identity()), nn.Identity):
        raise unsupported("a patch-embedding norm")
    if model.patch_embed.proj.bias is None:
        raise unsupported("a patch embedding without bias")
    if not isinstance(model.head, nn.Linear):
        raise unsupported("num_classes=0 (no head)")
    avg = model.global_pool == "avg"
    final = model.fc_norm if avg else model.norm
    other = model.norm if avg else model.fc_norm
    if type(final) is not nn.LayerNorm and type(final).__name__ != "LayerNorm":
        raise unsupported(f"final_norm=False or fc_norm other than the default for global_pool={model.global_pool!r}")
    if not isinstance(other, nn.Identity):
        raise unsupported(f"fc_norm other than the default for global_pool={model.global_pool!r}")

    block = model.blocks[0]
    attn, mlp = block.attn, block.mlp
    if not isinstance(getattr(attn, "q_norm", nn.Identity()), nn.Identity) or not isinstance(
        getattr(attn, "norm", nn.Identity()), nn.Identity
    ):
        raise unsupported("qk_norm / scale_attn_norm")
    if not isinstance(getattr(mlp, "norm", nn.Identity()), nn.Identity):
        raise unsupported("scale_mlp_norm")
    if not (isinstance(mlp.act, nn.GELU) and mlp.act.approximate == "none"):
        raise unsupported(f"activation {mlp.act!r} (only exact GELU)")
    if type(block).__name__ != "Block":
        raise unsupported(f"block type {type(block).__name__}")
    if attn.proj.bias is None or mlp.fc1.bias is None:
        raise unsupported("linear layers without bias (proj_bias=False)")
    layer_scale = float(block.ls1.gamma.detach().flatten()[0]) if isinstance(block.ls1, LayerScale) else None
    return dict(
        image_size=img_size[0],
        patch_size=patch_size[0],
        in_chans=model.patch_embed.proj.in_channels,
        num_classes=model.num_classes,
        d_model=model.embed_dim,
        n_heads=attn.num_heads,
        n_layers=len(model.blocks),
        d_ff=mlp.fc1.out_features,
        pool="mean" if avg else "cls",
        class_token=bool(model.has_class_token),
        pos_encoding="learned" if model.pos_embed is not None else "none",
        layer_scale=layer_scale if layer_scale is None else (layer_scale or 1e-5),
        layer_norm_eps=final.eps,
    )


def convert_timm_state_dict(state: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename a timm ViT state dict to ours (a missing qkv bias becomes zeros)."""
    out: dict[str, Tensor] = {}
    same = ("cls_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias", "head.weight", "head.bias")
    for key in same:
        if key in state:
            out[key] = state[key]
    for key in ("norm", "fc_norm"):
        if f"{key}.weight" in state:
            target = "encoder.norm" if key == "norm" else "fc_norm"
            out[f"{target}.weight"], out[f"{target}.bias"] = state[f"{key}.weight"], state[f"{key}.bias"]
    names = {
        "norm1": "norm1",
        "norm2": "norm2",
        "attn.qkv": "self_attn.qkv_proj",
        "attn.proj": "self_attn.out_proj",
        "mlp.fc1": "ff.linear1",
        "mlp.fc2": "ff.linear2",
    }
    for i in range(n_layers):
        src, dst = f"blocks.{i}.", f"encoder.layers.{i}."
        for a, b in names.items():
            out[f"{dst}{b}.weight"] = state[f"{src}{a}.weight"]
            bias = state.get(f"{src}{a}.bias")
            out[f"{dst}{b}.bias"] = (
                bias if bias is not None else state[f"{src}{a}.weight"].new_zeros(state[f"{src}{a}.weight"].shape[0])
            )
        for ls in ("ls1", "ls2"):
            if f"{src}{ls}.gamma" in state:
                out[f"{dst}{ls}.gamma"] = state[f"{src}{ls}.gamma"]
    return out


def timm_to_ours(
    model: nn.Module, dropout: float = 0.0, drop_path: float = 0.0
) -> tuple[VisionTransformer, dict[str, Any]]:
    """Our :class:`~.vit.VisionTransformer` computing the same function as a timm ViT, and its arguments."""
    config = timm_config(model)
    ours = VisionTransformer(**config, dropout=dropout, drop_path=drop_path)
    state = convert_timm_state_dict(model.state_dict(), config["n_layers"])
    ours.load_state_dict(state, strict=True)
    return ours.to(next(model.parameters()).dtype), config


def load_timm_model(name_or_model: str | nn.Module, weights: str | Path | None = None) -> nn.Module:
    """A timm ViT built locally (``pretrained=False``, nothing downloaded), with ``weights`` loaded
    into it when given (position table resampled and foreign layouts converted by timm)."""
    import timm
    from timm.models.vision_transformer import checkpoint_filter_fn

    state = load_weights_file(weights) if weights is not None else None
    if isinstance(name_or_model, str):
        kwargs: dict[str, Any] = {}
        if state is not None and "head.weight" in state:
            kwargs["num_classes"] = state["head.weight"].shape[0]  # build the head the weights have
        try:
            model = timm.create_model(name_or_model, pretrained=False, **kwargs)
        except RuntimeError as e:  # timm: "Unknown model (...)"
            raise ValueError(f"timm has no model {name_or_model!r}: {e}") from None
    else:
        model = name_or_model
    if state is not None:
        state = checkpoint_filter_fn(state, model)
        head = state.get("head.weight")
        if head is not None and head.shape != model.head.weight.shape:
            model.reset_classifier(head.shape[0])
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(
                f"weights {weights} do not fit timm model {type(model).__name__}: "
                f"missing {missing[:8]}, unexpected {unexpected[:8]}"
            )
    return model.eval()


def resize_model(model: VisionTransformer, image_size: int) -> None:
    """Make ``image_size`` the model's training resolution, resampling a learned position table."""
    if image_size % model.patch_size:
        raise ValueError(f"patch_size ({model.patch_size}) must divide image_size ({image_size})")
    grid = (image_size // model.patch_size,) * 2
    if model.pos_encoding == "learned":
        assert isinstance(model.pos_embed, nn.Parameter)
        model.pos_embed = nn.Parameter(resample_pos_embed(model.pos_embed.detach(), grid, model.grid, model.n_prefix))
    elif model.pos_encoding == "sincos2d":
        model.pos_embed = model._sincos(grid, model.d_model)
    model.image_size, model.grid = image_size, grid
