"""``lightning-tf tune``: search a config's hyperparameters with Optuna.

``lightning-tf tune --config configs/trainer/default.yaml --config configs/vision/digits.yaml
--search configs/search/vision.yaml --trials 8 --jobs 2`` checks the search file against the config, creates
(or continues) the study in its storage, starts ``--jobs`` worker processes (:mod:`.worker`) that run the
trials, prints the study's log as it grows, and at the end writes the report (:mod:`.report`) into
``runs/tune/<study>/``. Ctrl-C stops the workers cleanly (the running trials end as ``interrupted``); the
same command continues the study. ``--report`` writes the report of a study without running trials.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

__all__ = ["tune"]


def _study_dir(name: str) -> Path:
    return Path("runs") / "tune" / name


def _default_storage(name: str) -> str:
    return str(_study_dir(name) / "journal.log")


def _describe_storage(storage: str) -> str:
    return storage if "://" in storage else os.path.relpath(storage)


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
    report: bool = False,
    forwarded: list[str] | None = None,
) -> None:
    """Search a config's hyperparameters with Optuna: parallel, pruned, resumable. Every other argument (--config
    files, --model.init_args.lr=..., --trainer.max_epochs=...) is given to each trial's lightning-tf fit, as
    written. Outputs: runs/tune/<study>/ (the trials' runs, tune.log, best.yaml, trials.csv, summary.md,
    figures). Docs: docs/tune.md.

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
        storage: an Optuna storage URL (sqlite:///tune.db, postgresql://..., mysql://...) or a journal file;
            default runs/tune/<study>/journal.log
        study_name: the study (default: <task>-<size>-<dataset> of the config); re-running continues it
        jobs: worker processes on this machine
        report: write the study's report and exit
        forwarded: the arguments each trial's fit gets
    """
    options = argparse.Namespace(**{k: v for k, v in locals().items() if k != "forwarded"})
    rest = list(forwarded or [])
    argv = _command_line(options, rest)
    for name, low in (("trials", 1), ("jobs", 1), ("pruner_startup", 0), ("pruner_warmup", 0)):
        if getattr(options, name) is not None and getattr(options, name) < low:
            raise ValueError(f"--{name} must be >= {low}, got {getattr(options, name)}")
    if options.timeout is not None and options.timeout <= 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {options.timeout}")
    if options.report:
        return _report_only(options, rest)
    if not options.search:
        raise ValueError("--search is required: a search file such as configs/search/vision.yaml")
    try:
        _run(options, rest, argv)
    except KeyboardInterrupt:  # before the workers started (they handle their own)
        print("\nstopped before any trial started", file=sys.stderr, flush=True)
        raise SystemExit(130) from None


def _command_line(options: argparse.Namespace, rest: list[str]) -> list[str]:
    """The arguments that repeat this command (printed when it stops)."""
    defaults = {
        "trials": 20,
        "metric": "val/loss",
        "sampler": "tpe",
        "seed": 0,
        "pruner": "median",
        "pruner_startup": 3,
        "jobs": 1,
    }
    argv: list[str] = []
    for name, value in vars(options).items():
        if value is None or value is False or defaults.get(name) == value:
            continue
        argv += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return argv + rest


def _open(options: argparse.Namespace) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from .study import open_storage

    if options.study_name is None:
        raise ValueError("--report needs --study_name (the folder name under runs/tune/)")
    storage = options.storage or _default_storage(options.study_name)
    if "://" not in storage and not Path(storage).is_file():
        raise FileNotFoundError(f"no study {options.study_name!r}: {storage} not found (give --storage)")
    try:
        return optuna.load_study(study_name=options.study_name, storage=open_storage(storage))
    except KeyError:
        raise ValueError(f"no study {options.study_name!r} in {_describe_storage(storage)}") from None


def _write_report(study: Any, base: Any = None, folder: Path | None = None) -> dict[str, Path]:
    """The report of ``study`` in ``folder`` (default: the folder the study recorded, when it exists here, else
    ``runs/tune/<study>``), ``best.yaml`` from ``base`` (the study's configs parsed here; default: the
    configs the study recorded)."""
    from .config import BaseConfig
    from .report import ranked_trials, write_report

    ranked = ranked_trials(study)
    best = None
    if ranked:
        base = base if base is not None else BaseConfig(list(study.user_attrs.get("args", [])))
        best = base.dump(ranked[0].params)
    if folder is None:
        recorded = study.user_attrs.get("study_dir")
        folder = Path(recorded) if recorded and Path(recorded).is_dir() else _study_dir(study.study_name)
    return write_report(study, folder, best)


def _print_report(written: dict[str, Path]) -> None:
    from lightning_tf.cli.runs import shown

    print(f"report: {shown(written['summary'])}, {shown(written['trials'])}", flush=True)
    figures = [p.name for k, p in written.items() if k.endswith(".png")]
    if figures:
        print(f"figures: {', '.join(figures)}", flush=True)
    if "best" in written:
        print(
            f"best config: {shown(written['best'])}\n  train it: lightning-tf fit --config {shown(written['best'])}",
            flush=True,
        )
    else:
        print("no trial has completed: no best.yaml", flush=True)


def _report_only(options: argparse.Namespace, rest: list[str]) -> None:
    if rest:
        raise ValueError(f"--report takes only --study_name and --storage, not {' '.join(rest)}")
    _print_report(_write_report(_open(options)))


def _check_continuation(study: Any, attrs: dict[str, Any]) -> None:
    """A re-run continues the study only with the same configs and metric; a changed search file is noted."""
    old = study.user_attrs
    if old.get("args_key") != attrs["args_key"]:
        raise ValueError(
            f"study {study.study_name!r} was started with other arguments or config files "
            f"({shlex.join(old.get('args', []))}); give the same ones to continue it, or another --study_name"
        )
    for key in ("metric", "direction"):
        if old.get(key) != attrs[key]:
            raise ValueError(
                f"study {study.study_name!r} optimises {old.get('metric')} ({old.get('direction')}); "
                f"--metric {attrs['metric']} / --direction {attrs['direction']} would mix two objectives"
            )
    if old.get("search_text") != attrs["search_text"]:
        print(f"note: the search file differs from the one study {study.study_name!r} started with", flush=True)


def _run(options: argparse.Namespace, rest: list[str], argv: list[str]) -> None:
    from lightning_tf.training.resources import bundled_configs

    from .overrides import absolute_configs, args_key, trial_overrides
    from .space import SearchSpace

    t0 = time.time()
    if options.study_name is not None:
        trial_overrides(options.study_name, 0, "", False, [])  # a name that can name folders and runs
    args = absolute_configs(bundled_configs(rest))
    search = bundled_configs(["--config", options.search])[1]
    space = SearchSpace.load(search)  # the search file's own errors before the config is parsed

    import optuna

    from .config import BaseConfig, check_space
    from .study import StudySpec, counted, infer_direction, open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base = BaseConfig(args)
    fixed = check_space(space, base)
    name = options.study_name or base.task_name()
    study_dir = _study_dir(name)
    storage = options.storage or _default_storage(name)
    direction = options.direction or infer_direction(options.metric)
    max_epochs = base.get("trainer.max_epochs")
    max_epochs = max_epochs if isinstance(max_epochs, int) and max_epochs > 0 else None
    warmup = options.pruner_warmup if options.pruner_warmup is not None else max(1, (max_epochs or 10) // 10)
    attrs = {
        "args": args,
        "args_key": args_key(args),
        "search": os.path.abspath(search),
        "search_text": space.text,
        "metric": options.metric,
        "direction": direction,
        "study_dir": str(study_dir.absolute()),
        "max_epochs": max_epochs,
    }
    study = optuna.create_study(
        study_name=name, storage=open_storage(storage), direction=direction, load_if_exists=True
    )
    if "args" in study.user_attrs:
        _check_continuation(study, attrs)
    else:
        for key, value in attrs.items():
            study.set_user_attr(key, value)
    import torch

    cpus = os.cpu_count() or 1
    spec = StudySpec(
        study_name=name,
        storage=storage if "://" in storage else os.path.abspath(storage),
        study_dir=str(study_dir.absolute()),
        args=args,
        search=os.path.abspath(search),
        trials=options.trials,
        metric=options.metric,
        direction=direction,
        sampler=options.sampler,
        seed=options.seed,
        pruner=options.pruner,
        pruner_startup=options.pruner_startup,
        pruner_warmup=warmup,
        max_epochs=max_epochs,
        wandb=base.uses_wandb(),
        fixed=fixed,
        deadline=None if options.timeout is None else t0 + options.timeout,
        threads=None if torch.cuda.is_available() else max(1, cpus // options.jobs),
    )
    _fail_stale(study, study_dir)
    held = counted(study.get_trials(deepcopy=False))
    print(
        f"study {name}: {held} of {options.trials} trials held; {options.jobs} worker(s); {options.metric} "
        f"({direction}); sampler {options.sampler} (seed {options.seed}); pruner {options.pruner}"
        + (f" (after {options.pruner_startup} trials, from epoch {warmup + 1})" if options.pruner == "median" else ""),
        flush=True,
    )
    print(
        f"  storage {_describe_storage(storage)} (watch it: optuna-dashboard {_describe_storage(storage)})", flush=True
    )
    print(f"  folder {study_dir}/ (log: {study_dir}/tune.log; workers' output: {study_dir}/workers/)", flush=True)
    status = 0
    if held >= options.trials:
        print(
            f"the study already holds {held} trials: --trials {held + options.trials} runs {options.trials} more",
            flush=True,
        )
    else:
        status = _supervise(spec, options.jobs, study_dir)
        study.set_user_attr(
            f"run:{socket.gethostname()}:{os.getpid()}:{int(t0)}",
            {"wall_s": round(time.time() - t0, 1), "jobs": options.jobs, "trials": options.trials},
        )
    _print_report(_write_report(optuna.load_study(study_name=name, storage=open_storage(storage)), base, study_dir))
    if status == 130:
        print(f"stopped; continue the study with the same command: lightning-tf tune {shlex.join(argv)}", flush=True)
    if status:
        raise SystemExit(status)


def _fail_stale(study: Any, study_dir: Path) -> None:
    """Before counting what the study holds: fail the trials a dead worker left running (they do not count,
    and their parameters run again), said in the study's log."""
    from optuna.storages import fail_stale_trials
    from optuna.storages._heartbeat import is_heartbeat_enabled

    from .study import fail_stale, study_lock
    from .worker import StudyLog

    log = StudyLog(study_dir / "tune.log", "tune")
    with study_lock(study_dir):
        if is_heartbeat_enabled(study._storage):
            fail_stale_trials(study)
        for stale in fail_stale(study):
            message = (
                f"trial {stale.number} was left running by a worker that is gone: failed, its parameters queued again"
            )
            log.write(message)
            print(message, flush=True)


def _supervise(spec: Any, jobs: int, study_dir: Path) -> int:
    """Start the workers, print the study's log as it grows, forward Ctrl-C; the command's exit status."""
    from .worker import EXIT_STOP_STUDY

    workers_dir = study_dir / "workers"
    workers_dir.mkdir(parents=True, exist_ok=True)
    spec_path = workers_dir / f"spec-{os.getpid()}.json"
    spec.save(spec_path)
    log_path = study_dir / "tune.log"
    offset = log_path.stat().st_size if log_path.exists() else 0
    gpus = _gpu_count()
    procs: list[tuple[subprocess.Popen, Path]] = []
    for i in range(jobs):
        env = dict(os.environ)
        if gpus > 1 and "CUDA_VISIBLE_DEVICES" not in env:
            env["CUDA_VISIBLE_DEVICES"] = str(i % gpus)
        out = workers_dir / f"worker-{i}.log"
        with open(out, "ab") as handle:
            cmd = [sys.executable, "-m", "lightning_tf.tune.worker", str(spec_path), str(i), str(os.getpid())]
            procs.append(
                (subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True), out)
            )
    stops = {"n": 0}

    def on_signal(signum: int, frame: Any) -> None:
        stops["n"] += 1
        if stops["n"] == 1:
            print(
                "\nstopping: the running trials end as interrupted and run again when the study continues "
                "(Ctrl-C again: kill them now)",
                flush=True,
            )
            sig = signal.SIGINT
        else:
            sig = signal.SIGKILL
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(sig)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            offset = _echo(log_path, offset)
            if all(proc.poll() is not None for proc, _ in procs):
                break
            stopped = [p for p, _ in procs if p.returncode == EXIT_STOP_STUDY]
            if stopped and not stops["n"]:
                stops["n"] = 1
                for proc, _ in procs:
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
        _echo(log_path, offset)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    status = 0
    for i, (proc, out) in enumerate(procs):
        if proc.returncode == EXIT_STOP_STUDY:
            status = 1
        elif proc.returncode not in (0, None) and not stops["n"]:
            print(f"worker {i} exited with status {proc.returncode}; its output: {out}", flush=True)
            status = 1
    spec_path.unlink(missing_ok=True)
    return 130 if stops["n"] and status == 0 else status


def _echo(path: Path, offset: int) -> int:
    """Print what ``path`` gained since ``offset``; the new offset."""
    if not path.exists():
        return offset
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n") + 1  # whole lines only
    if end:
        sys.stdout.write(data[:end].decode(errors="replace"))
        sys.stdout.flush()
    return offset + end


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no CUDA: no devices to hand out
        return 0
