"""ETT long-term forecasting (multivariate "M": 7 channels in, 7 out) under the PatchTST / DLinear
protocol: 12/4/4-month borders (ETTh, hourly; ETTm, 15-minute), a StandardScaler fit on the training
months, MSE and MAE on that normalised scale, EVERY test window scored. Each cell trains the one ETT config
(``configs/kline/patchtst_etth1.yaml``, untouched but for the look-back, the horizon and the backbone): a
linear path fit in closed form plus a Transformer residual kept only where its validation gain exceeds one
standard error, early stopping and the checkpoint chosen on validation loss. ``--backbone`` picks how a
window becomes tokens (``patches``, ``variates``, ``bars``; :data:`BACKBONE_ARGS` lists the architecture each
reads beyond the config). Beside it, in the same run and on the same windows: the strongest closed-form
linear model (pooled or per-channel, Linear or DLinear, chosen on validation; the variant is named), the
model's own linear path alone, persistence, and the published numbers of the file's own dataset (ETTh1,
ETTh2, ETTm1, ETTm2, by file name).

Published rows: PatchTST/42 (look-back 336) and /64 (512) and DLinear (look-back 336) from the PatchTST
paper (Nie et al. 2023, Table 3); iTransformer (Liu et al. 2024, Table 10), which reports ETT at look-back
96 only. The original code drops the last incomplete test batch (``drop_last=True``, batch 128), so each row
also gives our model "scored as published" (the same checkpoint on the test windows the published loader
keeps).

Run (ETTh1.csv from the ETDataset repository, see ``../shared/data/ett``)::

    python benchmarks/ett.py [--data PATH] [--config YAML] [--backbone patches|variates|bars] [--lookbacks 336 512]
        [--horizons 96 192 336 720] [--epochs N] [--threads N] [--model NAME=VALUE ...] [--quick] [--jsonl PATH]
        [--out docs/results/ett_etth1]
    python benchmarks/ett.py --merge a.jsonl b.jsonl --out docs/results/ett_etth1   # one table from cells run apart

``--out STEM`` writes ``STEM.md`` (the table) and ``STEM.json`` (the rows, the machine, the config);
``--jsonl`` appends each finished cell at once (a long grid keeps what it has finished).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import torch
import yaml
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info

from lightning_tf.kline import KLineForecaster, LinearBaseline, MultivariateDataModule
from lightning_tf.kline.windows import in_order

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "ett" / "ETTh1.csv"
DEFAULT_CONFIG = ROOT / "configs" / "kline" / "patchtst_etth1.yaml"

Published = dict[str, dict[int, tuple[float, float]]]  # dataset -> horizon -> (MSE, MAE)

# PatchTST paper (Nie et al. 2023), Table 3: PatchTST/64 at look-back 512, PatchTST/42 at 336, DLinear at 336
PATCHTST_64: Published = {
    "ETTh1": {96: (0.370, 0.400), 192: (0.413, 0.429), 336: (0.422, 0.440), 720: (0.447, 0.468)},
    "ETTh2": {96: (0.274, 0.337), 192: (0.341, 0.382), 336: (0.329, 0.384), 720: (0.379, 0.422)},
    "ETTm1": {96: (0.293, 0.346), 192: (0.333, 0.370), 336: (0.369, 0.392), 720: (0.416, 0.420)},
    "ETTm2": {96: (0.166, 0.256), 192: (0.223, 0.296), 336: (0.274, 0.329), 720: (0.362, 0.385)},
}
PATCHTST_42: Published = {
    "ETTh1": {96: (0.375, 0.399), 192: (0.414, 0.421), 336: (0.431, 0.436), 720: (0.449, 0.466)},
    "ETTh2": {96: (0.274, 0.336), 192: (0.339, 0.379), 336: (0.331, 0.380), 720: (0.379, 0.422)},
    "ETTm1": {96: (0.290, 0.342), 192: (0.332, 0.369), 336: (0.366, 0.392), 720: (0.420, 0.424)},
    "ETTm2": {96: (0.165, 0.255), 192: (0.220, 0.292), 336: (0.278, 0.329), 720: (0.367, 0.385)},
}
DLINEAR: Published = {
    "ETTh1": {96: (0.375, 0.399), 192: (0.405, 0.416), 336: (0.439, 0.443), 720: (0.472, 0.490)},
    "ETTh2": {96: (0.289, 0.353), 192: (0.383, 0.418), 336: (0.448, 0.465), 720: (0.605, 0.551)},
    "ETTm1": {96: (0.299, 0.343), 192: (0.335, 0.365), 336: (0.369, 0.386), 720: (0.425, 0.421)},
    "ETTm2": {96: (0.167, 0.260), 192: (0.224, 0.303), 336: (0.281, 0.342), 720: (0.397, 0.421)},
}
# iTransformer paper (Liu et al. 2024), Table 10: every ETT row at look-back 96 (no other look-back is tabulated)
ITRANSFORMER_96: Published = {
    "ETTh1": {96: (0.386, 0.405), 192: (0.441, 0.436), 336: (0.487, 0.458), 720: (0.503, 0.491)},
    "ETTh2": {96: (0.297, 0.349), 192: (0.380, 0.400), 336: (0.428, 0.432), 720: (0.427, 0.445)},
    "ETTm1": {96: (0.334, 0.368), 192: (0.377, 0.391), 336: (0.426, 0.420), 720: (0.491, 0.459)},
    "ETTm2": {96: (0.180, 0.264), 192: (0.250, 0.309), 336: (0.311, 0.348), 720: (0.412, 0.407)},
}

# What each backbone reads beyond the config (a patch config): iTransformer's own ETT architecture (its
# scripts/multivariate_forecasting/ETT: 2 layers, 8 heads, d_model = d_ff = 256 up to horizon 192 and 512
# beyond, dropout 0.1, GELU, Post-LN with LayerNorm); bars keeps the config's encoder. ``--model`` wins.
BACKBONE_ARGS: dict[str, dict] = {
    "patches": {},
    "variates": {
        "n_layers": 2,
        "n_heads": 8,
        "dropout": 0.1,
        "activation": "gelu",
        "norm": "layer",
        "norm_first": False,
    },
    "bars": {},
}


def backbone_args(backbone: str, horizon: int) -> dict:
    """The model arguments ``backbone`` adds to the config at ``horizon`` (:data:`BACKBONE_ARGS`)."""
    args = {"backbone": backbone, **BACKBONE_ARGS[backbone]}
    if backbone == "variates":
        args["d_model"] = args["d_ff"] = 256 if horizon <= 192 else 512
    return args


def published_patchtst(data_name: str, context_len: int) -> dict[int, tuple[float, float]]:
    """PatchTST's published row for a dataset and look-back: /64 at 512, /42 otherwise (its look-back 336);
    empty for a file that is not one of the four ETT datasets."""
    return (PATCHTST_64 if context_len >= 512 else PATCHTST_42).get(data_name, {})


class EpochReport(Callback):
    """One line per epoch: elapsed time, the validation loss of the model as selected, of the model with its
    residual and of the linear path alone, so a long run shows progress."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.t0 = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        m = trainer.callback_metrics
        get = lambda k: float(m[k]) if k in m else float("nan")  # noqa: E731
        print(
            f"  epoch {trainer.current_epoch}: {time.perf_counter() - self.t0:.0f} s, val loss {get('val/loss'):.4f} "
            f"(with residual {get('val/loss_residual'):.4f}, linear path {get('val/loss_linear'):.4f})",
            flush=True,
        )


