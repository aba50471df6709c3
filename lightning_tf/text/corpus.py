"""Prepared corpora: parallel text read, split, deduplicated, tokenized and encoded once, then memory-mapped.

:func:`prepare_corpus` does the once-per-dataset work (what ``TranslationDataModule.prepare_data`` runs, on
one process per machine) and writes it to a folder keyed by a fingerprint of everything the result
depends on (:class:`CorpusSpec`: the files' size and checksum, the split, dedup and length
settings, and the tokenizer or its training settings). :class:`PreparedCorpus` opens such a folder; every
DDP rank and DataLoader worker maps the same pages. The layout follows fairseq's ``fairseq-preprocess``
and its memory-mapped indexed dataset, and nanoGPT's ``prepare.py`` (``train.bin`` + ``np.memmap``).

The work streams: files are read line by line into flat text columns on disk, the held-out pairs are drawn
by index, the training pairs that repeat a held-out sentence are found with a hash set of the (small)
held-out side, BPE is trained from batches of sentences, and the splits are encoded in chunks. At no point
is the corpus a list of Python int lists. A build writes into a temporary folder that is renamed into
place once its manifest (file sizes and checksums) is written; a folder whose files do not match its
manifest, an interrupted build included, is rebuilt, never used. A lock file makes concurrent processes
(ranks, two runs) build a corpus once.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
from lightning.pytorch.utilities import rank_zero_info
from tqdm.auto import tqdm

from lightning_tf.training import default_cache_root, file_identity, prepare_folder, sha256, write_manifest

from .io import FileFormat, Pair, ReadStats, iter_pairs, pair_files
from .store import Lines, LinesWriter, Ragged, RaggedWriter
from .synthetic import algorithmic_pairs, english_german_pairs
from .tokenizer import BPETokenizer, TextTokenizer
from .tokenizer_kinds import tokenizer_from_dict

__all__ = ["CACHE_VERSION", "CorpusSpec", "Dedup", "PreparedCorpus", "default_cache_root", "prepare_corpus"]

#: the layout of a prepared corpus; a change makes every older folder a different key
CACHE_VERSION = 1
CHUNK = 50_000  # pairs read, deduplicated or encoded at a time
BIG = 100_000  # training pairs from which BPE training shows the tokenizers library's progress bar

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")
Dedup = Literal["source", "pair", "either", "none"]


@dataclass(frozen=True)
class CorpusSpec:
    """Everything a prepared corpus depends on (the arguments of ``TranslationDataModule`` of the same
    names). ``tokenizer`` is a given tokenizer's ``to_dict()``; None trains BPE with ``vocab_size``,
    ``joint_vocab`` and ``min_frequency`` on the training split."""

    dataset: str | None = "synthetic"
    train_file: str | None = None
    val_file: str | None = None
    test_file: str | None = None
    file_format: FileFormat = "auto"
    columns: tuple[str, ...] = ("en", "de")
    header: bool = False
    src_lang: str = "en"
    tgt_lang: str = "de"
    n_train: int | None = None
    n_val: int = 500
    n_test: int = 1000
    min_words: int = 2
    max_words: int = 10
    seed: int = 0
    dedup: Dedup = "source"
    max_length: int = 100
    vocab_size: int = 1000
    joint_vocab: bool = True
    min_frequency: int = 2
    tokenizer: dict[str, Any] | None = None

    def inputs(self) -> dict[str, list[Path]]:
        """The files read for each of ``train_file``, ``val_file`` and ``test_file`` that is set."""
        given = {"train": self.train_file, "val": self.val_file, "test": self.test_file}
        return {
            s: pair_files(path, self.src_lang, self.tgt_lang, self.file_format)
            for s, path in given.items()
            if path is not None and self.dataset is None
        }

    def fingerprint(self) -> dict[str, Any]:
        """The settings, the tokenizer's hash and each input file's size and CRC-32 (its content: a file
        rewritten within the clock's resolution, or copied with its old modification time, still counts as
        changed; reading it costs about a second per GB, once per spec)."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> dict[str, Any]:
        d = asdict(self)
        d["columns"] = list(self.columns)
        tok = d.pop("tokenizer")
        d["tokenizer_sha256"] = None if tok is None else sha256(tok)
        d["inputs"] = {s: [file_identity(p) for p in files] for s, files in self.inputs().items()}
        d["version"] = CACHE_VERSION
        return d

    def key(self) -> str:
        """The folder name: a readable label and 16 hex digits of the fingerprint's hash."""
        label = self.dataset or Path(self.train_file or "corpus").name.split(".")[0] or "corpus"
        return f"{label}-{self.src_lang}-{self.tgt_lang}-{sha256(self.fingerprint())[:16]}"

    def where(self, split: str, stats: dict[str, int]) -> str:
        """`` (file: lines=..., ...)`` or `` (dataset '...')``, for messages about ``split``."""
        source = {"train": self.train_file, "val": self.val_file, "test": self.test_file}[split]
        source = source or self.train_file
        if self.dataset is not None or source is None:
            return f" (dataset {self.dataset!r})"
        counts = ", ".join(f"{k.split('/')[1]}={v}" for k, v in stats.items() if k.startswith(f"{split}/"))
        return f" ({source}: {counts})" if counts else f" ({source})"


