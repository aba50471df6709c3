"""Pretrained weights for :class:`~.module.ViTClassifier` (its ``pretrained`` argument), from three sources:

* a **timm model name** (``vit_tiny_patch16_224.augreg_in21k``): built by timm with its pretrained weights,
  which timm fetches through the Hugging Face hub (or its local cache). Offline (``HF_HUB_OFFLINE=1``, no
  network) and not cached, this is one line saying so and how to pass a file instead;
* a **timm checkpoint file** (``.safetensors``, ``.pth``/``.pt``/``.bin``: a timm ViT's ``state_dict``); the
  architecture is read from the tensor shapes, except the head count, which no tensor holds: ``d_model // 64``
  (every timm ViT size) unless ``n_heads`` is given. A folder holding a timm hub ``config.json``
  (``architecture``) and its weights is built by timm from that name;
* a **folder this package exported** (``lightning-tf export --format safetensors``) or one of its Lightning
  checkpoints (``.ckpt``) of a ViT.

:func:`adapt_pretrained` then fits the weights to the task at hand, as timm does for fine-tuning: the head is
dropped (re-initialised) when the class count differs, the learned position table is resampled to the new
patch grid, and RGB patch-embedding weights serve 1-channel images summed over their input channels (timm's
``adapt_input_conv``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .timm_interop import convert_timm_state_dict, load_weights_file
from .vit import preset_config, resample_pos_embed

__all__ = ["adapt_pretrained", "infer_timm_architecture", "resolve_pretrained"]

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt")
#: the architecture keys a pretrained source fixes
ARCH_KEYS = (
    "image_size",
    "patch_size",
    "in_chans",
    "num_classes",
    "d_model",
    "n_heads",
    "n_layers",
    "d_ff",
    "pool",
    "class_token",
    "pos_encoding",
    "layer_scale",
)


def infer_timm_architecture(state: dict[str, Tensor], n_heads: int | None = None) -> dict[str, Any]:
    """The :class:`~.vit.VisionTransformer` arguments of a timm ViT ``state_dict``, read from its shapes
    (``n_heads``: ``d_model // 64`` unless given, as every timm ViT size has 64-wide heads).

    Raises:
        ValueError: a state dict that is not a plain timm ViT's (naming what is missing or unsupported).
    """
    if "patch_embed.proj.weight" not in state or "blocks.0.attn.qkv.weight" not in state:
        raise ValueError(
            "not a timm VisionTransformer state dict (no patch_embed.proj.weight / blocks.0.attn.qkv.weight)"
        )
    if any(k.startswith("reg_token") for k in state):
        raise ValueError("timm ViT with register tokens is not supported")
    w = state["patch_embed.proj.weight"]  # (D, C, p, p)
    d_model, in_chans, patch = w.shape[0], w.shape[1], w.shape[2]
    if w.shape[2] != w.shape[3]:
        raise ValueError(f"non-square patches {tuple(w.shape[2:])} are not supported")
    n_layers = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k)))
    class_token = "cls_token" in state
    n_prefix = 1 if class_token else 0
    pos = state.get("pos_embed")
    if pos is not None:
        side = round((pos.shape[1] - n_prefix) ** 0.5)
        if side * side != pos.shape[1] - n_prefix:
            raise ValueError(f"pos_embed of {pos.shape[1]} rows is not a square grid (+{n_prefix} class token)")
        image_size = side * patch
    else:
        raise ValueError("timm ViT without a learned position table (pos_embed) cannot tell its image size")
    if "head.weight" not in state:
        raise ValueError("timm ViT without a classification head (num_classes=0) is not supported")
    heads = n_heads if n_heads is not None else max(d_model // 64, 1)
    if d_model % heads:
        raise ValueError(f"n_heads ({heads}) must divide d_model ({d_model})")
    return dict(
        image_size=image_size,
        patch_size=patch,
        in_chans=in_chans,
        num_classes=state["head.weight"].shape[0],
        d_model=d_model,
        n_heads=heads,
        n_layers=n_layers,
        d_ff=state["blocks.0.mlp.fc1.weight"].shape[0],
        pool="mean" if "fc_norm.weight" in state else "cls",
        class_token=class_token,
        pos_encoding="learned",
        layer_scale=1e-5 if "blocks.0.ls1.gamma" in state else None,
    )


def _from_timm_model(model: Any) -> tuple[dict[str, Any], dict[str, Tensor]]:
    from .timm_interop import timm_config

    config = timm_config(model)
    eps = config.pop("layer_norm_eps")
    if eps != 1e-6:
        raise ValueError(f"timm model has layer norm eps {eps}; ViTClassifier uses 1e-6")
    return config, convert_timm_state_dict(model.state_dict(), config["n_layers"])


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _cached_weights(name: str) -> str | None:
    """The file of ``name``'s pretrained weights in the Hugging Face cache, if it is there."""
    from huggingface_hub import try_to_load_from_cache
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    repo = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    if not repo:
        return None
    for filename in ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"):
        found = try_to_load_from_cache(repo, filename)
        if isinstance(found, str):
            return found
    return None


def _from_timm_name(name: str) -> tuple[dict[str, Any], dict[str, Tensor]]:
    import timm

    if not timm.is_model(name):
        raise ValueError(
            f"pretrained={name!r} is neither a file nor a folder, nor a timm model name (see timm.list_models())"
        )
    advice = (
        "fetch them once where there is a network (they stay in the Hugging Face cache) or pass a file: "
        "pretrained=path/to/model.safetensors (a timm state dict) or a folder of lightning-tf export"
    )
    if _offline():  # answer at once, without the hub's retries
        cached = _cached_weights(name)
        if cached is None:
            raise ValueError(f"pretrained={name!r}: HF_HUB_OFFLINE=1 and its weights are not in the cache; {advice}")
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": cached})
        return _from_timm_model(model)
    try:
        model = timm.create_model(name, pretrained=True)
    except Exception as e:  # the hub's errors: no network, gated repository, ...
        raise ValueError(
            f"pretrained={name!r}: timm could not fetch its weights ({type(e).__name__}); {advice}"
        ) from None
    return _from_timm_model(model)


def _from_lightning(hparams: dict[str, Any], state: dict[str, Tensor], where: Path) -> tuple[dict, dict]:
    if not any(k.startswith("net.patch_embed.") for k in state):
        raise ValueError(f"{where} does not hold a ViTClassifier (no net.patch_embed weights)")
    arch: dict[str, Any] = preset_config(hparams["preset"]) if hparams.get("preset") else {}
    arch.update({k: hparams[k] for k in ARCH_KEYS if hparams.get(k) is not None})
    arch.setdefault("class_token", arch.get("pool", "cls") == "cls")
    arch.setdefault("layer_scale", None)
    arch.setdefault("d_ff", 4 * arch["d_model"])
    net_state = {k[4:]: v for k, v in state.items() if k.startswith("net.")}
    return arch, net_state


def resolve_pretrained(source: str | Path, n_heads: int | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The architecture (the :class:`~.vit.VisionTransformer` arguments of :data:`ARCH_KEYS`) and the
    weights (our layout) of a pretrained ``source``: a timm model name, a timm checkpoint file, a
    lightning-tf export folder or checkpoint, or a timm hub folder (see the module docstring).

    Args:
        source: where the weights come from.
        n_heads: the head count of a timm checkpoint file (default ``d_model // 64``).

    Raises:
        FileNotFoundError: a path that does not exist (ends in a weights suffix or names a folder).
        ValueError: an unknown timm name, weights not reachable offline, an unsupported architecture.
    """
    path = Path(source).expanduser()
    if path.is_dir():
        sidecar = path / "config.json"
        if not sidecar.is_file():
            raise FileNotFoundError(f"pretrained folder {path} has no config.json (not an export of lightning-tf)")
        config = json.loads(sidecar.read_text())
        if "architecture" in config:  # a timm hub folder: config.json + model.safetensors / pytorch_model.bin
            weights = next((path / f for f in ("model.safetensors", "pytorch_model.bin") if (path / f).is_file()), None)
            if weights is None:
                raise FileNotFoundError(f"pretrained folder {path} has no model.safetensors or pytorch_model.bin")
            from .timm_interop import load_timm_model

            return _from_timm_model(load_timm_model(config["architecture"], weights))
        if config.get("format") != "lightning-tf-export":
            raise ValueError(f"{sidecar} is neither a lightning-tf export nor a timm config (no 'architecture')")
        from safetensors.torch import load_file

        return _from_lightning(config["hparams"], load_file(str(path / "model.safetensors")), path)
    if path.is_file():
        if path.suffix == ".ckpt":
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
            return _from_lightning(ckpt.get("hyper_parameters", {}), ckpt["state_dict"], path)
        state = load_weights_file(path)
        if any(k.startswith("net.patch_embed.") for k in state):
            raise ValueError(f"{path} holds lightning-tf weights without their config: pass the export folder")
        try:
            arch = infer_timm_architecture(state, n_heads)
        except ValueError as e:
            raise ValueError(f"pretrained={str(path)!r}: {e}") from None
        return arch, convert_timm_state_dict(state, arch["n_layers"])
    text = str(source)
    if path.suffix in WEIGHT_SUFFIXES or (os.sep in text and not text.startswith("hf-hub:")):
        raise FileNotFoundError(f"pretrained weights {path} do not exist")
    return _from_timm_name(text)


def adapt_pretrained(
    state: dict[str, Tensor],
    arch: dict[str, Any],
    *,
    num_classes: int,
    in_chans: int,
    image_size: int,
) -> dict[str, Tensor]:
    """Fit pretrained weights (our layout, architecture ``arch``) to ``num_classes``, ``in_chans`` and
    ``image_size``: the head left out when the class count differs (it keeps its fresh initialisation),
    the patch-embedding weights adapted to the channels by timm's ``adapt_input_conv`` (RGB -> grey: summed
    over the input channels), and the learned position table resampled to the new grid."""
    state = dict(state)
    if num_classes != arch["num_classes"]:
        log.info("pretrained head of %d classes re-initialised for %d", arch["num_classes"], num_classes)
        state = {k: v for k, v in state.items() if not k.startswith("head.")}
    if in_chans != arch["in_chans"]:
        from timm.models import adapt_input_conv

        log.info("pretrained patch embedding of %d channels adapted to %d", arch["in_chans"], in_chans)
        weight = state["patch_embed.proj.weight"]  # (D, C, p, p)
        state["patch_embed.proj.weight"] = adapt_input_conv(in_chans, weight.float()).to(weight.dtype)
    patch = arch["patch_size"]
    if image_size % patch:
        raise ValueError(f"image_size ({image_size}) must be divisible by the pretrained patch_size ({patch})")
    if image_size != arch["image_size"] and state.get("pos_embed") is not None:
        old, new = (arch["image_size"] // patch,) * 2, (image_size // patch,) * 2
        n_prefix = 1 if arch["class_token"] else 0
        state["pos_embed"] = resample_pos_embed(state["pos_embed"], new, old, n_prefix)  # (1, n_prefix + N', D)
    return state
