"""The pretraining corpus at full size: reading it, preparing its panel, and two ranks sharing the panel.

The corpus is a folder of daily OHLCV files, one per ticker (by default Kaggle's "Huge Stock Market
Dataset": ``Data/Stocks`` and ``Data/ETFs``, 8,539 files; ``docs/kline.md``, "The pretraining corpus"). Three
measurements, each in a fresh Python process (imports done before the clock and the memory baseline start):

- **read**: ``read_bars`` of the folder (its subfolders included) with the date cut, ``on_error="drop"``,
  ``max_gap="10D"`` and ``bad_files="skip"``: seconds, peak memory, the bars and tickers kept, the files left
  out by reason and the bars the cut dropped; at 1/8, 1/4, 1/2 and all of the files (every 8th, 4th, 2nd file
  of the sorted list, in folders of links), so that the growth with size shows; all of the files also with
  each other ``--workers`` value, and without the cut. Beside it, in its own process, the floor:
  ``pandas.read_csv`` of every file and nothing else.
- **prepare**: what ``KLineDataModule(cache_dir=...).prepare_data()`` does (``panel_spec``, then
  ``prepare_panel`` into an empty cache): the files' fingerprint, the read, the features and the writing, with
  the pretraining settings (the features below, 32 bars of context, 5 of horizon, validation from 6 months
  before the cut, test from the cut, ``max_gap`` 10 days); seconds, peak memory, the panel's size on disk, its
  tickers and windows; at the same sizes.
- **share**: one process, then two at once (as two DDP ranks on one machine), each mapping the prepared panel
  of all the files with ``load_panel`` and reading every page of its rows: each one's proportional set size
  (PSS: a page shared by two processes counts half in each) against the panel's size.

Memory is counted above what the process holds once its imports are done, as ``benchmarks/scale.py`` counts
it: *peak* is the larger of the resident high-water mark and the sampled PSS of the process and its worker
processes. The growth exponent is the least-squares slope of log(cost) over log(bars in the files).

Run (about 10 minutes on an idle 2-core CPU; check ``uptime`` first)::

    python benchmarks/corpus.py [--corpus DIR] [--cut 2008-06-24] [--workers 0 2] [--fractions 0.125 0.25 0.5 1]
        [--work DIR] [--out docs/results/corpus]

``--corpus`` defaults to ``$LIGHTNING_TF_CORPUS``, else ``/work/corpus/Data``. ``--in-process`` runs the
phases in this process (the ranks as forked processes): for a smoke run on a small folder, not for numbers.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scale import PeakSampler, _proc_kb, growth_exponent, pss_mb  # noqa: E402

DEFAULT_CORPUS = "/work/corpus/Data"
FEATURES = ("log_return", "open_rel", "high_rel", "low_rel", "log_volume_change", "volume_zscore", "volatility")
CONTEXT_LEN, HORIZON, MAX_GAP = 32, 5, "10D"


def val_start(cut: str) -> str:
    """Six months before the cut: the pretraining's validation border (the test border is the cut)."""
    return str((pd.Timestamp(cut) - pd.DateOffset(months=6)).date())


# ------------------------------------------------------------------------------------------------ the data
def subset(corpus: Path, fraction: float, work: Path) -> Path:
    """``corpus`` itself for a fraction of 1, else a folder under ``work`` of links to every ``1/fraction``-th
    of its files (sorted by path), in the same subfolders."""
    if fraction >= 1:
        return corpus
    from lightning_tf.kline.reader import list_bar_files

    step = round(1 / fraction)
    folder = work / f"{corpus.name}_1of{step}"
    done = folder / ".complete"
    if not done.exists():
        for file in list_bar_files(corpus)[::step]:
            link = folder / file.relative_to(corpus)
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(file.resolve())
        done.write_text("")
    return folder


def describe_files(folder: Path) -> dict[str, Any]:
    """The bar files of ``folder``: how many, their bytes, and their data lines (lines below the header)."""
    from lightning_tf.kline.reader import list_bar_files

    files = list_bar_files(folder)
    lines = 0
    size = 0
    for file in files:
        data = file.read_bytes()
        size += len(data)
        if data.strip():
            lines += data.count(b"\n") + (not data.endswith(b"\n")) - 1
    return {"files": len(files), "mb": size / 2**20, "bars_in_files": lines}


# ------------------------------------------------------------------------------------------------ phases
def _imports() -> None:
    import lightning_tf.kline.panel  # noqa: F401
    import lightning_tf.kline.reader  # noqa: F401


