"""Parallel text for translation: file readers, length-bucketed batches and the TranslationDataModule.

Batches are bucketed by length as in fairseq (Ott et al., 2019): each epoch shuffles the pairs, sorts
them by length inside pools of ``pool_batches`` batches, cuts the pools into batches under a token
budget and shuffles the batch order, so padding stays low while the order still changes every epoch.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from lightning_tf.distributed import eval_sampler

from .synthetic import SyntheticName, algorithmic_pairs, english_german_pairs
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, BPETokenizer

__all__ = [
    "BucketBatchSampler",
    "PredictDataset",
    "ResumableDataLoader",
    "TranslationDataModule",
    "TranslationDataset",
    "collate_predict",
    "collate_translation",
    "padding_fraction",
    "read_aligned",
    "read_lines",
    "read_pairs",
    "read_tsv",
]

Pair = tuple[str, str]
Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")


# ----------------------------------------------------------------------------------------------
# reading files


def _open_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError; a cut-off file an EOFError
        raise ValueError(f"{path}: cannot decompress ({e})") from None
    return data[3:] if data.startswith(b"\xef\xbb\xbf") else data  # drop a UTF-8 byte-order mark


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file (``.gz`` decompressed), without line ends.

    Only ``\\n`` (and a ``\\r`` before it) ends a line: ``str.splitlines`` would also split on
    characters such as U+2028 and silently shift one of two aligned files.

    Raises:
        ValueError: on bytes that are not UTF-8, naming the file, line and column.
    """
    path = Path(path)
    data = _open_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ValueError(
            f"{path}:{line}: not valid UTF-8 ({e.reason}, byte {data[e.start]:#04x} at column {column})"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


@dataclass
class ReadStats:
    """What a reader kept and dropped."""

    lines: int = 0
    empty: int = 0  # pairs with an empty (or whitespace-only) side, dropped

    def merge(self, other: ReadStats) -> ReadStats:
        return ReadStats(self.lines + other.lines, self.empty + other.empty)


def _column_index(name: str, columns: Sequence[str], path: Path) -> int:
    if name in columns:
        return list(columns).index(name)
    if name.isdigit():
        return int(name)
    raise ValueError(f"{path}: language {name!r} is not one of the columns {list(columns)} (or a 0-based index)")


def read_tsv(
    path: str | Path, src: str, tgt: str, columns: Sequence[str] = ("en", "de"), header: bool = False
) -> tuple[list[Pair], ReadStats]:
    """Sentence pairs from a tab-separated file, e.g. the manythings.org / Tatoeba export
    ``english<TAB>other[<TAB>attribution]``. Extra columns are ignored.

    Args:
        path: the file (``.gz`` allowed).
        src: source column: a name from ``columns`` (or the header) or a 0-based index as a string.
        tgt: target column, likewise.
        columns: names of the leading columns in file order.
        header: the first line names the columns (then ``columns`` is not used).

    Raises:
        ValueError: a line with too few columns (naming file and line), an unknown column, bad UTF-8.
    """
    path = Path(path)
    lines = read_lines(path)
    first = 1
    if header:
        if not lines:
            raise ValueError(f"{path}: empty file, expected a header line")
        columns, lines, first = lines[0].split("\t"), lines[1:], 2
    i, j = _column_index(src, columns, path), _column_index(tgt, columns, path)
    need = max(i, j) + 1
    pairs: list[Pair] = []
    stats = ReadStats(lines=len(lines))
    for n, line in enumerate(lines, start=first):
        if not line.strip():
            stats.empty += 1
            continue
        fields = line.split("\t")
        if len(fields) < need:
            raise ValueError(
                f"{path}:{n}: expected at least {need} tab-separated columns (source {src!r} is column {i}, "
                f"target {tgt!r} is column {j}), found {len(fields)}: {line[:60]!r}"
            )
        s, t = fields[i].strip(), fields[j].strip()
        if not s or not t:
            stats.empty += 1
            continue
        pairs.append((s, t))
    return pairs, stats


def _aligned_path(prefix: Path, lang: str) -> Path:
    for p in (Path(f"{prefix}.{lang}"), Path(f"{prefix}.{lang}.gz")):
        if p.is_file():
            return p
    hint = f"; {prefix} is a folder, give the file prefix such as {prefix / 'train'}" if prefix.is_dir() else ""
    raise FileNotFoundError(f"neither {prefix}.{lang} nor {prefix}.{lang}.gz exists{hint}")


def read_aligned(prefix: str | Path, src: str, tgt: str) -> tuple[list[Pair], ReadStats]:
    """Sentence pairs from two line-aligned files ``{prefix}.{src}`` and ``{prefix}.{tgt}`` (each may end in
    ``.gz``), the Multi30k / IWSLT layout: ``train.de`` + ``train.en``.

    Raises:
        ValueError: when the files have different line counts, naming both files and the first line that
            only one of them has; bad UTF-8.
    """
    src_path, tgt_path = _aligned_path(Path(prefix), src), _aligned_path(Path(prefix), tgt)
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        longer, shorter = (src_path, tgt_path) if len(src_lines) > len(tgt_lines) else (tgt_path, src_path)
        first_extra = min(len(src_lines), len(tgt_lines)) + 1
        raise ValueError(
            f"{src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}: "
            f"aligned files need one sentence per line; {longer}:{first_extra} has no partner line in {shorter}"
        )
    pairs: list[Pair] = []
    stats = ReadStats(lines=len(src_lines))
    for s, t in zip(src_lines, tgt_lines, strict=True):
        s, t = s.strip(), t.strip()
        if not s or not t:
            stats.empty += 1
            continue
        pairs.append((s, t))
    return pairs, stats


def read_pairs(
    path: str | Path,
    src: str,
    tgt: str,
    file_format: Literal["auto", "tsv", "aligned"] = "auto",
    columns: Sequence[str] = ("en", "de"),
    header: bool = False,
) -> tuple[list[Pair], ReadStats]:
    """Read ``path`` as a TSV file, or as the prefix of two aligned files. ``auto``: a file that exists is a
    TSV, otherwise ``path`` is a prefix."""
    if file_format == "tsv" or (file_format == "auto" and Path(path).is_file()):
        return read_tsv(path, src, tgt, columns, header)
    if file_format == "auto" and not Path(path).parent.is_dir():
        raise FileNotFoundError(f"{path}: no such file, and no folder {Path(path).parent} for aligned files")
    return read_aligned(path, src, tgt)


# ----------------------------------------------------------------------------------------------
# datasets and batches


class TranslationDataset(Dataset):
    """Encoded sentence pairs with their raw text (the raw target is the BLEU reference).

    Args:
        src_ids: source token ids per pair, without specials.
        tgt_ids: target token ids per pair, without specials.
        src_text: source sentences.
        tgt_text: target sentences.
    """

    def __init__(
        self, src_ids: list[list[int]], tgt_ids: list[list[int]], src_text: list[str], tgt_text: list[str]
    ) -> None:
        assert len(src_ids) == len(tgt_ids) == len(src_text) == len(tgt_text)
        self.src_ids, self.tgt_ids, self.src_text, self.tgt_text = src_ids, tgt_ids, src_text, tgt_text

    def __len__(self) -> int:
        return len(self.src_ids)

    def __getitem__(self, i: int) -> tuple[list[int], list[int], str, str]:
        return self.src_ids[i], self.tgt_ids[i], self.src_text[i], self.tgt_text[i]

    @property
    def src_lengths(self) -> list[int]:
        """Length of every source row in a batch: tokens + </s>."""
        return [len(s) + 1 for s in self.src_ids]

    @property
    def tgt_lengths(self) -> list[int]:
        """Length of every target row in a batch: <s> + tokens + </s>."""
        return [len(t) + 2 for t in self.tgt_ids]


class PredictDataset(Dataset):
    """Source sentences to translate, each with its 0-based line number in the input file.

    Args:
        src_ids: token ids per sentence, without specials.
        src_text: the sentences.
    """

    def __init__(self, src_ids: list[list[int]], src_text: list[str]) -> None:
        self.src_ids, self.src_text = src_ids, src_text

    def __len__(self) -> int:
        return len(self.src_ids)

    def __getitem__(self, i: int) -> tuple[list[int], str, int]:
        return self.src_ids[i], self.src_text[i], i


def _pad(rows: list[list[int]], prefix: list[int], suffix: list[int]) -> Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows) + len(prefix) + len(suffix)), PAD_ID)  # (B, L)
    for b, r in enumerate(rows):
        out[b, : len(r) + len(prefix) + len(suffix)] = torch.tensor(prefix + r + suffix)
    return out


