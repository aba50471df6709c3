"""TranslationWriter's merge: repeated lines kept once, input order restored, lost lines named."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from lightning_tf.text import TranslationWriter


def _trainer(n_lines: int) -> SimpleNamespace:
    return SimpleNamespace(world_size=1, is_global_zero=True, datamodule=SimpleNamespace(predict_set=[None] * n_lines))


def test_writes_each_line_once_in_input_order(tmp_path: Path) -> None:
    writer = TranslationWriter(str(tmp_path / "out.txt"))
    batches = [{"index": [2, 0], "translation": ["c", "a"]}, {"index": [1, 2], "translation": ["b", "c"]}]
    writer.write_on_epoch_end(_trainer(3), None, batches, [])  # type: ignore[arg-type]
    assert (tmp_path / "out.txt").read_text() == "a\nb\nc\n"


def test_a_lost_last_line_is_an_error(tmp_path: Path) -> None:
    writer = TranslationWriter(str(tmp_path / "out.txt"))
    batches = [{"index": [0, 1], "translation": ["a", "b"]}]
    with pytest.raises(RuntimeError, match=r"lack input lines \[2\] \(of 3 lines\)"):
        writer.write_on_epoch_end(_trainer(3), None, batches, [])  # type: ignore[arg-type]
    assert not (tmp_path / "out.txt").exists()
