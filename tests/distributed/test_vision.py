"""ViT classification under DDP (2 CPU processes, gloo) against one process at the same global batch.

One process with batch 32 and two with batch 16 draw the same training images per step (the same
permutation, dealt out as DistributedSampler deals it), and their averaged gradients differ only in
the order of the float32 sums: after 6 AdamW steps the weights agree to ~1e-7, and so do the metrics (measured: at most 1e-7
relative). The tolerance, 1e-5, is far below what a repeated or dropped image would change: the test
and validation sets hold 359 and 143 images (odd), one image moves accuracy by 1/359 = 3e-3.
"""

from __future__ import annotations

import pandas as pd
import pytest

from .conftest import Runs

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration


def test_training_keeps_processes_in_step(ddp_runs: Runs) -> None:
    two = ddp_runs.record(2, "vision")
    assert two["global_step"] == [6, 6]
    assert len(set(two["params"])) == 1


def test_evaluation_metrics_match_one_process(ddp_runs: Runs) -> None:
    one, two = ddp_runs.record(1, "vision"), ddp_runs.record(2, "vision")
    assert one["sizes"] == two["sizes"] and one["sizes"]["test"] % 2 == 1
    # every test image on exactly one process: ceil and floor of 359 / 2 images in batches of 16
    assert two["eval_batches"] == [12, 12] and one["eval_batches"] == [12]
    for stage in ("validate", "test"):
        assert one[stage].keys() == two[stage].keys() and one[stage]
        for key, value in one[stage].items():
            assert two[stage][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


def test_prediction_csv_matches_one_process(ddp_runs: Runs) -> None:
    one = pd.read_csv(ddp_runs.one / "predictions.csv")
    two = pd.read_csv(ddp_runs.two / "predictions.csv")
    assert list(two.columns) == list(one.columns)
    assert len(two) == len(one) == 359
    assert two["file"].is_unique
    assert list(two["file"]) == list(one["file"])  # input order
    assert list(two["top1_class"]) == list(one["top1_class"])
    assert list(two["label"]) == list(one["label"])
    probs = [c for c in one.columns if c.endswith("_prob")]
    pd.testing.assert_frame_equal(two[probs], one[probs], atol=1e-5, rtol=0)
    assert not list(ddp_runs.two.glob("predictions.rank*.csv"))  # one file, not one per process