# ------------------------------------------------------------------------------------------- building


@dataclass
class _Part:
    """The pairs of one split: rows ``index`` (ascending) of the text columns ``src`` and ``tgt``."""

    src: Lines
    tgt: Lines
    index: np.ndarray

    def chunks(self, size: int = CHUNK) -> Iterator[tuple[list[str], list[str]]]:
        for a in range(0, len(self.index), size):
            idx = self.index[a : a + size]
            yield self.src.take(idx), self.tgt.take(idx)


class _Sentences:
    """One side of a part as a sized iterable of sentence batches, for BPE training."""

    def __init__(self, part: _Part, side: Literal["src", "tgt"]) -> None:
        self.lines, self.index = (part.src if side == "src" else part.tgt), part.index

    def __len__(self) -> int:
        return len(self.index)

    def __iter__(self) -> Iterator[list[str]]:
        for a in range(0, len(self.index), CHUNK):
            yield self.lines.take(self.index[a : a + CHUNK])


def _flush(writers: tuple[LinesWriter, LinesWriter], src: list[str], tgt: list[str], bar: tqdm) -> None:
    writers[0].append(src)
    writers[1].append(tgt)
    bar.update(len(src))
    src.clear()
    tgt.clear()


def _write_pairs(directory: Path, name: str, pairs: Iterable[Pair], desc: str, progress: bool) -> tuple[Lines, Lines]:
    writers = LinesWriter(directory, f"{name}.src"), LinesWriter(directory, f"{name}.tgt")
    src: list[str] = []
    tgt: list[str] = []
    with tqdm(desc=desc, unit=" pairs", delay=2, disable=not progress, mininterval=1) as bar:
        for s, t in pairs:
            src.append(s)
            tgt.append(t)
            if len(src) == CHUNK:
                _flush(writers, src, tgt, bar)
        _flush(writers, src, tgt, bar)
    for w in writers:
        w.close()
    return Lines(directory, f"{name}.src"), Lines(directory, f"{name}.tgt")


def _read_file(spec: CorpusSpec, work: Path, split: Split, stats: dict[str, int], progress: bool) -> _Part:
    path = {"train": spec.train_file, "val": spec.val_file, "test": spec.test_file}[split]
    assert path is not None
    read = ReadStats()
    pairs = iter_pairs(path, spec.src_lang, spec.tgt_lang, spec.file_format, spec.columns, spec.header, read)
    src, tgt = _write_pairs(work, split, pairs, f"reading {Path(path).name}", progress)
    stats[f"{split}/lines"] = read.lines
    stats[f"{split}/empty_dropped"] = read.empty
    if read.empty:
        rank_zero_info(f"{path}: dropped {read.empty} of {read.lines} lines with an empty sentence")
    return _Part(src, tgt, np.arange(len(src)))


def _generated(spec: CorpusSpec, work: Path) -> dict[Split, _Part]:
    n_train = 40_000 if spec.n_train is None else spec.n_train
    if spec.dataset == "synthetic":
        pairs = english_german_pairs(spec.n_test + spec.n_val + n_train, spec.seed)  # distinct, so disjoint splits
        if spec.src_lang == "de":
            pairs = [(d, e) for e, d in pairs]
        by_split = {
            "test": pairs[: spec.n_test],
            "val": pairs[spec.n_test : spec.n_test + spec.n_val],
            "train": pairs[spec.n_test + spec.n_val :],
        }
    else:
        sizes = {"train": n_train, "val": spec.n_val, "test": spec.n_test}
        by_split = {
            s: algorithmic_pairs(spec.dataset, sizes[s], spec.seed * 3 + k, spec.min_words, spec.max_words)  # type: ignore[arg-type]
            for k, s in enumerate(SPLITS)
        }
    parts = {}
    for s in SPLITS:
        src, tgt = _write_pairs(work, s, by_split[s], "", False)
        parts[s] = _Part(src, tgt, np.arange(len(src)))
    return parts


