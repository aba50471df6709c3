"""Speed of our :class:`~lightning_tf.core.EncoderLayer`/:class:`~lightning_tf.core.DecoderLayer`
against ``torch.nn.TransformerEncoderLayer``/``TransformerDecoderLayer``, computing the same function.

Both sides are Pre-LN (``norm_first=True``), batch first, ReLU, ``d_ff = 4 * d_model``, dropout 0,
with our weights copied from torch's (outputs and input gradients are checked to agree before any
timing; the run aborts otherwise). Two modes per layer and shape:

* ``train``: ``zero_grad`` + forward + backward + ``AdamW.step``, input (and memory) requiring grad as
  in the middle of a stack.
* ``eval``: ``model.eval()`` under ``torch.inference_mode()``. Torch's encoder layer then takes its
  fused C++ fast path (``aten::_transformer_encoder_layer_fwd``); that is the fair peer, so we let it.
  Torch's decoder layer has no such path.

The decoder attends causally to itself (ours: ``is_causal=True``; torch: ``tgt_is_causal=True`` with
the mask of ``nn.Transformer.generate_square_subsequent_mask``) and to a memory of the same length.

Ours and torch alternate within every repeat (and swap order each repeat), and each cell reports the
median, so that load from other processes hits both sides alike.

Throughput is target tokens (``B * T``) per second. GFLOP/s counts matmul FLOPs analytically
(``2 * m * n * k`` per product; causal attention counts the visible half of the scores; training
counts 3x the forward) and sits beside this machine's measured ``torch.mm`` rate for scale.

Run (about 10 minutes on a 2-core CPU; ``--quick`` is a < 30 s smoke test)::

    python benchmarks/core_layers.py [--device cpu|cuda] [--dtype float32|bfloat16]
        [--repeats N] [--warmup N] [--quick] [--threads N] [--json PATH]
        [--layers encoder decoder] [--modes train eval] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from lightning_tf.core import DecoderLayer, EncoderLayer, TransformerSpec

LayerName = Literal["encoder", "decoder"]
Mode = Literal["train", "eval"]

# (B, T, D, H)
FULL_SHAPES = [(32, 128, 256, 8), (16, 512, 512, 8)]
QUICK_SHAPES = [(8, 64, 128, 4), (4, 128, 256, 8)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class Row:
    """One table row: a layer at one shape in one mode."""

    layer: str
    B: int
    T: int
    D: int
    H: int
    mode: str
    ours_s: float  # median seconds per call
    torch_s: float
    ours_tok_s: float
    torch_tok_s: float
    ratio: float  # ours / torch throughput
    ours_gflops: float
    torch_gflops: float
    ours_spread: float  # (max - min) / median over the repeats: a noise indicator
    torch_spread: float
    ratio_min: float  # ours / torch throughput from the fastest repeat of each: less sensitive to load


# ---------------------------------------------------------------------------------------------
# machine


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(device: torch.device) -> dict[str, str | int | None]:
    """What the numbers were measured on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_model(),
        "cores": cores,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "cuda": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }


def sync(device: torch.device) -> None:
    """Wait for queued kernels, so wall-clock time covers them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_gflops(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> float:
    """Best rate of an ``n x n`` by ``n x n`` ``torch.mm`` over ``repeats``, in GFLOP/s: the machine's
    matmul peak (the best, not the median, because load from other processes only ever slows it)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    torch.mm(a, b, out=out)  # warm-up
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / min(times) / 1e9


# ---------------------------------------------------------------------------------------------
# FLOPs


def forward_flops(layer: LayerName, B: int, T: int, D: int) -> float:
    """Matmul FLOPs of one forward pass at ``d_ff = 4 D``, memory length ``S = T`` for the decoder.

    Linear maps cost ``2 * tokens * d_in * d_out``; attention costs ``2 * B * T * S * D`` for the
    scores and the same for the weighted values, halved where a causal mask hides half the scores.
    """
    n, S, d_ff = B * T, T, 4 * D
    ff = 2 * n * (D * d_ff + d_ff * D)
    self_proj = 2 * n * (3 * D * D + D * D)  # qkv + out
    if layer == "encoder":
        return self_proj + 4 * B * T * T * D + ff
    causal_pairs = T * (T + 1) / 2  # visible (query, key) pairs per sequence
    cross_proj = 2 * n * (D * D + D * D) + 2 * B * S * (2 * D * D)  # q + out, kv of the memory
    return self_proj + 4 * B * causal_pairs * D + cross_proj + 4 * B * T * S * D + ff


