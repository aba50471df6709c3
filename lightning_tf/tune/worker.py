"""A worker of a study: ``lightning-tf tune`` itself, started with :data:`ENV` set (the command starts ``--jobs``
of them; any machine can start more on a shared storage). It runs ``study.optimize``; its objective runs each
trial as an ordinary ``lightning-tf fit`` process with the trial's parameters as overrides and
:class:`~lightning_tf.tune.reporter.TrialReporter` as one more callback, whose pruning questions it answers with
Optuna's ``trial.report`` and ``trial.should_prune``.

A trial ends complete (its value: the best of its epochs), pruned, failed (the run's own error in one line;
``refused`` when the config rejected the values before training) or interrupted (a stop signal, its run killed):
failed and queued again, as Optuna's heartbeat does on a database for a worker that died.
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
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from .overrides import to_overrides, trial_overrides
from .space import load_space, suggest
from .study import held, open_storage, retry, state_name, tally

__all__ = ["ENV", "TrialFailed", "Worker"]

#: the environment variable that makes ``lightning-tf tune`` a worker (its settings, as JSON)
ENV = "LIGHTNING_TF_TUNE_WORKER"
#: what a fit's exit status means: SIGTERM stopped it (its LastCheckpoint saved it first)
SIGTERM_STATUS = 128 + signal.SIGTERM


class TrialFailed(Exception):
    """A trial that ended without a value; its message is the one line the study keeps."""


def _reason(log: Path, epochs: int) -> str:
    """One line from the end of a failed run's output (``lightning-tf: error: ...`` is the run's input error)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()] or ["no output"]
    kinds = {
        "lightning-tf: error: ": "failed" if epochs else "refused",
        "lightning-tf: training stopped: ": "non-finite",
    }
    for prefix, kind in kinds.items():
        if lines[-1].startswith(prefix):
            return f"{kind}: {lines[-1].removeprefix(prefix)}"
    return f"{'out of memory' if 'out of memory' in lines[-1] else 'failed'}: {lines[-1]}"


