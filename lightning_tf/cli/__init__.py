"""The ``lightning-tf`` command: the command table (:mod:`.commands`), LightningCLI with data -> model links and
one-line errors (:mod:`.lightning_cli`, :mod:`.argument_errors`), the run's folder, config and wandb naming
(:mod:`.runs`), what the command prints (:mod:`.console`), ``export`` (:mod:`.export`) and ``tour``
(:mod:`.tour`). Nothing in the package imports it: it sits on top, beside ``serve/`` and ``tune/``.
"""