def load_config(path: Path, overrides: list[str] | None = None) -> tuple[dict, dict, dict, dict | None]:
    """The config's model and data arguments, trainer arguments and early stopping (its ``monitor`` and
    ``patience``, None without one); ``overrides`` (``name=value``, YAML values) replace model arguments."""
    cfg = yaml.safe_load(path.read_text())
    trainer = dict(cfg.get("trainer", {}))
    stopping = None
    for cb in trainer.pop("callbacks+", []) + trainer.pop("callbacks", []):
        if cb.get("class_path", "").endswith("EarlyStopping"):
            args = cb.get("init_args", {})
            stopping = {"monitor": args.get("monitor", "val/loss"), "patience": int(args.get("patience", 3))}
    model = {**cfg["model"]["init_args"], **parse_overrides(overrides or [])}
    if isinstance(model.get("residual"), bool):  # YAML 1.1 reads an unquoted on / off as a boolean
        model["residual"] = "on" if model["residual"] else "off"
    return model, dict(cfg["data"]["init_args"]), trainer, stopping


def parse_overrides(items: list[str]) -> dict:
    """``name=value`` items as model arguments, each value read as YAML."""
    model = {}
    for item in items:
        name, _, value = item.partition("=")
        parsed = yaml.safe_load(value)
        if isinstance(parsed, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", parsed):
            parsed = float(parsed)  # YAML 1.1 reads 1e-4 (no dot) as a string
        model[name] = parsed
    return model


@torch.inference_mode()
def published_protocol(
    model: KLineForecaster, dm: MultivariateDataModule, batch_size: int = 128, max_windows: int | None = None
) -> tuple[float, float]:
    """MSE and MAE scored as the published loaders score them: the test windows in order, in batches of
    ``batch_size``, the last incomplete batch dropped (``drop_last=True``); only the first ``max_windows`` of them
    when given (a smoke run)."""
    model.eval()
    dm.setup("test")
    sq = ab = n = 0.0
    keep = len(dm.datasets["test"]) // batch_size * batch_size
    keep = keep if max_windows is None else min(keep, max_windows)
    for batch in dm.test_dataloader():
        take = int(min(batch["x"].shape[0], keep - n))
        if take <= 0:
            break
        pred = model(batch["x"][:take])  # (b, F, C) on the normalised scale
        err = pred - batch["y"][:take]
        sq, ab, n = sq + float(err.pow(2).sum()), ab + float(err.abs().sum()), n + take
    count = n * err.shape[1] * err.shape[2]
    return sq / count, ab / count


@torch.inference_mode()
def linear_path_scores(model: KLineForecaster, dm: MultivariateDataModule) -> tuple[float, float] | None:
    """MSE and MAE of the model's linear path alone (the residual left out) on every test window."""
    if model.net.linear is None:
        return None
    model.eval()
    sq = ab = n = 0.0
    for batch in dm.test_dataloader():
        out = model.net.combine(model.net.parts(batch["x"])[0], gate=0.0)  # (B, F, C[, Q])
        err = model._point(out) - batch["y"]  # (B, F, C): the median of a quantile model
        sq, ab, n = sq + float(err.pow(2).sum()), ab + float(err.abs().sum()), n + err.numel()
    return sq / n, ab / n


@torch.inference_mode()
def lowest_validation_linear(model: KLineForecaster, dm: MultivariateDataModule) -> dict:
    """The closed-form linear baseline chosen by the lowest validation error alone (``select_se=0``) instead
    of the one-standard-error rule, on the same windows: its variant and test MSE / MAE, so the rule's
    effect is measured beside it."""
    base = LinearBaseline(
        model.hparams.context_len,
        model.hparams.horizon,
        model.hparams.dlinear_kernel,
        target_channels=model.target_channels,
        n_targets=model.hparams.n_targets,
    )
    xy = lambda loader: ((b["x"], b["y"]) for b in loader)  # noqa: E731
    base.fit(xy(in_order(dm.train_dataloader())), xy(in_order(dm.val_dataloader())), select_se=0.0)
    sq = ab = n = 0.0
    for batch in dm.test_dataloader():
        err = base(batch["x"]) - batch["y"]  # (B, F, K)
        sq, ab, n = sq + float(err.pow(2).sum()), ab + float(err.abs().sum()), n + err.numel()
    return {"variant": base.describe(), "mse": sq / n, "mae": ab / n}


def run_one(context_len: int, horizon: int, args: argparse.Namespace) -> dict:
    model_args, data_args, trainer_args, stopping = load_config(args.config)
    added = {**backbone_args(args.backbone, horizon), **parse_overrides(args.model)}  # --model wins
    model_args.update(added)
    if isinstance(model_args.get("residual"), bool):
        model_args["residual"] = "on" if model_args["residual"] else "off"
    L.seed_everything(args.seed, verbose=False)
    dm = MultivariateDataModule(
        str(args.data),
        context_len=context_len,
        horizon=horizon,
        features=data_args.get("features", "M"),
        borders=data_args.get("borders", "auto"),
        batch_size=data_args.get("batch_size", 128),
    )
    model = KLineForecaster(
        n_features=dm.n_features, n_targets=dm.n_targets, context_len=context_len, horizon=horizon, **model_args
    )
    ckpt = ModelCheckpoint(
        dirpath=args.workdir / f"L{context_len}_H{horizon}", monitor="val/loss", mode="min", save_top_k=1
    )
    callbacks: list[Callback] = [ckpt, EpochReport()]
    if stopping:
        callbacks.append(EarlyStopping(stopping["monitor"], mode="min", patience=stopping["patience"]))
    epochs = args.epochs or trainer_args.get("max_epochs", 8)
    trainer = L.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        limit_train_batches=args.limit_batches,
        limit_val_batches=args.limit_batches,
        limit_test_batches=args.limit_batches,
        num_sanity_val_steps=0,
        gradient_clip_val=trainer_args.get("gradient_clip_val"),
    )
    t0 = time.perf_counter()
    trainer.fit(model, dm)
    train_s = time.perf_counter() - t0
    trainer.test(model, dm, ckpt_path="best", verbose=False)
    s = model.test_summary
    pub_mse, pub_mae = published_protocol(model, dm)
    path_scores = linear_path_scores(model, dm)
    lowest = lowest_validation_linear(model, dm)
    path_fit = getattr(model, "linear_fit", None)
    best = ckpt.best_model_path
    full, linear, weighted, gain, gain_se = (float(v) for v in model.val_selection)
    return {
        "backbone": args.backbone,
        "data_name": args.data.stem,
        "model_args": added,
        "context_len": context_len,
        "horizon": horizon,
        "epochs": trainer.current_epoch,
        "best_epoch": int(Path(best).stem.split("epoch=")[-1].split("-")[0]) if "epoch=" in best else None,
        "train_s": train_s,
        "train_windows": len(dm.datasets["train"]),
        "test_windows": len(dm.datasets["test"]),
        "mse": s["model"]["model"]["mse"],
        "mae": s["model"]["model"]["mae"],
        "best_val_loss": None if ckpt.best_model_score is None else float(ckpt.best_model_score),
        "published_mse": pub_mse,
        "published_mae": pub_mae,
        "residual_kept": model.residual_kept,
        "selection": s["about"]["selection"],
        "val_loss_with_residual": full,
        "val_loss_linear_path": linear,
        "val_loss_weighted_residual": weighted,
        "val_gain_out_of_sample": gain,
        "val_gain_standard_error": gain_se,
        "residual_weight": [round(float(w), 4) for w in model.net.residual_gate],
        "linear_path_mse": path_scores[0] if path_scores else None,
        "linear_path_mae": path_scores[1] if path_scores else None,
        "linear_mse": s["linear"]["model"]["mse"],
        "linear_mae": s["linear"]["model"]["mae"],
        "linear_variant": model.linear_baseline.describe() if model.linear_baseline is not None else None,
        "linear_path_choice": None
        if path_fit is None
        else (f"{path_fit.input} {path_fit.form} {path_fit.pooling} ridge {path_fit.ridge:g}, {path_fit.dof:.1f} dof"),
        "linear_path_lowest_validation": None if path_fit is None else path_fit.lowest,
        "lowest_validation_linear_mse": lowest["mse"],
        "lowest_validation_linear_mae": lowest["mae"],
        "lowest_validation_linear_variant": lowest["variant"],
        "persistence_mse": s["persistence"]["model"]["mse"],
        "persistence_mae": s["persistence"]["model"]["mae"],
        "intervals": s.get("intervals"),
        "model_overrides": args.model,
    }