# ---------------------------------------------------------------------------------------------
# models with one function


def build_pair(layer: LayerName, D: int, H: int) -> tuple[nn.Module, nn.Module]:
    """Torch's layer and ours, with ours carrying torch's weights."""
    common = dict(dim_feedforward=4 * D, dropout=0.0, activation="relu", batch_first=True, norm_first=True)
    ref: nn.Module
    ours: nn.Module
    if layer == "encoder":
        ref = nn.TransformerEncoderLayer(D, H, **common)
        ours = EncoderLayer(TransformerSpec(D, H, 1, 4 * D, dropout=0.0, activation="relu", norm_first=True))
    else:
        ref = nn.TransformerDecoderLayer(D, H, **common)
        ours = DecoderLayer(TransformerSpec(D, H, 1, 4 * D, dropout=0.0, activation="relu", norm_first=True))
    ours.load_state_dict(map_state_dict(ref.state_dict(), D), strict=True)
    return ours, ref


def map_state_dict(ref: dict[str, Tensor], D: int) -> dict[str, Tensor]:
    """Rename a ``nn.Transformer{Encoder,Decoder}Layer`` state dict to our parameter names."""
    out: dict[str, Tensor] = {}
    for name, value in ref.items():
        if name.startswith("self_attn.in_proj_"):
            out[name.replace("in_proj_", "qkv_proj.")] = value
        elif name.startswith("multihead_attn.in_proj_"):
            kind = name.rsplit("_", 1)[1]  # weight | bias
            out[f"cross_attn.q_proj.{kind}"] = value[:D]
            out[f"cross_attn.kv_proj.{kind}"] = value[D:]
        elif name.startswith("multihead_attn."):
            out[name.replace("multihead_attn.", "cross_attn.")] = value
        elif name.startswith(("linear1.", "linear2.")):
            out["ff." + name] = value
        else:  # self_attn.out_proj.*, norm1/2/3.*
            out[name] = value
    return out


class Case:
    """One layer at one shape: inputs and the calls that run ours and torch's."""

    def __init__(self, layer: LayerName, B: int, T: int, D: int, H: int, device: torch.device, dtype: torch.dtype):
        self.layer, self.B, self.T, self.D, self.H = layer, B, T, D, H
        ours, ref = build_pair(layer, D, H)
        self.ours = ours.to(device=device, dtype=dtype)
        self.ref = ref.to(device=device, dtype=dtype)
        self.x = torch.randn(B, T, D, device=device, dtype=dtype)  # (B, T, D)
        self.memory = torch.randn(B, T, D, device=device, dtype=dtype)  # (B, S, D), S = T
        self.grad = torch.randn(B, T, D, device=device, dtype=dtype)  # d loss / d output
        # torch's causal mask is built once, outside the timed region (ours needs none)
        self.tgt_mask = nn.Transformer.generate_square_subsequent_mask(T, device=device, dtype=dtype)  # (T, T)

    def forward_ours(self, x: Tensor, memory: Tensor) -> Tensor:
        if self.layer == "encoder":
            return self.ours(x)[0]
        return self.ours(x, memory)[0]  # is_causal=True by default

    def forward_ref(self, x: Tensor, memory: Tensor) -> Tensor:
        if self.layer == "encoder":
            return self.ref(x)
        return self.ref(x, memory, tgt_mask=self.tgt_mask, tgt_is_causal=True)

    def verify(self, atol: float, rtol: float) -> None:
        """Check that both sides agree in outputs (train and eval) and input gradients; abort if not."""
        problems = []
        for model in (self.ours, self.ref):
            model.train()
        x = self.x.detach().clone().requires_grad_(True)
        m = self.memory.detach().clone().requires_grad_(True)
        y_ours = self.forward_ours(x, m)
        (gx_ours, gm_ours) = torch.autograd.grad(y_ours, (x, m), self.grad, allow_unused=True)
        y_ref = self.forward_ref(x, m)
        (gx_ref, gm_ref) = torch.autograd.grad(y_ref, (x, m), self.grad, allow_unused=True)
        pairs = [("train output", y_ours, y_ref), ("d input", gx_ours, gx_ref)]
        if self.layer == "decoder":
            pairs.append(("d memory", gm_ours, gm_ref))
        for model in (self.ours, self.ref):
            model.eval()
        with torch.inference_mode():
            pairs.append(("eval output", self.forward_ours(self.x, self.memory), self.forward_ref(self.x, self.memory)))
        for what, a, b in pairs:
            if not torch.allclose(a.float(), b.float(), atol=atol, rtol=rtol):
                err = (a.float() - b.float()).abs().max().item()
                problems.append(f"{what}: max abs difference {err:.3g} (atol {atol}, rtol {rtol})")
        if problems:
            head = f"{self.layer} {self.shape}: ours and torch disagree, not timing."
            raise SystemExit("\n  ".join([head, *problems]))

    @property
    def shape(self) -> str:
        return f"B={self.B} T={self.T} D={self.D} H={self.H}"

    def runners(self, mode: Mode) -> tuple[Callable[[], None], Callable[[], None]]:
        """Zero-argument calls doing one step of ``mode`` with ours and with torch's layer."""
        if mode == "eval":
            for model in (self.ours, self.ref):
                model.eval()

            def eval_step(forward: Callable[[Tensor, Tensor], Tensor]) -> Callable[[], None]:
                def step() -> None:
                    with torch.inference_mode():
                        forward(self.x, self.memory)

                return step

            return eval_step(self.forward_ours), eval_step(self.forward_ref)

        for model in (self.ours, self.ref):
            model.train()
        x = self.x.detach().clone().requires_grad_(True)
        m = self.memory.detach().clone().requires_grad_(True)

        def train_step(model: nn.Module, forward: Callable[[Tensor, Tensor], Tensor]) -> Callable[[], None]:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

            def step() -> None:
                opt.zero_grad(set_to_none=True)
                x.grad = m.grad = None
                forward(x, m).backward(self.grad)
                opt.step()

            return step

        return train_step(self.ours, self.forward_ours), train_step(self.ref, self.forward_ref)


