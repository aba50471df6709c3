"""lightning-tf on one device: the per-topic benchmarks in turn, each in its own process with a time limit,
and one page of their tables, ``docs/results/gpu.md``.

Each benchmark measures ours beside its peer computing the same function (checked before timing) and prints
markdown tables; this runner only starts them with ``--device``, stops one that runs past ``--limit-s`` (its
whole process group), and writes the page: the machine (``torch.cuda.get_device_name``, torch, CUDA, cuDNN,
the CPU), then per benchmark its command, its status (ok, failed with its exit code, or stopped at the limit),
its wall time and its tables (the last lines of its output when it printed none).

* ``layers``: ``core_layers.py``, our ``EncoderLayer``/``DecoderLayer`` against ``torch.nn``'s, train and
  eval, float32; on CUDA also ``layers-bf16`` (``--dtype bfloat16``).
* ``vit``: ``vit.py``, our ``VisionTransformer`` against timm's with the same weights.
* ``seq2seq``: ``seq2seq.py``, ``Seq2SeqTransformer`` against ``torch.nn.Transformer``, and greedy / beam
  decoding with the KV cache against without.
* ``kline``: ``kline.py --skip-accuracy``, the forecaster against the same one on ``torch.nn.TransformerEncoder``.

Run::

    python benchmarks/gpu.py                      # CUDA if there is one: writes docs/results/gpu.md
    python benchmarks/gpu.py --device cpu --quick --limit-s 60 --out runs/gpu_smoke.md
        [--only layers vit seq2seq kline] [--limit-s S]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

#: name -> (script, arguments, arguments with --quick: a smoke run that touches every path once)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "layers": ("core_layers.py", [], ["--quick", "--layers", "encoder", "--modes", "train"]),
    "layers-bf16": ("core_layers.py", ["--dtype", "bfloat16"], ["--quick", "--dtype", "bfloat16", "--modes", "train"]),
    "vit": ("vit.py", [], ["--quick", "--sizes", "digits", "--modes", "train"]),
    "seq2seq": ("seq2seq.py", [], ["--quick"]),
    "kline": ("kline.py", ["--skip-accuracy"], ["--skip-accuracy", "--quick"]),
}
CUDA_ONLY = {"layers-bf16"}  # bfloat16 on a CPU measures its emulation, not the model
CUDA_ARGS = {"vit": ["--batch", "64"]}  # the sizes' CPU batches leave a GPU idle


@dataclass
class Outcome:
    """How one benchmark ended: ``status`` (``ok``, ``failed (exit N)``, ``stopped at the N s limit``), its
    wall time in seconds, and what it printed."""

    status: str
    seconds: float
    stdout: str
    stderr: str


def run_limited(command: list[str], limit_s: float, env: dict[str, str] | None = None) -> Outcome:
    """Run ``command`` in its own process group; past ``limit_s`` seconds the whole group is killed and what
    it printed so far is kept."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=limit_s)
        status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = f"stopped at the {limit_s:g} s limit"
    return Outcome(status, time.perf_counter() - start, out, err)


def machine(device: str) -> list[str]:
    """The page's machine lines."""
    lines = [f"- torch {torch.__version__}, Python {platform.python_version()}, {platform.platform()}"]
    cpu = next((ln.split(":", 1)[1].strip() for ln in _cpuinfo() if ln.startswith("model name")), platform.processor())
    lines.append(f"- CPU: {cpu or 'unknown'}, {os.cpu_count()} cores")
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        lines.insert(0, f"- GPU: {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}")
        lines.append(
            f"- {props.total_memory / 2**30:.1f} GiB, compute capability {props.major}.{props.minor}, "
            f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
        )
    return lines


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def tables(text: str) -> list[str]:
    """The markdown a benchmark printed: its tables, each with its title (the line right above it, or a ``#``
    heading a blank line above it) if it has one."""
    lines = ["", "", *text.splitlines()]
    keep = {i for i, ln in enumerate(lines) if ln.startswith("|")}
    out: list[str] = []
    for i in sorted(keep):
        if i - 1 not in keep:  # a table starts
            above, heading = lines[i - 1].strip(), lines[i - 2] if not lines[i - 1].strip() else ""
            title = above or (heading if heading.startswith("#") else "")
            out += ["", title.lstrip("# "), ""] if title else [""]
        out.append(lines[i])
    return out


def section(name: str, command: list[str], outcome: Outcome) -> list[str]:
    """One benchmark's part of the page."""
    shown = " ".join(["python", *command[1:]])
    out = ["", f"## {name}", "", f"`{shown}`: {outcome.status}, {outcome.seconds:.0f} s"]
    found = tables(outcome.stdout)
    if found:
        out += found
    if outcome.status != "ok" or not found:
        tail = (outcome.stdout + outcome.stderr).strip().splitlines()[-15:]
        out += ["", "```", *tail, "```"]
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=None, help="these benchmarks (default: all)")
    p.add_argument("--limit-s", type=float, default=600.0, help="time limit of each benchmark in seconds")
    p.add_argument("--quick", action="store_true", help="each benchmark's smoke size")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "gpu.md")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device on this machine (--device cpu runs the same benchmarks on the CPU)")
    names = args.only or [n for n in BENCHMARKS if args.device == "cuda" or n not in CUDA_ONLY]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.update(WANDB_MODE="offline", HF_HUB_OFFLINE="1")
    title = torch.cuda.get_device_name(0) if args.device == "cuda" else "the CPU"
    page = [f"# lightning-tf on {title}" + (" (quick smoke sizes)" if args.quick else ""), "", *machine(args.device)]
    page.append(f"- each benchmark in its own process, at most {args.limit_s:g} s; `python {' '.join(sys.argv)}`")
    for name in names:
        script, full, quick = BENCHMARKS[name]
        command = [sys.executable, f"benchmarks/{script}", "--device", args.device, *(quick if args.quick else full)]
        if args.device == "cuda" and not args.quick:
            command += CUDA_ARGS.get(name, [])
        print(f"{name}: {' '.join(command[1:])}", flush=True)
        outcome = run_limited(command, args.limit_s, env)
        print(f"{name}: {outcome.status}, {outcome.seconds:.0f} s", flush=True)
        page += section(name, command, outcome)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(page) + "\n")  # after every benchmark: a stopped run keeps what it has
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
