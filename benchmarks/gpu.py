"""lightning-tf on a GPU: training and decoding throughput, MFU, peak memory and the SDPA kernel of
every attention path, ours beside ``torch.nn`` and timm, in one unattended run of about 7 minutes.

Parts, each in its own worker process with its own share of the time budget (a part that fails, or
runs out of time and is stopped, is reported as such with what it measured before, and the run goes
on); ``gpu.json`` and ``gpu.md`` are rewritten after every part, so an interrupted run keeps what
it measured:

* ``machine``: the GPUs, their memory, CUDA / cuDNN / torch versions, the CPU; the GPU's dense
  bfloat16 peak from its datasheet (:data:`PEAK_BF16_TFLOPS`, matched by name) and the measured
  ``torch.mm`` rate. MFU divides by the datasheet peak when the GPU is listed, else by the measured one.
* ``backends``: for every attention path of the core (encoder with and without padding, causal
  decoder with and without target padding, cross-attention with and without source padding, one-token
  KV-cache steps, RoPE, ALiBi, the attention-weights path) which SDPA kernels can run it: forward and
  backward once under ``sdpa_kernel`` restricted to flash, memory-efficient, cuDNN and math in turn
  (SDPA raises when the one allowed kernel cannot run the call), and the kernel SDPA picks by itself.
* ``layers``: training tokens/s and MFU of our ``EncoderLayer`` / ``DecoderLayer`` and
  ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` with copied weights (float32
  outputs and gradients checked to agree first), eager and ``torch.compile``d.
* ``vit``: ViT-S/16 at 224 (timm's ``vit_small_patch16_224``, built locally with ``pretrained=False``)
  against our ``VisionTransformer`` holding its weights (logits checked first): training images/s,
  MFU, eager and compiled.
* ``seq2seq``: Transformer-base (6+6 layers, d_model 512, V = 32,000) training tokens/s and MFU
  against the same model on ``torch.nn.Transformer`` (the pair of ``benchmarks/seq2seq.py``).
* ``decode``: greedy and beam-4 decoding on the KV cache, batch 1 and 64, output tokens/s.
* ``cli``: 100 training steps of each task's command, ``python -m lightning_tf fit --config
  configs/trainer/default.yaml --config configs/trainer/gpu.yaml --config <task config>`` (no logger,
  no checkpoints, no validation): steps/s after the first 20 and peak memory; the same with
  ``--model.compile true`` where the model takes it, and with ``configs/trainer/ddp.yaml`` on every
  visible GPU (throughput scaling; with one GPU there is no scaling to measure).

Everything trains under bfloat16 autocast with float32 weights and optimizer state, as
``configs/trainer/gpu.yaml`` (``precision: bf16-mixed``) does. Each comparison alternates ours and the
peer within every repeat and reports medians. Peak memory is ``torch.cuda.max_memory_allocated``,
reset for every measurement; with two models resident, a row's figure is that model's own weights,
gradients and optimizer state plus the transient peak of one of its steps.

``--dry-run`` runs every part at tiny sizes on the CPU in float32 (compiled rows with dynamo's
``eager`` backend, the commands in-process for two steps), a smoke test that keeps the script working.

Run::

    python benchmarks/gpu.py               # on a CUDA machine: writes docs/results/gpu.json and gpu.md
    python benchmarks/gpu.py --dry-run     # CPU smoke run, writes runs/gpu_dry_run/
        [--out DIR] [--budget-s S] [--parts machine backends layers vit seq2seq decode cli]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
for _path in (str(ROOT), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# torch.cuda.is_available() through NVML: it does not initialise CUDA, so processes forked later can
# (the task commands get the environment as it was given)
_NVML_CHECK_GIVEN = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

# The worker server imports this file once (as the module ``gpu``) with the heavy imports, so every
# part's worker, forked from it, starts with them done; a worker's own copy of the script then costs
# nothing more to import.
if __name__ != "__main__" and os.environ.get("LIGHTNING_TF_GPU_BENCH_WORKER"):
    with contextlib.suppress(Exception):
        import timm  # noqa: F401

        import lightning_tf.cli.lightning_cli  # noqa: F401

#: Dense (no sparsity) bfloat16 tensor-core peak in TFLOP/s from NVIDIA's datasheets, by name as
#: ``torch.cuda.get_device_name`` spells it; the first pattern that matches wins (H200 NVL before H200).
PEAK_BF16_TFLOPS: list[tuple[str, float]] = [
    ("B200", 2250.0),
    ("H200 NVL", 835.0),
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),  # SXM, "NVIDIA H100 80GB HBM3"
    ("H800", 989.0),
    ("H20", 148.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("A30", 165.0),
    ("A40", 150.0),
    ("A10", 125.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("RTX 4090", 165.0),
]

#: Share of the time budget of each part (the budget left is divided by the weights of the parts left).
PART_WEIGHTS = {"machine": 10, "backends": 20, "layers": 80, "vit": 110, "seq2seq": 30, "decode": 25, "cli": 145}
PARTS = list(PART_WEIGHTS)

#: The task commands: (task, config); all three train on data that ships with the repository.
TASKS = [
    ("text", "configs/text/synthetic.yaml"),
    ("vision", "configs/vision/digits.yaml"),
    ("kline", "configs/kline/msft_daily.yaml"),
]

#: Sizes on a GPU and in --dry-run.
SIZES: dict[str, dict[str, Any]] = {
    "gpu": dict(
        matmul_n=8192,
        layer=(16, 1024, 1024, 16),
        verify_shape=(2, 64),
        vit=dict(timm_name="vit_small_patch16_224", batch=256),
        seq2seq=dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048, V=32000, B=128, S=64, T=64, batches=4),
        decode=dict(preset="base", V=32000, batches=[1, 64], S=32, L=64, reps=10),
        backends=dict(B=4, T=128, S=160, D=512, H=8),
        cli=dict(steps=100, skip=20, extra={}),
        warmup=3,
        reps=30,
        cell_s=6.0,
    ),
    "dry": dict(
        matmul_n=128,
        layer=(2, 16, 32, 4),
        verify_shape=(2, 8),
        vit=dict(
            timm_args=dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=10), batch=2
        ),
        seq2seq=dict(d_model=32, n_heads=4, n_layers=1, d_ff=64, V=100, B=2, S=8, T=8, batches=1),
        decode=dict(preset=None, V=100, batches=[1, 2], S=6, L=4, reps=2),
        backends=dict(B=2, T=8, S=12, D=32, H=4),
        cli=dict(
            steps=2, skip=1, extra={"text": ["--data.n_train", "1000", "--data.n_val", "20", "--data.n_test", "20"]}
        ),
        warmup=1,
        reps=2,
        cell_s=1.0,
    ),
}

SDPA_OPS = {  # aten op -> kernel name
    "aten._scaled_dot_product_flash_attention": "flash",
    "aten._scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten._scaled_dot_product_efficient_attention": "efficient",
    "aten._scaled_dot_product_cudnn_attention": "cudnn",
    "aten._scaled_dot_product_fused_attention_overrideable": "overrideable",
}


# ============================================================================ worker-side utilities


class Recorder:
    """What one part measured: rewritten to its JSON file after every change, so a part stopped from
    outside keeps what it had measured."""

    def __init__(self, path: str, part: str, deadline: float) -> None:
        self.path, self.deadline = Path(path), deadline
        self.data: dict[str, Any] = {"part": part, "status": "running", "rows": [], "notes": [], "errors": []}
        self.save()

    def time_left(self) -> float:
        return self.deadline - time.time()

    def row(self, **row: Any) -> None:
        self.data["rows"].append(row)
        self.save()

    def note(self, text: str) -> None:
        self.data["notes"].append(text)
        self.save()

    def error(self, what: str, err: BaseException) -> None:
        """A failed measurement: recorded, and the part goes on with the next one."""
        self.data["errors"].append(f"{what}: {_one_line(err)}")
        self.data.setdefault("tracebacks", []).append("".join(traceback.format_exception(err))[-4000:])
        self.save()
        _free_cuda()

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


def _free_cuda() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class _Guard:
    """``with _Guard(rec, what):`` records an exception from the block as a failed measurement."""

    def __init__(self, rec: Recorder, what: str) -> None:
        self.rec, self.what = rec, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, err: BaseException | None, tb: Any) -> bool:
        if err is None or not isinstance(err, Exception):
            return False
        self.rec.error(self.what, err)
        return True


def _enough_time(rec: Recorder, what: str, need_s: float) -> bool:
    if rec.time_left() >= need_s:
        return True
    rec.note(f"{what}: skipped, {max(rec.time_left(), 0):.0f} s of the part's budget left (needs about {need_s:.0f} s)")
    return False


def device_of(cfg: dict[str, Any]) -> torch.device:
    return torch.device(cfg["device"])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on CUDA (bf16-mixed), nothing on the CPU (the dry run measures float32)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compile_fn(fn: Callable, cfg: dict[str, Any]) -> Callable:
    """torch.compile with the default inductor backend; in the dry run dynamo's ``eager`` backend
    (tracing without code generation, which would take minutes on a CPU)."""
    return torch.compile(fn, backend="eager") if cfg["dry_run"] else torch.compile(fn)


def time_alternating(
    steps: dict[str, Callable[[], None]], device: torch.device, warmup: int, reps: int, budget_s: float
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds per call of each step, and of its first call (a compile, for a compiled step).

    Every step runs ``warmup`` untimed calls first; then each repeat runs every step once, the order
    reversed every other repeat, until ``reps`` repeats or ``budget_s`` seconds (at least one repeat).
    """
    first: dict[str, float] = {}
    for name, step in steps.items():
        for i in range(max(warmup, 1)):
            sync(device)
            t0 = time.perf_counter()
            step()
            sync(device)
            if i == 0:
                first[name] = time.perf_counter() - t0
    times: dict[str, list[float]] = {name: [] for name in steps}
    names, start = list(steps), time.perf_counter()
    for r in range(reps):
        for name in names if r % 2 == 0 else names[::-1]:
            sync(device)
            t0 = time.perf_counter()
            steps[name]()
            sync(device)
            times[name].append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return times, first


