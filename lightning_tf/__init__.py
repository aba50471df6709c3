"""lightning-tf: one Transformer core, three task families, driven by LightningCLI."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

__version__ = "0.1.0"

#: modules that moved when the package took its layout (``core/``, ``training/``, the tasks, ``cli/``): a run
#: config saved before names ``lightning_tf.callbacks.RNGState``, ``lightning_tf.preemption.LastCheckpoint``,
#: ``lightning_tf.checkpoints.AtomicCheckpointIO`` and the like, and still loads through these names
MOVED = {
    "lightning_tf.argument_errors": "lightning_tf.cli.argument_errors",
    "lightning_tf.callbacks": "lightning_tf.training.callbacks",
    "lightning_tf.checkpoints": "lightning_tf.training.checkpoints",
    "lightning_tf.console": "lightning_tf.cli.console",
    "lightning_tf.distributed": "lightning_tf.training.distributed",
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
