"""Length-bucketed batches for parallel text and their padding; they resume mid-epoch through
:class:`lightning_tf.training.loaders.ResumableDataLoader`.

Batches are bucketed by length as in fairseq (Ott et al., 2019): each epoch shuffles the pairs, sorts
them by length inside pools of ``pool_batches`` batches, cuts the pools into batches under a token
budget and shuffles the batch order, so padding stays low while the order still changes every epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from lightning_tf.training import EpochBatchSampler, ResumableDataLoader, release_freed_memory

__all__ = ["BatchListDataset", "BucketBatchSampler", "ResumableDataLoader", "padding_fraction"]


def _int_array(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    if isinstance(lengths, np.ndarray) and np.issubdtype(lengths.dtype, np.integer):
        return lengths
    return np.asarray(lengths, dtype=np.int64)


class BatchListDataset(Dataset):
    """A fixed list of batches, item ``i`` being batch ``i`` collated, for a loader with ``batch_size=None``
    (prediction keeps the file order recoverable through ``index``, and Lightning re-wraps a prediction
    loader's sampler, so the batches cannot come from a batch sampler there).

    Args:
        dataset: the items.
        batches: indices into ``dataset``, one list per batch.
        collate: turns a list of items into a batch.
    """

    def __init__(self, dataset: Dataset, batches: list[list[int]], collate: Callable[[list[Any]], Any]) -> None:
        self.dataset, self.batches, self.collate = dataset, batches, collate

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Any:
        return self.collate([self.dataset[j] for j in self.batches[i]])


def padding_fraction(batches: Sequence[Sequence[int]], *lengths: Sequence[int] | np.ndarray) -> float:
    """Share of pad positions in the padded tensors of ``batches``, over every length list (e.g. src and tgt)."""
    sizes = np.fromiter((len(b) for b in batches), np.int64, len(batches))
    keep = sizes > 0
    if not keep.any():
        return 0.0
    flat = np.concatenate([np.asarray(b, dtype=np.int64) for b, k in zip(batches, keep, strict=True) if k])
    starts = np.concatenate([[0], np.cumsum(sizes[keep])[:-1]])
    real = padded = 0
    for lens in lengths:
        per_item = np.asarray(lens, dtype=np.int64)[flat]
        real += int(per_item.sum())
        padded += int((np.maximum.reduceat(per_item, starts) * sizes[keep]).sum())
    return 1.0 - real / padded if padded else 0.0


class BucketBatchSampler(EpochBatchSampler):
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
        super().__init__(seed, num_replicas, rank)
        # memory-mapped length arrays stay memory-mapped (shared by ranks and workers); lists become int64
        self.src_lengths = _int_array(src_lengths)
        self.tgt_lengths = None if tgt_lengths is None else _int_array(tgt_lengths)
        self.cost = self.src_lengths if self.tgt_lengths is None else np.maximum(self.src_lengths, self.tgt_lengths)
        if max_tokens is not None and len(self.cost) and self.cost.max() > max_tokens:
            raise ValueError(
                f"max_tokens ({max_tokens}) is smaller than the longest item ({self.cost.max()} tokens with specials)"
            )
        self.batch_size, self.max_tokens, self.shuffle = batch_size, max_tokens, shuffle
        self.pool_batches = pool_batches

    def _sort(self, idx: np.ndarray) -> np.ndarray:
        tgt = self.tgt_lengths[idx] if self.tgt_lengths is not None else self.src_lengths[idx]
        return idx[np.lexsort((tgt, self.src_lengths[idx], self.cost[idx]))]  # by cost, then source, then target

    def _cut(self, order: np.ndarray) -> list[np.ndarray]:
        """Cut ``order`` greedily into batches: an item joins the open batch unless that batch already holds
        ``batch_size`` items or would then exceed ``max_tokens`` padded tokens. Vectorised per batch: the
        padded size ``k * running max(cost)`` only grows with ``k``, so each batch ends at the first ``k``
        that breaks the budget."""
        n = len(order)
        if n == 0:
            return []
        order = order.astype(np.int32 if n < 2**31 else np.int64, copy=False)
        if self.max_tokens is None:
            assert self.batch_size is not None
            return np.split(order, np.arange(self.batch_size, n, self.batch_size))
        cost = self.cost[order].astype(np.int64)
        cap = n if self.batch_size is None else self.batch_size
        ends: list[int] = []
        i = 0
        while i < n:
            window = min(n - i, cap, max(1, self.max_tokens // max(1, int(cost[i]))))
            padded = np.arange(1, window + 1) * np.maximum.accumulate(cost[i : i + window])
            over = padded > self.max_tokens
            k = int(over.argmax()) if over.any() else window
            i += max(k, 1)  # a first item alone always fits: max_tokens covers the longest item
            ends.append(i)
        return np.split(order, ends[:-1])

    def _epoch_batches(self, epoch: int) -> list[np.ndarray]:
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

    def all_batches(self, epoch: int | None = None) -> list[list[int]]:
        """The batches of every rank for ``epoch`` (default: the current one), before sharding."""
        return [b.tolist() for b in self._epoch_batches(self.epoch if epoch is None else epoch)]

    def padding_fraction(self) -> float:
        """:func:`padding_fraction` of this epoch's batches of every rank, over both length lists."""
        lengths = [self.src_lengths] if self.tgt_lengths is None else [self.src_lengths, self.tgt_lengths]
        fraction = padding_fraction(self._epoch_batches(self.epoch), *lengths)
        release_freed_memory()
        return fraction

    def _even_out(self, batches: list[np.ndarray]) -> list[np.ndarray]:
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

    def _build(self, epoch: int) -> list[np.ndarray]:
        batches = self._epoch_batches(epoch)[self.rank :: self.num_replicas]
        release_freed_memory()  # the epoch's sort of the whole corpus leaves its buffers in the heap
        return batches
