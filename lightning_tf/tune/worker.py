"""A worker of a study: ``lightning-tf tune`` itself, started with ``LIGHTNING_TF_TUNE_WORKER`` set (the
command starts ``--jobs`` of them). It loads the study and runs ``study.optimize``; its objective runs one
trial as an ordinary ``lightning-tf fit`` process with the trial's parameters as overrides and
:class:`~lightning_tf.tune.reporter.TrialReporter` as one more callback, and answers the callback's pruning
questions with Optuna's ``trial.report`` / ``trial.should_prune``.

How a trial ends: complete (its value: the best of its epochs), pruned, failed (one line: the run's own
error; ``refused`` when the config rejected the values before training), or interrupted (a stop signal, its
run killed): failed and queued again with Optuna's ``RetryHeartbeatStaleTrialCallback``, as Optuna's
heartbeat does on a database for a worker that died.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from .overrides import to_overrides, trial_overrides
from .space import load_space, suggest

__all__ = ["ENV", "TrialFailed", "Worker", "open_storage", "retried", "retry", "state_name", "tally"]

#: the environment variable that makes ``lightning-tf tune`` a worker (its settings as JSON)
ENV = "LIGHTNING_TF_TUNE_WORKER"
#: at most this many runs of one trial's parameters after its first was interrupted
MAX_RETRY = 3
#: a fit's exit status when SIGTERM stopped it (the run's LastCheckpoint saved it first)
SIGTERM_STATUS = 128 + signal.SIGTERM


class TrialFailed(Exception):
    """A trial that ended without a value; its message is the one line the study keeps."""


# the retry callback and its helpers are marked experimental; this command relies on them as documented
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def _retry_callback() -> RetryHeartbeatStaleTrialCallback:
    return RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)


def open_storage(storage: str, heartbeat: int = 60) -> optuna.storages.BaseStorage:
    """A journal file for a path; a journal on Redis for ``redis://``; else Optuna's RDB storage for the URL,
    with a heartbeat every ``heartbeat`` seconds: a trial silent for twice as long (its worker died, on any
    machine) is failed and queued again by Optuna when a worker next asks for a trial."""
    from optuna.storages.journal import JournalFileBackend, JournalRedisBackend

    if storage.startswith("redis://"):
        return optuna.storages.JournalStorage(JournalRedisBackend(storage))
    if "://" in storage:
        return optuna.storages.RDBStorage(
            storage,
            heartbeat_interval=heartbeat,
            grace_period=2 * heartbeat,
            heartbeat_stale_trial_callback=_retry_callback(),
        )
    Path(storage).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(storage))


def retry(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue ``trial``'s parameters again (up to :data:`MAX_RETRY` times): Optuna's retry callback."""
    _retry_callback()(study, trial)


def retried(trials: list[FrozenTrial]) -> set[int]:
    """The numbers of the trials whose parameters were queued again."""
    return {n for t in trials for n in RetryHeartbeatStaleTrialCallback.retry_history(t)}


def state_name(trial: FrozenTrial, again: set[int]) -> str:
    """complete, pruned, failed, refused, interrupted (failed and queued again), running or waiting."""
    if trial.state == TrialState.FAIL:
        if trial.number in again:
            return "interrupted"
        return "refused" if str(trial.user_attrs.get("reason", "")).startswith("refused") else "failed"
    return trial.state.name.lower()


def tally(trials: list[FrozenTrial]) -> dict[str, int]:
    """Trials by :func:`state_name`."""
    again, counts = retried(trials), {}
    for t in trials:
        counts[state_name(t, again)] = counts.get(state_name(t, again), 0) + 1
    return counts


def held(trials: list[FrozenTrial]) -> int:
    """Trials that count against ``--trials``: finished (not interrupted) and running."""
    counts = tally(trials)
    return sum(counts.get(k, 0) for k in ("complete", "pruned", "failed", "refused", "running"))


