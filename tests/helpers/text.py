"""Test-only data for the text task: batches in the format of TranslationDataModule built from ids
(copy / reverse of random token strings) or from a handful of sentences with a real BPETokenizer, and a
small parallel corpus (twenty English-German pairs in Tatoeba's layout) with the writer of its files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader

from lightning_tf.text import TranslationDataModule
from lightning_tf.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, BPETokenizer

N_SPECIAL = 4


def pad_rows(rows: Sequence[Sequence[int]]) -> Tensor:
    """Right-pad id rows with PAD into ``(B, L)``."""
    out = torch.full((len(rows), max(len(r) for r in rows)), PAD_ID, dtype=torch.long)
    for b, r in enumerate(rows):
        out[b, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
    return out


def make_batch(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, Tensor]:
    """``src`` = tokens + EOS, ``tgt`` = BOS + tokens + EOS, both right-padded."""
    return {
        "src": pad_rows([[*s, EOS_ID] for s, _ in pairs]),
        "tgt": pad_rows([[BOS_ID, *t, EOS_ID] for _, t in pairs]),
    }


def algorithmic_pairs(
    task: str, n: int, vocab_size: int, min_len: int, max_len: int, seed: int
) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g).tolist()
    pairs = []
    for length in lengths:
        s = torch.randint(N_SPECIAL, vocab_size, (length,), generator=g).tolist()
        pairs.append((s, s if task == "copy" else s[::-1]))
    return pairs


class IdDataModule(LightningDataModule):
    """Copy or reverse of random id strings; ``index`` in predict batches.

    Args:
        task: ``copy`` or ``reverse``.
        vocab_size: ids (specials included).
        n_train: training pairs.
        n_val: validation (and test, predict) pairs.
        min_len: shortest string.
        max_len: longest string.
        batch_size: pairs per batch.
    """

    def __init__(
        self,
        task: str = "copy",
        vocab_size: int = 12,
        n_train: int = 256,
        n_val: int = 32,
        min_len: int = 2,
        max_len: int = 8,
        batch_size: int = 32,
    ) -> None:
        super().__init__()
        self.task, self.vocab_size, self.batch_size = task, vocab_size, batch_size
        self.train_pairs = algorithmic_pairs(task, n_train, vocab_size, min_len, max_len, 0)
        self.val_pairs = algorithmic_pairs(task, n_val, vocab_size, min_len, max_len, 1)

    def _loader(self, pairs: list, shuffle: bool = False) -> DataLoader:
        return DataLoader(pairs, batch_size=self.batch_size, shuffle=shuffle, collate_fn=make_batch)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_pairs, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_pairs)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.val_pairs)

    def predict_dataloader(self) -> DataLoader:
        def collate(items: list) -> dict[str, Tensor]:
            idx, pairs = zip(*items, strict=True)
            return {"src": make_batch(pairs)["src"], "index": torch.tensor(idx)}

        # reversed order, so writing in input order is a real reordering
        items = list(enumerate(self.val_pairs))[::-1]
        return DataLoader(items, batch_size=self.batch_size, collate_fn=collate)


WORDS = [
    "the",
    "a",
    "man",
    "woman",
    "dog",
    "cat",
    "sees",
    "buys",
    "eats",
    "red",
    "big",
    "small",
    "house",
    "car",
    "apple",
    "today",
]


def word_sentences(n: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(2, 6, (1,), generator=g))
        out.append(" ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (k,), generator=g)) + ".")
    return out


class TextCopyDataModule(LightningDataModule):
    """Sentences copied to themselves through a real BPETokenizer (trained in ``setup``).

    Args:
        vocab_size: tokenizer capacity.
        n_train: training sentences.
        n_val: validation/test sentences.
        batch_size: sentences per batch.
    """

    def __init__(self, vocab_size: int = 64, n_train: int = 256, n_val: int = 16, batch_size: int = 32) -> None:
        super().__init__()
        self.vocab_size, self.batch_size = vocab_size, batch_size
        self.train_text, self.val_text = word_sentences(n_train, 0), word_sentences(n_val, 1)
        self.tokenizer: BPETokenizer | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is None:
            self.tokenizer = BPETokenizer.train(self.train_text, self.train_text, self.vocab_size)

    def _collate(self, texts: list[str]) -> dict:
        assert self.tokenizer is not None
        ids = self.tokenizer.encode(texts, side="src")
        batch = make_batch(list(zip(ids, ids, strict=True)))
        return {**batch, "src_text": texts, "tgt_text": texts}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_text, batch_size=self.batch_size, shuffle=True, collate_fn=self._collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_text, batch_size=self.batch_size, collate_fn=self._collate)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()


# ------------------------------------------------------------------------------------ a parallel corpus

EN = [
    "Go.",
    "Hi.",
    "Run!",
    "I won.",
    "Wait!",
    "Hello!",
    "I agree.",
    "Stop it.",
    "Who am I?",
    "I'm fine.",
    "He came.",
    "We know.",
    "Call us.",
    "Come in.",
    "Be calm.",
    "I'll go.",
    "It's me.",
    "Why not?",
    "Cheers!",
    "I'm sad.",
]
DE = [
    "Geh.",
    "Hallo!",
    "Lauf!",
    "Ich hab gewonnen.",
    "Warte!",
    "Hallo!",
    "Ich bin einverstanden.",
    "Lass das!",
    "Wer bin ich?",
    "Mir geht's gut.",
    "Er kam.",
    "Wir wissen es.",
    "Ruf uns an!",
    "Komm herein!",
    "Sei ruhig!",
    "Ich werde gehen.",
    "Ich bin's.",
    "Warum nicht?",
    "Prost!",
    "Ich bin traurig.",
]


def write_tsv(path: Path, rows: list[str]) -> Path:
    """Write ``rows`` as lines of a UTF-8 file; returns ``path``."""
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def tatoeba_rows(n: int = 20) -> list[str]:
    """The first ``n`` pairs as Tatoeba export lines: ``english<TAB>german<TAB>attribution``."""
    return [
        f"{e}\t{d}\tCC-BY 2.0 (France) Attribution: tatoeba.org #{i} (x) & #{i + 1} (y)"
        for i, (e, d) in enumerate(zip(EN[:n], DE[:n], strict=True))
    ]


def small_dm(**kw: object) -> TranslationDataModule:
    """A TranslationDataModule sized for the twenty pairs (``kw`` overrides)."""
    args = dict(vocab_size=200, n_val=3, n_test=3, max_tokens=512, max_length=40)
    args.update(kw)
    return TranslationDataModule(**args)  # type: ignore[arg-type]


def split_text(dm: TranslationDataModule, split: str) -> tuple[list[str], list[str]]:
    """The source and target sentences of a set-up DataModule's ``split``: the raw text of val and test,
    the training split's ids decoded (it keeps no raw text)."""
    d = dm.datasets[split]
    if d.src_text is not None and d.tgt_text is not None:
        return list(d.src_text), list(d.tgt_text)
    assert dm.tokenizer is not None
    return (
        dm.tokenizer.decode([r.tolist() for r in d.src_ids], "src"),
        dm.tokenizer.decode([r.tolist() for r in d.tgt_ids], "tgt"),
    )
