"""Data -> model argument links of the ``lightning-tf`` command: arguments the DataModule knows
(vocabulary size, classes, channels, image size, features, lengths) are stated once, under ``data:``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_tf.cli.lightning_cli import LightningTFCLI, make_cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["lightning-tf"])  # LightningCLI compares its args with the command line


def build(*args: str) -> LightningTFCLI:
    """The CLI's model and DataModule for ``args``, without running anything."""
    return make_cli(
        [*args, "--trainer.logger", "false", "--trainer.enable_checkpointing", "false"],
        run=False,
        save_config_callback=None,
    )


def test_kline_lengths_and_channels_flow_from_the_data() -> None:
    cli = build(
        "--config",
        str(ROOT / "configs/kline/msft_daily.yaml"),
        "--data.init_args.context_len",
        "32",
        "--data.init_args.horizon",
        "3",
    )
    hp, dm = cli.model.hparams, cli.datamodule
    assert (hp.context_len, hp.horizon) == (32, 3)
    assert (hp.n_features, hp.n_targets) == (dm.n_features, dm.n_targets) and dm.n_features > 1
    assert cli.model.net.backbone.n_patches == (32 + 4 - 8) // 4 + 1  # the model was built for the linked length


def test_vision_classes_channels_and_size_flow_from_the_data() -> None:
    cli = build("--config", str(ROOT / "configs/vision/digits.yaml"), "--data.init_args.image_size", "24")
    hp = cli.model.hparams
    assert (hp.num_classes, hp.in_chans, hp.image_size) == (10, 1, 24)
    assert cli.model.net.image_size == 24


def test_text_vocab_size_flows_from_the_data() -> None:
    cli = build("--config", str(ROOT / "configs/text/reverse.yaml"), "--data.init_args.vocab_size", "80")
    assert cli.model.hparams.vocab_size == 80
    assert cli.model.head.weight.shape[0] == 80


def test_a_model_value_matching_the_data_is_accepted() -> None:
    cli = build("--config", str(ROOT / "configs/vision/digits.yaml"), "--model.init_args.num_classes", "10")
    assert cli.model.hparams.num_classes == 10


def test_a_mismatch_names_both_values() -> None:
    with pytest.raises(ValueError, match=r"model\.num_classes \(7\) differs from the data's num_classes \(10\)"):
        build("--config", str(ROOT / "configs/vision/digits.yaml"), "--model.init_args.num_classes", "7")


@pytest.mark.integration
def test_a_mismatch_through_the_command_is_one_line_without_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    env.pop("LIGHTNING_TF_DEBUG", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_tf",
            "fit",
            "--config",
            "configs/kline/msft_daily.yaml",
            "--config",
            "configs/trainer/debug.yaml",
            "--model.init_args.horizon",
            "9",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "model.horizon (9) differs from the data's horizon (5)" in proc.stderr


@pytest.mark.integration
def test_ckpt_path_last_under_a_new_wandb_run_is_refused(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new wandb run has a new, empty checkpoint folder: `--ckpt_path last` would silently start over."""
    from lightning_tf.__main__ import main

    monkeypatch.setattr("sys.argv", ["lightning-tf"])
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                str(ROOT / "configs/trainer/default.yaml"),
                "--config",
                str(ROOT / "configs/text/reverse.yaml"),
                "--ckpt_path",
                "last",
            ]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--ckpt_path last" in err and "--trainer.logger.init_args.id <run id>" in err and "Traceback" not in err


def test_printing_a_datamodule_builds_nothing() -> None:
    """jsonargparse formats the DataModule into a debug line for each link it skips; Lightning's own
    ``__str__`` would build every loader (the training corpus, predict windows without statistics)."""
    from lightning_tf.kline import KLineDataModule
    from lightning_tf.text import TranslationDataModule
    from lightning_tf.vision import ImageDataModule

    dms = [KLineDataModule(), TranslationDataModule(), ImageDataModule()]
    assert [str(dm) for dm in dms] == [
        "KLineDataModule(path='data/msft.csv')",
        "TranslationDataModule(dataset='synthetic')",
        "ImageDataModule(dataset='digits')",
    ]
    assert not dms[0].datasets and not hasattr(dms[0], "_predict_frame")
