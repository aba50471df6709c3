"""Parallel text for translation: the encoded datasets, their collate functions and the TranslationDataModule.

``prepare_data`` reads the files (:mod:`.io`), splits and deduplicates them, learns the BPE tokenizer
(:mod:`.tokenizer`) on the training split only and encodes every split into a prepared corpus
(:mod:`.corpus`): flat token arrays keyed by the inputs, built once and reused by every later run with the
same data and settings. ``setup`` memory-maps it on every rank, so DDP ranks and DataLoader workers share
its pages. Batches are built by length under a token budget (:mod:`.sampler`); the tokenizer is kept in
the checkpoint. Prediction reads only ``predict_file``: the tokenizer then comes from the checkpoint, a
tokenizer folder or :meth:`TranslationDataModule.use_tokenizer`, never from the training data.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only, rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from lightning_tf.training import ResumableDataLoader, ShardedDataLoader, eval_sampler, release_freed_memory, run_dir

from .corpus import SPLITS, CorpusSpec, Dedup, PreparedCorpus, default_cache_root, prepare_corpus
from .io import FileFormat, read_sentences
from .sampler import BatchListDataset, BucketBatchSampler
from .store import Lines, Ragged
from .synthetic import SyntheticName
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, TextTokenizer
from .tokenizer_kinds import load_tokenizer, tokenizer_from_dict

__all__ = [
    "Dedup",
    "PredictDataset",
    "TranslationDataModule",
    "TranslationDataset",
    "collate_predict",
    "collate_translation",
]


# ---------------------------------------------------------------------------------------------- datasets


class TranslationDataset(Dataset):
    """Encoded sentence pairs, memory-mapped: item ``i`` is ``(src_ids, tgt_ids, src_text, tgt_text)``, the
    ids (without specials) as read-only views of the prepared corpus and the raw sentences (the raw target
    is the BLEU reference) where the split keeps them (val and test), else None.

    Args:
        src_ids: source token rows.
        tgt_ids: target token rows.
        src_text: source sentences, or None.
        tgt_text: target sentences, or None.
    """

    def __init__(self, src_ids: Ragged, tgt_ids: Ragged, src_text: Lines | None, tgt_text: Lines | None) -> None:
        assert len(src_ids) == len(tgt_ids) and (src_text is None or len(src_text) == len(src_ids))
        self.src_ids, self.tgt_ids, self.src_text, self.tgt_text = src_ids, tgt_ids, src_text, tgt_text

    def __len__(self) -> int:
        return len(self.src_ids)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, str | None, str | None]:
        src_text = self.src_text[i] if self.src_text is not None else None
        tgt_text = self.tgt_text[i] if self.tgt_text is not None else None
        return self.src_ids[i], self.tgt_ids[i], src_text, tgt_text

    @property
    def src_lengths(self) -> np.ndarray:
        """Length of every source row in a batch: tokens + </s>."""
        return self.src_ids.lengths + 1

    @property
    def tgt_lengths(self) -> np.ndarray:
        """Length of every target row in a batch: <s> + tokens + </s>."""
        return self.tgt_ids.lengths + 2


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


def _pad(rows: list[Any], prefix: list[int], suffix: list[int], pad_id: int) -> Tensor:
    width = max(len(r) for r in rows) + len(prefix) + len(suffix)
    out = np.full((len(rows), width), pad_id, dtype=np.int64)  # (B, L)
    p = len(prefix)
    for b, r in enumerate(rows):
        out[b, :p] = prefix
        out[b, p : p + len(r)] = r
        out[b, p + len(r) : p + len(r) + len(suffix)] = suffix
    return torch.from_numpy(out)


def collate_translation(
    items: list[tuple[Any, Any, str | None, str | None]],
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> dict[str, Any]:
    """``src (B, S)`` = tokens + </s> and ``tgt (B, T)`` = <s> + tokens + </s>, right-padded with <pad>;
    ``src_text`` and ``tgt_text``, the raw sentences, where the items carry them (val and test)."""
    src, tgt, src_text, tgt_text = zip(*items, strict=True)
    batch = {
        "src": _pad(list(src), [], [eos_id], pad_id),  # (B, S)
        "tgt": _pad(list(tgt), [bos_id], [eos_id], pad_id),  # (B, T)
    }
    if src_text[0] is not None:
        batch["src_text"], batch["tgt_text"] = list(src_text), list(tgt_text)
    return batch


def collate_predict(
    items: list[tuple[list[int], str, int]], pad_id: int = PAD_ID, eos_id: int = EOS_ID
) -> dict[str, Any]:
    """``src (B, S)`` = tokens + </s>, ``src_text`` and ``index (B,)``, the input line numbers."""
    src, src_text, index = zip(*items, strict=True)
    return {
        "src": _pad(list(src), [], [eos_id], pad_id),
        "src_text": list(src_text),
        "index": torch.tensor(index),
    }  # (B, S)


# ---------------------------------------------------------------------------------------------- the DataModule


class TranslationDataModule(LightningDataModule):
    """Parallel text for translation: a built-in generated corpus, a TSV file or aligned files per split.

    Batches are dicts: ``src (B, S)`` = tokens + </s>; ``tgt (B, T)`` = <s> + tokens + </s> (the model reads
    ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]``), both right-padded with ``pad_id``; validation and test
    batches also hold ``src_text`` and ``tgt_text``, the raw sentences (the BLEU references). Prediction
    batches hold ``src``, ``src_text`` and ``index (B,)``, the 0-based line of ``predict_file``.

    ``prepare_data`` (one process per machine) reads, splits and deduplicates the data, learns the BPE
    tokenizer on the training split and encodes every split into a prepared corpus under ``cache_dir``,
    keyed by the inputs (the files' size and checksum) and every setting the result depends
    on; a later run with the same data and settings reuses it, a changed file or setting builds a new one,
    and a damaged one is built again. ``setup`` memory-maps it (building it first when ``prepare_data`` did
    not run, as in plain Python use). The tokenizer is saved to the run directory (``<run>/tokenizer``) and
    kept in the checkpoint (``state_dict``): under ``ckpt_path`` Lightning restores it
    (:meth:`load_state_dict`) and a different one gets its own encoding of the splits, so a resumed run
    encodes as the model was trained. A trained model's tokenizer is given with ``tokenizer_dir`` or
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
        vocab_size: BPE vocabulary capacity per side, specials included; every id is below it (null: the
            capacity of the ``tokenizer_dir`` tokenizer).
        joint_vocab: one vocabulary for both languages (allows tied embeddings) or one per side.
        min_frequency: least count of a pair of symbols for a BPE merge.
        tokenizer_dir: a tokenizer to use instead of training one, read when the DataModule is built: a
            training run's ``tokenizer`` folder, or a Marian / OPUS-MT model's folder or hub name (its
            SentencePiece tokenizer; with ``vocab_size: null``).
        batch_size: most pairs per batch (None: only ``max_tokens``).
        max_tokens: most ``pairs * longest side`` tokens per batch (None: only ``batch_size``).
        pool_batches: batches per length-sorted pool when shuffling.
        num_workers: DataLoader worker processes (they map the prepared corpus, so they add little memory;
            0 is usually fastest for small models).
        seed: seed of generation, splitting, capping and batch shuffling.
        cache_dir: where prepared corpora live (a folder per corpus under ``<cache_dir>/text``); None:
            ``$LIGHTNING_TF_CACHE``, else ``$XDG_CACHE_HOME/lightning-tf``, else ``~/.cache/lightning-tf``.
            The run prints the folder it built or reused.
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
        cache_dir: str | None = None,
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
        if vocab_size is not None and vocab_size < 2 * len(SPECIAL_TOKENS):  # the specials, and the BPE alphabet
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
        self.corpus: PreparedCorpus | None = None  # the memory-mapped splits, opened by setup
        self.datasets: dict[str, TranslationDataset] = {}
        self.predict_text: list[str] | None = None  # the lines of predict_file, read by setup
        self.predict_set: PredictDataset | None = None  # ... encoded by predict_dataloader
        self.stats: dict[str, int] = {}
        self.padding_fraction: float | None = None
        self._given: TextTokenizer | None = None  # a tokenizer to encode with instead of learning one
        self._tokenizer_saved = False
        if tokenizer_dir is not None:  # now: vocab_size (linked to the model) and the special ids are its
            self.use_tokenizer(load_tokenizer(tokenizer_dir))

    # ---------------------------------------------------------------------------- the prepared corpus

    def _trains(self) -> bool:
        return self.hparams.dataset is not None or self.hparams.train_file is not None

    def corpus_spec(self, tokenizer: TextTokenizer | None = None) -> CorpusSpec:
        """What the prepared corpus depends on: the data arguments and ``tokenizer``, a given tokenizer to
        encode with (None: one is learnt on the training split)."""
        h = self.hparams
        return CorpusSpec(
            dataset=h.dataset,
            train_file=h.train_file,
            val_file=h.val_file,
            test_file=h.test_file,
            file_format=h.file_format,
            columns=tuple(self.columns),
            header=h.header,
            src_lang=h.src_lang,
            tgt_lang=h.tgt_lang,
            n_train=h.n_train,
            n_val=h.n_val,
            n_test=h.n_test,
            min_words=h.min_words,
            max_words=h.max_words,
            seed=h.seed,
            dedup=h.dedup,
            max_length=h.max_length,
            vocab_size=self.vocab_size,
            joint_vocab=h.joint_vocab,
            min_frequency=h.min_frequency,
            tokenizer=None if tokenizer is None else tokenizer.to_dict(),
        )

    def _given_tokenizer(self) -> TextTokenizer | None:
        if self._given is None and self.hparams.tokenizer_dir is not None:
            return load_tokenizer(self.hparams.tokenizer_dir)
        return self._given

    def prepare_data(self) -> None:
        """Build the prepared corpus unless a complete one exists (Lightning runs this on one process per
        machine before ``setup``; it assigns no state). Prediction prepares nothing: it reads only
        ``predict_file``."""
        if self.trainer is not None and self.trainer.state.fn == "predict":
            return
        if self._trains():
            prepare_corpus(self.corpus_spec(self._given_tokenizer()), self._cache_root(), rank_zero_only.rank == 0)

    def _cache_root(self) -> str:
        return self.hparams.cache_dir if self.hparams.cache_dir is not None else str(default_cache_root())

    def _open_corpus(self) -> None:
        if not self._trains():
            raise ValueError(
                "set dataset (synthetic, copy, reverse, sort) or train_file: predict_file alone only predicts"
            )
        path = prepare_corpus(self.corpus_spec(self._given), self._cache_root(), progress=rank_zero_only.rank == 0)
        corpus = PreparedCorpus(path)
        self.corpus, self.stats = corpus, dict(corpus.stats)
        if self.tokenizer is None:
            self.tokenizer = corpus.tokenizer
        self.datasets = {
            s: TranslationDataset(
                corpus.ids(s, "src"), corpus.ids(s, "tgt"), corpus.text(s, "src"), corpus.text(s, "tgt")
            )
            for s in SPLITS
        }
        release_freed_memory()  # what loading the tokenizer and checking the files left in the heap
        rank_zero_info(corpus.summary)

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
        """``fit``, ``validate`` and ``test`` open the prepared corpus (building it when ``prepare_data`` has
        not) and save the tokenizer to the run folder. ``predict`` reads ``predict_file`` only. ``None`` does
        both."""
        h = self.hparams
        if self.tokenizer is None and h.tokenizer_dir is not None:
            self.use_tokenizer(load_tokenizer(h.tokenizer_dir))
        if stage != "predict":
            if not self.datasets:
                self._open_corpus()
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
        # the training loader keeps its position in checkpoints, for exact mid-epoch resume; both shard
        # themselves under DDP (Lightning adds no sampler)
        assert self.tokenizer is not None
        collate = partial(
            collate_translation,
            pad_id=self.tokenizer.pad_id,
            bos_id=self.tokenizer.bos_id,
            eos_id=self.tokenizer.eos_id,
        )
        return (ResumableDataLoader if shuffle else ShardedDataLoader)(
            self.datasets[split],
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        loader = self._loader("train", shuffle=True)
        sampler = loader.batch_sampler
        assert isinstance(sampler, BucketBatchSampler)
        self.padding_fraction = sampler.padding_fraction()
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
        tok = self.tokenizer
        ds = BatchListDataset(self.predict_set, batches, partial(collate_predict, pad_id=tok.pad_id, eos_id=tok.eos_id))
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
        splits are opened in the prepared corpus of that tokenizer (built once), the prediction input is
        encoded with it when its loader is built, and the tokenizer saved to the run folder is replaced.

        Raises:
            ValueError: when the tokenizer's ``vocab_size`` differs from this DataModule's.
        """
        if self.vocab_size is None:  # vocab_size: null, the tokenizer's
            self.vocab_size = tokenizer.vocab_size
        if tokenizer.vocab_size != self.vocab_size:
            raise ValueError(
                f"tokenizer vocab_size ({tokenizer.vocab_size}) differs from vocab_size ({self.vocab_size}); "
                f"set data.vocab_size to {tokenizer.vocab_size}"
            )
        if tokenizer == self.tokenizer:
            return
        self.tokenizer = self._given = tokenizer
        self.pad_id, self.bos_id, self.eos_id = tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id
        if self.datasets:
            self.datasets = {}
            self._open_corpus()
        self.predict_set = None  # encoded with the new tokenizer by predict_dataloader
        if self._tokenizer_saved:  # setup() saved the tokenizer it had before: replace it
            self._tokenizer_saved = False
            self._save_tokenizer()
