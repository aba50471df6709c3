"""Argument errors of the ``lightning-tf`` command: one line naming the argument and the reason, exit
status 2, no usage text, no traceback; ``LIGHTNING_TF_DEBUG=1`` shows jsonargparse's full report.

In process (``lightning_tf.__main__.main``), on the configs a user starts from; every case fails while
the config is parsed or the classes are built, before any data is read or any step runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lightning_tf.__main__ import main

ROOT = Path(__file__).resolve().parents[1]
# what a case would run if it were not refused: one batch, nothing written
SAFE = ["--trainer.logger", "false", "--trainer.fast_dev_run", "true", "--trainer.enable_progress_bar", "false"]
TEXT = ["fit", "--config", str(ROOT / "configs/text/reverse.yaml"), *SAFE]
VISION = ["fit", "--config", str(ROOT / "configs/vision/digits.yaml"), *SAFE]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # whatever a run would write lands here
    monkeypatch.setattr("sys.argv", ["lightning-tf"])  # LightningCLI compares its args with the command line
    monkeypatch.delenv("LIGHTNING_TF_DEBUG", raising=False)


def one_line_error(args: list[str], capsys: pytest.CaptureFixture) -> str:
    """The command's error line, after checking the exit status and that it is the only stderr line."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def one_class_folder(tmp_path: Path) -> Path:
    from PIL import Image

    root = tmp_path / "images"
    (root / "cat").mkdir(parents=True)
    for i in range(2):
        Image.new("L", (8, 8), color=40 * i).save(root / "cat" / f"{i}.png")
    return root


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param([*VISION, "--data.batch_size", "0"], "data.batch_size (0) must be >= 1", id="batch-size-0"),
        pytest.param(
            [*TEXT, "--model.dropout", "1.5"],
            "model.dropout: dropout probability has to be between 0 and 1, but got 1.5",
            id="dropout-1.5",
        ),
        pytest.param(
            [*TEXT, "--model.n_heads", "3"],
            "model.d_model (64) must be divisible by model.n_heads (3)",
            id="heads-not-dividing-d_model",
        ),
        pytest.param(
            # image_size comes from the data (a link): the message names the option that sets it
            [*VISION, "--model.patch_size", "5"],
            "model.patch_size (5) must divide data.image_size (16)",
            id="patch-not-dividing-image",
        ),
        pytest.param(
            [*TEXT, "--model.pos_encoding", "rope", "--model.d_model", "60"],
            "model.pos_encoding 'rope' needs an even head dimension; model.d_model (60) / model.n_heads (4) = 15",
            id="rope-odd-head-dim",
        ),
        pytest.param(
            [*TEXT, "--data.vocab_size", "5"],
            "data.vocab_size (5) must be at least 8",
            id="vocabulary-too-small",
        ),
        pytest.param(
            [*TEXT, "--model.pos_encoding", "wavelet"],
            "model.pos_encoding: 'wavelet' is not one of sinusoidal, sinusoidal_halves, learned, rope, alibi, relative, none",
            id="invalid-choice",
        ),
        pytest.param(
            [*TEXT, "--model.lrr", "0.1"],
            "model.lrr: no such argument of Seq2SeqTransformer; did you mean lr?",
            id="misspelled-model-argument",
        ),
        pytest.param(
            [*TEXT, "--trainer.max_epoks", "2"],
            "unrecognized argument --trainer.max_epoks; did you mean --trainer.max_epochs? (see --help)",
            id="misspelled-trainer-argument",
        ),
        pytest.param(
            # an overlay config (init_args only) given alone: the config that names the class is missing
            ["fit", "--config", "configs/trainer/default.yaml", "--config", "configs/kline/chronos_bolt.yaml"],
            "model.pretrained: model.init_args are given but no model class: put a config that names "
            "model.class_path (configs/<task>/<experiment>.yaml) before this one",
            id="overlay-config-alone",
        ),
        pytest.param(["fitt"], "unknown command 'fitt'; did you mean fit?", id="unknown-command"),
        pytest.param(
            ["train"],
            "unknown command 'train'; commands are fit, validate, test, predict, export, average, compare, serve, tour, tune, walkforward",
            id="unknown-command-unlike-any",
        ),
    ],
)
def test_argument_error_is_one_line_with_status_2(
    args: list[str], expected: str, capsys: pytest.CaptureFixture
) -> None:
    assert one_line_error(args, capsys) == f"lightning-tf: error: {expected}"


def test_single_class_image_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = one_class_folder(tmp_path)
    line = one_line_error([*VISION, "--data.dataset", "image_folder", "--data.root", str(root)], capsys)
    assert line == (
        f"lightning-tf: error: data.root: {root}: one class folder (cat); a classifier needs two or more: "
        "add a folder of images per class"
    )


def test_debug_shows_the_full_parser_report(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("LIGHTNING_TF_DEBUG", "1")
    with pytest.raises(SystemExit) as exit_info:
        main([*TEXT, "--model.pos_encoding", "wavelet"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: lightning-tf" in err  # jsonargparse's own report, usage first
    assert "Does not validate against any of the Union subtypes" in err and "wavelet" in err


def test_debug_raises_a_class_error_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_TF_DEBUG", "1")
    with pytest.raises(ValueError, match="Does not validate against any of the Union subtypes") as info:
        main([*TEXT, "--model.dropout", "1.5"])
    assert "dropout probability has to be between 0 and 1, but got 1.5" in str(info.value.__cause__)


def test_a_callback_the_trainer_refuses_twice_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two EarlyStopping callbacks on one metric (one from the trainer config, one added): Lightning's RuntimeError
    at the Trainer's construction becomes one line naming the trainer."""
    stopper = {"class_path": "lightning.pytorch.callbacks.EarlyStopping", "init_args": {"monitor": "val/loss"}}
    (tmp_path / "twice.yaml").write_text(yaml.safe_dump({"trainer": {"callbacks": [stopper, stopper]}}))
    line = one_line_error([*VISION, "--config", str(tmp_path / "twice.yaml")], capsys)
    assert line == (
        "lightning-tf: error: trainer: Found more than one stateful callback of type `EarlyStopping` (a callback "
        "given twice? the trainer config may have it already)"
    )
