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
mean absolute percentage error against persistence); without, those rows say unmeasured. With ``--weights``,
Chronos-Bolt also goes through the K-line forecaster (``pretrained:`` its folder): zero-shot on ETTh1 at horizon
96 from 512 steps (``--etth1 PATH``, the long-term protocol's MSE and MAE on the standardised scale, beside this
package's own models on the same windows from docs/results/ett_etth1.json), and with ``--walkforward`` on the
universe (``--universe PATH``, configs/kline/us_universe.yaml's four yearly folds): zero-shot and fine-tuned
(configs/kline/chronos_bolt.yaml) beside LightGBM and the linear path of the same folds and this package's
pretrained model (docs/results/pretrain.json); with a Kronos among ``--models``, the zero-shot walk-forward also
forecasts with it from the raw bars, as published and fine-tuned on each fold's training bars (``walkforward --kronos``:
its max_context less the horizon, the mean of 5 draws; 2,000 fine-tuning steps). ``--quick`` runs those on tiny random weights (a smoke run).

Speed is the median wall time of ``--repeats`` calls (more, up to 21, for calls under a second) after a warm-up, ours and the reference alternating, and
the median CPU time of the process over the same calls (steadier than the wall time when other jobs share the
machine).
Memory is the growth of the process's resident set during one call after the warm-up, sampled every millisecond from
``/proc/self/statm`` after freed memory is handed back to the system (``malloc_trim``); the weights are held
before it and not counted. ``agree`` is the largest difference of the two forecasts relative to their scale.

Run (about 5 minutes on an idle 2-core CPU; ``--quick`` is a smoke run of a few seconds on tiny models)::

    python benchmarks/foundation.py [--weights DIR] [--models kronos-small chronos-bolt-small]
        [--repeats N] [--threads N] [--quick] [--out docs/results/foundation.md] [--json PATH]
        [--etth1 PATH] [--walkforward] [--universe PATH] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
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
SHARED = ROOT.parent / "shared" / "data"
ETTH1 = SHARED / "ett" / "ETTh1.csv"
UNIVERSE = SHARED / "kline_us_universe" / "us_stocks_2005_2012.csv.gz"
#: the universe walk-forward's rows: (title, the walk-forward's arguments beside the universe config; {folder}: the
#: published model's folder)
UNIVERSE_ROWS = {
    "zero_shot": ("Chronos-Bolt, zero-shot", ["--zero_shot", "{folder}", "--no_lightgbm"]),
    "fine_tuned": (
        "Chronos-Bolt, fine-tuned (chronos_bolt.yaml)",
        ["--config", str(ROOT / "configs" / "kline" / "chronos_bolt.yaml"), "--model.init_args.pretrained={folder}"],
    ),
}
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


def chronos_folder(size: str, weights: Path | None, workdir: Path) -> Path:
    """The folder of Chronos-Bolt's files: the published one under ``weights``, or (a smoke run) tiny random
    weights written to ``workdir``."""
    if weights is not None:
        return weights / f"chronos-bolt-{size}"
    torch.manual_seed(0)
    return ChronosBolt(_tiny_chronos()).to_chronos_bolt(workdir / "chronos-bolt-quick")


def etth1_zero_shot(
    folder: Path, path: Path, context: int = 512, horizon: int = 96, max_windows: int | None = None
) -> dict[str, Any]:
    """The K-line forecaster started from ``folder`` (Chronos-Bolt alone) on ETTh1's test windows: the long-term
    protocol's MSE and MAE (the test windows in order in batches of 128, the last incomplete one dropped, as the
    published loaders score), on the training months' standardised scale; and this package's own rows at the same
    context and horizon."""
    from ett import published_protocol

    from lightning_tf.kline import KLineForecaster, MultivariateDataModule

    config = ChronosBolt.from_pretrained(folder).config
    context = min(context, config.context_length)
    dm = MultivariateDataModule(str(path), context_len=context, horizon=horizon, features="M", batch_size=128)
    dm.setup("test")
    model = KLineForecaster(
        n_features=dm.n_features,
        n_targets=dm.n_targets,
        context_len=context,
        horizon=horizon,
        target_channels=list(range(dm.n_targets)),
        pretrained=str(folder),
        residual="only",
        baselines=False,
    ).eval()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the roll-out past the model's horizon says so once per batch
        mse, mae = published_protocol(model, dm, max_windows=max_windows)
    seconds = time.perf_counter() - t0
    ours = {}
    saved = ROOT / "docs" / "results" / "ett_etth1.json"
    if saved.exists():
        for row in json.loads(saved.read_text(encoding="utf-8"))["rows"]:
            if (row["context_len"], row["horizon"]) == (context, horizon):
                ours = {"mse": row["published_mse"], "mae": row.get("published_mae"), "linear_mse": row["linear_mse"]}
    return {
        "context": context,
        "horizon": horizon,
        "windows": len(dm.datasets["test"]) if max_windows is None else min(max_windows, len(dm.datasets["test"])),
        "mse": mse,
        "mae": mae,
        "seconds": seconds,
        "ours": ours,
    }


def kronos_folder(size: str, weights: Path | None, workdir: Path) -> tuple[Path, Path]:
    """The folders of Kronos's model and tokenizer: the published ones under ``weights``, or (a smoke run) tiny
    random weights that ``to_kronos`` writes to ``workdir``."""
    if weights is not None:
        model_dir, tokenizer_dir = (weights / name for name in KRONOS_FOLDERS[size])
        return model_dir, tokenizer_dir
    model_config, tokenizer_config, max_context = _tiny_kronos()
    torch.manual_seed(0)
    out = Kronos(model_config, tokenizer_config, max_context=max_context).to_kronos(workdir / "kronos-tiny")
    return out, out / "tokenizer"


def universe_walkforward(
    folder: Path, universe: Path, workdir: Path, quick: bool, kronos: tuple[Path, Path] | None = None
) -> dict[str, Any]:
    """Chronos-Bolt zero-shot and fine-tuned walk-forwards on the universe, each its own ``lightning-tf walkforward``
    process (its output in ``workdir``): pooled RankIC and net long-short figures beside LightGBM and the linear path
    of the same folds, and each row's time and peak memory. With ``kronos`` (its model's and tokenizer's folders),
    the zero-shot walk-forward also forecasts with Kronos from the raw bars (``--kronos``), as published and
    fine-tuned on each fold's training bars: its rows beside them."""
    import pandas as pd

    from lightning_tf.kline.universe.report import default_top_k, evaluate_forecasters

    folds = ["--folds", "2", "--test_span", "60", "--val_span", "40"] if quick else ["--folds", "4"]
    folds += [] if quick else ["--test_span", "252", "--val_span", "126"]
    trainer = ["--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
    if quick:
        trainer += ["--trainer.max_epochs=1", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=3"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    pooled: dict[str, dict] = {}
    runs: dict[str, dict] = {}
    for row, (title, extra) in UNIVERSE_ROWS.items():
        out = workdir / "walkforward" / row
        command = [
            "walkforward",
            "--config",
            str(ROOT / "configs" / "trainer" / "default.yaml"),
            "--config",
            str(ROOT / "configs" / "kline" / "us_universe.yaml"),
            *[a.format(folder=folder) for a in extra],
            *(_kronos_args(kronos, quick) if kronos is not None and row == "zero_shot" else []),
            f"--data.init_args.path={universe}",
            *folds,
            "--cost_bps",
            "10",
            "--out",
            str(out),
            *trainer,
        ]
        out.parent.mkdir(parents=True, exist_ok=True)
        log = workdir / "walkforward" / f"{row}.log"
        print(f"=== {row}: lightning-tf {' '.join(command)} (output: {log})", flush=True)
        t0 = time.perf_counter()
        with log.open("w", encoding="utf-8") as sink:
            proc = subprocess.Popen([sys.executable, "-m", "lightning_tf", *command], stdout=sink, stderr=sink, env=env)
            _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            raise SystemExit(f"{row}: walkforward failed; see {log}:\n" + "\n".join(tail))
        runs[row] = {"seconds": time.perf_counter() - t0, "peak_rss_mib": usage.ru_maxrss / 1024, "out": str(out)}
        predictions = pd.read_parquet(out / "predictions.parquet")
        top_k = default_top_k(predictions)
        ev = evaluate_forecasters(predictions, top_k=top_k, n_drop=max(1, top_k // 5), cost_bps=10.0)
        pooled[title] = ev.pooled["model"].summary
        for name in ("Kronos zero-shot", "Kronos fine-tuned"):
            if name in ev.pooled:
                pooled[f"{name.replace(' ', ', ', 1)} (from the raw bars)"] = ev.pooled[name].summary
        for name in ("LightGBM", "linear path"):
            if name in ev.pooled and row == "fine_tuned":
                pooled[name] = ev.pooled[name].summary
    saved = ROOT / "docs" / "results" / "pretrain.json"
    if saved.exists() and not quick:
        theirs = json.loads(saved.read_text(encoding="utf-8"))["tables"]["pooled"]
        for name in ("pretrained, fine-tuned", "pretrained, zero-shot"):
            if name in theirs:
                pooled[f"this package's {name} (docs/results/pretrain.md)"] = theirs[name]
    return {"pooled": pooled, "runs": runs}


def _kronos_args(kronos: tuple[Path, Path], quick: bool) -> list[str]:
    model_dir, tokenizer_dir = kronos
    context = ["--kronos_context", "24"] if quick else ["--kronos_samples", "5"]  # else max_context less the horizon
    context += ["--kronos_finetune_steps", "4" if quick else "2000"]
    return ["--kronos", str(model_dir), "--kronos_tokenizer", str(tokenizer_dir), *context]


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


def _forecaster_section(forecaster: dict[str, Any], quick: bool) -> list[str]:
    lines = ["", "## Chronos-Bolt through the K-line forecaster", ""]
    if not forecaster:
        return [
            *lines,
            "Unmeasured: it needs the published weights (`--weights DIR`; `--walkforward` for the universe). "
            "The rows would be Chronos-Bolt zero-shot on ETTh1 (horizon 96) and zero-shot and fine-tuned on the "
            "universe's walk-forward, with Kronos zero-shot from the raw bars beside them, and this package's own "
            "models.",
        ]
    if quick:
        lines += ["A smoke run: tiny random weights, a generated data set; the numbers mean nothing.", ""]
    for model, found in forecaster.items():
        ett = found.get("etth1")
        if ett:
            ours = ett["ours"]
            lines += [
                f"**{model} on ETTh1**, context {ett['context']}, horizon {ett['horizon']}, {ett['windows']:,} test "
                f"windows, the long-term protocol's scoring ({ett['seconds']:.0f} s):",
                "",
                "| model | MSE | MAE |",
                "|---|---:|---:|",
                f"| {model}, zero-shot | {ett['mse']:.4f} | {ett['mae']:.4f} |",
            ]
            if ours:
                lines.append(
                    f"| this package's model (docs/results/ett_etth1.md) | {ours['mse']:.4f} | {ours['mae']:.4f} |"
                )
            lines.append("")
        universe = found.get("universe")
        if universe:
            lines += [
                f"**{model} on the universe**, walk-forward (pooled over the folds, 10 bp a unit of turnover):",
                "",
                "| model | RankIC | RankICIR | long-short net IR | turnover a date |",
                "|---|---:|---:|---:|---:|",
            ]
            for name, s in universe["pooled"].items():
                cells = [s.get(k) for k in ("rank_ic_mean", "rank_icir", "long_short_information_ratio")]
                turnover = s.get("long_short_turnover")
                text = " | ".join("n/a" if v is None else f"{v:+.4f}" for v in cells)
                lines.append(f"| {name} | {text} | {'n/a' if turnover is None else f'{turnover:.2f}'} |")
            for row, run in universe["runs"].items():
                lines.append("")
                lines.append(f"{row}: {run['seconds'] / 60:.1f} min, peak {run['peak_rss_mib']:.0f} MiB ({run['out']})")
            lines.append("")
    return lines


def report(
    machine: dict[str, Any],
    rows: list[Row],
    quality: list[Quality],
    weights: Path | None,
    command: str,
    forecaster: dict[str, Any] | None = None,
    quick: bool = False,
) -> str:
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
    lines += _forecaster_section(forecaster or {}, quick)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", type=Path, default=None, help="folder of the published checkpoints")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=DEFAULT_MODELS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="tiny random models, a smoke run")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "foundation.md")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--etth1", type=Path, default=None, help=f"ETTh1.csv (default with --weights: {ETTH1})")
    parser.add_argument(
        "--walkforward", action="store_true", help="Chronos-Bolt's (and Kronos's) walk-forwards on the universe"
    )
    parser.add_argument("--universe", type=Path, default=UNIVERSE, help=f"the universe file (default {UNIVERSE})")
    parser.add_argument("--workdir", type=Path, default=ROOT / "runs" / "benchmarks" / "foundation")
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
    forecaster: dict[str, Any] = {}
    etth1 = args.etth1 if args.etth1 is not None or args.quick else ETTH1
    # Kronos's walk-forward row rides on Chronos-Bolt's zero-shot walk-forward (no fold trains there)
    kronos = next((m.rsplit("-", 1)[1] for m in args.models if m.startswith("kronos")), None)
    kronos_dirs = None
    if args.walkforward and kronos is not None and (args.weights is not None or args.quick):
        kronos_dirs = kronos_folder(kronos, args.weights, args.workdir)
    for model in args.models:
        size = model.rsplit("-", 1)[1]
        bench = bench_kronos if model.startswith("kronos") else bench_chronos
        with torch.inference_mode():
            rows += bench(size, args.weights, args.quick, args.repeats)
            if args.weights is not None:
                quality.append(zero_shot_quality(model, args.weights))
            through = etth1 is not None and etth1.exists() or args.walkforward  # the forecaster's rows asked for
            if model.startswith("chronos") and (args.weights is not None or args.quick) and through:
                found: dict[str, Any] = {}
                folder = chronos_folder(size, args.weights, args.workdir)
                if etth1 is not None and etth1.exists():
                    # a smoke run: two passes of the tiny model (its horizon is 8) over 256 windows
                    quick = {"horizon": 16, "max_windows": 256} if args.quick else {}
                    found["etth1"] = etth1_zero_shot(folder, etth1, **quick)
                if args.walkforward:
                    found["universe"] = universe_walkforward(
                        folder, args.universe, args.workdir, args.quick, kronos_dirs
                    )
                if found:
                    forecaster["chronos-bolt-quick" if args.quick else model] = found
        for r in rows[-1:]:
            print(f"{model}: done ({r.weights})", flush=True)
    command = "python benchmarks/foundation.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    text = report(machine, rows, quality, args.weights, command, forecaster, args.quick)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    result = {
        "machine": machine,
        "rows": [asdict(r) for r in rows],
        "quality": [asdict(q) for q in quality],
        "forecaster": forecaster,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
