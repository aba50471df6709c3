"""Parallel text for translation: the encoded datasets, their collate functions and the TranslationDataModule.

Files are read by :mod:`.io`, batched by length under a token budget by :mod:`.sampler`; the BPE
tokenizer (:mod:`.tokenizer`) is learnt from the training split only and kept in the checkpoint.
Prediction reads only ``predict_file``: the tokenizer then comes from the checkpoint, a tokenizer
folder or :meth:`TranslationDataModule.use_tokenizer`, never from the training data.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from lightning_tf.distributed import eval_sampler
from lightning_tf.training import run_dir

from .io import FileFormat, Pair, read_pairs, read_sentences
from .sampler import BatchListDataset, BucketBatchSampler, ResumableDataLoader, padding_fraction
from .synthetic import SyntheticName, algorithmic_pairs, english_german_pairs
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, BPETokenizer, TextTokenizer
from .tokenizer import load_tokenizer, tokenizer_from_dict

__all__ = [
    "Dedup",
    "PredictDataset",
    "TranslationDataModule",
    "TranslationDataset",
    "collate_predict",
    "collate_translation",
]

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")


# ---------------------------------------------------------------------------------------------- datasets


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


def _pad(rows: list[list[int]], prefix: list[int], suffix: list[int], pad_id: int) -> Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows) + len(prefix) + len(suffix)), pad_id)  # (B, L)
    for b, r in enumerate(rows):
        out[b, : len(r) + len(prefix) + len(suffix)] = torch.tensor(prefix + r + suffix)
    return out


def collate_translation(
    items: list[tuple[list[int], list[int], str, str]], pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> dict[str, Any]:
    """``src (B, S)`` = tokens + </s> and ``tgt (B, T)`` = <s> + tokens + </s>, right-padded with <pad> (the
    tokenizer's ids; <s> is the decoder's start token); ``src_text`` and ``tgt_text`` are the raw sentences."""
    src, tgt, src_text, tgt_text = zip(*items, strict=True)
    return {
        "src": _pad(list(src), [], [eos_id], pad_id),  # (B, S)
        "tgt": _pad(list(tgt), [bos_id], [eos_id], pad_id),  # (B, T)
        "src_text": list(src_text),
        "tgt_text": list(tgt_text),
    }


def collate_predict(
    items: list[tuple[list[int], str, int]], pad_id: int = PAD_ID, eos_id: int = EOS_ID
) -> dict[str, Any]:
    """``src (B, S)`` = tokens + </s>, ``src_text`` and ``index (B,)``, the input line numbers."""
    src, src_text, index = zip(*items, strict=True)
    return {"src": _pad(list(src), [], [eos_id], pad_id), "src_text": list(src_text), "index": torch.tensor(index)}


# ---------------------------------------------------------------------------------------------- the DataModule


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
    the run directory (``<run>/tokenizer``) and kept in the checkpoint (``state_dict``): under ``ckpt_path``
    Lightning restores it (:meth:`load_state_dict`) and the splits are encoded again with it, so a resumed
    run encodes as the model was trained. A trained model's tokenizer is given with ``tokenizer_dir`` or
    :meth:`use_tokenizer`.

    ``setup("predict")`` reads ``predict_file`` and nothing else (no training file, no generated corpus, no
    tokenizer training, no tokenizer folder written): its lines are encoded when the predict loader is
    built, after Lightning restored the checkpoint's tokenizer under ``ckpt_path``. ``src_lang`` and
    ``tgt_lang`` are handed to the model with the tokenizer and kept in its checkpoint.

    Args:
        dataset: built-in corpus ``synthetic`` (English -> German grammar), ``copy``, ``reverse`` or ``sort``;
            None reads ``train_file`` (or, with neither, the DataModule only predicts ``predict_file``).
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
        vocab_size: BPE vocabulary capacity per side, specials included; every id is below it (null: tokenizer_dir's).
        joint_vocab: one vocabulary for both languages (allows tied embeddings) or one per side.
        min_frequency: least count of a pair of symbols for a BPE merge.
        tokenizer_dir: a tokenizer to use instead of training one, read at once: a run's ``tokenizer`` folder, or a
            Marian / OPUS-MT model's folder or hub name (its SentencePiece tokenizer; with ``vocab_size: null``).
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
        file_format: FileFormat = "auto",
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
        vocab_size: int | None = 1000,
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
        if dataset is None and train_file is None and predict_file is None:
            raise ValueError("set dataset (synthetic, copy, reverse, sort) or train_file (or predict_file, to predict)")
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
        if vocab_size is None and tokenizer_dir is None:
            raise ValueError("vocab_size: null takes the capacity of the tokenizer_dir tokenizer; set tokenizer_dir")
        if vocab_size is not None and vocab_size < 2 * len(SPECIAL_TOKENS):  # the specials and the BPE alphabet
            raise ValueError(f"vocab_size ({vocab_size}) must be at least {2 * len(SPECIAL_TOKENS)}")
        if batch_size is None and max_tokens is None:
            raise ValueError("set batch_size, max_tokens or both")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size ({batch_size}) must be >= 1")
        if max_tokens is not None and max_tokens < max_length + 2:
            raise ValueError(f"max_tokens ({max_tokens}) must fit one pair of max_length ({max_length}) + 2 specials")
        self.save_hyperparameters()
        self.vocab_size = vocab_size
        self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.columns = list(columns) if columns is not None else ["en", "de"]
        self.tokenizer: TextTokenizer | None = None
        self.datasets: dict[str, TranslationDataset] = {}
        self.predict_text: list[str] | None = None  # the lines of predict_file, read by setup
        self.predict_set: PredictDataset | None = None  # ... encoded by predict_dataloader
        self.text: dict[str, _Split] = {}
        self.stats: dict[str, int] = {}
        self.padding_fraction: float | None = None
        self._tokenizer_saved = False
        if tokenizer_dir is not None:  # now: vocab_size (linked to the model) and the special ids are its
            self.use_tokenizer(load_tokenizer(tokenizer_dir))

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
        if not train:  # every line had an empty side: say so, not "0 pairs cannot give n held-out pairs"
            raise ValueError(f"the train split is empty{self._where('train')}")
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
        if h.dataset is None and h.train_file is None:
            raise ValueError(
                "set dataset (synthetic, copy, reverse, sort) or train_file: predict_file alone only predicts"
            )
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
        assert self.tokenizer is not None and self.predict_text is not None
        h = self.hparams
        lines = self.predict_text
        ids = self.tokenizer.encode(lines, "src")
        long = sum(len(r) > h.max_length for r in ids)
        if long:
            rank_zero_warn(
                f"{h.predict_file}: truncated {long} of {len(ids)} lines to max_length={h.max_length} tokens"
            )
        self.stats["predict/truncated"] = long
        self.predict_set = PredictDataset([r[: h.max_length] for r in ids], lines)

    def __str__(self) -> str:
        # Lightning's __str__ builds every loader (training data, and predict windows without statistics);
        # jsonargparse formats the DataModule into a debug line for every link it skips
        return f"{type(self).__name__}(dataset={self.hparams.dataset!r})"

    def setup(self, stage: str | None = None) -> None:
        """``fit``/``validate``/``test``: read (or generate) the splits, learn a tokenizer on the train split unless
        one is given, encode the splits, save the tokenizer in the run folder; ``predict``: predict_file; None: both."""
        h = self.hparams
        if stage != "predict":
            if not self.datasets:
                self._load_text()
                if self.tokenizer is None:
                    train = self.text["train"]
                    self.tokenizer = BPETokenizer.train(
                        train.src_text, train.tgt_text, h.vocab_size, h.joint_vocab, h.min_frequency
                    )
                self._encode()
            self._save_tokenizer()
        if stage in (None, "predict") and h.predict_file is not None and self.predict_text is None:
            # read now, so a missing or empty file stops the run before any model work; encoded by the loader,
            # once the tokenizer is known (under ckpt_path Lightning restores it after setup)
            self.predict_text = read_sentences(h.predict_file)

    def _save_tokenizer(self) -> None:
        trainer = self.trainer
        if self._tokenizer_saved or trainer is None or self.tokenizer is None or not trainer.is_global_zero:
            return
        if trainer.fast_dev_run:  # a smoke run writes nothing, like Lightning's own loggers and checkpoints
            return
        # beside the "checkpoints" folder of the run
        path = self.tokenizer.save(run_dir(trainer) / "tokenizer")
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
            collate_fn=partial(collate_translation, pad_id=self.pad_id, bos_id=self.bos_id, eos_id=self.eos_id),
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
        h = self.hparams
        if h.predict_file is None:
            raise RuntimeError("set predict_file (one source sentence per line) to predict")
        if self.predict_text is None:
            raise RuntimeError("call setup('predict') before asking for the predict dataloader")
        if self.tokenizer is None:
            raise ValueError(
                "predict needs the trained model's tokenizer: give --ckpt_path with a checkpoint of the training "
                "run (it holds the tokenizer), or data.tokenizer_dir with the run's tokenizer folder "
                "(in Python: dm.use_tokenizer(model.tokenizer))"
            )
        if self.predict_set is None:
            self._encode_predict()
        assert self.predict_set is not None
        lengths = [len(r) + 1 for r in self.predict_set.src_ids]
        max_tokens = None if h.max_tokens is None else max(h.max_tokens, max(lengths, default=1))
        batches = BucketBatchSampler(lengths, None, h.batch_size, max_tokens, shuffle=False).all_batches()
        collate = partial(collate_predict, pad_id=self.pad_id, eos_id=self.eos_id)
        ds = BatchListDataset(self.predict_set, batches, collate)
        # under DDP each process decodes its share of the batches; TranslationWriter gathers them by line
        return DataLoader(ds, batch_size=None, sampler=eval_sampler(ds, predict=True))

    # ---------------------------------------------------------------------------- checkpoint

    def state_dict(self) -> dict[str, Any]:
        """The tokenizer as plain JSON types, stored in the checkpoint."""
        return {"tokenizer": self.tokenizer.to_dict()} if self.tokenizer is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Reuse the checkpoint's tokenizer (Lightning calls this under ``ckpt_path`` in every stage, after
        ``setup``): see :meth:`use_tokenizer`."""
        if "tokenizer" in state_dict:
            self.use_tokenizer(tokenizer_from_dict(state_dict["tokenizer"]))

    def use_tokenizer(self, tokenizer: TextTokenizer) -> None:
        """Encode the data with ``tokenizer`` (a trained model's: ``dm.use_tokenizer(model.tokenizer)``)
        instead of learning one. Before ``setup`` it replaces the training of a tokenizer; after it, the
        splits are encoded again (the prediction input when its loader is built), and the tokenizer saved
        to the run folder is replaced.

        Raises:
            ValueError: when the tokenizer's ``vocab_size`` differs from this DataModule's.
        """
        self.vocab_size = tokenizer.vocab_size if self.vocab_size is None else self.vocab_size  # vocab_size: null
        if tokenizer.vocab_size != self.vocab_size:
            raise ValueError(
                f"tokenizer vocab_size ({tokenizer.vocab_size}) differs from vocab_size ({self.vocab_size}); "
                f"set data.vocab_size to {tokenizer.vocab_size}"
            )
        if tokenizer == self.tokenizer:
            return
        self.tokenizer = tokenizer
        self.pad_id, self.bos_id, self.eos_id = tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id
        if self.text:
            self._encode()
        self.predict_set = None  # encoded with the new tokenizer by predict_dataloader
        if self._tokenizer_saved:  # setup() saved the tokenizer it had before: replace it
            self._tokenizer_saved = False
            self._save_tokenizer()
