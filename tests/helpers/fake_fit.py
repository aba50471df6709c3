"""A stand-in for a trial's ``lightning-tf fit`` (``tests/tune/test_trials.py`` runs it) that speaks the pruning
callback's side of the socket (``lightning_tf.tune.reporter``): what it does is its trial's ``behaviour``
parameter.

* ``good``: validation losses 0.5, 0.3, 0.4, each answered before the next; exit 0;
* ``bad``: losses of 5.0 until it is told to prune (then exit 1, as a pruned run raises);
* ``crash``: ``RuntimeError: boom`` as its last line, exit 1;
* ``missing``: reports a metric it does not log, exit 1;
* ``cut``: half a report line, then SIGKILL to itself;
* ``gone``: one loss, then ends (status 143, as stopped by SIGTERM) without reading the answer;
* ``wait``: one loss, then waits (until the command's end of the socket closes); SIGTERM ends it with status 143,
  as a run whose LastCheckpoint saved.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

import yaml

callback = next(a for a in sys.argv if a.startswith("--trainer.callbacks+="))
params = yaml.safe_load(callback.partition("=")[2])["init_args"]["params"]
behaviour = params["behaviour"]
channel = socket.socket(fileno=int(os.environ["LIGHTNING_TF_TUNE_CHANNEL"]))
signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signal.SIGTERM))


def send(record: dict) -> None:
    channel.sendall((json.dumps(record) + "\n").encode())


def report(step: int, value: float) -> bool:
    send({"step": step, "value": value, "metrics": {"val/loss": value, "val/acc": 1 - value / 10}})
    return channel.recv(1) == b"p"


send({"run_dir": os.getcwd()})
if behaviour == "good":
    for step, value in enumerate((0.5, 0.3, 0.4)):
        report(step, value)
elif behaviour == "bad":
    step = 0
    while not report(step, 5.0):
        step += 1
    sys.exit(1)
elif behaviour == "crash":
    print("Traceback ...\nRuntimeError: boom", flush=True)
    sys.exit(1)
elif behaviour == "missing":
    send({"missing": "--metric val/x is not logged by this run; it logs val/loss"})
    sys.exit(1)
elif behaviour == "cut":
    channel.sendall(b'{"step": 0, "val')
    os.kill(os.getpid(), signal.SIGKILL)
elif behaviour == "gone":
    send({"step": 0, "value": 1.0, "metrics": {"val/loss": 1.0}})
    time.sleep(0.5)  # the answer arrives, unread
    os._exit(128 + signal.SIGTERM)
elif behaviour == "wait":
    report(0, 1.0)
    channel.recv(1)
