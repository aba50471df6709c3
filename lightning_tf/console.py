"""What the ``lightning-tf`` command prints: one-line argument errors for its plain argparse commands
(``export``, ``tour``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

__all__ = ["ArgumentParser"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the house's error format: ``lightning-tf: error: <reason>`` on one line and exit
    status 2; the usage stays behind ``--help`` (``LIGHTNING_TF_DEBUG=1``: argparse's own report)."""

    def error(self, message: str) -> NoReturn:
        if os.environ.get("LIGHTNING_TF_DEBUG"):
            super().error(message)
        sys.stderr.write(f"lightning-tf: error: {message}\n")
        self.exit(2)
