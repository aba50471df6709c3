"""The SentencePiece tokenizer of Marian / OPUS-MT models (Junczys-Dowmunt et al. 2018; Tiedemann &
Thottingal 2020), with the ids of transformers' ``MarianTokenizer``.

A Marian model keeps two SentencePiece models (Kudo & Richardson 2018), ``source.spm`` and
``target.spm``, and a vocabulary of its own, ``vocab.json`` (``target_vocab.json`` too when the sides have
separate vocabularies): the piece strings SentencePiece cuts a sentence into are looked up in that
vocabulary, not numbered by SentencePiece, and a piece the vocabulary lacks is ``<unk>``. The specials
are the vocabulary's: ``</s>`` (end of sentence, id 0 in OPUS-MT), ``<unk>`` and ``<pad>`` (the last id,
added when the model was converted to transformers); the pad id doubles as the decoder's start token.

Encoding follows ``MarianTokenizer``: a special token written in the text (``</s>``, ``<unk>``,
``<pad>``) is split off and becomes its id, a leading language code ``>>xx<<`` (multilingual models)
stays one piece, and the rest goes through SentencePiece. Decoding joins runs of pieces with
SentencePiece (with the source model when the vocabulary is joint, as ``MarianTokenizer`` does) and
writes an ``<unk>`` as the text ``<unk>``.

Only ``sentencepiece`` is needed (the ``hf`` extra), not transformers; the models and vocabularies are
kept as plain JSON types (:meth:`SentencePieceTokenizer.to_dict`), so the tokenizer lives in a
``weights_only`` checkpoint.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

from .tokenizer import Side

if TYPE_CHECKING:
    from sentencepiece import SentencePieceProcessor

__all__ = ["SentencePieceTokenizer"]

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"
SPECIALS = (EOS, UNK, PAD)
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIALS) + ")")
SPIECE_UNDERLINE = "▁"

FILES = {"src_model": "source.spm", "tgt_model": "target.spm", "vocab": "vocab.json", "tgt_vocab": "target_vocab.json"}
CONFIG_FILE = "tokenizer_config.json"


def _processor(model: bytes, what: str) -> SentencePieceProcessor:
    try:
        import sentencepiece
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the SentencePiece tokenizer of Marian models needs sentencepiece: pip install 'lightning-tf[hf]'"
        ) from None
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(model)
    except RuntimeError as e:
        raise ValueError(f"{what} is not a SentencePiece model: {e}") from None
    return sp


def _language_code(text: str) -> tuple[list[str], str]:
    """A leading ``>>xx<<`` as its own piece, and the rest (MarianTokenizer's ``remove_language_code``)."""
    end = text.find("<<") if text.startswith(">>") else -1
    return ([text[: end + 2]], text[end + 2 :]) if end != -1 else ([], text)


class SentencePieceTokenizer:
    """Marian's two SentencePiece models and its vocabulary, behind the text task's tokenizer interface
    (:class:`~lightning_tf.text.tokenizer.TextTokenizer`).

    Build one with :meth:`load` (a Marian model folder, or one written by :meth:`save`), :meth:`from_marian`
    (a transformers ``MarianTokenizer``) or :meth:`from_dict`.

    Args:
        src_model: the serialized source SentencePiece model (the bytes of ``source.spm``).
        tgt_model: the serialized target SentencePiece model (``target.spm``).
        vocab: piece -> id of the source side, and of both sides unless ``tgt_vocab`` is given; it holds
            ``</s>``, ``<unk>`` and ``<pad>``.
        tgt_vocab: piece -> id of the target side, for separate vocabularies (with the same special ids).
        vocab_size: id capacity of both sides (None: the largest id + 1).
        bos_id: the decoder's start token (None: the pad id, Marian's).
        src_lang: source language, recorded in the saved Marian tokenizer config.
        tgt_lang: target language, likewise.
    """

    def __init__(
        self,
        src_model: bytes,
        tgt_model: bytes,
        vocab: dict[str, int],
        tgt_vocab: dict[str, int] | None = None,
        vocab_size: int | None = None,
        bos_id: int | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> None:
        vocabs = {"vocab": vocab} | ({} if tgt_vocab is None else {"tgt_vocab": tgt_vocab})
        for name, v in vocabs.items():
            missing = [t for t in SPECIALS if t not in v]
            if missing:
                raise ValueError(f"{name} lacks the special tokens {missing} (Marian's vocabularies hold {SPECIALS})")
        if tgt_vocab is not None and [vocab[t] for t in SPECIALS] != [tgt_vocab[t] for t in SPECIALS]:
            raise ValueError(
                f"the source and target vocabularies give {SPECIALS} different ids: "
                f"{[vocab[t] for t in SPECIALS]} and {[tgt_vocab[t] for t in SPECIALS]}"
            )
        largest = max(max(v.values()) for v in vocabs.values())
        if min(min(v.values()) for v in vocabs.values()) < 0:
            raise ValueError("vocabulary ids must not be negative")
        vocab_size = largest + 1 if vocab_size is None else vocab_size
        if vocab_size <= largest:
            raise ValueError(f"vocab_size ({vocab_size}) must exceed the largest vocabulary id ({largest})")
        self.src_model, self.tgt_model = bytes(src_model), bytes(tgt_model)
        self.src_sp = _processor(self.src_model, "src_model")
        self.tgt_sp = _processor(self.tgt_model, "tgt_model")
        self.vocab, self.tgt_vocab = dict(vocab), None if tgt_vocab is None else dict(tgt_vocab)
        self.joint = tgt_vocab is None
        self.vocab_size = vocab_size
        self.eos_id, self.unk_id, self.pad_id = (vocab[t] for t in SPECIALS)
        self.bos_id = self.pad_id if bos_id is None else bos_id
        if not 0 <= self.bos_id < vocab_size:
            raise ValueError(f"bos_id ({self.bos_id}) must lie in [0, vocab_size={vocab_size})")
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self._inverse = {side: {i: t for t, i in self._vocab(side).items()} for side in ("src", "tgt")}

    # ---------------------------------------------------------------------------- sides
    def _vocab(self, side: Side) -> dict[str, int]:
        if side not in ("src", "tgt"):
            raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")
        return self.tgt_vocab if side == "tgt" and self.tgt_vocab is not None else self.vocab

    def _encoder(self, side: Side) -> SentencePieceProcessor:
        self._vocab(side)  # checks the side
        return self.src_sp if side == "src" else self.tgt_sp

    def _decoder(self, side: Side) -> SentencePieceProcessor:
        # MarianTokenizer decodes with the source model unless the vocabularies are separate
        return self.src_sp if side == "src" or self.joint else self.tgt_sp

    # ---------------------------------------------------------------------------- encode / decode
    def encode(self, texts: Sequence[str], side: Side) -> list[list[int]]:
        """Token ids of each sentence, without ``</s>``: the ids ``MarianTokenizer`` gives (for the target
        side, ``MarianTokenizer(text_target=...)``), less the final ``</s>``."""
        vocab, sp = self._vocab(side), self._encoder(side)
        unk = vocab[UNK]
        # every sentence cut at the specials written in it; the plain chunks go through SentencePiece at once
        parts = [[c for c in _SPECIAL_SPLIT.split(text) if c] for text in texts]
        plain = [_language_code(c) for chunks in parts for c in chunks if c not in SPECIALS]
        pieces = iter(sp.encode([rest for _, rest in plain], out_type=str)) if plain else iter(())
        codes = iter(code for code, _ in plain)
        out = []
        for chunks in parts:
            ids: list[int] = []
            for chunk in chunks:
                if chunk in SPECIALS:
                    ids.append(vocab[chunk])
                else:
                    ids.extend(vocab.get(p, unk) for p in [*next(codes), *next(pieces)])
            out.append(ids)
        return out

    def _piece(self, token_id: int, side: Side) -> str:
        piece = self._inverse[side].get(token_id)
        if piece is not None:
            return piece
        # an id the vocabulary lacks: MarianTokenizer falls back to SentencePiece's own piece of that number
        sp = self._decoder(side)
        return (sp.IdToPiece(token_id) or UNK) if 0 <= token_id < sp.GetPieceSize() else UNK

    def decode(self, ids: Sequence[Sequence[int]] | Tensor, side: Side) -> list[str]:
        """Text of each id row ``(B, T)``: stops at the first ``</s>``, drops ``<pad>`` and the start token;
        ``<unk>`` stays visible. Equal to ``MarianTokenizer.decode`` of the row up to its ``</s>``, without
        padding (``skip_special_tokens=True`` gives the same text for a row without ``<unk>``)."""
        if isinstance(ids, Tensor) and ids.dim() != 2:
            raise ValueError(f"decode expects ids of shape (B, T), got {tuple(ids.shape)}")
        rows = ids.tolist() if isinstance(ids, Tensor) else [list(r) for r in ids]
        sp, out = self._decoder(side), []
        for row in rows:
            if self.eos_id in row:
                row = row[: row.index(self.eos_id)]
            text, run = "", []
            for i in row:
                if i in (self.pad_id, self.bos_id):
                    continue
                piece = self._piece(i, side)
                if piece in SPECIALS:  # as MarianTokenizer: specials are not decoded by SentencePiece
                    text += sp.DecodePieces(run) + piece + " "
                    run = []
                else:
                    run.append(piece)
            text += sp.DecodePieces(run)
            out.append(text.replace(SPIECE_UNDERLINE, " ").strip())
        return out

    def id_to_token(self, token_id: int, side: Side) -> str | None:
        """The vocabulary's piece of one id (None for an id it lacks)."""
        self._vocab(side)
        return self._inverse[side].get(token_id)

    def tokens(self, text: str, side: Side) -> list[str]:
        """The pieces of one sentence (for inspection)."""
        return [self._piece(i, side) for i in self.encode([text], side)[0]]

    # ---------------------------------------------------------------------------- construction and storage
    @classmethod
    def from_marian(cls, tokenizer: Any) -> SentencePieceTokenizer:
        """From a transformers ``MarianTokenizer`` (its two SentencePiece models and its vocabularies)."""
        for name, expected in (("eos_token", EOS), ("unk_token", UNK), ("pad_token", PAD)):
            value = str(getattr(tokenizer, name))
            if value != expected:
                raise ValueError(f"the MarianTokenizer's {name} is {value!r}; expected {expected!r}")
        return cls(
            tokenizer.spm_source.serialized_model_proto(),
            tokenizer.spm_target.serialized_model_proto(),
            dict(tokenizer.encoder),
            dict(tokenizer.target_encoder) if tokenizer.separate_vocabs else None,
            src_lang=tokenizer.source_lang,
            tgt_lang=tokenizer.target_lang,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (the SentencePiece models base64-encoded), so the tokenizer can live in a
        ``weights_only`` checkpoint."""
        return {
            "kind": "sentencepiece",
            "vocab_size": self.vocab_size,
            "bos_id": self.bos_id,
            "src_model": base64.b64encode(self.src_model).decode("ascii"),
            "tgt_model": base64.b64encode(self.tgt_model).decode("ascii"),
            "vocab": self.vocab,
            "tgt_vocab": self.tgt_vocab,
            "src_lang": self.src_lang,
            "tgt_lang": self.tgt_lang,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SentencePieceTokenizer:
        """Inverse of :meth:`to_dict`."""
        missing = {"vocab_size", "src_model", "tgt_model", "vocab"} - set(d)
        if missing:
            raise ValueError(f"tokenizer dict lacks {sorted(missing)}; has {sorted(d)}")
        return cls(
            base64.b64decode(d["src_model"]),
            base64.b64decode(d["tgt_model"]),
            d["vocab"],
            d.get("tgt_vocab"),
            int(d["vocab_size"]),
            d.get("bos_id"),
            d.get("src_lang"),
            d.get("tgt_lang"),
        )

    @staticmethod
    def is_saved_in(directory: str | Path) -> bool:
        """Whether ``directory`` holds Marian's tokenizer files (``source.spm`` and ``vocab.json``)."""
        return all((Path(directory) / FILES[k]).is_file() for k in ("src_model", "vocab"))

    def save(self, directory: str | Path) -> Path:
        """Write Marian's tokenizer files: ``source.spm``, ``target.spm``, ``vocab.json`` (and
        ``target_vocab.json``) and ``tokenizer_config.json``; ``MarianTokenizer.from_pretrained`` and
        :meth:`load` read the folder. Returns the directory."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / FILES["src_model"]).write_bytes(self.src_model)
        (directory / FILES["tgt_model"]).write_bytes(self.tgt_model)
        (directory / FILES["vocab"]).write_text(json.dumps(self.vocab, indent=2, ensure_ascii=False), encoding="utf-8")
        if self.tgt_vocab is not None:
            text = json.dumps(self.tgt_vocab, indent=2, ensure_ascii=False)
            (directory / FILES["tgt_vocab"]).write_text(text, encoding="utf-8")
        config = {
            "tokenizer_class": "MarianTokenizer",
            "source_lang": self.src_lang,
            "target_lang": self.tgt_lang,
            "separate_vocabs": not self.joint,
            "eos_token": EOS,
            "unk_token": UNK,
            "pad_token": PAD,
            "model_max_length": 512,
            # ours, beside Marian's keys: the id capacity and the start token
            "lightning_tf": {"vocab_size": self.vocab_size, "bos_id": self.bos_id},
        }
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> SentencePieceTokenizer:
        """From a Marian model folder (e.g. a local copy of ``Helsinki-NLP/opus-mt-de-en``) or one written by
        :meth:`save`."""
        directory = Path(directory)
        paths = {k: directory / name for k, name in FILES.items()}
        config_path = directory / CONFIG_FILE
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        needed = ["src_model", "tgt_model", "vocab"] + (["tgt_vocab"] if config.get("separate_vocabs") else [])
        missing = [paths[k].name for k in needed if not paths[k].is_file()]
        if missing:
            raise FileNotFoundError(f"{directory}: no {', '.join(missing)}; not a Marian tokenizer folder")

        def read_vocab(path: Path) -> dict[str, int]:
            try:
                return {str(k): int(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
            except (ValueError, AttributeError) as e:
                raise ValueError(f"{path}: not a JSON object of piece -> id: {e}") from None

        ours = config.get("lightning_tf") or {}
        return cls(
            paths["src_model"].read_bytes(),
            paths["tgt_model"].read_bytes(),
            read_vocab(paths["vocab"]),
            read_vocab(paths["tgt_vocab"]) if config.get("separate_vocabs") else None,
            ours.get("vocab_size"),
            ours.get("bos_id"),
            config.get("source_lang"),
            config.get("target_lang"),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SentencePieceTokenizer):
            return False
        fields = ("src_model", "tgt_model", "vocab", "tgt_vocab", "vocab_size", "bos_id", "src_lang", "tgt_lang")
        return all(getattr(self, f) == getattr(other, f) for f in fields)

    def __repr__(self) -> str:
        sizes = f"{len(self.vocab)}" if self.joint else f"{len(self.vocab)}/{len(self.tgt_vocab or {})}"
        return (
            f"SentencePieceTokenizer(vocab_size={self.vocab_size}, joint={self.joint}, pieces={sizes}, "
            f"eos={self.eos_id}, pad={self.pad_id}, bos={self.bos_id})"
        )
