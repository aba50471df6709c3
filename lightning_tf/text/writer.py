"""Writes the translations of ``predict`` to a text file, one line per input line, in input order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

from lightning_tf.training import gather_objects, prediction_path

__all__ = ["TranslationWriter"]


class TranslationWriter(BasePredictionWriter):
    """Collect ``{"index", "translation"}`` predictions (from :meth:`Seq2SeqTransformer.predict_step`)
    and write them to one text file sorted by input line, gathering every rank's share first.

    :meth:`Seq2SeqTransformer.configure_callbacks` adds one with the default path, so ``predict`` writes
    ``translations.txt`` into the run folder on its own; a writer given on the command line (to choose
    the file) takes its place::

        lightning-tf predict --config runs/lightning-tf/<run id>/config.yaml --ckpt_path last.ckpt \\
            --data.predict_file in.txt \\
            --trainer.callbacks+=lightning_tf.text.TranslationWriter --trainer.callbacks.output_file out.txt

    Args:
        output_file: path of the text file to write (parent directories are created); None:
            ``translations.txt`` in the run folder (``translations-1.txt``, ... when an earlier
            prediction of that run left one).
    """

    def __init__(self, output_file: str | None = None) -> None:
        super().__init__(write_interval="epoch")
        self.output_file = output_file

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        pairs = [
            (int(i), t) for batch in predictions for i, t in zip(batch["index"], batch["translation"], strict=True)
        ]
        pairs = [p for part in gather_objects(pairs) for p in part]
        if not trainer.is_global_zero:
            return
        by_line = dict(pairs)  # every process may decode every line (use_distributed_sampler=False): keep one
        # the input's line count when the DataModule knows it, so that lost last lines are noticed too
        predict_set = getattr(getattr(trainer, "datamodule", None), "predict_set", None)
        n = len(predict_set) if predict_set is not None else max(by_line, default=-1) + 1
        path = prediction_path(trainer, self.output_file, "translations.txt")
        if sorted(by_line) != list(range(n)):
            missing = sorted(set(range(n)) - set(by_line))
            raise RuntimeError(f"{path}: predictions lack input lines {missing[:10]} (of {n} lines)")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(by_line[i].replace("\n", " ") + "\n" for i in range(len(by_line))), encoding="utf-8")
        print(f"wrote {len(by_line)} translations to {path}")