def phase_read(path: str, cut: str | None, workers: int) -> dict[str, Any]:
    from lightning_tf.kline.reader import read_bars

    frame = read_bars(
        path, on_error="drop", max_gap=MAX_GAP, read_workers=workers, progress=False, cut=cut, bad_files="skip"
    )
    read = frame.attrs["read"]
    return {
        "bars": len(frame),
        "tickers": int(frame["ticker"].nunique()),
        "frame_mb": float(frame.memory_usage(deep=False).sum()) / 2**20,
        "left_out": read["left_out"],
        "cut_bars": read["cut_bars"],
    }


def phase_prepare(path: str, cut: str, workers: int, cache: str) -> dict[str, Any]:
    """What ``KLineDataModule._prepared`` does with these settings, into ``cache`` (empty)."""
    from lightning_tf.kline.panel import PanelSettings, panel_spec, prepare_panel
    from lightning_tf.kline.settings import Covariates, Features, Reading, Splits, read_with_settings

    settings = PanelSettings(
        path=path,
        context_len=CONTEXT_LEN,
        horizon=HORIZON,
        features=Features(names=list(FEATURES)),
        splits=Splits(val_start=val_start(cut), test_start=cut),
        max_gap=MAX_GAP,
    )
    reading = Reading(on_error="drop", max_gap=MAX_GAP, read_workers=workers, cut=cut, bad_files="skip")
    start = time.perf_counter()
    spec = panel_spec(settings, Path(path), reading)
    spec.key()  # the files' fingerprint: every file's size and CRC-32
    fingerprint_s = time.perf_counter() - start

    def read() -> pd.DataFrame:
        return read_with_settings(path, reading, Covariates(), source=path)

    folder = prepare_panel(spec, cache, read)
    seconds = time.perf_counter() - start
    manifest = json.loads((folder / "manifest.json").read_text())
    phases = {"fingerprint": fingerprint_s, **manifest["phase_seconds"]}
    phases["write"] = seconds - sum(phases.values())  # the arrays, their checksums and the manifest
    ends = {split: len(np.load(folder / f"ends_{split}.npy", mmap_mode="r")) for split in ("train", "val", "test")}
    rows = np.load(folder / "x.npy", mmap_mode="r").shape[0]
    return {
        "folder": str(folder),
        "phase_seconds": phases,
        "panel_mb": sum(p.stat().st_size for p in folder.iterdir()) / 2**20,
        "panel_rows": int(rows),
        "tickers": len(manifest["ticker_names"]),
        "windows": ends,
        "warnings": len(manifest["warnings"]),
    }


def phase_pandas(path: str) -> dict[str, Any]:
    """The floor: ``pandas.read_csv`` of every file, nothing else (an empty file read as no rows)."""
    from lightning_tf.kline.reader import list_bar_files

    frames = []
    for file in list_bar_files(path):
        try:
            frames.append(pd.read_csv(file))
        except pd.errors.EmptyDataError:
            continue
    return {"bars": sum(len(f) for f in frames)}


PHASES = {"read": phase_read, "prepare": phase_prepare, "pandas": phase_pandas}


def _measured(name: str, kwargs: dict[str, Any], fresh: bool) -> dict[str, Any]:
    """Phase ``name``: its numbers, seconds and peak memory above the imports (the high-water mark counts
    only in a fresh process)."""
    _imports()
    gc.collect()
    base_rss, base_pss = _proc_kb("self", "VmRSS") / 1024, pss_mb()
    sampler = PeakSampler(base_pss)
    sampler.start()
    start = time.perf_counter()
    result = PHASES[name](**kwargs)
    seconds = time.perf_counter() - start
    sampled = sampler.stop()
    peak = max(_proc_kb("self", "VmHWM") / 1024 - base_rss, sampled) if fresh else sampled
    return {"seconds": seconds, "peak_mb": peak, "peak_rss_mb": _proc_kb("self", "VmHWM") / 1024, **result}


def _child(name: str, kwargs: dict[str, Any], queue: Any) -> None:
    queue.put(_measured(name, kwargs, fresh=True))


def measure(name: str, in_process: bool, **kwargs: Any) -> dict[str, Any]:
    """Phase ``name`` in a fresh (spawned) process, or in this one."""
    print(f"  {name} {kwargs} ...", file=sys.stderr, flush=True)
    if in_process:
        return _measured(name, kwargs, fresh=False)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(name, kwargs, queue))
    proc.start()
    result = queue.get()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"phase {name} {kwargs} failed ({proc.exitcode})")
    return result


def _rank(folder: str, barrier: Any, queue: Any) -> None:
    """One rank: map the prepared panel as ``KLineDataModule.setup`` does, read every page of its rows (as an
    epoch reads them), and say its PSS while every rank holds the panel."""
    from lightning_tf.kline.panel import load_panel

    gc.collect()
    base = pss_mb()
    panel, _ = load_panel(folder)
    for rows in panel.rows.values():
        float(rows.numpy().sum())  # numpy: no torch thread pool in a forked process
    barrier.wait()  # every rank has read its pages
    now = pss_mb()
    barrier.wait()  # and measured, before any lets its pages go
    queue.put({"pss_mb": now[0] - base[0] + now[1] - base[1], "file_pss_mb": now[1] - base[1]})


