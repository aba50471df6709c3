"""Training loaders that resume inside an epoch, with or without loader workers, for every task.

One mechanism, as Composer's deterministic resume and torchdata's ``StatefulDataLoader``: an epoch's
batches are a function of the seed and the epoch alone, and the loader's state is how many of them
training has taken. A checkpoint taken after batch ``k`` of epoch ``e`` stores ``(e, k)``; the resumed
run rebuilds epoch ``e``'s batch list and goes on with batch ``k + 1``.

* :class:`EpochBatchSampler` is the base: per-epoch batches (a subclass says how they are built),
  sharded over the ranks, a ``state_dict`` / ``load_state_dict`` of the position, and ``set_epoch``
  (Lightning calls it on ``loader.sampler`` before every epoch). Text's length-bucketed
  :class:`~lightning_tf.text.sampler.BucketBatchSampler` and :class:`ShuffledBatchSampler` (fixed-size
  batches of a seeded permutation: vision and K-line) are the two kinds.
* :class:`ResumableDataLoader` counts the batches it has *returned*: with workers the sampler runs
  ahead of training (prefetching), and what was fetched but not trained must be fetched again.
* :class:`SeededBatches` makes per-sample randomness (augmentation) a function of the batch too:
  every batch is fetched under torch's generator seeded by ``(seed, epoch, batch number)``, so the
  worker that fetches it, how far that worker's own stream has run, and whether the run was resumed
  change nothing. The global streams of the main process are left as they were.
* :class:`ShardedDataLoader` is a loader whose batch sampler shards itself across ranks: Lightning
  leaves it alone under DDP (no ``use_distributed_sampler: false`` needed).

Batch-level randomness drawn in the main process (Mixup / CutMix draw from NumPy's global stream in
``on_after_batch_transfer``, dropout from torch's) is restored exactly by
:class:`~lightning_tf.training.callbacks.RNGState`. A :class:`ResumableDataLoader` draws exactly one number from
torch's global stream per epoch, with or without workers, persistent or not (a plain DataLoader
without workers draws its workers' base seed there each epoch, one with persistent workers only
once), so the training stream does not depend on ``num_workers``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, DistributedSampler

__all__ = [
    "Batch",
    "EpochBatchSampler",
    "IgnoreStopSignals",
    "ResumableDataLoader",
    "SeededBatches",
    "ShardedDataLoader",
    "ShuffledBatchSampler",
    "batch_seed",
]


def batch_seed(seed: int, epoch: int, number: int) -> int:
    """The seed of batch ``number`` of ``epoch`` (numbered over every rank's batches): independent
    streams for every batch, from NumPy's ``SeedSequence``."""
    return int(np.random.SeedSequence([seed, epoch, number]).generate_state(1, np.uint64)[0])


class Batch(list):
    """The item indices of one batch, named by its epoch and its number in the epoch's batch list of
    every rank (``k * num_replicas + rank`` for this rank's ``k``-th batch). A list, so datasets and
    collate functions take it as they take any; pickled with its names into a loader worker."""

    def __init__(self, indices: Sequence[int], epoch: int, number: int) -> None:
        super().__init__(indices)
        self.epoch, self.number = epoch, number


class _EpochSampler(DistributedSampler):
    """What ``loader.sampler`` is for a loader over an :class:`EpochBatchSampler`: Lightning calls its
    ``set_epoch`` before every epoch, and, being a ``DistributedSampler``, it tells Lightning that the
    loader shards itself (Lightning would otherwise put its own sampler in under DDP). Iterating it
    gives this rank's indices of the epoch in batch order."""

    def __init__(self, parent: EpochBatchSampler) -> None:  # DistributedSampler's __init__ needs a dataset
        self.parent = parent
        self.num_replicas, self.rank, self.seed = parent.num_replicas, parent.rank, parent.seed
        self.shuffle, self.drop_last = True, False

    @property
    def epoch(self) -> int:  # type: ignore[override]
        return self.parent.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        pass  # DistributedSampler.set_epoch's assignment: the parent keeps the epoch

    def set_epoch(self, epoch: int) -> None:
        self.parent.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        batches = self.parent._rank_batches(self.parent.epoch)
        return (int(i) for k in range(len(batches)) for i in batches[k].tolist())

    def __len__(self) -> int:
        batches = self.parent._rank_batches(self.parent.epoch)
        return sum(len(batches[k]) for k in range(len(batches)))


class EpochBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches that depend only on the seed and the epoch, sharded over the ranks, resumable inside an
    epoch. Subclasses build one epoch's batches for this rank (:meth:`_build`); this class caches
    them, yields them as :class:`Batch` lists, and saves and restores the position.

    Args:
        seed: base seed of the order; the epoch is added.
        num_replicas: number of ranks (None: from ``torch.distributed`` when initialised, else 1).
        rank: this rank (None: from ``torch.distributed`` when initialised, else 0).
    """

    def __init__(self, seed: int = 0, num_replicas: int | None = None, rank: int | None = None) -> None:
        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank ({rank}) must be in [0, num_replicas ({num_replicas}))")
        self.seed, self.num_replicas, self.rank = seed, num_replicas, rank
        self.epoch = 0
        self._cache: tuple[int, Sequence[Any]] | None = None
        self.sampler = _EpochSampler(self)
        self._resume: tuple[int, int] | None = None  # (epoch, batches to skip) from load_state_dict
        self.start = 0  # batches skipped by the current iteration (a resumed epoch)
        self.yielded = 0  # batches yielded by the current iteration, skipped ones included

    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this (through ``loader.sampler``) before every training epoch."""
        self.epoch = epoch

    def _build(self, epoch: int) -> Sequence[Any]:
        """This rank's batches of ``epoch``: a sequence of index arrays (NumPy or torch)."""
        raise NotImplementedError

    def _rank_batches(self, epoch: int) -> Sequence[Any]:
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._build(epoch))
        return self._cache[1]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._rank_batches(self.epoch)
        self.start = 0
        if self._resume is not None:
            epoch, done = self._resume
            self._resume = None
            if epoch == self.epoch:  # a checkpoint from inside this epoch: go on after its last batch
                self.start = min(done, len(batches))
        self.yielded = self.start
        R, r = self.num_replicas, self.rank
        for k in range(self.start, len(batches)):
            self.yielded += 1
            yield Batch(batches[k].tolist(), self.epoch, k * R + r)

    def __len__(self) -> int:
        return len(self._rank_batches(self.epoch))

    def state_dict(self) -> dict[str, int]:
        """Where the epoch stands: its number and the batches yielded so far (a DataLoader with workers
        fetches ahead of training; :class:`ResumableDataLoader` counts what it returned instead)."""
        return {"epoch": self.epoch, "batches_done": self.yielded, "num_replicas": self.num_replicas}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume mid-epoch: the next iteration over ``state["epoch"]`` skips its first ``batches_done``
        batches (the batch list depends only on the seed and the epoch, so it is the same list). An
        iteration over another epoch (the checkpoint closed its epoch) starts at the first batch."""
        if state["num_replicas"] != self.num_replicas:
            rank_zero_warn(
                f"the checkpoint's sampler state was saved with {state['num_replicas']} ranks, this run has "
                f"{self.num_replicas}: the resumed epoch's batches differ from the interrupted one's"
            )
        self.set_epoch(int(state["epoch"]))
        self._resume = (int(state["epoch"]), int(state["batches_done"]))


class _Slices(Sequence):
    """``order`` cut into consecutive batches of ``size`` (the last one shorter unless ``drop_last``)."""

    def __init__(self, order: Tensor, size: int, drop_last: bool) -> None:
        self.order, self.size = order, size
        self.n = len(order) // size if drop_last else -(-len(order) // size)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int) -> Tensor:  # type: ignore[override]
        if not 0 <= k < self.n:
            raise IndexError(k)
        return self.order[k * self.size : (k + 1) * self.size]


class ShuffledBatchSampler(EpochBatchSampler):
    """Batches of ``batch_size`` items of a permutation drawn from ``seed`` and the epoch (or in order),
    sharded over the ranks as ``DistributedSampler`` shards: the permutation is padded with its first
    items to a multiple of the ranks and rank ``r`` takes items ``r, r + R, ...``, so with batch ``b``
    on each of ``R`` ranks the ranks' ``k``-th batches together are the ``k``-th batch of ``R * b`` of
    one process. Every rank takes the same number of batches.

    The order is ``torch.randperm`` under a generator seeded from ``SeedSequence([seed, epoch])``.

    Args:
        size: number of items.
        batch_size: items per batch (per rank).
        shuffle: a new permutation each epoch, or the items in order.
        drop_last: leave out a last batch smaller than ``batch_size``.
        seed: base seed of the order.
        num_replicas: number of ranks (None: from ``torch.distributed``).
        rank: this rank (None: from ``torch.distributed``).
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size ({batch_size}) must be >= 1")
        super().__init__(seed, num_replicas, rank)
        self.size, self.batch_size, self.shuffle, self.drop_last = size, batch_size, shuffle, drop_last

    def order(self, epoch: int) -> Tensor:
        """Every item of ``epoch`` in the order the ranks deal them out (before padding)."""
        if not self.shuffle:
            return torch.arange(self.size)
        generator = torch.Generator()
        generator.manual_seed(int(np.random.SeedSequence([self.seed, epoch]).generate_state(1)[0]))
        return torch.randperm(self.size, generator=generator)

    def _build(self, epoch: int) -> _Slices:
        order, R = self.order(epoch), self.num_replicas
        if R > 1 and len(order) % R:
            pad = R - len(order) % R
            order = torch.cat([order, order.repeat(-(-pad // len(order)))[:pad]])  # as DistributedSampler
        return _Slices(order[self.rank :: R], self.batch_size, self.drop_last)


class SeededBatches(Dataset):
    """``dataset`` with every :class:`Batch` fetched under torch's generator seeded by
    :func:`batch_seed` ``(seed, batch.epoch, batch.number)``: the random draws of the dataset's
    transforms (crops, flips, RandAugment, random erasing) then depend on the batch alone, not on the
    worker that fetches it nor on what that worker fetched before. The caller's torch state is put back
    afterwards (``torch.random.fork_rng``), so fetching in the main process (``num_workers=0``) draws
    nothing from the training stream. An index that is not a :class:`Batch` is fetched as is.

    Args:
        dataset: a map-style dataset (with or without ``__getitems__``).
        seed: base seed of the batches' generators.
    """

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def _fetch(self, indices: Sequence[int]) -> list[Any]:
        fetch = getattr(self.dataset, "__getitems__", None)
        return fetch(list(indices)) if fetch else [self.dataset[i] for i in indices]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        if not isinstance(indices, Batch):
            return self._fetch(indices)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(batch_seed(self.seed, indices.epoch, indices.number))
            return self._fetch(indices)

    def __getitem__(self, i: int) -> Any:
        return self.dataset[i]


class IgnoreStopSignals:
    """A ``worker_init_fn``: SIGTERM and SIGUSR1 are ignored in the loader worker (a scheduler signals
    every process of a job; the main process decides when the run stops, and a worker killed
    mid-fetch would take the run with it); then the given ``worker_init_fn``. Workers still end with
    their loader, or when the main process is gone.

    Args:
        then: a ``worker_init_fn`` to call after.
    """

    def __init__(self, then: Callable[[int], None] | None = None) -> None:
        self.then = then

    def __call__(self, worker_id: int) -> None:
        for name in ("SIGTERM", "SIGUSR1"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_IGN)
        if self.then is not None:
            self.then(worker_id)


class ShardedDataLoader(DataLoader):
    """A DataLoader over an :class:`EpochBatchSampler`, which shards itself: ``loader.sampler`` is the
    batch sampler's ``DistributedSampler``-typed view, so Lightning neither adds its own sampler under
    DDP nor needs ``use_distributed_sampler: false``. Its workers ignore the stop signals
    (:class:`IgnoreStopSignals`).

    Args:
        dataset: the items.
        batch_sampler: the batches.
        kwargs: DataLoader's other arguments (``collate_fn``, ``num_workers``, ...).
    """

    def __init__(self, dataset: Dataset, batch_sampler: EpochBatchSampler, **kwargs: Any) -> None:
        given = kwargs.get("worker_init_fn")
        if kwargs.get("num_workers", 0) > 0 and not isinstance(given, IgnoreStopSignals):
            kwargs["worker_init_fn"] = IgnoreStopSignals(given)
        super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)
        object.__setattr__(self, "sampler", batch_sampler.sampler)  # DataLoader refuses it after __init__


class ResumableDataLoader(ShardedDataLoader):
    """A :class:`ShardedDataLoader` whose position Lightning saves in checkpoints (Lightning calls
    ``state_dict`` / ``load_state_dict`` on training loaders that have them), so a run resumed from a
    mid-epoch checkpoint trains on the rest of that epoch's batches, in order.

    The position is the number of batches this loader has returned: workers and prefetching read the
    sampler ahead of training, while Lightning fetches a sized loader's batches one at a time. The
    iteration starts reading the sampler at the first batch asked for, so a position loaded after
    ``iter(loader)`` still applies (:class:`~lightning_tf.training.callbacks.RNGState` loads it again when
    Lightning built the loader before restoring the loop, as ``trainer.estimated_stepping_batches`` in
    ``configure_optimizers`` makes it). The workers' base seed comes from the loader's own generator,
    itself seeded by one number drawn from torch's global stream per epoch (see the module docstring).

    Args:
        dataset: the items.
        batch_sampler: the batches.
        kwargs: DataLoader's other arguments.
    """

    def __init__(self, dataset: Dataset, batch_sampler: EpochBatchSampler, **kwargs: Any) -> None:
        kwargs["generator"] = kwargs.get("generator") or torch.Generator()
        super().__init__(dataset, batch_sampler, **kwargs)
        self._returned = 0

    def __iter__(self) -> Iterator[Any]:
        # the one draw a DataLoader without workers makes per epoch, made whatever the workers
        self.generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        self._returned = 0
        return self._counted()

    def _counted(self) -> Iterator[Any]:
        # DataLoader's own iterator (and the workers' first fetches) starts with the first batch asked
        # for: Lightning may create the training iterator before it restores a checkpoint's position
        for batch in super().__iter__():
            self._returned += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        sampler = self.batch_sampler
        assert isinstance(sampler, EpochBatchSampler)
        return sampler.state_dict() | {"batches_done": sampler.start + self._returned}

    def load_state_dict(self, state: dict[str, int]) -> None:
        sampler = self.batch_sampler
        assert isinstance(sampler, EpochBatchSampler)
        sampler.load_state_dict(state)
