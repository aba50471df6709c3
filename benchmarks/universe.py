"""Walk-forward on a universe of US stocks: each backbone and the baselines on the same yearly test folds.

``lightning-tf walkforward`` (``configs/kline/us_universe.yaml``: next-5-day log returns from 32 bars, one
model for the panel) on the shared ``kline_us_universe`` file (354 US stocks, daily 2005-2012), 4 folds of 252
test dates ending on 2012-12-31 (so 2009-2012), 126 validation dates, an embargo of the horizon, every fold
trained from scratch, for each backbone (``patches``, ``variates``, ``bars``). The baselines come from the same
folds and windows: the linear path (the model's closed-form part alone), LightGBM on the same flattened
inputs, momentum (the past 20 bars' return) and the equal-weight universe. Judged as a quant judges them:
RankIC and its ICIR, the top-k long-short book's net annualised return, information ratio and maximum
drawdown after 10 bp per unit of turnover, per fold and pooled; wall time and peak memory per backbone;
the machine. Writes ``docs/results/universe.md`` (and ``.json``).

Run (meant to fit 30 minutes on an idle 2-core CPU; ``--quick``: a smoke run of a minute or two on 30 tickers
of the file, or on a generated panel when the file is absent)::

    OMP_NUM_THREADS=1 python benchmarks/universe.py [--quick] [--backbones patches variates bars] [--seed N]
        [--data PATH] [--workdir DIR] [--out docs/results/universe] [--trainer NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info

from lightning_tf.kline.universe.report import default_top_k, evaluate_forecasters

DATA = ROOT.parent / "shared" / "data" / "kline_us_universe" / "us_stocks_2005_2012.csv.gz"
CONFIG = ROOT / "configs" / "kline" / "us_universe.yaml"
TRAINER = ROOT / "configs" / "trainer" / "default.yaml"
BACKBONES = ("patches", "variates", "bars")
#: (summary key, title, format)
COLUMNS = (
    ("rank_ic_mean", "RankIC", "{:+.4f}"),
    ("rank_icir", "RankICIR", "{:+.3f}"),
    ("rank_ic_t", "RankIC t", "{:+.2f}"),
    ("long_short_gross_annual_return", "long-short gross ann. return", "{:+.2%}"),
    ("long_short_annual_return", "long-short net ann. return", "{:+.2%}"),
    ("long_short_information_ratio", "long-short IR", "{:+.2f}"),
    ("long_short_max_drawdown", "long-short max DD", "{:.2%}"),
    ("long_short_turnover", "turnover a date", "{:.2f}"),
    ("long_only_excess_return", "long-only net excess ann. return", "{:+.2%}"),
    ("long_only_information_ratio", "long-only IR", "{:+.2f}"),
)


def quick_data(workdir: Path, source: Path) -> Path:
    """30 tickers of ``source`` from 2010 on, or a generated panel of 30 random walks when it is absent."""
    path = workdir / "quick_universe.csv"
    if source.exists():
        bars = pd.read_csv(source, parse_dates=["date"])
        keep = sorted(bars["ticker"].unique())[:30]
        bars = bars[bars["ticker"].isin(keep) & (bars["date"] >= "2010-01-01")]
    else:
        rng = np.random.default_rng(0)
        days = pd.bdate_range("2010-01-04", periods=700)
        parts = []
        for k in range(30):
            close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, len(days))))
            open_ = close * np.exp(rng.normal(0, 0.01, len(days)))
            wick = np.exp(np.abs(rng.normal(0, 0.01, (2, len(days)))))
            parts.append(
                pd.DataFrame(
                    {
                        "date": days,
                        "ticker": f"T{k:02d}",
                        "open": open_,
                        "high": np.maximum(open_, close) * wick[0],
                        "low": np.minimum(open_, close) / wick[1],
                        "close": close,
                        "volume": rng.integers(1_000, 100_000, len(days)).astype(float),
                    }
                )
            )
        bars = pd.concat(parts)
    bars.to_csv(path, index=False)
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: 30 tickers, 2 short folds, 1 short epoch")
    p.add_argument("--backbones", nargs="+", default=list(BACKBONES), choices=BACKBONES)
    p.add_argument("--data", type=Path, default=None, help=f"the universe file (default {DATA})")
    p.add_argument("--workdir", type=Path, default=ROOT / "runs" / "benchmarks" / "universe")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "universe", help="writes OUT.md, OUT.json")
    p.add_argument(
        "--report_only",
        action="store_true",
        help="write the page again from the runs of the last benchmark (OUT.json and their folders), training nothing",
    )
    p.add_argument("--jobs", type=int, default=2, help="backbones run side by side (default 2: one per core)")
    p.add_argument("--trainer", nargs="*", default=[], help="extra trainer overrides NAME=VALUE (max_epochs=2)")
    p.add_argument("--seed", type=int, default=None, help="seed_everything of every fit (default: the config's, 0)")
    return p.parse_args(argv)


def _fmt(value: float, pattern: str) -> str:
    return pattern.format(value) if value is not None and math.isfinite(value) else "n/a"


def _rows(table: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| | " + " | ".join(t for _, t, _ in COLUMNS) + " |", "|---" + "|---:" * len(COLUMNS) + "|"]
    for name, s in table.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(s.get(k, math.nan), f) for k, _, f in COLUMNS) + " |")
    return lines


def _command(args: argparse.Namespace, data: Path, backbone: str, first: bool) -> list[str]:
    folds = (
        ["--folds", "2", "--test_span", "60", "--val_span", "40"]
        if args.quick
        else ["--folds", "4", "--test_span", "252", "--val_span", "126"]
    )
    trainer = ["--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
    if args.quick:
        trainer += ["--trainer.max_epochs=1", "--trainer.limit_train_batches=5", "--trainer.limit_val_batches=5"]
    trainer += [f"--trainer.{kv}" for kv in args.trainer]
    return [
        "walkforward",
        "--config",
        str(TRAINER),
        "--config",
        str(CONFIG),
        f"--data.init_args.path={data}",
        f"--model.backbone={backbone}",
        *folds,
        "--cost_bps",
        "10",
        "--out",
        str(args.workdir / backbone),
        *trainer,
        *([] if args.seed is None else [f"--seed_everything={args.seed}"]),
        *([] if first else ["--no_lightgbm"]),  # the same trees on the same folds: fit once
    ]


def run(args: argparse.Namespace) -> dict:
    """Each backbone's walk-forward as its own ``lightning-tf walkforward`` process (one intra-op thread each),
    ``args.jobs`` at a time; their output goes to ``WORKDIR/<backbone>.log``, and each fold's start is printed."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    data = quick_data(args.workdir, args.data or DATA) if args.quick else (args.data or DATA)
    if not Path(data).exists():
        raise SystemExit(f"{data} not found: the universe file is in the shared data (see its README)")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    waiting = [(b, _command(args, Path(data), b, i == 0)) for i, b in enumerate(args.backbones)]
    running: dict[int, tuple[str, list[str], subprocess.Popen, float, Any, int]] = {}
    runs: dict[str, dict] = {}
    start = time.perf_counter()
    while waiting or running:
        while waiting and len(running) < args.jobs:
            backbone, command = waiting.pop(0)
            log = open(args.workdir / f"{backbone}.log", "w", encoding="utf-8")  # noqa: SIM115 (closed when it ends)
            print(f"=== {backbone}: lightning-tf {shlex.join(command)} (output: {log.name})", flush=True)
            proc = subprocess.Popen([sys.executable, "-m", "lightning_tf", *command], stdout=log, stderr=log, env=env)
            running[proc.pid] = (backbone, command, proc, time.perf_counter(), log, 0)
        time.sleep(2)
        for pid, (backbone, command, proc, t0, log, shown) in list(running.items()):
            lines = Path(log.name).read_text(encoding="utf-8", errors="replace").splitlines()
            folds = [line for line in lines if line.startswith("walk-forward fold ")]
            for line in folds[shown:]:
                print(f"[{backbone}] {line}", flush=True)
            running[pid] = (backbone, command, proc, t0, log, len(folds))
            reaped, status, usage = os.wait4(pid, os.WNOHANG)  # the child's own peak memory, when it has ended
            if reaped == 0:
                continue
            seconds = time.perf_counter() - t0
            log.close()
            del running[pid]
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                raise SystemExit(
                    f"{backbone}: lightning-tf walkforward failed ({code}); see {log.name}:\n" + "\n".join(lines[-20:])
                )
            table = pd.read_csv(args.workdir / backbone / "folds.csv")
            runs[backbone] = {
                "seconds": seconds,
                "peak_rss_mb": usage.ru_maxrss / 1024,  # Linux: kilobytes, this process's peak
                "out": args.workdir / backbone,
                "command": command,
                "residual_kept": int(table["residual_kept"].sum()),
                "folds": len(table),
            }
            print(f"=== {backbone}: done in {seconds / 60:.1f} min, peak {usage.ru_maxrss / 1024:.0f} MB", flush=True)
    wall = time.perf_counter() - start
    return {"data": str(data), "runs": {b: runs[b] for b in args.backbones}, "jobs": args.jobs, "wall_seconds": wall}


