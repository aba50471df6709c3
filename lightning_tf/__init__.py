"""lightning-tf: one Transformer core, three task families, driven by LightningCLI.

The package's own import machinery is here: :func:`lazy_exports`, the names of a package loaded on first use, and
the old names of modules that moved (:data:`MOVED`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__version__ = "0.1.0"

#: modules that moved, by their old names: those of before the package took its layout (``core/``, ``training/``,
#: the tasks, ``cli/``; a run config saved then names ``lightning_tf.callbacks.RNGState``,
#: ``lightning_tf.preemption.LastCheckpoint``, ``lightning_tf.checkpoints.AtomicCheckpointIO`` and the like, and still
#: loads through these names), and the universe workflow's, gathered into ``kline/universe/``
MOVED = {
    "lightning_tf.argument_errors": "lightning_tf.cli.argument_errors",
    "lightning_tf.callbacks": "lightning_tf.training.callbacks",
    "lightning_tf.checkpoints": "lightning_tf.training.checkpoints",
    "lightning_tf.console": "lightning_tf.cli.console",
    "lightning_tf.distributed": "lightning_tf.training.distributed",
    "lightning_tf.kline.evaluation.fold_forecasts": "lightning_tf.kline.universe.forecasts",
    "lightning_tf.kline.evaluation.portfolio": "lightning_tf.kline.universe.portfolio",
    "lightning_tf.kline.evaluation.universe_baselines": "lightning_tf.kline.universe.baselines",
    "lightning_tf.kline.evaluation.walkforward_report": "lightning_tf.kline.universe.report",
    "lightning_tf.kline.walkforward": "lightning_tf.kline.universe.folds",
    "lightning_tf.loaders": "lightning_tf.training.loaders",
    "lightning_tf.memory": "lightning_tf.training.memory",
    "lightning_tf.preemption": "lightning_tf.training.preemption",
    "lightning_tf.prepared": "lightning_tf.training.prepared",
    "lightning_tf.resources": "lightning_tf.training.resources",
    "lightning_tf.runs": "lightning_tf.cli.runs",
    "lightning_tf.tour": "lightning_tf.cli.tour",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a module's old name (:data:`MOVED`) as the module at its new place (the same object)."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        pass  # the module at its new place is already executed


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``) for the exports ``where``: name -> the
    module that defines it, relative to the package (``".data"``). A name is imported on its first use (PEP 562)
    and kept in the package's namespace, so later uses are plain lookups; ``dir()`` lists it before that.

    Importing such a package imports none of its modules: the light parts of ``training``, ``kline``,
    ``kline.evaluation`` and ``serve`` (the K-line reader, the portfolio evaluation, ``lightning-tf serve --help``)
    stay free of torch, Lightning and LitServe. Each lists the same imports under ``TYPE_CHECKING`` for type
    checkers and editors (``tests/test_lazy.py`` checks that both say the same)::

        if TYPE_CHECKING:
            from .data import KLineDataModule

        _WHERE = {"KLineDataModule": ".data"}
        __all__ = sorted(_WHERE)
        __getattr__, __dir__ = lazy_exports(__name__, _WHERE)
    """
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
