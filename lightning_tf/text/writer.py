"""Writes the translations of ``predict`` to a text file, one line per input line, in input order."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

__all__ = ["TranslationWriter"]

log = logging.getLogger(__name__)


class TranslationWriter(BasePredictionWriter):
    """Collect ``{"index", "translation"}`` predictions (from :meth:`Seq2SeqTransformer.predict_step`)
    and write them to ``output_file`` sorted by input line, gathering every rank's share first.

    A callback rather than a model argument, so it can be set on the command line even when the model's
    hyperparameters come from ``--ckpt_path``::

        lightning-tf predict --config configs/text/synthetic.yaml --ckpt_path last.ckpt \\
            --data.predict_file in.txt --trainer.default_root_dir runs \\
            --trainer.callbacks+=lightning_tf.text.TranslationWriter --trainer.callbacks.output_file out.txt

    Args:
        output_file: path of the text file to write (parent directories are created).
    """

    def __init__(self, output_file: str) -> None:
        super().__init__(write_interval="epoch")
        self.output_file = output_file

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        pairs = [
            (int(i), t) for batch in predictions for i, t in zip(batch["index"], batch["translation"], strict=True)
        ]
        if trainer.world_size > 1:
            parts: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(parts, pairs)
            pairs = [p for part in parts for p in part]
        if not trainer.is_global_zero:
            return
        by_line = dict(pairs)  # every process may decode every line (use_distributed_sampler=False): keep one
        # the input's line count when the DataModule knows it, so that lost last lines are noticed too
        predict_set = getattr(getattr(trainer, "datamodule", None), "predict_set", None)
        n = len(predict_set) if predict_set is not None else max(by_line, default=-1) + 1
        if sorted(by_line) != list(range(n)):
            missing = sorted(set(range(n)) - set(by_line))
            raise RuntimeError(f"{self.output_file}: predictions lack input lines {missing[:10]} (of {n} lines)")
        path = Path(self.output_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(by_line[i].replace("\n", " ") + "\n" for i in range(len(by_line))), encoding="utf-8")
        log.info("wrote %d translations to %s", len(by_line), path)
