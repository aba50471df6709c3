"""Cost against size: each data path at growing sizes, side by side with its limit in the same run.

Sections (``--tasks``), each a plain function returning a :class:`Section` of rows:

- ``text``: generated aligned corpora of WMT-length sentence pairs (100,000 / 300,000 / 1,000,000),
  ``TranslationDataModule``'s ``prepare_data()`` then ``setup("fit")`` and the first batch (cold: an empty
  cache; warm: the cache built) against the tokenizers library alone training the same BPE and encoding
  both sides into numpy; steady and per-rank memory after one epoch of batches. Targets at the largest
  size: cold <= 1.5x the limit + 15 s, warm <= 10 s, peak <= 1.5 GB, steady PSS <= 3x the int32 ids +
  100 MB, 2 DDP ranks <= 1.3x one process, growth exponents <= 1.1.
- ``kline``: generated universes of daily OHLCV files (one CSV per ticker, Yahoo's columns, written once
  into the work folder), ``KLineDataModule(...).setup("fit")`` against ``pandas.read_csv`` of the same
  files, and the size of the float32 feature arrays it builds. Targets at 2,000 and 5,000 tickers:
  seconds <= 4x pandas + 5 s, peak memory <= 6x the feature arrays + 200 MB, growth exponents <= 1.1.
- ``vision``: a generated folder of JPEG class folders through ``ImageDataModule`` (``image_folder``)
  against torchvision's ``ImageFolder`` with the same operations: seconds to the first training batch
  and images per second over one pass.

Every measured phase runs in a fresh Python process, so that imports are not timed and memory starts
clean. Memory is counted above what the process holds once its imports are done: *peak* is the larger
of the process's resident high-water mark and the PSS of the process and its children (worker
processes; sampled every 0.2 s); *steady* is the PSS left after the phase (shared pages counted once).
File-backed pages count where they grew (a memory map read), not where the kernel dropped library
pages of the baseline meanwhile.
*Per rank under DDP* runs the phase in 2 processes joined by ``torch.distributed`` (gloo, on the CPU)
and sums their PSS above the imports, measured while both are alive. The growth exponent is the
least-squares slope of log(cost) over log(size). ``--repeats`` runs each timed phase that many times,
ours and its limit taking turns, and keeps the fastest of each (other jobs share the machine; the
targets are ratios to a limit measured in the same run). The files of each size are in the OS file
cache when they are read (written or read just before).

A new section is one more function ``(args) -> Section`` added to ``SECTIONS``, with its phases
registered by ``@phase(...)`` (see :func:`measure`, :func:`fastest` and :func:`measure_ddp`).

Run (about 15 minutes on a 2-core CPU for K-line and vision, 25 more for text; ``--quick`` is a smoke run of tiny sizes)::

    python benchmarks/scale.py [--tasks text kline vision] [--repeats 2] [--work DIR] [--quick]
        [--md docs/results/scale.md] [--json docs/results/scale.json] [--merge]

``--merge`` keeps the sections already in the JSON results that this run does not measure (each
section says which machine, load and repeats measured it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lightning_tf.kline.settings import Reading

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
SAMPLE_S = 0.2  # the PSS sampling period of a measured process tree


# ------------------------------------------------------------------------------------------------ memory
def _proc_kb(pid: int | str, key: str, name: str = "status") -> int:
    """A ``key:  <n> kB`` field of ``/proc/<pid>/<name>`` (0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/{name}") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def pss_mb(pid: int | str = "self") -> tuple[float, float]:
    """Proportional set size (private pages plus each shared page divided by its sharers), as
    ``(anonymous and shared memory, file-backed pages)``."""
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Pss_Anon", "Pss_Shmem", "Pss_File"):
                    fields[key] = int(rest.split()[0])
    except (OSError, ValueError):
        pass
    return (fields.get("Pss_Anon", 0) + fields.get("Pss_Shmem", 0)) / 1024, fields.get("Pss_File", 0) / 1024


def tree_pss_mb() -> tuple[float, float]:
    """:func:`pss_mb` summed over this process and its children."""
    parts = [pss_mb(), *(pss_mb(c) for c in children())]
    return sum(a for a, _ in parts), sum(f for _, f in parts)


def above(now: tuple[float, float], base: tuple[float, float]) -> float:
    """Memory above a baseline: the anonymous growth, plus file-backed pages only where they grew (the
    kernel may drop clean library pages of the baseline from memory while the phase runs; that is not
    the phase giving memory back)."""
    return now[0] - base[0] + max(0.0, now[1] - base[1])


def children(pid: int | str = "self") -> list[int]:
    """The direct children of a process (its worker processes)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return found


class PeakSampler(threading.Thread):
    """Samples the PSS of this process and its children until stopped; ``peak`` is the most it rose
    above ``base``."""

    def __init__(self, base: tuple[float, float]) -> None:
        super().__init__(daemon=True)
        self.base, self.peak, self._done = base, 0.0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(SAMPLE_S):
            self.peak = max(self.peak, above(tree_pss_mb(), self.base))

    def stop(self) -> float:
        self._done.set()
        self.join()
        return self.peak


# ------------------------------------------------------------------------------------------------ phases
@dataclass
class Phase:
    imports: tuple[str, ...]  # modules imported before the baseline is taken
    run: Callable[..., dict[str, Any]]  # the measured work; returns extra numbers for the row


PHASES: dict[str, Phase] = {}
KEPT: list[Any] = []  # what a phase built, held until its steady memory is measured


def phase(*imports: str) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """Register a measured phase: ``imports`` are loaded (and excluded) before it runs."""

    def register(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        PHASES[fn.__name__] = Phase(imports, fn)
        return fn

    return register


def _child(name: str, kwargs: dict[str, Any], out: Path, rank: int | None, world: int, port: int) -> None:
    """Entry of a measuring process: imports, baseline, the phase, the numbers (as JSON in ``out``)."""
    import importlib

    spec = PHASES[name]
    for module in spec.imports:
        importlib.import_module(module)
    dist = None
    if rank is not None:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        dist.barrier()
    gc.collect()
    base_rss, base_pss = _proc_kb("self", "VmRSS") / 1024, pss_mb()
    sampler = PeakSampler(base_pss)
    sampler.start()
    start = time.perf_counter()
    extra = spec.run(**kwargs)
    seconds = time.perf_counter() - start
    tree_peak = sampler.stop()
    gc.collect()
    if dist is not None:
        dist.barrier()  # every rank holds its data now: PSS shares the common pages between them
    result = {
        "seconds": seconds,
        "peak_mb": max(_proc_kb("self", "VmHWM") / 1024 - base_rss, tree_peak),
        "steady_mb": above(pss_mb(), base_pss),
        **extra,
    }
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()
    out.write_text(json.dumps(result))


def _launch(name: str, kwargs: dict[str, Any], out: Path, extra: list[str] = ()) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, __file__, "--phase", name, "--kwargs", json.dumps(kwargs), "--out", str(out), *extra]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(procs: list[subprocess.Popen], what: str) -> None:
    for proc in procs:
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{what} failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}")


def measure(name: str, **kwargs: Any) -> dict[str, Any]:
    """Run phase ``name`` once in a fresh process; its numbers."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "phase.json"
        _wait([_launch(name, kwargs, out)], f"phase {name} {kwargs}")
        return json.loads(out.read_text())


def fastest(phases: dict[str, tuple[str, dict[str, Any]]], repeats: int) -> dict[str, dict[str, Any]]:
    """Each of ``phases`` (label -> phase name, arguments) ``repeats`` times, taking turns (ours and its
    limit see the same moments of a shared machine); for each, the numbers of its fastest run."""
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in phases}
    for r in range(repeats):
        order = list(phases) if r % 2 == 0 else list(reversed(phases))
        for label in order:
            name, kwargs = phases[label]
            runs[label].append(measure(name, **kwargs))
    return {label: min(rs, key=lambda run: run["seconds"]) for label, rs in runs.items()}


