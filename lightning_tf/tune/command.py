"""``lightning-tf tune`` (docs/tune.md): the options checked, the study created or continued, its trials run
(:mod:`.trials`), the report written (:mod:`.report`); ``--report`` writes the report alone.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import yaml

__all__ = ["check_study_name", "config_args", "tune"]


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
        jobs: trials run at once on this machine
        heartbeat: database storages: seconds between a running trial's heartbeats; a trial silent for twice
            as long (its command died, on any machine) is failed and run again
        report: write the study's report and exit
        forwarded: the arguments each trial's fit gets
    """
    options = {k: v for k, v in locals().items() if k != "forwarded"}
    for name, low in (("trials", 1), ("jobs", 1), ("pruner_startup", 0), ("pruner_warmup", 0), ("heartbeat", 1)):
        if options[name] is not None and options[name] < low:
            raise ValueError(f"--{name} must be >= {low}, got {options[name]}")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {timeout}")
    if report:
        if forwarded:
            raise ValueError(f"--report takes only --study_name and --storage, not {' '.join(forwarded)}")
        return _report(_open(options))
    if not search:
        raise ValueError("--search is required: a search file such as configs/search/vision.yaml")
    _run(options, list(forwarded or []))


def check_study_name(name: str) -> str:
    """``name``, which names folders and wandb runs: letters, digits, ``-`` and ``_``."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"study name {name!r}: use letters, digits, '-' and '_' only")
    return name


def config_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``args`` with every ``--config`` file as an absolute path (the study's record works from any folder), and as
    a digest of its content (the key a continued study is compared by: the same wherever the clone is)."""
    absolute, key = list(args), list(args)
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        j, value = (i, value) if eq else (i + 1, args[i + 1] if i + 1 < len(args) else "")
        if name == "--config" and value and os.path.isfile(value):
            prefix = "--config=" if eq else ""
            absolute[j] = prefix + os.path.abspath(value)
            key[j] = f"{prefix}sha256:{hashlib.sha256(Path(value).read_bytes()).hexdigest()[:16]}"
    return absolute, key


def _where(name: str, storage: str | None) -> tuple[Path, str]:
    """The study's folder, and its storage: ``--storage`` (a path made absolute), else the folder's journal."""
    folder = (Path("runs") / "tune" / name).absolute()
    storage = storage or str(folder / "journal.log")
    return folder, storage if "://" in storage else os.path.abspath(storage)


def _open(options: dict[str, Any]) -> Any:
    import optuna

    from .report import shown
    from .study import open_storage

    if options["study_name"] is None:
        raise ValueError("--report needs --study_name (the folder name under runs/tune/)")
    storage = _where(options["study_name"], options["storage"])[1]
    if "://" not in storage and not Path(storage).is_file():
        raise FileNotFoundError(f"no study {options['study_name']!r}: {shown(storage)} not found (give --storage)")
    try:
        return optuna.load_study(study_name=options["study_name"], storage=open_storage(storage, options["heartbeat"]))
    except KeyError:
        raise ValueError(f"no study {options['study_name']!r} in {shown(storage)}") from None


def _report(study: Any) -> None:
    """Write the report into the study's recorded folder if it exists here, else ``runs/tune/<study>``; say where."""
    from .report import shown, write_report

    recorded = study.user_attrs.get("study_dir")
    folder = Path(recorded) if recorded and Path(recorded).is_dir() else _where(study.study_name, None)[0]
    written = write_report(study, folder)
    figures = ", ".join(k for k in written if k.endswith(".png")) or "none yet"
    print(f"report: {shown(written['summary'])}, {shown(written['trials'])}\nfigures: {figures}")
    best = shown(written["best"]) if "best" in written else None
    print(f"best config: {best}\n  train it: lightning-tf fit --config {best}" if best else "no trial has completed")


