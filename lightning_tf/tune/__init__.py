"""``lightning-tf tune`` (docs/tune.md): a config's hyperparameters searched with Optuna's public API, each trial an
ordinary ``lightning-tf fit`` process; the command is :mod:`.command`. Nothing outside ``tune/`` imports it;
``pip install 'lightning-tf[tune]'`` installs Optuna.
"""
