"""The tokenizer kinds of the text task, and loading one: from the plain data a checkpoint keeps
(:func:`tokenizer_from_dict`) or from a folder (:func:`load_tokenizer`). Byte-pair encoding is
:mod:`.tokenizer`, SentencePiece (Marian / OPUS-MT) :mod:`.spm_tokenizer`; this module is the one that
knows both, so neither imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .spm_tokenizer import SentencePieceTokenizer
from .tokenizer import CONFIG_FILE, BPETokenizer, TextTokenizer

__all__ = ["KINDS", "load_tokenizer", "tokenizer_from_dict"]

#: ``to_dict()["kind"]`` -> the class
KINDS: dict[str, type] = {"bpe": BPETokenizer, "sentencepiece": SentencePieceTokenizer}


def tokenizer_from_dict(d: dict[str, Any]) -> TextTokenizer:
    """The tokenizer a ``to_dict()`` describes: its ``kind`` names the class (``bpe`` when absent, as in
    checkpoints written before there were other kinds)."""
    kind = d.get("kind", "bpe")
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {sorted(KINDS)}")
    return KINDS[kind].from_dict(d)


def load_tokenizer(source: str | Path) -> TextTokenizer:
    """The tokenizer saved in a folder: one written by :meth:`BPETokenizer.save` (a training run's
    ``tokenizer`` folder), or one with Marian's ``source.spm`` / ``target.spm`` / ``vocab.json`` (written by
    :meth:`~lightning_tf.text.spm_tokenizer.SentencePieceTokenizer.save`, or a Marian / OPUS-MT model
    folder). A ``source`` that is no folder is taken as a Hugging Face hub model name (``Helsinki-NLP/opus-mt-de-en``):
    its tokenizer files are read from the local hub cache, or fetched."""
    directory = Path(source)
    if not directory.is_dir():
        directory = _hub_folder(str(source))
    if SentencePieceTokenizer.is_saved_in(directory):
        return SentencePieceTokenizer.load(directory)
    if not (directory / CONFIG_FILE).is_file():
        raise FileNotFoundError(
            f"{directory} holds no tokenizer: neither BPETokenizer.save's {CONFIG_FILE} nor Marian's source.spm and "
            "vocab.json"
        )
    return BPETokenizer.load(directory)


def _hub_folder(name: str) -> Path:
    """The local snapshot of the tokenizer files of hub model ``name``."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, allow_patterns=["*.spm", "*.json"]))
    except Exception as e:  # the hub's errors are many (invalid name, offline, not found, no access)
        raise FileNotFoundError(
            f"tokenizer {name!r}: no such folder, and not a model on the Hugging Face hub or in its local cache "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from None