def _new_records(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The whole JSON lines ``path`` gained since ``offset``, and the new offset."""
    if not path.exists():
        return [], offset
    with open(path, "rb") as handle:
        data = handle.read()[offset:]
    end = data.rfind(b"\n") + 1
    return [json.loads(line) for line in data[:end].splitlines()], offset + end


class Worker:
    """One worker's part in a study.

    Args:
        settings: what the command gives its workers (:data:`ENV`): ``index``, ``trials`` (this worker's share),
            ``parent`` (the command's pid), ``study``, ``storage``, ``deadline`` (no trial starts after it: seconds
            since the epoch, or None), ``warmup`` and ``max_epochs`` (the pruner's).
        options: the command's options.
    """

    def __init__(self, settings: dict[str, Any], options: dict[str, Any]) -> None:
        self.settings, self.options = settings, options
        self.proc: subprocess.Popen | None = None
        self.stopping, self.stop_reason = False, ""
        self.storage = open_storage(settings["storage"], options["heartbeat"])
        self.attrs = optuna.load_study(study_name=settings["study"], storage=self.storage).user_attrs
        self.study_dir, self.space = Path(self.attrs["study_dir"]), load_space(self.attrs["search"])

    def _sampler(self, n_existing: int) -> optuna.samplers.BaseSampler:
        """Seeded by ``--seed``, the worker and the trials the study holds: workers and re-runs draw apart."""
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
        """The command is gone (killed): stop at once; the trial is failed by whoever looks next."""
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
        n_existing = len(optuna.load_study(study_name=self.settings["study"], storage=self.storage).trials)
        study = optuna.load_study(
            study_name=self.settings["study"],
            storage=self.storage,
            sampler=self._sampler(n_existing),
            pruner=self._pruner(),
        )
        study.optimize(
            self.objective,
            n_trials=self.settings["trials"],
            timeout=None if self.settings["deadline"] is None else max(0.0, self.settings["deadline"] - time.time()),
            catch=(TrialFailed,),
            callbacks=[self.after_trial],
        )
        if self.stop_reason:
            print(f"stopping the study: {self.stop_reason}", flush=True)
        return 3 if self.stop_reason else 0

    def objective(self, trial: optuna.Trial) -> float:
        """Run the trial's ``fit`` and answer its pruning questions; its value, else TrialPruned / TrialFailed."""
        params = suggest(trial, self.space)
        for key, value in {"host": socket.gethostname(), "pid": os.getpid(), "worker": self.settings["index"]}.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("reason", "")  # a retry starts with the attributes of the trial it runs again
        if self.stopping:
            raise TrialFailed("interrupted: the worker was stopped")
        folder, name, metric = (
            self.study_dir / "trials" / f"{trial.number:04d}",
            self.settings["study"],
            self.attrs["metric"],
        )
        folder.mkdir(parents=True, exist_ok=True)
        reporter = {"channel": str(folder), "monitor": metric, "study": name, "trial": trial.number, "params": params}
        callback = json.dumps({"class_path": "lightning_tf.tune.reporter.TrialReporter", "init_args": reporter})
        cmd = [sys.executable, "-m", "lightning_tf", "fit", *self.attrs["args"], *to_overrides(params)]
        cmd += [*trial_overrides(name, trial.number, str(self.study_dir), self.attrs["wandb"], self.attrs["args"])]
        env = {k: v for k, v in os.environ.items() if k != ENV}
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.options["jobs"])))
        t0 = time.time()
        with open(folder / "fit.log", "wb") as log:
            self.proc = subprocess.Popen(
                [*cmd, f"--trainer.callbacks+={callback}"], stdout=log, stderr=subprocess.STDOUT, env=env
            )
        if self.stopping:  # a stop asked while the run was starting
            self.proc.send_signal(signal.SIGTERM)
        values: dict[int, float] = {}
        metrics: dict[int, dict[str, float]] = {}
        pruned, offset, missing, done = False, 0, "", False
        while not done:
            done = self.proc.poll() is not None
            records, offset = _new_records(folder / "reports.jsonl", offset)
            for record in records:
                if "run_dir" in record:
                    trial.set_user_attr("run_dir", record["run_dir"])
                missing = record.get("missing", missing)
                if "step" in record:
                    step = int(record["step"])
                    values[step], metrics[step] = float(record["value"]), record["metrics"]
                    trial.report(values[step], step)
                    pruned = trial.should_prune()
                    (folder / f".answer-{step}").write_text("prune" if pruned else "go")
                    os.replace(folder / f".answer-{step}", folder / f"answer-{step}")
            time.sleep(0 if done else 0.2)
        status, self.proc = self.proc.returncode, None
        finite = {s: v for s, v in values.items() if math.isfinite(v)}
        best = (max if self.attrs["direction"] == "maximize" else min)(finite, key=finite.get) if finite else None
        trial.set_user_attr("epochs", len(values))
        trial.set_user_attr("seconds", round(time.time() - t0, 1))
        trial.set_user_attr("val_metrics", metrics[best] if best is not None else {})
        if pruned:
            trial.set_user_attr("reason", f"pruned after epoch {len(values)}")
            raise optuna.TrialPruned(f"pruned after epoch {len(values)}")
        if self.stopping or status < 0 or status == SIGTERM_STATUS:
            reason = "interrupted: " + ("the worker was stopped" if self.stopping else f"its run ended ({status})")
        elif missing:
            reason = self.stop_reason = missing
        elif status != 0:
            reason = _reason(folder / "fit.log", len(values))
        elif best is None:
            reason = f"failed: no validation epoch logged a finite {metric}"
        else:
            return finite[best]
        trial.set_user_attr("reason", reason)
        raise TrialFailed(reason)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Queue an interrupted trial again, print its line, stop when the study holds ``--trials`` trials."""
        reason = str(trial.user_attrs.get("reason", ""))
        if trial.state == TrialState.FAIL and reason.startswith("interrupted"):
            retry(study, trial)
        trials = study.get_trials(deepcopy=False)
        counts, attrs = tally(trials), trial.user_attrs
        what = f"{self.attrs['metric']} {trial.value:.5g}" if trial.state == TrialState.COMPLETE else reason
        shown = ", ".join(
            f"{k.rpartition('.')[2]}={v:.4g}" if isinstance(v, float) else f"{k.rpartition('.')[2]}={v}"
            for k, v in trial.params.items()
        )
        best = f"; best {study.best_value:.5g} (trial {study.best_trial.number})" if counts.get("complete") else ""
        failed = counts.get("failed", 0) + counts.get("refused", 0)
        print(
            f"[{datetime.datetime.now():%H:%M:%S}] worker {self.settings['index']}: trial {trial.number} "
            f"{'interrupted' if reason.startswith('interrupted') else state_name(trial, set())} in {attrs.get('seconds', 0):.0f} s, {attrs.get('epochs', 0)} epochs: {what} "
            f"[{shown}] ({counts.get('complete', 0)} complete, {counts.get('pruned', 0)} pruned, {failed} failed{best})",
            flush=True,
        )
        if self.stopping or self.stop_reason or held(trials) >= self.options["trials"]:
            study.stop()
