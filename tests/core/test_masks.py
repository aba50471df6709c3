"""causal_mask, padding_mask and combine_masks against torch.tril and hand-built masks.

Convention under test: bool, True = may attend, broadcastable to ``(B, H, T, S)``.
"""

from __future__ import annotations

import pytest
import torch

from lightning_tf.core import causal_mask, combine_masks, padding_mask

# --- causal_mask -----------------------------------------------------------------------------


@pytest.mark.parametrize("T", [1, 2, 5])
def test_causal_mask_square_equals_tril(T: int) -> None:
    mask = causal_mask(T)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, torch.tril(torch.ones(T, T, dtype=torch.bool)))


@pytest.mark.parametrize(("T", "S"), [(1, 4), (2, 5), (3, 3), (4, 9)])
def test_causal_mask_default_offset_is_bottom_right(T: int, S: int) -> None:
    # incremental decoding: the T queries are the newest T of S positions, so query i sits at S - T + i
    mask = causal_mask(T, S)
    assert mask.shape == (T, S)
    assert torch.equal(mask, torch.tril(torch.ones(T, S, dtype=torch.bool), diagonal=S - T))
    # and it is exactly the last T rows of the full (S, S) causal mask
    assert torch.equal(mask, causal_mask(S)[S - T :])


def test_causal_mask_single_newest_query_sees_every_key() -> None:
    assert causal_mask(1, 6).all()


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_causal_mask_explicit_offset(offset: int) -> None:
    T, S = 3, 6
    mask = causal_mask(T, S, offset=offset)
    for i in range(T):
        for j in range(S):
            assert bool(mask[i, j]) == (j <= offset + i), (i, j)
    assert torch.equal(mask, torch.tril(torch.ones(T, S, dtype=torch.bool), diagonal=offset))


def test_causal_mask_offset_zero_is_top_left() -> None:
    # offset=0 with T < S: first query sees only key 0 (what SDPA's is_causal would do)
    mask = causal_mask(2, 4, offset=0)
    assert mask.tolist() == [[True, False, False, False], [True, True, False, False]]


# --- padding_mask ----------------------------------------------------------------------------


def test_padding_mask_from_ids() -> None:
    pad = 0
    ids = torch.tensor([[5, 6, 7, 0, 0], [3, 0, 4, 0, 9]])
    mask = padding_mask(ids, pad)
    assert mask.dtype == torch.bool
    assert mask.shape == (2, 1, 1, 5)
    expected = torch.tensor([[True, True, True, False, False], [True, False, True, False, True]])
    assert torch.equal(mask[:, 0, 0], expected)


def test_padding_mask_nonzero_pad_id() -> None:
    ids = torch.tensor([[0, 1, 2, 2]])
    mask = padding_mask(ids, pad_id=2)
    assert mask[0, 0, 0].tolist() == [True, True, False, False]


def test_padding_mask_from_lengths() -> None:
    lengths = torch.tensor([3, 1, 4])
    mask = padding_mask(lengths=lengths)
    assert mask.shape == (3, 1, 1, 4)  # S defaults to lengths.max()
    for b, n in enumerate(lengths.tolist()):
        assert mask[b, 0, 0].tolist() == [j < n for j in range(4)]


def test_padding_mask_from_lengths_with_max_len() -> None:
    mask = padding_mask(lengths=torch.tensor([2, 0]), max_len=5)
    assert mask.shape == (2, 1, 1, 5)
    assert mask[0, 0, 0].tolist() == [True, True, False, False, False]
    assert not mask[1].any()


def test_padding_mask_ids_and_lengths_agree() -> None:
    pad = 1
    lengths = torch.tensor([4, 2, 6, 1])
    S = 6
    ids = torch.randint(2, 50, (4, S))
    for b, n in enumerate(lengths.tolist()):
        ids[b, n:] = pad
    assert torch.equal(padding_mask(ids, pad), padding_mask(lengths=lengths, max_len=S))


def test_padding_mask_broadcasts_to_attention_shape() -> None:
    mask = padding_mask(lengths=torch.tensor([2, 3]))
    B, H, T, S = 2, 4, 5, 3
    full = mask.expand(B, H, T, S)
    # every head and every query sees the same keys
    assert torch.equal(full[:, 2, 4], mask[:, 0, 0])


def test_padding_mask_rejects_ids_and_lengths_together() -> None:
    with pytest.raises(ValueError, match=r"either ids with pad_id, or lengths, not both"):
        padding_mask(torch.zeros(1, 3, dtype=torch.long), 0, lengths=torch.tensor([3]))


@pytest.mark.parametrize("args", [(None, None), (torch.zeros(1, 3, dtype=torch.long), None), (None, 0)])
def test_padding_mask_requires_ids_with_pad_id(args: tuple) -> None:
    with pytest.raises(ValueError, match=r"pass ids with pad_id, or lengths"):
        padding_mask(*args)


def test_padding_mask_rejects_bad_lengths_shape() -> None:
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\), got \(2, 1\)"):
        padding_mask(lengths=torch.tensor([[1], [2]]))


def test_padding_mask_rejects_bad_ids_shape() -> None:
    with pytest.raises(ValueError, match=r"ids must have shape \(B, S\), got \(4,\)"):
        padding_mask(torch.tensor([1, 2, 0, 0]), 0)


# --- combine_masks ---------------------------------------------------------------------------


def test_combine_masks_is_logical_and_with_broadcasting() -> None:
    pad = padding_mask(lengths=torch.tensor([3, 2]), max_len=4)  # (2, 1, 1, 4)
    causal = causal_mask(4)  # (4, 4)
    out = combine_masks(pad, causal)
    assert out is not None and out.dtype == torch.bool
    assert out.shape == (2, 1, 4, 4)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert bool(out[b, 0, i, j]) == (bool(pad[b, 0, 0, j]) and j <= i)


def test_combine_masks_skips_none() -> None:
    causal = causal_mask(3)
    assert torch.equal(combine_masks(None, causal, None), causal)
    assert combine_masks(causal) is causal


def test_combine_masks_all_none_is_none() -> None:
    assert combine_masks() is None
    assert combine_masks(None, None) is None


def test_combine_masks_three_masks() -> None:
    a = torch.tensor([True, True, False, True])
    b = torch.tensor([True, False, True, True])
    c = torch.tensor([False, True, True, True])
    assert combine_masks(a, b, c).tolist() == [False, False, False, True]


@pytest.mark.parametrize("dtype", [torch.float32, torch.long, torch.uint8])
def test_combine_masks_rejects_non_bool(dtype: torch.dtype) -> None:
    with pytest.raises(TypeError, match=r"masks must be bool"):
        combine_masks(causal_mask(3), torch.ones(3, 3, dtype=dtype))


def test_padding_mask_rejects_max_len_shorter_than_lengths() -> None:
    with pytest.raises(ValueError, match=r"max_len \(3\) is shorter than the longest length \(5\)"):
        padding_mask(lengths=torch.tensor([5, 2]), max_len=3)
