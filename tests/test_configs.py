"""Every YAML under configs/ parses, and each experiment config runs one batch through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.test_cli import ROOT, cli

CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))
EXPERIMENTS = [p for p in CONFIGS if p.parent.name != "trainer"]


def test_configs_exist() -> None:
    names = {p.relative_to(ROOT / "configs").as_posix() for p in CONFIGS}
    assert {"trainer/default.yaml", "trainer/debug.yaml", "trainer/ddp.yaml", "trainer/bf16.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT / "configs").as_posix())
def test_config_starts_with_a_comment_and_parses(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("#"), f"{path} must start with a comment saying what it does"
    assert "lightning-tf " in text.split("\n\n")[0] or path.parent.name == "trainer", f"{path}: header lacks the command"
    assert isinstance(yaml.safe_load(text), dict)


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.relative_to(ROOT / "configs").as_posix())
def test_experiment_fast_dev_run(path: Path) -> None:
    cli("fit", "--config", str(path), "--config", "configs/trainer/debug.yaml")


TINY = ["--model", "tests.helpers.tiny.TinyRegressor", "--data", "tests.helpers.tiny.TinyDataModule"]


@pytest.mark.parametrize(
    ("extra", "world_size"),
    [
        (["--config", "configs/trainer/bf16.yaml", "--trainer.accelerator", "cpu"], 1),
        (["--config", "configs/trainer/ddp.yaml", "--trainer.accelerator", "cpu", "--trainer.devices", "2"], 2),
    ],
    ids=["bf16", "ddp-2-cpu-processes"],
)
def test_trainer_configs_train(extra: list[str], world_size: int, tmp_path: Path) -> None:
    """bf16 autocast and DDP (gloo, two CPU processes) each run a short fit and leave a checkpoint;
    under DDP each process sees half the data, so an epoch has half the steps."""
    cli(
        "fit", *extra, *TINY, "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false",
        "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
    )
    steps = 2 * (64 // 16) // world_size  # 2 epochs of 64 samples in batches of 16, split across processes
    assert [p.name for p in (tmp_path / "checkpoints").glob("*.ckpt")] == [f"epoch=1-step={steps}.ckpt"]