def collate_translation(items: list[tuple[list[int], list[int], str, str]]) -> dict[str, Any]:
    """``src (B, S)`` = tokens + </s> and ``tgt (B, T)`` = <s> + tokens + </s>, right-padded with <pad>;
    ``src_text`` and ``tgt_text`` are the raw sentences."""
    src, tgt, src_text, tgt_text = zip(*items, strict=True)
    return {
        "src": _pad(list(src), [], [EOS_ID]),  # (B, S)
        "tgt": _pad(list(tgt), [BOS_ID], [EOS_ID]),  # (B, T)
        "src_text": list(src_text),
        "tgt_text": list(tgt_text),
    }


def collate_predict(items: list[tuple[list[int], str, int]]) -> dict[str, Any]:
    """``src (B, S)`` = tokens + </s>, ``src_text`` and ``index (B,)``, the input line numbers."""
    src, src_text, index = zip(*items, strict=True)
    return {"src": _pad(list(src), [], [EOS_ID]), "src_text": list(src_text), "index": torch.tensor(index)}  # (B, S)


class _BatchList(Dataset):
    """A fixed list of batches, for a loader with ``batch_size=None`` (prediction keeps the file order
    recoverable through ``index``, and Lightning re-wraps a prediction loader's sampler)."""

    def __init__(self, dataset: Dataset, batches: list[list[int]], collate: Any) -> None:
        self.dataset, self.batches, self.collate = dataset, batches, collate

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.collate([self.dataset[j] for j in self.batches[i]])


