"""A trial's values written as ``fit`` overrides the parser reads back exactly, and the overrides that give a
trial its own folder and wandb run without taking over what the user set."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from lightning_tf.tune.command import check_study_name, config_args
from lightning_tf.tune.space import format_value, to_overrides
from lightning_tf.tune.trials import trial_overrides


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
        (["on", "a: b"], "['on', 'a: b']"),
        ({"b": 1e-05, "a": None}, "{b: 1.0e-05, a: null}"),
    ],
)
def test_values_are_written_as_the_parser_reads_them(value: object, text: str) -> None:
    assert format_value(value) == text
    if not isinstance(value, str):  # the config parser reads values as YAML: back to the same value
        assert yaml.safe_load(text) == value


def test_overrides_keep_the_order_of_the_parameters() -> None:
    assert to_overrides({"trainer.max_epochs": 3, "model.init_args.lr": 0.001}) == [
        "--trainer.max_epochs=3",
        "--model.init_args.lr=0.001",
    ]


def test_a_trial_gets_its_own_folder_wandb_run_and_pruning_callback() -> None:
    reporter = {"monitor": "val/loss", "study": "digits", "trial": 7, "params": {"model.init_args.lr": 0.01}}
    args = trial_overrides("digits", 7, "/s/digits", True, ["--config", "a.yaml", "--trainer.max_epochs=3"], reporter)
    callback = yaml.safe_load(args.pop().removeprefix("--trainer.callbacks+="))
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
    # without a WandbLogger the trial's folder is its default_root_dir; what the user set is left to them, and
    # the callbacks they add run beside the pruning callback
    given = ["--trainer.devices=2", "--trainer.enable_progress_bar", "true", "--trainer.callbacks+=EarlyStopping"]
    assert trial_overrides("s", 2, "/s", False, given, {}) == [
        "--trainer.default_root_dir=/s/trials/0002",
        "--trainer.enable_model_summary=false",
        "--trainer.callbacks+={class_path: lightning_tf.tune.reporter.TrialReporter, init_args: {}}",
    ]


def test_a_study_name_that_cannot_name_a_folder_or_run_is_refused() -> None:
    assert check_study_name("vision-digits_2") == "vision-digits_2"
    with pytest.raises(ValueError, match=r"study name 'my study/1': use letters, digits, '-' and '_' only"):
        check_study_name("my study/1")


def test_a_study_is_known_by_its_configs_contents_wherever_the_clone_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for machine in ("a", "b"):
        (tmp_path / machine).mkdir()
        (tmp_path / machine / "digits.yaml").write_text("trainer: {max_epochs: 40}\n")
    monkeypatch.chdir(tmp_path)
    a, a_key = config_args(["--config", "a/digits.yaml", "--trainer.max_epochs=3"])
    b, b_key = config_args([f"--config={tmp_path / 'b' / 'digits.yaml'}", "--trainer.max_epochs=3"])
    assert a == ["--config", str(tmp_path / "a" / "digits.yaml"), "--trainer.max_epochs=3"]  # from any folder
    assert b[0] == f"--config={tmp_path / 'b' / 'digits.yaml'}"
    assert a_key[1] == b_key[0].removeprefix("--config=") and a_key[1].startswith("sha256:") and a_key[2:] == a[2:]
    (tmp_path / "b" / "digits.yaml").write_text("trainer: {max_epochs: 41}\n")
    assert config_args(b)[1][0] != f"--config={a_key[1]}"
    inline = ["--config={trainer: {max_epochs: 2}}", "--config"]
    assert config_args(inline) == (inline, inline)  # not a file: kept as written
