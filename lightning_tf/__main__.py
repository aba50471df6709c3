"""The ``lightning-tf`` command (also ``python -m lightning_tf``): the command table is
:mod:`lightning_tf.cli.commands`."""

from __future__ import annotations

from lightning_tf.cli.commands import COMMANDS, main

__all__ = ["COMMANDS", "main"]

if __name__ == "__main__":
    main()
