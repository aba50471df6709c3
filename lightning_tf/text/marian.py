"""Marian / OPUS-MT models (transformers' ``MarianMTModel``) into and out of :class:`Seq2SeqTransformer`.

Marian's transformer (Junczys-Dowmunt et al. 2018) is the encoder-decoder of Vaswani et al. 2017 with
Post-LN layers, the SiLU ("swish") feed-forward activation, token embeddings scaled by sqrt(d_model)
(``scale_embedding``) and shared between the encoder, the decoder and the output when the model shares
them, the sinusoidal table with the sines in the first half of each vector and the cosines in the
second (our ``sinusoidal_halves``) from position 0, a bias on the logits (``final_logits_bias``), and
the pad id as the decoder's start token. Attention projects q, k and v with one matrix each; ours fuses
them (``qkv_proj``, ``kv_proj``), so the weights are concatenated on the way in and split on the way out.
Which embeddings are shared is read from the model's modules (the tensors they hold), not its config,
so the copy computes what the reference computes.

transformers is imported only inside these functions: importing :mod:`lightning_tf.text` does not load it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .spm_tokenizer import SentencePieceTokenizer
from .tokenizer import TextTokenizer
from .tokenizer_kinds import load_tokenizer

__all__ = [
    "ARCHITECTURE",
    "EXPORTED",
    "from_marian_arguments",
    "load_pretrained",
    "marian_arguments",
    "marian_state_dict",
    "to_marian",
]

log = logging.getLogger(__name__)

#: transformers' activation names -> ours
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}
_HF_ACTIVATION = {"silu": "swish", "gelu": "gelu", "relu": "relu"}

# the arguments a Marian model fixes (its architecture and special ids)
ARCHITECTURE = (
    "vocab_size",
    "d_model",
    "n_heads",
    "n_layers",
    "n_decoder_layers",
    "d_ff",
    "norm_first",
    "activation",
    "pos_encoding",
    "max_len",
    "share_embeddings",
    "tie_output",
    "scale_embedding",
    "output_bias",
    "pad_id",
    "bos_id",
    "eos_id",
)
#: the arguments :func:`to_marian` writes: the architecture, the dropout rates and the generation's beam width
EXPORTED = (*ARCHITECTURE, "dropout", "attn_dropout", "ffn_dropout", "beam_size")


def _transformers() -> Any:
    try:
        import transformers
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "Marian models need transformers and sentencepiece: pip install 'lightning-tf[hf]'"
        ) from None
    return transformers


# ---------------------------------------------------------------------------------------- in


def marian_arguments(marian: Any, dropout: float | None = None, ffn_dropout: float | None = None) -> dict[str, Any]:
    """The :class:`Seq2SeqTransformer` arguments that reproduce a ``MarianMTModel``.

    Args:
        marian: the ``MarianMTModel`` (its config, and the embedding sharing of its modules).
        dropout: a dropout rate to use instead of the config's ``dropout``.
        ffn_dropout: a rate for the feed-forward hidden units to use instead of the config's
            ``activation_dropout``.

    Raises:
        ValueError: for what our model cannot express, naming the config field.
    """
    config = marian.config
    pairs = (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim"))
    unequal = [(a, b) for a, b in pairs if getattr(config, a) != getattr(config, b)]
    if unequal:
        a, b = unequal[0]
        raise ValueError(
            f"Marian config: {a} ({getattr(config, a)}) differs from {b} ({getattr(config, b)}); "
            "Seq2SeqTransformer uses one value for both stacks"
        )
    decoder_vocab = getattr(config, "decoder_vocab_size", None) or config.vocab_size
    if decoder_vocab != config.vocab_size:
        raise ValueError(
            f"Marian config: decoder_vocab_size ({decoder_vocab}) differs from vocab_size "
            f"({config.vocab_size}); Seq2SeqTransformer has one id capacity for both sides"
        )
    if config.activation_function not in ACTIVATIONS:
        raise ValueError(
            f"Marian config: activation_function {config.activation_function!r} is not one of {sorted(ACTIVATIONS)}"
        )
    ids = {
        "pad_token_id": config.pad_token_id,
        "eos_token_id": config.eos_token_id,
        "decoder_start_token_id": config.decoder_start_token_id,
    }
    for name, value in ids.items():
        if not isinstance(value, int):
            raise ValueError(f"Marian config: {name} must be one int, got {value!r}")
    for name in ("encoder_layerdrop", "decoder_layerdrop"):
        if getattr(config, name, 0.0):
            log.warning("Marian config: %s = %s is not used here (no layer drop)", name, getattr(config, name))
    share, tie = _sharing(marian)
    return dict(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        n_heads=config.encoder_attention_heads,
        n_layers=config.encoder_layers,
        n_decoder_layers=config.decoder_layers,
        d_ff=config.encoder_ffn_dim,
        dropout=float(config.dropout if dropout is None else dropout),
        ffn_dropout=float(config.activation_dropout if ffn_dropout is None else ffn_dropout),
        norm_first=False,
        activation=ACTIVATIONS[config.activation_function],
        pos_encoding="sinusoidal_halves",
        max_len=config.max_position_embeddings,
        share_embeddings=share,
        tie_output=tie,
        scale_embedding=bool(config.scale_embedding),
        output_bias=True,
        pad_id=config.pad_token_id,
        bos_id=config.decoder_start_token_id,
        eos_id=config.eos_token_id,
    )


def _sharing(marian: Any) -> tuple[bool, bool]:
    """(encoder and decoder share one embedding tensor, the output projection is the decoder's embedding),
    read from the modules: what the forward pass uses."""
    enc = marian.get_encoder().embed_tokens.weight
    dec = marian.get_decoder().embed_tokens.weight
    return enc is dec, marian.lm_head.weight is dec


def _layer_map(n_enc: int, n_dec: int) -> list[tuple[str, list[str]]]:
    """Our state-dict name -> the Marian names concatenated (dim 0) into it, for every layer tensor."""
    out: list[tuple[str, list[str]]] = []
    for w in ("weight", "bias"):
        for i in range(n_enc):
            ours, theirs = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
            out += [
                (f"{ours}.self_attn.qkv_proj.{w}", [f"{theirs}.self_attn.{p}_proj.{w}" for p in "qkv"]),
                (f"{ours}.self_attn.out_proj.{w}", [f"{theirs}.self_attn.out_proj.{w}"]),
                (f"{ours}.norm1.{w}", [f"{theirs}.self_attn_layer_norm.{w}"]),
                (f"{ours}.ff.linear1.{w}", [f"{theirs}.fc1.{w}"]),
                (f"{ours}.ff.linear2.{w}", [f"{theirs}.fc2.{w}"]),
                (f"{ours}.norm2.{w}", [f"{theirs}.final_layer_norm.{w}"]),
            ]
        for i in range(n_dec):
            ours, theirs = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
            out += [
                (f"{ours}.self_attn.qkv_proj.{w}", [f"{theirs}.self_attn.{p}_proj.{w}" for p in "qkv"]),
                (f"{ours}.self_attn.out_proj.{w}", [f"{theirs}.self_attn.out_proj.{w}"]),
                (f"{ours}.norm1.{w}", [f"{theirs}.self_attn_layer_norm.{w}"]),
                (f"{ours}.cross_attn.q_proj.{w}", [f"{theirs}.encoder_attn.q_proj.{w}"]),
                (f"{ours}.cross_attn.kv_proj.{w}", [f"{theirs}.encoder_attn.{p}_proj.{w}" for p in "kv"]),
                (f"{ours}.cross_attn.out_proj.{w}", [f"{theirs}.encoder_attn.out_proj.{w}"]),
                (f"{ours}.norm2.{w}", [f"{theirs}.encoder_attn_layer_norm.{w}"]),
                (f"{ours}.ff.linear1.{w}", [f"{theirs}.fc1.{w}"]),
                (f"{ours}.ff.linear2.{w}", [f"{theirs}.fc2.{w}"]),
                (f"{ours}.norm3.{w}", [f"{theirs}.final_layer_norm.{w}"]),
            ]
    return out


def marian_state_dict(marian: Any, share_embeddings: bool, tie_output: bool) -> dict[str, Tensor]:
    """A ``MarianMTModel``'s weights as the state dict of a :class:`Seq2SeqTransformer` built with
    :func:`marian_arguments`: every tensor of that model, by its name.

    Args:
        marian: the ``MarianMTModel``.
        share_embeddings: whether the receiving model has one embedding table for source and target.
        tie_output: whether its output projection reuses the target embedding matrix.

    Raises:
        ValueError: when the Marian model's embedding sharing differs from ``share_embeddings`` and ``tie_output``.
    """
    share, tie = _sharing(marian)
    if (share, tie) != (share_embeddings, tie_output):
        raise ValueError(
            f"the Marian model's modules share the encoder and decoder embeddings: {share}, tie the output to the "
            f"decoder's: {tie}; the model was built with share_embeddings={share_embeddings}, "
            f"tie_output={tie_output}"
        )
    theirs = marian.state_dict()
    state: dict[str, Tensor] = {
        k: torch.cat([theirs[n] for n in names])
        for k, names in _layer_map(len(marian.get_encoder().layers), len(marian.get_decoder().layers))
    }
    state["tgt_embed.weight"] = marian.get_decoder().embed_tokens.weight.detach()
    if not share:
        state["src_embed.weight"] = marian.get_encoder().embed_tokens.weight.detach()
    state["head.weight"] = marian.lm_head.weight.detach()
    state["head.bias"] = theirs["final_logits_bias"].reshape(-1)
    return state


def load_pretrained(
    source: str, changed: Mapping[str, Any], dropout: float | None = None, ffn_dropout: float | None = None
) -> tuple[dict[str, Any], dict[str, Tensor], SentencePieceTokenizer]:
    """Read a Marian model and its tokenizer from a hub name or a local folder.

    Args:
        source: the hub name or folder.
        changed: the architecture arguments (:data:`ARCHITECTURE`) the user set away from their defaults; each
            must equal the model's.
        dropout: a dropout rate to use instead of the model's.
        ffn_dropout: a rate for the feed-forward hidden units to use instead of the model's.

    Returns:
        The model's architecture and special ids as :class:`Seq2SeqTransformer` arguments
        (:func:`marian_arguments`), its weights as that model's state dict and its tokenizer.

    Raises:
        ValueError: when an argument of ``changed`` differs from the model's, naming both (e.g. a ``vocab_size``
            linked from data with another tokenizer).
    """
    transformers = _transformers()
    marian = transformers.MarianMTModel.from_pretrained(source)
    tokenizer = load_tokenizer(source)
    if not isinstance(tokenizer, SentencePieceTokenizer):
        raise ValueError(f"{source}: holds no Marian tokenizer (source.spm, target.spm, vocab.json)")
    arch = marian_arguments(marian, dropout, ffn_dropout)
    if tokenizer.vocab_size != arch["vocab_size"]:
        raise ValueError(
            f"{source}: the tokenizer's vocab_size ({tokenizer.vocab_size}) differs from the model's "
            f"({arch['vocab_size']})"
        )
    for name, given in changed.items():
        if given != arch[name]:
            hint = " (linked from the data: give it the model's tokenizer, data.tokenizer_dir)" * (name == "vocab_size")
            raise ValueError(f"model.{name} ({given}) differs from the pretrained model's ({arch[name]}){hint}")
    return arch, marian_state_dict(marian, arch["share_embeddings"], arch["tie_output"]), tokenizer


def from_marian_arguments(
    model: Any, tokenizer: Any, arguments: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Tensor], SentencePieceTokenizer | None]:
    """What :meth:`Seq2SeqTransformer.from_marian` builds its model from.

    Args:
        model: a ``MarianMTModel``, or a hub name or local folder of one.
        tokenizer: its ``MarianTokenizer`` or a :class:`SentencePieceTokenizer` (None: the folder's, if ``model``
            names one).
        arguments: the user's further :class:`Seq2SeqTransformer` arguments (no architecture argument).

    Returns:
        The model's arguments (``arguments`` and the Marian model's architecture), its weights as a state dict
        and its tokenizer.

    Raises:
        ValueError: for an architecture argument in ``arguments``, or a tokenizer of another ``vocab_size``.
    """
    clash = sorted(set(arguments) & set(ARCHITECTURE))
    if clash:
        raise ValueError(f"from_marian takes {clash} from the Marian model; leave them out")
    tok: SentencePieceTokenizer | None = None
    if isinstance(model, (str, Path)):
        arch, state, tok = load_pretrained(str(model), {}, arguments.get("dropout"), arguments.get("ffn_dropout"))
    else:
        arch = marian_arguments(model, arguments.get("dropout"), arguments.get("ffn_dropout"))
        state = marian_state_dict(model, arch["share_embeddings"], arch["tie_output"])
    if tokenizer is not None:
        tok = tokenizer
        if not isinstance(tok, SentencePieceTokenizer):  # a transformers MarianTokenizer
            tok = SentencePieceTokenizer.from_marian(tok)
        if tok.vocab_size != arch["vocab_size"]:
            raise ValueError(
                f"the tokenizer's vocab_size ({tok.vocab_size}) differs from the model's ({arch['vocab_size']})"
            )
    return {**arguments, **arch}, state, tok


# ---------------------------------------------------------------------------------------- out


def _check_exportable(
    tokenizer: TextTokenizer | None, vocab_size: int, norm_first: bool, pos_encoding: str, activation: str
) -> SentencePieceTokenizer:
    if norm_first:
        raise ValueError("to_marian: norm_first is True; a Marian model is Post-LN (norm_first: false)")
    if pos_encoding != "sinusoidal_halves":
        raise ValueError(f"to_marian: pos_encoding is {pos_encoding!r}; a Marian model needs 'sinusoidal_halves'")
    if activation not in _HF_ACTIVATION:
        raise ValueError(
            f"to_marian: activation is {activation!r}; a Marian model needs one of {sorted(_HF_ACTIVATION)}"
        )
    if not isinstance(tokenizer, SentencePieceTokenizer):
        raise ValueError(
            f"to_marian needs the model's tokenizer to be a SentencePieceTokenizer, got "
            f"{type(tokenizer).__name__}: MarianTokenizer reads SentencePiece models and a vocabulary"
        )
    if tokenizer.vocab_size != vocab_size:
        raise ValueError(
            f"to_marian: the tokenizer's vocab_size ({tokenizer.vocab_size}) differs from the model's ({vocab_size})"
        )
    return tokenizer


def to_marian(
    directory: str | Path,
    state: Mapping[str, Tensor],
    tokenizer: TextTokenizer | None,
    *,
    vocab_size: int,
    d_model: int,
    n_heads: int,
    n_layers: int,
    n_decoder_layers: int,
    d_ff: int,
    dropout: float,
    attn_dropout: float,
    ffn_dropout: float | None,
    norm_first: bool,
    activation: str,
    pos_encoding: str,
    max_len: int,
    share_embeddings: bool,
    tie_output: bool,
    scale_embedding: bool,
    output_bias: bool,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    beam_size: int,
) -> Path:
    """Write a model as a transformers Marian folder: ``config.json``, ``generation_config.json`` and the
    weights (``save_pretrained``) and the tokenizer's ``source.spm``, ``target.spm``, ``vocab.json`` and
    ``tokenizer_config.json``; ``MarianMTModel.from_pretrained`` and ``MarianTokenizer.from_pretrained`` load
    it. Returns the folder. The keyword arguments are the model's resolved :class:`Seq2SeqTransformer` arguments
    of the same names (:data:`EXPORTED`); ``beam_size`` and ``max_len`` also set the generation config.

    Args:
        directory: the folder to write.
        state: the model's state dict.
        tokenizer: the model's tokenizer: a :class:`SentencePieceTokenizer` of ``vocab_size`` ids.

    Raises:
        ValueError: for a model Marian cannot express (Pre-LN, another positional encoding, SwiGLU, a BPE
            tokenizer), naming the argument.
    """
    tokenizer = _check_exportable(tokenizer, vocab_size, norm_first, pos_encoding, activation)
    transformers = _transformers()
    config = transformers.MarianConfig(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        d_model=d_model,
        encoder_layers=n_layers,
        decoder_layers=n_decoder_layers,
        encoder_attention_heads=n_heads,
        decoder_attention_heads=n_heads,
        encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff,
        activation_function=_HF_ACTIVATION[activation],
        dropout=dropout,
        attention_dropout=attn_dropout,
        activation_dropout=dropout if ffn_dropout is None else ffn_dropout,  # ours: None is dropout's rate
        max_position_embeddings=max_len,
        scale_embedding=scale_embedding,
        share_encoder_decoder_embeddings=share_embeddings,
        tie_word_embeddings=tie_output,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        decoder_start_token_id=bos_id,
        forced_eos_token_id=eos_id,
    )
    marian = transformers.MarianMTModel(config).eval()
    ours = {k: v.detach().cpu() for k, v in state.items()}
    theirs = dict(marian.state_dict())
    for key, names in _layer_map(n_layers, n_decoder_layers):
        for name, part in zip(names, ours[key].chunk(len(names)), strict=True):
            theirs[name] = part
    tgt = ours["tgt_embed.weight"]
    src = tgt if share_embeddings else ours["src_embed.weight"]
    theirs |= {"model.encoder.embed_tokens.weight": src, "model.decoder.embed_tokens.weight": tgt}
    if "model.shared.weight" in theirs:
        theirs["model.shared.weight"] = src
    theirs["lm_head.weight"] = ours["head.weight"]
    bias = ours["head.bias"] if output_bias else torch.zeros(vocab_size)
    theirs["final_logits_bias"] = bias.reshape(1, -1)
    marian.load_state_dict(theirs, strict=True)
    marian.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=bos_id,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        forced_eos_token_id=eos_id,
        bad_words_ids=[[pad_id]],
        num_beams=beam_size,
        max_length=max_len,
    )
    out = Path(directory)
    marian.save_pretrained(out)
    tokenizer.save(out)
    log.info("wrote the Marian model and tokenizer to %s", out)
    return out
