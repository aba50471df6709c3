"""Names of a package loaded on first use (PEP 562), so that importing the package imports none of its modules.

A package's ``__init__`` names each export's module once and lists the same imports under ``TYPE_CHECKING`` for
type checkers and editors (``tests/test_lazy.py`` checks that both say the same)::

    if TYPE_CHECKING:
        from .data import KLineDataModule

    __getattr__, __dir__ = lazy_exports(__name__, {"KLineDataModule": ".data"})
    __all__ = sorted(...)

Used by ``training``, ``kline``, ``kline.evaluation`` and ``serve``, whose light parts (the K-line reader, the
portfolio evaluation, ``lightning-tf serve --help``) must not pull in torch, Lightning or LitServe.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``) for the exports ``where``: name ->
    the module that defines it, relative to the package (``".data"``). A name is imported on its first use and
    kept in the package's namespace, so later uses are plain lookups; ``dir()`` lists it before that."""
    table = dict(where)

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name], package), name)
        setattr(sys.modules[package], name, value)  # loaded once
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__
