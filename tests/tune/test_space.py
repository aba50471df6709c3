"""The search file: each entry read into its Optuna distribution, every malformed entry refused in one line
naming the file and the key, and the values a trial draws mapped to the overrides ``fit`` takes."""

from __future__ import annotations

from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # noqa: E402

from lightning_tf.tune.space import (  # noqa: E402
    load_space,
    probe,
    suggest,
    to_overrides,  # noqa: E402
)
from tests.helpers.cli import ROOT  # noqa: E402

SPACE = """\
model.init_args.lr: {type: float, low: 1e-4, high: 3.0e-3, log: true}
model.init_args.dropout: {type: float, low: 0.0, high: 0.3, step: 0.1}
model.init_args.n_layers: {type: int, low: 2, high: 6, step: 2}
model.init_args.residual: {type: categorical, choices: ["on", blend, only]}
seed_everything: {type: categorical, choices: [0, 1]}
"""


def load(tmp_path: Path, text: str) -> dict:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return load_space(path)


def test_each_entry_becomes_its_optuna_distribution_in_file_order(tmp_path: Path) -> None:
    space = load(tmp_path, SPACE)
    assert space == {  # YAML reads 1e-4 (no dot) as text: a float bound takes it
        "model.init_args.lr": FloatDistribution(1e-4, 3e-3, log=True),
        "model.init_args.dropout": FloatDistribution(0.0, 0.3, step=0.1),
        "model.init_args.n_layers": IntDistribution(2, 6, step=2),
        "model.init_args.residual": CategoricalDistribution(["on", "blend", "only"]),
        "seed_everything": CategoricalDistribution([0, 1]),
    }
    assert list(space)[0] == "model.init_args.lr"
    assert probe(space) == {
        "model.init_args.lr": 1e-4,
        "model.init_args.dropout": 0.0,
        "model.init_args.n_layers": 2,
        "model.init_args.residual": "on",
        "seed_everything": 0,
    }


def test_a_fixed_trial_maps_to_the_overrides_fit_takes(tmp_path: Path) -> None:
    values = {
        "model.init_args.lr": 1e-4,
        "model.init_args.dropout": 0.2,
        "model.init_args.n_layers": 4,
        "model.init_args.residual": "on",
        "seed_everything": 1,
    }
    params = suggest(optuna.trial.FixedTrial(values), load(tmp_path, SPACE))
    assert params == values
    assert to_overrides(params) == [
        "--model.init_args.lr=0.0001",
        "--model.init_args.dropout=0.2",
        "--model.init_args.n_layers=4",
        "--model.init_args.residual=on",
        "--seed_everything=1",
    ]


def test_a_study_draws_inside_each_range_with_its_distribution(tmp_path: Path) -> None:
    space = load(tmp_path, SPACE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    drawn = []
    for _ in range(20):
        trial = study.ask()
        drawn.append(suggest(trial, space))
        study.tell(trial, 0.0)
    assert study.trials[0].distributions == space
    assert all(1e-4 <= d["model.init_args.lr"] <= 3e-3 for d in drawn)
    assert {d["model.init_args.n_layers"] for d in drawn} == {2, 4, 6}
    assert {round(d["model.init_args.dropout"], 9) for d in drawn} <= {0.0, 0.1, 0.2, 0.3}
    assert {d["model.init_args.residual"] for d in drawn} == {"on", "blend", "only"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", r"space\.yaml: expected a mapping of config names to ranges"),
        ("{}\n", r"space\.yaml: expected a mapping of config names to ranges, got \{\}"),
        ("'model lr': {type: float, low: 0.1, high: 1.0}\n", r"'model lr' is not a config name"),
        ("model.init_args.lr: 0.001\n", r"model\.init_args\.lr: expected a range such as"),
        ("model.init_args.lr: {low: 0.1, high: 1.0}\n", r"model\.init_args\.lr: type is one of float, int, categ"),
        ("model.init_args.lr: {type: double, low: 0.1, high: 1.0}\n", r"type is one of .*, got 'double'"),
        (
            "model.init_args.lr: {type: float, low: 0.1, hi: 1.0}\n",
            r"model\.init_args\.lr: got an unexpected keyword argument 'hi' \(type float\)",
        ),
        ("model.init_args.lr: {type: float, low: 0.1}\n", r"model\.init_args\.lr: missing 1 required .*'high'"),
        ("model.init_args.lr: {type: float, low: small, high: 1.0}\n", r"lr: low must be a number, got 'small'"),
        ("model.init_args.lr: {type: float, low: true, high: 1.0}\n", r"lr: low must be a number, got True"),
        ("model.init_args.lr: {type: float, low: 1.0, high: 0.1}\n", r"lr: `low <= high` must hold"),
        ("model.init_args.lr: {type: float, low: 0.0, high: 0.1, log: true}\n", r"lr: `low > 0` must hold"),
        ("model.init_args.lr: {type: float, low: 0.1, high: 1.0, step: 0.1, log: true}\n", r"lr: .*`step` is not"),
        ("model.init_args.n_layers: {type: int, low: 2.5, high: 6}\n", r"n_layers: low must be an integer, got 2\.5"),
        ("model.init_args.pool: {type: categorical, choices: [cls]}\n", r"pool: choices must be a list of two or mo"),
        ("model.init_args.pool: {type: categorical, choices: [cls, mean, cls]}\n", r"pool: choices must be .*diff"),
        ("model.init_args.lr: {type: float, low: 0.1, high: 1.0\n", r"space\.yaml: not valid YAML \(line 2\)"),
    ],
)
def test_every_malformed_entry_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        load(tmp_path, text)
    assert "\n" not in str(err.value) and str(err.value).startswith(str(tmp_path / "space.yaml"))


def test_a_missing_search_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"search file .*absent\.yaml not found"):
        load_space(tmp_path / "absent.yaml")


@pytest.mark.parametrize("name", ["text", "vision", "kline"])
def test_the_shipped_search_files_load(name: str) -> None:
    space = load_space(ROOT / "configs" / "search" / f"{name}.yaml")
    assert len(space) >= 4 and all(key.startswith(("model.", "data.", "trainer.")) for key in space)