def static_mb(module: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> float:
    """Megabytes of a model's parameters, their gradients and its optimizer state."""
    total = 0
    for p in module.parameters():
        total += p.numel() * p.element_size()
        if p.grad is not None:
            total += p.grad.numel() * p.grad.element_size()
    if optimizer is not None:
        for state in optimizer.state.values():
            total += sum(t.numel() * t.element_size() for t in state.values() if isinstance(t, torch.Tensor))
    return total / 2**20


_PART_PEAK = [0]  # bytes: the worker's peak over the resets below


def part_peak_mb(device: torch.device) -> float | None:
    """``torch.cuda.max_memory_allocated`` over the whole part (a fresh process: reset when it started)."""
    if device.type != "cuda":
        return None
    return round(max(_PART_PEAK[0], torch.cuda.max_memory_allocated(device)) / 2**20, 1)


def transient_mb(step: Callable[[], None], device: torch.device) -> float | None:
    """Peak memory one call of ``step`` allocates above what was allocated before it (CUDA only)."""
    if device.type != "cuda":
        return None
    sync(device)
    _PART_PEAK[0] = max(_PART_PEAK[0], torch.cuda.max_memory_allocated(device))
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step()
    sync(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def peak_mb(step: Callable[[], None], module: torch.nn.Module, optimizer: Any, device: torch.device) -> float | None:
    """A model's own peak: its weights, gradients and optimizer state plus one step's transient peak."""
    extra = transient_mb(step, device)
    return None if extra is None else round(static_mb(module, optimizer) + extra, 1)


class SdpaKernels:
    """Records the kernel of every ``F.scaled_dot_product_attention`` call under it: the fused op it
    dispatched to, or ``math`` when it ran none (``with SdpaKernels() as k: ...; k.summary()``)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        fused: list[str] = []

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                name = str(func.overloadpacket)
                if name in SDPA_OPS:
                    fused.append(SDPA_OPS[name])
                return func(*args, **(kwargs or {}))

        self.kernels: list[str] = []
        self._fused, self._mode = fused, _Mode()
        self._sdpa = torch.nn.functional.scaled_dot_product_attention

    def _counting_sdpa(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        before = len(self._fused)
        out = self._sdpa(*args, **kwargs)
        self.kernels.append(self._fused[before] if len(self._fused) > before else "math")
        return out

    def __enter__(self) -> SdpaKernels:
        # torch.nn.functional, our attention and timm's look the function up at call time
        torch.nn.functional.scaled_dot_product_attention = self._counting_sdpa
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        torch.nn.functional.scaled_dot_product_attention = self._sdpa

    def summary(self) -> str:
        """``"flash x4, efficient x2"``: the kernels of the calls in order of first use, with counts."""
        counts: dict[str, int] = {}
        for k in self.kernels:
            counts[k] = counts.get(k, 0) + 1
        return ", ".join(f"{k} x{n}" for k, n in counts.items()) or "none (no SDPA call)"


def kernels_of(step: Callable[[], None]) -> str:
    """The SDPA kernels one call of ``step`` runs (forward calls; a backward adds none of its own)."""
    with SdpaKernels() as rec:
        step()
    return rec.summary()


def _mfu(flops: float, seconds: float, cfg: dict[str, Any]) -> float | None:
    peak = cfg.get("peak_tflops")
    return None if not peak else round(flops / seconds / (peak * 1e12), 4)


# ================================================================================== part: machine


def peak_from_datasheet(name: str) -> tuple[str, float] | None:
    """(matched name, dense bf16 TFLOP/s) of a GPU name, or None when it is not in the table."""
    for pattern, tflops in PEAK_BF16_TFLOPS:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(pattern)}(?![A-Za-z0-9])", name):
            return pattern, tflops
    return None


def matmul_tflops(device: torch.device, dtype: torch.dtype, n: int, reps: int) -> float:
    """Best rate of an ``n x n`` by ``n x n`` ``torch.mm`` over ``reps`` calls, TFLOP/s."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e12


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def part_machine(cfg: dict[str, Any], rec: Recorder) -> None:
    from core_layers import cpu_model

    device = device_of(cfg)
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        "gpu_count": torch.cuda.device_count() if device.type == "cuda" else 0,
        "gpus": [],
    }
    if device.type == "cuda":
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            info["gpus"].append(
                {
                    "name": p.name,
                    "memory_gib": round(p.total_memory / 2**30, 1),
                    "capability": f"{p.major}.{p.minor}",
                    "multiprocessors": p.multi_processor_count,
                }
            )
        info["driver"] = _driver_version()
        with contextlib.suppress(ImportError):
            import triton

            info["triton"] = triton.__version__
    rec.set("machine", info)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    measured = matmul_tflops(device, dtype, cfg["sizes"]["matmul_n"], reps=20 if device.type == "cuda" else 3)
    info["mm_tflops_measured"] = float(f"{measured:.3g}")
    info["mm_shape"] = f"{cfg['sizes']['matmul_n']}^3 {str(dtype).removeprefix('torch.')}"
    sheet = peak_from_datasheet(info["gpus"][0]["name"]) if info["gpus"] else None
    if sheet is not None:
        info["peak_tflops"], info["peak_source"] = sheet[1], f"datasheet ({sheet[0]}, dense bf16)"
    else:
        info["peak_tflops"] = info["mm_tflops_measured"]
        info["peak_source"] = f"measured torch.mm {info['mm_shape']} (GPU not in the datasheet table)"
    rec.set("machine", info)


# ================================================================================= part: backends

BACKEND_NAMES = ("flash", "efficient", "cudnn", "math")


def _backend_list(name: str) -> list[Any]:
    from torch.nn.attention import SDPBackend

    return [
        {
            "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION,
            "math": SDPBackend.MATH,
        }[name]
    ]


def attention_paths(cfg: dict[str, Any]) -> list[tuple[str, str, Callable[[], None]]]:
    """(path, which tasks take it, one call of it: forward and, for training paths, backward)."""
    from lightning_tf.core import Decoder, Encoder, TransformerSpec, padding_mask

    device, s = device_of(cfg), cfg["sizes"]["backends"]
    B, T, S, D, H = s["B"], s["T"], s["S"], s["D"], s["H"]
    src_len = torch.linspace(S, max(S // 3, 1), B).round().long()  # (B,) full, then shorter
    tgt_len = torch.linspace(T, max(T // 2, 1), B).round().long()  # (B,)
    src_mask = padding_mask(lengths=src_len, max_len=S).to(device)  # (B, 1, 1, S)
    tgt_mask = padding_mask(lengths=tgt_len, max_len=T).to(device)  # (B, 1, 1, T)
    stacks: dict[str, tuple[Encoder, Decoder]] = {}

    def pair(pos: str) -> tuple[Encoder, Decoder]:
        if pos not in stacks:
            kw = dict(d_model=D, n_heads=H, n_layers=1, dropout=0.0, pos_encoding=pos, max_len=max(S, T))
            stacks[pos] = (
                Encoder(TransformerSpec(**kw)).to(device).train(),
                Decoder(TransformerSpec(**kw)).to(device).train(),
            )
        return stacks[pos]

    def encoder(pos: str, mask: torch.Tensor | None, need_weights: bool = False) -> Callable[[], None]:
        def run() -> None:
            x = torch.randn(B, S, D, device=device, requires_grad=not need_weights)
            with autocast(device):
                out = pair(pos)[0](x, mask, need_weights=need_weights)
            if not need_weights:
                out.float().sum().backward()

        return run

    def decoder(pos: str, tgt: torch.Tensor | None, src: torch.Tensor | None) -> Callable[[], None]:
        def run() -> None:
            y = torch.randn(B, T, D, device=device, requires_grad=True)
            memory = torch.randn(B, S, D, device=device, requires_grad=True)
            with autocast(device):
                out = pair(pos)[1](y, memory, tgt_mask=tgt, memory_mask=src)
            out.float().sum().backward()

        return run

    def decode_steps(pos: str, src: torch.Tensor | None, n: int = 3) -> Callable[[], None]:
        def run() -> None:
            dec = pair(pos)[1]
            memory = torch.randn(B, S, D, device=device)
            cache = dec.init_cache(n)
            with torch.no_grad(), autocast(device):
                for _ in range(n):
                    dec(torch.randn(B, 1, D, device=device), memory, memory_mask=src, cache=cache)

        return run

    return [
        ("encoder, no padding", "vision, kline", encoder("none", None)),
        ("encoder, padding mask (B, 1, 1, S)", "text (source)", encoder("sinusoidal", src_mask)),
        (
            "decoder: causal self-attention (is_causal), cross-attention unmasked",
            "-",
            decoder("sinusoidal", None, None),
        ),
        (
            "decoder: causal self-attention, cross-attention with source padding",
            "text (training)",
            decoder("sinusoidal", None, src_mask),
        ),
        ("decoder: causal + target padding mask, cross-attention unmasked", "-", decoder("sinusoidal", tgt_mask, None)),
        ("KV-cache steps (T = 1), cross-attention unmasked", "-", decode_steps("sinusoidal", None)),
        (
            "KV-cache steps (T = 1), cross-attention with source padding",
            "text (decoding)",
            decode_steps("sinusoidal", src_mask),
        ),
        ("encoder, RoPE, no padding", "any task with pos_encoding: rope", encoder("rope", None)),
        ("decoder, RoPE, causal, unmasked", "text with pos_encoding: rope", decoder("rope", None, None)),
        ("encoder, ALiBi bias, no padding", "any task with pos_encoding: alibi", encoder("alibi", None)),
        ("decoder, ALiBi bias, causal", "text with pos_encoding: alibi", decoder("alibi", None, None)),
        ("attention weights (need_weights=True)", "attention maps", encoder("none", src_mask, need_weights=True)),
    ]


def part_backends(cfg: dict[str, Any], rec: Recorder) -> None:
    import warnings

    from torch.nn.attention import sdpa_kernel

    # a kernel that cannot run a call says why in a warning, for every call
    warnings.filterwarnings("ignore", message=".*kernel not used because.*")
    warnings.filterwarnings("ignore", message=".*(Flash|Memory efficient|cuDNN|Mem Efficient|Efficient).*")
    paths = attention_paths(cfg)
    for path, used_by, run in paths:
        if not _enough_time(rec, path, 1.0):
            break
        row: dict[str, Any] = {"path": path, "used_by": used_by}
        with _Guard(rec, f"{path}: unrestricted run"):
            row["default"] = kernels_of(run)
        for name in BACKEND_NAMES:
            try:
                with sdpa_kernel(_backend_list(name)):
                    run()
                row[name] = "yes"
            except Exception as err:  # noqa: BLE001 (SDPA raises RuntimeError when the kernel cannot run the call)
                row[name] = (
                    "no"
                    if "No available kernel" in str(err) or "No viable backend" in str(err)
                    else (f"no: {_one_line(err)[:120]}")
                )
        if row.get("default", "").startswith("none"):
            for name in BACKEND_NAMES:
                row[name] = "-"
        rec.row(**row)


# =================================================================================== part: layers


def _layer_steps(
    layer: str, cfg: dict[str, Any]
) -> tuple[dict[str, torch.nn.Module], dict[str, torch.optim.Optimizer], Callable[[str, bool], Callable[[], None]]]:
    """Our layer and torch's (weights copied) on the device, their optimizers, and ``make(name,
    compiled)``: one training step of either (forward under autocast, backward, AdamW step) on an input
    that requires grad, as in the middle of a stack."""
    from core_layers import build_pair

    device = device_of(cfg)
    B, T, D, H = cfg["sizes"]["layer"]
    torch.manual_seed(0)
    ours, ref = (m.to(device).train() for m in build_pair(layer, D, H))
    x = torch.randn(B, T, D, device=device, requires_grad=True)  # (B, T, D)
    memory = torch.randn(B, T, D, device=device, requires_grad=True)  # (B, S, D), S = T
    grad = torch.randn(B, T, D, device=device)  # d loss / d output
    causal = torch.nn.Transformer.generate_square_subsequent_mask(T, device=device)  # (T, T), torch's mask

    def fwd_ours(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return ours(x)[0] if layer == "encoder" else ours(x, m)[0]  # our decoder layer is causal by default

    def fwd_ref(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return ref(x) if layer == "encoder" else ref(x, m, tgt_mask=causal, tgt_is_causal=True)

    models = {"ours": ours, "torch": ref}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-5) for k, m in models.items()}
    forwards = {"ours": fwd_ours, "torch": fwd_ref}

    def make(name: str, compiled: bool) -> Callable[[], None]:
        forward = compile_fn(forwards[name], cfg) if compiled else forwards[name]

        def step() -> None:
            opts[name].zero_grad(set_to_none=True)
            x.grad = memory.grad = None
            with autocast(device):
                y = forward(x, memory)  # (B, T, D)
            y.backward(grad.to(y.dtype))
            opts[name].step()

        return step

    return models, opts, make


def part_layers(cfg: dict[str, Any], rec: Recorder) -> None:
    from core_layers import Case, forward_flops

    device, sz = device_of(cfg), cfg["sizes"]
    B, T, D, H = sz["layer"]
    benches = {}
    for layer in ("encoder", "decoder"):
        with _Guard(rec, f"{layer} layer: float32 agreement with torch.nn"):
            torch.manual_seed(0)
            vb, vt = sz["verify_shape"]
            tol = 1e-4 if device.type == "cpu" else 2e-3
            Case(layer, vb, vt, D, H, device, torch.float32).verify(tol, tol)  # SystemExit if they differ
            benches[layer] = _layer_steps(layer, cfg)
    for mode in ("eager", "compiled"):  # both eager rows first: a compile that overruns costs only compiled rows
        for layer, (models, opts, make) in benches.items():
            need = 3.0 if mode == "eager" or cfg["dry_run"] else 30.0  # two compiles: ours and torch's
            if not _enough_time(rec, f"{layer} layer {mode}", need):
                continue
            with _Guard(rec, f"{layer} layer {mode}"):
                steps = {name: make(name, mode == "compiled") for name in models}
                times, first = time_alternating(
                    steps, device, sz["warmup"], sz["reps"], min(sz["cell_s"], max(rec.time_left() - 5, 1))
                )
                med = {k: statistics.median(v) for k, v in times.items()}
                flops = 3 * forward_flops(layer, B, T, D)
                row = dict(
                    layer=layer,
                    shape=f"({B}, {T}, {D}, {H})",
                    mode=mode,
                    reps=len(times["ours"]),
                    ours_tok_s=round(B * T / med["ours"]),
                    torch_tok_s=round(B * T / med["torch"]),
                    ratio=round(med["torch"] / med["ours"], 3),
                    ours_mfu=_mfu(flops, med["ours"], cfg),
                    torch_mfu=_mfu(flops, med["torch"], cfg),
                    ours_peak_mb=peak_mb(steps["ours"], models["ours"], opts["ours"], device),
                    torch_peak_mb=peak_mb(steps["torch"], models["torch"], opts["torch"], device),
                    first_step_s={k: round(v, 2) for k, v in first.items()},
                )
                if mode == "eager":
                    row["ours_kernels"], row["torch_kernels"] = kernels_of(steps["ours"]), kernels_of(steps["torch"])
                rec.row(**row)


# ====================================================================================== part: vit


def vit_train_flops(image: int, patch: int, chans: int, d: int, depth: int, d_ff: int, classes: int) -> float:
    """Matmul FLOPs of one training step per image (3x the forward): patch embedding, ``depth``
    blocks over ``N + 1`` tokens (qkv, output, MLP, scores and weighted values), the head."""
    n = (image // patch) ** 2
    tokens = n + 1
    fwd = 2 * n * chans * patch * patch * d
    fwd += depth * (2 * tokens * (4 * d * d + 2 * d * d_ff) + 4 * tokens * tokens * d)
    fwd += 2 * d * classes
    return 3 * fwd


def part_vit(cfg: dict[str, Any], rec: Recorder) -> None:
    import timm
    import torch.nn.functional as F
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    from lightning_tf.vision.timm_interop import timm_to_ours

    device, sz = device_of(cfg), cfg["sizes"]
    v = sz["vit"]
    torch.manual_seed(0)
    if "timm_name" in v:
        theirs = timm.create_model(v["timm_name"], pretrained=False)
        name = v["timm_name"]
    else:
        theirs, name = TimmViT(**v["timm_args"]), "tiny timm VisionTransformer (dry run)"
    ours, conf = timm_to_ours(theirs)
    rec.set(
        "model",
        {
            "timm": name,
            **{
                k: conf[k]
                for k in ("image_size", "patch_size", "d_model", "n_layers", "n_heads", "d_ff", "num_classes")
            },
        },
    )
    x = torch.randn(2, conf["in_chans"], conf["image_size"], conf["image_size"])
    with torch.no_grad():
        diff = (ours.eval()(x) - theirs.eval()(x)).abs().max().item()
    rec.set("logits_max_abs_diff_fp32_cpu", diff)
    if diff > 1e-4:
        raise SystemExit(f"our logits differ from timm's by {diff:.2e}: not timing different functions")
    ours, theirs = ours.to(device).train(), theirs.to(device).train()
    B = v["batch"]
    images = torch.randn(B, conf["in_chans"], conf["image_size"], conf["image_size"], device=device)
    labels = torch.randint(0, conf["num_classes"], (B,), device=device)
    models = {"ours": ours, "timm": theirs}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}

    def train_step(name: str, forward: Callable) -> Callable[[], None]:
        def step() -> None:
            opts[name].zero_grad(set_to_none=True)
            with autocast(device):
                loss = F.cross_entropy(forward(images).float(), labels)
            loss.backward()
            opts[name].step()

        return step

    flops = B * vit_train_flops(
        conf["image_size"],
        conf["patch_size"],
        conf["in_chans"],
        conf["d_model"],
        conf["n_layers"],
        conf["d_ff"],
        conf["num_classes"],
    )
    for mode in ("eager", "compiled"):
        need = 5.0 if mode == "eager" or cfg["dry_run"] else 45.0  # two compiles: ours and timm's
        if not _enough_time(rec, f"ViT {mode}", need):
            continue
        with _Guard(rec, f"ViT {mode}"):
            fwd = {k: (m if mode == "eager" else compile_fn(m, cfg)) for k, m in models.items()}
            steps = {k: train_step(k, fwd[k]) for k in models}
            times, first = time_alternating(
                steps, device, sz["warmup"], sz["reps"], min(sz["cell_s"], max(rec.time_left() - 5, 1))
            )
            med = {k: statistics.median(t) for k, t in times.items()}
            row = dict(
                mode=mode,
                batch=B,
                reps=len(times["ours"]),
                ours_img_s=round(B / med["ours"], 1),
                timm_img_s=round(B / med["timm"], 1),
                ratio=round(med["timm"] / med["ours"], 3),
                ours_mfu=_mfu(flops, med["ours"], cfg),
                timm_mfu=_mfu(flops, med["timm"], cfg),
                ours_peak_mb=peak_mb(steps["ours"], ours, opts["ours"], device),
                timm_peak_mb=peak_mb(steps["timm"], theirs, opts["timm"], device),
                first_step_s={k: round(t, 2) for k, t in first.items()},
            )
            if mode == "eager":
                row["ours_kernels"], row["timm_kernels"] = kernels_of(steps["ours"]), kernels_of(steps["timm"])
            rec.row(**row)


# ================================================================================== part: seq2seq


def seq2seq_train_flops(B: int, S: int, T: int, D: int, d_ff: int, n_layers: int, V: int) -> float:
    """Matmul FLOPs of one training step (3x the forward) of an encoder-decoder on padded ``(B, S)``
    sources and ``(B, T)`` targets: ``n_layers`` encoder and decoder layers and the output projection."""
    enc = 2 * B * S * (4 * D * D + 2 * D * d_ff) + 4 * B * S * S * D
    dec = 2 * B * T * (4 * D * D + 2 * D * D + 2 * D * d_ff) + 2 * B * S * 2 * D * D
    dec += 4 * B * (T * (T + 1) / 2) * D + 4 * B * T * S * D  # causal self-attention, cross-attention
    return 3 * (n_layers * (enc + dec) + 2 * B * T * D * V)


def part_seq2seq(cfg: dict[str, Any], rec: Recorder) -> None:
    import torch.nn.functional as F
    from seq2seq import PAD_ID, TorchSeq2Seq, make_batch

    from lightning_tf.text import Seq2SeqTransformer

    device, sz = device_of(cfg), cfg["sizes"]
    s = sz["seq2seq"]
    D, H, L, d_ff, V, B, S, T = (s[k] for k in ("d_model", "n_heads", "n_layers", "d_ff", "V", "B", "S", "T"))
    torch.manual_seed(0)
    ours = Seq2SeqTransformer(
        vocab_size=V,
        d_model=D,
        n_heads=H,
        n_layers=L,
        d_ff=d_ff,
        dropout=0.0,
        norm_first=True,
        max_len=512,
        label_smoothing=0.1,
    )
    peer = TorchSeq2Seq(V, D, H, L, d_ff)
    n_ours, n_peer = (sum(p.numel() for p in m.parameters()) for m in (ours, peer))
    if n_ours != n_peer:
        raise SystemExit(f"parameter counts differ: ours {n_ours}, torch {n_peer}")
    g = torch.Generator().manual_seed(0)
    batches = [tuple(t.to(device) for t in make_batch(B, S, T, V, g)) for _ in range(s["batches"])]
    tokens = sum(int((tgt[:, 1:] != PAD_ID).sum()) for _, tgt in batches) / len(batches)
    models = {"ours": ours.to(device).train(), "torch": peer.to(device).train()}
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9) for k, m in models.items()}
    counter = {"i": 0}

    def train_step(name: str) -> Callable[[], None]:
        def step() -> None:
            src, tgt = batches[counter["i"] % len(batches)]
            counter["i"] += 1
            opts[name].zero_grad(set_to_none=True)
            with autocast(device):
                logits = models[name](src, tgt[:, :-1])  # (B, T, V)
            loss = F.cross_entropy(
                logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), ignore_index=PAD_ID, label_smoothing=0.1
            )
            loss.backward()
            opts[name].step()

        return step

    steps = {k: train_step(k) for k in models}
    budget = min(sz["cell_s"], max(rec.time_left() - 5, 1))
    times, first = time_alternating(steps, device, sz["warmup"], sz["reps"], budget)
    med = {k: statistics.median(t) for k, t in times.items()}
    flops = seq2seq_train_flops(B, S, T, D, d_ff, L, V)
    rec.row(
        model=f"{L}+{L} layers, d_model {D}, {H} heads, d_ff {d_ff}, V {V}",
        batch=f"{B} x {S} x {T}",
        params_m=round(n_ours / 1e6, 2),
        reps=len(times["ours"]),
        ours_tok_s=round(tokens / med["ours"]),
        torch_tok_s=round(tokens / med["torch"]),
        ratio=round(med["torch"] / med["ours"], 3),
        ours_mfu=_mfu(flops, med["ours"], cfg),
        torch_mfu=_mfu(flops, med["torch"], cfg),
        ours_peak_mb=peak_mb(steps["ours"], models["ours"], opts["ours"], device),
        torch_peak_mb=peak_mb(steps["torch"], models["torch"], opts["torch"], device),
        ours_kernels=kernels_of(steps["ours"]),
        torch_kernels=kernels_of(steps["torch"]),
        first_step_s={k: round(t, 2) for k, t in first.items()},
    )


# =================================================================================== part: decode


def part_decode(cfg: dict[str, Any], rec: Recorder) -> None:
    from seq2seq import IDS, NoEarlyEos, make_batch

    from lightning_tf.text import Seq2SeqTransformer, beam_search, greedy_search

    device, sz = device_of(cfg), cfg["sizes"]
    d = sz["decode"]
    torch.manual_seed(0)
    if d["preset"] is not None:
        net = Seq2SeqTransformer(vocab_size=d["V"], preset=d["preset"], max_len=512)
    else:
        net = Seq2SeqTransformer(vocab_size=d["V"], d_model=32, n_heads=4, n_layers=1, d_ff=64, max_len=64)
    params = sum(p.numel() for p in net.parameters())
    rec.set(
        "model",
        {
            "preset": d["preset"] or "tiny (dry run)",
            "params_m": round(params / 1e6, 2),
            "source_tokens": d["S"],
            "output_tokens": d["L"],
        },
    )
    model = NoEarlyEos(net.to(device).eval())
    L = d["L"]
    for search in ("greedy", "beam4"):
        for B in d["batches"]:
            if not _enough_time(rec, f"{search} batch {B}", 3.0):
                continue
            with _Guard(rec, f"{search} batch {B}"):
                src, _ = make_batch(B, d["S"], 4, d["V"], torch.Generator().manual_seed(1))
                src = src.to(device)

                def run(search: str = search, src: torch.Tensor = src) -> torch.Tensor:
                    with autocast(device):
                        if search == "greedy":
                            return greedy_search(model, src, L, **IDS)
                        return beam_search(model, src, L, **IDS, beam_size=4, alpha=0.6)[0]

                out = run()
                if out.shape[1] != L:
                    raise RuntimeError(f"decoded {out.shape[1]} tokens, expected {L}")
                times, _ = time_alternating(
                    {"run": lambda: run()}, device, 1, d["reps"], min(sz["cell_s"], max(rec.time_left() - 3, 1))
                )
                sec = statistics.median(times["run"])
                # the kernels do not depend on the batch; recording them runs every op through Python
                smallest = min(d["batches"])
                kernels = kernels_of(lambda: run()) if B == smallest else f"as at batch {smallest}"
                rec.row(
                    search=search,
                    batch=B,
                    output_tokens=L,
                    reps=len(times["run"]),
                    seconds=round(sec, 4),
                    tok_s=round(B * L / sec, 1),
                    ms_per_step=round(1e3 * sec / L, 3),
                    peak_mb=peak_mb(lambda: run(), net, None, device),
                    kernels=kernels,
                )


# ====================================================================================== part: cli


def cli_runs(cfg: dict[str, Any], compile_ok: dict[str, bool]) -> list[tuple[str, str, str, list[str]]]:
    """(task, config, mode, extra arguments) in the order they run; what the budget does not reach
    is skipped. With one GPU, data parallelism has nothing to scale: DDP runs once (vision, the
    quickest), to show the command works and what the wrapper costs, before the compiled runs."""
    n_gpu = cfg.get("gpu_count", 0)
    eager = [(t, c, "1 device", []) for t, c in TASKS]
    compiled = [(t, c, "1 device, compiled", ["--model.compile", "true"]) for t, c in TASKS if compile_ok.get(t)]
    ddp_tasks = TASKS if n_gpu > 1 else [t for t in TASKS if t[0] == "vision"]
    ddp = [(t, c, "ddp, all devices", ["--config", "configs/trainer/ddp.yaml"]) for t, c in ddp_tasks]
    if cfg["dry_run"]:
        return eager + [r for r in ddp if r[0] == "vision"]
    return eager + ddp + compiled


def cli_args(cfg: dict[str, Any], task: str, config: str, extra: list[str], timer_path: str, root: str) -> list[str]:
    """The arguments of ``lightning-tf fit``: default.yaml, gpu.yaml (not in the dry run), the task's
    config, ``extra``; no logger, no checkpoints (neither the best nor last.ckpt), no validation; the
    callbacks of default.yaml that need neither (the NaN guard, the RNG state) plus the step timer."""
    import yaml

    sz = cfg["sizes"]["cli"]
    default = yaml.safe_load((ROOT / "configs/trainer/default.yaml").read_text())
    dropped = ("ModelCheckpoint", "LastCheckpoint", "LearningRateMonitor", "RichProgressBar", "TQDMProgressBar")
    callbacks = [c for c in default["trainer"].get("callbacks", []) if not c["class_path"].endswith(dropped)]
    callbacks.append({"class_path": "gpu.StepTimer", "init_args": {"path": timer_path, "skip": sz["skip"]}})
    args = ["--config", "configs/trainer/default.yaml"]
    if not cfg["dry_run"]:
        args += ["--config", "configs/trainer/gpu.yaml"]
    ddp = extra[:2] == ["--config", "configs/trainer/ddp.yaml"]
    if ddp:  # the trainer overlays come before the task's config
        args += extra[:2]
        extra = extra[2:]
    args += ["--config", config, *extra]
    args += [
        "--trainer.max_steps",
        str(sz["steps"]),
        "--trainer.max_epochs",
        "-1",
        "--trainer.max_time",
        "null",
        "--trainer.limit_val_batches",
        "0",
        "--trainer.num_sanity_val_steps",
        "0",
        "--trainer.logger",
        "false",
        "--trainer.enable_checkpointing",
        "false",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--trainer.default_root_dir",
        root,
        "--trainer.callbacks",
        json.dumps(callbacks),
    ]
    if not ddp and not cfg["dry_run"]:
        args += ["--trainer.devices", "1"]
    if cfg["dry_run"]:
        args += ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.precision", "32-true"]
    return args + list(sz["extra"].get(task, []))


_SESSIONS: set[int] = set()  # the task commands running now (each leads its own process group)


def _run_cli_subprocess(args: list[str], timeout: float, log_path: Path) -> tuple[int | None, str]:
    """``python -m lightning_tf fit <args>`` in its own session (so a timeout stops its DDP ranks too)."""
    paths = [str(ROOT), str(BENCH), os.environ.get("PYTHONPATH")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("LIGHTNING_TF_GPU_BENCH_WORKER", None)
    if _NVML_CHECK_GIVEN is None:
        env.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lightning_tf", "fit", *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _SESSIONS.add(proc.pid)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, lambda: proc.poll() is None)
            proc.wait()
            code = None
        finally:
            _SESSIONS.discard(proc.pid)
    tail = log_path.read_text(errors="replace")[-3000:]
    return code, tail


def _run_cli_in_process(args: list[str]) -> None:
    from lightning_tf.cli.lightning_cli import make_cli

    make_cli(["fit", *args])


def part_cli(cfg: dict[str, Any], rec: Recorder) -> None:
    import inspect

    import yaml

    compile_ok: dict[str, bool] = {}
    for task, config in TASKS:
        class_path = yaml.safe_load((ROOT / config).read_text())["model"]["class_path"]
        module_name, _, cls_name = class_path.rpartition(".")
        cls = getattr(__import__(module_name, fromlist=[cls_name]), cls_name)
        compile_ok[task] = "compile" in inspect.signature(cls.__init__).parameters
        if not compile_ok[task]:
            rec.note(f"{task}: {cls_name} has no `compile` argument: no compiled run")
    if cfg["dry_run"]:
        rec.note("dry run: the commands run in-process on the CPU in float32 for 2 steps; compiled runs are skipped")
    work = Path(tempfile.mkdtemp(prefix="lightning-tf-gpu-cli-"))
    in_process = cfg["dry_run"] and not cfg.get("cli_subprocess")
    single: dict[str, float] = {}
    for i, (task, config, mode, extra) in enumerate(cli_runs(cfg, compile_ok)):
        need = 2.0 if cfg["dry_run"] else (60.0 if "compiled" in mode else 25.0)
        if not _enough_time(rec, f"{task} ({mode})", need):
            continue
        timer = work / f"run{i}.json"
        args = cli_args(cfg, task, config, extra, str(timer), str(work / f"root{i}"))
        command = "python -m lightning_tf fit " + " ".join(shlex.quote(a) for a in args)
        row: dict[str, Any] = {"task": task, "config": config, "mode": mode, "command": command}
        start = time.perf_counter()
        try:
            if in_process:
                _run_cli_in_process(args)
                code, tail = 0, ""
            else:
                limit = max(rec.time_left() - 3, 5)
                code, tail = _run_cli_subprocess(args, limit, work / f"run{i}.log")
        except (Exception, SystemExit) as err:  # LightningCLI exits with SystemExit on a bad argument
            code, tail = 1, _one_line(err)
        row["wall_s"] = round(time.perf_counter() - start, 1)
        if code == 0 and timer.is_file():
            row |= json.loads(timer.read_text())
            row["status"] = "ok"
            if mode == "1 device":
                single[task] = row["batches_per_s"]
            elif task in single and row.get("batches_per_s"):  # DDP: the scaling; compiled: the speed-up
                row["vs_eager_1_device"] = round(row["batches_per_s"] / single[task], 3)
        else:
            row["status"] = "timed out" if code is None else f"failed (exit {code})" if code else "no timing written"
            row["log_tail"] = tail[-1500:]
        rec.row(**row)
    rec.note(
        "batches/s vs eager on 1 device: for DDP the throughput scaling (ideal: the number of devices), "
        "for a compiled run its speed-up; steps/s counts optimizer steps after the first "
        f"{cfg['sizes']['cli']['skip']} (warm-up, compilation); wall s is the whole command "
        "(start-up and data included)"
    )
    if cfg.get("gpu_count", 0) <= 1:
        rec.note("one device: DDP has nothing to scale (scaling is 1 GPU only); its row shows the wrapper's cost")


# StepTimer is imported by the CLI through its class path (gpu.StepTimer, with benchmarks/ on the path);
# run as a script, this file never needs Lightning before a worker starts.
if __name__ != "__main__":
    from lightning.pytorch import Callback, LightningModule, Trainer

    class StepTimer(Callback):
        """Times the training steps after the first ``skip`` and writes, on global rank 0, one JSON
        object to ``path``: steps timed, seconds, steps/s, batches/s over all processes, peak memory.

        Args:
            path: the JSON file to write.
            skip: optimizer steps left out of the timing (warm-up, compilation).
        """

        def __init__(self, path: str, skip: int = 20) -> None:
            self.path, self.skip = path, skip
            self.start: float | None = None
            self.start_step = 0

        def _sync(self, pl_module: LightningModule) -> None:
            if pl_module.device.type == "cuda":
                torch.cuda.synchronize(pl_module.device)

        def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
            if pl_module.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(pl_module.device)

        def on_train_batch_start(
            self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
        ) -> None:
            if self.start is None and trainer.global_step >= self.skip:
                self._sync(pl_module)
                self.start, self.start_step = time.perf_counter(), trainer.global_step

        def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
            self._sync(pl_module)
            if not trainer.is_global_zero:
                return
            steps = trainer.global_step - self.start_step
            seconds = time.perf_counter() - self.start if self.start is not None else float("nan")
            out = {
                "steps_timed": steps,
                "seconds": round(seconds, 3),
                "world_size": trainer.world_size,
                "precision": str(trainer.precision),
                "device": str(pl_module.device),
            }
            out["steps_per_s"] = round(steps / seconds, 2) if steps > 0 else None
            out["batches_per_s"] = round(out["steps_per_s"] * trainer.world_size, 2) if steps > 0 else None
            if pl_module.device.type == "cuda":
                out["peak_mb"] = round(torch.cuda.max_memory_allocated(pl_module.device) / 2**20, 1)
            Path(self.path).write_text(json.dumps(out))


# =========================================================================== the worker and the run

PART_FUNCTIONS: dict[str, Callable[[dict[str, Any], Recorder], None]] = {
    "machine": part_machine,
    "backends": part_backends,
    "layers": part_layers,
    "vit": part_vit,
    "seq2seq": part_seq2seq,
    "decode": part_decode,
    "cli": part_cli,
}


def _kill_group(pid: int, alive: Callable[[], bool]) -> None:
    """Stop a process and everything it started (it leads its own process group): SIGTERM, then
    SIGKILL if it is still ``alive()`` two seconds later."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        for _ in range(20):
            if not alive():
                return
            time.sleep(0.1)


def worker(part: str, cfg: dict[str, Any], path: str) -> None:
    """Run one part in this (worker) process, recording into ``path``."""
    with contextlib.suppress(OSError):
        os.setsid()  # its own process group: the run can stop it and whatever it started

    def on_term(signum: int, frame: Any) -> None:  # stopped from outside: stop the task command too
        for pid in list(_SESSIONS):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)
    rec = Recorder(path, part, cfg["deadline"])
    try:
        if cfg["device"] == "cuda":
            if torch.cuda._is_in_bad_fork():
                rec.set("status", "bad fork")
                return
            torch.cuda.reset_peak_memory_stats()
        torch.manual_seed(0)
        PART_FUNCTIONS[part](cfg, rec)
        rec.data["max_memory_allocated_mb"] = part_peak_mb(device_of(cfg))
        rec.set("status", "ok" if not rec.data["errors"] else "ok, with failed measurements")
    except BaseException as err:  # noqa: BLE001 (SystemExit from a failed agreement check included)
        rec.data["tracebacks"] = rec.data.get("tracebacks", []) + [traceback.format_exc()[-4000:]]
        rec.set("status", f"failed: {_one_line(err)}")


def _noop() -> None:
    return None


class Run:
    """The parts of one run, one worker process each, with the results written after every part."""

    def __init__(self, args: argparse.Namespace, device: str) -> None:
        self.args, self.dry = args, args.dry_run
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="lightning-tf-gpu-"))
        self.cfg: dict[str, Any] = {
            "device": device,
            "dry_run": self.dry,
            "sizes": SIZES["dry" if self.dry else "gpu"],
            "cli_subprocess": args.cli_subprocess,
        }
        self.results: dict[str, Any] = {
            "script": "benchmarks/gpu.py",
            "command": " ".join(["python", "benchmarks/gpu.py", *sys.argv[1:]]),
            "dry_run": self.dry,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "budget_s": args.budget_s,
            "sizes": self.cfg["sizes"],
            "parts": {},
        }
        self.context = multiprocessing.get_context("forkserver")
        self.current: multiprocessing.process.BaseProcess | None = None

    def start_workers(self) -> None:
        """Start the worker server (it imports torch, lightning_tf and timm once) before the clock runs;
        if it cannot start within two minutes, every part runs in a fresh interpreter instead."""
        os.environ["LIGHTNING_TF_GPU_BENCH_WORKER"] = "1"
        # the server is a fresh interpreter that finds this file as the module `gpu` through PYTHONPATH
        paths = (str(BENCH), str(ROOT), os.environ.get("PYTHONPATH"))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        self.context.set_forkserver_preload(["gpu"])
        t0 = time.perf_counter()
        p = self.context.Process(target=_noop)
        failed: list[BaseException] = []

        def start() -> None:
            try:
                p.start()
                p.join()
            except Exception as err:  # noqa: BLE001
                failed.append(err)

        starter = threading.Thread(target=start, daemon=True)
        starter.start()
        starter.join(120)
        if starter.is_alive() or failed:
            why = _one_line(failed[0]) if failed else "no answer in 120 s"
            self.fall_back(f"the worker server did not start ({why})")
        self.results["worker_start_s"] = round(time.perf_counter() - t0, 1)

    def fall_back(self, why: str) -> None:
        """From here on, run every part in a fresh interpreter (slower to start, nothing shared)."""
        if self.context.get_start_method() == "spawn":
            return
        from multiprocessing import forkserver

        pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.context = multiprocessing.get_context("spawn")
        self.results.setdefault("notes", []).append(f"{why}: parts ran in fresh interpreters")
        print(f"note: {why}; running every part in a fresh interpreter", flush=True)

    def run_part(self, part: str, timeout: float) -> dict[str, Any]:
        path = self.work / f"{part}.json"
        self.cfg["deadline"] = time.time() + timeout - max(3.0, 0.05 * timeout)
        t0 = time.perf_counter()
        p = self.context.Process(target=worker, args=(part, self.cfg, str(path)))
        self.current = p
        try:
            p.start()
        except Exception as err:  # noqa: BLE001 (the worker server is gone)
            self.current = None
            return {
                "part": part,
                "status": f"worker did not start: {_one_line(err)}",
                "rows": [],
                "notes": [],
                "errors": [],
                "seconds": round(time.perf_counter() - t0, 1),
                "budget_s": round(timeout, 1),
            }
        p.join(timeout)
        stopped = p.is_alive()
        if stopped:
            _kill_group(p.pid, p.is_alive)
            p.join(5)
        self.current = None
        result: dict[str, Any] = {"part": part, "status": "no result", "rows": [], "notes": [], "errors": []}
        if path.is_file():
            with contextlib.suppress(json.JSONDecodeError):
                result = json.loads(path.read_text())
        if stopped:
            result["status"] = f"stopped after its {timeout:.0f} s budget (rows measured before are kept)"
        elif result["status"] == "running":
            result["status"] = f"worker died (exit code {p.exitcode})"
        result["seconds"], result["budget_s"] = round(time.perf_counter() - t0, 1), round(timeout, 1)
        return result

    def interrupt(self) -> None:
        if self.current is not None and self.current.is_alive():
            _kill_group(self.current.pid, self.current.is_alive)

    def run(self, parts: list[str], deadline: float) -> None:
        """Run ``parts`` in order, dividing the time left until ``deadline`` by their weights."""
        for i, part in enumerate(parts):
            left = deadline - time.time()
            weight = {p: 1 if self.dry else PART_WEIGHTS[p] for p in parts}  # the dry run: a safety limit only
            timeout = max(left * weight[part] / sum(weight[p] for p in parts[i:]), 5.0)
            result = self.run_part(part, timeout)
            status = result["status"]
            broken = status in ("bad fork", "no result") or status.startswith(("worker did not start", "worker died"))
            broken |= part == "machine" and status.startswith("failed")
            if broken and self.context.get_start_method() != "spawn":
                # the forked workers cannot run (CUDA initialised in the server, the server gone, ...): the
                # simplest part failing says so; retry in a fresh interpreter, and run every later part that way
                self.fall_back(f"{part}: {result['status']} in a forked worker")
                left = deadline - time.time()
                result = self.run_part(part, max(left * weight[part] / sum(weight[p] for p in parts[i:]), 5.0))
            self.results["parts"][part] = result
            if part == "machine" and "machine" in result:
                self.results["machine"] = result["machine"]
                self.cfg["peak_tflops"] = result["machine"].get("peak_tflops")
                self.cfg["gpu_count"] = result["machine"].get("gpu_count", 0)
                print(machine_line(result["machine"]), flush=True)
            self.write()
            print(f"[{part}] {result['status']} in {result['seconds']} s (budget {result['budget_s']} s)", flush=True)
            for line in part_markdown(part, result):
                print(line)
            print(flush=True)
        self.results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        self.write()

    def write(self) -> None:
        (self.out / "gpu.json").write_text(json.dumps(self.results, indent=1, default=str))
        (self.out / "gpu.md").write_text("\n".join(markdown(self.results)) + "\n")


# ========================================================================================= output


def machine_line(m: dict[str, Any]) -> str:
    gpus = ", ".join(f"{g['name']} ({g['memory_gib']} GiB, sm {g['capability']})" for g in m.get("gpus", []))
    return (
        f"machine: {gpus or 'no GPU'} x{m.get('gpu_count', 0)} | torch {m.get('torch')}, CUDA {m.get('cuda')}, "
        f"cuDNN {m.get('cudnn')}, driver {m.get('driver')} | CPU {m.get('cpu')}, {m.get('cpu_cores')} cores | "
        f"peak {m.get('peak_tflops')} TFLOP/s ({m.get('peak_source')}); torch.mm measured "
        f"{m.get('mm_tflops_measured')} TFLOP/s"
    )


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(_fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows
    ]


def part_markdown(part: str, res: dict[str, Any]) -> list[str]:
    """The table of one part's rows."""
    rows = res.get("rows", [])
    if part == "machine" and "machine" in res:
        m = res["machine"]
        lines = _table(
            [
                "GPU",
                "memory",
                "capability",
                "count",
                "torch",
                "CUDA",
                "cuDNN",
                "driver",
                "CPU",
                "peak bf16 TFLOP/s (for MFU)",
                "torch.mm measured",
            ],
            [
                [
                    (m["gpus"][0]["name"] if m["gpus"] else "none"),
                    (f"{m['gpus'][0]['memory_gib']} GiB" if m["gpus"] else "-"),
                    (m["gpus"][0]["capability"] if m["gpus"] else "-"),
                    m.get("gpu_count", 0),
                    m.get("torch"),
                    m.get("cuda") or "-",
                    m.get("cudnn") or "-",
                    m.get("driver") or "-",
                    f"{m.get('cpu')} ({m.get('cpu_cores')} cores)",
                    f"{m.get('peak_tflops')} ({m.get('peak_source')})",
                    f"{m.get('mm_tflops_measured')} ({m.get('mm_shape')})",
                ]
            ],
        )
        return lines
    if not rows:
        return []
    if part == "backends":
        return _table(
            ["attention path", "taken by", "flash", "efficient", "cuDNN", "math", "picked unrestricted"],
            [
                [
                    r["path"],
                    r["used_by"],
                    r.get("flash", "-"),
                    r.get("efficient", "-"),
                    r.get("cudnn", "-"),
                    r.get("math", "-"),
                    r.get("default", "-"),
                ]
                for r in rows
            ],
        )
    if part == "layers":
        return _table(
            [
                "layer",
                "(B, T, D, H)",
                "mode",
                "ours tok/s",
                "torch tok/s",
                "ours/torch",
                "ours MFU",
                "torch MFU",
                "ours peak MB",
                "torch peak MB",
                "first step s (ours / torch)",
                "SDPA kernels (ours / torch)",
            ],
            [
                [
                    r["layer"],
                    r["shape"],
                    r["mode"],
                    r["ours_tok_s"],
                    r["torch_tok_s"],
                    f"{r['ratio']:.2f}",
                    _pct(r["ours_mfu"]),
                    _pct(r["torch_mfu"]),
                    r["ours_peak_mb"],
                    r["torch_peak_mb"],
                    f"{r['first_step_s'].get('ours')} / {r['first_step_s'].get('torch')}",
                    f"{r.get('ours_kernels', '-')} / {r.get('torch_kernels', '-')}",
                ]
                for r in rows
            ],
        )
    if part == "vit":
        return _table(
            [
                "mode",
                "batch",
                "ours img/s",
                "timm img/s",
                "ours/timm",
                "ours MFU",
                "timm MFU",
                "ours peak MB",
                "timm peak MB",
                "first step s (ours / timm)",
                "SDPA kernels (ours / timm)",
            ],
            [
                [
                    r["mode"],
                    r["batch"],
                    r["ours_img_s"],
                    r["timm_img_s"],
                    f"{r['ratio']:.2f}",
                    _pct(r["ours_mfu"]),
                    _pct(r["timm_mfu"]),
                    r["ours_peak_mb"],
                    r["timm_peak_mb"],
                    f"{r['first_step_s'].get('ours')} / {r['first_step_s'].get('timm')}",
                    f"{r.get('ours_kernels', '-')} / {r.get('timm_kernels', '-')}",
                ]
                for r in rows
            ],
        )
    if part == "seq2seq":
        return _table(
            [
                "model",
                "batch (B x S x T)",
                "params (M)",
                "ours tok/s",
                "torch tok/s",
                "ours/torch",
                "ours MFU",
                "torch MFU",
                "ours peak MB",
                "torch peak MB",
                "SDPA kernels (ours / torch)",
            ],
            [
                [
                    r["model"],
                    r["batch"],
                    r["params_m"],
                    r["ours_tok_s"],
                    r["torch_tok_s"],
                    f"{r['ratio']:.2f}",
                    _pct(r["ours_mfu"]),
                    _pct(r["torch_mfu"]),
                    r["ours_peak_mb"],
                    r["torch_peak_mb"],
                    f"{r['ours_kernels']} / {r['torch_kernels']}",
                ]
                for r in rows
            ],
        )
    if part == "decode":
        return _table(
            [
                "search",
                "batch",
                "output tokens",
                "s per batch",
                "output tok/s",
                "ms per step",
                "peak MB",
                "SDPA kernels",
            ],
            [
                [
                    r["search"],
                    r["batch"],
                    r["output_tokens"],
                    r["seconds"],
                    r["tok_s"],
                    r["ms_per_step"],
                    r["peak_mb"],
                    r["kernels"],
                ]
                for r in rows
            ],
        )
    if part == "cli":
        return _table(
            [
                "task",
                "config",
                "run",
                "status",
                "steps timed",
                "steps/s",
                "batches/s (all devices)",
                "devices",
                "batches/s vs eager on 1 device",
                "peak MB (rank 0)",
                "wall s",
            ],
            [
                [
                    r["task"],
                    f"`{r['config']}`",
                    r["mode"],
                    r["status"],
                    r.get("steps_timed"),
                    r.get("steps_per_s"),
                    r.get("batches_per_s"),
                    r.get("world_size"),
                    r.get("vs_eager_1_device"),
                    r.get("peak_mb"),
                    r["wall_s"],
                ]
                for r in rows
            ],
        )
    return []


PART_TITLES = {
    "machine": "Machine",
    "backends": "SDPA kernel of each attention path (bf16 autocast, forward + backward)",
    "layers": "Encoder / decoder layer training vs torch.nn (bf16 autocast, weights copied)",
    "vit": "ViT-S/16 at 224 training vs timm (bf16 autocast, weights copied)",
    "seq2seq": "Transformer-base training vs torch.nn.Transformer (bf16 autocast)",
    "decode": "Decoding on the KV cache (bf16 autocast, Transformer-base, forced length)",
    "cli": "Task commands: {steps} training steps (configs/trainer/default.yaml + gpu.yaml + the task's config)",
}


def markdown(results: dict[str, Any]) -> list[str]:
    lines = [
        "# lightning-tf on a GPU"
        + (" (dry run: tiny sizes on the CPU, float32; not a measurement)" if results["dry_run"] else ""),
        "",
    ]
    lines += [
        f"Written by `{results['command']}`, started {results['started']}"
        + (f", finished {results['finished']}" if "finished" in results else " (still running or interrupted)")
        + f"; time budget {results['budget_s']} s.",
        "",
    ]
    if "machine" in results:
        lines += [machine_line(results["machine"]), ""]
    lines += _table(
        ["part", "status", "seconds", "budget s"],
        [[p, r["status"], r.get("seconds"), r.get("budget_s")] for p, r in results["parts"].items()],
    )
    for part, res in results["parts"].items():
        title = PART_TITLES.get(part, part).format(steps=results["sizes"]["cli"]["steps"])
        lines += ["", f"## {title}", ""]
        if "model" in res:
            lines += ["Model: " + ", ".join(f"{k} {v}" for k, v in res["model"].items()), ""]
        table = part_markdown(part, res)
        lines += table or ["(no rows)"]
        for note in res.get("notes", []):
            lines += ["", f"- {note}"]
        for err in res.get("errors", []):
            lines += ["", f"- failed: {err}"]
        if part == "cli":
            commands = [f"    {r['command']}" for r in res.get("rows", [])[:1]]
            lines += ["", "The first command, in full:", "", *commands] if commands else []
    lines += [
        "",
        "MFU: analytic matmul FLOPs of a training step (3x the forward; causal attention counts the "
        "visible half) per median step time, over the peak above. Peak MB: the model's weights, gradients and "
        "optimizer state plus the transient peak of one step (torch.cuda.max_memory_allocated). Ratios "
        "above 1: ours faster.",
    ]
    return lines


# =========================================================================================== main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="every part at tiny sizes on the CPU (a smoke test)")
    p.add_argument(
        "--out",
        default=None,
        help="folder for gpu.json and gpu.md (default docs/results; with --dry-run runs/gpu_dry_run)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds for the whole run, parts and start-up (default 420; --dry-run 300)",
    )
    p.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS, help="parts to run, in this order")
    p.add_argument(
        "--cli-subprocess",
        action="store_true",
        help="with --dry-run, run the task commands as subprocesses, as on a GPU",
    )
    args = p.parse_args(argv)
    args.out = args.out or str(ROOT / ("runs/gpu_dry_run" if args.dry_run else "docs/results"))
    args.budget_s = args.budget_s or (300.0 if args.dry_run else 420.0)
    if args.budget_s <= 0:
        p.error(f"--budget-s ({args.budget_s}) must be positive")
    if "machine" not in args.parts:
        args.parts = ["machine", *args.parts]  # the peak and the device count come from it
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print(
            "benchmarks/gpu.py: no CUDA device here (torch.cuda.is_available() is False), nothing measured; "
            "run it on a GPU machine, or add --dry-run for a tiny smoke run on the CPU"
        )
        return 0
    run = Run(args, "cpu" if args.dry_run else "cuda")

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    t0 = time.perf_counter()
    try:
        print(
            f"benchmarks/gpu.py{' --dry-run' if args.dry_run else ''}: parts {' '.join(args.parts)}, "
            f"budget {args.budget_s:.0f} s, results in {args.out}",
            flush=True,
        )
        deadline = time.time() + args.budget_s  # the workers' start counts too
        run.start_workers()
        run.run(args.parts, deadline)
    except KeyboardInterrupt:
        run.interrupt()
        run.results["interrupted"] = True
        run.write()
        print(f"interrupted: what was measured is in {run.out / 'gpu.json'} and {run.out / 'gpu.md'}", flush=True)
        return 130
    print(f"wrote {run.out / 'gpu.json'} and {run.out / 'gpu.md'} in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
