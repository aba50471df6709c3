"""``lightning-tf tune``: a config's hyperparameters searched with Optuna, in parallel worker processes
sharing one storage, with pruning, and resumable; each trial an ordinary ``fit`` run (docs/tune.md).

* :mod:`.space`: the search file (config names -> ranges, constraints), checked where it is read;
* :mod:`.constraints`: the constraints' small expression language;
* :mod:`.overrides`: a trial's parameters as ``fit`` overrides, and a trial's own folder and wandb run;
* :mod:`.config`: the base config parsed as ``fit`` parses it, the space checked against it, ``best.yaml``;
* :mod:`.study`: storage, sampler, pruner, the trial budget, trials left running by a killed worker;
* :mod:`.trial`: one trial through :func:`lightning_tf.cli.make_cli`, with the pruning callback;
* :mod:`.worker`: a worker process's loop;
* :mod:`.report`: ``best.yaml``, ``trials.csv``, ``summary.md`` and the figures;
* :mod:`.command`: the command itself.

Optuna is imported only by the modules that use it (``study``, ``trial``, ``worker``, ``report``,
``command``), never by the task packages; ``pip install 'lightning-tf[tune]'`` installs it.
"""

from .space import CategoricalParam, FloatParam, IntParam, SearchSpace

__all__ = ["CategoricalParam", "FloatParam", "IntParam", "SearchSpace"]