def measure_ddp(name: str, world_size: int = 2, **kwargs: Any) -> dict[str, Any]:
    """Run phase ``name`` in ``world_size`` processes of one gloo process group (CPU DDP): each rank's
    PSS above its imports, measured while all ranks hold their data, and their sum."""
    import socket

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"rank{r}.json" for r in range(world_size)]
        procs = [
            _launch(name, kwargs, outs[r], ["--rank", str(r), "--world", str(world_size), "--port", str(port)])
            for r in range(world_size)
        ]
        _wait(procs, f"DDP phase {name} {kwargs}")
        ranks = [json.loads(out.read_text()) for out in outs]
    return {
        "rank_mb": [r["steady_mb"] for r in ranks],
        "sum_mb": sum(r["steady_mb"] for r in ranks),
        "seconds": max(r["seconds"] for r in ranks),
    }


def growth_exponent(sizes: list[float], costs: list[float]) -> float:
    """The least-squares slope of log(cost) over log(size): 1 is linear growth."""
    ok = [(s, c) for s, c in zip(sizes, costs, strict=True) if c > 0]
    if len(ok) < 2:
        return float("nan")
    x, y = np.log([s for s, _ in ok]), np.log([c for _, c in ok])
    return float(np.polyfit(x, y, 1)[0])


# ------------------------------------------------------------------------------------------------ results
@dataclass
class Target:
    what: str
    value: float
    limit: float

    @property
    def passed(self) -> bool:
        return bool(self.value <= self.limit)


