"""The files that ship with the package: the YAML configs (``configs/``) and the embedded data
(``data/msft.csv``).

The repository keeps one copy of each, at its top level (``configs/``, ``data/``); a wheel carries the
same files inside the package (``lightning_tf/configs/``, ``lightning_tf/data/``, mapped by
``pyproject.toml``), read through :mod:`importlib.resources`. :func:`find` looks in the working
directory, then the clone the package runs from, then the installed package, so that
``KLineDataModule()`` and ``lightning-tf tour`` work from any folder, in a clone or after
``pip install``.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

__all__ = ["bundled_configs", "find", "repository_root"]


def repository_root() -> Path | None:
    """The clone this package runs from (an editable install or ``PYTHONPATH``), or None when it runs
    from an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "lightning_tf").is_dir() else None


def find(relative: str | Path) -> Path | None:
    """``relative`` (e.g. ``configs/trainer/default.yaml`` or ``data/msft.csv``) in the working
    directory, else in the clone, else among the package's bundled files; None when none has it."""
    relative = Path(relative)
    if relative.exists():
        return relative
    if relative.is_absolute():
        return None
    root = repository_root()
    if root is not None and (root / relative).exists():
        return root / relative
    bundled = Path(str(resources.files("lightning_tf").joinpath(*relative.parts)))
    return bundled if bundled.exists() else None


def bundled_configs(args: list[str]) -> list[str]:
    """``args`` with each ``--config PATH`` that is not a file here but one of the package's own
    (``configs/...`` of the clone or of the installed package, :func:`find`)
    pointing at that file, so the shipped configs work from any folder."""
    out = list(args)
    for i, arg in enumerate(out):
        name, eq, value = arg.partition("=")
        if name != "--config":
            continue
        if not eq:
            if i + 1 >= len(out):
                break
            value = out[i + 1]
        if value and not os.path.exists(value) and not value.lstrip().startswith(("{", "[")):
            found = find(value)
            if found is not None:
                if eq:
                    out[i] = f"--config={found}"
                else:
                    out[i + 1] = str(found)
    return out
