"""The real ``lightning-tf`` command, run as a subprocess, on a test-only module."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers.cli import ROOT, cli, run_dir_args

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

TINY = ["--model", "tests.helpers.tiny.TinyRegressor", "--data", "tests.helpers.tiny.TinyDataModule"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fit (with test after it) of the tiny model under the default trainer config."""
    tmp = tmp_path_factory.mktemp("run")
    proc = cli(
        "fit", "--config", "configs/trainer/default.yaml", *TINY, *run_dir_args(tmp),
        "--trainer.max_epochs", "3", "--test_after_fit", "true",
    )
    (tmp / "stdout.txt").write_text(proc.stdout + proc.stderr)
    return tmp


def test_fit_writes_checkpoints_and_offline_wandb_run(fitted: Path) -> None:
    ckpts = sorted(p.name for p in fitted.rglob("*.ckpt"))
    assert "last.ckpt" in ckpts
    assert any(name.startswith("best-") for name in ckpts), ckpts
    runs = list((fitted / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    assert list(runs[0].glob("*.wandb")), "the offline run holds no .wandb log"
    # the resolved config is saved beside the run and names the classes chosen on the command line
    config = yaml.safe_load(next(fitted.rglob("config.yaml")).read_text())
    assert config["model"]["class_path"] == "tests.helpers.tiny.TinyRegressor"
    # the checkpoint loads with weights_only=True and training actually moved the weights
    last = next(fitted.rglob("last.ckpt"))
    state = torch.load(last, weights_only=True)
    assert state["global_step"] == 3 * 4  # 3 epochs x 64 samples / batch 16
    # test ran after fit and logged its loss
    assert "test/loss" in (fitted / "stdout.txt").read_text()


def test_test_subcommand_from_checkpoint(fitted: Path, tmp_path: Path) -> None:
    last = next(fitted.rglob("last.ckpt"))
    proc = cli("test", *TINY, "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path),
               "--ckpt_path", str(last))
    assert "test/loss" in proc.stdout + proc.stderr


@pytest.mark.parametrize("subcommand", ["validate", "predict"])
def test_validate_and_predict_run(subcommand: str, tmp_path: Path) -> None:
    proc = cli(subcommand, *TINY, "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path),
               "--trainer.enable_progress_bar", "false")
    if subcommand == "validate":
        assert "val/loss" in proc.stdout + proc.stderr


def test_print_config_merges_config_files_in_order(tmp_path: Path) -> None:
    first = tmp_path / "first.yaml"
    second = tmp_path / "second.yaml"
    first.write_text("trainer:\n  max_epochs: 7\n  log_every_n_steps: 3\n")
    second.write_text("trainer:\n  max_epochs: 11\n")
    proc = cli("fit", "--config", str(first), "--config", str(second), *TINY, "--print_config")
    config = yaml.safe_load(proc.stdout)
    assert config["trainer"]["max_epochs"] == 11  # the later file wins
    assert config["trainer"]["log_every_n_steps"] == 3  # keys it does not set survive


def test_short_class_names_resolve() -> None:
    proc = cli("fit", "--model", "Seq2SeqTransformer", "--data", "TranslationDataModule", "--print_config")
    config = yaml.safe_load(proc.stdout)
    assert config["model"]["class_path"] == "lightning_tf.text.Seq2SeqTransformer"
    assert config["data"]["class_path"] == "lightning_tf.text.TranslationDataModule"


def test_unknown_model_class_is_a_clear_error() -> None:
    proc = cli("fit", "--model", "NoSuchModel", "--print_config", check=False, timeout=120)
    assert proc.returncode == 2
    assert "NoSuchModel" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_run_without_logger_writes_no_config_into_the_working_directory(tmp_path: Path) -> None:
    cli("fit", *TINY, "--trainer.logger", "false", "--trainer.max_epochs", "1", "--trainer.enable_checkpointing",
        "false", "--trainer.enable_progress_bar", "false", cwd=tmp_path)
    assert not (tmp_path / "config.yaml").exists()
