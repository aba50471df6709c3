"""A stand-in for a trial's ``lightning-tf fit`` (``tests/tune/test_trials.py`` runs it) that does to its trial what
the pruning callback does (``lightning_tf.tune.reporter``): it opens the trial from the study's storage, reports
each validation loss with Optuna's ``trial.report``, asks ``trial.should_prune`` and records its run folder, the
metrics of its best epoch and, when it ends early, why. What it does is its trial's ``behaviour`` parameter.

* ``good``: validation losses 0.5, 0.3, 0.4, each reported before the next; exit 0;
* ``bad``: losses of 5.0 until the study's pruner prunes it (then exit 1, as a pruned run raises);
* ``crash``: ``RuntimeError: boom`` as its last line, exit 1;
* ``missing``: a metric it does not log, exit 1;
* ``killed``: one loss, then SIGKILL to itself;
* ``termed``: one loss, then ends with status 143, as a run stopped by a SIGTERM from outside;
* ``wait``: one loss, then waits while its command lives; SIGTERM ends it with status 143, as a run whose
  LastCheckpoint saved.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time

import yaml

from lightning_tf.tune.study import STORAGE, open_trial

callback = next(a for a in sys.argv if a.startswith("--trainer.callbacks+="))
init = yaml.safe_load(callback.partition("=")[2])["init_args"]
trial = open_trial(os.environ[STORAGE], init["study"], init["trial"], init["pruner"])
behaviour = init["params"]["behaviour"]
signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signal.SIGTERM))
best = math.inf


def report(step: int, value: float) -> bool:
    global best
    trial.report(value, step)
    if value < best:
        best = value
        trial.set_user_attr("val_metrics", {"val/loss": value, "val/acc": 1 - value / 10})
    return trial.should_prune()


trial.set_user_attr("run_dir", os.getcwd())
if behaviour == "good":
    for step, value in enumerate((0.5, 0.3, 0.4)):
        report(step, value)
elif behaviour == "bad":
    step = 0
    while not report(step, 5.0):
        step += 1
    trial.set_user_attr("reason", "pruned")
    sys.exit(1)
elif behaviour == "crash":
    print("Traceback ...\nRuntimeError: boom", flush=True)
    sys.exit(1)
elif behaviour == "missing":
    trial.set_user_attr("reason", "--metric val/x is not logged by this run; it logs val/loss")
    sys.exit(1)
elif behaviour == "killed":
    report(0, 1.0)
    os.kill(os.getpid(), signal.SIGKILL)
elif behaviour == "termed":
    report(0, 1.0)
    os._exit(128 + signal.SIGTERM)
elif behaviour == "wait":
    report(0, 1.0)
    while os.getppid() == trial.user_attrs["pid"]:
        time.sleep(0.1)
