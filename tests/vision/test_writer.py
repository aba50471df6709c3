"""ClassificationWriter: every process's share merged back into input order, each image once; its arguments."""

from __future__ import annotations

import pytest
import torch

from lightning_tf.vision import ClassificationWriter
from lightning_tf.vision.writer import _merge_predictions


def test_merge_sorts_by_index_and_drops_repeats() -> None:
    def batch(idx: list[int]) -> dict:  # what predict_step returns for an ImageDataModule batch
        return {
            "file": [f"img{i}" for i in idx],
            "probs": torch.tensor([[float(i), 1.0 - i] for i in idx]),  # (B, 2)
            "target": torch.tensor(idx),
            "index": torch.tensor(idx),
        }

    # a padding sampler gave image 0 to both processes
    merged = _merge_predictions([[batch([0, 2]), batch([4])], [batch([1, 3]), batch([0])]])
    assert len(merged) == 1
    assert merged[0]["file"] == ["img0", "img1", "img2", "img3", "img4"]
    assert merged[0]["probs"][:, 0].tolist() == [0, 1, 2, 3, 4] and merged[0]["probs"].shape == (5, 2)
    assert merged[0]["target"].tolist() == merged[0]["index"].tolist() == [0, 1, 2, 3, 4]


def test_merge_numbers_unnamed_images_in_input_order() -> None:
    def batch(values: list[float]) -> dict:  # what predict_step returns for a plain tensor batch
        return {"probs": torch.tensor(values)[:, None]}  # (B, 1)

    # Lightning's prediction sampler: process 0 holds images 0, 2, process 1 image 1
    merged = _merge_predictions([[batch([0.0, 2.0])], [batch([1.0])]])
    assert merged[0]["file"] == ["0", "1", "2"]
    assert merged[0]["probs"][:, 0].tolist() == [0.0, 1.0, 2.0]
    assert "target" not in merged[0] and "index" not in merged[0]


def test_merge_drops_the_repeat_that_fills_an_empty_share() -> None:
    """One image on two processes: the second process predicts image 0 again, which ``n`` drops."""
    merged = _merge_predictions([[{"probs": torch.tensor([[0.5]])}], [{"probs": torch.tensor([[0.5]])}]], n=1)
    assert merged[0]["file"] == ["0"] and merged[0]["probs"].shape == (1, 1)
    assert _merge_predictions([[], []]) == []


def test_top_k_must_be_positive() -> None:
    with pytest.raises(ValueError, match="top_k must be at least 1, got 0"):
        ClassificationWriter(top_k=0)
