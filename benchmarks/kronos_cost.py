"""What Kronos costs at the universe walk-forward's size (``walkforward --kronos``, ``--kronos_finetune_steps``): the
zero-shot forecast's throughput in origins a second and one fine-tuning step's time, on this machine, with the
published model's sizes (random weights: the cost does not depend on the values), and what they come to for the
shared universe (354 tickers, four yearly test folds of 252 dates: 356,832 origins).

Rows: a batch of origins forecast over the horizon, from a context of ``max_context`` less the horizon (the
walk-forward's default: the model keeps its keys and values), a full ``max_context`` (the window recomputed at every
bar, as the reference always does), and a short context; one draw, and the mean of five. Then one fine-tuning step
(forward, backward and AdamW) on a batch of windows of ``max_context + 1`` bars. Each is timed after a warm-up
(the median of ``--repeats``), with the process's peak resident memory.

Run (about 6 minutes on an idle 2-core CPU; ``--quick``: tiny models, seconds)::

    python benchmarks/kronos_cost.py [--model small] [--batch 64] [--horizon 5] [--repeats 3] [--quick]
        [--out docs/results/kronos_cost.md] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info  # noqa: E402

from lightning_tf.kline.kronos_tuning import KronosTuner  # noqa: E402
from lightning_tf.kline.published import KRONOS_PRESETS, Kronos, KronosConfig, calendar_stamps  # noqa: E402

#: the shared universe's walk-forward: tickers x test dates (configs/kline/us_universe.yaml, 4 folds of 252)
UNIVERSE_ORIGINS = 354 * 4 * 252


def _model(size: str, quick: bool) -> Kronos:
    torch.manual_seed(0)
    model_config, tokenizer_config, max_context = KRONOS_PRESETS[size]
    if quick:
        model_config, max_context = KronosConfig(n_layers=1, d_model=32, n_heads=4, d_ff=64), 64
    return Kronos(model_config, tokenizer_config, max_context=max_context).eval()


def _bars(batch: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random-walk daily bars ``(batch, n, 5)`` and their calendar stamps ``(batch, n, 5)``."""
    rng = np.random.default_rng(seed)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, (batch, n)), axis=1))
    bars = np.stack([close, close * 1.01, close * 0.99, close, rng.uniform(1e5, 2e5, (batch, n))], -1)
    stamps = calendar_stamps(pd.bdate_range("2010-01-04", periods=n))[None].expand(batch, -1, -1)
    return torch.as_tensor(bars, dtype=torch.float32), stamps


def _timed(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def forecast_rows(kronos: Kronos, batch: int, horizon: int, repeats: int) -> list[dict[str, Any]]:
    W = kronos.max_context
    rows = []
    for context, samples, note in [
        (W - horizon, 1, "the walk-forward's default"),
        (W - horizon, 5, "the mean of five draws"),
        (W, 1, "a full window, recomputed at every bar"),
        (max(8, W // 4), 1, "a short context"),
    ]:
        bars, stamps = _bars(batch, context + horizon)
        x, s, f = bars[:, :context], stamps[:, :context], stamps[:, context:]
        seconds = _timed(lambda x=x, s=s, f=f, n=samples: kronos.forecast(x, s, f, samples=n), repeats)
        rate = batch / seconds
        rows.append(
            {
                "context": context,
                "samples": samples,
                "note": note,
                "seconds": seconds,
                "origins_per_s": rate,
                "universe_hours": UNIVERSE_ORIGINS / rate / 3600,
            }
        )
        print(f"forecast: context {context}, {samples} draw(s): {rate:.2f} origins/s", flush=True)
    return rows


def finetune_row(kronos: Kronos, batch: int, repeats: int, steps: int = 2000) -> dict[str, Any]:
    tuner = KronosTuner.from_model(kronos)
    optimizer = torch.optim.AdamW([p for p in tuner.parameters() if p.requires_grad], lr=1e-5)
    bars, stamps = _bars(batch, kronos.max_context + 1)
    data = {"bars": bars, "stamps": stamps, "scored": torch.ones(batch, kronos.max_context, dtype=torch.bool)}

    def step() -> None:
        tuner.training_step(data, 0).backward()
        optimizer.step()
        optimizer.zero_grad()

    tuner.train()
    with warnings.catch_warnings():  # the step logs its loss, and no trainer is attached here
        warnings.filterwarnings("ignore", message=".*self.trainer. reference is not registered")
        seconds = _timed(step, repeats)
    print(f"fine-tuning: {seconds:.2f} s a step of {batch} windows", flush=True)
    return {"batch": batch, "window": kronos.max_context + 1, "seconds": seconds, "fold_hours": steps * seconds / 3600}


def report(machine: dict[str, Any], model: str, batch: int, horizon: int, rows: list, tune: dict, command: str) -> str:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = [
        f"# Kronos at the universe's size: {model}",
        "",
        f"Written by `{command}` ([docs/benchmarks.md](../benchmarks.md#kronos_costpy)).",
        "",
        "Machine: "
        + ", ".join(f"{k} {v}" for k, v in machine.items() if v is not None)
        + f"; torch {torch.__version__}.",
        "",
        f"Zero-shot forecasts of {batch} origins at once, horizon {horizon}; the universe's walk-forward has "
        f"{UNIVERSE_ORIGINS:,} origins (354 tickers, 4 x 252 test dates):",
        "",
        "| context | draws | what | seconds a batch | origins a second | universe, hours |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['context']} | {r['samples']} | {r['note']} | {r['seconds']:.2f} | {r['origins_per_s']:.2f} | "
            f"{r['universe_hours']:.1f} |"
        )
    lines += [
        "",
        f"Fine-tuning (`--kronos_finetune_steps`): {tune['seconds']:.2f} s a step of {tune['batch']} windows of "
        f"{tune['window']} bars; 2,000 steps a fold: {tune['fold_hours']:.1f} hours.",
        "",
        f"Peak resident memory of the process: {peak:,.0f} MiB.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(KRONOS_PRESETS), default="small")
    parser.add_argument("--batch", type=int, default=64, help="origins a forecast batch")
    parser.add_argument("--tune_batch", type=int, default=16, help="windows a fine-tuning batch")
    parser.add_argument("--horizon", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a tiny model: a smoke run")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "kronos_cost.md")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if min(args.batch, args.tune_batch, args.horizon, args.repeats) < 1:
        parser.error("--batch, --tune_batch, --horizon and --repeats must be >= 1")
    machine = machine_info(torch.device("cpu"))
    print("machine: " + json.dumps(machine), flush=True)
    kronos = _model(args.model, args.quick)
    with torch.inference_mode():
        rows = forecast_rows(kronos, args.batch, args.horizon, args.repeats)
    tune = finetune_row(kronos, args.tune_batch, args.repeats)
    name = f"Kronos-{args.model}" + (" (tiny, a smoke run)" if args.quick else "")
    command = "python benchmarks/kronos_cost.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    text = report(machine, name, args.batch, args.horizon, rows, tune, command)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    result = {"machine": machine, "model": name, "forecast": rows, "finetune": tune}
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", flush=True)
    return result


if __name__ == "__main__":
    main()
