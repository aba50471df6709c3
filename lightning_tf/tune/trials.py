"""The trials a command runs: ``study.optimize`` with ``--jobs`` threads, each waiting on its trial's ``fit`` process,
which reports to the study itself (:mod:`.reporter`); how a trial ends: docs/tune.md.
"""

from __future__ import annotations

import datetime
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from .report import brief
from .space import format_value, suggest, to_overrides
from .study import STORAGE, held, make_pruner, retry, state_name, tally

__all__ = ["TrialFailed", "Trials", "failure", "trial_overrides"]


class TrialFailed(Exception):
    """A trial that ended without a value; its message is the one line the study keeps."""


def failure(log: Path, epochs: int) -> str:
    """One line from the end of a failed run's output (``lightning-tf: error: ...`` is the run's input error)."""
    last = (log.read_text(errors="replace").strip().splitlines() or ["no output"])[-1].strip()
    for what, kind in (("error", "failed" if epochs else "refused"), ("training stopped", "non-finite")):
        if last.startswith(prefix := f"lightning-tf: {what}: "):
            return f"{kind}: {last.removeprefix(prefix)}"
    return f"{'out of memory' if 'out of memory' in last else 'failed'}: {last}"


def trial_overrides(
    study_name: str, number: int, study_dir: str, wandb: bool, user_args: Iterable[str], reporter: dict[str, Any]
) -> list[str]:
    """What makes trial ``number`` a run of its own: its folder under ``study_dir``, under a WandbLogger its run id
    and name (``<study>-0007``), group (the study) and job type (``tune``); no progress bar or model summary; one
    device (pruning reports from one process); the pruning callback, ``TrialReporter(**reporter)``, last. What
    ``user_args`` set is left to them, the callbacks they add beside it."""
    run, logger = f"{study_name}-{number:04d}", "trainer.logger.init_args"
    out: dict[str, Any] = {"trainer.default_root_dir": study_dir if wandb else f"{study_dir}/trials/{number:04d}"}
    if wandb:
        out |= {f"{logger}.save_dir": study_dir, f"{logger}.id": run, f"{logger}.name": run}
        out |= {f"{logger}.group": study_name, f"{logger}.job_type": "tune"}
    out |= {"trainer.enable_progress_bar": "false", "trainer.enable_model_summary": "false", "trainer.devices": "1"}
    given = {arg[2:].split("=", 1)[0] for arg in user_args if arg.startswith("--")}
    callback = format_value({"class_path": "lightning_tf.tune.reporter.TrialReporter", "init_args": reporter})
    kept = [f"--{name}={value}" for name, value in out.items() if name not in given]
    return [*kept, f"--trainer.callbacks+={callback}"]


