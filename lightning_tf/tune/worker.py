"""A worker process of a study: asks the study's storage for a trial, runs it (:func:`.trial.run_trial`), tells
the storage how it ended and writes one line to the study's log, until the study holds ``--trials`` trials,
the deadline passes, or it is asked to stop (SIGINT / SIGTERM: the running trial ends as ``interrupted``
and its parameters are queued again; the parent's death: the worker stops at once).

``python -m lightning_tf.tune.worker <spec.json> <index>``: ``lightning-tf tune`` starts K of them.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from optuna.trial import TrialState

from .space import SearchSpace
from .study import StudySpec, counted, fail_stale, load_study, study_lock

__all__ = ["EXIT_STOP_STUDY", "StudyLog", "main", "run_worker"]

#: a worker's exit status when every trial would fail the same way (a wrong --metric): the study stops
EXIT_STOP_STUDY = 3


class StudyLog:
    """The study's log (``tune.log`` in its folder): one line per event, appended whole, so that workers
    can share it; the parent process prints it as it grows.

    Args:
        path: the log file.
        who: the writer, at the start of each line (``worker 1``).
    """

    def __init__(self, path: str | Path, who: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.who = who

    def write(self, message: str) -> None:
        stamp = datetime.datetime.now().strftime("%H:%M:%S")
        line = f"[{stamp}] {self.who}: {message}\n".encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _watch_parent(parent: int) -> None:
    """Stop this process at once when the process that started it is gone (killed): its trial is then
    marked interrupted by the next worker that looks (:func:`.study.fail_stale`)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)


def _heartbeat(storage: object, trial_id: int, stop: threading.Event) -> None:
    """Record the trial's heartbeat (a database storage) until ``stop``: a trial whose heartbeat stops is
    failed and retried by Optuna on any machine."""
    interval = storage.get_heartbeat_interval() or 60  # type: ignore[attr-defined]
    while True:
        storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]
        if stop.wait(interval):
            return


def _shown_params(params: dict) -> str:
    def value(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{name.rpartition('.')[2]}={value(v)}" for name, v in params.items())


def _tally(trials: list) -> str:
    done = sum(t.state == TrialState.COMPLETE for t in trials)
    pruned = sum(t.state == TrialState.PRUNED for t in trials)
    failed = sum(t.state == TrialState.FAIL and not t.user_attrs.get("interrupted") for t in trials)
    return f"{done} complete, {pruned} pruned, {failed} failed"


def run_worker(spec: StudySpec, index: int, parent: int | None = None) -> int:
    """Take part in the study until it is done; returns the process's exit status."""
    import torch
    from optuna.storages import fail_stale_trials
    from optuna.storages._heartbeat import is_heartbeat_enabled

    from .trial import Interrupts, run_trial

    if spec.threads and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(spec.threads)
    if parent is not None:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    interrupts = Interrupts()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupts.handler)
    log = StudyLog(Path(spec.study_dir) / "tune.log", f"worker {index}")
    space = SearchSpace.load(spec.search)
    study = load_study(spec, index)
    storage = study._storage
    heartbeat = is_heartbeat_enabled(storage)
    host, pid = socket.gethostname(), os.getpid()
    while not interrupts.requested:
        if spec.deadline is not None and time.time() >= spec.deadline:
            log.write("the --timeout has passed: no new trial")
            break
        with study_lock(spec.study_dir):
            if heartbeat:
                fail_stale_trials(study)
            for stale in fail_stale(study):
                log.write(
                    f"trial {stale.number} was left running by a worker that is gone: failed, its "
                    "parameters queued again"
                )
            if counted(study.get_trials(deepcopy=False)) >= spec.trials:
                break
            trial = study.ask()
            for key, value in (("host", host), ("pid", pid), ("worker", index)):
                trial.set_user_attr(key, value)
        stop_beat = threading.Event()
        if heartbeat:
            threading.Thread(target=_heartbeat, args=(storage, trial._trial_id, stop_beat), daemon=True).start()
        try:
            params, outcome = run_trial(trial, spec, space, interrupts)
        finally:
            stop_beat.set()
            for sig in (signal.SIGINT, signal.SIGTERM):  # Lightning ignores SIGINT after it shut a run down
                signal.signal(sig, interrupts.handler)
        for key, value in (
            ("epochs", outcome.epochs),
            ("seconds", round(outcome.seconds, 2)),
            ("run_dir", outcome.run_dir),
            ("reason", outcome.reason),
            ("refused", outcome.refused),
            ("val_metrics", outcome.metrics),
        ):
            if value not in ("", None, False):
                trial.set_user_attr(key, value)
        if outcome.interrupted:
            trial.set_user_attr("interrupted", "Ctrl-C or a stop signal")
        study.tell(trial, outcome.value, state=outcome.state)
        if outcome.interrupted:
            study.enqueue_trial(params, user_attrs={"retry_of": trial.number})
        trials = study.get_trials(deepcopy=False)
        what = {
            TrialState.COMPLETE: f"{spec.metric} {outcome.value:.5g}" if outcome.value is not None else "",
            TrialState.PRUNED: outcome.reason,
        }.get(outcome.state, outcome.reason)
        best = ""
        try:
            best = f"; best {study.best_value:.5g} (trial {study.best_trial.number})"
        except ValueError:  # no complete trial yet
            pass
        state = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned"}.get(outcome.state, "FAILED")
        state = "interrupted" if outcome.interrupted else "refused" if outcome.refused else state
        log.write(
            f"trial {trial.number} {state} in {outcome.seconds:.0f} s, {outcome.epochs} epochs: {what} "
            f"[{_shown_params(params)}] ({_tally(trials)}{best})"
        )
        if outcome.stop_study:
            log.write(f"stopping the study: {outcome.reason}")
            return EXIT_STOP_STUDY
        if outcome.interrupted:
            break
    return 0


def main(argv: list[str] | None = None) -> None:
    """``python -m lightning_tf.tune.worker <spec.json> <index> [<parent pid>]``."""
    args = sys.argv[1:] if argv is None else argv
    spec = StudySpec.read(args[0])
    parent = int(args[2]) if len(args) > 2 else None
    raise SystemExit(run_worker(spec, int(args[1]), parent))


if __name__ == "__main__":
    main()
