"""The study's bookkeeping, on Optuna's public API: the storage (a journal file by default; a database gets
Optuna's heartbeat), the sampler and pruner, trials queued again with Optuna's ``RetryHeartbeatStaleTrialCallback``,
what counts against ``--trials``, and the trials a dead command left running in a journal (which has no heartbeat).
"""

from __future__ import annotations

import os
import shlex
import socket
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback as Retry
from optuna.trial import FrozenTrial, TrialState

__all__ = ["check_continuation", "fail_orphans", "held", "infer_direction", "make_pruner", "make_sampler"]
__all__ += ["open_storage", "retried", "retry", "state_name", "tally"]

#: at most this many runs again of one trial's parameters
MAX_RETRY = 3
#: metrics a higher value of which is better, by the last part of their name (``val/acc``, ``val/top5``)
_HIGHER_IS_BETTER = ("acc", "top", "bleu", "chrf", "f1", "auc", "precision", "recall", "r2", "sharpe", "ap")
# the retry callback is marked experimental; the command relies on it as documented
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def infer_direction(metric: str) -> str:
    """``maximize`` for a metric whose name says higher is better (``val/acc``, ``val/bleu``), else ``minimize``."""
    return "maximize" if metric.rsplit("/", 1)[-1].lower().startswith(_HIGHER_IS_BETTER) else "minimize"


def open_storage(storage: str, heartbeat: int = 60) -> optuna.storages.BaseStorage:
    """A journal file for a path, a journal on Redis for ``redis://``, else Optuna's RDB storage with a heartbeat
    every ``heartbeat`` seconds: a trial silent for twice as long (its command died, on any machine) is failed and
    queued again by Optuna when a command next asks for a trial."""
    from optuna.storages.journal import JournalFileBackend, JournalRedisBackend

    if storage.startswith("redis://"):
        return optuna.storages.JournalStorage(JournalRedisBackend(storage))
    if "://" in storage:
        retry = Retry(max_retry=MAX_RETRY)
        return optuna.storages.RDBStorage(
            storage, heartbeat_interval=heartbeat, grace_period=2 * heartbeat, heartbeat_stale_trial_callback=retry
        )
    Path(storage).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(storage))


def make_sampler(kind: str, seed: int, trials: int, n_existing: int) -> optuna.samplers.BaseSampler:
    """TPE (random for the first quarter of ``trials``, 4 to 10, then model-based, with the constant liar so that
    trials run at once do not pick the same point) or random; seeded by ``seed`` and the ``n_existing`` trials
    the study holds, so a continued study does not draw again what it drew."""
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


def retry(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue ``trial``'s parameters again (at most :data:`MAX_RETRY` times), as the heartbeat does."""
    Retry(max_retry=MAX_RETRY)(study, trial)


def retried(trials: list[FrozenTrial]) -> set[int]:
    """The numbers of the trials whose parameters were queued again."""
    return {n for t in trials for n in Retry.retry_history(t)}


def state_name(trial: FrozenTrial, again: set[int]) -> str:
    """complete, pruned, failed, refused, interrupted (failed and queued again: ``again``), running or waiting."""
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
    """Trials that count against ``--trials``: finished (not interrupted) or running."""
    counts = tally(trials)
    return sum(counts.get(k, 0) for k in ("complete", "pruned", "failed", "refused", "running"))


def _alive(pid: int | None) -> bool:
    if pid is None:
        return True  # not recorded yet: its command is starting it
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def fail_orphans(study: optuna.Study) -> list[int]:
    """Fail the running trials of this machine whose command is gone and queue them again; their numbers. (A
    journal has no heartbeat; a command records its host and pid on each trial.)"""
    gone, trials = [], study.get_trials(deepcopy=False)
    for t in trials:
        pid, origin = t.user_attrs.get("pid"), Retry.retry_history(t)[-1:]
        if origin and trials[origin[0]].user_attrs.get("pid") == pid:
            continue  # a retry whose command has not recorded itself yet (its attributes are the original's)
        if t.state == TrialState.RUNNING and t.user_attrs.get("host") == socket.gethostname() and not _alive(pid):
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            retry(study, t)
            print(f"trial {t.number} was left running by a command that is gone: failed, queued again", flush=True)
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
        print(f"note: the search file differs from the one study {study.study_name!r} started with", flush=True)
