"""Sequence reversal: a minimal encoder-decoder task on generated data.

It exercises the whole stack (core, LightningModule, DataModule, CLI, logger, checkpoints) in a
couple of minutes on a CPU, and serves as the main job until the real tasks land.
"""

from .data import ReverseDataModule
from .module import ReverseSeq2Seq

__all__ = ["ReverseDataModule", "ReverseSeq2Seq"]
