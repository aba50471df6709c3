"""Griffe extensions of the API pages (``mkdocs.yml`` names them).

* ``ComputedExports``: ``lightning_tf.training``, ``.kline``, ``.kline.evaluation`` and ``.serve`` load their names on
  first use (PEP 562) and build ``__all__`` from their table of names (``sorted(_WHERE)``), which griffe's static
  reading cannot evaluate. Such a package is imported instead, from the files griffe reads (cheap: its names are
  not loaded), and its ``__all__`` read, so a page shows exactly the names ``from lightning_tf.kline import *`` gives.
* ``RestMarkup``: what the docstrings borrow from reStructuredText, read as Markdown: a role (``:class:`X```,
  ``:func:`~a.b```, ``:mod:`.data```) is the name as code, a simple table (between ``====  ====`` borders) a
  block of preformatted text, as its columns are aligned.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`~?([^`]+)`")
_BORDER = re.compile(r"^ *=+( +=+)+ *$")


class ComputedExports(griffe.Extension):
    def on_module_members(self, *, mod: griffe.Module, **kwargs: Any) -> None:
        if "__all__" not in mod.members or mod.exports:
            return  # no __all__, or a literal one griffe has read
        root = str(Path(mod.filepath).parents[mod.path.count(".") + 1])  # the folder that holds the package
        if root not in sys.path:
            sys.path.insert(0, root)  # the files griffe reads, not another installed copy of the package
        package = importlib.import_module(mod.path)
        if Path(package.__file__).resolve() != Path(mod.filepath).resolve():
            raise RuntimeError(f"{mod.path} was imported from {package.__file__}, but the pages read {mod.filepath}")
        mod.exports = list(package.__all__)


def _tables_as_text(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _BORDER.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        end = i + 1  # the table ends at its last border before a blank line
        for j in range(i + 1, len(lines)):
            if not lines[j].strip():
                break
            if _BORDER.match(lines[j]):
                end = j + 1
        out += ["", "```text", *lines[i:end], "```", ""]
        i = end
    return "\n".join(out)


class RestMarkup(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _tables_as_text(_ROLE.sub(r"`\1`", obj.docstring.value))
