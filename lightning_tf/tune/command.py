"""``lightning-tf tune``: search a config's hyperparameters with Optuna.

``lightning-tf tune --config configs/trainer/default.yaml --config configs/vision/digits.yaml
--search configs/search/vision.yaml --trials 8 --jobs 2`` checks the search file against the config
(``fit --print_config``), creates (or continues) the study in its storage, starts ``--jobs`` workers (this same
command with :data:`~.worker.ENV` set, :mod:`.worker`), which print a line per trial, and at the end writes the
report (:mod:`.report`) into ``runs/tune/<study>/``. Ctrl-C or SIGTERM stops the workers (the running trials
end as interrupted and run again when the study continues: the same command). ``--report`` writes the report
of a study without running trials.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = ["tune"]

_DEFAULTS = {"trials": 20, "metric": "val/loss", "sampler": "tpe", "seed": 0, "pruner": "median"}
_DEFAULTS |= {"pruner_startup": 3, "jobs": 1, "heartbeat": 60}
#: metrics a higher value of which is better, by the last part of their name (``val/acc``, ``val/top5``)
_HIGHER_IS_BETTER = ("acc", "top", "bleu", "chrf", "f1", "auc", "precision", "recall", "r2", "sharpe", "ap")


def infer_direction(metric: str) -> str:
    """``maximize`` for a metric whose name says higher is better (``val/acc``, ``val/bleu``), else ``minimize``."""
    return "maximize" if metric.rsplit("/", 1)[-1].lower().startswith(_HIGHER_IS_BETTER) else "minimize"


def tune(
    search: str | None = None,
    trials: int = 20,
    timeout: float | None = None,
    metric: str = "val/loss",
    direction: Literal["minimize", "maximize"] | None = None,
    sampler: Literal["tpe", "random"] = "tpe",
    seed: int = 0,
    pruner: Literal["median", "hyperband", "none"] = "median",
    pruner_startup: int = 3,
    pruner_warmup: int | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    jobs: int = 1,
    heartbeat: int = 60,
    report: bool = False,
    forwarded: list[str] | None = None,
) -> None:
    """Search a config's hyperparameters with Optuna: parallel, pruned, resumable. Every other argument (--config
    files, --model.init_args.lr=..., --trainer.max_epochs=...) is given to each trial's lightning-tf fit, as
    written. Outputs: runs/tune/<study>/ (the trials' runs, best.yaml, trials.csv, summary.md, figures).
    Docs: docs/tune.md.

    Args:
        search: the search file (configs/search/<task>.yaml): config names -> ranges
        trials: the study's total number of trials (a re-run continues up to it)
        timeout: seconds after which no new trial starts
        metric: the validation metric to optimise
        direction: default: maximize for accuracy-like metrics (acc, top5, bleu, chrf, f1, ...), else minimize
        sampler: the sampler (seeded)
        seed: the sampler's seed
        pruner: stop unpromising trials after an epoch
        pruner_startup: median: trials that finish before any is pruned
        pruner_warmup: median: epochs every trial runs before it can be pruned (default: a tenth of
            trainer.max_epochs, at least 1)
        storage: an Optuna storage URL (sqlite:///tune.db, postgresql+psycopg://..., redis://...) or a journal
            file; default runs/tune/<study>/journal.log
        study_name: the study (default: <task>-<last config's name>); re-running continues it
        jobs: worker processes on this machine
        heartbeat: database storages: seconds between a running trial's heartbeats; a trial silent for twice
            as long (its worker died, on any machine) is failed and run again
        report: write the study's report and exit
        forwarded: the arguments each trial's fit gets
    """
    options = {k: v for k, v in locals().items() if k != "forwarded"}
    rest = list(forwarded or [])
    for name, low in (("trials", 1), ("jobs", 1), ("pruner_startup", 0), ("pruner_warmup", 0), ("heartbeat", 1)):
        if options[name] is not None and options[name] < low:
            raise ValueError(f"--{name} must be >= {low}, got {options[name]}")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {timeout}")
    if os.environ.get("LIGHTNING_TF_TUNE_WORKER"):
        from .worker import ENV, Worker

        raise SystemExit(Worker(json.loads(os.environ[ENV]), options).run())
    if report:
        if rest:
            raise ValueError(f"--report takes only --study_name and --storage, not {' '.join(rest)}")
        return _print_report(_write_report(_open(options)))
    if not search:
        raise ValueError("--search is required: a search file such as configs/search/vision.yaml")
    _run(options, rest)


def _study_dir(name: str) -> Path:
    return Path("runs") / "tune" / name


def _describe(storage: str) -> str:
    return storage if "://" in storage else os.path.relpath(storage)


def _command_line(options: dict[str, Any], rest: list[str]) -> list[str]:
    """The arguments that repeat this command."""
    argv: list[str] = []
    for name, value in options.items():
        if value is None or value is False or _DEFAULTS.get(name) == value:
            continue
        argv += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return argv + rest


def _open(options: dict[str, Any]) -> Any:
    import optuna

    from .worker import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if options["study_name"] is None:
        raise ValueError("--report needs --study_name (the folder name under runs/tune/)")
    storage = options["storage"] or str(_study_dir(options["study_name"]) / "journal.log")
    if "://" not in storage and not Path(storage).is_file():
        raise FileNotFoundError(f"no study {options['study_name']!r}: {storage} not found (give --storage)")
    try:
        return optuna.load_study(study_name=options["study_name"], storage=open_storage(storage, options["heartbeat"]))
    except KeyError:
        raise ValueError(f"no study {options['study_name']!r} in {_describe(storage)}") from None


def _write_report(study: Any) -> dict[str, Path]:
    """The report in the folder the study recorded when it exists here, else ``runs/tune/<study>``."""
    from .report import write_report

    recorded = study.user_attrs.get("study_dir")
    return write_report(study, Path(recorded) if recorded and Path(recorded).is_dir() else _study_dir(study.study_name))


def _print_report(written: dict[str, Path]) -> None:
    def shown(path: Path) -> str:
        return os.path.relpath(path) if path.absolute().is_relative_to(Path.cwd()) else str(path.absolute())

    print(f"report: {shown(written['summary'])}, {shown(written['trials'])}", flush=True)
    figures = [p.name for k, p in written.items() if k.endswith(".png")]
    if figures:
        print(f"figures: {', '.join(figures)}", flush=True)
    if "best" in written:
        print(f"best config: {shown(written['best'])}\n  train it: lightning-tf fit --config {shown(written['best'])}")
    else:
        print("no trial has completed: no best.yaml", flush=True)


def resolved_config(args: list[str], values: dict[str, Any], source: str) -> dict[str, Any]:
    """The complete config ``lightning-tf fit <args> <values as overrides>`` would train, as ``fit --print_config``
    writes it; what the config rejects is one ValueError line naming ``source`` (the search file)."""
    from .overrides import to_overrides

    env = {k: v for k, v in os.environ.items() if k not in ("LIGHTNING_TF_DEBUG", "LIGHTNING_TF_TUNE_WORKER")}
    cmd = [sys.executable, "-m", "lightning_tf", "fit", *args, *to_overrides(values), "--print_config"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        line = ([x for x in proc.stderr.splitlines() if x.strip()] or ["fit --print_config failed"])[-1]
        raise ValueError(f"{source} with these configs: {line.removeprefix('lightning-tf: error: ')}")
    return yaml.safe_load(proc.stdout)


def _check_continuation(study: Any, attrs: dict[str, Any]) -> None:
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


def _alive(pid: int | None) -> bool:
    if pid is None:
        return True  # not yet recorded: its worker is starting it
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_orphans(study: Any) -> list[int]:
    """A journal has no heartbeat: fail the running trials of this machine whose worker is gone, and queue them
    again (Optuna's retry callback); their numbers."""
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.trial import TrialState

    from .worker import retry

    gone, trials = [], study.get_trials(deepcopy=False)
    for t in trials:
        pid, origin = t.user_attrs.get("pid"), RetryHeartbeatStaleTrialCallback.retry_history(t)[-1:]
        if origin and trials[origin[0]].user_attrs.get("pid") == pid:
            continue  # a retry that has not yet recorded its own worker (its attributes are the original's)
        if t.state == TrialState.RUNNING and t.user_attrs.get("host") == socket.gethostname() and not _alive(pid):
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            retry(study, t)
            print(f"trial {t.number} was left running by a worker that is gone: failed, queued again", flush=True)
            gone.append(t.number)
    return gone


def _run(options: dict[str, Any], rest: list[str]) -> None:
    import optuna

    from lightning_tf.training.resources import bundled_configs

    from .overrides import absolute_configs, args_key, trial_overrides
    from .space import load_space, probe
    from .worker import held, open_storage

    t0 = time.time()
    if options["study_name"] is not None:
        trial_overrides(options["study_name"], 0, "", False, [])  # a name that can name folders and runs
    args = absolute_configs(bundled_configs(rest))
    search = bundled_configs(["--config", options["search"]])[1]
    space = load_space(search)  # the search file's own errors before the config is read
    search = os.path.abspath(search)
    config = resolved_config(args, probe(space), search)
    configs = [Path(a.partition("=")[2] or b).stem for a, b in zip(args, [*args[1:], ""]) if a.split("=")[0] == "--config"]
    task = str(config.get("model", {}).get("class_path", "model")).split(".")
    name = options["study_name"] or "-".join([task[1] if task[0] == "lightning_tf" else task[-1].lower(), *configs[-1:]])
    study_dir = _study_dir(name).absolute()
    storage = options["storage"] or str(study_dir / "journal.log")
    storage = storage if "://" in storage else os.path.abspath(storage)
    direction = options["direction"] or infer_direction(options["metric"])
    trainer = config.get("trainer") or {}
    max_epochs = trainer.get("max_epochs") if isinstance(trainer.get("max_epochs"), int) else None
    max_epochs = max_epochs if max_epochs and max_epochs > 0 else None
    warmup = options["pruner_warmup"] if options["pruner_warmup"] is not None else max(1, (max_epochs or 10) // 10)
    logger = trainer.get("logger")
    attrs = {
        "args": args,
        "args_key": args_key(args),
        "search": search,
        "search_text": Path(search).read_text(),
        "metric": options["metric"],
        "direction": direction,
        "study_dir": str(study_dir),
        "max_epochs": max_epochs,
        "wandb": isinstance(logger, dict) and str(logger.get("class_path", "")).endswith("WandbLogger"),
        "config": config,
    }
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=name, storage=open_storage(storage, options["heartbeat"]), direction=direction, load_if_exists=True
    )
    if "args" in study.user_attrs:
        _check_continuation(study, attrs)
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    journal = "://" not in storage or storage.startswith("redis://")
    if journal:
        fail_orphans(study)
    left = options["trials"] - held([t for t in study.get_trials(deepcopy=False) if t.state.name != "RUNNING"])
    print(
        f"study {name}: {options['trials'] - left} of {options['trials']} trials held; {options['jobs']} worker(s); "
        f"{options['metric']} ({direction}); sampler {options['sampler']} (seed {options['seed']}); pruner "
        f"{options['pruner']}" + (f" (after {options['pruner_startup']} trials, from epoch {warmup + 1})" if options["pruner"] == "median" else ""),
        flush=True,
    )
    print(f"  storage {_describe(storage)} (watch it: optuna-dashboard {_describe(storage)})", flush=True)
    print(f"  folder {os.path.relpath(study_dir)}/ (each trial's fit output: trials/<number>/fit.log)", flush=True)
    status = 0
    if left <= 0:
        print(f"the study holds {options['trials']} trials: --trials {2 * options['trials']} runs more", flush=True)
    else:
        settings = {"parent": os.getpid(), "study": name, "storage": storage, "warmup": warmup, "max_epochs": max_epochs}
        argv = _command_line(options, rest)
        status = _supervise(settings, left, options["jobs"], argv, study if journal else None)
        run = {"wall_s": round(time.time() - t0, 1), "jobs": options["jobs"], "trials": options["trials"]}
        study.set_user_attr(f"run:{socket.gethostname()}:{os.getpid()}:{int(t0)}", run)
        if status == 130:
            print(f"stopped; continue the study with the same command: lightning-tf tune {shlex.join(argv)}")
    _print_report(_write_report(study))
    if status:
        raise SystemExit(status)


def _supervise(settings: dict[str, Any], left: int, jobs: int, argv: list[str], journal_study: Any) -> int:
    """Start the workers (this command, as workers), forward Ctrl-C / SIGTERM, fail the trials of a worker that
    dies (a journal: no heartbeat); the command's exit status."""
    gpus = 0
    if jobs > 1:
        import torch

        gpus = torch.cuda.device_count()
    procs = []
    for i in range(jobs):
        share = left // jobs + (i < left % jobs)
        if not share:
            continue
        env = {**os.environ, "LIGHTNING_TF_TUNE_WORKER": json.dumps({**settings, "index": i, "trials": share})}
        if gpus > 1 and "CUDA_VISIBLE_DEVICES" not in env:
            env["CUDA_VISIBLE_DEVICES"] = str(i % gpus)
        cmd = [sys.executable, "-m", "lightning_tf", "tune", *argv]
        procs.append(subprocess.Popen(cmd, env=env, start_new_session=True))
    stops = {"n": 0}

    def on_signal(signum: int, frame: Any) -> None:
        stops["n"] += 1
        if stops["n"] == 1:
            print("\nstopping: the running trials end as interrupted and run again when the study continues "
                  "(Ctrl-C again: kill them now)", flush=True)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if stops["n"] == 1 else signal.SIGKILL)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    status, seen = 0, set()
    try:
        while len(seen) < len(procs):
            time.sleep(0.5)
            for i, proc in enumerate(procs):
                if i in seen or proc.poll() is None:
                    continue
                seen.add(i)
                if proc.returncode == 3:  # a study every trial of which would fail alike (a wrong --metric)
                    status = 1
                    on_signal(signal.SIGTERM, None)
                elif proc.returncode != 0 and not stops["n"]:
                    print(f"worker {i} ended with status {proc.returncode}", flush=True)
                    status = 1
                    if journal_study is not None:
                        fail_orphans(journal_study)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 130 if stops["n"] and not status else status
