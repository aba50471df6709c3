"""The shared warmup + cosine learning-rate multiplier."""

from __future__ import annotations

import math

import pytest

from lightning_tf.training import warmup_cosine


def test_linear_warmup_reaches_the_peak_at_the_last_warmup_step() -> None:
    assert [warmup_cosine(s, 4, 20) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]


def test_cosine_decay_halves_at_mid_point_and_ends_at_the_floor() -> None:
    assert warmup_cosine(4, 4, 20) == 1.0  # first step after warmup: cosine at 0
    assert warmup_cosine(12, 4, 20) == pytest.approx(0.5)
    assert warmup_cosine(20, 4, 20) == pytest.approx(0.0)
    assert warmup_cosine(50, 4, 20) == pytest.approx(0.0)  # stays at the end value
    floor = 0.1
    assert warmup_cosine(12, 4, 20, floor) == pytest.approx(floor + (1 - floor) * 0.5)
    assert warmup_cosine(20, 4, 20, floor) == pytest.approx(floor)


def test_matches_the_formula_between_warmup_and_total() -> None:
    for step in range(4, 21):
        expected = 0.5 * (1 + math.cos(math.pi * (step - 4) / 16))
        assert warmup_cosine(step, 4, 20) == pytest.approx(expected)


def test_no_warmup_starts_at_the_peak() -> None:
    assert warmup_cosine(0, 0, 10) == 1.0
