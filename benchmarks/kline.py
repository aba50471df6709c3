"""K-line forecasting on the embedded MSFT daily bars, in two parts, one run.

(a) Accuracy: the default config (``configs/kline/msft_daily.yaml``: 64 bars of context, next 5 daily
    log returns; a linear path plus a Transformer residual kept only where its validation gain over the
    linear path exceeds one standard error) is trained for the config's epochs with its early stopping,
    the best epoch on validation loss is tested, and the model is compared with the baselines on
    exactly the same test windows: persistence (zero return), the mean return of the context (drift) and the best closed-form linear
    model (Linear or DLinear, chosen on validation). Errors are in log-return units and on the closes
    rebuilt from the returns; direction and information coefficient beside the share of up moves.
    Beside the errors, the backtest of each forecast's sign on the test days (long/flat, the config's
    cost per side) against buy-and-hold.

(b) Speed: training windows per second (forward, MSE, backward, AdamW step) and inference windows
    per second of our forecaster against the same architecture whose encoder is
    ``torch.nn.TransformerEncoder`` (Pre-LN, learned positions, final LayerNorm), with our encoder's
    weights copied in; the two are checked to compute the same forecast before timing, then run
    alternately, and each reports the median of the repeats. Both are the Transformer alone
    (``residual: only``), so the check compares the encoders.

Run (about 3 minutes on a 2-core CPU; ``--quick`` is a < 60 s smoke run)::

    python benchmarks/kline.py [--epochs N] [--device cpu|cuda] [--threads N] [--repeats N] [--quick] [--json PATH]
        [--out docs/results/kline_msft] [--skip-accuracy] [--skip-speed] [--model NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info, sync
from ett import load_config, parse_overrides

from lightning_tf.kline import KLineDataModule, KLineForecaster
from lightning_tf.kline.evaluation.backtest import format_stat

CONFIG = ROOT / "configs" / "kline" / "msft_daily.yaml"
METRICS = ("mse", "mae", "rmse", "mase", "dir_acc", "up_share", "ic", "rank_ic")
BACKTEST = ("cum_return", "sharpe", "max_drawdown", "turnover", "hit_rate", "exposure")
FORECASTS = ("model", "persistence", "mean", "drift", "linear")


# ---------------------------------------------------------------------------------------------
# (a) accuracy


def accuracy(args: argparse.Namespace) -> dict:
    model_args, data_args, trainer_args, stopping = load_config(CONFIG, args.model)
    L.seed_everything(0, verbose=False)
    dm = KLineDataModule.from_arguments(data_args)
    model = KLineForecaster(**model_args)
    epochs = args.epochs or trainer_args.get("max_epochs", 10)
    ckpt = ModelCheckpoint(dirpath=args.workdir, monitor="val/loss", mode="min", save_top_k=1)
    callbacks: list[Callback] = [ckpt]
    if stopping:
        callbacks.append(EarlyStopping(stopping["monitor"], mode="min", patience=stopping["patience"]))
    trainer = L.Trainer(
        max_epochs=epochs,
        gradient_clip_val=trainer_args.get("gradient_clip_val"),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        num_sanity_val_steps=0,
        limit_train_batches=args.limit_batches,
        limit_val_batches=args.limit_batches,
    )
    t0 = time.perf_counter()
    trainer.fit(model, dm)
    train_s = time.perf_counter() - t0
    trainer.test(model, dm, ckpt_path="best", verbose=False)
    b = next(iter(dm.borders.values()))
    return {
        "summary": model.test_summary,
        "epochs": epochs,
        "epochs_run": trainer.current_epoch,
        "train_s": train_s,
        "best": Path(ckpt.best_model_path).name,
        "windows": {s: len(dm.datasets[s]) for s in ("train", "val", "test")},
        "test_period": f"{b['test_start']:%Y-%m-%d} .. {dm.bars['timestamp'].iloc[-1]:%Y-%m-%d}"
        if b.get("test_start") is not None
        else "?",
        "val_start": f"{b['val_start']:%Y-%m-%d}" if b.get("val_start") is not None else "?",
    }


def accuracy_table(summary: dict, scale: str) -> str:
    lines = ["| forecast | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for name, scales in summary.items():
        if name in FORECASTS and scale in scales:
            v = scales[scale]
            lines.append(f"| {name} | " + " | ".join(f"{v.get(m, float('nan')):.4g}" for m in METRICS) + " |")
    return "\n".join(lines)


def verdicts(summary: dict, scale: str) -> list[str]:
    model = summary["model"][scale]
    out = []
    for name, scales in summary.items():
        if name == "model" or name not in FORECASTS or scale not in scales:
            continue
        v = scales[scale]
        beats = model["mse"] < v["mse"] and model["mae"] < v["mae"]
        tie = model["mse"] == v["mse"] and model["mae"] == v["mae"]
        out.append(
            f"model {'ties' if tie else 'beats' if beats else 'does NOT beat'} {name} ({scale}): "
            f"MSE {model['mse']:.4g} vs {v['mse']:.4g} ({model['mse'] / v['mse'] - 1:+.1%}), "
            f"MAE {model['mae']:.4g} vs {v['mae']:.4g} ({model['mae'] / v['mae'] - 1:+.1%})"
        )
    return out


def backtest_table(bt: dict) -> str:
    lines = ["| strategy | " + " | ".join(BACKTEST) + " |", "|---|" + "---|" * len(BACKTEST)]
    for name, values in bt["strategies"].items():
        cells = [format_stat(m, values[m]) for m in BACKTEST]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# (b) speed


class TorchEncoder(nn.Module):
    """Our :class:`~lightning_tf.core.Encoder`'s function on ``torch.nn.TransformerEncoder``:
    learned positions, input dropout, Pre-LN layers, final LayerNorm."""

    def __init__(self, ours: nn.Module, d_model: int, n_heads: int, n_layers: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.pos = nn.Parameter(ours.pos.absolute.weight.detach().clone())
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, d_ff, dropout, activation="relu", batch_first=True, norm_first=True
        )
        self.stack = nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        state = {}
        for name, value in ours.state_dict().items():
            if name.startswith("layers."):
                name = name.replace("layers.", "stack.layers.", 1)
                name = name.replace("self_attn.qkv_proj.", "self_attn.in_proj_").replace("ff.linear", "linear")
                state[name] = value
            elif name.startswith("norm."):
                state["stack." + name] = value
        self.load_state_dict({**state, "pos": self.pos.detach()}, strict=True)

    def forward(self, x: Tensor) -> Tensor:
        x = self.dropout(x + self.pos[: x.shape[1]])  # (B, N, D)
        return self.stack(x)  # (B, N, D)


def speed(args: argparse.Namespace) -> list[dict]:
    model_args, data_args, _, _ = load_config(CONFIG, args.model)
    torch.manual_seed(0)
    ours = KLineForecaster(**{**model_args, "residual": "only"})  # the Transformer alone: the encoders are compared
    h = ours.hparams
    ref = copy.deepcopy(ours)
    d_ff = h.d_ff or 4 * h.d_model
    ref.net.backbone.encoder = TorchEncoder(
        ours.net.backbone.encoder, h.d_model, h.n_heads, h.n_layers, d_ff, h.dropout
    )
    dm = KLineDataModule.from_arguments(
        {**data_args, "loading": {**data_args.get("loading", {}), "batch_size": args.batch_size}}
    )
    dm.setup("fit")
    ours.target_channels = ref.target_channels = dm.target_channels
    batch = next(iter(dm.train_dataloader()))
    x, y = batch["x"], batch["y"]
    ours.eval(), ref.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x), rtol=1e-4, atol=1e-5)  # same function before timing
    device = torch.device(args.device)  # checked on the CPU in float32, timed on the device
    ours, ref, x, y = ours.to(device), ref.to(device), x.to(device), y.to(device)
    rows = []
    for mode in ("train", "eval"):
        fns = {name: step_fn(m, x, y, mode) for name, m in (("ours", ours), ("torch", ref))}
        for fn in fns.values():
            for _ in range(args.warmup):
                fn()
        times: dict[str, list[float]] = {"ours": [], "torch": []}
        for r in range(args.repeats):
            for name in ("ours", "torch") if r % 2 == 0 else ("torch", "ours"):
                sync(device)
                t0 = time.perf_counter()
                fns[name]()
                sync(device)
                times[name].append(time.perf_counter() - t0)
        B = x.shape[0]
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append(
            {
                "mode": mode,
                "batch": B,
                "ours_wps": B / med["ours"],
                "torch_wps": B / med["torch"],
                "ratio": med["torch"] / med["ours"],
            }
        )
    return rows


def step_fn(model: KLineForecaster, x: Tensor, y: Tensor, mode: str):
    if mode == "eval":

        def run() -> None:
            model.eval()
            with torch.inference_mode():
                model(x)

        return run
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train() -> None:
        model.train()
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        opt.step()

    return train


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=None, help="default: the config's max_epochs")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the speed part runs")
    p.add_argument("--batch-size", type=int, default=128, help="windows per batch in the speed test")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 epoch on a few batches, few repeats")
    p.add_argument(
        "--model",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="override model arguments of the config, e.g. --model revin=false d_model=64",
    )
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--out", type=Path, default=None, help="write the accuracy and backtest tables to STEM.md and STEM.json"
    )
    p.add_argument("--workdir", type=Path, default=Path("runs") / "bench_kline")
    args = p.parse_args(argv)
    args.limit_batches = None
    if args.quick:
        args.epochs, args.limit_batches, args.repeats, args.warmup = 1, 5, 3, 1
    return args


def accuracy_report(acc: dict, args: argparse.Namespace, info: dict) -> str:
    """The accuracy tables, the verdicts, the selection line and the backtest, as markdown."""
    s = acc["summary"]
    with_ = f" with {' '.join(args.model)}" if args.model else ""
    out = [
        f"# MSFT daily, next 5 log returns: {CONFIG.relative_to(ROOT)}{with_}",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores (shared), {info['threads']} thread(s), "
        f"torch {info['torch']}. {acc['epochs_run']} epochs run (at most {acc['epochs']}) in "
        f"{acc['train_s'] / 60:.1f} min, best {acc['best']}; "
        f"windows {acc['windows']}; validation from {acc['val_start']}, test {acc['test_period']}"
        + (" (QUICK smoke run)" if args.quick else "")
        + ".",
        "",
    ]
    for line in s.get("about", {}).values():
        out.append(f"- {line}")
    for scale, title in (("orig", "next-5-day log returns"), ("price", "closes rebuilt from the returns")):
        out += ["", f"Test windows, {title}:", "", accuracy_table(s, scale), ""]
        out += [f"- {v}" for v in verdicts(s, scale)]
    if "backtest" in s:
        bt = s["backtest"]
        out += [
            "",
            f"Backtest of the next-day forecast's sign on the {bt['bars']} test days "
            f"({'long/short' if bt['short'] else 'long/flat'}, {bt['cost_bps']:g} bp per side):",
            "",
            backtest_table(bt),
            "",
            f"- {bt['verdict']}",
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    info = machine_info(torch.device(args.device))
    print(f"machine: {info}")
    out: dict = {"machine": info}
    if not args.skip_accuracy:
        acc = accuracy(args)
        out["accuracy"] = acc
        print(
            f"\n(a) {CONFIG.relative_to(ROOT)}{' with ' + ' '.join(args.model) if args.model else ''}: {acc['epochs']} epochs in {acc['train_s']:.0f} s, best {acc['best']}; "
            f"windows {acc['windows']}; validation from {acc['val_start']}, test {acc['test_period']}"
            + (" (QUICK smoke run)" if args.quick else "")
        )
        report = accuracy_report(acc, args, info)
        print(report)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.with_suffix(".md").write_text(report + "\n")
            payload = {"machine": info, "accuracy": acc}
            args.out.with_suffix(".json").write_text(json.dumps(payload, indent=2, default=str))
    backbone = parse_overrides(args.model).get("backbone", "patches")
    if not args.skip_speed and backbone != "patches":
        print(f"\n(b) skipped: the torch.nn.TransformerEncoder copy is of the patch Transformer, not of {backbone}")
    elif not args.skip_speed:
        rows = speed(args)
        out["speed"] = rows
        print(f"\n(b) windows/s, batch {rows[0]['batch']}, {args.threads} thread(s), median of {args.repeats}:")
        print("| mode | ours windows/s | torch.nn.TransformerEncoder windows/s | ours/torch |")
        print("|---|---|---|---|")
        for r in rows:
            print(f"| {r['mode']} | {r['ours_wps']:.0f} | {r['torch_wps']:.0f} | {r['ratio']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
