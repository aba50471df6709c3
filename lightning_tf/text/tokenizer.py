"""Tokenizers for translation: the interface every tokenizer of the text task has
(:class:`TextTokenizer`), and byte-pair encoding (Sennrich et al., 2016) on HF ``tokenizers``
(:class:`BPETokenizer`). The SentencePiece tokenizer of Marian / OPUS-MT models is
:class:`~lightning_tf.text.spm_tokenizer.SentencePieceTokenizer`;
:mod:`~lightning_tf.text.tokenizer_kinds` rebuilds either kind (from a checkpoint or a folder).

BPE: text is NFKC-normalised, split on spaces with a ``Metaspace`` marker (``▁``, as in SentencePiece) and
with punctuation isolated; the ``Metaspace`` decoder turns the markers back into spaces, so
``decode(encode(s)) == NFKC(s)`` for any ``s`` without leading whitespace whose characters were seen
in training. Both sides share the special ids ``<pad>=0, <unk>=1, <s>=2, </s>=3``, with one joint
vocabulary or one per side.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence, Sized
from itertools import chain
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from torch import Tensor

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "BPETokenizer",
    "Side",
    "TextTokenizer",
    "source_ids",
]

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")  # index == id
Side = Literal["src", "tgt"]

CONFIG_FILE = "tokenizer_config.json"


@runtime_checkable
class TextTokenizer(Protocol):
    """What the text task needs of a tokenizer (:class:`BPETokenizer`,
    :class:`~lightning_tf.text.spm_tokenizer.SentencePieceTokenizer`).

    A sentence is encoded as ids without specials; the data and the model add ``eos_id`` to sources and
    ``bos_id`` (the decoder's start token, which may equal ``pad_id``) + ids + ``eos_id`` to targets.
    Every id is below ``vocab_size``. ``to_dict`` returns plain JSON types, so the tokenizer lives in a
    ``weights_only`` checkpoint; ``joint`` says whether both sides share one vocabulary.
    """

    pad_id: int
    unk_id: int
    bos_id: int
    eos_id: int
    vocab_size: int
    joint: bool

    def encode(self, texts: Sequence[str], side: Side) -> list[list[int]]:
        """Token ids of each sentence, without specials."""
        ...

    def decode(self, ids: Sequence[Sequence[int]] | Tensor, side: Side) -> list[str]:
        """Text of each id row ``(B, T)``, through its first ``eos_id``; padding and the start token dropped."""
        ...

    def id_to_token(self, token_id: int, side: Side) -> str | None:
        """The token string of one id (None for an id without one)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: :func:`.tokenizer_kinds.tokenizer_from_dict` rebuilds the tokenizer from them."""
        ...

    def save(self, directory: str | Path) -> Path:
        """Write the tokenizer's files into ``directory`` (:func:`.tokenizer_kinds.load_tokenizer` reads them back)."""
        ...


def _new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
    tok.normalizer = normalizers.NFKC()
    # Metaspace records every space as "▁", so splitting off punctuation afterwards loses nothing.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(prepend_scheme="always"), pre_tokenizers.Punctuation("isolated")]
    )
    tok.decoder = decoders.Metaspace(prepend_scheme="always")
    return tok


def _finish(tok: Tokenizer) -> Tokenizer:
    # A literal "</s>" in a user's sentence is text, not an end of sentence.
    tok.encode_special_tokens = True
    return tok


def _train_one(
    texts: Iterable[str] | Iterable[list[str]], length: int, vocab_size: int, min_frequency: int, progress: bool
) -> Tokenizer:
    tok = _new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        # keep the character alphabet within the budget; rarer characters become <unk>
        limit_alphabet=min(1000, vocab_size - len(SPECIAL_TOKENS) - 1),
        show_progress=progress,
    )
    tok.train_from_iterator(texts, trainer, length=length)
    ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
    assert ids == list(range(len(SPECIAL_TOKENS))), ids
    assert tok.get_vocab_size() <= vocab_size, (tok.get_vocab_size(), vocab_size)
    return _finish(tok)


