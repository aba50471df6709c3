"""The published forecasting models on the core against their reference code, on the same weights: how fast each
forecasts, how much memory a forecast takes, whether both give the same forecast, and (with the real weights)
how good the zero-shot forecasts are.

* Kronos: :meth:`Kronos.forecast` against the reference's ``KronosPredictor.predict_batch`` (kronos-finance's
  copy of github.com/shiyu-coder/Kronos), under the same seed and sampling settings; a context shorter than
  ``max_context`` (ours keeps keys and values as the window grows) and one that fills it (both recompute the
  sliding window at every step).
* Chronos-Bolt: :meth:`ChronosBolt.forecast` against ``ChronosBoltPipeline.predict`` (chronos-forecasting).

Weights: ``--weights DIR`` reads the published checkpoints from ``DIR``, one folder per hub repository, named
as the repository (``DIR/Kronos-small``, ``DIR/Kronos-Tokenizer-base``, ``DIR/chronos-bolt-small``: what
``huggingface-cli download NeoQuasar/Kronos-small --local-dir DIR/Kronos-small`` makes); without it both sides
get the same random weights of the published configs, which times them just as well. Zero-shot quality needs
the real weights: with ``--weights`` the last windows of the bundled MSFT daily bars are forecast (the close,
mean absolute percentage error against persistence); without, those rows say unmeasured.

Speed is the median wall time of ``--repeats`` calls (more, up to 21, for calls under a second) after a warm-up, ours and the reference alternating, and
the median CPU time of the process over the same calls (steadier than the wall time when other jobs share the
machine).
Memory is the growth of the process's resident set during one call after the warm-up, sampled every millisecond from
``/proc/self/statm`` after freed memory is handed back to the system (``malloc_trim``); the weights are held
before it and not counted. ``agree`` is the largest difference of the two forecasts relative to their scale.

Run (about 5 minutes on an idle 2-core CPU; ``--quick`` is a smoke run of a few seconds on tiny models)::

    python benchmarks/foundation.py [--weights DIR] [--models kronos-small chronos-bolt-small]
        [--repeats N] [--threads N] [--quick] [--out docs/results/foundation.md] [--json PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info  # noqa: E402

from lightning_tf.kline.published import (  # noqa: E402
    CHRONOS_BOLT_PRESETS,
    KRONOS_PRESETS,
    ChronosBolt,
    ChronosBoltConfig,
    Kronos,
    KronosConfig,
    KronosTokenizerConfig,
    calendar_stamps,
)

MODELS = [f"kronos-{s}" for s in KRONOS_PRESETS] + [f"chronos-bolt-{s}" for s in CHRONOS_BOLT_PRESETS]
DEFAULT_MODELS = ["kronos-small", "chronos-bolt-small"]
# Kronos: (batch, context, horizon, samples); Chronos-Bolt: (batch, context, horizon)
KRONOS_SETTINGS = [(1, 64, 16, 1), (4, 128, 16, 1), (1, 128, 16, 4), (1, 512, 8, 1)]
CHRONOS_SETTINGS = [(1, 512, 64), (32, 512, 64), (1, 2048, 64), (32, 2048, 64)]
QUICK_KRONOS = [(1, 16, 4, 1), (2, 24, 6, 2)]
QUICK_CHRONOS = [(1, 40, 8), (4, 64, 8)]
MAX_REPEATS = 21
# the weights folders of each model, named as their hub repositories
KRONOS_FOLDERS = {
    "mini": ("Kronos-mini", "Kronos-Tokenizer-2k"),
    "small": ("Kronos-small", "Kronos-Tokenizer-base"),
    "base": ("Kronos-base", "Kronos-Tokenizer-base"),
}


@dataclass
class Row:
    model: str
    weights: str
    batch: int
    context: int
    horizon: int
    samples: int
    ours_s: float
    reference_s: float
    speedup: float
    ours_cpu_s: float
    reference_cpu_s: float
    cpu_speedup: float
    ours_mib: float | None
    reference_mib: float | None
    agree: float


@dataclass
class Quality:
    model: str
    windows: int
    horizon: int
    mape: float | None
    persistence_mape: float | None


# ---------------------------------------------------------------------------------------------- measuring


def _rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def peak_growth(fn: Callable[[], Any]) -> tuple[Any, float | None]:
    """``fn()`` and the most its call grew the resident set, in MiB (None where /proc is missing)."""
    _trim()
    base = _rss()
    if base is None:
        return fn(), None
    peak = [base]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss() or 0)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out = fn()
    finally:
        done.set()
        watcher.join()
    peak[0] = max(peak[0], _rss() or 0)
    return out, (peak[0] - base) / 2**20


def timed(fns: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, tuple[float, float]], dict[str, Any]]:
    """The median wall and CPU seconds of each of ``fns``, called in turn (the order swapped every repeat) after a
    warm-up call of each, ``repeats`` times or more for short calls; and, from a call of each after the warm-up,
    its output and memory growth (:func:`peak_growth`)."""
    t0 = time.perf_counter()
    for fn in fns.values():  # one-time costs (thread pools, the allocator's first growth) fall on neither side
        fn()
    warm = {name: peak_growth(fn) for name, fn in fns.items()}
    # short calls repeat until each side has had about two seconds: one slow call under load moves no median
    repeats = max(repeats, min(MAX_REPEATS, int(4.0 / max(time.perf_counter() - t0, 1e-3))))
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats):
        for name in list(fns)[:: 1 if r % 2 == 0 else -1]:
            c0, t0 = time.process_time(), time.perf_counter()
            fns[name]()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in fns}, warm


def _row(model: str, source: str, setting: tuple[int, ...], t: dict[str, tuple[float, float]], warm: dict) -> Row:
    (ours_out, ours_mib), (ref_out, ref_mib) = warm["ours"], warm["reference"]
    (ours_s, ours_cpu), (ref_s, ref_cpu) = t["ours"], t["reference"]
    return Row(
        model,
        source,
        *setting,
        ours_s,
        ref_s,
        ref_s / ours_s,
        ours_cpu,
        ref_cpu,
        ref_cpu / ours_cpu,
        ours_mib,
        ref_mib,
        _agree(ours_out, ref_out),
    )


def _agree(ours: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(ours - reference).max() / max(np.abs(reference).max(), 1e-12))


# ---------------------------------------------------------------------------------------------- Kronos


def _kronos_reference() -> Any:
    import kronos_finance._vendor.kronos_model.kronos as reference  # the package's only copy of the code

    return reference


def _tiny_kronos() -> tuple[KronosConfig, KronosTokenizerConfig, int]:
    return (
        KronosConfig(s1_bits=4, s2_bits=4, n_layers=2, d_model=32, n_heads=4, d_ff=48),
        KronosTokenizerConfig(d_model=32, n_heads=4, d_ff=48, n_enc_layers=2, n_dec_layers=2, s1_bits=4, s2_bits=4),
        32,
    )


def load_kronos(size: str, weights: Path | None, quick: bool) -> tuple[Kronos, Any, Any, str]:
    """Ours and the reference's (tokenizer, model) on the same weights, and where the weights come from."""
    ref = _kronos_reference()
    if weights is not None:
        model_dir, tokenizer_dir = (weights / name for name in KRONOS_FOLDERS[size])
        ours = Kronos.from_pretrained(model_dir, tokenizer_dir, max_context=KRONOS_PRESETS[size][2])
        ref_tok = ref.KronosTokenizer.from_pretrained(tokenizer_dir).eval()
        ref_model = ref.Kronos.from_pretrained(model_dir).eval()
        return ours, ref_tok, ref_model, str(model_dir)
    model_config, tokenizer_config, max_context = _tiny_kronos() if quick else KRONOS_PRESETS[size]
    torch.manual_seed(0)
    ref_tok = ref.KronosTokenizer(**tokenizer_config.to_reference()).eval()
    ref_model = ref.Kronos(**model_config.to_reference()).eval()
    ours = Kronos(model_config, tokenizer_config, max_context=max_context)
    ours.load_reference_weights(ref_model.state_dict(), ref_tok.state_dict())
    return ours.eval(), ref_tok, ref_model, "random" if not quick else "random, tiny"


