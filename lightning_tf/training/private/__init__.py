"""The registers of the private names the package relies on: one module per library.

A name that starts with ``_`` in another package is not ours to use; where a library's public API cannot say
what the package needs, the private name it takes is in that library's register, with the reason:

* :mod:`.lightning`: Lightning (the trainer's loops and connectors, ``ModelCheckpoint``, ``LightningCLI``'s
  steps, ``WandbLogger``, ``ModelSummary``, the module's trainer and hyperparameter logging);
* :mod:`.jsonargparse`: the actions of a jsonargparse parser;
* :mod:`.litserve`: ``LitServer``'s queues and answer transport;
* :mod:`.torch`: ``Module._load_from_state_dict``;
* :mod:`.torchvision`: RandAugment's and TrivialAugmentWide's operations;
* :mod:`.python`: the standard library (a ``multiprocessing.Queue``'s pipe).

A register holds a small function for each private name the package reads or sets, and lists in ``OVERRIDES``
each private method a class of the package overrides (the override stays in its class). Each name has a test in
``tests/training/private/`` that fails on a release that renames or changes it, and each library but Python
carries an upper version bound in ``pyproject.toml``: a new release is admitted once those tests pass on it.
``tests/test_structure.py`` checks that no module outside this folder reads a dependency's private name, and
``tests/training/private/test_registers.py`` that every private method overridden is listed.

Optuna's and timm's public APIs are enough: they have no register. Nothing here is imported by this
``__init__``: each register imports its library, and is imported only where that library is used.
"""
