"""The K-line foundation model: pretrain on thousands of tickers, then judge it on stocks and years it has never seen.

1. **Corpus**: the pretraining corpus (Kaggle's "Huge Stock Market Dataset": ``Data/Stocks`` and ``Data/ETFs``,
   docs/kline.md "The pretraining corpus") less the shared universe's 354 stocks (a folder of links), read with the
   cut 2008-06-24 (the universe walk-forward's first validation date) into a prepared, memory-mapped panel: time and
   peak memory of the preparation, the panel on disk, files, tickers and bars kept.
2. **Pretraining**: for each objective (``forecast``: the next 5 days' cross-sectional rank under the pinball and IC
   losses; ``masked``: masked-patch reconstruction), ``lightning-tf fit`` with ``configs/kline/pretrain.yaml`` for at
   most ``--minutes``: wall time, bars and windows per second, peak memory, the last validation loss.
3. **Universe walk-forward** (``lightning-tf walkforward`` on the shared universe, 4 yearly test folds 2009-2012, as
   ``benchmarks/universe.py``), one run per row, side by side on the same folds: from scratch
   (``configs/kline/us_universe.yaml`` as it is, with the linear path, LightGBM and momentum of the same folds);
   from scratch with the pretrained model's architecture and label (the control); the pretrained model zero-shot
   (``--zero_shot``); pretrained and fine-tuned (all weights, a frozen backbone, layer-wise decay); and the
   masked-objective model fine-tuned. Each: RankIC, RankICIR, the long-short book's net information ratio after
   10 bp per unit of turnover, pooled and per fold, and the Transformer residual's own RankIC per fold.

Writes ``docs/results/pretrain.md`` (and ``.json``). The CPU settings fit about three hours on an idle 2-core
machine; ``--gpu`` uses ``configs/kline/pretrain_gpu.yaml`` for the pretraining; ``--quick`` is a smoke run of a
minute or two on a generated corpus and universe (the rows' numbers then mean nothing).

    OMP_NUM_THREADS=1 python benchmarks/pretrain.py [--corpus DIR] [--universe FILE] [--minutes 45] [--quick]
        [--objectives forecast masked] [--rows scratch control zero_shot finetune frozen decay masked] [--gpu]
        [--workdir DIR] [--out docs/results/pretrain] [--report_only]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info

from lightning_tf.kline.universe.report import default_top_k, evaluate_forecasters

CORPUS = Path(os.environ.get("LIGHTNING_TF_CORPUS", ROOT.parent / "corpus" / "Data"))
UNIVERSE = ROOT.parent / "shared" / "data" / "kline_us_universe" / "us_stocks_2005_2012.csv.gz"
TRAINER = ROOT / "configs" / "trainer" / "default.yaml"
PRETRAIN = ROOT / "configs" / "kline" / "pretrain.yaml"
PRETRAIN_GPU = ROOT / "configs" / "kline" / "pretrain_gpu.yaml"
UNIVERSE_CONFIG = ROOT / "configs" / "kline" / "us_universe.yaml"
CUT = "2008-06-24"
OBJECTIVES = ("forecast", "masked")
ROWS = ("scratch", "control", "zero_shot", "finetune", "frozen", "decay", "masked")
#: each row: its title, the objective whose checkpoint it starts from (None: none), and its extra arguments
ROW_SPECS: dict[str, tuple[str, str | None, list[str]]] = {
    "scratch": ("from scratch (us_universe.yaml)", None, []),
    "control": ("from scratch, the pretrained model's architecture and label", None, ["@control"]),
    "zero_shot": ("pretrained, zero-shot", "forecast", ["@label", "@zero_shot"]),
    "finetune": ("pretrained, fine-tuned", "forecast", ["@label", "@pretrained", "@finetune_lr"]),
    "frozen": (
        "pretrained, frozen backbone",
        "forecast",
        ["@label", "@pretrained", "--model.init_args.freeze=backbone"],
    ),
    "decay": (
        "pretrained, layer decay 0.75",
        "forecast",
        ["@label", "@pretrained", "@finetune_lr", "--model.init_args.layer_decay=0.75"],
    ),
    "masked": ("masked-patch pretrained, fine-tuned", "masked", ["@label", "@pretrained", "@finetune_lr"]),
}
#: (summary key, title, format)
COLUMNS = (
    ("rank_ic_mean", "RankIC", "{:+.4f}"),
    ("rank_icir", "RankICIR", "{:+.3f}"),
    ("long_short_annual_return", "long-short net ann. return", "{:+.2%}"),
    ("long_short_information_ratio", "long-short net IR", "{:+.2f}"),
    ("long_short_turnover", "turnover a date", "{:.2f}"),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=CORPUS, help=f"the corpus folder (default {CORPUS})")
    p.add_argument("--universe", type=Path, default=UNIVERSE, help=f"the universe file (default {UNIVERSE})")
    p.add_argument("--minutes", type=float, default=45.0, help="pretraining budget per objective")
    p.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    p.add_argument("--gpu", action="store_true", help="pretrain with configs/kline/pretrain_gpu.yaml on a GPU")
    p.add_argument("--quick", action="store_true", help="a smoke run on a generated corpus and universe")
    p.add_argument("--jobs", type=int, default=2, help="walk-forwards side by side (default 2: one per core)")
    p.add_argument("--workdir", type=Path, default=ROOT / "runs" / "benchmarks" / "pretrain")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "pretrain", help="writes OUT.md, OUT.json")
    p.add_argument("--report_only", action="store_true", help="write the page from the last run's OUT.json and folders")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="keep what an earlier run into this --workdir finished: each objective's pretraining, each row",
    )
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------------------ data


def _quick_data(workdir: Path) -> tuple[Path, Path]:
    """A generated corpus (a folder of 20 files) and universe (12 tickers) sharing one planted pattern."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers.universe import reversal_universe

    corpus = workdir / "quick_corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    frame = reversal_universe(20, 900, reversal=0.5, seed=7, start="2005-01-03")
    for name, part in frame.groupby("ticker"):
        part.drop(columns="ticker").to_csv(corpus / f"{str(name).lower()}.us.txt", index=False)
    universe = workdir / "quick_universe.csv"
    reversal_universe(12, 2000, reversal=0.5, seed=8, start="2005-01-03").to_csv(universe, index=False)
    return corpus, universe


