"""What was written before the package took its layout (``training/``, ``cli/``) still works: checkpoints saved
then load, and run configs naming the moved callback and plugin classes by their old paths still build; code that
imports the universe workflow by its old module names gets the same objects."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
from jsonargparse import ArgumentParser
from lightning.pytorch import Callback
from lightning.pytorch.plugins import CheckpointIO

import lightning_tf
from lightning_tf.export import load_module
from lightning_tf.training import check_checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints_before_layout"

#: the class paths a run config saved before the move names (configs/trainer/default.yaml's callbacks, plugins)
OLD_CLASS_PATHS = {
    "lightning_tf.checkpoints.AtomicCheckpointIO": "lightning_tf.training.checkpoints.AtomicCheckpointIO",
    "lightning_tf.preemption.LastCheckpoint": "lightning_tf.training.preemption.LastCheckpoint",
    "lightning_tf.callbacks.RNGState": "lightning_tf.training.callbacks.RNGState",
    "lightning_tf.callbacks.NaNGuard": "lightning_tf.training.callbacks.NaNGuard",
    "lightning_tf.callbacks.CompactModelSummary": "lightning_tf.training.callbacks.CompactModelSummary",
    "lightning_tf.runs.RunConfigCallback": "lightning_tf.cli.runs.RunConfigCallback",
}


def _import(path: str) -> object:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("old", sorted(OLD_CLASS_PATHS))
def test_an_old_class_path_is_the_class_at_its_new_place(old: str) -> None:
    assert _import(old) is _import(OLD_CLASS_PATHS[old])


def test_every_moved_module_keeps_its_old_name() -> None:
    for old, new in lightning_tf.MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old


#: what code written before the universe workflow moved into ``kline/universe/`` imports by the old module names
UNIVERSE_NAMES = {
    "lightning_tf.kline.walkforward": ("Fold", "folds"),
    "lightning_tf.kline.evaluation.portfolio": ("PortfolioEvaluation", "evaluate_predictions", "probabilistic_scores"),
    "lightning_tf.kline.evaluation.universe_baselines": ("LightGBMBaseline", "flatten_windows", "momentum_predictions"),
    "lightning_tf.kline.evaluation.walkforward_report": ("FORECASTERS", "default_top_k", "evaluate_forecasters"),
    "lightning_tf.kline.evaluation.fold_forecasts": ("lightgbm_column", "momentum_column", "realised_column"),
}


@pytest.mark.parametrize("old", sorted(UNIVERSE_NAMES))
def test_the_universe_workflows_old_imports_give_its_objects(old: str) -> None:
    new = importlib.import_module(lightning_tf.MOVED[old])
    for name in UNIVERSE_NAMES[old]:
        assert _import(f"{old}.{name}") is getattr(new, name), f"{old}.{name}"


def test_a_saved_config_with_old_class_paths_builds_its_callbacks(tmp_path: Path) -> None:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--callbacks", type=list[Callback])
    parser.add_argument("--plugins", type=list[CheckpointIO])
    config = tmp_path / "config.yaml"
    config.write_text(
        "callbacks:\n"
        "  - class_path: lightning_tf.preemption.LastCheckpoint\n"
        "  - class_path: lightning_tf.callbacks.RNGState\n"
        "  - class_path: lightning_tf.callbacks.NaNGuard\n"
        "plugins:\n"
        "  - class_path: lightning_tf.checkpoints.AtomicCheckpointIO\n"
    )
    built = parser.instantiate(parser.parse_path(str(config)))
    names = [type(c).__module__ + "." + type(c).__qualname__ for c in built.callbacks + built.plugins]
    assert names == [
        "lightning_tf.training.preemption.LastCheckpoint",
        "lightning_tf.training.callbacks.RNGState",
        "lightning_tf.training.callbacks.NaNGuard",
        "lightning_tf.training.checkpoints.AtomicCheckpointIO",
    ]


@pytest.mark.parametrize("task", ["text", "vision", "kline"])
def test_a_checkpoint_written_before_the_move_loads(task: str) -> None:
    path = FIXTURES / f"{task}.ckpt"
    check_checkpoint(path)  # format stamp, CRC and class: one line if any were wrong
    model = load_module(path)
    saved = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    state = model.state_dict()
    assert set(state) == set(saved)
    for name, tensor in saved.items():
        assert torch.equal(state[name], tensor), name