def resolved_config(args: list[str], values: dict[str, Any], source: str) -> dict[str, Any]:
    """The complete config ``lightning-tf fit <args> <values as overrides>`` would train, as ``fit --print_config``
    writes it; what the config rejects is one ValueError line naming ``source`` (the search file)."""
    from .space import to_overrides

    env = {k: v for k, v in os.environ.items() if k != "LIGHTNING_TF_DEBUG"}
    cmd = [sys.executable, "-m", "lightning_tf", "fit", *args, *to_overrides(values), "--print_config"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        line = ([x for x in proc.stderr.splitlines() if x.strip()] or ["fit --print_config failed"])[-1]
        raise ValueError(f"{source} with these configs: {line.removeprefix('lightning-tf: error: ')}")
    return yaml.safe_load(proc.stdout)


def _run(options: dict[str, Any], rest: list[str]) -> None:
    import optuna

    from lightning_tf.training.resources import bundled_configs

    from .report import shown
    from .space import load_space, probe
    from .study import check_continuation, fail_orphans, held, infer_direction, make_sampler, open_storage
    from .trials import Trials

    sys.stdout.reconfigure(line_buffering=True)  # each line as it is printed, into a file or a pipe too
    t0, o = time.time(), SimpleNamespace(**options)
    if o.study_name is not None:
        check_study_name(o.study_name)  # before the configs are read, as the other options
    args, args_key = config_args(bundled_configs(rest))
    search = bundled_configs(["--config", o.search])[1]
    space = load_space(search)  # the search file's own errors before the configs are read
    search = os.path.abspath(search)
    config = resolved_config(args, probe(space), search)
    files = [Path(a).stem for a, k in zip(args, args_key) if a != k]  # the config files: where the key has a digest
    task = str((config.get("model") or {}).get("class_path", "model")).split(".")
    task = task[1] if task[0] == "lightning_tf" else task[-1].lower()
    name = check_study_name(o.study_name or "-".join([task, *files[-1:]]))
    study_dir, storage = _where(name, o.storage)
    direction = o.direction or infer_direction(o.metric)
    trainer = config.get("trainer") or {}
    max_epochs = trainer.get("max_epochs")
    max_epochs = max_epochs if isinstance(max_epochs, int) and max_epochs > 0 else None
    warmup = o.pruner_warmup if o.pruner_warmup is not None else max(1, (max_epochs or 10) // 10)
    wandb = str((trainer.get("logger") or {}).get("class_path", "")).endswith("WandbLogger")
    attrs = {"args": args, "args_key": args_key, "search": search, "search_text": Path(search).read_text()}
    attrs |= {"metric": o.metric, "direction": direction, "study_dir": str(study_dir), "config": config}
    attrs |= {"max_epochs": max_epochs, "wandb": wandb, "pruner": [o.pruner, o.pruner_startup, warmup, max_epochs]}
    opened = open_storage(storage, o.heartbeat)
    study = optuna.create_study(study_name=name, storage=opened, direction=direction, load_if_exists=True)
    if "args" in study.user_attrs:
        check_continuation(study, attrs)
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    if isinstance(opened, optuna.storages.JournalStorage):  # Optuna's heartbeat is the database's alone
        fail_orphans(study)
    left = o.trials - held([t for t in study.get_trials(deepcopy=False) if t.state.name != "RUNNING"])
    jobs = max(1, min(o.jobs, left))
    print(
        f"study {name}: {o.trials - left} of {o.trials} trials held; {jobs} at once; {o.metric} ({direction}); "
        f"sampler {o.sampler} (seed {o.seed}); pruner {o.pruner}"
        + (f" (after {o.pruner_startup} trials, from epoch {warmup + 1})" if o.pruner == "median" else "")
        + f"\n  storage {shown(storage)} (watch it: optuna-dashboard {shown(storage)})\n"
        f"  folder {shown(study_dir)}/ (each trial's fit output: trials/<number>/fit.log)",
    )
    status = 0
    if left <= 0:
        print(f"the study holds {o.trials} trials: --trials {2 * o.trials} runs more")
    else:
        study.sampler = make_sampler(o.sampler, o.seed, o.trials, len(study.trials))
        timeout = None if o.timeout is None else max(0.0, t0 + o.timeout - time.time())
        status = Trials(study, space, o.trials, jobs, storage).run(timeout)
        if status == 130:  # the command line as typed (tune runs only from it)
            print(f"stopped; continue the study with the same command: lightning-tf {shlex.join(sys.argv[1:])}")
    _report(study)
    if status:
        raise SystemExit(status)