@dataclass
class Section:
    title: str
    columns: list[tuple[str, str, str]]  # (row key, header, format)
    rows: list[dict[str, Any]]
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    measured: str = ""  # the machine, its load and the repeats of the run that measured it

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Section:
        """A section written to the JSON results by an earlier run."""
        targets = [Target(t["what"], t["value"], t["limit"]) for t in data.get("targets", [])]
        return cls(
            data["title"],
            [tuple(c) for c in data["columns"]],
            data["rows"],
            targets,
            data.get("notes", []),
            data.get("measured", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "targets": [{**asdict(t), "passed": t.passed} for t in self.targets]}

    def markdown(self) -> str:
        lines = [
            f"## {self.title}",
            "",
            "| " + " | ".join(h for _, h, _ in self.columns) + " |",
            "|" + "|".join("---:" if f else "---" for _, _, f in self.columns) + "|",
        ]
        for row in self.rows:
            cells = [
                ("" if row.get(k) is None else format(row[k], f) if f else str(row[k])) for k, _, f in self.columns
            ]
            lines.append("| " + " | ".join(cells) + " |")
        if self.targets:
            lines += ["", "| target | measured | limit | |", "|---|---:|---:|---|"]
            lines += [
                f"| {t.what} | {t.value:.2f} | {t.limit:.2f} | {'PASS' if t.passed else 'FAIL'} |" for t in self.targets
            ]
        notes = [*self.notes, *([f"Measured on {self.measured}."] if self.measured else [])]
        return "\n".join(lines + ([""] + [" ".join(notes)] if notes else []))


# ------------------------------------------------------------------------------------------------ K-line
def write_universe(folder: Path, n_tickers: int, n_bars: int, seed: int = 0) -> None:
    """``n_tickers`` daily OHLCV files as Yahoo writes them (Date, Open, High, Low, Close, Adj Close,
    Volume), geometric random walks with intraday ranges, one file per ticker."""
    folder.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    dates = pd.bdate_range("2010-01-04", periods=n_bars).strftime("%Y-%m-%d").tolist()
    rng = np.random.default_rng(seed)
    for k in range(n_tickers):
        close = rng.uniform(5, 200) * np.exp(np.cumsum(rng.normal(0.0003, 0.02, n_bars)))
        open_ = close * np.exp(rng.normal(0, 0.006, n_bars))
        high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.01, n_bars)))
        low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.01, n_bars)))
        volume = rng.integers(10_000, 20_000_000, n_bars)
        rows = zip(dates, open_, high, low, close, close * 0.97, volume, strict=True)
        text = "\n".join(f"{d},{o:.2f},{h:.2f},{lo:.2f},{c:.2f},{a:.4f},{v}" for d, o, h, lo, c, a, v in rows)
        (folder / f"T{k:05d}.csv").write_text("Date,Open,High,Low,Close,Adj Close,Volume\n" + text + "\n")


def universes(work: Path, sizes: list[int], n_bars: int) -> dict[int, Path]:
    """A folder per size; the largest holds the files, the smaller ones link to its first files."""
    top = work / f"kline_{max(sizes)}x{n_bars}"
    done = top / ".complete"
    if not done.exists():
        print(f"writing {max(sizes)} files of {n_bars} bars to {top} ...", file=sys.stderr, flush=True)
        write_universe(top, max(sizes), n_bars)
        done.write_text("")
    files = sorted(top.glob("*.csv"))
    folders = {}
    for n in sizes:
        folder = top if n == max(sizes) else work / f"kline_{n}x{n_bars}"
        if folder != top and not (folder / ".complete").exists():
            folder.mkdir(parents=True, exist_ok=True)
            for f in files[:n]:
                link = folder / f.name
                if not link.exists():
                    link.symlink_to(f)
            (folder / ".complete").write_text("")
        folders[n] = folder
    return folders


@phase("pandas")
def kline_pandas(path: str) -> dict[str, Any]:
    import pandas as pd

    frames = [pd.read_csv(f) for f in sorted(Path(path).glob("*.csv"))]
    KEPT.append(frames)
    return {"rows": sum(len(f) for f in frames)}


@phase("lightning_tf.kline.data")
def kline_setup(path: str, read_workers: int | None = None) -> dict[str, Any]:
    from lightning_tf.kline.data import KLineDataModule

    dm = KLineDataModule(path=path, reading=Reading(read_workers=read_workers))
    dm.setup("fit")
    KEPT.append(dm)
    setup_s = time.perf_counter()
    next(iter(dm.train_dataloader()))
    x = dm._rows["x"]
    return {
        "first_batch_s": time.perf_counter() - setup_s,
        "feature_mb": x.numel() * x.element_size() / 2**20,
        "windows": len(dm.datasets["train"]),
    }


@phase("lightning_tf.kline.data")
def kline_prepared(path: str, cache: str, touch: bool = False) -> dict[str, Any]:
    """``prepare_data()`` (on an empty cache the whole build, else the check that reuses it), ``setup("fit")``
    and the first training batch, with a ``cache_dir``; with ``touch`` every page of the rows is then read, as
    an epoch reads them, the DataModule kept for the steady PSS. Under DDP rank 0 prepares first, as Lightning
    runs ``prepare_data`` before ``setup``."""
    import torch.distributed as dist

    from lightning_tf.kline.data import KLineDataModule

    dm = KLineDataModule(path=path, cache_dir=cache)
    if not dist.is_initialized() or dist.get_rank() == 0:
        dm.prepare_data()
    if dist.is_initialized():
        dist.barrier()
    dm.setup("fit")
    next(iter(dm.train_dataloader()))
    if touch:
        for rows in dm._rows.values():
            rows.sum()
    KEPT.append(dm)
    return {}