BACKBONE_ORDER = {"patches": 0, "variates": 1, "bars": 2}


def _name(row: dict, default: str = "ETTh1") -> str:
    return row.get("data_name", default)  # rows written before the column: ETTh1's


def markdown(rows: list[dict], data_name: str = "ETTh1") -> str:
    """One table of the rows of dataset ``data_name``, with that dataset's own published columns."""
    head = (
        "| look-back | horizon | backbone | model MSE / MAE | beats linear | ≤ PatchTST | residual kept "
        "| model, scored as published | linear model, same windows (variant) "
        "| linear by lowest validation error (variant) | model's linear path alone "
        "| PatchTST (published) | DLinear (paper) | iTransformer (paper, look-back 96) | persistence "
        "| epochs (best) | train time |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    fmt = lambda p: f"{p[0]:.3f} / {p[1]:.3f}" if p else "-"  # noqa: E731

    def order(r: dict) -> tuple[int, int, int]:
        return r["context_len"], r["horizon"], BACKBONE_ORDER.get(r.get("backbone", "patches"), 9)

    for r in sorted(rows, key=order):
        h, lb = r["horizon"], r["context_len"]
        pub = published_patchtst(data_name, lb).get(h)
        beats = "yes" if r["mse"] < r["linear_mse"] else "tie" if r["mse"] == r["linear_mse"] else "NO"
        below = "-" if pub is None else ("yes" if round(r["mse"], 3) <= pub[0] else "NO")
        path = fmt((r["linear_path_mse"], r["linear_path_mae"])) if r.get("linear_path_mse") is not None else "-"
        lowest = (
            "-"
            if r.get("lowest_validation_linear_mse") is None
            else (
                f"{r['lowest_validation_linear_mse']:.4f} / {r['lowest_validation_linear_mae']:.4f} "
                f"({r['lowest_validation_linear_variant']})"
            )
        )
        lines.append(
            f"| {lb} | {h} | {r.get('backbone', 'patches')} | **{r['mse']:.4f} / {r['mae']:.4f}** | {beats} | {below} "
            f"| {'yes' if r['residual_kept'] else 'no'} | {fmt((r['published_mse'], r['published_mae']))} "
            f"| {r['linear_mse']:.4f} / {r['linear_mae']:.4f} ({r['linear_variant']}) | {lowest} | {path} "
            f"| {fmt(pub)}{(' (/64)' if lb >= 512 else ' (/42)') if pub else ''} "
            f"| {fmt(DLINEAR.get(data_name, {}).get(h))} | {fmt(ITRANSFORMER_96.get(data_name, {}).get(h))} "
            f"| {r['persistence_mse']:.3f} / {r['persistence_mae']:.3f} | {r['epochs']} ({r['best_epoch']}) "
            f"| {r['train_s'] / 60:.1f} min |"
        )
    return "\n".join(lines)


def markdown_tables(rows: list[dict], default: str = "ETTh1") -> str:
    """One table per dataset among ``rows`` (a heading above each when there are several)."""
    names = sorted({_name(r, default) for r in rows})
    if len(names) == 1:
        return markdown(rows, names[0])
    return "\n\n".join(f"## {n}\n\n" + markdown([r for r in rows if _name(r, default) == n], n) for n in names)


def _machine(info: dict) -> str:
    return f"{info['cpu']}, {info['cores']} cores, {info['threads']} thread(s) per run, torch {info['torch']}"


def verdict_counts(rows: list[dict], default: str = "ETTh1") -> tuple[int, int, int, int]:
    """Cells where the model is strictly below the linear model and equal to it; cells at or below PatchTST's
    published MSE for the row's own dataset (our MSE rounded to 3 decimals, as published) scored on every test
    window, and scored as the published numbers were (``published_mse``: the windows the published loader keeps)."""
    beats = sum(r["mse"] < r["linear_mse"] for r in rows)
    ties = sum(r["mse"] == r["linear_mse"] for r in rows)
    theirs = [(r, published_patchtst(_name(r, default), r["context_len"]).get(r["horizon"])) for r in rows]
    below = sum(round(r["mse"], 3) <= pub[0] for r, pub in theirs if pub is not None)
    below_published = sum(round(r["published_mse"], 3) <= pub[0] for r, pub in theirs if pub is not None)
    return beats, ties, below, below_published


def added_args(rows: list[dict]) -> str:
    """What the rows' backbone added to the config (``model_args``), a value that changes with the horizon
    given with its horizons: ``d_model 256 (horizons 96, 192), 512 (336, 720)``."""
    by_key: dict[str, dict] = {}
    for r in sorted(rows, key=lambda r: r["horizon"]):
        for k, v in (r.get("model_args") or {}).items():
            if k != "backbone":
                by_key.setdefault(k, {}).setdefault(repr(v), []).append(r["horizon"])
    parts = []
    for k, values in by_key.items():
        if len(values) == 1:
            parts.append(f"{k} {next(iter(values))}")
        else:
            parts.append(
                f"{k} "
                + ", ".join(
                    f"{v} ({'horizons ' if i == 0 else ''}{', '.join(map(str, hs))})"
                    for i, (v, hs) in enumerate(values.items())
                )
            )
    return ", ".join(parts) or "nothing"


def write_results(rows: list[dict], stem: Path, meta: dict) -> None:
    """``stem.md`` (a heading, what was run, one table per dataset) and ``stem.json``."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    cells = len(rows)
    default = meta.get("data_name", "ETTh1")
    beats, ties, below, below_published = verdict_counts(rows, default)
    names = sorted({_name(r, default) for r in rows})
    backbones = sorted({r.get("backbone", "patches") for r in rows}, key=lambda b: BACKBONE_ORDER.get(b, 9))
    extra = "; ".join(f"{b}: {added_args([r for r in rows if r.get('backbone', 'patches') == b])}" for b in backbones)
    text = [
        f"# {', '.join(names)}: linear path + Transformer residual ({', '.join(backbones)})",
        "",
        f"Config `{meta['config']}` (untouched but for the look-back, the horizon and the backbone), every test window "
        f"scored, MSE / MAE on the training months' standardised scale. Machine: {_machine(meta['machine'])}. "
        + (
            f"What each backbone adds to the config (benchmarks/ett.py `BACKBONE_ARGS`, by horizon): {extra}. "
            if extra
            else ""
        )
        + f"{meta.get('note', '')}",
        "",
        f"The model is strictly below the closed-form linear model in {beats} of {cells} cells, equal to it in {ties} "
        f"(the residual was not kept, and the model's linear path is the baseline's map), above it in "
        f"{cells - beats - ties}; at or below PatchTST's published MSE (rounded to 3 decimals, as published) in "
        f"{below} of {cells} on every test window, and in {below_published} of {cells} scored as the published "
        f"numbers were (the windows their loader keeps). iTransformer's paper reports ETT at look-back 96 only: its "
        f"column is that, not a look-back 336 number.",
        "",
        markdown_tables(rows, default),
        "",
    ]
    stem.with_suffix(".md").write_text("\n".join(text))
    stem.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=2, default=str))


def speed(args: argparse.Namespace, context_len: int, horizon: int, n_features: int = 7) -> list[dict]:
    """Training and inference windows per second of each backbone's model as the grid builds it (the config,
    :func:`backbone_args`, ``--model``), on random batches of the config's batch size, in one process,
    alternating the backbones in every repeat; the median of the repeats."""
    model_args, data_args, _, _ = load_config(args.config)
    B = data_args.get("batch_size", 128)
    x, y = torch.randn(B, context_len, n_features), torch.randn(B, horizon, n_features)  # (B, L, C), (B, F, C)
    models, steps = {}, {}
    for backbone in BACKBONE_ARGS:
        kw = {**model_args, **backbone_args(backbone, horizon), **parse_overrides(args.model)}
        torch.manual_seed(0)
        model = KLineForecaster(
            n_features=n_features,
            n_targets=n_features,
            target_channels=list(range(n_features)),
            context_len=context_len,
            horizon=horizon,
            **kw,
        )
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        models[backbone] = model

        def train(model: KLineForecaster = model, opt: torch.optim.Optimizer = opt) -> None:
            model.train()
            opt.zero_grad(set_to_none=True)
            model._loss(model.net.combine(model._parts(x), gate=1.0), y).backward()
            opt.step()

        def infer(model: KLineForecaster = model) -> None:
            model.eval()
            with torch.inference_mode():
                model(x)

        steps[backbone] = {"train": train, "eval": infer}
    times: dict[tuple[str, str], list[float]] = {(b, m): [] for b in models for m in ("train", "eval")}
    for r in range(args.warmup + args.repeats):
        for b in list(models) if r % 2 == 0 else list(models)[::-1]:
            for mode, fn in steps[b].items():
                t0 = time.perf_counter()
                fn()
                if r >= args.warmup:
                    times[(b, mode)].append(time.perf_counter() - t0)
    rows = []
    for b, model in models.items():
        row = {
            "backbone": b,
            "context_len": context_len,
            "horizon": horizon,
            "batch": B,
            "parameters": sum(p.numel() for p in model.parameters()),
        }
        for mode in ("train", "eval"):
            row[f"{mode}_wps"] = B / statistics.median(times[(b, mode)])
        rows.append(row)
    for row in rows:
        for mode in ("train", "eval"):
            row[f"{mode}_vs_patches"] = row[f"{mode}_wps"] / rows[0][f"{mode}_wps"]
    return rows


def speed_markdown(rows: list[dict], info: dict, repeats: int) -> str:
    lines = [
        f"Windows per second, batch {rows[0]['batch']}, look-back {rows[0]['context_len']}, 7 channels, each "
        f"backbone's model as the grid builds it (training step: forward, loss, backward, AdamW); "
        f"{_machine(info)}; median of {repeats} repeats, the backbones alternating in one process "
        "(`python benchmarks/ett.py --speed`):",
        "",
        "| horizon | backbone | parameters | train windows/s | train vs patches | inference windows/s "
        "| inference vs patches |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['horizon']} | {r['backbone']} | {r['parameters']:,} | {r['train_wps']:.0f} "
            f"| {r['train_vs_patches']:.2f} | {r['eval_wps']:.0f} | {r['eval_vs_patches']:.2f} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="ETTh1.csv")
    p.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        help="the ETT config (model, data batch size, epochs and early stopping are read from it)",
    )
    p.add_argument("--lookbacks", type=int, nargs="+", default=None, help="default 336 512 (--quick: 96)")
    p.add_argument("--horizons", type=int, nargs="+", default=None, help="default 96 192 336 720 (--quick: 24)")
    p.add_argument("--epochs", type=int, default=None, help="most epochs (default: the config's max_epochs)")
    p.add_argument(
        "--backbone",
        choices=list(BACKBONE_ARGS),
        default="patches",
        help="how a window becomes tokens (the architecture each adds: BACKBONE_ARGS)",
    )
    p.add_argument(
        "--model",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="override model arguments of the config, e.g. --model loss=quantile",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=2021)
    p.add_argument(
        "--quick", action="store_true", help="smoke run: one short epoch on a few batches (L=96, H=24 unless given)"
    )
    p.add_argument("--jsonl", type=Path, default=None, help="append each finished cell here")
    p.add_argument("--out", type=Path, default=None, help="write STEM.md and STEM.json")
    p.add_argument("--note", default="", help="said under the table (e.g. how loaded the machine was)")
    p.add_argument("--merge", type=Path, nargs="+", default=None, help="only merge these --jsonl files into --out")
    p.add_argument("--workdir", type=Path, default=Path("runs") / "bench_ett")
    p.add_argument(
        "--speed",
        action="store_true",
        help="only time a training step and inference of each backbone "
        "(at the first look-back, each horizon); with --out, write STEM_speed.md",
    )
    p.add_argument("--repeats", type=int, default=10, help="--speed: timed repeats")
    p.add_argument("--warmup", type=int, default=2, help="--speed: untimed repeats first")
    args = p.parse_args(argv)
    args.limit_batches = None
    if args.quick:
        args.epochs, args.limit_batches = 1, 4
    args.lookbacks = args.lookbacks or ([96] if args.quick else [336, 512])
    args.horizons = args.horizons or ([24] if args.quick else [96, 192, 336, 720])
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    info = machine_info(torch.device("cpu"))
    meta = {
        "config": str(args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config),
        "machine": info,
        "note": args.note,
        "data_name": args.data.stem,
    }
    if args.speed:
        rows = [row for horizon in args.horizons for row in speed(args, args.lookbacks[0], horizon)]
        text = speed_markdown(rows, info, args.repeats)
        print(text)
        if args.out:
            path = args.out.with_name(args.out.name + "_speed.md")
            path.write_text(text + "\n")
            path.with_suffix(".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=2))
            print(f"wrote {path}")
        return
    if args.merge:
        rows = [json.loads(line) for path in args.merge for line in path.read_text().splitlines() if line.strip()]
        if args.out is None:
            print(markdown_tables(rows, meta["data_name"]))
        else:
            write_results(rows, args.out, meta)
            print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
        return
    if not args.data.is_file():
        raise SystemExit(f"{args.data}: not found; pass --data PATH/ETTh1.csv")
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    print(f"machine: {info}")
    rows = []
    for context_len in args.lookbacks:
        for horizon in args.horizons:
            row = run_one(context_len, horizon, args)
            rows.append(row)
            if args.jsonl:
                with args.jsonl.open("a") as f:
                    f.write(json.dumps(row, default=str) + "\n")
            print(
                f"{args.backbone} L={context_len} H={horizon}: MSE {row['mse']:.4f} MAE {row['mae']:.4f} "
                f"({row['epochs']} epochs, {row['train_s']:.0f} s; linear {row['linear_mse']:.4f}, "
                f"linear path {row['linear_path_mse']}; "
                f"{row['selection']})" + (f"; intervals {row['intervals']}" if row["intervals"] else ""),
                flush=True,
            )
    print()
    print(
        f"{args.data.name}, features M, backbone {args.backbone}, every test window scored; config {meta['config']}, "
        f"{args.threads} thread(s)" + (" (QUICK smoke run)" if args.quick else "")
    )
    print(markdown(rows, meta["data_name"]))
    if args.out:
        write_results(rows, args.out, meta)


if __name__ == "__main__":
    main()