def _reason(log: Path, epochs: int) -> str:
    """One line from the end of a failed run's output."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    last = lines[-1] if lines else "no output"
    for prefix, kind in (("lightning-tf: error: ", "refused" if not epochs else "failed"), ("lightning-tf: training stopped: ", "non-finite")):
        if last.startswith(prefix):
            return f"{kind}: {last[len(prefix) :]}"
    return f"out of memory: {last}" if "out of memory" in last else f"failed: {last}"


def _new_records(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    if not path.exists():
        return [], offset
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n") + 1
    return [json.loads(line) for line in data[:end].splitlines()], offset + end


class Worker:
    """One worker's part in a study.

    Args:
        settings: what the command gives its workers (:data:`ENV`): ``index``, ``trials`` (this worker's
            share), ``parent`` (the command's pid), ``study``, ``storage``, ``warmup``, ``max_epochs``.
        options: the command's options (metric, sampler, seed, pruner, pruner_startup, timeout, heartbeat, jobs).
    """

    def __init__(self, settings: dict[str, Any], options: dict[str, Any]) -> None:
        self.settings, self.options = settings, options
        self.proc: subprocess.Popen | None = None
        self.stopping = False
        self.stop_reason = ""
        self.storage = open_storage(settings["storage"], options["heartbeat"])
        attrs = optuna.load_study(study_name=settings["study"], storage=self.storage).user_attrs
        self.attrs, self.study_dir = attrs, Path(attrs["study_dir"])
        self.space = load_space(attrs["search"])

    def _sampler(self, n_existing: int) -> optuna.samplers.BaseSampler:
        seed = self.options["seed"] + 1000 * self.settings["index"] + 1_000_003 * n_existing
        if self.options["sampler"] == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        startup = max(4, min(10, self.options["trials"] // 4))
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)

    def _pruner(self) -> optuna.pruners.BasePruner:
        if self.options["pruner"] == "median":
            return optuna.pruners.MedianPruner(self.options["pruner_startup"], n_warmup_steps=self.settings["warmup"])
        if self.options["pruner"] == "hyperband":
            return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=self.settings["max_epochs"] or "auto")
        return optuna.pruners.NopPruner()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def _watch_parent(self) -> None:
        """The command is gone (killed): stop at once; the running trial is failed by whoever looks next."""
        while os.getppid() == self.settings["parent"]:
            time.sleep(1.0)
        if self.proc is not None:
            self.proc.kill()
        os._exit(1)

    def run(self) -> int:
        """``study.optimize`` for this worker's share of the trials; the process's exit status."""
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        threading.Thread(target=self._watch_parent, daemon=True).start()
        study = optuna.load_study(study_name=self.settings["study"], storage=self.storage)
        study = optuna.load_study(
            study_name=study.study_name,
            storage=self.storage,
            sampler=self._sampler(len(study.get_trials(deepcopy=False))),
            pruner=self._pruner(),
        )
        study.optimize(
            self.objective,
            n_trials=self.settings["trials"],
            timeout=self.options["timeout"],
            catch=(TrialFailed,),
            callbacks=[self.after_trial],
        )
        if self.stop_reason:
            print(f"stopping the study: {self.stop_reason}", flush=True)
        return 3 if self.stop_reason else 0

    def objective(self, trial: optuna.Trial) -> float:
        params = suggest(trial, self.space)
        info = {"host": socket.gethostname(), "pid": os.getpid(), "worker": self.settings["index"], "reason": ""}
        for key, value in info.items():
            trial.set_user_attr(key, value)
        if self.stopping:
            raise TrialFailed("interrupted: the worker was stopped")
        folder = self.study_dir / "trials" / f"{trial.number:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        metric, name = self.attrs["metric"], self.settings["study"]
        callback = {
            "class_path": "lightning_tf.tune.reporter.TrialReporter",
            "init_args": {"channel": str(folder), "monitor": metric, "study": name, "trial": trial.number, "params": params},
        }
        args = self.attrs["args"]
        cmd = [sys.executable, "-m", "lightning_tf", "fit", *args, *to_overrides(params)]
        cmd += trial_overrides(name, trial.number, str(self.study_dir), self.attrs["wandb"], args)
        cmd.append(f"--trainer.callbacks+={json.dumps(callback)}")
        env = dict(os.environ)
        env.pop(ENV, None)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.options["jobs"])))
        t0 = time.time()
        with open(folder / "fit.log", "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        values: dict[int, float] = {}
        metrics: dict[int, dict[str, float]] = {}
        pruned, offset, missing = False, 0, ""
        while True:
            done = self.proc.poll() is not None
            records, offset = _new_records(folder / "reports.jsonl", offset)
            for record in records:
                if "run_dir" in record:
                    trial.set_user_attr("run_dir", record["run_dir"])
                elif "missing" in record:
                    missing = record["missing"]
                else:
                    step = int(record["step"])
                    values[step], metrics[step] = float(record["value"]), record["metrics"]
                    trial.report(values[step], step)
                    pruned = trial.should_prune()
                    (folder / f".answer-{step}").write_text("prune" if pruned else "go")
                    os.replace(folder / f".answer-{step}", folder / f"answer-{step}")
            if done:
                break
            time.sleep(0.2)
        status, self.proc = self.proc.returncode, None
        finite = {s: v for s, v in values.items() if math.isfinite(v)}
        best = (max if self.attrs["direction"] == "maximize" else min)(finite, key=finite.get) if finite else None
        trial.set_user_attr("epochs", len(values))
        trial.set_user_attr("seconds", round(time.time() - t0, 1))
        if best is not None:
            trial.set_user_attr("val_metrics", metrics[best])
        reason = ""
        if pruned:
            reason = f"pruned after epoch {len(values)}"
        elif self.stopping or status < 0 or status == SIGTERM_STATUS:
            reason = "interrupted: " + ("the worker was stopped" if self.stopping else f"its run ended by a signal ({status})")
        elif missing:
            reason = self.stop_reason = missing
        elif status != 0:
            reason = _reason(folder / "fit.log", len(values))
        elif best is None:
            reason = f"failed: no validation epoch logged a finite {metric}"
        if reason:
            trial.set_user_attr("reason", reason)
            if pruned:
                raise optuna.TrialPruned(reason)
            raise TrialFailed(reason)
        return finite[best]

    def after_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Queue an interrupted trial again, print its line, stop when the study holds ``--trials`` trials."""
        reason = str(trial.user_attrs.get("reason", ""))
        if trial.state == TrialState.FAIL and reason.startswith("interrupted"):
            retry(study, trial)
        trials = study.get_trials(deepcopy=False)
        counts, again = tally(trials), retried(trials)
        state = state_name(trial, again)
        what = f"{self.attrs['metric']} {trial.value:.5g}" if trial.value is not None else reason
        shown = ", ".join(f"{k.rpartition('.')[2]}={v:.4g}" if isinstance(v, float) else f"{k.rpartition('.')[2]}={v}" for k, v in trial.params.items())
        best = ""
        if counts.get("complete"):
            best = f"; best {study.best_value:.5g} (trial {study.best_trial.number})"
        stamp = datetime.datetime.now().strftime("%H:%M:%S")
        print(
            f"[{stamp}] worker {self.settings['index']}: trial {trial.number} {state} in "
            f"{trial.user_attrs.get('seconds', 0):.0f} s, {trial.user_attrs.get('epochs', 0)} epochs: {what} [{shown}] "
            f"({counts.get('complete', 0)} complete, {counts.get('pruned', 0)} pruned, "
            f"{counts.get('failed', 0) + counts.get('refused', 0)} failed{best})",
            flush=True,
        )
        if self.stopping or self.stop_reason or held(trials) >= self.options["trials"]:
            study.stop()
