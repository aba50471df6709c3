"""TranslationWriter as the model's default callback: ``predict`` writes ``translations.txt`` into the run
folder without overwriting an earlier one, says what it wrote, and a writer given to the Trainer wins."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger

from lightning_tf.text import Seq2SeqTransformer, TranslationWriter
from tests.helpers.text import IdDataModule, make_batch

TINY = dict(vocab_size=12, d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.0, beam_size=1, extra_len=3)


def _trainer(root: Path, **kwargs: object) -> Trainer:
    quiet = dict(enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
    return Trainer(**quiet, **kwargs)  # type: ignore[arg-type]


def test_predict_writes_translations_into_the_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    dm = IdDataModule(n_val=10, batch_size=4)
    model = Seq2SeqTransformer(**TINY)
    logger = CSVLogger(tmp_path)
    trainer = _trainer(tmp_path, logger=logger)
    trainer.predict(model, datamodule=dm)
    run = Path(logger.log_dir)
    first = run / "translations.txt"
    expected = model._texts(model.generate(make_batch(dm.val_pairs)["src"]))
    assert first.read_text().splitlines() == expected
    assert capsys.readouterr().out.strip().endswith(f"wrote 10 translations to {first}")
    assert sum(isinstance(c, TranslationWriter) for c in trainer.callbacks) == 1
    trainer.predict(model, datamodule=dm)  # a second prediction of the same run keeps the first file
    assert sum(isinstance(c, TranslationWriter) for c in trainer.callbacks) == 1
    assert (run / "translations-1.txt").read_text() == first.read_text()


def test_a_writer_given_to_the_trainer_replaces_the_default(tmp_path: Path) -> None:
    model = Seq2SeqTransformer(**TINY)
    writer = TranslationWriter(str(tmp_path / "mine.txt"))
    trainer = _trainer(tmp_path, logger=False, callbacks=[writer])
    trainer.predict(model, datamodule=IdDataModule(n_val=6, batch_size=4))
    assert [c for c in trainer.callbacks if isinstance(c, TranslationWriter)] == [writer]
    assert len((tmp_path / "mine.txt").read_text().splitlines()) == 6
    assert not (tmp_path / "translations.txt").exists()
