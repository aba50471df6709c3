"""A module's training mode around inference: :func:`evaluating`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

__all__ = ["evaluating"]


@contextmanager
def evaluating(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` in eval mode inside the block; after it, each submodule is back in the mode it had (a frozen
    part kept in eval mode inside a training model stays in eval mode).

    Nothing is switched when no submodule is training, as in a served model: ``eval()`` and ``train()`` walk
    every submodule, which costs more than a small model's forward pass on a small batch.
    """
    training = [m for m in module.modules() if m.training]
    if not training:
        yield module
        return
    module.eval()
    try:
        yield module
    finally:
        for m in training:
            m.training = True
