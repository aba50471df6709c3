"""``lightning-tf average``: the mean of several checkpoints' parameters as one checkpoint
(:func:`lightning_tf.training.average_checkpoints` does the work)."""

from __future__ import annotations

__all__ = ["average"]


def average(ckpt_paths: list[str], *, output: str) -> None:
    """Average the parameters of checkpoints of one model (e.g. a run's last epochs); the average predicts,
    exports and serves like any checkpoint.

    Args:
        ckpt_paths: Lightning checkpoints (.ckpt) of the same model
        output: the averaged checkpoint to write (.ckpt)
    """
    from lightning_tf.training import average_checkpoints

    out = average_checkpoints(ckpt_paths, output)
    print(f"averaged {len(ckpt_paths)} checkpoints -> {out}")