def _bars(batch: int, n: int, seed: int = 0) -> tuple[torch.Tensor, list[Any]]:
    """Random-walk bars and hourly time stamps (context and horizon)."""
    import pandas as pd

    g = torch.Generator().manual_seed(seed)
    close = 50 + torch.randn(batch, n, generator=g).cumsum(1)
    open_ = close + torch.randn(batch, n, generator=g) * 0.3
    high = torch.maximum(open_, close) + torch.rand(batch, n, generator=g)
    low = torch.minimum(open_, close) - torch.rand(batch, n, generator=g)
    volume = 1e4 * (1 + torch.rand(batch, n, generator=g))
    bars = torch.stack((open_, high, low, close, volume, volume * close), -1)
    times = [pd.date_range("2024-01-01", periods=n + 512, freq="h") for _ in range(batch)]
    return bars, times


def bench_kronos(size: str, weights: Path | None, quick: bool, repeats: int) -> list[Row]:
    import pandas as pd

    ours, ref_tok, ref_model, source = load_kronos(size, weights, quick)
    predictor = _kronos_reference().KronosPredictor(ref_model, ref_tok, device="cpu", max_context=ours.max_context)
    columns = ["open", "high", "low", "close", "volume", "amount"]
    rows = []
    for batch, n, horizon, samples in QUICK_KRONOS if quick else KRONOS_SETTINGS:
        bars, times = _bars(batch, n)
        stamps = torch.stack([calendar_stamps(t[: n + horizon]) for t in times])
        frames = [pd.DataFrame(bars[b].double().numpy(), columns=columns) for b in range(batch)]
        xs = [pd.Series(t[:n]) for t in times]
        ys = [pd.Series(t[n : n + horizon]) for t in times]

        def reference() -> np.ndarray:
            torch.manual_seed(1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = predictor.predict_batch(
                    frames, xs, ys, pred_len=horizon, sample_count=samples, top_p=0.9, verbose=False
                )
            return np.stack([o.to_numpy() for o in out])

        def mine() -> np.ndarray:
            torch.manual_seed(1)
            out = ours.forecast(bars, stamps[:, :n], stamps[:, n:], samples=samples, top_p=0.9)
            return out.mean(1).double().numpy()

        t, warm = timed({"ours": mine, "reference": reference}, repeats)
        name = "kronos-quick" if quick else f"kronos-{size}"
        rows.append(_row(name, source, (batch, n, horizon, samples), t, warm))
    return rows


# ---------------------------------------------------------------------------------------------- Chronos-Bolt


def _tiny_chronos() -> ChronosBoltConfig:
    return ChronosBoltConfig(
        d_model=32,
        n_heads=4,
        d_head=8,
        n_layers=2,
        n_decoder_layers=2,
        d_ff=48,
        context_length=64,
        prediction_length=8,
        patch_size=4,
        patch_stride=4,
    )


def load_chronos(size: str, weights: Path | None, quick: bool) -> tuple[ChronosBolt, Any, str]:
    """Ours and the reference's pipeline on the same weights, and where the weights come from."""
    from chronos import ChronosBoltPipeline
    from chronos.chronos_bolt import ChronosBoltModelForForecasting
    from transformers import T5Config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if weights is not None:
            folder = weights / f"chronos-bolt-{size}"
            return ChronosBolt.from_pretrained(folder), ChronosBoltPipeline.from_pretrained(folder), str(folder)
        config = _tiny_chronos() if quick else CHRONOS_BOLT_PRESETS[size]
        torch.manual_seed(0)
        ref = ChronosBoltModelForForecasting(T5Config(**config.to_reference())).eval()
    ours = ChronosBolt(config)
    ours.load_reference_weights(ref.state_dict())
    return ours.eval(), ChronosBoltPipeline(ref), "random" if not quick else "random, tiny"


def bench_chronos(size: str, weights: Path | None, quick: bool, repeats: int) -> list[Row]:
    ours, pipeline, source = load_chronos(size, weights, quick)
    rows = []
    for batch, n, horizon in QUICK_CHRONOS if quick else CHRONOS_SETTINGS:
        g = torch.Generator().manual_seed(0)
        context = 10 + torch.randn(batch, n, generator=g).cumsum(1)
        context[: batch // 2, : n // 4] = float("nan")  # half the series shorter, left-padded

        def reference() -> np.ndarray:
            return pipeline.predict(context, prediction_length=horizon).numpy()  # (B, Q, F)

        def mine() -> np.ndarray:
            return ours.forecast(context, horizon).transpose(1, 2).numpy()

        t, warm = timed({"ours": mine, "reference": reference}, repeats)
        name = "chronos-bolt-quick" if quick else f"chronos-bolt-{size}"
        rows.append(_row(name, source, (batch, n, horizon, 1), t, warm))
    return rows


# ---------------------------------------------------------------------------------------------- quality


def zero_shot_quality(model: str, weights: Path, horizon: int = 10, windows: int = 20) -> Quality:
    """The mean absolute percentage error of the close over ``horizon`` days, averaged over the last ``windows``
    non-overlapping origins of data/msft.csv (context 512 days), and persistence's on the same windows."""
    import pandas as pd

    frame = pd.read_csv(ROOT / "data" / "msft.csv", parse_dates=["Date"])
    bars = torch.tensor(frame[["Open", "High", "Low", "Close", "Volume"]].to_numpy(), dtype=torch.float64)
    close = bars[:, 3]
    n, errors, naive = 512, [], []
    ends = [len(frame) - horizon - i * horizon for i in range(windows)][::-1]
    if model.startswith("kronos"):
        ours, _, _, _ = load_kronos(model.split("-", 1)[1], weights, quick=False)
        stamps = calendar_stamps(frame["Date"])
        # the horizon's stamps are the next rows' (trading days), known in a backtest
    else:
        chronos, _, _ = load_chronos(model.split("-", 2)[2], weights, quick=False)
    for end in ends:
        truth = close[end : end + horizon]
        if model.startswith("kronos"):
            torch.manual_seed(0)
            out = ours.forecast(bars[end - n : end], stamps[end - n : end], stamps[end : end + horizon], samples=5)
            pred = out.mean(1)[0, :, 3].double()
        else:
            pred = chronos.forecast(close[end - n : end].float(), horizon)[0, :, 4].double()  # the median
        errors.append(((pred - truth).abs() / truth).mean().item())
        naive.append(((close[end - 1] - truth).abs() / truth).mean().item())
    return Quality(model, windows, horizon, 100 * float(np.mean(errors)), 100 * float(np.mean(naive)))


# ---------------------------------------------------------------------------------------------- report


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("kronos-finance", "chronos-forecasting", "transformers"):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found)


def report(machine: dict[str, Any], rows: list[Row], quality: list[Quality], weights: Path | None, command: str) -> str:
    lines = [
        "# Published forecasting models: ours against the reference code",
        "",
        f"Written by `{command}`; [docs/kline.md](../kline.md#starting-from-a-published-model) explains the "
        "models, [docs/benchmarks.md](../benchmarks.md#foundationpy) the columns.",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items() if v is not None) + f"; {_versions()}.",
        "",
        "Weights: "
        + (
            "the published checkpoints."
            if weights
            else "random, in the published configs (both sides the same); speed and memory do not depend on the values."
        ),
        "",
        "Kronos reads at most `max_context` tokens (512 for -small and -base, 2048 for -mini): where the context "
        "fills that window from the start, both sides recompute it at every new bar; where it grows, ours keeps its "
        "keys and values and the reference recomputes it.",
        "",
        "| model | batch | context | horizon | samples | ours s | reference s | speed-up | speed-up, CPU time "
        "| ours MiB | reference MiB | agree |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.batch} | {r.context} | {r.horizon} | {r.samples} | {r.ours_s:.3f} | "
            f"{r.reference_s:.3f} | {r.speedup:.2f}x | {r.cpu_speedup:.2f}x | {_mib(r.ours_mib)} | "
            f"{_mib(r.reference_mib)} | {r.agree:.1e} |"
        )
    lines += ["", "## Zero-shot quality", ""]
    if not quality:
        lines.append("Unmeasured: it needs the published weights (`--weights DIR`); random weights forecast nothing.")
    else:
        lines += [
            "MSFT daily closes (data/msft.csv), the last non-overlapping windows, context 512 days: the mean absolute "
            "percentage error of the close over the horizon (Kronos: the mean of 5 samples; Chronos-Bolt: the "
            "median), and the last close carried forward on the same windows.",
            "",
            "| model | windows | horizon | MAPE % | persistence MAPE % |",
            "|---|---:|---:|---:|---:|",
        ]
        for q in quality:
            lines.append(f"| {q.model} | {q.windows} | {q.horizon} | {q.mape:.2f} | {q.persistence_mape:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", type=Path, default=None, help="folder of the published checkpoints")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=DEFAULT_MODELS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="tiny random models, a smoke run")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "foundation.md")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.weights is not None and not args.weights.is_dir():
        parser.error(f"--weights {args.weights}: no such folder")
    if args.weights is not None and args.quick:
        parser.error("--quick builds tiny random models; leave out --weights")
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = machine_info(torch.device("cpu"))
    print("machine: " + json.dumps(machine), flush=True)
    rows: list[Row] = []
    quality: list[Quality] = []
    for model in args.models:
        size = model.rsplit("-", 1)[1]
        bench = bench_kronos if model.startswith("kronos") else bench_chronos
        with torch.inference_mode():
            rows += bench(size, args.weights, args.quick, args.repeats)
            if args.weights is not None:
                quality.append(zero_shot_quality(model, args.weights))
        for r in rows[-1:]:
            print(f"{model}: done ({r.weights})", flush=True)
    command = "python benchmarks/foundation.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    text = report(machine, rows, quality, args.weights, command)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    result = {"machine": machine, "rows": [asdict(r) for r in rows], "quality": [asdict(q) for q in quality]}
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
