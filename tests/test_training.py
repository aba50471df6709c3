"""The training plumbing every task uses: decay groups, schedules, the run folder, prediction paths and
the data/model agreement message."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from lightning_tf.training import (
    build_scheduler,
    check_agreement,
    constant_with_warmup,
    parameter_groups,
    patchtst_decay,
    prediction_path,
    run_dir,
    warmup_cosine,
    warmup_steps_for,
)


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


# ----------------------------------------------------------------------------------- decay groups


class _Net(nn.Module):
    def __init__(self, listed: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.pos_embed = nn.Parameter(torch.zeros(1, 3, 4))
        self.proj = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied: one parameter, listed once
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.listed = listed

    def no_weight_decay(self) -> set[str]:
        return set(self.listed)


def _ids(group: dict) -> set[int]:
    return {id(p) for p in group["params"]}


def test_matrices_decay_vectors_and_listed_names_do_not() -> None:
    net = _Net(listed=("pos_embed",))
    decay, no_decay = parameter_groups(net, 0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert _ids(decay) == {id(net.embed.weight), id(net.proj.weight)}
    assert _ids(no_decay) == {id(net.pos_embed), id(net.proj.bias), id(net.norm.weight), id(net.norm.bias)}
    # every trainable parameter exactly once; frozen ones left out
    assert len(decay["params"]) + len(no_decay["params"]) == len([p for p in net.parameters() if p.requires_grad])


def test_a_listed_name_matches_whole_name_parts_only() -> None:
    net = _Net(listed=("embed",))  # "embed" is embed.weight's parent, not a suffix of "pos_embed"
    decay, no_decay = parameter_groups(net, 0.1)
    assert id(net.pos_embed) in _ids(decay)  # 3-D, not listed
    assert id(net.embed.weight) in _ids(decay)  # "embed.weight" does not end in ".embed"
    net = _Net(listed=("embed.weight",))
    decay, no_decay = parameter_groups(net, 0.1)
    assert _ids(no_decay) == {id(net.embed.weight), id(net.proj.bias), id(net.norm.weight), id(net.norm.bias)}


# -------------------------------------------------------------------------------------- schedules


def _optimizer(lr: float = 1.0) -> torch.optim.Optimizer:
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)


def _rates(entry: dict, steps: int) -> list[float]:
    sched, rates = entry["scheduler"], []
    for _ in range(steps):
        rates.append(sched.optimizer.param_groups[0]["lr"])
        sched.optimizer.step()
        sched.step()
    return rates


def test_the_warmup_rule_is_at_most_half_a_known_run() -> None:
    assert warmup_steps_for(100, None) == 100
    assert warmup_steps_for(100, 1000) == 100
    assert warmup_steps_for(100, 50) == 25
    assert warmup_steps_for(100, 1) == 1  # fast_dev_run: one step still warms up
    assert warmup_steps_for(0, 50) == 0
    with pytest.raises(ValueError, match=r"warmup_steps \(-1\) must be >= 0"):
        warmup_steps_for(-1, 10)


def test_noam_peaks_at_the_end_of_warmup_then_decays_as_one_over_sqrt() -> None:
    rates = _rates(build_scheduler(_optimizer(2.0), "noam", lr=2.0, warmup_steps=4), 16)
    assert rates[:4] == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert rates[15] == pytest.approx(2.0 * math.sqrt(4 / 16))


def test_cosine_decays_to_min_lr_at_the_end_of_the_run() -> None:
    entry = build_scheduler(_optimizer(1.0), "cosine", lr=1.0, warmup_steps=2, total_steps=12, min_lr=0.1)
    assert entry["interval"] == "step"
    rates = _rates(entry, 14)
    assert rates[:2] == pytest.approx([0.5, 1.0])
    assert rates[7] == pytest.approx(0.1 + 0.9 * 0.5)  # half way through the decay
    assert rates[12] == pytest.approx(0.1) and rates[13] == pytest.approx(0.1)


def test_onecycle_rises_for_30_percent_then_anneals() -> None:
    rates = _rates(build_scheduler(_optimizer(1.0), "onecycle", lr=1.0, total_steps=100), 100)
    assert max(range(100), key=rates.__getitem__) == 29
    assert rates[29] == pytest.approx(1.0, rel=1e-3) and rates[-1] < 1e-3


def test_decay_is_patchtst_type3_per_epoch() -> None:
    entry = build_scheduler(_optimizer(1.0), "decay", lr=1.0)
    assert entry["interval"] == "epoch"
    assert [patchtst_decay(e) for e in range(5)] == pytest.approx([1, 1, 1, 0.9, 0.81])
    assert _rates(entry, 5) == pytest.approx([1, 1, 1, 0.9, 0.81])


def test_constant_warms_up_then_stays_and_without_warmup_needs_no_scheduler() -> None:
    assert [constant_with_warmup(s, 2) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert _rates(build_scheduler(_optimizer(), "constant", lr=1.0, warmup_steps=2, total_steps=10), 4) == [
        0.5,
        1.0,
        1.0,
        1.0,
    ]
    assert build_scheduler(_optimizer(), "constant", lr=1.0, warmup_steps=0) is None


@pytest.mark.parametrize("name", ["cosine", "onecycle"])
def test_a_schedule_that_needs_the_run_length_says_so(name: str) -> None:
    with pytest.raises(ValueError, match=rf"scheduler '{name}' needs the run's length: set trainer.max_steps"):
        build_scheduler(_optimizer(), name, lr=1.0, total_steps=float("inf"))


def test_noam_without_warmup_and_an_unknown_name_are_refused() -> None:
    with pytest.raises(ValueError, match=r"scheduler 'noam' needs warmup_steps >= 1"):
        build_scheduler(_optimizer(), "noam", lr=1.0, warmup_steps=0)
    with pytest.raises(ValueError, match=r"unknown scheduler 'linear'; expected noam, cosine"):
        build_scheduler(_optimizer(), "linear", lr=1.0)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- run folder, predictions


def _trainer(tmp_path: Path, version: object = "abc123", loggers: bool = True) -> SimpleNamespace:
    logger = SimpleNamespace(save_dir=str(tmp_path / "runs"), name="lightning-tf", version=version)
    return SimpleNamespace(loggers=[logger] if loggers else [], default_root_dir=str(tmp_path / "root"))


def test_run_dir_is_the_first_loggers_folder_else_the_root(tmp_path: Path) -> None:
    assert run_dir(_trainer(tmp_path)) == tmp_path / "runs" / "lightning-tf" / "abc123"
    assert run_dir(_trainer(tmp_path, version=3)) == tmp_path / "runs" / "lightning-tf" / "version_3"
    assert run_dir(_trainer(tmp_path, loggers=False)) == tmp_path / "root"


def test_prediction_paths_never_overwrite_an_earlier_prediction(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, loggers=False)
    first = prediction_path(trainer, None, "predictions.csv")
    assert first == tmp_path / "root" / "predictions.csv"
    first.parent.mkdir(parents=True)
    first.write_text("x")
    second = prediction_path(trainer, None, "predictions.csv")
    assert second.name == "predictions-1.csv"
    second.write_text("x")
    assert prediction_path(trainer, None, "predictions.csv").name == "predictions-2.csv"
    assert prediction_path(trainer, tmp_path / "mine.csv", "predictions.csv") == tmp_path / "mine.csv"  # as given


def test_agreement_names_both_values_and_ignores_what_the_data_does_not_say() -> None:
    check_agreement("horizon", 5, 5)
    check_agreement("horizon", 5, None)
    check_agreement("image_size", (16, 16), [16, 16])
    with pytest.raises(
        ValueError,
        match=r"^model\.horizon \(9\) differs from the data's horizon \(5\); the model takes it "
        r"from the data: drop model\.horizon from the config \(the data decides it\)$",
    ):
        check_agreement("horizon", 9, 5)
