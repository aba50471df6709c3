"""Start-up time of the ``lightning-tf`` command beside ``python -c "import lightning"``, side by side
in one run: the command's help, ``export --help``, ``fit --help`` (which builds LightningCLI's
parser), and a whole tiny fit (``tests.helpers.tiny``, one epoch of 4 batches: almost all of its time
is start-up and teardown), without a logger and under the default trainer config (offline wandb run,
checkpoints, config file).

Each repeat runs every command once, in a rotated order, each in a fresh interpreter and a fresh
working folder; the table gives the median wall time and its ratio to the median of ``import
lightning``, the floor of any command that trains (Lightning itself imports torch, torchmetrics and
more). The ratios carry over between machines; the seconds do not.

Run::

    python benchmarks/startup.py [--repeats 5] [--quick] [--json PATH] [--root DIR] [--compare DIR]

``--compare DIR`` also times the same commands on another source tree (another checkout of the
repository), in the same rotation, rows marked ``[DIR name]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = 'python -c "import lightning"'
TINY = [
    "--model",
    "tests.helpers.tiny.TinyRegressor",
    "--data",
    "tests.helpers.tiny.TinyDataModule",
    "--trainer.max_epochs",
    "1",
    "--trainer.log_every_n_steps",
    "1",
]


def commands(root: Path) -> dict[str, list[str]]:
    """What is timed: the baseline first, then the command's start-ups, then two tiny fits."""
    tf = [sys.executable, "-m", "lightning_tf"]
    return {
        BASELINE: [sys.executable, "-c", "import lightning"],
        "lightning-tf --help": [*tf, "--help"],
        "lightning-tf export --help": [*tf, "export", "--help"],
        "lightning-tf fit --help": [*tf, "fit", "--help"],
        "lightning-tf fit, tiny, no logger": [*tf, "fit", *TINY, "--trainer.logger", "false"],
        "lightning-tf fit, tiny, default trainer config": [
            *tf,
            "fit",
            "--config",
            str(root / "configs/trainer/default.yaml"),
            *TINY,
        ],
    }


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or ``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> str:
    """One line: CPU, cores, load, Python and the versions that decide the import time."""
    versions = []
    for package in ("torch", "lightning", "jsonargparse", "wandb"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} missing")
    load = ", load average {:.1f}".format(os.getloadavg()[0]) if hasattr(os, "getloadavg") else ""
    return f"{cpu_model()}, {os.cpu_count()} cores{load}; Python {platform.python_version()}, " + ", ".join(versions)


def timed(argv: list[str], root: Path) -> float:
    """Wall seconds of one run of ``argv`` in a fresh working folder; a failed run aborts the benchmark."""
    env = {**os.environ, "PYTHONPATH": str(root), "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    env.pop("LIGHTNING_TF_DEBUG", None)
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return seconds


def measure(cmds: dict[str, tuple[list[str], Path]], repeats: int) -> dict[str, list[float]]:
    """``repeats`` wall times per command (argv, source tree), every command once per repeat, the
    order rotated each time."""
    names = list(cmds)
    timed(*cmds[BASELINE])  # warm the file cache: the first import reads every module from disk
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(timed(*cmds[name]))
        print(f"repeat {r + 1}/{repeats}: " + ", ".join(f"{times[n][-1]:.1f}" for n in names), file=sys.stderr)
    return times


def table(times: dict[str, list[float]]) -> str:
    """The markdown table: median and fastest seconds, the ratio of medians to the baseline, and the
    median of the ratios within each repeat."""
    base = times[BASELINE]
    lines = [
        "| command | median s | fastest s | / import lightning | / import lightning (per repeat) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, ts in times.items():
        per_repeat = statistics.median(t / b for t, b in zip(ts, base))
        lines.append(
            f"| `{name}` | {statistics.median(ts):.2f} | {min(ts):.2f} | "
            f"{statistics.median(ts) / statistics.median(base):.2f} | {per_repeat:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="smoke run: one repeat")
    p.add_argument("--json", type=Path, default=None, help="also write the times to this file")
    p.add_argument("--root", type=Path, default=ROOT, help="the source tree whose lightning_tf is measured")
    p.add_argument("--compare", type=Path, default=None, help="another source tree, timed beside it")
    args = p.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    root = args.root.resolve()
    cmds = {name: (argv_, root) for name, argv_ in commands(root).items()}
    if args.compare is not None:
        other = args.compare.resolve()
        theirs = {name: argv_ for name, argv_ in commands(other).items() if name != BASELINE}
        cmds |= {f"{name} [{other.name}]": (argv_, other) for name, argv_ in theirs.items()}
    where = machine()
    print(f"machine: {where}; {repeats} repeat(s), medians")
    times = measure(cmds, repeats)
    print(table(times))
    if args.json:
        args.json.write_text(json.dumps({"machine": where, "repeats": repeats, "seconds": times}, indent=2) + "\n")


if __name__ == "__main__":
    main()