def kline_section(args: argparse.Namespace) -> Section:
    import shutil

    sizes, n_bars = args.kline_sizes, args.kline_bars
    folders = universes(args.work, sizes, n_bars)
    rows = []
    for n in sizes:
        path = str(folders[n])
        print(f"kline: {n} tickers ...", file=sys.stderr, flush=True)
        phases = {"limit": ("kline_pandas", {"path": path}), "ours": ("kline_setup", {"path": path})}
        got = fastest(phases, args.repeats)
        limit, ours = got["limit"], got["ours"]
        ddp = measure_ddp("kline_setup", 2, path=path) if n in args.ddp_sizes else None
        cache = args.work / f"kline_{n}x{n_bars}_cache"
        shutil.rmtree(cache, ignore_errors=True)
        cold = measure("kline_prepared", path=path, cache=str(cache))
        warm = min(
            (measure("kline_prepared", path=path, cache=str(cache), touch=True) for _ in range(args.repeats)),
            key=lambda run: run["seconds"],
        )
        ddp_prepared = (
            measure_ddp("kline_prepared", 2, path=path, cache=str(cache), touch=True) if n in args.ddp_sizes else None
        )
        rows.append(
            {
                "tickers": n,
                "rows": limit["rows"],
                "pandas_s": limit["seconds"],
                "ours_s": ours["seconds"],
                "ratio": ours["seconds"] / limit["seconds"],
                "first_batch_s": ours["seconds"] + ours["first_batch_s"],
                "feature_mb": ours["feature_mb"],
                "peak_mb": ours["peak_mb"],
                "steady_mb": ours["steady_mb"],
                "peak_per_feature": ours["peak_mb"] / ours["feature_mb"],
                "pandas_mb": limit["steady_mb"],
                "ddp_rank_mb": None if ddp is None else sum(ddp["rank_mb"]) / len(ddp["rank_mb"]),
                "ddp_sum_mb": None if ddp is None else ddp["sum_mb"],
                "cold_s": cold["seconds"],
                "warm_s": warm["seconds"],
                "prepared_peak_mb": max(cold["peak_mb"], warm["peak_mb"]),
                "prepared_mb": warm["steady_mb"],
                "ddp_prepared_mb": None if ddp_prepared is None else ddp_prepared["sum_mb"],
            }
        )
    targets = []
    for row in rows:
        if row["tickers"] in args.kline_target_sizes:
            n = row["tickers"]
            targets.append(Target(f"{n} tickers: setup s <= 4 x pandas + 5 s", row["ours_s"], 4 * row["pandas_s"] + 5))
            targets.append(
                Target(f"{n} tickers: peak MB <= 6 x features + 200 MB", row["peak_mb"], 6 * row["feature_mb"] + 200)
            )
    big = rows[-1]
    targets.append(Target(f"{big['tickers']} tickers, prepared: warm s <= 10 s", big["warm_s"], 10))
    if big["ddp_prepared_mb"] is not None:
        targets.append(
            Target(
                f"{big['tickers']} tickers, prepared: 2 DDP ranks' PSS MB <= 1.3 x one process's",
                big["ddp_prepared_mb"],
                1.3 * big["prepared_mb"],
            )
        )
    exponents = {
        "time": growth_exponent([r["tickers"] for r in rows], [r["ours_s"] for r in rows]),
        "peak memory": growth_exponent([r["tickers"] for r in rows], [r["peak_mb"] for r in rows]),
        "pandas time": growth_exponent([r["tickers"] for r in rows], [r["pandas_s"] for r in rows]),
    }
    targets += [
        Target(f"growth exponent of {k}, {sizes[0]}-{sizes[-1]} tickers", v, 1.1)
        for k, v in exponents.items()
        if k != "pandas time"
    ]
    columns = [
        ("tickers", "tickers", ","),
        ("rows", "bars", ","),
        ("pandas_s", "pandas.read_csv s", ".2f"),
        ("ours_s", "setup('fit') s", ".2f"),
        ("ratio", "ours/pandas", ".2f"),
        ("first_batch_s", "to 1st batch s", ".2f"),
        ("feature_mb", "float32 features MB", ".0f"),
        ("peak_mb", "peak MB", ".0f"),
        ("peak_per_feature", "peak/features", ".1f"),
        ("steady_mb", "steady PSS MB", ".0f"),
        ("pandas_mb", "pandas frames PSS MB", ".0f"),
        ("ddp_rank_mb", "DDP PSS MB/rank", ".0f"),
        ("ddp_sum_mb", "DDP PSS MB, 2 ranks", ".0f"),
        ("cold_s", "prepared: cold s", ".2f"),
        ("warm_s", "prepared: warm s", ".2f"),
        ("prepared_peak_mb", "prepared: peak MB", ".0f"),
        ("prepared_mb", "prepared: steady PSS MB", ".0f"),
        ("ddp_prepared_mb", "prepared: DDP PSS MB, 2 ranks", ".0f"),
    ]
    notes = [
        f"{n_bars} daily bars per ticker, one CSV per ticker (Yahoo's columns); default KLineDataModule "
        f"(read_workers automatic); growth exponent of pandas.read_csv's time: {exponents['pandas time']:.2f}. "
        "'prepared': the same with a cache_dir (kline/panel.py): 'cold' is prepare_data() on an empty cache, "
        "then setup('fit') and the first batch, in one fresh process; 'warm' the same with the panel built; "
        "its steady PSS and the DDP ranks' are taken after every page of the rows was read (as an epoch "
        "reads them), rank 0 preparing first."
    ]
    return Section("K-line: a folder of ticker files", columns, rows, targets, notes)


