"""The search space checked against the config's own parser (the digits ViT config): a key the config does
not know, a value it does not take and a constraint on a name it leaves unset are each one line naming the
search file and the key; the best parameters come back as a complete config the parser reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lightning_tf.tune.config import BaseConfig, check_space
from lightning_tf.tune.space import SearchSpace
from tests.helpers.cli import ROOT

ARGS = ["--config", str(ROOT / "configs/trainer/default.yaml"), "--config", str(ROOT / "configs/vision/digits.yaml")]


@pytest.fixture(scope="module")
def base() -> BaseConfig:
    return BaseConfig(ARGS)


def space(text: str) -> SearchSpace:
    return SearchSpace.from_mapping(yaml.safe_load(text), "vision.yaml")


def test_a_space_the_config_takes_passes_and_constraints_read_the_config(base: BaseConfig) -> None:
    checked = space(
        "model.init_args.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n"
        "model.init_args.pool: {type: categorical, choices: [cls, mean]}\n"
        "constraints: ['trainer.max_epochs * model.init_args.lr < 1']\n"
    )
    assert check_space(checked, base) == {"trainer.max_epochs": 40}  # the config's own value
    assert base.uses_wandb() and base.task_name() == "vision-digits-digits"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "model.init_args.lrx: {type: float, low: 0.1, high: 1.0}\n",
            r"^vision\.yaml: model\.init_args\.lrx: no such argument of ViTClassifier; did you mean lr\?$",
        ),
        (
            "trainer.max_epochss: {type: int, low: 2, high: 4}\n",
            r"^vision\.yaml: trainer\.max_epochss: not an option of this config; did you mean --trainer\.max_epochs\?$",
        ),
        (
            "model.init_args.lr: {type: float, low: 0.1, high: 1.0}\n"
            "model.init_args.pool: {type: categorical, choices: [cls, mean, max]}\n",
            r"^vision\.yaml: model\.init_args\.pool: 'max' is not one of cls, mean$",
        ),
        (
            "model.init_args.lr: {type: float, low: 0.1, high: 1.0}\n"
            "constraints: ['model.init_args.d_model % model.init_args.n_heads == 0']\n",
            r"^vision\.yaml: a constraint reads model\.init_args\.d_model, which the space does not search and the "
            r"config leaves unset$",
        ),
    ],
)
def test_what_the_config_does_not_take_is_one_line_naming_the_key(base: BaseConfig, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_space(space(text), base)


def test_the_best_parameters_come_back_as_one_complete_config(base: BaseConfig, tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(base.dump({"model.init_args.lr": 1e-05, "model.init_args.pool": "mean"}))
    alone = base.parser.parse_args(["--config", str(path)])  # the file alone, without the command's configs
    assert alone.model.init_args.lr == 1e-05 and alone.model.init_args.pool == "mean"
    assert alone.trainer.max_epochs == 40 and alone.data.init_args.dataset == "digits"
    assert alone.model.init_args.d_model is None  # None values are kept: the preset decides, as in the config
