"""The search file: each range type read into its Optuna distribution, every malformed entry refused in one
line naming the file and the key, and the values a trial draws mapped to the overrides ``fit`` takes."""

from __future__ import annotations

from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from lightning_tf.tune.overrides import to_overrides  # noqa: E402
from lightning_tf.tune.space import CategoricalParam, FloatParam, IntParam, SearchSpace  # noqa: E402

SPACE = """\
model.init_args.lr: {type: float, low: 1e-4, high: 3.0e-3, log: true}
model.init_args.dropout: {type: float, low: 0.0, high: 0.3, step: 0.1}
model.init_args.n_layers: {type: int, low: 2, high: 6, step: 2}
model.init_args.residual: {type: categorical, choices: ["on", blend, only]}
seed_everything: {type: categorical, choices: [0, 1]}
constraints:
  - model.init_args.d_model % model.init_args.n_heads == 0
"""


def load(tmp_path: Path, text: str) -> SearchSpace:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return SearchSpace.load(path)


def test_each_range_type_becomes_its_parameter(tmp_path: Path) -> None:
    space = load(tmp_path, SPACE)
    assert list(space.params) == [
        "model.init_args.lr",
        "model.init_args.dropout",
        "model.init_args.n_layers",
        "model.init_args.residual",
        "seed_everything",
    ]  # file order
    # YAML reads 1e-4 (no dot) as text: a float bound takes it
    assert space.params["model.init_args.lr"] == FloatParam("model.init_args.lr", 1e-4, 3e-3, log=True)
    assert space.params["model.init_args.dropout"] == FloatParam("model.init_args.dropout", 0.0, 0.3, step=0.1)
    assert space.params["model.init_args.n_layers"] == IntParam("model.init_args.n_layers", 2, 6, step=2)
    assert space.params["model.init_args.residual"] == CategoricalParam(
        "model.init_args.residual", ("on", "blend", "only")
    )
    assert [c.text for c in space.constraints] == ["model.init_args.d_model % model.init_args.n_heads == 0"]
    assert space.constraint_names() == ["model.init_args.d_model", "model.init_args.n_heads"]
    assert space.text.startswith("model.init_args.lr:") and space.source.endswith("space.yaml")


