"""Weight copies from torch.nn's Transformer layers into the core's, for reference-equality tests, and the
measured dropout rate of the feed-forward hidden units."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lightning_tf.core import DecoderLayer, EncoderLayer
from lightning_tf.core.feedforward import FeedForward

__all__ = ["copy_decoder_layer", "copy_encoder_layer", "hidden_dropout_rates"]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def hidden_dropout_rates(model: nn.Module, run: Callable[[], object]) -> list[float]:
    """The share of feed-forward hidden units each :class:`FeedForward` of ``model`` zeroed during ``run()``
    (one forward, in training mode), counted over the units the activation left non-zero; every kept unit
    is checked to be the activation's value scaled by ``1 / (1 - p)``."""
    seen: list[tuple[FeedForward, dict[str, torch.Tensor]]] = []
    handles = []
    for ff in (m for m in model.modules() if isinstance(m, FeedForward)):
        store: dict[str, torch.Tensor] = {}
        seen.append((ff, store))
        # the pre-activation (cloned: relu works in place) and linear2's input, the dropped hidden units
        handles.append(ff.linear1.register_forward_hook(lambda m, i, o, s=store: s.update(pre=o.detach().clone())))
        handles.append(ff.linear2.register_forward_pre_hook(lambda m, i, s=store: s.update(post=i[0].detach())))
    model.train()
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    rates = []
    for ff, s in seen:
        act = _ACTIVATIONS[ff.activation](s["pre"])
        live = act != 0
        dropped = (s["post"] == 0) & live
        kept = live & ~dropped
        torch.testing.assert_close(s["post"][kept], act[kept] / (1 - ff.dropout.p), rtol=1e-5, atol=1e-6)
        rates.append(dropped.sum().item() / live.sum().item())
    return rates


def copy_encoder_layer(src: nn.TransformerEncoderLayer, dst: EncoderLayer) -> None:
    """Copy an ``nn.TransformerEncoderLayer``'s weights into our :class:`EncoderLayer`."""
    with torch.no_grad():
        dst.self_attn.qkv_proj.weight.copy_(src.self_attn.in_proj_weight)
        dst.self_attn.qkv_proj.bias.copy_(src.self_attn.in_proj_bias)
        dst.self_attn.out_proj.load_state_dict(src.self_attn.out_proj.state_dict())
        dst.ff.linear1.load_state_dict(src.linear1.state_dict())
        dst.ff.linear2.load_state_dict(src.linear2.state_dict())
        dst.norm1.load_state_dict(src.norm1.state_dict())
        dst.norm2.load_state_dict(src.norm2.state_dict())


def copy_decoder_layer(src: nn.TransformerDecoderLayer, dst: DecoderLayer) -> None:
    """Copy an ``nn.TransformerDecoderLayer``'s weights into our :class:`DecoderLayer`."""
    d = dst.cross_attn.d_model
    with torch.no_grad():
        dst.self_attn.qkv_proj.weight.copy_(src.self_attn.in_proj_weight)
        dst.self_attn.qkv_proj.bias.copy_(src.self_attn.in_proj_bias)
        dst.self_attn.out_proj.load_state_dict(src.self_attn.out_proj.state_dict())
        # nn packs q, k, v of cross-attention in one (3D, D) matrix; we split q from the fused k, v
        dst.cross_attn.q_proj.weight.copy_(src.multihead_attn.in_proj_weight[:d])
        dst.cross_attn.q_proj.bias.copy_(src.multihead_attn.in_proj_bias[:d])
        dst.cross_attn.kv_proj.weight.copy_(src.multihead_attn.in_proj_weight[d:])
        dst.cross_attn.kv_proj.bias.copy_(src.multihead_attn.in_proj_bias[d:])
        dst.cross_attn.out_proj.load_state_dict(src.multihead_attn.out_proj.state_dict())
        dst.ff.linear1.load_state_dict(src.linear1.state_dict())
        dst.ff.linear2.load_state_dict(src.linear2.state_dict())
        for name in ("norm1", "norm2", "norm3"):
            getattr(dst, name).load_state_dict(getattr(src, name).state_dict())
