"""Test-only Marian material, built offline: SentencePiece models trained here on generated sentences, a
vocabulary laid out as transformers' Marian conversion lays it out (``</s>`` = 0, ``<unk>`` = 1, the
pieces, ``<pad>`` last), and small random ``MarianMTModel``s with every tensor perturbed (a non-zero
``final_logits_bias``, layer norms away from identity). Needs the ``hf`` extra: callers skip without it."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lightning_tf.text.synthetic import english_german_pairs

EN_DE = english_german_pairs(400, seed=0)  # (english, german) pairs


def train_spm(sentences: Sequence[str], vocab_size: int) -> bytes:
    """A unigram SentencePiece model trained on ``sentences`` (offline, in well under a second)."""
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=out,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return out.getvalue()


def spm_pieces(model: bytes) -> list[str]:
    """The model's pieces in id order, without its control and unknown symbols."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    return [sp.IdToPiece(i) for i in range(sp.GetPieceSize()) if not (sp.IsControl(i) or sp.IsUnknown(i))]


def marian_vocab(models: Sequence[bytes], drop: Sequence[str] = (), filler: int = 0) -> dict[str, int]:
    """Marian's joint vocabulary of ``models``: ``</s>`` = 0, ``<unk>`` = 1, every piece once (less
    ``drop``, pieces the vocabulary lacks; plus ``filler`` pieces no model produces), then ``<pad>`` = the
    largest id + 1, as transformers' conversion adds it."""
    vocab = {"</s>": 0, "<unk>": 1}
    for model in models:
        for piece in spm_pieces(model):
            if piece not in vocab and piece not in drop:
                vocab[piece] = len(vocab)
    for i in range(filler):
        vocab[f"<unused{i}>"] = len(vocab)
    vocab["<pad>"] = max(vocab.values()) + 1
    return vocab


def write_tokenizer_folder(directory: Path, spm_size: int = 120, drop: Sequence[str] = ()) -> Path:
    """A Marian tokenizer folder for German -> English, as the conversion writes it: ``source.spm``,
    ``target.spm``, ``vocab.json`` and ``tokenizer_config.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    src, tgt = train_spm([d for _, d in EN_DE], spm_size), train_spm([e for e, _ in EN_DE], spm_size)
    (directory / "source.spm").write_bytes(src)
    (directory / "target.spm").write_bytes(tgt)
    (directory / "vocab.json").write_text(json.dumps(marian_vocab([src, tgt], drop)))
    config = {"source_lang": "de", "target_lang": "en", "separate_vocabs": False}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


SMALL = dict(d_model=16, encoder_layers=1, decoder_layers=2, heads=2, ffn=32)
LARGER = dict(d_model=64, encoder_layers=2, decoder_layers=3, heads=4, ffn=96)


def random_marian(
    vocab_size: int,
    size: dict[str, int],
    share: bool = True,
    tie: bool = True,
    seed: int = 0,
    max_positions: int = 128,
    activation: str = "swish",
    eos_bias: float = 0.0,
) -> Any:
    """A ``MarianMTModel`` with OPUS-MT's layout (swish, ``scale_embedding``, pad = the last id and the
    decoder's start token, eos = 0) and random weights at scales that spread the logits, in eval mode.

    Args:
        vocab_size: ids, the last one ``<pad>``.
        size: ``d_model``, ``encoder_layers``, ``decoder_layers``, ``heads``, ``ffn``.
        share: one embedding for encoder and decoder (``share_encoder_decoder_embeddings``).
        tie: the output projection is the decoder's embedding (``tie_word_embeddings``).
        seed: seed of the weights.
        max_positions: ``max_position_embeddings``.
        activation: ``activation_function``.
        eos_bias: added to the ``</s>`` entry of ``final_logits_bias`` (so that hypotheses end early).
    """
    from transformers import MarianConfig, MarianMTModel

    pad = vocab_size - 1
    config = MarianConfig(
        vocab_size=vocab_size,
        d_model=size["d_model"],
        encoder_layers=size["encoder_layers"],
        decoder_layers=size["decoder_layers"],
        encoder_attention_heads=size["heads"],
        decoder_attention_heads=size["heads"],
        encoder_ffn_dim=size["ffn"],
        decoder_ffn_dim=size["ffn"],
        max_position_embeddings=max_positions,
        activation_function=activation,
        scale_embedding=True,
        share_encoder_decoder_embeddings=share,
        tie_word_embeddings=tie,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        dropout=0.1,
        attention_dropout=0.0,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue
            if "layer_norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "shared" in name or "lm_head" in name:
                p.copy_(0.25 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=g))
        model.final_logits_bias[0, 0] += eos_bias
    return model.eval()


def padded_sources(vocab_size: int, lengths: Sequence[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random source rows of ``lengths`` tokens (eos = 0 last; no pad, no eos inside), right-padded with the
    pad id (the last id), and their attention mask ``(B, S)``."""
    g = torch.Generator().manual_seed(seed)
    pad = vocab_size - 1
    ids = torch.full((len(lengths), max(lengths)), pad, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, : n - 1] = torch.randint(1, pad, (n - 1,), generator=g)
        ids[b, n - 1] = 0
    return ids, ids != pad


def write_marian_folder(directory: Path, size: dict[str, int] = SMALL, seed: int = 0) -> Path:
    """A Marian model folder as the hub holds one: the tokenizer files of :func:`write_tokenizer_folder` and
    a random :func:`random_marian` sized to its vocabulary (``save_pretrained``)."""
    write_tokenizer_folder(directory)
    vocab = json.loads((directory / "vocab.json").read_text())
    random_marian(len(vocab), size, seed=seed).save_pretrained(directory)
    return directory