# ---------------------------------------------------------------------------------------------
# timing


def time_pair(
    ours: Callable[[], None], ref: Callable[[], None], device: torch.device, warmup: int, repeats: int
) -> tuple[list[float], list[float]]:
    """Seconds per call of ``ours`` and ``ref``, interleaved and alternating which goes first."""
    times: dict[str, list[float]] = {"ours": [], "ref": []}
    for i in range(warmup + repeats):
        order = [("ours", ours), ("ref", ref)]
        if i % 2:
            order.reverse()
        for name, fn in order:
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    return times["ours"], times["ref"]


def spread(times: list[float]) -> float:
    return (max(times) - min(times)) / statistics.median(times)


class _OpRecorder(TorchDispatchMode):
    """Records the names of the aten ops that run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def torch_encoder_fast_path_used(case: Case) -> bool:
    """Whether torch's encoder layer runs its fused inference kernel in eval mode."""
    _, ref_eval = case.runners("eval")
    with _OpRecorder() as rec:
        ref_eval()
    return "aten._transformer_encoder_layer_fwd" in rec.ops


def profile_case(case: Case, mode: Mode, row_limit: int) -> None:
    """Print the top ops by self CPU time of one step of ours and one of torch's."""
    ours, ref = case.runners(mode)
    for name, fn in (("ours", ours), ("torch", ref)):
        fn()  # warm
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            with torch.profiler.record_function(f"{name} {case.layer} {mode}"):
                fn()
        print(f"\n### profile: {name} {case.layer} {case.shape} {mode}\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=row_limit))


# ---------------------------------------------------------------------------------------------
# output


def markdown_table(rows: list[Row], mm: float, dtype: str) -> str:
    header = (
        "| layer | shape | mode | ours tok/s | torch tok/s | ours/torch | ours/torch (fastest) | ours GFLOP/s "
        f"| torch GFLOP/s | mm peak GFLOP/s ({dtype}) |"
    )
    lines = [header, "|" + "---|" * 3 + "---:|" * 7]
    for r in rows:
        lines.append(
            f"| {r.layer} | ({r.B}, {r.T}, {r.D}, {r.H}) | {r.mode} | {r.ours_tok_s:,.0f} | {r.torch_tok_s:,.0f} "
            f"| {r.ratio:.2f} | {r.ratio_min:.2f} | {r.ours_gflops:.1f} | {r.torch_gflops:.1f} | {mm:.1f} |"
        )
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per side and cell (default 20; --quick 3)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per side first (default 2; --quick 1)")
    p.add_argument("--quick", action="store_true", help="small shapes, few repeats: a < 30 s smoke test")
    p.add_argument("--layers", nargs="+", choices=["encoder", "decoder"], default=["encoder", "decoder"])
    p.add_argument("--modes", nargs="+", choices=["train", "eval"], default=["train", "eval"])
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--json", metavar="PATH", help="also write machine info and rows as JSON")
    p.add_argument("--profile", action="store_true", help="instead of timing, print torch.profiler tables")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available")
    args.repeats = args.repeats if args.repeats is not None else (3 if args.quick else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads ({args.threads}) must be >= 1")
    if args.repeats < 1 or args.warmup < 0:
        p.error(f"--repeats ({args.repeats}) must be >= 1 and --warmup ({args.warmup}) >= 0")
    return args


def main() -> None:
    args = parse_args()
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    info = machine_info(device)
    print(
        f"machine: {info['cpu']}, {info['cores']} cores | torch {info['torch']}, {info['threads']} threads"
        f" | device {info['device']}" + (f" ({info['cuda']})" if info["cuda"] else "")
    )
    mm_n = 1024 if args.quick else 2048
    mm = matmul_gflops(device, dtype, mm_n, repeats=3 if args.quick else 10)
    print(f"torch.mm {mm_n}x{mm_n} {args.dtype}: {mm:.1f} GFLOP/s (best of repeats)")
    print(f"repeats {args.repeats}, warmup {args.warmup}, dtype {args.dtype}; medians of interleaved runs\n")

    # verify in float32 to ~1e-4; a bfloat16 run checks its own outputs loosely as well
    tol = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (5e-2, 5e-2)}
    rows: list[Row] = []
    notes: list[str] = []
    for layer in args.layers:
        for B, T, D, H in QUICK_SHAPES if args.quick else FULL_SHAPES:
            gc.collect()
            torch.manual_seed(0)
            Case(layer, B, T, D, H, device, torch.float32).verify(*tol[torch.float32])
            torch.manual_seed(0)
            case = Case(layer, B, T, D, H, device, dtype)
            if dtype != torch.float32:
                case.verify(*tol[dtype])
            if layer == "encoder" and "eval" in args.modes:
                used = torch_encoder_fast_path_used(case)
                notes.append(f"torch encoder eval {case.shape}: fused fast path {'used' if used else 'NOT used'}")
            for mode in args.modes:
                if args.profile:
                    profile_case(case, mode, row_limit=25)
                    continue
                t_ours, t_ref = time_pair(*case.runners(mode), device, args.warmup, args.repeats)
                s_ours, s_ref = statistics.median(t_ours), statistics.median(t_ref)
                flops = forward_flops(layer, B, T, D) * (3 if mode == "train" else 1)
                row = Row(
                    layer,
                    B,
                    T,
                    D,
                    H,
                    mode,
                    s_ours,
                    s_ref,
                    B * T / s_ours,
                    B * T / s_ref,
                    s_ref / s_ours,
                    flops / s_ours / 1e9,
                    flops / s_ref / 1e9,
                    spread(t_ours),
                    spread(t_ref),
                    min(t_ref) / min(t_ours),
                )
                rows.append(row)
                print(
                    f"  {layer} {case.shape} {mode}: ours {s_ours * 1e3:.1f} ms, torch {s_ref * 1e3:.1f} ms, "
                    f"ratio {row.ratio:.2f}, of fastest repeats {row.ratio_min:.2f} "
                    f"(spread {row.ours_spread:.0%} / {row.torch_spread:.0%})",
                    flush=True,
                )
            del case

    for note in notes:
        print(note)
    if args.profile:
        return
    print()
    print(markdown_table(rows, mm, args.dtype))
    print(
        "\ntok/s: target tokens (B*T) per second, median. ours/torch: throughput ratio of the medians "
        "(> 1: ours faster); (fastest): the same of the fastest repeats, less sensitive to other load. "
        "GFLOP/s: analytic matmul FLOPs (train = 3x forward, causal attention = visible half) per median step; "
        "mm peak: best of 10 (3 with --quick) torch.mm calls."
    )
    if args.json:
        with open(args.json, "w") as f:
            result = {"machine": info, "args": vars(args), "mm_peak_gflops": mm, "rows": [asdict(r) for r in rows]}
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