def corpus_view(corpus: Path, universe: Path, out: Path) -> dict[str, Any]:
    """A folder of links to every file of ``corpus`` (its subfolders included) but the universe's tickers: the model
    is then judged on stocks it has never seen."""
    tickers = set(pd.read_csv(universe, usecols=["ticker"])["ticker"].astype(str).str.lower())
    out.mkdir(parents=True, exist_ok=True)
    kept = left = 0
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
        stem = path.name.lower().split(".")[0]
        if stem in tickers and "etf" not in path.parent.name.lower():
            left += 1
            continue
        link = out / path.name
        if not link.exists():
            link.symlink_to(path.resolve())
        kept += 1
    return {"files": kept, "universe_files_left_out": left}


# ------------------------------------------------------------------------------------------------ runs


def _run(command: list[str], log: Path, cwd: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """``lightning-tf COMMAND`` in ``cwd``, its output to ``log``: wall seconds, peak memory (MB), exit code."""
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lightning_tf", *command], stdout=out, stderr=out, env=env, cwd=cwd
        )
        _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "WANDB_MODE": "offline",
    }


def pretrain(args: argparse.Namespace, objective: str, corpus: Path, cache: Path) -> dict[str, Any]:
    """Pretrain one objective; its checkpoint, time, throughput and memory."""
    folder = args.workdir / f"pretrain_{objective}"
    saved = folder / "pretrain.json"
    if args.reuse and saved.exists():
        print(f"=== pretrain {objective}: finished earlier, kept ({saved})", flush=True)
        return json.loads(saved.read_text(encoding="utf-8"))
    if folder.exists():  # what an unfinished run left: a new run would mix its checkpoints with these
        import shutil

        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    command = ["fit", "--config", str(TRAINER), "--config", str(PRETRAIN)]
    if args.gpu:
        command += ["--config", str(ROOT / "configs" / "trainer" / "gpu.yaml"), "--config", str(PRETRAIN_GPU)]
    command += [
        f"--data.init_args.path={corpus}",
        f"--data.init_args.cache_dir={cache}",
        f"--trainer.default_root_dir={folder}",
        f"--trainer.logger.init_args.save_dir={folder}",
        f"--trainer.logger.init_args.name=pretrain-{objective}",
        f"--trainer.max_time=00:00:{int(args.minutes):02d}:{int(60 * (args.minutes % 1)):02d}",
        "--trainer.enable_progress_bar=false",
    ]
    if objective == "masked":
        command += ["--model.init_args.objective=masked", "--model.init_args.loss=mse", "--model.init_args.ic_weight=0"]
    if args.quick:  # 10 batches: validated once, at the end (the config's interval counts 400 of them)
        command += ["--trainer.max_epochs=1", "--trainer.limit_train_batches=10", "--trainer.limit_val_batches=2"]
        command += ["--trainer.val_check_interval=1.0"]
    print(f"=== pretrain {objective}: lightning-tf {shlex.join(command)}", flush=True)
    seconds, peak, code = _run(command, folder / "fit.log", folder, _env())
    if code != 0:
        tail = (folder / "fit.log").read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
        raise SystemExit(f"pretraining {objective} failed ({code}); see {folder / 'fit.log'}:\n" + "\n".join(tail))
    checkpoints = sorted(folder.rglob("best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not checkpoints:
        raise SystemExit(f"pretraining {objective} left no best-*.ckpt under {folder} (no validation ran)")
    import torch

    from lightning_tf.training.callbacks import METRICS_KEY

    ckpt = torch.load(checkpoints[-1], map_location="cpu", weights_only=True)
    logged = (ckpt.get(METRICS_KEY) or {"ranks": [{"metrics": {}}]})["ranks"][0]["metrics"]
    metrics = {k: float(v) for k, v in logged.items() if _scalar(v)}
    print(f"=== pretrain {objective}: {seconds / 60:.1f} min, peak {peak:.0f} MB, {checkpoints[-1]}", flush=True)
    result = {
        "checkpoint": str(checkpoints[-1]),
        "seconds": seconds,
        "peak_rss_mb": peak,
        "steps": int(ckpt["global_step"]),  # one date each
        "bars_per_s": metrics.get("train/bars_per_s"),
        "windows_per_s": metrics.get("train/windows_per_s"),
        "epoch": int(ckpt["epoch"]),
        "provenance": ckpt.get("provenance", {}),
        "metrics": metrics,
        "log": str(folder / "fit.log"),
    }
    saved.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    return result


def _scalar(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _row_command(args: argparse.Namespace, row: str, universe: Path, checkpoints: dict[str, str]) -> list[str]:
    title, source, extra = ROW_SPECS[row]
    folds = (
        ["--folds", "2", "--test_span", "60", "--val_span", "40"]
        if args.quick
        else ["--folds", "4", "--test_span", "252", "--val_span", "126"]
    )
    trainer = ["--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
    if args.quick:
        trainer += ["--trainer.max_epochs=1", "--trainer.limit_train_batches=5", "--trainer.limit_val_batches=5"]
    command = [
        "walkforward",
        "--config",
        str(TRAINER),
        "--config",
        str(UNIVERSE_CONFIG),
        f"--data.init_args.path={universe}",
        *folds,
        "--cost_bps",
        "10",
        "--out",
        str(args.workdir / "walkforward" / row),
        *trainer,
    ]
    if row != "scratch":
        command.append("--no_lightgbm")  # the same trees on the same folds: fit once, in the scratch row
    for item in extra:
        if item == "@label":
            command.append("--data.init_args.features.label=cs_rank")
        elif item == "@control":
            command += [
                "--data.init_args.features.label=cs_rank",
                *(f"--model.init_args.{k}={v}" for k, v in _architecture(checkpoints.get("forecast")).items()),
            ]
        elif item == "@zero_shot":
            command += ["--zero_shot", checkpoints[source]]  # type: ignore[index]
        elif item == "@finetune_lr":  # a third of the from-scratch rate: the weights start somewhere worth keeping
            command.append("--model.init_args.lr=0.0003")
        elif item == "@pretrained":
            command.append(f"--model.init_args.pretrained={checkpoints[source]}")  # type: ignore[index]
        else:
            command.append(item)
    return command


def _architecture(checkpoint: str | None) -> dict[str, Any]:
    """The pretrained model's architecture arguments (the control row trains the same network from scratch)."""
    from lightning_tf.kline.pretrained import ARCHITECTURE

    if checkpoint is None:
        raw = PRETRAIN.read_text(encoding="utf-8")
        import yaml

        init = yaml.safe_load(raw)["model"]["init_args"]
        return {k: init[k] for k in ARCHITECTURE if k in init}
    import torch

    hparams = torch.load(checkpoint, map_location="cpu", weights_only=True)["hyper_parameters"]
    return {k: hparams[k] for k in ARCHITECTURE if k in hparams}


def walkforwards(args: argparse.Namespace, universe: Path, checkpoints: dict[str, str]) -> dict[str, dict]:
    """Each row's walk-forward as its own process, ``args.jobs`` at a time."""
    env = {**_env(), "OMP_NUM_THREADS": "1"}
    rows = [r for r in args.rows if ROW_SPECS[r][1] is None or ROW_SPECS[r][1] in checkpoints]
    runs: dict[str, dict] = {}
    for r in list(rows):
        saved = args.workdir / "walkforward" / f"{r}.json"
        if args.reuse and saved.exists():
            print(f"=== {r}: finished earlier, kept", flush=True)
            runs[r] = json.loads(saved.read_text(encoding="utf-8"))
            rows.remove(r)
    for r in rows:  # a row not kept starts afresh (a walk-forward keeps the folds it finds finished)
        folder = args.workdir / "walkforward" / r
        if folder.exists() and not args.reuse:
            import shutil

            shutil.rmtree(folder)
    waiting = [(r, _row_command(args, r, universe, checkpoints)) for r in rows]
    running: dict[int, tuple[str, subprocess.Popen, float, Any]] = {}
    (args.workdir / "walkforward").mkdir(parents=True, exist_ok=True)
    while waiting or running:
        while waiting and len(running) < args.jobs:
            row, command = waiting.pop(0)
            log = open(args.workdir / "walkforward" / f"{row}.log", "w", encoding="utf-8")  # noqa: SIM115
            print(f"=== {row}: lightning-tf {shlex.join(command)} (output: {log.name})", flush=True)
            proc = subprocess.Popen([sys.executable, "-m", "lightning_tf", *command], stdout=log, stderr=log, env=env)
            running[proc.pid] = (row, proc, time.perf_counter(), log)
        time.sleep(2)
        for pid, (row, proc, t0, log) in list(running.items()):
            reaped, status, usage = os.wait4(pid, os.WNOHANG)
            if reaped == 0:
                continue
            log.close()
            del running[pid]
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                tail = Path(log.name).read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
                raise SystemExit(f"{row}: walkforward failed ({code}); see {log.name}:\n" + "\n".join(tail))
            runs[row] = {
                "seconds": time.perf_counter() - t0,
                "peak_rss_mb": usage.ru_maxrss / 1024,
                "out": str(args.workdir / "walkforward" / row),
            }
            print(f"=== {row}: done in {runs[row]['seconds'] / 60:.1f} min", flush=True)
            (args.workdir / "walkforward" / f"{row}.json").write_text(json.dumps(runs[row]), encoding="utf-8")
    return {r: runs[r] for r in args.rows if r in runs}


# ------------------------------------------------------------------------------------------------ report


def evaluate(runs: dict[str, dict]) -> dict[str, Any]:
    """Each row's model (and the baselines of the scratch row), pooled and per fold, and the residual's own
    RankIC per fold."""
    pooled: dict[str, dict] = {}
    folds: dict[int, dict[str, dict]] = {}
    residual: dict[str, dict[int, float]] = {}
    top_k = n_drop = None
    for row, run in runs.items():
        predictions = pd.read_parquet(Path(run["out"]) / "predictions.parquet")
        top_k = default_top_k(predictions)
        n_drop = max(1, top_k // 5)
        ev = evaluate_forecasters(predictions, top_k=top_k, n_drop=n_drop, cost_bps=10.0)
        names = {"model": ROW_SPECS[row][0]}
        if row != "zero_shot":  # what validation chose beside the Transformer kept in every fold
            names["model, residual always kept"] = f"{ROW_SPECS[row][0]}, residual always kept"
        if row == "scratch":
            names.update({n: n for n in ("linear path", "LightGBM", "momentum (20 bars)")})
        for name, label in names.items():
            if name not in ev.pooled:
                continue
            pooled[label] = ev.pooled[name].summary
            for k, e in ev.by_fold[name].items():
                folds.setdefault(k, {})[label] = e.summary
        alone = "the Transformer residual alone"
        if alone in ev.by_fold:
            residual[ROW_SPECS[row][0]] = {k: e.summary["rank_ic_mean"] for k, e in ev.by_fold[alone].items()}
        elif row == "zero_shot":
            residual[ROW_SPECS[row][0]] = {k: e.summary["rank_ic_mean"] for k, e in ev.by_fold["model"].items()}
    return {"pooled": pooled, "folds": folds, "residual": residual, "top_k": top_k, "n_drop": n_drop}


def _fmt(value: Any, pattern: str) -> str:
    return pattern.format(value) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def _table(rows: dict[str, dict]) -> list[str]:
    lines = ["| | " + " | ".join(t for _, t, _ in COLUMNS) + " |", "|---" + "|---:" * len(COLUMNS) + "|"]
    for name, s in rows.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(s.get(k), f) for k, _, f in COLUMNS) + " |")
    return lines


def verdict(tables: dict[str, Any]) -> list[str]:
    """The goal, checked: the fine-tuned model at or above LightGBM's RankIC and net IR, with a positive residual
    RankIC in every fold."""
    pooled, lines = tables["pooled"], []
    lgbm = pooled.get("LightGBM")
    for row in ("finetune", "frozen", "decay", "masked", "zero_shot"):
        title = ROW_SPECS[row][0]
        if title not in pooled or lgbm is None:
            continue
        s = pooled[title]
        ic = s["rank_ic_mean"] >= lgbm["rank_ic_mean"]
        ir = s["long_short_information_ratio"] >= lgbm["long_short_information_ratio"]
        res = tables["residual"].get(title, {})
        positive = bool(res) and all(v > 0 for v in res.values())
        lines.append(
            f"* {title}: RankIC {s['rank_ic_mean']:+.4f} vs LightGBM {lgbm['rank_ic_mean']:+.4f} "
            f"({'at or above' if ic else 'BELOW'}); net IR {s['long_short_information_ratio']:+.2f} vs "
            f"{lgbm['long_short_information_ratio']:+.2f} ({'at or above' if ir else 'BELOW'}); residual RankIC "
            + ("positive in every fold" if positive else "NOT positive in every fold")
            + (f" ({', '.join(f'{v:+.4f}' for v in res.values())})" if res else "")
        )
    return lines


def report(result: dict[str, Any], tables: dict[str, Any], args: argparse.Namespace) -> str:
    info = result["machine"]
    lines = [
        "# The K-line foundation model: pretraining, and the universe it has never seen",
        "",
        "`python benchmarks/pretrain.py"
        + f" --minutes {result.get('minutes', args.minutes):g}"
        + (" --quick" if result.get("quick") else "")
        + (" --gpu" if result.get("gpu") else "")
        + "`"
        ' (docs/kline.md, "Pretraining").',
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']} ({info['threads']} threads), "
        f"{info['device']}; load average at start {result.get('load_at_start', 'n/a')}.",
        "",
        "## Corpus",
        "",
    ]
    c = result.get("corpus", {})
    if c:
        lines += [
            f"`{c['source']}` less the universe's stocks ({c['universe_files_left_out']} files): {c['files']:,} files, "
            f"read with the cut {CUT} (no bar on or after it).",
            "",
            "| | value |",
            "|---|---:|",
            f"| prepared in | {c.get('prepare_seconds', math.nan):.1f} s |",
            f"| of which reading / features / writing | {c.get('phases', '')} |",
            f"| tickers in the panel | {c.get('tickers', 0):,} |",
            f"| rows (bars) | {c.get('rows', 0):,} |",
            f"| training / validation windows | {c.get('train_windows', 0):,} / {c.get('val_windows', 0):,} |",
            f"| panel on disk | {c.get('disk_mb', math.nan):.0f} MB |",
            "",
        ]
    lines += [
        "## Pretraining",
        "",
        "| objective | wall time | steps (dates) | epochs | bars per second | peak memory | last val loss |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for objective, p in result.get("pretrain", {}).items():
        bars = p.get("bars_per_s")
        lines.append(
            f"| {objective} | {p['seconds'] / 60:.1f} min | {p['steps']:,} | {p['epoch'] + 1} | "
            f"{_fmt(bars, '{:,.0f}')} | {p['peak_rss_mb']:.0f} MB | {_fmt(p['metrics'].get('val/loss'), '{:.4f}')} |"
        )
    lines += [
        "",
        "## The universe walk-forward",
        "",
        f"Top {tables['top_k']} long / bottom {tables['top_k']} short, at most {tables['n_drop']} names replaced a date, "
        "10 bp per unit of turnover. The universe's stocks are not in the corpus, and every test date (2009-2012) comes "
        f"after the cut ({CUT}).",
        "",
        "### Pooled over the test folds",
        "",
        *_table(tables["pooled"]),
        "",
        *verdict(tables),
        "",
        "### The Transformer residual's own RankIC per fold",
        "",
        "(What the Transformer adds to the linear path, ranked alone; for the zero-shot row, the model itself.)",
        "",
    ]
    folds = sorted({k for r in tables["residual"].values() for k in r})
    lines += ["| | " + " | ".join(f"fold {k}" for k in folds) + " |", "|---" + "|---:" * len(folds) + "|"]
    for name, r in tables["residual"].items():
        lines.append(f"| {name} | " + " | ".join(_fmt(r.get(k), "{:+.4f}") for k in folds) + " |")
    lines += ["", "### Per fold", ""]
    for k in sorted(tables["folds"]):
        lines += [f"Fold {k}:", "", *_table(tables["folds"][k]), ""]
    lines += [
        "## Cost",
        "",
        f"The walk-forwards ran {result.get('jobs', args.jobs)} side by side, one thread each.",
        "",
        "| run | wall time | peak memory |",
        "|---|---:|---:|",
    ]
    for row, r in result.get("walkforward", {}).items():
        lines.append(f"| walk-forward: {ROW_SPECS[row][0]} | {r['seconds'] / 60:.1f} min | {r['peak_rss_mb']:.0f} MB |")
    lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ main


def prepare_corpus(args: argparse.Namespace, corpus: Path, cache: Path) -> dict[str, Any]:
    """Prepare the corpus's panel once (as pretraining's ``prepare_data`` would), measuring it."""
    code = (
        "import json, resource, sys, time\n"
        "from lightning_tf.kline import KLineDataModule\n"
        "from lightning_tf.kline.settings import Features, Loading, Reading, Splits\n"
        "t = time.perf_counter()\n"
        f"dm = KLineDataModule({str(corpus)!r}, context_len=32, horizon=5, features=Features(label='cs_rank'),"
        f" reading=Reading(cut={CUT!r}, bad_files='skip', on_error='drop', max_gap='10D'),"
        " splits=Splits(train_start='1995-01-03', val_start='2007-12-24', test_start=" + repr(CUT) + "),"
        f" loading=Loading(batch_size=1024, batch_by_date=True), cache_dir={str(cache)!r})\n"
        "dm.prepare_data(); prepared = time.perf_counter() - t; dm.setup('fit')\n"
        "folder = dm._prepared()\n"
        "manifest = json.loads((folder / 'manifest.json').read_text())\n"
        "size = sum(p.stat().st_size for p in folder.iterdir())\n"
        "print(json.dumps({'prepare_seconds': prepared, 'phases': manifest.get('phase_seconds'),"
        " 'tickers': len(dm.ticker_names), 'rows': int(dm._rows['x'].shape[0]),"
        " 'train_windows': len(dm.datasets['train']), 'val_windows': len(dm.datasets['val']),"
        " 'disk_mb': size / 2**20, 'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=args.workdir)
    if proc.returncode != 0:
        raise SystemExit(f"preparing the corpus failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    if args.report_only:
        result = json.loads(Path(f"{args.out}.json").read_text(encoding="utf-8"))
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        info = machine_info(torch.device("cuda" if args.gpu and torch.cuda.is_available() else "cpu"))
        result: dict[str, Any] = {
            "machine": info,
            "load_at_start": ", ".join(f"{v:.1f}" for v in os.getloadavg()),
            "quick": args.quick,
            "minutes": args.minutes,
            "jobs": args.jobs,
            "gpu": args.gpu,
        }
        print(f"machine: {info}", flush=True)
        source, universe = _quick_data(args.workdir) if args.quick else (args.corpus, args.universe)
        for path, what in ((source, "corpus"), (universe, "universe")):
            if not Path(path).exists():
                raise SystemExit(f"{path}: the {what} is not there (docs/kline.md, 'The pretraining corpus')")
        view, cache = args.workdir / "corpus", args.workdir / "cache"
        result["corpus"] = {"source": str(source), **corpus_view(Path(source), Path(universe), view)}
        # measured in a folder of its own, emptied first, so the panel is built (not found) every run
        measured = args.workdir / "cache_measured"
        shutil.rmtree(measured, ignore_errors=True)
        result["corpus"].update(prepare_corpus(args, view, measured))
        # the manifest on disk holds the reading and feature phases; writing is the rest of the preparation
        phases = result["corpus"].get("phases") or {}
        writing = result["corpus"]["prepare_seconds"] - phases.get("read", 0.0) - phases.get("features", 0.0)
        result["corpus"]["phases"] = " / ".join(
            f"{v:.1f} s" for v in (phases.get("read", math.nan), phases.get("features", math.nan), writing)
        )
        print(f"=== corpus: {result['corpus']}", flush=True)
        result["pretrain"] = {}
        for objective in args.objectives:
            result["pretrain"][objective] = pretrain(args, objective, view, cache)
        checkpoints = {o: p["checkpoint"] for o, p in result["pretrain"].items()}
        result["walkforward"] = walkforwards(args, Path(universe), checkpoints)
    tables = evaluate(result["walkforward"])
    text = report(result, tables, args)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.md").write_text(text, encoding="utf-8")
    Path(f"{args.out}.json").write_text(
        json.dumps({**result, "tables": tables}, indent=1, default=str), encoding="utf-8"
    )
    print(f"wrote {args.out}.md and {args.out}.json")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