class BPETokenizer:
    """Source and target BPE tokenizers with shared special ids and one id capacity.

    Build one with :meth:`train`, :meth:`from_dict` or :meth:`load`. Every id of either side is
    below :attr:`vocab_size`, so a model sizes its embeddings from it.

    Args:
        src: tokenizer of the source side.
        tgt: tokenizer of the target side (the same object when the vocabulary is joint).
        vocab_size: id capacity of both sides; the trained vocabularies may be smaller.
    """

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, src: Tokenizer, tgt: Tokenizer, vocab_size: int) -> None:
        for side, tok in (("src", src), ("tgt", tgt)):
            if tok.get_vocab_size() > vocab_size:
                raise ValueError(f"{side} vocabulary has {tok.get_vocab_size()} tokens, over vocab_size ({vocab_size})")
            ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
            if ids != list(range(len(SPECIAL_TOKENS))):
                raise ValueError(f"{side} tokenizer must map {SPECIAL_TOKENS} to ids 0..3, found {ids}")
        self.src, self.tgt = _finish(src), _finish(tgt)
        self.vocab_size = vocab_size
        self.joint = src is tgt

    @classmethod
    def train(
        cls,
        src_texts: Sequence[str] | Sized,
        tgt_texts: Sequence[str] | Sized,
        vocab_size: int,
        joint: bool = True,
        min_frequency: int = 2,
        progress: bool = False,
    ) -> BPETokenizer:
        """Learn BPE merges from training sentences.

        Args:
            src_texts: source sentences (training split only, to keep test text unseen): a sequence of
                strings, or a sized iterable that yields lists of them, read once (streamed corpora).
            tgt_texts: target sentences, likewise.
            vocab_size: id capacity of each side, specials included.
            joint: one vocabulary learnt on both sides, or one per side.
            min_frequency: a pair must occur this often to be merged.
            progress: show the tokenizers library's progress bar.
        """
        if vocab_size < 2 * len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size ({vocab_size}) must be at least {2 * len(SPECIAL_TOKENS)}")
        if not src_texts or not tgt_texts:
            raise ValueError(
                f"cannot train a tokenizer on {len(src_texts)} source and {len(tgt_texts)} target sentences"
            )
        if joint:
            both = chain(src_texts, tgt_texts)
            tok = _train_one(both, len(src_texts) + len(tgt_texts), vocab_size, min_frequency, progress)
            return cls(tok, tok, vocab_size)
        return cls(
            _train_one(src_texts, len(src_texts), vocab_size, min_frequency, progress),
            _train_one(tgt_texts, len(tgt_texts), vocab_size, min_frequency, progress),
            vocab_size,
        )

    def side(self, side: Side) -> Tokenizer:
        """The HF tokenizer of ``side``."""
        if side == "src":
            return self.src
        if side == "tgt":
            return self.tgt
        raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")

    def encode(self, texts: Sequence[str], side: Side) -> list[list[int]]:
        """Token ids of each sentence, without <s> or </s>."""
        return [e.ids for e in self.side(side).encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[Sequence[int]] | Tensor, side: Side) -> list[str]:
        """Text of each id row ``(B, T)``: stops at the first </s>, drops <pad> and <s>; <unk> stays visible."""
        if isinstance(ids, Tensor) and ids.dim() != 2:
            raise ValueError(f"decode expects ids of shape (B, T), got {tuple(ids.shape)}")
        rows = ids.tolist() if isinstance(ids, Tensor) else [list(r) for r in ids]
        kept = []
        for row in rows:
            if EOS_ID in row:
                row = row[: row.index(EOS_ID)]
            kept.append([i for i in row if i != PAD_ID and i != BOS_ID])
        return self.side(side).decode_batch(kept, skip_special_tokens=False)

    def tokens(self, text: str, side: Side) -> list[str]:
        """Subword strings of one sentence (for inspection)."""
        return self.side(side).encode(text, add_special_tokens=False).tokens

    def id_to_token(self, token_id: int, side: Side) -> str | None:
        """The subword string of one id (None outside the trained vocabulary)."""
        return self.side(side).id_to_token(token_id)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only, so the tokenizer can live in a ``weights_only`` checkpoint."""
        d: dict[str, Any] = {
            "kind": "bpe",
            "vocab_size": self.vocab_size,
            "joint": self.joint,
            "src": self.src.to_str(),
        }
        if not self.joint:
            d["tgt"] = self.tgt.to_str()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BPETokenizer:
        """Inverse of :meth:`to_dict`."""
        missing = {"vocab_size", "joint", "src"} - set(d) | ({"tgt"} - set(d) if not d.get("joint", True) else set())
        if missing:
            raise ValueError(f"tokenizer dict lacks {sorted(missing)}; has {sorted(d)}")
        src = Tokenizer.from_str(d["src"])
        tgt = src if d["joint"] else Tokenizer.from_str(d["tgt"])
        return cls(src, tgt, int(d["vocab_size"]))

    def save(self, directory: str | Path) -> Path:
        """Write ``tokenizer.json`` (joint) or ``tokenizer_src.json`` and ``tokenizer_tgt.json``, each loadable
        with ``tokenizers.Tokenizer.from_file``, and ``tokenizer_config.json``. Returns the directory."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        files = (
            {"src": "tokenizer.json", "tgt": "tokenizer.json"}
            if self.joint
            else {
                "src": "tokenizer_src.json",
                "tgt": "tokenizer_tgt.json",
            }
        )
        for side, name in files.items():
            self.side(side).save(str(directory / name))  # type: ignore[arg-type]
        config = {"vocab_size": self.vocab_size, "joint": self.joint, "files": files}
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> BPETokenizer:
        """Inverse of :meth:`save`."""
        directory = Path(directory)
        config_path = directory / CONFIG_FILE
        if not config_path.is_file():
            raise FileNotFoundError(f"{config_path} not found: not a directory written by BPETokenizer.save")
        config = json.loads(config_path.read_text())
        src = Tokenizer.from_file(str(directory / config["files"]["src"]))
        tgt = src if config["joint"] else Tokenizer.from_file(str(directory / config["files"]["tgt"]))
        return cls(src, tgt, int(config["vocab_size"]))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BPETokenizer) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        sizes = (
            f"{self.src.get_vocab_size()}" if self.joint else f"{self.src.get_vocab_size()}/{self.tgt.get_vocab_size()}"
        )
        return f"BPETokenizer(vocab_size={self.vocab_size}, joint={self.joint}, trained={sizes})"


def source_ids(tokenizer: TextTokenizer, texts: Sequence[str], max_len: int | None = None, why: str = "") -> Tensor:
    """Raw source sentences as ids ``(B, S)``: tokens + the tokenizer's EOS, right-padded with its PAD; a
    sentence longer than ``max_len`` (EOS included) is refused, naming it, its length and ``why`` the limit
    exists."""
    rows = [ids + [tokenizer.eos_id] for ids in tokenizer.encode(list(texts), side="src")]
    longest = max((len(r) for r in rows), default=0)
    if max_len is not None and longest > max_len:
        i = max(range(len(rows)), key=lambda j: len(rows[j]))
        raise ValueError(f"sentence {i} has {len(rows[i])} tokens (EOS included), more than max_len ({max_len}) {why}")
    src = torch.full((len(rows), longest), tokenizer.pad_id, dtype=torch.long)  # (B, S)
    for b, r in enumerate(rows):
        src[b, : len(r)] = torch.tensor(r)
    return src
