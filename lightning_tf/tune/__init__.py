"""``lightning-tf tune``: a config's hyperparameters searched with Optuna's public API (docs/tune.md): trials run
``--jobs`` at once with ``study.optimize`` on one storage (any machine can run the same command on it), each an
ordinary ``lightning-tf fit`` process pruned through optuna-integration's Lightning callback; resumable.

* :mod:`.space`: the search file (config names -> Optuna distributions);
* :mod:`.overrides`: a trial's parameters as ``fit`` overrides, its own folder, wandb run and callback;
* :mod:`.study`: storage, sampler, pruner, trials queued again, what counts against ``--trials``;
* :mod:`.trials`: the objective, which runs a trial's ``fit`` and answers its pruning callback;
* :mod:`.reporter`: that callback, in the trial's ``fit`` (named by class path);
* :mod:`.report`: ``best.yaml``, ``trials.csv``, ``summary.md`` and the figures;
* :mod:`.command`: the command itself.

Nothing outside ``tune/`` imports it; ``pip install 'lightning-tf[tune]'`` installs Optuna.
"""
