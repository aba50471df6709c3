"""Writes the classifications of ``predict`` to a CSV file, one row per image in input order:
``file, top1_class, top1_prob, ..., topk_class, topk_prob``, and ``label`` (the true class) when the
images have one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

from lightning_tf.training import gather_predictions, interleave, predict_size, prediction_path

__all__ = ["ClassificationWriter"]


class ClassificationWriter(BasePredictionWriter):
    """Collect the ``{"probs", "file", "target", "index"}`` batches of :meth:`ViTClassifier.predict_step
    <lightning_tf.vision.ViTClassifier.predict_step>`, gather every process's share and write the ``top_k``
    classes of each image (named by the module's ``class_names``) once, on global rank 0.

    :class:`~lightning_tf.vision.ViTClassifier` adds one with the defaults; give your own to choose the
    file or ``top_k`` (it takes the place of the default one), also when the model comes from
    ``--ckpt_path``::

        lightning-tf predict --config configs/vision/digits.yaml --ckpt_path last.ckpt \\
            --data.predict_path my_images/ \\
            --trainer.callbacks+=lightning_tf.vision.ClassificationWriter \\
            --trainer.callbacks.output_file out/pred.csv --trainer.callbacks.top_k 3

    Images without a name (a plain tensor batch) are numbered in input order (``0``, ``1``, ...).

    Args:
        output_file: the CSV to write (relative to the working directory; parent folders are created);
            default: ``predictions.csv`` in the run directory (``predictions-1.csv``, ... when an earlier
            predict left that name).
        top_k: classes per image, most probable first (all of them when there are fewer).
    """

    def __init__(self, output_file: str | None = None, top_k: int = 5) -> None:
        super().__init__(write_interval="epoch")
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        self.output_file = output_file
        self.top_k = top_k

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        parts = gather_predictions(predictions)  # every process's batches, in rank order
        if not trainer.is_global_zero:
            return
        merged = _merge_predictions(parts, predict_size(trainer))
        if not merged:
            raise RuntimeError("no predictions collected: the predict loader gave no batch")
        path = prediction_path(trainer, self.output_file, "predictions.csv")
        names = getattr(pl_module, "class_names", None) or [str(i) for i in range(merged[0]["probs"].shape[-1])]
        n = _write_csv(path, merged[0], names, self.top_k)
        print(f"wrote {n} predictions to {path}")


def _write_csv(path: Path, merged: dict[str, Any], class_names: Sequence[str], top_k: int) -> int:
    """Write one merged prediction batch (``{"file", "probs", "target"?}``) as CSV; return the row count."""
    import pandas as pd

    probs = merged["probs"]  # (n, K)
    top_p, top_i = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # (n, k) each
    rows: dict[str, list[Any]] = {"file": list(merged["file"])}
    for j in range(top_i.shape[1]):
        rows[f"top{j + 1}_class"] = [class_names[c] for c in top_i[:, j].tolist()]
        rows[f"top{j + 1}_prob"] = [round(p, 6) for p in top_p[:, j].tolist()]
    if "target" in merged:
        target = merged["target"].tolist()
        if min(target) >= 0:  # -1: an image file without a label
            rows["label"] = [class_names[t] for t in target]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)
    return len(top_i)


def _merge_predictions(parts: list[list[dict[str, Any]]], n: int | None = None) -> list[dict[str, Any]]:
    """Every process's prediction batches (``parts[rank]``) as one batch in input order, each image once.

    Batches that carry the dataset ``index`` (ImageDataModule's) are sorted by it, and an image that a
    padding sampler gave to two processes is kept once; other batches are put back in order from the
    strided shares of Lightning's prediction sampler (process r holds images r, r + R, ... of ``n``).
    Images without a ``file`` name are then numbered by their place in that order.
    """
    shares = [
        [
            (
                b["file"][i] if "file" in b else None,
                b["probs"][i],
                b["target"][i] if "target" in b else None,
                int(b["index"][i]) if "index" in b else None,
            )
            for b in batches
            for i in range(len(b["probs"]))
        ]
        for batches in parts
    ]
    rows = [row for share in shares for row in share]
    if rows and all(row[3] is not None for row in rows):
        rows = list({row[3]: row for row in reversed(rows)}.values())  # one row per index
        rows.sort(key=lambda row: row[3])
    else:
        rows = interleave(shares, n)
    if not rows:
        return []
    merged: dict[str, Any] = {
        "file": [str(k) if row[0] is None else row[0] for k, row in enumerate(rows)],
        "probs": torch.stack([row[1] for row in rows]),  # (n, K)
    }
    if all(row[2] is not None for row in rows):
        merged["target"] = torch.stack([torch.as_tensor(row[2]) for row in rows])  # (n,)
    if all(row[3] is not None for row in rows):
        merged["index"] = torch.tensor([row[3] for row in rows])  # (n,)
    return [merged]