def _from_files(spec: CorpusSpec, work: Path, stats: dict[str, int], progress: bool) -> dict[Split, _Part]:
    train = _read_file(spec, work, "train", stats, progress)
    n = len(train.index)
    if n == 0:  # every line had an empty side: say so, not "0 pairs cannot give n held-out pairs"
        raise ValueError(f"the train split is empty{spec.where('train', stats)}")
    rng = np.random.default_rng(spec.seed)
    parts: dict[Split, _Part] = {}
    rest = train.index
    if spec.val_file is None or spec.test_file is None:
        # files such as Tatoeba's are sorted by length: draw the held-out pairs at random
        perm = rng.permutation(n)
        need = (spec.n_test if spec.test_file is None else 0) + (spec.n_val if spec.val_file is None else 0)
        if need >= n:
            raise ValueError(
                f"{spec.train_file}: {n} pairs cannot give {need} held-out pairs and a training split; "
                f"lower n_val ({spec.n_val}) / n_test ({spec.n_test})"
            )
        pos = 0
        for split, size, own in (("test", spec.n_test, spec.test_file), ("val", spec.n_val, spec.val_file)):
            if own is None:
                parts[split] = _Part(train.src, train.tgt, np.sort(perm[pos : pos + size]))  # type: ignore[index]
                pos += size
        rest = perm[pos:]
    elif spec.n_train is not None and spec.n_train < n:
        rest = rng.permutation(n)
    for split in ("test", "val"):
        if split not in parts:
            parts[split] = _read_file(spec, work, split, stats, progress)  # type: ignore[index]
    if spec.n_train is not None and spec.n_train < len(rest):
        rest = rest[: spec.n_train]
    parts["train"] = _Part(train.src, train.tgt, np.sort(rest))
    return parts


def _dedup(parts: dict[Split, _Part], by: Dedup) -> int:
    """Drop the training pairs sharing the ``pair``, the ``source`` or ``either`` side with val or test."""
    if by == "none":
        return 0
    held_src: set[str] = set()
    held_tgt: set[str] = set()
    held_pairs: set[Pair] = set()
    for s in ("val", "test"):
        for src, tgt in parts[s].chunks():  # type: ignore[index]
            held_src.update(src)
            held_tgt.update(tgt)
            if by == "pair":
                held_pairs.update(zip(src, tgt, strict=True))
    train = parts["train"]
    keep = np.ones(len(train.index), dtype=bool)
    for k, (src, tgt) in enumerate(train.chunks()):
        if by == "source":
            hit = [s in held_src for s in src]
        elif by == "either":
            hit = [s in held_src or t in held_tgt for s, t in zip(src, tgt, strict=True)]
        elif by == "pair":
            hit = [p in held_pairs for p in zip(src, tgt, strict=True)]
        else:
            raise ValueError(f"dedup must be 'source', 'pair', 'either' or 'none', got {by!r}")
        keep[k * CHUNK : k * CHUNK + len(src)] = ~np.asarray(hit, dtype=bool)
    train.index = train.index[keep]
    return int((~keep).sum())


def _encode(
    spec: CorpusSpec, parts: dict[Split, _Part], tok: TextTokenizer, out: Path, stats: dict[str, int], progress: bool
) -> dict[str, Any]:
    dtype = np.uint16 if tok.vocab_size <= 2**16 else np.int32
    len_dtype = np.uint16 if spec.max_length + 2 < 2**16 else np.int32
    info: dict[str, Any] = {"dtype": np.dtype(dtype).name, "len_dtype": np.dtype(len_dtype).name, "splits": {}}
    L = spec.max_length
    for s in SPLITS:
        part, keep_text = parts[s], s != "train"  # raw text is kept for the BLEU references of val and test
        ids = RaggedWriter(out, f"{s}.src", dtype, len_dtype), RaggedWriter(out, f"{s}.tgt", dtype, len_dtype)
        text = (LinesWriter(out, f"{s}.src"), LinesWriter(out, f"{s}.tgt")) if keep_text else None
        with tqdm(total=len(part.index), desc=f"encoding {s}", unit=" pairs", delay=2, disable=not progress) as bar:
            for src_text, tgt_text in part.chunks():
                src, tgt = tok.encode(src_text, "src"), tok.encode(tgt_text, "tgt")
                ok = [len(a) <= L and len(b) <= L for a, b in zip(src, tgt, strict=True)]
                if not all(ok):
                    src, tgt = [r for r, k in zip(src, ok) if k], [r for r, k in zip(tgt, ok) if k]
                    src_text = [r for r, k in zip(src_text, ok) if k]
                    tgt_text = [r for r, k in zip(tgt_text, ok) if k]
                ids[0].append(src), ids[1].append(tgt)
                if text is not None:
                    text[0].append(src_text), text[1].append(tgt_text)
                bar.update(len(ok))
        n = ids[0].close()
        ids[1].close()
        if text is not None:
            text[0].close(), text[1].close()
        dropped = len(part.index) - n
        stats[f"{s}/too_long_dropped"] = dropped
        if dropped:
            rank_zero_info(f"{s}: dropped {dropped} of {len(part.index)} pairs longer than max_length={L} tokens")
        if not n:
            raise ValueError(f"the {s} split is empty after dropping pairs over max_length={L}{spec.where(s, stats)}")
        stats[f"{s}/pairs"] = n
        info["splits"][s] = {"pairs": n, "src_tokens": ids[0].values, "tgt_tokens": ids[1].values, "text": keep_text}
    return info