def measure_share(folder: str, ranks: int, in_process: bool) -> list[dict[str, float]]:
    """Each of ``ranks`` processes' PSS above its imports while all of them map the panel."""
    print(f"  share {ranks} process(es) ...", file=sys.stderr, flush=True)
    ctx = multiprocessing.get_context("fork" if in_process else "spawn")
    barrier, queue = ctx.Barrier(ranks), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(folder, barrier, queue)) for _ in range(ranks)]
    for proc in procs:
        proc.start()
    results = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise SystemExit(f"a rank mapping {folder} failed ({proc.exitcode})")
    return results


# ------------------------------------------------------------------------------------------------ report
def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _reasons(left_out: dict[str, int]) -> str:
    return "; ".join(f"{n:,} {reason}" for reason, n in left_out.items()) or "none"


def markdown(results: dict[str, Any]) -> str:
    s = results["settings"]
    lines = [
        "# The pretraining corpus at full size",
        "",
        f'`{results["command"]}` (how to build the corpus: docs/kline.md, "The pretraining corpus").',
        "",
        f"Machine: {results['machine']}. Load average at the start {results['load_start']}, at the end "
        f"{results['load_end']} (1, 5 and 15 minutes).",
        f"Corpus: `{s['corpus']}`, {results['files']['files']:,} files, {results['files']['mb']:,.0f} MB, "
        f"{results['files']['bars_in_files']:,} bars. Cut {s['cut']} (bars at or after it are never read); panel: "
        f"features {', '.join(s['features'])}; context {s['context_len']}, horizon {s['horizon']}, validation from "
        f"{s['val_start']}, test from {s['cut']} (so empty: the pretraining corpus stops at the cut), max_gap "
        f"{s['max_gap']}, on_error drop, bad_files skip.",
        "",
        "## Reading (`read_bars`)",
        "",
        "| files | MB | bars in files | cut | read_workers | seconds | `pandas.read_csv` s | ours/pandas | bars/s | "
        "peak MB | frame MB | bars kept | bars cut | tickers | files left out |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results["read"]:
        lines.append(
            f"| {r['files']:,} | {r['mb']:,.0f} | {r['bars_in_files']:,} | {r['cut'] or 'none'} | {r['workers']} | "
            f"{r['seconds']:.1f} | {r['pandas_s']:.1f} | {r['seconds'] / r['pandas_s']:.2f} | "
            f"{r['bars_in_files'] / r['seconds']:,.0f} | {r['peak_mb']:,.0f} | "
            f"{r['frame_mb']:,.0f} | {r['bars']:,} | {r['cut_bars']:,} | {r['tickers']:,} | {_reasons(r['left_out'])} |"
        )
    lines += [
        "",
        "## Preparing the panel (`panel_spec` + `prepare_panel`, as `prepare_data()` does)",
        "",
        "| files | seconds | fingerprint s | read s | features s | write s | peak MB | panel MB on disk | rows | "
        "tickers | windows train / val / test | warnings kept |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results["prepare"]:
        p, w = r["phase_seconds"], r["windows"]
        lines.append(
            f"| {r['files']:,} | {r['seconds']:.1f} | {p['fingerprint']:.1f} | {p['read']:.1f} | "
            f"{p['features']:.1f} | {p['write']:.1f} | {r['peak_mb']:,.0f} | {r['panel_mb']:,.0f} | "
            f"{r['panel_rows']:,} | {r['tickers']:,} | {w['train']:,} / {w['val']:,} / {w['test']:,} | "
            f"{r['warnings']} |"
        )
    g = results["growth"]
    lines += [
        "",
        f"Growth exponents over the bars in the files (1 is linear): reading time {g['read_s']:.2f}, its peak memory "
        f"{g['read_peak']:.2f}; preparing time {g['prepare_s']:.2f}, its peak memory {g['prepare_peak']:.2f}.",
        "",
        "## Two ranks sharing the prepared panel",
        "",
        "| processes | panel MB on disk | PSS MB per process | PSS MB, all processes |",
        "|---:|---:|---:|---:|",
    ]
    for row in results["share"]:
        per = " / ".join(f"{x['pss_mb']:,.0f}" for x in row["ranks"])
        total = sum(x["pss_mb"] for x in row["ranks"])
        lines.append(f"| {len(row['ranks'])} | {row['panel_mb']:,.0f} | {per} | {total:,.0f} |")
    one, two = (sum(x["pss_mb"] for x in row["ranks"]) for row in results["share"])
    lines += [
        "",
        f"Two processes mapping the panel hold {two / one:.2f}x the memory of one: each maps the same file pages "
        "(`load_panel`, copy-on-write), which the kernel keeps once.",
        "",
        (
            "In-process smoke run: the phases ran in one process, their numbers are not measurements. "
            if results["in_process"]
            else "Each phase ran in a fresh process. "
        )
        + "Memory is above the process's imports (peak: the larger of the "
        "resident high-water mark and the sampled PSS of the process and its reading workers). 'bars in files' "
        "counts the files' data lines; the bars neither kept nor cut were dropped by validation (on_error drop) "
        "or were in files left out.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--corpus",
        type=Path,
        default=Path(os.environ.get("LIGHTNING_TF_CORPUS", DEFAULT_CORPUS)),
        help="the corpus folder (default: $LIGHTNING_TF_CORPUS, else /work/corpus/Data)",
    )
    p.add_argument("--cut", default="2008-06-24", help="the date cut: no bar at or after it is read")
    p.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[0, 2],
        help="read_workers: the first for every size, the others for all of the files too",
    )
    p.add_argument("--fractions", type=float, nargs="+", default=[0.125, 0.25, 0.5, 1.0])
    p.add_argument("--work", type=Path, default=Path("/tmp/lightning-tf-corpus"), help="links and panels go here")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "corpus", help="writes OUT.md, OUT.json")
    p.add_argument("--in-process", action="store_true", help="run the phases here (a smoke run, not numbers)")
    args = p.parse_args(argv)
    if not args.corpus.is_dir():
        raise SystemExit(f"{args.corpus}: no such folder; build the corpus first (docs/kline.md)")
    import shutil

    import torch
    from core_layers import machine_info

    info = machine_info(torch.device("cpu"))
    ram = _proc_kb("self", "MemTotal", "../meminfo") / 2**20
    machine = f"{info['cpu']}, {info['cores']} cores, {ram:.1f} GiB RAM; Python {sys.version.split()[0]}"
    load_start = _load()
    print(f"machine: {machine}; load average {load_start}", flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    fractions = sorted(args.fractions)
    reads, prepares = [], []
    for fraction in fractions:
        folder = subset(args.corpus, fraction, args.work)
        files = describe_files(folder)
        print(f"{fraction:g} of the files: {files['files']:,} files, {files['bars_in_files']:,} bars", flush=True)
        runs = [(args.cut, args.workers[0])]
        if fraction == fractions[-1]:
            runs += [(args.cut, w) for w in args.workers[1:]] + [(None, args.workers[0])]
        floor = measure("pandas", args.in_process, path=str(folder))
        for cut, workers in runs:
            got = measure("read", args.in_process, path=str(folder), cut=cut, workers=workers)
            reads.append(
                {"fraction": fraction, **files, "cut": cut, "workers": workers, "pandas_s": floor["seconds"], **got}
            )
        cache = args.work / f"cache_{folder.name}"
        shutil.rmtree(cache, ignore_errors=True)
        got = measure(
            "prepare", args.in_process, path=str(folder), cut=args.cut, workers=args.workers[0], cache=str(cache)
        )
        prepares.append({"fraction": fraction, **files, **got})
    panel = prepares[-1]
    share = [
        {"panel_mb": panel["panel_mb"], "ranks": measure_share(panel["folder"], n, args.in_process)} for n in (1, 2)
    ]
    series = [r for r in reads if r["cut"] == args.cut and r["workers"] == args.workers[0]]
    bars = [r["bars_in_files"] for r in series]
    growth = {
        "read_s": growth_exponent(bars, [r["seconds"] for r in series]),
        "read_peak": growth_exponent(bars, [r["peak_mb"] for r in series]),
        "prepare_s": growth_exponent(bars, [r["seconds"] for r in prepares]),
        "prepare_peak": growth_exponent(bars, [r["peak_mb"] for r in prepares]),
    }
    command = " ".join(["python benchmarks/corpus.py", *(sys.argv[1:] if argv is None else argv)])
    results = {
        "command": command,
        "in_process": args.in_process,
        "machine": machine,
        "load_start": load_start,
        "load_end": _load(),
        "settings": {
            "corpus": str(args.corpus),
            "cut": args.cut,
            "features": list(FEATURES),
            "context_len": CONTEXT_LEN,
            "horizon": HORIZON,
            "val_start": val_start(args.cut),
            "max_gap": MAX_GAP,
        },
        "files": reads[-1] if fractions[-1] >= 1 else describe_files(args.corpus),
        "read": reads,
        "prepare": prepares,
        "share": share,
        "growth": growth,
    }
    text = markdown(results)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"results: {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
    return results


if __name__ == "__main__":
    main()
