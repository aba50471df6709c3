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
