"""lightning_tf.training.distributed without processes: the unpadded sampler's shares, the merge of per-process
predictions back into input order."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DistributedSampler

from lightning_tf.training import UnpaddedDistributedSampler, eval_sampler, gather_objects, interleave


@pytest.mark.parametrize("n, R", [(147, 2), (148, 2), (10, 3), (3, 3)])
def test_unpadded_shares_are_disjoint_and_cover_every_item_once(n: int, R: int) -> None:
    data = list(range(n))
    shares = [list(UnpaddedDistributedSampler(data, num_replicas=R, rank=r)) for r in range(R)]
    assert sorted(i for s in shares for i in s) == data
    assert [len(s) for s in shares] == [len(UnpaddedDistributedSampler(data, R, r)) for r in range(R)]
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert interleave(shares) == data  # strided: the shares interleave back into input order


def test_torch_distributed_sampler_repeats_items_which_the_unpadded_one_does_not() -> None:
    data = list(range(147))
    padded = [i for r in range(2) for i in DistributedSampler(data, num_replicas=2, rank=r, shuffle=False)]
    assert len(padded) == 148 and padded.count(0) == 2  # what Lightning's evaluation sampler would score


def test_fewer_items_than_processes() -> None:
    with pytest.raises(ValueError, match="1 evaluation items cannot be shared by 2 processes"):
        UnpaddedDistributedSampler([0], num_replicas=2, rank=1)
    assert list(UnpaddedDistributedSampler([], num_replicas=2, rank=0)) == []
    # prediction: the process left without an item repeats one (Lightning needs a batch on every process)
    shares = [list(UnpaddedDistributedSampler(["a", "b"], num_replicas=3, rank=r, predict=True)) for r in range(3)]
    assert shares == [[0], [1], [0]]
    assert interleave([["a"], ["b"], ["a"]], n=2) == ["a", "b"]  # the repeat is dropped


def test_single_process_needs_no_sampler() -> None:
    assert eval_sampler(list(range(5))) is None
    assert gather_objects({"a": 1}) == [{"a": 1}]


def test_interleave_rejects_shares_that_are_not_strided() -> None:
    with pytest.raises(ValueError, match="part 0 holds 2 items"):
        interleave([[0, 2], [1, 3, 5]])


def test_kline_merge_restores_window_order() -> None:
    from lightning_tf.kline.writer import _merge_windows

    def batch(ids: list[int]) -> dict:
        return {"pred": torch.tensor(ids, dtype=torch.float)[:, None, None], "ticker": torch.tensor(ids)}

    merged = _merge_windows([[batch([0, 2]), batch([4])], [batch([1, 3])]])
    assert merged[0]["ticker"].tolist() == [0, 1, 2, 3, 4]
    assert merged[0]["pred"].shape == (5, 1, 1)
    assert _merge_windows([[], []]) == []
