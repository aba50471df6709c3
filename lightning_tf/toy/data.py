"""Generated (sequence, reversed sequence) pairs."""

from __future__ import annotations

import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

__all__ = ["ReverseDataModule", "ReverseDataset"]

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
N_SPECIAL = 3


class ReverseDataset(Dataset):
    """``n`` random token sequences; the target is the sequence reversed.

    Args:
        n: number of pairs.
        vocab_size: total vocabulary including the three specials (pad, bos, eos).
        min_length: shortest sequence.
        max_length: longest sequence.
        seed: generator seed; the same seed gives the same pairs.
    """

    def __init__(self, n: int, vocab_size: int, min_length: int, max_length: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.lengths = torch.randint(min_length, max_length + 1, (n,), generator=g)  # (n,)
        self.tokens = torch.randint(N_SPECIAL, vocab_size, (n, max_length), generator=g)  # (n, max_length)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        src = self.tokens[i, : self.lengths[i]]
        return src, src.flip(0)


def collate(pairs: list[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    """Pad a list of pairs to ``src (B, S)``, ``tgt_in (B, T)`` (bos + target) and ``tgt_out``
    (target + eos)."""
    B = len(pairs)
    S = max(len(s) for s, _ in pairs)
    src = torch.full((B, S), PAD_ID)
    tgt_in = torch.full((B, S + 1), PAD_ID)
    tgt_out = torch.full((B, S + 1), PAD_ID)
    for b, (s, t) in enumerate(pairs):
        src[b, : len(s)] = s
        tgt_in[b, 0] = BOS_ID
        tgt_in[b, 1 : len(t) + 1] = t
        tgt_out[b, : len(t)] = t
        tgt_out[b, len(t)] = EOS_ID
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}


class ReverseDataModule(LightningDataModule):
    """Train/val/test splits of generated reversal pairs, disjoint by seed.

    Args:
        vocab_size: total vocabulary including pad, bos and eos.
        min_length: shortest sequence.
        max_length: longest sequence.
        n_train: training pairs.
        n_val: validation pairs.
        n_test: test pairs.
        batch_size: pairs per batch.
        seed: base seed of the generated splits.
    """

    def __init__(
        self,
        vocab_size: int = 16,
        min_length: int = 4,
        max_length: int = 12,
        n_train: int = 20000,
        n_val: int = 512,
        n_test: int = 512,
        batch_size: int = 64,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if vocab_size <= N_SPECIAL:
            raise ValueError(f"vocab_size ({vocab_size}) must exceed the {N_SPECIAL} special tokens")
        if not 1 <= min_length <= max_length:
            raise ValueError(f"need 1 <= min_length ({min_length}) <= max_length ({max_length})")
        self.save_hyperparameters()
        self.vocab_size, self.pad_id, self.bos_id, self.eos_id = vocab_size, PAD_ID, BOS_ID, EOS_ID

    def setup(self, stage: str | None = None) -> None:
        h = self.hparams
        make = lambda n, k: ReverseDataset(n, h.vocab_size, h.min_length, h.max_length, h.seed * 3 + k)  # noqa: E731
        self.train_set, self.val_set, self.test_set = make(h.n_train, 0), make(h.n_val, 1), make(h.n_test, 2)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True, collate_fn=collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size, collate_fn=collate)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size, collate_fn=collate)

    def predict_dataloader(self) -> DataLoader:
        return self.test_dataloader()
