"""The reversal task: data, cached greedy decoding, and the model/data agreement check."""

from __future__ import annotations

import pytest
import torch

from lightning_tf.toy import ReverseDataModule, ReverseSeq2Seq
from lightning_tf.toy.data import BOS_ID, EOS_ID, PAD_ID, ReverseDataset, collate


def test_dataset_is_deterministic_and_reversed() -> None:
    a, b = ReverseDataset(50, 10, 2, 6, seed=3), ReverseDataset(50, 10, 2, 6, seed=3)
    for i in range(50):
        src, tgt = a[i]
        assert torch.equal(src, b[i][0])
        assert 2 <= len(src) <= 6 and src.min() >= 3 and src.max() < 10
        assert tgt.tolist() == src.tolist()[::-1]


def test_collate_pads_and_frames_targets() -> None:
    batch = collate([(torch.tensor([5, 6, 7]), torch.tensor([7, 6, 5])), (torch.tensor([8]), torch.tensor([8]))])
    assert batch["src"].tolist() == [[5, 6, 7], [8, PAD_ID, PAD_ID]]
    assert batch["tgt_in"].tolist() == [[BOS_ID, 7, 6, 5], [BOS_ID, 8, PAD_ID, PAD_ID]]
    assert batch["tgt_out"].tolist() == [[7, 6, 5, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]


def test_splits_differ() -> None:
    dm = ReverseDataModule(n_train=20, n_val=20, n_test=20)
    dm.setup()
    assert not torch.equal(dm.train_set.tokens, dm.val_set.tokens)
    assert not torch.equal(dm.val_set.tokens, dm.test_set.tokens)


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "alibi"])
def test_cached_greedy_equals_uncached(pos_encoding: str) -> None:
    model = ReverseSeq2Seq(d_model=32, n_heads=4, n_layers=2, pos_encoding=pos_encoding).eval()
    src = collate([(torch.randint(3, 16, (n,)), torch.zeros(n, dtype=torch.long)) for n in (5, 3, 7)])["src"]
    cached = model.generate(src, max_new_tokens=8)
    # reference: recompute the whole prefix at every step, no cache
    tokens = torch.full((3, 1), BOS_ID)
    done = torch.zeros(3, dtype=torch.bool)
    ref = []
    with torch.no_grad():
        for _ in range(cached.shape[1]):
            nxt = model(src, tokens)[:, -1].argmax(-1).masked_fill(done, PAD_ID)  # (B,)
            ref.append(nxt)
            done |= nxt == EOS_ID
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    assert torch.equal(cached, torch.stack(ref, dim=1))


def test_bad_data_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"vocab_size \(3\) must exceed"):
        ReverseDataModule(vocab_size=3)
    with pytest.raises(ValueError, match=r"min_length \(5\) <= max_length \(4\)"):
        ReverseDataModule(min_length=5, max_length=4)


def test_model_checks_vocab_against_data() -> None:
    from lightning.pytorch import Trainer

    model = ReverseSeq2Seq(vocab_size=20, d_model=16, n_heads=2, n_layers=1)
    dm = ReverseDataModule(vocab_size=16, n_train=8, n_val=8, n_test=8)
    trainer = Trainer(fast_dev_run=True, logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(ValueError, match=r"model vocab_size \(20\) differs from the data's vocab_size \(16\)"):
        trainer.fit(model, datamodule=dm)
