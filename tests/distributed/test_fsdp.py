"""configs/trainer/fsdp.yaml: parses through the CLI, builds an FSDPStrategy whose auto-wrap policy makes
each EncoderLayer / DecoderLayer of every task its own FSDP unit. (Lightning runs FSDP on CUDA only, so
on CPU the strategy is built and its policy applied, not trained with.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from jsonargparse import ArgumentParser
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn

from lightning_tf.__main__ import main
from lightning_tf.core import DecoderLayer, EncoderLayer

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "trainer" / "fsdp.yaml"


def _strategy() -> FSDPStrategy:
    parser = ArgumentParser()
    parser.add_argument("--strategy", type=FSDPStrategy)
    cfg = parser.parse_object({"strategy": yaml.safe_load(CONFIG.read_text())["trainer"]["strategy"]})
    return parser.instantiate(cfg).strategy


def _units(model: nn.Module, strategy: FSDPStrategy) -> list[str]:
    policy = strategy.kwargs["auto_wrap_policy"]
    return [name for name, m in model.named_modules() if isinstance(m, tuple(policy._module_classes))]


def test_config_parses_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(CONFIG), "--config", "configs/text/copy.yaml", "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    strategy = printed["trainer"]["strategy"]
    assert strategy["class_path"] == "lightning.pytorch.strategies.FSDPStrategy"
    assert strategy["init_args"]["auto_wrap_policy"]["init_args"]["module_classes"] == [
        "lightning_tf.core.EncoderLayer",
        "lightning_tf.core.DecoderLayer",
    ]


def test_wrap_policy_makes_each_transformer_layer_a_unit() -> None:
    from lightning_tf.kline import KLineForecaster
    from lightning_tf.text import Seq2SeqTransformer
    from lightning_tf.vision import ViTClassifier

    strategy = _strategy()
    assert strategy.sharding_strategy.name == "FULL_SHARD"
    assert strategy.kwargs["use_orig_params"]  # the modules' own parameter groups (weight decay) still work
    text = Seq2SeqTransformer(vocab_size=40, d_model=16, n_heads=2, n_layers=2, n_decoder_layers=3, d_ff=32)
    units = _units(text, strategy)
    assert len(units) == 5 and sum(isinstance(text.get_submodule(u), DecoderLayer) for u in units) == 3
    vit = ViTClassifier(preset="digits", num_classes=10, in_chans=1)
    assert len(_units(vit, strategy)) == sum(isinstance(m, EncoderLayer) for m in vit.modules()) > 0
    kline = KLineForecaster(n_layers=2)
    assert len(_units(kline, strategy)) == 2


def test_fsdp_needs_a_gpu() -> None:
    with pytest.raises(ValueError, match="requires a GPU accelerator"):
        Trainer(accelerator="cpu", devices=1, strategy=_strategy(), logger=False)
