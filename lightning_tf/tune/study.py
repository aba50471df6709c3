"""The Optuna side of a study: its settings (:class:`StudySpec`, what every worker process is given), the
storage (a journal file by default, any Optuna storage URL), the seeded sampler and the pruner, the
trials that count against ``--trials``, and the trials a killed worker left running.

Optuna's storage is the only thing workers share: each worker process loads the study, asks it for a
trial, runs it and tells it the result, so K workers on one machine, or the same command on several
machines against one database, work on one study. A journal file has no heartbeat, so a trial whose
worker died (``kill -9``, a lost machine) would stay ``RUNNING``: each worker marks such trials of its
own host failed before asking for a new one, and queues their parameters again (:func:`fail_stale`);
on a database, Optuna's heartbeat does the same across machines.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

__all__ = [
    "COUNTED",
    "StudySpec",
    "counted",
    "fail_stale",
    "infer_direction",
    "load_study",
    "make_pruner",
    "make_sampler",
    "open_storage",
    "study_lock",
]

#: trial states that count against ``--trials`` (RUNNING included, so parallel workers do not overshoot)
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)

#: metrics a higher value of which is better, by the last part of their name (``val/acc``, ``val/top5``)
_HIGHER_IS_BETTER = ("acc", "top", "bleu", "chrf", "f1", "auc", "precision", "recall", "r2", "sharpe", "ap")


def infer_direction(metric: str) -> str:
    """``maximize`` for a metric whose name says higher is better (``val/acc``, ``val/bleu``), else ``minimize``."""
    last = metric.rsplit("/", 1)[-1].lower()
    return "maximize" if last.startswith(_HIGHER_IS_BETTER) else "minimize"


@dataclass
class StudySpec:
    """Everything a worker process needs to take part in a study (written as JSON for each worker).

    Args:
        study_name: the study's name (names its folder, its wandb group and its trials' runs).
        storage: an Optuna storage URL, or the path of a journal file.
        study_dir: the study's folder (trial runs, the log, the report).
        args: the ``lightning-tf fit`` arguments every trial starts from (configs as absolute paths).
        search: the search file.
        trials: the study's total number of trials (a re-run continues up to it).
        metric: the validation metric to optimise and prune on.
        direction: ``minimize`` or ``maximize``.
        sampler: ``tpe`` or ``random``.
        seed: the sampler's seed (each worker derives its own from it).
        pruner: ``median``, ``hyperband`` or ``none``.
        pruner_startup: median: trials that finish before any is pruned.
        pruner_warmup: median: validations (epochs) a trial always runs.
        max_epochs: the trainer's max_epochs (hyperband's largest budget); None: unknown.
        wandb: the config logs with one WandbLogger.
        fixed: config values the constraints read that the space does not search.
        deadline: no trial starts after this time (seconds since the epoch); None: no limit.
        threads: torch threads per worker on CPU; None: torch's default.
    """

    study_name: str
    storage: str
    study_dir: str
    args: list[str]
    search: str
    trials: int
    metric: str = "val/loss"
    direction: str = "minimize"
    sampler: str = "tpe"
    seed: int = 0
    pruner: str = "median"
    pruner_startup: int = 3
    pruner_warmup: int = 1
    max_epochs: int | None = None
    wandb: bool = True
    fixed: dict[str, Any] = field(default_factory=dict)
    deadline: float | None = None
    threads: int | None = None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def read(cls, path: str | Path) -> StudySpec:
        return cls(**json.loads(Path(path).read_text()))


def _is_url(storage: str) -> bool:
    return "://" in storage


def open_storage(storage: str) -> optuna.storages.BaseStorage:
    """The Optuna storage ``storage`` names: a journal file for a path, else Optuna's storage for the URL
    (``sqlite:///x.db``, ``postgresql://...``, ``mysql://...``: with a heartbeat, so a trial whose process died
    is failed and retried once; ``redis://...``: a journal on Redis)."""
    if storage.startswith("redis://"):
        from optuna.storages.journal import JournalRedisBackend

        return optuna.storages.JournalStorage(JournalRedisBackend(storage))
    if _is_url(storage):
        from optuna.storages import RDBStorage, RetryFailedTrialCallback

        return RDBStorage(
            storage,
            heartbeat_interval=60,
            grace_period=180,
            failed_trial_callback=RetryFailedTrialCallback(max_retry=1),
        )
    from optuna.storages.journal import JournalFileBackend

    Path(storage).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(storage))


def make_sampler(spec: StudySpec, worker: int, n_existing: int) -> optuna.samplers.BaseSampler:
    """The seeded sampler of one worker: TPE (random for the first quarter of the trials, 4 to 10, then
    model-based; constant liar, so parallel workers do not suggest the same point) or random. Each
    worker's seed derives from ``spec.seed``, its index and the trials the study already holds, so
    workers and continued runs do not repeat each other's draws."""
    seed = spec.seed + 1000 * worker + 1_000_003 * n_existing
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = max(4, min(10, spec.trials // 4))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """``median``: stop a trial whose metric after an epoch is worse than the median of the earlier trials at
    that epoch (after ``pruner_startup`` trials have finished and ``pruner_warmup`` epochs); ``hyperband``:
    successive halving from 1 epoch up to ``max_epochs`` (factor 3); ``none``: never."""
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=spec.pruner_startup, n_warmup_steps=spec.pruner_warmup)
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=spec.max_epochs or "auto")
    return optuna.pruners.NopPruner()


def load_study(spec: StudySpec, worker: int = 0) -> optuna.Study:
    """The study from its storage, with this worker's sampler and the pruner."""
    storage = open_storage(spec.storage)
    n_existing = len(storage.get_all_trials(storage.get_study_id_from_name(spec.study_name), deepcopy=False))
    return optuna.load_study(
        study_name=spec.study_name,
        storage=storage,
        sampler=make_sampler(spec, worker, n_existing),
        pruner=make_pruner(spec),
    )


def counted(trials: list[FrozenTrial]) -> int:
    """Trials that count against ``--trials``: finished (complete, pruned, failed) or running, not the ones
    interrupted (Ctrl-C, a killed worker), whose parameters run again."""
    return sum(1 for t in trials if t.state in COUNTED and not t.user_attrs.get("interrupted"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def fail_stale(study: optuna.Study, grace_s: float = 120.0) -> list[FrozenTrial]:
    """Mark failed the running trials of this host whose worker process is gone (or that never recorded one
    within ``grace_s``), noted ``interrupted``, and queue their parameters again. Returns them."""
    host = socket.gethostname()
    now = datetime.datetime.now()
    stale = []
    storage = study._storage
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        pid, trial_host = t.user_attrs.get("pid"), t.user_attrs.get("host")
        if pid is None:
            young = t.datetime_start is not None and (now - t.datetime_start).total_seconds() < grace_s
            if young:
                continue
        elif trial_host != host or _alive(int(pid)):
            continue
        try:
            storage.set_trial_user_attr(t._trial_id, "interrupted", "its worker process was gone")
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):  # another worker got there first
            continue
        study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
        stale.append(t)
    return stale


@contextlib.contextmanager
def study_lock(study_dir: str | Path) -> Iterator[None]:
    """One worker of this machine at a time between counting the trials and asking for one, so that K
    workers start exactly ``--trials`` trials (workers on other machines are not held)."""
    path = Path(study_dir) / ".ask.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: workers may start one trial too many
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
