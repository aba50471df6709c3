"""The ``lightning-tf`` command: LightningCLI in subclass mode.

``lightning-tf fit|validate|test|predict --config a.yaml --config b.yaml ...``: the model and
data are chosen by class path (or, for the classes of this package, by class name), and several
config files merge in order, later ones overriding earlier ones.
"""

from __future__ import annotations

import sys

from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

# Importing the task packages registers their classes, so they resolve by short name.
import lightning_tf.kline  # noqa: F401
import lightning_tf.text  # noqa: F401
import lightning_tf.toy  # noqa: F401
import lightning_tf.vision  # noqa: F401

__all__ = ["LightningTFCLI", "main"]


class RunConfigCallback(SaveConfigCallback):
    """Saves the resolved config into the run directory, and only when there is one: without a
    logger (``--trainer.logger false``, the debug config) nothing is written into the working
    directory."""

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if trainer.logger is None:
            return
        super().setup(trainer, pl_module, stage)


class LightningTFCLI(LightningCLI):
    """LightningCLI with one extra switch, ``--test_after_fit``: after ``fit``, test the best
    checkpoint on the same DataModule in the same process."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--test_after_fit", type=bool, default=False, help="after fit, run test on the best checkpoint"
        )

    def after_fit(self) -> None:
        if self.config[self.config.subcommand].get("test_after_fit"):
            has_best = bool(getattr(self.trainer.checkpoint_callback, "best_model_path", ""))
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path="best" if has_best else None)


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``lightning-tf`` console script."""
    LightningTFCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_callback=RunConfigCallback,
        save_config_kwargs={"overwrite": True},
        args=args,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
