"""The resumable training loaders every task uses: batches from (seed, epoch) alone, sharded like
``DistributedSampler``; the position counted in batches returned, applied even after ``iter``; per-batch
augmentation streams that leave the training stream alone; one draw from that stream per epoch."""

from __future__ import annotations

import signal

import pytest
import torch
from lightning.fabric.utilities.data import _set_sampler_epoch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from lightning_tf.training.loaders import (
    Batch,
    IgnoreStopSignals,
    ResumableDataLoader,
    SeededBatches,
    ShuffledBatchSampler,
    batch_seed,
)


def flat(batches: object) -> list[list[int]]:
    return [list(map(int, b)) for b in batches]  # type: ignore[attr-defined]


def test_batches_depend_on_seed_and_epoch_and_ranks_split_one_process_batches() -> None:
    one = ShuffledBatchSampler(21, batch_size=4, seed=3, num_replicas=1, rank=0)
    one.set_epoch(2)
    again = ShuffledBatchSampler(21, batch_size=4, seed=3, num_replicas=1, rank=0)
    again.set_epoch(2)
    assert flat(one) == flat(again) and sorted(i for b in flat(one) for i in b) == list(range(21))
    again.set_epoch(3)
    assert flat(again) != flat(one)
    # two ranks with batch 2: their k-th batches together are one process's k-th batch of 4
    ranks = [ShuffledBatchSampler(21, batch_size=2, seed=3, num_replicas=2, rank=r) for r in range(2)]
    for r in ranks:
        r.set_epoch(2)
    assert len(ranks[0]) == len(ranks[1]) == 6  # 21 padded to 22: 11 items each
    for k, batch in enumerate(flat(one)[:-1]):
        assert sorted(flat(ranks[0])[k] + flat(ranks[1])[k]) == sorted(batch)
    # the last, short batch: rank 1's share is padded with the epoch's first item, as DistributedSampler pads
    assert flat(ranks[0])[-1] == flat(one)[-1] and flat(ranks[1])[-1] == [flat(one)[0][0]]
    first = list(next(iter(ranks[1])))
    assert isinstance(next(iter(ranks[1])), Batch) and next(iter(ranks[1])).number == 1  # k * R + r
    assert first == flat(ranks[1])[0]
    dropped = ShuffledBatchSampler(21, batch_size=4, drop_last=True)
    assert len(dropped) == 5 and all(len(b) == 4 for b in flat(dropped))
    with pytest.raises(ValueError, match=r"batch_size \(0\) must be >= 1"):
        ShuffledBatchSampler(21, batch_size=0)


def test_the_position_counts_returned_batches_and_applies_after_iter() -> None:
    data = list(range(40))

    def loader() -> ResumableDataLoader:
        sampler = ShuffledBatchSampler(40, batch_size=4, seed=1)
        sampler.set_epoch(1)
        return ResumableDataLoader(data, sampler)

    epoch = [b.tolist() for b in loader()]
    running = loader()
    it = iter(running)
    seen = [next(it).tolist() for _ in range(3)]
    state = running.state_dict()
    assert state == {"epoch": 1, "batches_done": 3, "num_replicas": 1}
    resumed = loader()
    late = iter(resumed)  # as Lightning does when the schedule asks for the run's length early
    resumed.load_state_dict(state)
    assert seen + [b.tolist() for b in late] == epoch
    assert [b.tolist() for b in resumed] == epoch  # only the first iteration resumes


def test_lightning_sees_a_loader_that_shards_itself_and_sets_its_epoch() -> None:
    sampler = ShuffledBatchSampler(10, batch_size=2, num_replicas=2, rank=1)
    loader = ResumableDataLoader(list(range(10)), sampler)
    assert isinstance(loader.sampler, DistributedSampler)  # Lightning adds no sampler of its own under DDP
    _set_sampler_epoch(loader, 4)
    assert sampler.epoch == loader.sampler.epoch == 4
    assert list(loader.sampler) == [i for b in flat(sampler) for i in b]


class Noise(Dataset):
    """Each item is one draw from torch's global stream, as an augmentation's parameters are."""

    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int) -> float:
        return float(torch.rand(()))


def test_each_batch_draws_from_its_own_stream_and_the_training_stream_is_left_alone() -> None:
    ds = SeededBatches(Noise(), seed=7)
    state = torch.get_rng_state()
    a = ds.__getitems__(Batch([1, 2, 3], epoch=0, number=5))
    ds.__getitems__(Batch([4], epoch=0, number=6))  # another batch fetched first changes nothing
    assert ds.__getitems__(Batch([1, 2, 3], epoch=0, number=5)) == a and len(set(a)) == 3
    assert ds.__getitems__(Batch([1, 2, 3], epoch=1, number=5)) != a
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(batch_seed(7, 0, 5))
    assert a == [float(torch.rand(())) for _ in range(3)]


def test_one_draw_from_the_training_stream_per_epoch_as_a_plain_loader_without_workers() -> None:
    data = list(range(8))
    torch.manual_seed(0)
    next(iter(DataLoader(data, batch_size=2)))
    after_plain = torch.rand(())
    torch.manual_seed(0)
    next(iter(ResumableDataLoader(data, ShuffledBatchSampler(8, batch_size=2))))
    assert torch.equal(torch.rand(()), after_plain)


def test_workers_leave_the_stop_signals_to_the_main_process() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    called = []
    try:
        IgnoreStopSignals(called.append)(3)
        assert signal.getsignal(signal.SIGTERM) == signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    assert called == [3]
    loader = ResumableDataLoader(list(range(4)), ShuffledBatchSampler(4, 2), num_workers=1)
    assert isinstance(loader.worker_init_fn, IgnoreStopSignals)