class Trials:
    """The trials of ``study`` (with its sampler) this command runs in the search ``space``, ``jobs`` at once (job
    ``i`` sees GPU ``i mod n`` of several), until the study holds ``trials``; each trial's run opens ``storage``."""

    #: the command that runs a trial, before its arguments
    fit = [sys.executable, "-m", "lightning_tf", "fit"]

    def __init__(self, study: optuna.Study, space: dict[str, Any], trials: int, jobs: int, storage: str) -> None:
        self.study, self.space, self.trials, self.jobs, self.storage = study, space, trials, jobs, storage
        self.attrs = study.user_attrs
        study.pruner = make_pruner(*self.attrs["pruner"])  # the pruner each trial's run prunes with too
        self.local = threading.local()  # each job thread's number, and whether it holds the lock
        self.lock = threading.Lock()  # from a job's decision to start a trial until it runs: see job
        self.runs: dict[int, subprocess.Popen] = {}
        self.stops, self.stop_reason = 0, ""

    def run(self, timeout: float | None) -> int:
        """Run trials until the study holds ``trials``, ``timeout`` seconds pass or a stop; the exit status."""
        previous = {s: signal.signal(s, self.stop) for s in (signal.SIGINT, signal.SIGTERM)}
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            with ThreadPoolExecutor(self.jobs) as pool:
                for job in [pool.submit(self.job, k, deadline) for k in range(self.jobs)]:
                    job.result()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        if self.stop_reason:
            print(f"stopping the study: {self.stop_reason}")
        return 1 if self.stop_reason else 130 if self.stops else 0

    def job(self, number: int, deadline: float | None) -> None:
        """Job ``number``: one trial after another (each ``study.optimize`` of one trial, in this thread), while the
        study has room, the time lasts and nothing stopped it. It decides under the lock, held until its trial runs
        (and ``held`` counts it): two jobs that end at once never both take the last place."""
        self.local.job = number
        while True:
            self.lock.acquire()
            self.local.holding = True
            late = deadline is not None and time.monotonic() >= deadline
            if self.stops or late or held(self.study.get_trials(deepcopy=False)) >= self.trials:
                self.release()
                return
            try:
                self.study.optimize(self.objective, n_trials=1, catch=(TrialFailed,), callbacks=[self.after_trial])
            finally:
                self.release()  # a trial that never reached its objective

    def release(self) -> None:
        """Let the next job decide, once this thread's trial runs (held counts it)."""
        if getattr(self.local, "holding", False):
            self.local.holding = False
            self.lock.release()

    def stop(self, signum: int = signal.SIGTERM, frame: Any = None) -> None:
        """Ctrl-C or SIGTERM: each running trial's run gets SIGTERM (it saves where it is and ends interrupted); a
        second one kills them."""
        self.stops += 1
        if self.stops == 1:
            print(
                "\nstopping: the running trials end as interrupted and run again when the study continues "
                "(Ctrl-C again: kill them now)"
            )
        for run in list(self.runs.values()):  # a run that has ended gets no signal (Popen checks)
            run.send_signal(signal.SIGTERM if self.stops == 1 else signal.SIGKILL)

    def objective(self, trial: optuna.Trial) -> float:
        """The trial's value, else TrialPruned or TrialFailed: its ``fit`` run under its thread's job number."""
        self.release()  # running now: held counts it
        job, params = self.local.job, suggest(trial, self.space)
        # a retry starts with the attributes of the trial it runs again; the pid before the host, which is what
        # makes a trial this machine's for fail_orphans
        mine = {"pid": os.getpid(), "host": socket.gethostname(), "job": job, "reason": "", "val_metrics": {}}
        for key, value in mine.items():
            trial.set_user_attr(key, value)
        if self.stops:
            raise TrialFailed("interrupted: the study was stopped")
        name, args, metric = self.study.study_name, self.attrs["args"], self.attrs["metric"]
        folder = Path(self.attrs["study_dir"]) / "trials" / f"{trial.number:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        reporter = {"monitor": metric, "study": name, "trial": trial.number, "params": params}
        reporter["pruner"] = self.attrs["pruner"]
        cmd = [*self.fit, *args, *to_overrides(params)]
        cmd += trial_overrides(name, trial.number, self.attrs["study_dir"], self.attrs["wandb"], args, reporter)
        env = {**os.environ, STORAGE: self.storage}
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.jobs)))
        if self.jobs > 1 and "CUDA_VISIBLE_DEVICES" not in env:
            import torch  # only here: it takes seconds to import

            if (gpus := torch.cuda.device_count()) > 1:
                env["CUDA_VISIBLE_DEVICES"] = str(job % gpus)
        with open(folder / "fit.log", "wb") as log:
            # its own session: a Ctrl-C in the terminal reaches this command alone, which stops the runs itself
            run = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.runs[trial.number] = run
        trial.set_user_attr("run_pid", run.pid)
        if self.stops:  # a stop asked while the run was starting
            run.send_signal(signal.SIGTERM)
        status = run.wait()
        del self.runs[trial.number]
        done = self.study.get_trials(deepcopy=False)[trial.number]  # as the run left it: its reports, its reason
        finite = [v for v in done.intermediate_values.values() if math.isfinite(v)]
        epochs, reason = len(done.intermediate_values), done.user_attrs["reason"]
        if reason == "pruned":
            reason = f"pruned after epoch {epochs}"
        elif self.stops or status < 0 or status == 128 + signal.SIGTERM:  # killed, or SIGTERM (LastCheckpoint saved it)
            reason = "interrupted: " + ("the study was stopped" if self.stops else f"its run ended ({status})")
        elif reason:  # a metric the run does not log: every trial would fail alike
            self.stop_reason = reason
        elif status != 0:
            reason = failure(folder / "fit.log", epochs)
        elif not finite:
            reason = f"failed: no validation epoch logged a finite {metric}"
        else:
            return (max if self.attrs["direction"] == "maximize" else min)(finite)
        trial.set_user_attr("reason", reason)
        raise (optuna.TrialPruned if reason.startswith("pruned") else TrialFailed)(reason)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Queue an interrupted trial again, print its line, and stop the study when a metric the runs do not log
        would fail every trial."""
        reason = str(trial.user_attrs.get("reason", ""))
        if trial.state == TrialState.FAIL and reason.startswith("interrupted"):
            retry(study, trial)
        trials = study.get_trials(deepcopy=False)
        counts, attrs = tally(trials), trial.user_attrs  # a Counter: 0 for a state no trial is in
        what = f"{self.attrs['metric']} {trial.value:.5g}" if trial.state == TrialState.COMPLETE else reason
        shown = ", ".join(f"{k.rpartition('.')[2]}={brief(v)}" for k, v in trial.params.items())
        best = f"; best {study.best_value:.5g} (trial {study.best_trial.number})" if counts["complete"] else ""
        state = "interrupted" if reason.startswith("interrupted") else state_name(trial, set())
        print(  # one write: the lines of trials that end at once stay whole
            f"[{datetime.datetime.now():%H:%M:%S}] job {attrs.get('job', 0)}: trial {trial.number} {state} in "
            f"{trial.duration.total_seconds():.0f} s, {len(trial.intermediate_values)} epochs: {what} [{shown}] ({counts['complete']} "
            f"complete, {counts['pruned']} pruned, {counts['failed'] + counts['refused']} failed{best})\n",
            end="",
        )
        if self.stop_reason and not self.stops:  # every run would fail alike: stop the others now
            self.stop()
