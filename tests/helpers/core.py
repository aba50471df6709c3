"""Weight copies from torch.nn's Transformer layers into the core's, for reference-equality tests."""

from __future__ import annotations

import torch
from torch import nn

from lightning_tf.core import DecoderLayer, EncoderLayer

__all__ = ["copy_decoder_layer", "copy_encoder_layer"]


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