def padding_fraction(batches: Sequence[Sequence[int]], *lengths: Sequence[int]) -> float:
    """Share of pad positions in the padded tensors of ``batches``, over every length list (e.g. src and tgt)."""
    real = padded = 0
    for lens in lengths:
        for batch in batches:
            ls = [lens[i] for i in batch]
            real += sum(ls)
            padded += len(ls) * max(ls)
    return 1.0 - real / padded if padded else 0.0


class _EpochSampler(Sampler[int]):
    """The indices of a :class:`BucketBatchSampler`'s epoch in batch order. Lightning calls ``set_epoch`` on
    ``loader.batch_sampler.sampler`` (not on the batch sampler), so the epoch reaches the batches through here."""

    def __init__(self, parent: BucketBatchSampler) -> None:
        self.parent = parent

    def set_epoch(self, epoch: int) -> None:
        self.parent.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        return (i for batch in self.parent._batches() for i in batch)  # not the parent's resumable iteration

    def __len__(self) -> int:
        return sum(len(b) for b in self.parent._batches())


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar lengths under a token budget, reshuffled every epoch and sharded across ranks.

    Each epoch (seeded by ``seed`` and :meth:`set_epoch`) shuffles the indices, sorts them by length in
    pools of about ``pool_batches`` batches, cuts each pool into batches whose padded size
    ``len(batch) * max(length)`` stays within ``max_tokens`` (and at most ``batch_size`` items), and
    shuffles the batches. Without ``shuffle`` all indices are sorted by length once (evaluation). Under
    ``num_replicas > 1`` the same batch list is built on every rank, the largest batches are halved
    until the count divides evenly, and rank ``r`` takes batches ``r, r + R, ...``: disjoint, covering,
    and the same number of batches on every rank. Nothing is ever dropped. The order draws nothing from
    the global random state; ``state_dict`` / ``load_state_dict`` save and restore the position inside
    an epoch (see :class:`ResumableDataLoader`).

    Args:
        src_lengths: padded source length of every item.
        tgt_lengths: padded target length of every item (None: source only).
        batch_size: most items per batch (None: only the token budget).
        max_tokens: most ``items * longest side`` per batch (None: only ``batch_size``).
        shuffle: reshuffle per epoch (training) or sort once (evaluation).
        seed: base seed; the epoch is added.
        pool_batches: batches per sorted pool; larger pools pad less and shuffle less.
        num_replicas: number of ranks (None: from ``torch.distributed`` when initialised, else 1).
        rank: this rank (None: from ``torch.distributed`` when initialised, else 0).
    """

    def __init__(
        self,
        src_lengths: Sequence[int],
        tgt_lengths: Sequence[int] | None = None,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        pool_batches: int = 100,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        if batch_size is None and max_tokens is None:
            raise ValueError("give batch_size, max_tokens or both")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size ({batch_size}) must be >= 1")
        if tgt_lengths is not None and len(tgt_lengths) != len(src_lengths):
            raise ValueError(f"{len(src_lengths)} source lengths but {len(tgt_lengths)} target lengths")
        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank ({rank}) must be in [0, num_replicas ({num_replicas}))")
        self.src_lengths = np.asarray(src_lengths, dtype=np.int64)
        self.tgt_lengths = None if tgt_lengths is None else np.asarray(tgt_lengths, dtype=np.int64)
        self.cost = self.src_lengths if self.tgt_lengths is None else np.maximum(self.src_lengths, self.tgt_lengths)
        if max_tokens is not None and len(self.cost) and self.cost.max() > max_tokens:
            raise ValueError(
                f"max_tokens ({max_tokens}) is smaller than the longest item ({self.cost.max()} tokens with specials)"
            )
        self.batch_size, self.max_tokens, self.shuffle, self.seed = batch_size, max_tokens, shuffle, seed
        self.pool_batches, self.num_replicas, self.rank = pool_batches, num_replicas, rank
        self.epoch = 0
        self._cache: tuple[int, list[list[int]]] | None = None
        self.sampler = _EpochSampler(self)
        self._resume: tuple[int, int] | None = None  # (epoch, batches to skip) from load_state_dict
        self.start = 0  # batches skipped by the current iteration (a resumed epoch)
        self.yielded = 0  # batches yielded by the current iteration, skipped ones included

    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this before every training epoch."""
        self.epoch = epoch

    def _sort(self, idx: np.ndarray) -> np.ndarray:
        tgt = self.tgt_lengths[idx] if self.tgt_lengths is not None else self.src_lengths[idx]
        return idx[np.lexsort((tgt, self.src_lengths[idx], self.cost[idx]))]  # by cost, then source, then target

    def _cut(self, order: np.ndarray) -> list[list[int]]:
        batches: list[list[int]] = []
        batch: list[int] = []
        longest = 0
        for i, c in zip(order.tolist(), self.cost[order].tolist(), strict=True):
            longest_if_added = max(longest, c)
            too_many = self.batch_size is not None and len(batch) >= self.batch_size
            too_big = self.max_tokens is not None and (len(batch) + 1) * longest_if_added > self.max_tokens
            if batch and (too_many or too_big):
                batches.append(batch)
                batch, longest_if_added = [], c
            batch.append(i)
            longest = longest_if_added
        if batch:
            batches.append(batch)
        return batches

    def all_batches(self, epoch: int | None = None) -> list[list[int]]:
        """The batches of every rank for ``epoch`` (default: the current one), before sharding."""
        epoch = self.epoch if epoch is None else epoch
        n = len(self.cost)
        if not self.shuffle:
            batches = self._cut(self._sort(np.arange(n)))
        else:
            rng = np.random.default_rng([self.seed, epoch])
            perm = rng.permutation(n)
            per_batch = self.batch_size or max(1, self.max_tokens // max(1, int(self.cost.mean())))  # type: ignore[operator]
            pool = max(1, self.pool_batches * per_batch)
            batches = [b for start in range(0, n, pool) for b in self._cut(self._sort(perm[start : start + pool]))]
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return self._even_out(batches)

    def _even_out(self, batches: list[list[int]]) -> list[list[int]]:
        # every rank must take the same number of steps, or DDP waits forever in a collective
        R = self.num_replicas
        while len(batches) % R:
            big = max(range(len(batches)), key=lambda k: len(batches[k]), default=None)
            if big is None or len(batches[big]) < 2:
                break
            b = batches[big]
            batches[big : big + 1] = [b[: len(b) // 2], b[len(b) // 2 :]]
        if len(batches) % R:  # fewer items than ranks: repeat batches, the only case with duplicates
            batches = batches + [batches[k % len(batches)] for k in range(R - len(batches) % R)] if batches else []
        return batches

    def _batches(self) -> list[list[int]]:
        if self._cache is None or self._cache[0] != self.epoch:
            self._cache = (self.epoch, self.all_batches()[self.rank :: self.num_replicas])
        return self._cache[1]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches()
        self.start = 0
        if self._resume is not None:
            epoch, done = self._resume
            self._resume = None
            if epoch == self.epoch:  # a checkpoint from inside this epoch: go on after its last batch
                self.start = min(done, len(batches))
        self.yielded = self.start
        for batch in batches[self.start :]:
            self.yielded += 1
            yield batch

    def __len__(self) -> int:
        return len(self._batches())

    def state_dict(self) -> dict[str, int]:
        """Where the epoch stands: its number and the batches yielded so far (a DataLoader with workers
        fetches ahead of training; :class:`ResumableDataLoader` counts what it returned instead)."""
        return {"epoch": self.epoch, "batches_done": self.yielded, "num_replicas": self.num_replicas}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume mid-epoch: the next iteration over ``state["epoch"]`` skips its first ``batches_done``
        batches (the batch list depends only on ``seed`` and the epoch, so it is the same list). An
        iteration over another epoch (the checkpoint closed its epoch) starts at the first batch."""
        if state["num_replicas"] != self.num_replicas:
            rank_zero_warn(
                f"the checkpoint's sampler state was saved with {state['num_replicas']} ranks, this run has "
                f"{self.num_replicas}: the resumed epoch's batches differ from the interrupted one's"
            )
        self.set_epoch(int(state["epoch"]))
        self._resume = (int(state["epoch"]), int(state["batches_done"]))


class ResumableDataLoader(DataLoader):
    """A DataLoader over a :class:`BucketBatchSampler` whose position Lightning saves in checkpoints
    (Lightning calls ``state_dict`` / ``load_state_dict`` on training loaders that have them), so a run
    resumed from a mid-epoch checkpoint trains on the rest of that epoch's batches, in order.

    The position is the number of batches this loader has returned: workers and prefetching read the
    sampler ahead of training, while Lightning fetches a sized loader's batches one at a time."""

    def __iter__(self) -> Iterator[Any]:
        iterator = super().__iter__()  # created now, as DataLoader does: it draws the base seed here
        self._returned = 0
        return self._counted(iterator)

    def _counted(self, iterator: Iterator[Any]) -> Iterator[Any]:
        for batch in iterator:
            self._returned += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        sampler = self.batch_sampler
        assert isinstance(sampler, BucketBatchSampler)
        return sampler.state_dict() | {"batches_done": sampler.start + getattr(self, "_returned", 0)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        sampler = self.batch_sampler
        assert isinstance(sampler, BucketBatchSampler)
        sampler.load_state_dict(state)


# ----------------------------------------------------------------------------------------------
# the DataModule


@dataclass
class _Split:
    src_text: list[str] = field(default_factory=list)
    tgt_text: list[str] = field(default_factory=list)


Dedup = Literal["source", "pair", "either", "none"]


def _dedup(train: list[Pair], held_out: list[Pair], by: Dedup) -> tuple[list[Pair], int]:
    """Training pairs minus those sharing the ``pair``, the ``source`` or ``either`` side with ``held_out``."""
    if by == "none":
        return train, 0
    pairs, srcs, tgts = set(held_out), {p[0] for p in held_out}, {p[1] for p in held_out}
    if by == "pair":
        kept = [p for p in train if p not in pairs]
    elif by == "source":
        kept = [p for p in train if p[0] not in srcs]
    elif by == "either":
        kept = [p for p in train if p[0] not in srcs and p[1] not in tgts]
    else:
        raise ValueError(f"dedup must be 'source', 'pair', 'either' or 'none', got {by!r}")
    return kept, len(train) - len(kept)


class TranslationDataModule(LightningDataModule):
    """Parallel text for translation: a built-in generated corpus, a TSV file or aligned files per split.

    Batches are dicts: ``src (B, S)`` = tokens + </s>; ``tgt (B, T)`` = <s> + tokens + </s> (the model reads
    ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]``), both right-padded with ``pad_id``; ``src_text`` and
    ``tgt_text``, the raw sentences. Prediction batches hold ``src``, ``src_text`` and ``index (B,)``, the
    0-based line of ``predict_file``. The BPE tokenizer is learnt from the training split only, saved to
    the run directory and kept in the checkpoint (``state_dict``), so a resumed run encodes the same way.

    Args:
        dataset: built-in corpus ``synthetic`` (English -> German grammar), ``copy``, ``reverse`` or ``sort``;
            None reads ``train_file``.
        train_file: a TSV file (e.g. Tatoeba's ``deu.txt``) or the prefix of aligned files
            (``data/multi30k/train`` for ``train.de`` + ``train.en``, ``.gz`` allowed).
        val_file: validation file or prefix; None splits ``n_val`` pairs off ``train_file``.
        test_file: test file or prefix; None splits ``n_test`` pairs off ``train_file``.
        predict_file: one source sentence per line, to translate with ``predict``.
        file_format: ``tsv``, ``aligned``, or ``auto`` (an existing file is a TSV, else a prefix).
        columns: names of the TSV columns in file order; the Tatoeba export is ``[en, de]`` for English-German.
        header: the TSV's first line names its columns (``columns`` is then not used).
        src_lang: source language: a TSV column name (or 0-based index) or the aligned files' suffix.
        tgt_lang: target language, likewise. ``src_lang: de, tgt_lang: en`` reads an en<TAB>de file as de->en.
        n_train: generated training pairs (None: 40,000), or a cap on the training pairs read from files
            after a seeded shuffle (None: all).
        n_val: validation pairs generated, or split off ``train_file``.
        n_test: test pairs generated, or split off ``train_file``.
        min_words: fewest letters in a copy / reverse / sort sequence.
        max_words: most letters in a copy / reverse / sort sequence.
        dedup: remove training pairs that also occur in val or test: pairs with a held-out ``source``
            sentence (so no test input was seen in training; Tatoeba repeats sentences with other
            translations), the same whole ``pair``, a held-out sentence on ``either`` side, or ``none``.
        max_length: longest sentence in BPE tokens (without specials); longer pairs are dropped and counted,
            longer prediction inputs truncated.
        vocab_size: BPE vocabulary capacity per side, specials included; every id is below it.
        joint_vocab: one vocabulary for both languages (allows tied embeddings) or one per side.
        min_frequency: least count of a pair of symbols for a BPE merge.
        tokenizer_dir: a directory written by ``BPETokenizer.save`` to use instead of training one.
        batch_size: most pairs per batch (None: only ``max_tokens``).
        max_tokens: most ``pairs * longest side`` tokens per batch (None: only ``batch_size``).
        pool_batches: batches per length-sorted pool when shuffling.
        num_workers: DataLoader worker processes (the data is encoded in memory once; 0 is usually fastest).
        seed: seed of generation, splitting, capping and batch shuffling.
    """

    def __init__(
        self,
        dataset: SyntheticName | None = "synthetic",
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        predict_file: str | None = None,
        file_format: Literal["auto", "tsv", "aligned"] = "auto",
        columns: list[str] | None = None,
        header: bool = False,
        src_lang: str = "en",
        tgt_lang: str = "de",
        n_train: int | None = None,
        n_val: int = 500,
        n_test: int = 1000,
        min_words: int = 2,
        max_words: int = 10,
        dedup: Dedup = "source",
        max_length: int = 100,
        vocab_size: int = 1000,
        joint_vocab: bool = True,
        min_frequency: int = 2,
        tokenizer_dir: str | None = None,
        batch_size: int | None = None,
        max_tokens: int | None = 4096,
        pool_batches: int = 100,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if dataset is None and train_file is None:
            raise ValueError("set dataset (synthetic, copy, reverse, sort) or train_file")
        if dataset is not None and (train_file or val_file or test_file):
            raise ValueError(
                f"dataset={dataset!r} is generated; set dataset to null to read train_file/val_file/test_file"
            )
        if dataset == "synthetic" and {src_lang, tgt_lang} != {"en", "de"}:
            raise ValueError(
                f"the synthetic corpus is English-German; got src_lang={src_lang!r}, tgt_lang={tgt_lang!r}"
            )
        if src_lang == tgt_lang:
            raise ValueError(f"src_lang and tgt_lang are both {src_lang!r}")
        for name, value in (("n_val", n_val), ("n_test", n_test), ("max_length", max_length)):
            if value < 1:
                raise ValueError(f"{name} ({value}) must be >= 1")
        if n_train is not None and n_train < 1:
            raise ValueError(f"n_train ({n_train}) must be >= 1 or null")
        if batch_size is None and max_tokens is None:
            raise ValueError("set batch_size, max_tokens or both")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size ({batch_size}) must be >= 1")
        if max_tokens is not None and max_tokens < max_length + 2:
            raise ValueError(f"max_tokens ({max_tokens}) must fit one pair of max_length ({max_length}) + 2 specials")
        self.save_hyperparameters()
        self.vocab_size = vocab_size
        self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID
        self.columns = list(columns) if columns is not None else ["en", "de"]
        self.tokenizer: BPETokenizer | None = None
        self.datasets: dict[str, TranslationDataset] = {}
        self.predict_set: PredictDataset | None = None
        self.text: dict[str, _Split] = {}
        self.stats: dict[str, int] = {}
        self.padding_fraction: float | None = None
        self._tokenizer_saved = False

    # ---------------------------------------------------------------------------- reading

    def _generated(self) -> dict[Split, list[Pair]]:
        h = self.hparams
        n_train = 40_000 if h.n_train is None else h.n_train
        if h.dataset == "synthetic":
            pairs = english_german_pairs(h.n_test + h.n_val + n_train, h.seed)  # distinct pairs, so disjoint splits
            if h.src_lang == "de":
                pairs = [(d, e) for e, d in pairs]
            return {
                "test": pairs[: h.n_test],
                "val": pairs[h.n_test : h.n_test + h.n_val],
                "train": pairs[h.n_test + h.n_val :],
            }
        sizes = {"train": n_train, "val": h.n_val, "test": h.n_test}
        return {
            s: algorithmic_pairs(h.dataset, sizes[s], h.seed * 3 + k, h.min_words, h.max_words)
            for k, s in enumerate(SPLITS)
        }

    def _read(self, path: str, split: str) -> list[Pair]:
        h = self.hparams
        pairs, stats = read_pairs(path, h.src_lang, h.tgt_lang, h.file_format, self.columns, h.header)
        self.stats[f"{split}/lines"] = self.stats.get(f"{split}/lines", 0) + stats.lines
        self.stats[f"{split}/empty_dropped"] = self.stats.get(f"{split}/empty_dropped", 0) + stats.empty
        if stats.empty:
            rank_zero_info(f"{path}: dropped {stats.empty} of {stats.lines} lines with an empty sentence")
        return pairs

    def _from_files(self) -> dict[Split, list[Pair]]:
        h = self.hparams
        train = self._read(h.train_file, "train")
        rng = random.Random(h.seed)
        splits: dict[Split, list[Pair]] = {}
        if h.val_file is None or h.test_file is None:
            rng.shuffle(train)  # files such as Tatoeba's are sorted by length: shuffle before splitting
            need = (h.n_test if h.test_file is None else 0) + (h.n_val if h.val_file is None else 0)
            if need >= len(train):
                raise ValueError(
                    f"{h.train_file}: {len(train)} pairs cannot give {need} held-out pairs and a training split; "
                    f"lower n_val ({h.n_val}) / n_test ({h.n_test})"
                )
            if h.test_file is None:
                splits["test"], train = train[: h.n_test], train[h.n_test :]
            if h.val_file is None:
                splits["val"], train = train[: h.n_val], train[h.n_val :]
        if h.test_file is not None:
            splits["test"] = self._read(h.test_file, "test")
        if h.val_file is not None:
            splits["val"] = self._read(h.val_file, "val")
        if h.n_train is not None and h.n_train < len(train):
            if h.val_file is not None and h.test_file is not None:
                rng.shuffle(train)
            train = train[: h.n_train]
        splits["train"] = train
        return splits

    def _load_text(self) -> None:
        h = self.hparams
        splits = self._generated() if h.dataset is not None else self._from_files()
        splits["train"], removed = _dedup(splits["train"], splits["val"] + splits["test"], h.dedup)
        self.stats["train/overlap_removed"] = removed
        if h.dedup != "none":
            what = {"source": "source sentence", "pair": "pair", "either": "source or target sentence"}[h.dedup]
            rank_zero_info(f"removed {removed} training pairs whose {what} also occurs in val or test")
        self.text = {s: _Split([p[0] for p in splits[s]], [p[1] for p in splits[s]]) for s in SPLITS}
        for s in SPLITS:
            if not self.text[s].src_text:
                raise ValueError(f"the {s} split is empty{self._where(s)}")

    def _where(self, split: str) -> str:
        h = self.hparams
        source = {"train": h.train_file, "val": h.val_file or h.train_file, "test": h.test_file or h.train_file}[split]
        if source is None:
            return f" (dataset {h.dataset!r})"
        counts = ", ".join(f"{k.split('/')[1]}={v}" for k, v in self.stats.items() if k.startswith(f"{split}/"))
        return f" ({source}: {counts})" if counts else f" ({source})"

    # ---------------------------------------------------------------------------- encoding

    def _encode(self) -> None:
        assert self.tokenizer is not None
        h = self.hparams
        for s in SPLITS:
            text = self.text[s]
            src, tgt = self.tokenizer.encode(text.src_text, "src"), self.tokenizer.encode(text.tgt_text, "tgt")
            keep = [i for i in range(len(src)) if len(src[i]) <= h.max_length and len(tgt[i]) <= h.max_length]
            dropped = len(src) - len(keep)
            self.stats[f"{s}/too_long_dropped"] = dropped
            if dropped:
                rank_zero_info(
                    f"{s}: dropped {dropped} of {len(src)} pairs longer than max_length={h.max_length} tokens"
                )
            if not keep:
                raise ValueError(
                    f"the {s} split is empty after dropping pairs over max_length={h.max_length}{self._where(s)}"
                )
            self.datasets[s] = TranslationDataset(
                [src[i] for i in keep],
                [tgt[i] for i in keep],
                [text.src_text[i] for i in keep],
                [text.tgt_text[i] for i in keep],
            )
            self.stats[f"{s}/pairs"] = len(keep)
        summary = ", ".join(
            f"{s} {len(d)} pairs, {np.mean(d.src_lengths) - 1:.1f}/{np.mean(d.tgt_lengths) - 2:.1f} tokens src/tgt"
            for s, d in self.datasets.items()
        )
        rank_zero_info(f"{self.tokenizer}: {summary}")

    def _encode_predict(self) -> None:
        assert self.tokenizer is not None
        h = self.hparams
        lines = [line.strip() for line in read_lines(h.predict_file)]
        ids = self.tokenizer.encode(lines, "src")
        long = sum(len(r) > h.max_length for r in ids)
        if long:
            rank_zero_warn(
                f"{h.predict_file}: truncated {long} of {len(ids)} lines to max_length={h.max_length} tokens"
            )
        self.stats["predict/truncated"] = long
        self.predict_set = PredictDataset([r[: h.max_length] for r in ids], lines)

    def setup(self, stage: str | None = None) -> None:
        h = self.hparams
        if self.tokenizer is None and h.tokenizer_dir is not None:
            self.tokenizer = BPETokenizer.load(h.tokenizer_dir)
        # prediction needs the training split only to learn a tokenizer
        if not self.datasets and (stage != "predict" or self.tokenizer is None):
            self._load_text()
            if self.tokenizer is None:
                train = self.text["train"]
                self.tokenizer = BPETokenizer.train(
                    train.src_text, train.tgt_text, h.vocab_size, h.joint_vocab, h.min_frequency
                )
            elif self.tokenizer.vocab_size != h.vocab_size:
                raise ValueError(
                    f"tokenizer vocab_size ({self.tokenizer.vocab_size}) differs from vocab_size ({h.vocab_size})"
                )
            self._encode()
        if h.predict_file is not None and self.predict_set is None:
            self._encode_predict()
        self._save_tokenizer()

    def _save_tokenizer(self) -> None:
        trainer = self.trainer
        if self._tokenizer_saved or trainer is None or self.tokenizer is None or not trainer.is_global_zero:
            return
        if trainer.fast_dev_run:  # a smoke run writes nothing, like Lightning's own loggers and checkpoints
            return
        # beside the "checkpoints" folder, resolved as ModelCheckpoint resolves it (the run of any logger)
        if trainer.loggers:
            logger = trainer.loggers[0]
            version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
            run_dir = Path(logger.save_dir or trainer.default_root_dir) / str(logger.name) / version
        else:
            run_dir = Path(trainer.default_root_dir)
        path = self.tokenizer.save(run_dir / "tokenizer")
        rank_zero_info(f"tokenizer saved to {path}")
        self._tokenizer_saved = True

    # ---------------------------------------------------------------------------- loaders

    def _sampler(self, split: str, shuffle: bool) -> BucketBatchSampler:
        if split not in self.datasets:
            raise RuntimeError(f"call setup() before asking for the {split} dataloader")
        d, h = self.datasets[split], self.hparams
        return BucketBatchSampler(
            d.src_lengths, d.tgt_lengths, h.batch_size, h.max_tokens, shuffle, h.seed, h.pool_batches
        )

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        sampler = self._sampler(split, shuffle)
        if self.trainer is not None and shuffle:
            sampler.set_epoch(self.trainer.current_epoch)
        # the training loader keeps its position in checkpoints, for exact mid-epoch resume
        return (ResumableDataLoader if shuffle else DataLoader)(
            self.datasets[split],
            batch_sampler=sampler,
            collate_fn=collate_translation,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        loader = self._loader("train", shuffle=True)
        d, sampler = self.datasets["train"], loader.batch_sampler
        assert isinstance(sampler, BucketBatchSampler)
        self.padding_fraction = padding_fraction(sampler.all_batches(), d.src_lengths, d.tgt_lengths)
        rank_zero_info(
            f"train: {len(sampler)} batches per epoch{' per rank' if sampler.num_replicas > 1 else ''}, "
            f"{100 * self.padding_fraction:.1f}% padding"
        )
        if self.trainer is not None:  # the data's facts beside the run's curves (loggers write on rank 0 only)
            facts = {f"data/{k.replace('/', '_')}": float(v) for k, v in self.stats.items()}
            facts["data/padding_fraction"] = self.padding_fraction
            for logger in self.trainer.loggers:
                logger.log_metrics(facts, step=self.trainer.global_step)
        return loader

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        if self.predict_set is None:
            raise RuntimeError("set predict_file (one source sentence per line) to predict")
        h = self.hparams
        lengths = [len(r) + 1 for r in self.predict_set.src_ids]
        max_tokens = None if h.max_tokens is None else max(h.max_tokens, max(lengths, default=1))
        batches = BucketBatchSampler(lengths, None, h.batch_size, max_tokens, shuffle=False).all_batches()
        ds = _BatchList(self.predict_set, batches, collate_predict)
        # under DDP each process decodes its share of the batches; TranslationWriter gathers them by line
        return DataLoader(ds, batch_size=None, sampler=eval_sampler(ds, predict=True))

    # ---------------------------------------------------------------------------- checkpoint

    def state_dict(self) -> dict[str, Any]:
        """The tokenizer as plain JSON types, stored in the checkpoint."""
        return {"tokenizer": self.tokenizer.to_dict()} if self.tokenizer is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Reuse the checkpoint's tokenizer (re-encoding the splits if it differs from the one just trained)."""
        if "tokenizer" not in state_dict:
            return
        tokenizer = BPETokenizer.from_dict(state_dict["tokenizer"])
        if tokenizer == self.tokenizer:
            return
        self.tokenizer = tokenizer
        if self.text:
            self._encode()
        if self.predict_set is not None:
            self._encode_predict()
        if self._tokenizer_saved:  # setup() saved the tokenizer it had before the restore: replace it
            self._tokenizer_saved = False
            self._save_tokenizer()