# ------------------------------------------------------------------------------------------------ vision
def write_image_folder(folder: Path, n_images: int, side: int = 32, classes: int = 10, seed: int = 0) -> None:
    """``n_images`` small JPEGs in ``classes`` class folders: smooth random colour fields."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in range(classes):
        (folder / f"class_{c}").mkdir(parents=True, exist_ok=True)
    coarse = rng.integers(0, 256, (n_images, 4, 4, 3), dtype=np.uint8)
    for i in range(n_images):
        image = Image.fromarray(coarse[i]).resize((side, side), Image.BILINEAR)
        image.save(folder / f"class_{i % classes}" / f"img_{i:06d}.jpg", quality=90)


@phase("lightning_tf.vision.data")
def vision_ours(root: str, image_size: int, batch_size: int) -> dict[str, Any]:
    from lightning_tf.vision.data import ImageDataModule

    begin = time.perf_counter()
    dm = ImageDataModule(
        dataset="image_folder", root=root, image_size=image_size, batch_size=batch_size, augment="none", num_workers=0
    )
    dm.setup("fit")
    KEPT.append(dm)
    return _one_pass(dm.train_dataloader(), begin)


def _one_pass(loader: Any, begin: float) -> dict[str, Any]:
    """Seconds from ``begin`` to the first batch, images and images per second over one pass."""
    first = None
    n, start = 0, time.perf_counter()
    for images, _ in loader:
        n += len(images)
        first = first or time.perf_counter()
    return {"first_batch_s": first - begin, "images": n, "per_s": n / (time.perf_counter() - start)}


@phase("torchvision", "torch")
def vision_imagefolder(root: str, image_size: int, batch_size: int) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    begin = time.perf_counter()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    transform = v2.Compose(
        [
            v2.ToImage(),
            v2.Resize(image_size, antialias=True),
            v2.CenterCrop(image_size),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean, std),
        ]
    )
    loader = DataLoader(ImageFolder(root, transform=transform), batch_size=batch_size, shuffle=True)
    KEPT.append(loader)
    return _one_pass(loader, begin)


def vision_section(args: argparse.Namespace) -> Section:
    rows = []
    for n in args.vision_sizes:
        root = args.work / f"images_{n}"
        if not (root / ".complete").exists():
            print(f"writing {n} JPEGs to {root} ...", file=sys.stderr, flush=True)
            write_image_folder(root, n)
            (root / ".complete").write_text("")
        print(f"vision: {n} images ...", file=sys.stderr, flush=True)
        kw = {"root": str(root), "image_size": 32, "batch_size": 256}
        got = fastest({"ref": ("vision_imagefolder", kw), "ours": ("vision_ours", kw)}, args.repeats)
        ref, ours = got["ref"], got["ours"]
        ddp = measure_ddp("vision_ours", 2, **kw) if n in args.ddp_sizes_vision else None
        rows.append(
            {
                "images": n,
                "ref_first_s": ref["first_batch_s"],
                "ours_first_s": ours["first_batch_s"],
                "ref_per_s": ref["per_s"],
                "ours_per_s": ours["per_s"],
                "ratio": ours["per_s"] / ref["per_s"],
                "ours_s": ours["seconds"],
                "peak_mb": ours["peak_mb"],
                "steady_mb": ours["steady_mb"],
                "ref_peak_mb": ref["peak_mb"],
                "ddp_rank_mb": None if ddp is None else sum(ddp["rank_mb"]) / len(ddp["rank_mb"]),
                "ddp_sum_mb": None if ddp is None else ddp["sum_mb"],
            }
        )
    sizes = [r["images"] for r in rows]
    exponents = {k: growth_exponent(sizes, [r[k] for r in rows]) for k in ("ours_s", "peak_mb")}
    columns = [
        ("images", "images", ","),
        ("ref_first_s", "ImageFolder to 1st batch s", ".2f"),
        ("ours_first_s", "ours to 1st batch s", ".2f"),
        ("ref_per_s", "ImageFolder img/s", ",.0f"),
        ("ours_per_s", "ours img/s", ",.0f"),
        ("ratio", "ours/ImageFolder", ".2f"),
        ("peak_mb", "peak MB", ".0f"),
        ("ref_peak_mb", "ImageFolder peak MB", ".0f"),
        ("steady_mb", "steady PSS MB", ".0f"),
        ("ddp_rank_mb", "DDP PSS MB/rank", ".0f"),
        ("ddp_sum_mb", "DDP PSS MB, 2 ranks", ".0f"),
    ]
    notes = [
        "32x32 JPEGs in 10 class folders; 32-pixel inputs, batch 256, augment none, 0 loader workers. "
        "Ours iterates its training split (72% of the images: val 10%, test 20% held out), ImageFolder "
        "all of them; 'to 1st batch' counts the DataModule's setup or ImageFolder's scan. Growth "
        f"exponents: epoch time {exponents['ours_s']:.2f}, peak memory {exponents['peak_mb']:.2f}."
    ]
    return Section("Vision: an image folder", columns, rows, [], notes)


# ------------------------------------------------------------------------------------------------ text
TEXT_VOCAB = 32_000
TEXT_HELD_OUT = 3_000  # validation and test pairs each, split off the training file (WMT's newstest: ~3,000)


def _made_up_words(rng: np.random.Generator, n: int) -> np.ndarray:
    consonants, vowels = list("bcdfghklmnprstvwz"), list("aeiouy")
    out: set[str] = set()
    while len(out) < n:
        out.add(
            "".join(
                str(rng.choice(consonants))
                + str(rng.choice(vowels))
                + (str(rng.choice(consonants)) if rng.random() < 0.4 else "")
                for _ in range(int(rng.integers(1, 4)))
            )
        )
    words = np.array(sorted(out), dtype=object)
    rng.shuffle(words)
    return words


def write_corpus(prefix: Path, n: int, seed: int = 0) -> Path:
    """``{prefix}.de`` and ``{prefix}.en``: ``n`` aligned pairs of WMT length (about 26 words a side, each
    language a Zipf-distributed vocabulary of 30,000 made-up words); kept when already written."""
    if all(Path(f"{prefix}.{lang}").is_file() for lang in ("de", "en")):
        return prefix
    print(f"writing {n} sentence pairs to {prefix}.de/.en ...", file=sys.stderr, flush=True)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.normal(26, 9, n).round().astype(int), 3, 70)
    for lang in ("de", "en"):
        words = _made_up_words(rng, 30_000)
        p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
        side = np.clip(lengths + rng.integers(-3, 4, n), 2, 75)
        tmp = Path(f"{prefix}.{lang}.tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for a in range(0, n, 50_000):
                ls = side[a : a + 50_000]
                drawn = words[rng.choice(len(words), size=int(ls.sum()), p=p / p.sum())]
                bounds = np.concatenate([[0], np.cumsum(ls)])
                lines = (" ".join(drawn[bounds[i] : bounds[i + 1]]) for i in range(len(ls)))
                f.write("".join(t[0].upper() + t[1:] + ".\n" for t in lines))
        tmp.rename(f"{prefix}.{lang}")
    return prefix


def _translation_dm(prefix: str, cache: str) -> Any:
    from lightning_tf.text.data import TranslationDataModule

    held_out = min(TEXT_HELD_OUT, _count_lines(f"{prefix}.de") // 10)  # --quick's tiny corpora
    return TranslationDataModule(
        dataset=None,
        train_file=prefix,
        src_lang="de",
        tgt_lang="en",
        vocab_size=TEXT_VOCAB,
        n_val=held_out,
        n_test=held_out,
        max_tokens=8192,
        cache_dir=cache,
    )


def _count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 24), b""))


@phase("tokenizers", "lightning_tf.text.tokenizer")
def text_limit(prefix: str) -> dict[str, Any]:
    """The tokenizers library alone: read both files, train the same BPE (vocabulary, normaliser,
    pre-tokenizer and trainer settings), encode both sides in chunks into numpy."""
    from itertools import chain

    from tokenizers import trainers

    from lightning_tf.text.tokenizer import SPECIAL_TOKENS, _new_tokenizer

    def batches(lang: str) -> Any:
        with open(f"{prefix}.{lang}", encoding="utf-8") as f:
            batch: list[str] = []
            for line in f:
                batch.append(line.rstrip("\n"))
                if len(batch) == 50_000:
                    yield batch
                    batch = []
            if batch:
                yield batch

    start = time.perf_counter()
    tok = _new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=TEXT_VOCAB,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        limit_alphabet=1000,
        show_progress=False,
    )
    tok.train_from_iterator(chain(batches("de"), batches("en")), trainer)
    trained = time.perf_counter() - start
    flat = {}
    for lang in ("de", "en"):
        parts = [
            np.fromiter(chain.from_iterable(e.ids for e in tok.encode_batch(b, add_special_tokens=False)), np.uint16)
            for b in batches(lang)
        ]
        flat[lang] = np.concatenate(parts)
    KEPT.append(flat)
    return {"tokenizer_s": trained}


@phase("lightning_tf.text.data")
def text_prepare(prefix: str, cache: str) -> dict[str, Any]:
    """``prepare_data()``: on an empty cache the whole build, else the check that reuses it."""
    dm = _translation_dm(prefix, cache)
    dm.prepare_data()
    manifest = json.loads((Path(cache) / "text" / dm.corpus_spec().key() / "manifest.json").read_text())
    return {"phase_seconds": manifest["phase_seconds"]}


@phase("lightning_tf.text.data", "tokenizers")
def text_setup(prefix: str, cache: str, epoch: bool = False) -> dict[str, Any]:
    """``setup("fit")`` and the first training batch; with ``epoch`` then a whole epoch of batches (every
    page of the corpus touched, as training touches them), the DataModule kept for the steady PSS. Under
    DDP rank 0 prepares first, as Lightning runs ``prepare_data`` before ``setup``."""
    import torch.distributed as dist

    dm = _translation_dm(prefix, cache)
    if dist.is_initialized():
        if dist.get_rank() == 0:
            dm.prepare_data()
        dist.barrier()
    dm.setup("fit")
    loader = dm.train_dataloader()
    next(iter(loader))
    first = time.perf_counter()
    batches = sum(1 for _ in loader) if epoch else 0
    KEPT.append((dm, loader))
    d = dm.datasets["train"]
    return {
        "epoch_s": time.perf_counter() - first if epoch else None,
        "batches": batches,
        "pairs": len(d),
        "int32_ids_mb": 4 * (len(d.src_ids.values) + len(d.tgt_ids.values)) / 2**20,
    }


def text_section(args: argparse.Namespace) -> Section:
    import shutil

    rows = []
    for n in args.text_sizes:
        prefix = write_corpus(args.work / f"text_{n}" / "train", n)
        cache = args.work / f"text_{n}" / "cache"
        print(f"text: {n} pairs ...", file=sys.stderr, flush=True)
        kw = {"prefix": str(prefix), "cache": str(cache)}
        limits, colds = [], []
        for r in range(args.text_repeats):  # ours and the limit take turns, each on an empty cache
            shutil.rmtree(cache, ignore_errors=True)
            for label in ("limit", "cold") if r % 2 == 0 else ("cold", "limit"):
                if label == "limit":
                    limits.append(measure("text_limit", prefix=str(prefix)))
                else:
                    colds.append((measure("text_prepare", **kw), measure("text_setup", **kw)))
        limit = min(limits, key=lambda x: x["seconds"])
        prepare, setup = min(colds, key=lambda x: x[0]["seconds"] + x[1]["seconds"])
        warm = min(
            ((measure("text_prepare", **kw), measure("text_setup", **kw)) for _ in range(args.repeats)),
            key=lambda x: x[0]["seconds"] + x[1]["seconds"],
        )
        steady = measure("text_setup", epoch=True, **kw)
        ddp = measure_ddp("text_setup", 2, epoch=True, **kw) if n in args.ddp_sizes_text else None
        rows.append(
            {
                "pairs": n,
                "limit_s": limit["seconds"],
                "cold_s": prepare["seconds"] + setup["seconds"],
                "ratio": (prepare["seconds"] + setup["seconds"]) / limit["seconds"],
                "warm_s": warm[0]["seconds"] + warm[1]["seconds"],
                "limit_tokenizer_s": limit["tokenizer_s"],
                "tokenizer_s": prepare["phase_seconds"]["tokenizer"],
                "int32_ids_mb": steady["int32_ids_mb"],
                "limit_peak_mb": limit["peak_mb"],
                "peak_mb": max(prepare["peak_mb"], setup["peak_mb"], steady["peak_mb"]),
                "steady_mb": steady["steady_mb"],
                "ddp_rank_mb": None if ddp is None else sum(ddp["rank_mb"]) / len(ddp["rank_mb"]),
                "ddp_sum_mb": None if ddp is None else ddp["sum_mb"],
            }
        )
    big = rows[-1]
    sizes = [r["pairs"] for r in rows]
    n = f"{big['pairs']:,} pairs"
    targets = [
        Target(f"{n}: cold s <= 1.5 x limit + 15 s", big["cold_s"], 1.5 * big["limit_s"] + 15),
        Target(f"{n}: warm s <= 10 s", big["warm_s"], 10),
        Target(f"{n}: peak MB <= 1.5 GB", big["peak_mb"], 1536),
        Target(f"{n}: steady PSS MB <= 3 x int32 ids + 100 MB", big["steady_mb"], 3 * big["int32_ids_mb"] + 100),
    ]
    if big["ddp_sum_mb"] is not None:
        targets.append(
            Target(f"{n}: 2 DDP ranks' PSS MB <= 1.3 x one process's", big["ddp_sum_mb"], 1.3 * big["steady_mb"])
        )
    exponents = {
        k: growth_exponent(sizes, [r[key] for r in rows])
        for k, key in (("cold time", "cold_s"), ("peak memory", "peak_mb"), ("limit time", "limit_s"))
    }
    targets += [
        Target(f"growth exponent of {k}, {sizes[0]:,}-{sizes[-1]:,} pairs", v, 1.1)
        for k, v in exponents.items()
        if k != "limit time"
    ]
    columns = [
        ("pairs", "pairs", ","),
        ("limit_s", "tokenizers alone s", ".1f"),
        ("cold_s", "cold s", ".1f"),
        ("ratio", "cold/limit", ".2f"),
        ("warm_s", "warm s", ".2f"),
        ("limit_tokenizer_s", "BPE training s, alone", ".1f"),
        ("tokenizer_s", "BPE training s, ours", ".1f"),
        ("int32_ids_mb", "int32 ids MB", ".0f"),
        ("limit_peak_mb", "tokenizers alone peak MB", ".0f"),
        ("peak_mb", "peak MB", ".0f"),
        ("steady_mb", "steady PSS MB", ".0f"),
        ("ddp_rank_mb", "DDP PSS MB/rank", ".0f"),
        ("ddp_sum_mb", "DDP PSS MB, 2 ranks", ".0f"),
    ]
    notes = [
        f"Aligned de-en files of WMT-length made-up sentences (about 26 words a side, Zipf vocabularies of "
        f"30,000 words), BPE vocabulary {TEXT_VOCAB:,}, {TEXT_HELD_OUT:,} validation and test pairs split off. "
        "'cold': prepare_data() on an empty cache, then setup('fit') and the first training batch, each in a "
        "fresh process; 'warm': the same with the cache built; the limit reads both files with the "
        "tokenizers library, trains the same BPE and encodes both sides in chunks into numpy. Steady PSS and "
        "the DDP ranks' PSS are taken after one whole epoch of training batches (every page of the corpus "
        "touched; each rank reads its share). Growth exponent of the limit's time: "
        f"{exponents['limit time']:.2f}. {args.text_repeats} cold run(s) per size, ours and the limit in turn."
    ]
    return Section("Text: a parallel corpus", columns, rows, targets, notes)


SECTIONS: dict[str, Callable[[argparse.Namespace], Section]] = {
    "text": text_section,
    "kline": kline_section,
    "vision": vision_section,
}


# ------------------------------------------------------------------------------------------------ main
def machine() -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from importlib import metadata

    from core_layers import cpu_model

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ram = _proc_kb("self", "MemTotal", "../meminfo") / 2**20 if Path("/proc/meminfo").exists() else float("nan")
    return {
        "cpu": cpu_model(),
        "cores": cores,
        "ram_gb": round(ram, 1),
        "python": platform.python_version(),
        "torch": metadata.version("torch"),
        "pandas": metadata.version("pandas"),
    }


def _load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else ""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    p.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, one repeat")
    p.add_argument("--repeats", type=int, default=2, help="runs of each timed phase; the fastest is kept")
    p.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "lightning-tf-scale",
        help="where the generated data is written (once) and kept",
    )
    p.add_argument("--md", type=Path, default=None, help="markdown results (default: docs/results/scale.md)")
    p.add_argument("--json", type=Path, default=None, help="JSON results (default: beside --md)")
    p.add_argument("--merge", action="store_true", help="keep the sections of the JSON results not run now")
    p.add_argument("--kline-sizes", type=int, nargs="+", default=[100, 1000, 2000, 5000])
    p.add_argument("--kline-bars", type=int, default=2500)
    p.add_argument("--vision-sizes", type=int, nargs="+", default=[10_000, 50_000])
    p.add_argument("--text-sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    p.add_argument("--text-repeats", type=int, default=1, help="cold runs per text size (minutes each)")
    p.add_argument("--phase", help=argparse.SUPPRESS)  # internal: run one measured phase
    p.add_argument("--kwargs", default="{}", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase:
        _child(args.phase, json.loads(args.kwargs), args.out, args.rank, args.world, args.port)
        return
    if args.quick:
        args.repeats, args.kline_sizes, args.kline_bars, args.vision_sizes = 1, [20, 60], 300, [200, 400]
        args.text_sizes, args.text_repeats = [2000, 4000], 1
        args.work = args.work / "quick"
    args.kline_target_sizes = [n for n in args.kline_sizes if n >= 2000] or args.kline_sizes[-1:]
    args.ddp_sizes = args.kline_sizes[-1:]
    args.ddp_sizes_vision = args.vision_sizes[-1:]
    args.ddp_sizes_text = args.text_sizes[-1:]
    args.work.mkdir(parents=True, exist_ok=True)
    md = args.md or (args.work / "scale.md" if args.quick else RESULTS / "scale.md")
    js = args.json or md.with_suffix(".json")
    info = machine()
    where = (
        f"{info['cpu']}, {info['cores']} cores, {info['ram_gb']} GB RAM; Python {info['python']}, "
        f"torch {info['torch']}, pandas {info['pandas']}"
    )
    print(f"machine: {where}; {_load()}", flush=True)
    sections = []
    for task in args.tasks:
        before = _load()
        section = SECTIONS[task](args)
        section.measured = (
            f"{where}; fastest of {args.repeats} run(s) per phase, each in a fresh process; "
            f"{before} at the start, {_load()} at the end (other jobs shared the machine)"
        )
        sections.append(section)
    if args.merge and js.exists():  # keep the sections this run did not measure, in the page's order
        done = {s.title: s for s in sections}
        earlier = json.loads(js.read_text())["sections"]
        order = [d["title"] for d in earlier] + [t for t in done if t not in {d["title"] for d in earlier}]
        kept = {d["title"]: Section.from_dict(d) for d in earlier}
        sections = [done.get(t) or kept[t] for t in order]
    title = f"# Cost against size (`benchmarks/scale.py{' --quick' if args.quick else ''}`)"
    text = title + "\n\n" + "\n\n".join(s.markdown() for s in sections) + "\n"
    print(text)
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    js.write_text(json.dumps({"machine": info, "sections": [s.to_dict() for s in sections]}, indent=2) + "\n")
    print(f"results: {md} and {js}")


if __name__ == "__main__":
    main()