def test_a_fixed_trial_maps_to_the_overrides_fit_takes(tmp_path: Path) -> None:
    space = load(tmp_path, SPACE)
    trial = optuna.trial.FixedTrial(
        {
            "model.init_args.lr": 1e-4,
            "model.init_args.dropout": 0.2,
            "model.init_args.n_layers": 4,
            "model.init_args.residual": "on",
            "seed_everything": 1,
        }
    )
    params = space.suggest(trial)
    assert params == {
        "model.init_args.lr": 1e-4,
        "model.init_args.dropout": 0.2,
        "model.init_args.n_layers": 4,
        "model.init_args.residual": "on",
        "seed_everything": 1,
    }
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
        drawn.append(space.suggest(trial))
        study.tell(trial, 0.0)
    dists = study.trials[0].distributions
    assert dists["model.init_args.lr"] == optuna.distributions.FloatDistribution(1e-4, 3e-3, log=True)
    assert dists["model.init_args.n_layers"] == optuna.distributions.IntDistribution(2, 6, step=2)
    assert dists["model.init_args.residual"] == optuna.distributions.CategoricalDistribution(["on", "blend", "only"])
    assert all(1e-4 <= d["model.init_args.lr"] <= 3e-3 for d in drawn)
    assert {d["model.init_args.n_layers"] for d in drawn} == {2, 4, 6}
    assert {round(d["model.init_args.dropout"], 9) for d in drawn} <= {0.0, 0.1, 0.2, 0.3}
    assert {d["model.init_args.residual"] for d in drawn} == {"on", "blend", "only"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", r"space\.yaml: expected a mapping of config names to ranges, got list"),
        ("{}\n", r"space\.yaml: no parameters to search"),
        ("'model lr': {type: float, low: 0.1, high: 1.0}\n", r"'model lr' is not a config name"),
        ("model.init_args.lr: 0.001\n", r"model\.init_args\.lr: expected a range such as"),
        ("model.init_args.lr: {low: 0.1, high: 1.0}\n", r"model\.init_args\.lr: no type; type is one of float, int"),
        ("model.init_args.lr: {type: double, low: 0.1, high: 1.0}\n", r"model\.init_args\.lr: type 'double'; type is"),
        (
            "model.init_args.lr: {type: float, low: 0.1, hi: 1.0}\n",
            r"model\.init_args\.lr: unknown field 'hi' for type float; fields are type, low, high, log, step",
        ),
        ("model.init_args.lr: {type: float, low: 0.1}\n", r"model\.init_args\.lr: high is missing"),
        (
            "model.init_args.lr: {type: float, low: small, high: 1.0}\n",
            r"model\.init_args\.lr: low must be a number, got 'small'",
        ),
        ("model.init_args.lr: {type: float, low: true, high: 1.0}\n", r"model\.init_args\.lr: low must be a number"),
        (
            "model.init_args.lr: {type: float, low: 1.0, high: 0.1}\n",
            r"model\.init_args\.lr: low \(1\.0\) must be below high \(0\.1\)",
        ),
        (
            "model.init_args.lr: {type: float, low: 0.0, high: 0.1, log: true}\n",
            r"model\.init_args\.lr: a log range needs low > 0, got 0\.0",
        ),
        (
            "model.init_args.lr: {type: float, low: 0.1, high: 1.0, log: yes please}\n",
            r"model\.init_args\.lr: log must be true or false",
        ),
        (
            "model.init_args.lr: {type: float, low: 0.1, high: .inf}\n",
            r"model\.init_args\.lr: low and high must be finite",
        ),
        (
            "model.init_args.lr: {type: float, low: 0.1, high: 1.0, step: 0.1, log: true}\n",
            r"model\.init_args\.lr: step and log do not combine",
        ),
        (
            "model.init_args.n_layers: {type: int, low: 2.5, high: 6}\n",
            r"model\.init_args\.n_layers: low must be an integer, got 2\.5",
        ),
        (
            "model.init_args.n_layers: {type: int, low: 2, high: 7, step: 2}\n",
            r"model\.init_args\.n_layers: high - low \(5\) is not a multiple of step \(2\)",
        ),
        (
            "model.init_args.n_layers: {type: int, low: 2, high: 6, step: 0}\n",
            r"model\.init_args\.n_layers: step must be > 0, got 0",
        ),
        (
            "model.init_args.n_layers: {type: int, low: 2, high: 6, choices: [1]}\n",
            r"model\.init_args\.n_layers: unknown field 'choices' for type int",
        ),
        (
            "model.init_args.pool: {type: categorical, choices: [cls]}\n",
            r"model\.init_args\.pool: choices must be a list of at least two values",
        ),
        (
            "model.init_args.pool: {type: categorical, choices: cls}\n",
            r"model\.init_args\.pool: choices must be a list",
        ),
        (
            "model.init_args.pool: {type: categorical, choices: [cls, {a: 1}]}\n",
            r"model\.init_args\.pool: choice \{'a': 1\} is not a number, string, boolean or null",
        ),
        (
            "model.init_args.pool: {type: categorical, choices: [cls, mean, cls]}\n",
            r"model\.init_args\.pool: choices repeat a value",
        ),
        (
            "model.init_args.lr: {type: float, low: 0.1, high: 1.0}\nconstraints: model.init_args.lr > 0\n",
            r"space\.yaml: constraints must be a list of expressions",
        ),
        (
            "model.init_args.lr: {type: float, low: 0.1, high: 1.0}\nconstraints: ['model.init_args.lr >']\n",
            r"space\.yaml: constraint 'model\.init_args\.lr >' is not an expression",
        ),
        (
            "model.init_args.lr: {type: float, low: 0.1, high: 1.0}\nconstraints: ['__import__(\"os\").getcwd()']\n",
            r"space\.yaml: constraint .* is not allowed",
        ),
        ("model.init_args.lr: {type: float, low: 0.1, high: 1.0\n", r"space\.yaml: not valid YAML \(line 2\)"),
    ],
)
def test_every_malformed_entry_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        load(tmp_path, text)
    assert "\n" not in str(err.value)


def test_a_missing_search_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"search file .*absent\.yaml not found"):
        SearchSpace.load(tmp_path / "absent.yaml")


def test_a_trial_whose_values_break_a_constraint_is_refused_with_them(tmp_path: Path) -> None:
    space = load(tmp_path, SPACE)
    assert space.refusal({"model.init_args.d_model": 64, "model.init_args.n_heads": 4}) is None
    assert space.refusal({"model.init_args.d_model": 48, "model.init_args.n_heads": 5}) == (
        "refused: model.init_args.d_model % model.init_args.n_heads == 0 (d_model 48, n_heads 5) is false"
    )
