"""``lightning-tf tune``: a config's hyperparameters searched with Optuna's public API: ``--jobs`` workers
(the same command, each running ``study.optimize``) on one storage, each trial an ordinary ``lightning-tf fit``
process, pruned through optuna-integration's Lightning callback, resumable (docs/tune.md).

* :mod:`.space`: the search file (config names -> Optuna distributions);
* :mod:`.overrides`: a trial's parameters as ``fit`` overrides, a trial's own folder and wandb run;
* :mod:`.reporter`: the callback a trial's ``fit`` runs with (named by class path);
* :mod:`.worker`: a worker: storage, sampler, pruner, the objective, trials run again;
* :mod:`.report`: ``best.yaml``, ``trials.csv``, ``summary.md`` and the figures;
* :mod:`.command`: the command itself.

Nothing outside ``tune/`` imports it; ``pip install 'lightning-tf[tune]'`` installs Optuna.
"""
