"""The study's bookkeeping, on Optuna's public API: the storage, the sampler and pruner, a trial as its run opens it,
trials queued again, what counts against ``--trials``, trials a dead command left running in a journal (no heartbeat).
"""

from __future__ import annotations

import collections
import os
import shlex
import socket
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

__all__ = ["STORAGE", "check_continuation", "fail_orphans", "held", "infer_direction", "make_pruner", "make_sampler"]
__all__ += ["open_storage", "open_trial", "retried", "retry", "state_name", "tally"]

#: the environment variable that names the study's storage to a trial's run (not an argument: the run's saved config and
#: its command line would show a database's password)
STORAGE = "LIGHTNING_TF_TUNE_STORAGE"
#: metrics a higher value of which is better, by the last part of their name (``val/acc``, ``val/top5``)
_HIGHER_IS_BETTER = ("acc", "top", "bleu", "chrf", "f1", "auc", "precision", "recall", "r2", "sharpe", "ap")
# the retry callback is marked experimental; the command relies on it as documented
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
optuna.logging.set_verbosity(optuna.logging.WARNING)  # the command prints its own line per trial
#: ``retry(study, trial)`` queues a failed trial's parameters again, at most 3 times, as the heartbeat does
retry = RetryHeartbeatStaleTrialCallback(max_retry=3)


def infer_direction(metric: str) -> str:
    """``maximize`` for a metric whose name says higher is better (``val/acc``, ``val/bleu``), else ``minimize``."""
    return "maximize" if metric.rsplit("/", 1)[-1].lower().startswith(_HIGHER_IS_BETTER) else "minimize"


def open_storage(storage: str, heartbeat: int = 60) -> optuna.storages.BaseStorage:
    """A journal file for a path, a journal on Redis for ``redis://``, else Optuna's RDB storage with a heartbeat
    every ``heartbeat`` seconds (a trial silent for twice as long is failed and queued again)."""
    from optuna.storages.journal import JournalFileBackend, JournalRedisBackend

    if storage.startswith("redis://"):
        return optuna.storages.JournalStorage(JournalRedisBackend(storage))
    if "://" in storage:
        return optuna.storages.RDBStorage(
            storage, heartbeat_interval=heartbeat, grace_period=2 * heartbeat, heartbeat_stale_trial_callback=retry
        )
    Path(storage).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(storage))


def make_sampler(kind: str, seed: int, trials: int, n_existing: int) -> optuna.samplers.BaseSampler:
    """TPE (random for a quarter of ``trials``, 4 to 10, then model-based; the constant liar keeps trials run at once
    apart) or random, seeded by ``seed`` and the ``n_existing`` trials: a continued study does not draw again."""
    seed += 1_000_003 * n_existing
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = max(4, min(10, trials // 4))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def make_pruner(kind: str, startup: int, warmup: int, max_epochs: int | None) -> optuna.pruners.BasePruner:
    """The median pruner (after ``startup`` trials and ``warmup`` epochs), successive halving from one epoch to
    ``max_epochs`` (``hyperband``), or none."""
    if kind == "median":
        return optuna.pruners.MedianPruner(startup, n_warmup_steps=warmup)
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max_epochs or "auto")
    return optuna.pruners.NopPruner()


def open_trial(storage: str, study_name: str, number: int, pruner: list[Any]) -> optuna.Trial:
    """Trial ``number`` of the study, opened from ``storage`` by the run that trains it (another process than the
    command's, as Optuna runs a trial anywhere its storage reaches), pruned by ``make_pruner(*pruner)``."""
    opened = open_storage(storage)
    study = optuna.load_study(study_name=study_name, storage=opened, pruner=make_pruner(*pruner))
    study_id = opened.get_study_id_from_name(study_name)
    return optuna.Trial(study, opened.get_trial_id_from_study_id_trial_number(study_id, number))


def retried(trials: list[FrozenTrial]) -> set[int]:
    """The numbers of the trials whose parameters were queued again."""
    return {n for t in trials for n in retry.retry_history(t)}


def state_name(trial: FrozenTrial, again: set[int]) -> str:
    """complete, pruned, failed, refused, interrupted (failed and queued again: ``again``), running or waiting."""
    if trial.state == TrialState.FAIL:
        if trial.number in again:
            return "interrupted"
        return "refused" if str(trial.user_attrs.get("reason", "")).startswith("refused") else "failed"
    return trial.state.name.lower()


def tally(trials: list[FrozenTrial]) -> collections.Counter[str]:
    """Trials by :func:`state_name`."""
    again = retried(trials)
    return collections.Counter(state_name(t, again) for t in trials)


def held(trials: list[FrozenTrial]) -> int:
    """Trials that count against ``--trials``: finished (not interrupted) or running."""
    return sum(n for state, n in tally(trials).items() if state not in ("interrupted", "waiting"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True  # or another user's (PermissionError)


def fail_orphans(study: optuna.Study) -> list[int]:
    """Fail the running trials of this machine whose command is gone and queue them again; their numbers. (A
    journal has no heartbeat; a command records its host and pid on each trial.)"""
    gone, trials = [], study.get_trials(deepcopy=False)
    for t in trials:
        pid, origin = t.user_attrs.get("pid"), retry.retry_history(t)[-1:]
        if origin and trials[origin[0]].user_attrs.get("pid") == pid:
            continue  # a retry whose command has not recorded itself yet (its attributes are the original's)
        if t.state == TrialState.RUNNING and t.user_attrs.get("host") == socket.gethostname() and not _alive(pid):
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            retry(study, t)
            print(f"trial {t.number} was left running by a command that is gone: failed, queued again")
            gone.append(t.number)
    return gone


def check_continuation(study: optuna.Study, attrs: dict[str, Any]) -> None:
    """A re-run continues the study only with the same configs and metric; a changed search file is noted."""
    old = study.user_attrs
    if old.get("args_key") != attrs["args_key"]:
        raise ValueError(
            f"study {study.study_name!r} was started with other arguments or config files "
            f"({shlex.join(old.get('args', []))}); give the same ones to continue it, or another --study_name"
        )
    if (old.get("metric"), old.get("direction")) != (attrs["metric"], attrs["direction"]):
        raise ValueError(
            f"study {study.study_name!r} optimises {old.get('metric')} ({old.get('direction')}); "
            f"--metric {attrs['metric']} / --direction {attrs['direction']} would mix two objectives"
        )
    if old.get("search_text") != attrs["search_text"]:
        print(f"note: the search file differs from the one study {study.study_name!r} started with")
