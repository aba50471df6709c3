"""What the command prints (``lightning_tf.cli.console``): the compact metrics table, the narrow filters
that keep library noise off the console only while the command runs, and what the plain commands
load before they parse their arguments."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from lightning_tf.cli.commands import ArgumentParser
from lightning_tf.cli.console import metrics_table, quiet, quiet_eval
from tests.helpers.cli import LogCollector

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------- metrics table


def test_metrics_table_strips_the_stage_and_orders_numbers_naturally() -> None:
    metrics = {"test/acc_class/10": 0.5, "test/acc_class/2": 0.25, "test/loss": 2.329635143, "test/acc": 0.078125}
    table = metrics_table(metrics, "test", width=30)  # one name-value column at this width
    rows = [("acc", "0.07812"), ("acc_class/2", "0.25"), ("acc_class/10", "0.5"), ("loss", "2.33")]
    assert table.splitlines() == ["test:", *(f"  {name:<12}  {value:>7}" for name, value in rows)]


def test_metrics_table_fills_columns_down_then_across_within_the_width() -> None:
    metrics = {f"val/m{i:02d}": float(i) for i in range(10)}
    table = metrics_table(metrics, "val", width=40)
    rows = table.splitlines()[1:]
    assert all(len(row) <= 40 for row in rows), table
    n_cols = len(rows[0].split()) // 2
    assert n_cols > 1 and len(rows) == -(-10 // n_cols)  # as few rows as the columns allow
    assert rows[0].split()[:4] == ["m00", "0", f"m{len(rows):02d}", str(len(rows))]  # read down, then across


def test_metrics_table_without_metrics_says_so() -> None:
    assert metrics_table({}, "test") == "test: no metrics logged"


def test_metrics_table_shows_nan() -> None:
    assert metrics_table({"val/loss": float("nan")}, "val").splitlines()[1].split() == ["loss", "nan"]


# ------------------------------------------------------------------------------------ quiet console

LEAFSPEC = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."


def _warn_from(module: str, message: str) -> None:
    warnings.warn_explicit(message, FutureWarning, filename=f"{module.replace('.', '/')}.py", lineno=1, module=module)


def test_quiet_silences_listed_warnings_from_their_module_only_and_only_inside() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet():
            _warn_from("lightning.pytorch.utilities._pytree", LEAFSPEC)
            _warn_from("somebody.else", LEAFSPEC)  # the same words elsewhere are not Lightning's call
        _warn_from("lightning.pytorch.utilities._pytree", LEAFSPEC)  # after the block: shown again
    assert [w.filename for w in caught] == ["somebody/else.py", "lightning/pytorch/utilities/_pytree.py"]


def test_quiet_eval_silences_checkpoint_callback_warnings_until_the_block_ends() -> None:
    message = "The dirpath has changed from 'a' to 'b', therefore `best_model_score` won't be reloaded."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet():
            _warn_from("lightning.pytorch.callbacks.model_checkpoint", message)  # fit: a resume into a new folder
            quiet_eval()
            _warn_from("lightning.pytorch.callbacks.model_checkpoint", message)
        _warn_from("lightning.pytorch.callbacks.model_checkpoint", message)
    assert len(caught) == 2


def test_quiet_drops_listed_info_lines_only_inside() -> None:
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    handler, level = LogCollector(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with quiet():
            logger.info("💡 Tip: For seamless cloud logging, try installing litlogger")
            logger.info("TPU available: False, using: 0 TPU cores")
            logger.info("GPU available: False, used: False")
        logger.info("💡 Tip: after the block")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert handler.messages == ["GPU available: False, used: False", "💡 Tip: after the block"]


# ----------------------------------------------------------------------------- plain commands


def test_argparse_errors_are_one_line_with_status_2(capsys: pytest.CaptureFixture) -> None:
    parser = ArgumentParser(prog="lightning-tf export")
    parser.add_argument("--format", choices=("safetensors", "onnx"))
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--format", "tflite"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "lightning-tf: error: argument --format: invalid choice: 'tflite' (choose from 'safetensors', 'onnx')\n"
    )


@pytest.mark.parametrize(
    "args",
    [["--help"], ["export", "--help"], ["export", "--format", "onnx"], ["tour", "--help"], ["tour", "--tasks", "x"]],
    ids=" ".join,
)
def test_help_and_argument_errors_of_plain_commands_load_neither_torch_nor_lightning(args: list[str]) -> None:
    code = (
        "import json, sys\n"
        "from lightning_tf.__main__ import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'lightning'))\n"
        "print(json.dumps(loaded))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    if args[-1] != "--help":
        assert proc.stderr.startswith("lightning-tf: error: ") and len(proc.stderr.splitlines()) == 1, proc.stderr
