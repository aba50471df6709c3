"""jsonargparse's private names the package relies on, and why; ``tests/training/private/test_jsonargparse.py``
fails as soon as a jsonargparse release changes one of them.

* :func:`option_strings`: every option a parser takes (``--model.init_args.lr``, ``--trainer.max_epochs``), which
  a one-line error compares an unknown option with to suggest the nearest. jsonargparse's parsers are argparse
  parsers and keep their actions in argparse's ``_actions``; neither library lists them in public.
"""

from __future__ import annotations

from jsonargparse import ArgumentParser

__all__ = ["OVERRIDES", "option_strings"]

#: jsonargparse's private methods that classes of the package override -> those classes
OVERRIDES: dict[str, tuple[str, ...]] = {}


def option_strings(parser: ArgumentParser) -> list[str]:
    """The options ``parser`` takes, in the order they were added (``-h``, ``--help``, ``--config``, ...)."""
    return [option for action in parser._actions for option in action.option_strings]
