"""``lightning-tf tune`` measured: does pruning pay, do parallel trials pay, does a study survive a kill, and
does a tuned Transformer residual beat the closed-form linear model on ETTh1?

Every study is the real command (``python -m lightning_tf tune ...``) in a working folder of its own, timed
from outside; what the studies hold is read back from their journal files. Three sections, each one run:

* ``pruning``: the digits ViT over ``configs/search/vision.yaml``, 24 trials with the median pruner against
  24 without, the same sampler seed, ``--jobs 2``, both optimising the validation loss: the wall time of
  each, the saving, the best validation accuracy of each (target: >= 40% saved, best within 0.5 points).
* ``parallel``: ``--jobs 2`` against ``--jobs 1`` on the same budget (the same trials: the digits ViT's
  optimisation settings, its size fixed, no pruner, so each trial is the same work), trials per hour; then a
  study killed (SIGKILL of the command) after some trials and continued by the same command.
* ``etth1``: 30 trials over ``configs/search/kline.yaml`` on ETTh1 (look-back 336, horizon 96), each under
  the same budget (``--trainer.max_time``, the config's 8 epochs with early stopping); the best trial's own
  checkpoint tested beside the closed-form linear model and the default config trained under that budget,
  all on the same test windows.

Run (the page ``docs/results/tune.md`` and ``tune.json`` are rewritten from what the run measured)::

    python benchmarks/tune.py [--sections pruning parallel etth1] [--data PATH] [--out docs/results/tune]
        [--workdir DIR] [--smoke] [--trials N] [--render]

``--smoke``: every section at toy size (a few batches, a few trials) to check that it runs end to end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "ett" / "ETTh1.csv"
TRAINER = str(ROOT / "configs/trainer/default.yaml")
DIGITS = str(ROOT / "configs/vision/digits.yaml")
ETT = str(ROOT / "configs/kline/patchtst_etth1.yaml")

#: the digits ViT's optimisation settings with its size fixed: every trial the same work (parallel section)
FIXED_COST_SPACE = """\
model.init_args.lr: {type: float, low: 3.0e-4, high: 5.0e-3, log: true}
model.init_args.weight_decay: {type: float, low: 0.005, high: 0.2, log: true}
model.init_args.label_smoothing: {type: float, low: 0.0, high: 0.2}
model.init_args.drop_path: {type: float, low: 0.0, high: 0.3}
"""

SECTIONS = ("pruning", "parallel", "etth1")

#: toy budgets of --smoke (a few batches per epoch)
SMOKE_VISION = ["--trainer.max_epochs=3", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=2"]
SMOKE_ETT = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=2",
    "--trainer.limit_test_batches=2",
]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"),
        "WANDB_SILENT": "true",
    }


def tune(workdir: Path, args: list[str], log: Path, kill_after: int | None = None) -> dict[str, Any]:
    """Run ``lightning-tf tune <args>`` in ``workdir`` (its output to ``log``); with ``kill_after``, SIGKILL it
    once the study holds that many finished trials. Returns the wall time and the exit status."""
    cmd = [sys.executable, "-m", "lightning_tf", "tune", *args]
    print(f"$ lightning-tf tune {' '.join(args)}", flush=True)
    t0 = time.perf_counter()
    with open(log, "a") as out:
        proc = subprocess.Popen(cmd, cwd=workdir, env=_env(), stdout=out, stderr=subprocess.STDOUT)
        name = args[args.index("--study_name") + 1]
        try:
            while proc.poll() is None:
                time.sleep(1.0)
                if kill_after is not None and _finished(workdir, name) >= kill_after:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    break
        finally:
            if proc.poll() is None:
                proc.kill()
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"lightning-tf tune exited with {proc.returncode}; see {log}")
    print(f"  {wall:.0f} s", flush=True)
    return {"wall_s": wall, "returncode": proc.returncode}


def load(workdir: Path, name: str) -> Any:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    path = workdir / "runs" / "tune" / name / "journal.log"
    return optuna.load_study(study_name=name, storage=optuna.storages.JournalStorage(JournalFileBackend(str(path))))


def _finished(workdir: Path, name: str) -> int:
    if not (workdir / "runs" / "tune" / name / "journal.log").exists():
        return 0
    return sum(t.state.name in ("COMPLETE", "PRUNED") for t in load(workdir, name).trials)


def study_row(workdir: Path, name: str, wall_s: float) -> dict[str, Any]:
    """What a study holds: trials by state, the best value and trial, the epochs all trials ran."""
    study = load(workdir, name)
    from lightning_tf.tune.study import tally

    states = tally(study.trials)  # interrupted: failed and queued again
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    best = study.best_trial if complete else None
    accuracies = [t.user_attrs.get("val_metrics", {}).get("val/acc") for t in complete]  # at each trial's best epoch
    accuracies = [a for a in accuracies if a is not None]
    return {
        "study": name,
        "wall_s": wall_s,
        "trials": len(study.trials),
        "states": states,
        "best_value": None if best is None else best.value,
        "best_trial": None if best is None else best.number,
        "best_acc": max(accuracies) if accuracies else None,
        "best_params": None if best is None else best.params,
        "best_run_dir": None if best is None else best.user_attrs.get("run_dir"),
        "epochs": sum(len(t.intermediate_values) for t in study.trials),  # each epoch a trial reported
        "trial_s": sum(t.duration.total_seconds() for t in study.trials if t.duration),
    }


# ------------------------------------------------------------------------------------------ sections
def pruning(workdir: Path, smoke: bool, n: int | None = None) -> dict[str, Any]:
    trials = str(n or (2 if smoke else 24))
    budget = SMOKE_VISION if smoke else []
    base = [
        "--config",
        TRAINER,
        "--config",
        DIGITS,
        *budget,
        "--search",
        str(ROOT / "configs/search/vision.yaml"),
        "--trials",
        trials,
        "--jobs",
        "2",
        "--seed",
        "0",
    ]  # val/loss, the default: it prunes on a fine scale
    rows = {}
    for pruner in ("median", "none"):
        name = f"prune-{pruner}"
        run = tune(workdir, [*base, "--pruner", pruner, "--study_name", name], workdir / f"{name}.log")
        rows[pruner] = study_row(workdir, name, run["wall_s"])
    with_, without = rows["median"], rows["none"]
    saving = 1.0 - with_["wall_s"] / without["wall_s"]
    gap = 100.0 * ((without["best_acc"] or 0.0) - (with_["best_acc"] or 0.0))
    return {
        "trials": int(trials),
        "rows": rows,
        "saving": saving,
        "best_gap_points": gap,
        "target_met": saving >= 0.40 and gap <= 0.5,
        "val_images": digits_val_images(),
    }


def digits_val_images() -> int:
    """How many images the digits config validates on (what one image is worth in accuracy points)."""
    import yaml

    from lightning_tf.vision import ImageDataModule

    init = yaml.safe_load(Path(DIGITS).read_text())["data"]["init_args"]
    data = ImageDataModule(**init)
    data.setup("fit")
    return len(data.val_set)


def parallel(workdir: Path, smoke: bool, n: int | None = None) -> dict[str, Any]:
    space = workdir / "fixed_cost.yaml"
    space.write_text(FIXED_COST_SPACE)
    trials = n or (2 if smoke else 8)
    budget = SMOKE_VISION if smoke else []
    base = [
        "--config",
        TRAINER,
        "--config",
        DIGITS,
        *budget,
        "--search",
        str(space),
        "--trials",
        str(trials),
        "--pruner",
        "none",
        "--seed",
        "0",
    ]
    rows = {}
    for jobs in (1, 2):
        name = f"jobs-{jobs}"
        run = tune(workdir, [*base, "--jobs", str(jobs), "--study_name", name], workdir / f"{name}.log")
        row = study_row(workdir, name, run["wall_s"])
        row["trials_per_hour"] = row["trials"] / (run["wall_s"] / 3600.0)
        rows[jobs] = row
    speedup = rows[2]["trials_per_hour"] / rows[1]["trials_per_hour"]
    # a study killed after some trials and continued with the same command
    kill_trials = 3 if smoke else 6
    kill_after = 1 if smoke else 2
    args = [
        "--config",
        TRAINER,
        "--config",
        DIGITS,
        *budget,
        "--search",
        str(space),
        "--trials",
        str(kill_trials),
        "--pruner",
        "none",
        "--jobs",
        "2",
        "--study_name",
        "killed",
    ]
    first = tune(workdir, args, workdir / "killed.log", kill_after=kill_after)
    before = load(workdir, "killed").trials
    left_running = [t.number for t in before if t.state.name == "RUNNING"]
    second = tune(workdir, args, workdir / "killed.log")
    study = load(workdir, "killed")
    from optuna.storages import RetryHeartbeatStaleTrialCallback as Retry

    retried = {Retry.retried_trial_number(t): t for t in study.trials if Retry.retried_trial_number(t) is not None}
    finished = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
    return {
        "trials": trials,
        "rows": {str(k): v for k, v in rows.items()},
        "speedup": speedup,
        "kill": {
            "trials": kill_trials,
            "finished_before_kill": sum(t.state.name == "COMPLETE" for t in before),
            "left_running": left_running,
            "rerun_with_same_params": all(
                n in retried and retried[n].params == t.params for t in before for n in [t.number] if n in left_running
            ),
            "finished_after": len(finished),
            "first_wall_s": first["wall_s"],
            "second_wall_s": second["wall_s"],
            "states": study_row(workdir, "killed", 0.0)["states"],
        },
    }


def _test_summary(args: list[str]) -> dict[str, Any]:
    """``lightning-tf <args>`` in this process (a fit with --test_after_fit, or a test): the K-line model's
    test summary (the model and the baselines on the same windows)."""
    from lightning_tf.cli.lightning_cli import make_cli

    cli = make_cli(args)
    return cli.model.test_summary


def _scores(summary: dict[str, Any]) -> dict[str, float]:
    return {
        "mse": summary["model"]["model"]["mse"],
        "mae": summary["model"]["model"]["mae"],
        "linear_mse": summary["linear"]["model"]["mse"],
        "linear_mae": summary["linear"]["model"]["mae"],
        "persistence_mse": summary["persistence"]["model"]["mse"],
    }


def etth1(workdir: Path, smoke: bool, data: Path, n: int | None = None) -> dict[str, Any]:
    if not data.is_file():
        return {"skipped": f"{data} not found"}
    trials = n or (2 if smoke else 30)
    budget = SMOKE_ETT if smoke else ["--trainer.max_time=00:00:02:00"]
    common = ["--config", TRAINER, "--config", ETT, f"--data.init_args.path={data}", *budget]
    args = [
        *common,
        "--search",
        str(ROOT / "configs/search/kline.yaml"),
        "--trials",
        str(trials),
        "--jobs",
        "2",
        "--seed",
        "0",
        "--study_name",
        "etth1",
    ]
    run = tune(workdir, args, workdir / "etth1.log")
    row = study_row(workdir, "etth1", run["wall_s"])
    out: dict[str, Any] = {"trials": trials, "budget": budget, "study": row}
    if row["best_run_dir"] is None:
        return out
    run_dir = Path(row["best_run_dir"])
    (ckpt,) = sorted((run_dir / "checkpoints").glob("best-*.ckpt"))[-1:]
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        best = _scores(
            _test_summary(
                ["test", "--config", str(run_dir / "config.yaml"), "--ckpt_path", str(ckpt), "--trainer.logger=false"]
            )
        )
        t0 = time.perf_counter()
        default = _scores(
            _test_summary(
                [
                    "fit",
                    *common,
                    "--test_after_fit=true",
                    "--trainer.logger=false",
                    "--trainer.enable_progress_bar=false",
                ]
            )
        )
        default["train_s"] = time.perf_counter() - t0
    finally:
        os.chdir(cwd)
    out.update(best=best, default=default)
    return out


# ------------------------------------------------------------------------------------------ the page
def _min(s: float) -> str:
    return f"{s / 60:.1f} min"


def _states(states: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(states.items()))


def _params(params: dict[str, Any] | None) -> str:
    if not params:
        return "-"
    shown = (f"{v:.3g}" if isinstance(v, float) else str(v) for v in params.values())
    return ", ".join(f"{k.rpartition('.')[2]} {v}" for k, v in zip(params, shown))


def page(results: dict[str, Any]) -> str:
    info, smoke = results["machine"], results["smoke"]
    lines = [
        "# lightning-tf tune, measured",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']}. Each study is "
        "`lightning-tf tune` timed from outside (wall time of the whole command, its start-up included). "
        f"Written by `python benchmarks/tune.py{' --smoke' if smoke else ''}` on {results['date']}; a rerun "
        "rewrites this page (`--sections` a subset of it). Each section is measured in one run.",
        "",
    ]
    toy = [k for k in SECTIONS if k in results and results[k].get("smoke", smoke)]
    if toy:
        lines += [
            f"**Smoke-sized ({', '.join(toy)}): toy budgets, a few batches and trials; those numbers say only "
            "that the section runs.**",
            "",
        ]
    p = results.get("pruning")
    if p:
        lines += [
            "## Pruning pays",
            "",
            f"Measured {p.get('date', results['date'])}. The digits ViT (`configs/vision/digits.yaml`) over "
            f"`configs/search/vision.yaml`, {p['trials']} "
            "trials each, `--jobs 2`, TPE with seed 0, optimising `val/loss` (the default); the median pruner "
            "(once 3 trials have finished, a trial worse than the median of the earlier ones at the same epoch "
            "stops, from its 5th epoch on) against none. The best validation accuracy is the highest among "
            "the complete trials, each at its best epoch.",
            "",
            "| pruner | wall time | trials | epochs run | trials' own time | best val loss | best val accuracy "
            "| best trial's parameters |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for pruner, r in p["rows"].items():
            acc = "-" if r.get("best_acc") is None else f"{100 * r['best_acc']:.2f}%"
            loss = "-" if r["best_value"] is None else f"{r['best_value']:.4f}"
            lines.append(
                f"| {pruner} | {_min(r['wall_s'])} | {_states(r['states'])} | {r['epochs']} "
                f"| {_min(r.get('trial_s', 0.0))} | {loss} | {acc} | {_params(r['best_params'])} |"
            )
        verdict = "met" if p["target_met"] else "NOT met"
        lines += [
            "",
            f"Pruning saves **{100 * p['saving']:.0f}%** of the wall time; its best validation accuracy is "
            f"{p['best_gap_points']:+.2f} points from the unpruned study's (a positive gap: below it). Target "
            f"(>= 40% saved, best within 0.5 points): **{verdict}**.",
            "",
        ]
        n_val = p.get("val_images") or digits_val_images()
        step = 100.0 / n_val
        with_loss, without_loss = p["rows"]["median"]["best_value"], p["rows"]["none"]["best_value"]
        if with_loss is not None and without_loss is not None:
            lines[-1:] = [
                f"The validation split holds {n_val} images, so an accuracy moves in steps of {step:.2f} "
                f"points: the gap is {abs(p['best_gap_points']) / step:.0f} image(s). By the objective both "
                f"studies optimised, `val/loss`, the pruned study's best is "
                f"{'better' if with_loss <= without_loss else 'worse'} ({with_loss:.4f} against "
                f"{without_loss:.4f}).",
                "",
            ]
    q = results.get("parallel")
    if q:
        lines += [
            "## Parallel trials",
            "",
            f"Measured {q.get('date', results['date'])}. The same budget twice: {q['trials']} trials of the "
            "digits ViT over its optimisation settings "
            "(learning rate, weight decay, label smoothing, drop path; size fixed, no pruner, so every trial "
            "is the same work), one trial at a time against two on this machine's cores.",
            "",
            "| jobs | wall time | trials | trials per hour |",
            "|---|---|---|---|",
        ]
        for jobs, r in q["rows"].items():
            lines.append(f"| {jobs} | {_min(r['wall_s'])} | {_states(r['states'])} | {r['trials_per_hour']:.0f} |")
        k = q["kill"]
        lines += [
            "",
            f"Two jobs run **{q['speedup']:.2f}x** the trials per hour of one.",
            "",
            f"Killed and continued: a {k['trials']}-trial study (`--jobs 2`) was killed with SIGKILL once "
            f"{k['finished_before_kill']} trials had finished ({_min(k['first_wall_s'])} in), leaving trials "
            f"{k['left_running'] or 'none'} running in the storage. The same command continued it "
            f"({_min(k['second_wall_s'])}): the killed trials were marked failed (their command gone), their "
            f"parameters ran again ({'yes' if k['rerun_with_same_params'] else 'NO'}), and the study ended with "
            f"{k['finished_after']} finished trials ({_states(k['states'])}).",
            "",
        ]
    e = results.get("etth1")
    if e:
        lines += ["## ETTh1, look-back 336, horizon 96: a tuned residual against the linear model", ""]
        if "skipped" in e:
            lines += [f"Not run: {e['skipped']}.", ""]
        else:
            s = e["study"]
            lines += [
                f"Measured {e.get('date', results['date'])}. {e['trials']} trials of "
                "`configs/kline/patchtst_etth1.yaml` over `configs/search/kline.yaml` "
                f"(backbone, residual mode and rule, linear path frozen or tuned, size, patches, learning rate), "
                f"`--jobs 2`, TPE seed 0, median pruner, each trial under the same budget "
                f"(`{' '.join(e['budget'])}` on top of the config's 8 epochs with early stopping); "
                f"{_min(s['wall_s'])}, {_states(s['states'])}. Test MSE / MAE on every test window of the "
                "standardised scale.",
                "",
            ]
            if "best" in e:
                b, d = e["best"], e["default"]
                lines += [
                    "| model | test MSE | test MAE |",
                    "|---|---|---|",
                    f"| best trial ({s['best_trial']}: {_params(s['best_params'])}; val loss "
                    f"{s['best_value']:.4f}) | **{b['mse']:.4f}** | {b['mae']:.4f} |",
                    f"| closed-form linear model, same windows | {b['linear_mse']:.4f} | {b['linear_mae']:.4f} |",
                    f"| default config, same budget ({_min(d['train_s'])}) | {d['mse']:.4f} | {d['mae']:.4f} |",
                    f"| persistence | {b['persistence_mse']:.4f} | - |",
                    "",
                ]
                if b["mse"] < b["linear_mse"]:
                    answer = (
                        f"the tuned model is below the linear model by {b['linear_mse'] - b['mse']:.4f} MSE "
                        f"({100 * (1 - b['mse'] / b['linear_mse']):.2f}%)"
                    )
                elif b["mse"] == b["linear_mse"]:
                    answer = "the tuned model equals the linear model (its residual was not kept on validation)"
                else:
                    answer = f"the tuned model is above the linear model by {b['mse'] - b['linear_mse']:.4f} MSE"
                lines += [
                    f"The answer: {answer}; against the default config it is "
                    f"{'better' if b['mse'] < d['mse'] else 'not better'} ({b['mse']:.4f} vs {d['mse']:.4f}).",
                    "",
                ]
            else:
                lines += ["No trial completed.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="the sections to measure (default all); a subset keeps the others from OUT.json",
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="ETTh1.csv")
    parser.add_argument("--out", default=str(ROOT / "docs/results/tune"), help="writes OUT.md and OUT.json")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the studies run (default: a temporary folder, removed at the end)",
    )
    parser.add_argument("--smoke", action="store_true", help="toy budgets: check that every section runs")
    parser.add_argument("--render", action="store_true", help="write OUT.md again from OUT.json, measuring nothing")
    parser.add_argument(
        "--trials",
        type=int,
        default=None,
        help="trials per study in every section (default: 24, 8 and 30; a reduced run)",
    )
    args = parser.parse_args(argv)

    import torch
    from core_layers import machine_info

    out = Path(args.out)
    earlier = out.with_suffix(".json")
    if args.render:  # the page again from OUT.json, nothing measured
        out.with_suffix(".md").write_text(page(json.loads(earlier.read_text())) + "\n")
        print(f"written {out.with_suffix('.md')} from {earlier}", flush=True)
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tune-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"studies under {workdir}", flush=True)
    results: dict[str, Any] = {
        "machine": machine_info(torch.device("cpu")),
        "smoke": args.smoke,
        "date": datetime.date.today().isoformat(),
        "sections": args.sections,
    }
    if set(args.sections) != set(SECTIONS) and earlier.is_file():  # a subset: the other sections stay as measured
        kept = json.loads(earlier.read_text())
        for name in SECTIONS:
            if name in kept and name not in args.sections:
                results[name] = {"date": kept.get("date"), "smoke": kept.get("smoke", False), **kept[name]}
    try:
        for name in args.sections:
            if name == "etth1":
                section = etth1(workdir, args.smoke, args.data, args.trials)
            else:
                section = {"pruning": pruning, "parallel": parallel}[name](workdir, args.smoke, args.trials)
            section.update(date=results["date"], smoke=args.smoke)
            results[name] = section
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = page(results)
    out.with_suffix(".md").write_text(text + "\n")
    out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(text, flush=True)
    print(f"written {out.with_suffix('.md')} and {out.with_suffix('.json')}", flush=True)


if __name__ == "__main__":
    main()
