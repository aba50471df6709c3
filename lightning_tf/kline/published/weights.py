"""The published checkpoints' tensor names and ours, both ways.

A table lists, for each of our tensors, the reference tensors concatenated (along dim 0) into it: the core's
attention fuses q, k and v (``qkv_proj``) and k and v (``kv_proj``), and its gated feed-forward fuses the gate
and value matrices (``linear1``); everything else maps one to one. Reading checks that every reference tensor is
used or a known derived buffer, and that every shape is the model's, and says in one line what does not fit;
writing splits the fused tensors again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import torch
from torch import Tensor, nn

__all__ = [
    "Table",
    "chronos_bolt_table",
    "from_reference",
    "kronos_model_table",
    "kronos_tokenizer_table",
    "load_converted",
    "to_reference",
]

#: our tensor name -> the reference tensors concatenated into it
Table = list[tuple[str, list[str]]]


def _kronos_block(ours: str, theirs: str) -> Table:
    out: Table = [(f"{ours}.{n}.weight", [f"{theirs}.{n}.weight"]) for n in ("norm1", "norm2")]
    out += _linear(f"{ours}.self_attn.out_proj", f"{theirs}.self_attn.out_proj")
    for w in ("weight", "bias"):
        out.append((f"{ours}.self_attn.qkv_proj.{w}", [f"{theirs}.self_attn.{p}_proj.{w}" for p in "qkv"]))
    # SwiGLU: w2(silu(w1 x) * w3 x); the core's linear1 holds the gate (w1) then the value (w3)
    out += [
        (f"{ours}.ff.linear1.weight", [f"{theirs}.ffn.w1.weight", f"{theirs}.ffn.w3.weight"]),
        (f"{ours}.ff.linear2.weight", [f"{theirs}.ffn.w2.weight"]),
    ]
    return out


def _linear(ours: str, theirs: str) -> Table:
    return [(f"{ours}.{w}", [f"{theirs}.{w}"]) for w in ("weight", "bias")]


def _same(*names: str) -> Table:
    return [pair for n in names for pair in _linear(n, n)]


def kronos_tokenizer_table(n_encoder_blocks: int, n_decoder_blocks: int) -> Table:
    """The reference ``KronosTokenizer``'s names for our :class:`.KronosTokenizer`'s tensors."""
    table = _same("embed", "head", "quant_embed", "post_quant_embed_pre", "post_quant_embed")
    for i in range(n_encoder_blocks):
        table += _kronos_block(f"encoder.{i}", f"encoder.{i}")
    for i in range(n_decoder_blocks):
        table += _kronos_block(f"decoder.{i}", f"decoder.{i}")
    return table


#: the reference Kronos tokenizer's buffers, derived from its sizes (RoPE frequencies, the quantiser's bit values)
KRONOS_TOKENIZER_BUFFERS = re.compile(
    r"(encoder|decoder)\.\d+\.self_attn\.rotary\.inv_freq|tokenizer\.bsq\.(group_)?basis"
)
#: the reference Kronos model's buffers (RoPE frequencies)
KRONOS_MODEL_BUFFERS = re.compile(r"(transformer\.\d+\.self_attn|dep_layer\.cross_attn)\.rotary\.inv_freq")


def kronos_model_table(n_blocks: int, learned_calendar: bool) -> Table:
    """The reference ``Kronos``'s names for our :class:`.KronosModel`'s tensors."""
    table: Table = [
        ("embed.emb_s1.weight", ["embedding.emb_s1.weight"]),
        ("embed.emb_s2.weight", ["embedding.emb_s2.weight"]),
        *_linear("embed.fusion_proj", "embedding.fusion_proj"),
        ("norm.weight", ["norm.weight"]),
        ("dep_layer.norm.weight", ["dep_layer.norm.weight"]),
        *_same("head.proj_s1", "head.proj_s2"),
    ]
    for name in ("minute", "hour", "weekday", "day", "month"):
        table.append(
            (f"time_embed.{name}.weight", [f"time_emb.{name}_embed{'' if learned_calendar else '.emb'}.weight"])
        )
    for i in range(n_blocks):
        table += _kronos_block(f"blocks.{i}", f"transformer.{i}")
    table += _same("dep_layer.cross_attn.q_proj", "dep_layer.cross_attn.out_proj")
    for w in ("weight", "bias"):
        table.append((f"dep_layer.cross_attn.kv_proj.{w}", [f"dep_layer.cross_attn.{p}_proj.{w}" for p in "kv"]))
    return table


def _t5_attention(ours: str, theirs: str, fused: str) -> Table:
    names = "qkv" if fused == "qkv_proj" else "kv"
    out: Table = [(f"{ours}.{fused}.weight", [f"{theirs}.{p}.weight" for p in names])]
    if fused == "kv_proj":
        out.append((f"{ours}.q_proj.weight", [f"{theirs}.q.weight"]))
    out.append((f"{ours}.out_proj.weight", [f"{theirs}.o.weight"]))
    return out


def _t5_feedforward(ours: str, theirs: str, gated: bool) -> Table:
    inner = [f"{theirs}.wi_0.weight", f"{theirs}.wi_1.weight"] if gated else [f"{theirs}.wi.weight"]
    return [(f"{ours}.linear1.weight", inner), (f"{ours}.linear2.weight", [f"{theirs}.wo.weight"])]


def _residual_block(ours: str, theirs: str) -> Table:
    parts = (("hidden", "hidden_layer"), ("out", "output_layer"), ("skip", "residual_layer"))
    return [pair for a, b in parts for pair in _linear(f"{ours}.{a}", f"{theirs}.{b}")]


#: the reference Chronos-Bolt's tensors that are copies of others (T5 ties its stacks' embeddings to ``shared``)
CHRONOS_BOLT_COPIES = re.compile(r"(encoder|decoder)\.embed_tokens\.weight|lm_head\.weight")


def chronos_bolt_table(n_layers: int, n_decoder_layers: int, gated: bool) -> Table:
    """The reference ``ChronosBoltModelForForecasting``'s names for our :class:`.ChronosBolt`'s tensors."""
    bias = "layer.0.SelfAttention.relative_attention_bias.weight"
    table: Table = [
        ("special_embed.weight", ["shared.weight"]),
        *_residual_block("patch_embed", "input_patch_embedding"),
        *_residual_block("head", "output_patch_embedding"),
        ("encoder.pos.relative.embedding.weight", [f"encoder.block.0.{bias}"]),
        ("encoder.norm.weight", ["encoder.final_layer_norm.weight"]),
        ("decoder.pos.relative.embedding.weight", [f"decoder.block.0.{bias}"]),
        ("decoder.norm.weight", ["decoder.final_layer_norm.weight"]),
    ]
    for i in range(n_layers):
        ours, theirs = f"encoder.layers.{i}", f"encoder.block.{i}"
        table += [
            *_t5_attention(f"{ours}.self_attn", f"{theirs}.layer.0.SelfAttention", "qkv_proj"),
            (f"{ours}.norm1.weight", [f"{theirs}.layer.0.layer_norm.weight"]),
            *_t5_feedforward(f"{ours}.ff", f"{theirs}.layer.1.DenseReluDense", gated),
            (f"{ours}.norm2.weight", [f"{theirs}.layer.1.layer_norm.weight"]),
        ]
    for i in range(n_decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"decoder.block.{i}"
        table += [
            *_t5_attention(f"{ours}.self_attn", f"{theirs}.layer.0.SelfAttention", "qkv_proj"),
            (f"{ours}.norm1.weight", [f"{theirs}.layer.0.layer_norm.weight"]),
            *_t5_attention(f"{ours}.cross_attn", f"{theirs}.layer.1.EncDecAttention", "kv_proj"),
            (f"{ours}.norm2.weight", [f"{theirs}.layer.1.layer_norm.weight"]),
            *_t5_feedforward(f"{ours}.ff", f"{theirs}.layer.2.DenseReluDense", gated),
            (f"{ours}.norm3.weight", [f"{theirs}.layer.2.layer_norm.weight"]),
        ]
    return table


def _sample(names: Iterable[str], n: int = 3) -> str:
    names = sorted(names)
    return f"{names[:n]}" + (f" and {len(names) - n} more" if len(names) > n else "")


def from_reference(
    theirs: Mapping[str, Tensor], table: Table, derived: re.Pattern[str], what: str, where: str
) -> dict[str, Tensor]:
    """A reference state dict in our names.

    Args:
        theirs: the reference's tensors.
        table: :func:`kronos_model_table` and the like.
        derived: the reference names that are derived buffers or copies, left out.
        what: the model, for the messages.
        where: the file, for the messages.

    Raises:
        ValueError: tensors the table needs and ``theirs`` lacks, or tensors it holds that the table does not
            know (another architecture, or a config whose sizes are not the weights').
    """
    needed = {name for _, names in table for name in names}
    missing = needed - set(theirs)
    extra = {k for k in set(theirs) - needed if not derived.fullmatch(k)}
    if missing or extra:
        parts = [f"lacks {len(missing)} tensors of a {what} ({_sample(missing)})"] if missing else []
        parts += [f"holds {len(extra)} it does not know ({_sample(extra)})"] if extra else []
        raise ValueError(f"{where}: " + " and ".join(parts) + "; is it another architecture, or another size?")
    return {ours: torch.cat([theirs[n] for n in names]) for ours, names in table}


def load_converted(module: nn.Module, state: Mapping[str, Tensor], where: str) -> None:
    """Load ``state`` (our names, complete) into ``module``, saying in one line which shape does not fit.

    Raises:
        ValueError: a tensor of another shape than the module's.
    """
    own = module.state_dict()
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise ValueError(
                f"{where}: {name} has shape {tuple(tensor.shape)} where the config gives {tuple(own[name].shape)}"
            )
    module.load_state_dict(state, strict=True)


def to_reference(ours: Mapping[str, Tensor], table: Table) -> dict[str, Tensor]:
    """Our state dict in the reference's names (fused tensors split again), contiguous and on the CPU."""
    out: dict[str, Tensor] = {}
    for name, names in table:
        for theirs, part in zip(names, ours[name].detach().cpu().chunk(len(names)), strict=True):
            out[theirs] = part.contiguous().clone()
    return out