def _summary(tok: TextTokenizer, splits: dict[str, Any]) -> str:
    parts = ", ".join(
        f"{s} {d['pairs']} pairs, {d['src_tokens'] / d['pairs']:.1f}/{d['tgt_tokens'] / d['pairs']:.1f} tokens src/tgt"
        for s, d in splits.items()
    )
    return f"{tok}: {parts}"


def build_corpus(spec: CorpusSpec, out: Path, progress: bool = True) -> dict[str, Any]:
    """Read, split, deduplicate, tokenize and encode ``spec`` into the empty folder ``out``; returns the
    manifest (written last). Raises the readers' errors and the empty-split errors of the DataModule."""
    clock = [time.perf_counter()]
    times: dict[str, float] = {}

    def lap(name: str) -> None:
        clock.append(time.perf_counter())
        times[name] = round(clock[-1] - clock[-2], 2)

    work = out / "work"
    work.mkdir(parents=True)
    stats: dict[str, int] = {}
    parts = _generated(spec, work) if spec.dataset is not None else _from_files(spec, work, stats, progress)
    lap("read")
    removed = _dedup(parts, spec.dedup)
    lap("dedup")
    stats["train/overlap_removed"] = removed
    if spec.dedup != "none":
        what = {"source": "source sentence", "pair": "pair", "either": "source or target sentence"}[spec.dedup]
        rank_zero_info(f"removed {removed} training pairs whose {what} also occurs in val or test")
    for s in SPLITS:
        if not len(parts[s].index):
            raise ValueError(f"the {s} split is empty{spec.where(s, stats)}")
    if spec.tokenizer is not None:
        tok = tokenizer_from_dict(spec.tokenizer)
    else:
        train = parts["train"]
        if progress and len(train.index) >= BIG:
            rank_zero_info(f"training BPE (vocab_size {spec.vocab_size}) on {len(train.index)} pairs")
        tok = BPETokenizer.train(
            _Sentences(train, "src"),
            _Sentences(train, "tgt"),
            spec.vocab_size,
            spec.joint_vocab,
            spec.min_frequency,
            progress=progress and len(train.index) >= BIG,
        )
    lap("tokenizer")
    (out / "tokenizer.json").write_text(json.dumps(tok.to_dict(), ensure_ascii=False), encoding="utf-8")
    info = _encode(spec, parts, tok, out, stats, progress)
    del parts
    shutil.rmtree(work)
    lap("encode")
    summary = _summary(tok, info["splits"])
    manifest = {
        "version": CACHE_VERSION,
        "key": spec.key(),
        "spec": spec.fingerprint(),
        "stats": stats,
        "summary": summary,
        "seconds": round(clock[-1] - clock[0], 2),
        "phase_seconds": times,
        **info,
    }
    return write_manifest(out, manifest)


def prepare_corpus(spec: CorpusSpec, root: str | Path | None = None, progress: bool = True) -> Path:
    """The folder of ``spec``'s prepared corpus under ``root/text`` (default :func:`default_cache_root`),
    built first unless a complete one exists. A folder that does not match its manifest (a build that
    was killed, a truncated or changed file) is said to be unusable and built again."""
    base = Path(root if root is not None else default_cache_root()).expanduser() / "text"
    return prepare_folder(base, spec.key(), CACHE_VERSION, lambda tmp: build_corpus(spec, tmp, progress), "corpus")


class PreparedCorpus:
    """A prepared corpus folder, memory-mapped: per split the token rows of both sides and, for val and
    test, their raw text.

    Args:
        path: a folder written by :func:`prepare_corpus`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.manifest = json.loads((self.path / "manifest.json").read_text(encoding="utf-8"))
        tok = json.loads((self.path / "tokenizer.json").read_text(encoding="utf-8"))
        self.tokenizer = tokenizer_from_dict(tok)
        self.stats: dict[str, int] = dict(self.manifest["stats"])
        self.summary: str = self.manifest["summary"]

    def ids(self, split: str, side: Literal["src", "tgt"]) -> Ragged:
        """Token rows of one side of ``split`` (without specials)."""
        return Ragged(self.path, f"{split}.{side}", self.manifest["dtype"], self.manifest["len_dtype"])

    def text(self, split: str, side: Literal["src", "tgt"]) -> Lines | None:
        """Raw sentences of one side of ``split`` (val and test; None for train, which keeps none)."""
        return Lines(self.path, f"{split}.{side}") if self.manifest["splits"][split]["text"] else None
