"""A trial's values written as ``fit`` overrides the parser reads back exactly, and the overrides that give a
trial its own folder and wandb run without taking over what the user set."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lightning_tf.tune.overrides import (
    absolute_configs,
    args_key,
    check_study_name,
    format_value,
    given_names,
    to_overrides,
    trial_overrides,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("on", "on"),
        ("patches", "patches"),
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (3, "3"),
        (0.5, "0.5"),
        (1e-05, "1.0e-05"),
        (2.5e-07, "2.5e-07"),
        (1e20, "1.0e+20"),
        (math.inf, ".inf"),
        ([0.1, 0.5, 0.9], "[0.1, 0.5, 0.9]"),
        ((1, "a"), '[1, "a"]'),
    ],
)
def test_values_are_written_as_the_parser_reads_them(value: object, text: str) -> None:
    assert format_value(value) == text


def test_a_value_that_is_no_config_value_is_refused() -> None:
    with pytest.raises(ValueError, match=r"cannot write \{'a': 1\} \(dict\) as a config value"):
        format_value({"a": 1})


def test_overrides_keep_the_order_of_the_parameters() -> None:
    assert to_overrides({"trainer.max_epochs": 3, "model.init_args.lr": 0.001}) == [
        "--trainer.max_epochs=3",
        "--model.init_args.lr=0.001",
    ]


def test_a_trial_gets_its_own_folder_wandb_run_and_pruning_callback() -> None:
    reporter = {"monitor": "val/loss", "study": "digits", "trial": 7, "params": {"model.init_args.lr": 0.01}}
    args = trial_overrides("digits", 7, "/s/digits", True, ["--config", "a.yaml", "--trainer.max_epochs=3"], reporter)
    callback = json.loads(args.pop().removeprefix("--trainer.callbacks+="))
    assert callback == {"class_path": "lightning_tf.tune.reporter.TrialReporter", "init_args": reporter}
    assert args == [
        "--trainer.default_root_dir=/s/digits",
        "--trainer.logger.init_args.save_dir=/s/digits",
        "--trainer.logger.init_args.id=digits-0007",
        "--trainer.logger.init_args.name=digits-0007",
        "--trainer.logger.init_args.group=digits",
        "--trainer.logger.init_args.job_type=tune",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.devices=1",
    ]
    # without a WandbLogger the trial's folder is its default_root_dir; what the user set is left to them
    given = ["--trainer.devices=2", "--trainer.enable_progress_bar", "true"]
    assert trial_overrides("s", 2, "/s", False, given, {})[:-1] == [
        "--trainer.default_root_dir=/s/trials/0002",
        "--trainer.enable_model_summary=false",
    ]
    assert given_names(["--config=x.yaml", "--config", "y.yaml", "--a.b=1", "--c", "2"]) == {"a.b", "c"}


def test_a_study_name_that_cannot_name_a_folder_or_run_is_refused() -> None:
    with pytest.raises(ValueError, match=r"study name 'my study/1': use letters, digits, '-' and '_' only"):
        check_study_name("my study/1")
    with pytest.raises(ValueError, match=r"study name 'a b'"):
        trial_overrides("a b", 0, "/s", True, [], {})


def test_a_study_is_known_by_its_configs_contents_wherever_the_clone_is(tmp_path: Path) -> None:
    for machine in ("a", "b"):
        (tmp_path / machine).mkdir()
        (tmp_path / machine / "digits.yaml").write_text("trainer: {max_epochs: 40}\n")
    a, b = (absolute_configs(["--config", str(tmp_path / m / "digits.yaml"), "--trainer.max_epochs=3"]) for m in "ab")
    assert a[1] == str(tmp_path / "a" / "digits.yaml") and a != b
    assert args_key(a) == args_key(b) and args_key(a)[1].startswith("sha256:") and args_key(a)[2:] == a[2:]
    (tmp_path / "b" / "digits.yaml").write_text("trainer: {max_epochs: 41}\n")
    assert args_key(a) != args_key(b)
    inline = ["--config={trainer: {max_epochs: 2}}"]
    assert args_key(inline) == inline  # not a file: kept as written
