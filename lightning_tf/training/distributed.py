"""Evaluation and prediction under data parallelism (DDP, FSDP): every item exactly once, in input order.

Lightning shards an evaluation loader with ``DistributedSampler``, which pads the dataset with
repeated items until it divides by the number of processes: with 101 test windows on 2 processes
window 0 is scored twice, and every torchmetrics metric synced over the processes counts it twice.
:class:`UnpaddedDistributedSampler` gives process ``r`` the items ``r, r + R, r + 2R, ...`` instead:
disjoint, covering, and never repeated (the counts may differ by one item). A loader that already has
a ``DistributedSampler`` is left alone by Lightning, so a DataModule that passes
:func:`eval_sampler` to its evaluation and prediction loaders is scored exactly once under any
strategy, and unchanged in a single process (:func:`eval_sampler` is then None).

Prediction collects per-process outputs and writes them once, on global rank 0, in input order:
:func:`gather_objects` brings every process's list to every process, :func:`interleave` puts the
parts of a strided sampler back in dataset order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Sized
from typing import Any, TypeVar

import torch.distributed as dist
from torch.utils.data import DistributedSampler

__all__ = [
    "UnpaddedDistributedSampler",
    "eval_sampler",
    "gather_objects",
    "gather_predictions",
    "interleave",
    "predict_size",
    "world_size",
]

T = TypeVar("T")


def world_size() -> int:
    """Processes of the default process group; 1 when ``torch.distributed`` is not initialised."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class UnpaddedDistributedSampler(DistributedSampler):
    """Process ``rank`` takes the items ``rank, rank + R, ...`` of ``dataset``, in order, without padding.

    For evaluation and prediction only: a process that takes one batch fewer than another is harmless
    there (metrics are synced once per epoch), but would desynchronise the gradient all-reduce of
    training. Every process must take at least one item: the first evaluation forward pass under DDP
    synchronises the module buffers, and Lightning skips the epoch hooks (where predictions are
    gathered) of a process without a batch. So fewer evaluation items than processes raise ValueError;
    in prediction (``predict=True``) a process left without an item takes item ``rank % n`` once more,
    which :func:`interleave` given ``n`` (or a merge by item index) drops again.

    Args:
        dataset: a sized dataset.
        num_replicas: processes R (None: the default process group's size).
        rank: this process (None: from the default process group).
        predict: fill an empty share with a repeated item instead of raising.
    """

    def __init__(
        self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None, predict: bool = False
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, drop_last=False)  # type: ignore[arg-type]
        n = len(dataset)
        if not predict and 0 < n < self.num_replicas:
            raise ValueError(
                f"{n} evaluation items cannot be shared by {self.num_replicas} processes without repeating "
                f"one (which would count it twice); evaluate on fewer devices or with more data"
            )
        self.total_size = n
        self.indices = list(range(self.rank, n, self.num_replicas)) or ([self.rank % n] if n else [])
        self.num_samples = len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)


def eval_sampler(dataset: Sized, predict: bool = False) -> UnpaddedDistributedSampler | None:
    """An :class:`UnpaddedDistributedSampler` when more than one process is running, else None (a plain
    in-order loader)."""
    if world_size() < 2:
        return None
    return UnpaddedDistributedSampler(dataset, predict=predict)


def gather_objects(obj: T) -> list[T]:
    """Every process's ``obj`` (any picklable object), in rank order, on every process; ``[obj]`` in a
    single process. A collective: every process must call it."""
    n = world_size()
    if n < 2:
        return [obj]
    parts: list[Any] = [None] * n
    dist.all_gather_object(parts, obj)
    return parts


def gather_predictions(predictions: Sequence[Any], to_cpu: bool = False) -> list[list[Any]]:
    """What ``predict`` returned on every process, in rank order: each process's batches (one list,
    several predict loaders flattened in order); ``to_cpu`` moves a batch dict's tensors to the CPU
    first. A collective: every process must call it."""
    batches = list(predictions)
    if batches and isinstance(batches[0], list):  # several predict loaders: one list per loader
        batches = [b for loader in batches for b in loader]
    if to_cpu:
        batches = [{k: v.detach().cpu() for k, v in b.items()} for b in batches]
    return gather_objects(batches)


def interleave(parts: Sequence[Sequence[T]], n: int | None = None) -> list[T]:
    """Undo a strided sharding: ``parts[r][k]`` is item ``r + k * R`` of the whole (``R = len(parts)``),
    as :class:`UnpaddedDistributedSampler` and Lightning's prediction sampler deal them out. Given the
    number of items ``n``, the repeat that fills an empty share (``predict=True``) is dropped."""
    R = len(parts)
    if n is not None and n < R:
        parts = [part if r < n else part[:0] for r, part in enumerate(parts)]
    n = sum(len(p) for p in parts) if n is None else n
    out: list[Any] = [None] * n
    for r, part in enumerate(parts):
        if len(part) != len(range(r, n, R)):
            raise ValueError(
                f"part {r} holds {len(part)} items; a strided sharding of {n} items gives it {len(range(r, n, R))}"
            )
        out[r::R] = list(part)
    return out


def predict_size(trainer: Any) -> int | None:
    """Items in the dataset of a Trainer's (first) prediction loader; None when it cannot say."""
    loaders = trainer.predict_dataloaders
    loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
    dataset = getattr(loader, "dataset", None)
    return len(dataset) if isinstance(dataset, Sized) else None