def evaluate(result: dict) -> dict:
    """Each backbone's model, and the baselines of the first backbone's run, pooled and per fold."""
    tables: dict[str, dict] = {"pooled": {}, "folds": {}}
    first = True
    for backbone, r in result["runs"].items():
        predictions = pd.read_parquet(r["out"] / "predictions.parquet")
        top_k = default_top_k(predictions)
        ev = evaluate_forecasters(predictions, top_k=top_k, n_drop=max(1, top_k // 5), cost_bps=10.0)
        names = {
            "model": f"Transformer ({backbone})",
            "model, residual always kept": f"{backbone}, residual always kept",
        }
        if first:
            names.update(
                {"linear path": "linear path", "LightGBM": "LightGBM", "momentum (20 bars)": "momentum (20 bars)"}
            )
            tables["benchmark"] = {k: v for k, v in ev.pooled["model"].summary.items() if k.startswith("benchmark_")}
            tables["top_k"], tables["n_drop"] = top_k, max(1, top_k // 5)
            tables["fold_dates"] = pd.read_csv(r["out"] / "folds.csv").to_dict("records")
        for name, label in names.items():
            if name not in ev.pooled:
                continue
            tables["pooled"][label] = ev.pooled[name].summary
            for k, e in ev.by_fold[name].items():
                tables["folds"].setdefault(k, {})[label] = e.summary
        first = False
    return tables


def verdicts(tables: dict) -> list[str]:
    pooled = tables["pooled"]
    lines = []
    for label, s in pooled.items():
        if not label.startswith("Transformer"):
            continue
        for base in ("linear path", "LightGBM", "momentum (20 bars)"):
            if base not in pooled:
                continue
            b = pooled[base]
            parts = []
            for key, what in (("rank_ic_mean", "RankIC"), ("long_short_information_ratio", "net long-short IR")):
                word = "beats" if s[key] > b[key] else ("ties" if s[key] == b[key] else "does NOT beat")
                parts.append(f"{word} it on {what} ({s[key]:+.4f} vs {b[key]:+.4f})")
            lines.append(f"* {label} vs {base}: " + "; ".join(parts))
    return lines


def report(result: dict, tables: dict, info: dict, args: argparse.Namespace) -> str:
    lines = [
        "# Walk-forward on a US stock universe",
        "",
        "`python benchmarks/universe.py"
        + (" --quick" if args.quick else "")
        + ("" if args.seed is None else f" --seed {args.seed}")
        + '` (docs/kline.md, "universe").',
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']} ({info['threads']} threads), {info['device']}"
        + (f"; load average at start {info['load_at_start']}." if "load_at_start" in info else "."),
        f"Data: `{Path(result['data']).name}`; top {tables['top_k']} long / bottom {tables['top_k']} short, at most "
        f"{tables['n_drop']} names replaced a date, 10 bp per unit of turnover, rebalanced daily on the next bar's forecast. "
        "The long-short book is dollar-neutral: its IR is measured against cash (its Sharpe ratio).",
        "The universe is survivorship-biased (stocks still listed in 2017): compare the forecasters with each other on "
        "the same dates, not with the market.",
        "",
        "## Folds",
        "",
        "| fold | train | validation | test |",
        "|---:|---|---|---|",
    ]
    for f in tables["fold_dates"]:
        lines.append(
            f"| {f['fold']} | {f['train_start']} .. {f['train_end']} | {f['val_start']} .. {f['val_end']} | {f['test_start']} .. {f['test_end']} |"
        )
    lines += ["", "## Pooled over the test folds", "", *_rows(tables["pooled"]), ""]
    b = tables["benchmark"]
    lines.append(
        f"Equal-weight universe: {_fmt(b.get('benchmark_annual_return', math.nan), '{:+.2%}')} a year, Sharpe "
        f"{_fmt(b.get('benchmark_sharpe', math.nan), '{:.2f}')}, max drawdown "
        f"{_fmt(b.get('benchmark_max_drawdown', math.nan), '{:.2%}')}."
    )
    kept = ", ".join(f"{b} {r['residual_kept']} of {r['folds']}" for b, r in result["runs"].items())
    lines += [
        "",
        f"Folds whose tested model kept the Transformer residual on validation (otherwise it is the linear path): {kept}.",
        "",
        *verdicts(tables),
        "",
        "## Per fold",
        "",
    ]
    for k in sorted(tables["folds"]):
        lines += [f"Fold {k}:", "", *_rows(tables["folds"][k]), ""]
    lines += ["## Cost", "", "| backbone | wall time (its process) | peak memory (its process) |", "|---|---:|---:|"]
    for backbone, r in result["runs"].items():
        lines.append(f"| {backbone} | {r['seconds'] / 60:.1f} min | {r['peak_rss_mb']:.0f} MB |")
    lines += [
        "",
        f"The whole walk-forward: {result['wall_seconds'] / 60:.1f} min, {result['jobs']} backbone process(es) side by "
        f"side, one thread each; LightGBM fit in the first backbone's process only.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    info = {**machine_info(torch.device("cpu")), "load_at_start": ", ".join(f"{v:.1f}" for v in os.getloadavg())}
    print(f"machine: {info}", flush=True)
    if args.report_only:
        saved = json.loads(Path(f"{args.out}.json").read_text(encoding="utf-8"))
        runs = {b: {**r, "out": Path(r["out"])} for b, r in saved["runs"].items()}
        result = {"data": saved["data"], "runs": runs, "jobs": saved["jobs"], "wall_seconds": saved["wall_seconds"]}
        info, args.quick, args.seed = saved["machine"], saved.get("quick", False), saved.get("seed")
    else:
        result = run(args)
    tables = evaluate(result)
    text = report(result, tables, info, args)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.md").write_text(text, encoding="utf-8")
    payload = {
        "machine": info,
        "data": result["data"],
        "runs": {
            b: {k: (str(v) if isinstance(v, Path) else v) for k, v in r.items()} for b, r in result["runs"].items()
        },
        "pooled": tables["pooled"],
        "folds": {str(k): v for k, v in tables["folds"].items()},
        "benchmark": tables["benchmark"],
        "wall_seconds": result["wall_seconds"],
        "quick": args.quick,
        "seed": args.seed,
        "jobs": result["jobs"],
    }
    Path(f"{args.out}.json").write_text(json.dumps(payload, indent=1, default=float), encoding="utf-8")
    print(f"wrote {args.out}.md and {args.out}.json")


if __name__ == "__main__":
    main()
