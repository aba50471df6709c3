"""The walk-forward report: every forecaster's test predictions over all folds judged as a quant judges them
(:func:`~.portfolio.evaluate_predictions`: RankIC and its ICIR, a TopkDropout portfolio after costs against the
equal-weight universe), per fold and pooled, one verdict line per baseline, and two charts (cumulative
portfolio return, RankIC per month), written as ``report.md`` with PNGs beside it (qlib's workflow report;
alphalens' tear sheet), and to a wandb run for a config that logs to wandb (:func:`log_wandb`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .portfolio import PortfolioEvaluation, evaluate_predictions
from .predictions import FORECASTERS

__all__ = [
    "FORECASTERS",
    "WalkForwardResult",
    "default_top_k",
    "evaluate_forecasters",
    "fold_metrics",
    "log_wandb",
    "write_report",
]


def default_top_k(predictions: pd.DataFrame) -> int:
    """A tenth of the smallest universe of a test date (at least 1): the long-short book holds ``2 * top_k``."""
    first = predictions[predictions["step"] == 1]
    smallest = int(first.groupby("date")["ticker"].nunique().min()) if len(first) else 0
    return max(1, smallest // 10)


@dataclass
class WalkForwardResult:
    """Each forecaster's evaluation, pooled over the folds and per fold (``by_fold[name][fold]``)."""

    pooled: dict[str, PortfolioEvaluation]
    by_fold: dict[str, dict[int, PortfolioEvaluation]]


def _frame_of(predictions: pd.DataFrame, column: str) -> pd.DataFrame:
    rows = predictions[["date", "ticker", "step", column, "realised"]].dropna(subset=[column])
    return rows.rename(columns={column: "prediction"})


def evaluate_forecasters(
    predictions: pd.DataFrame, *, top_k: int, n_drop: int, cost_bps: float, periods_per_year: float = 252.0
) -> WalkForwardResult:
    """:func:`~.portfolio.evaluate_predictions` of every forecaster column present in ``predictions`` (one with
    a ``fold`` column), on the dates where the model has a forecast, pooled and per fold."""
    kwargs = {"top_k": top_k, "n_drop": n_drop, "cost_bps": cost_bps, "periods_per_year": periods_per_year}
    pooled: dict[str, PortfolioEvaluation] = {}
    by_fold: dict[str, dict[int, PortfolioEvaluation]] = {}
    for column, name in FORECASTERS.items():
        if column not in predictions or predictions[column].notna().sum() == 0:
            continue
        frame = _frame_of(predictions, column)
        pooled[name] = evaluate_predictions(frame, **kwargs)
        by_fold[name] = {
            int(k): evaluate_predictions(_frame_of(part, column), **kwargs)
            for k, part in predictions.groupby("fold", sort=True)
        }
    return WalkForwardResult(pooled, by_fold)


def _fmt(value: float, kind: str) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return {
        "plain": f"{value:.2f}",
        "ic": f"{value:+.4f}",
        "ratio": f"{value:+.2f}",
        "pct": f"{value:+.2%}",
        "dd": f"{value:.2%}",
    }[kind]


#: (summary key, column title, format) of the report's tables
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("rank_ic_mean", "RankIC", "ic"),
    ("rank_icir", "RankICIR", "ratio"),
    ("ic_mean", "IC", "ic"),
    ("icir", "ICIR", "ratio"),
    ("long_short_annual_return", "long-short net ann.", "pct"),
    ("long_short_information_ratio", "long-short IR", "ratio"),
    ("long_short_max_drawdown", "long-short max DD", "dd"),
    ("long_only_excess_return", "long-only excess", "pct"),
    ("long_only_information_ratio", "long-only IR", "ratio"),
    ("long_short_turnover", "turnover", "plain"),
)


def _table(rows: Mapping[str, Mapping[str, float]]) -> list[str]:
    lines = ["| | " + " | ".join(title for _, title, _ in COLUMNS) + " |", "|---" + "|---:" * len(COLUMNS) + "|"]
    for name, s in rows.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(s.get(key, math.nan), kind) for key, _, kind in COLUMNS) + " |")
    return lines


def verdicts(result: WalkForwardResult) -> list[str]:
    """One line per baseline: whether the model beats it on pooled RankIC and on the long-short net IR."""
    model = result.pooled.get("model")
    if model is None:
        return []
    lines = []
    m = model.summary
    # the model as tested, and (where the walk-forward kept it) the model with its whole residual
    subjects = [(n, "the " + n) for n in result.pooled if n.startswith("model")]
    for subject, title in subjects:
        m_ = result.pooled[subject].summary
        for name, evaluation in result.pooled.items():
            if name.startswith("model"):
                continue
            b = evaluation.summary
            parts = []
            for key, label in (("rank_ic_mean", "RankIC"), ("long_short_information_ratio", "net long-short IR")):
                ours, theirs = m_.get(key, math.nan), b.get(key, math.nan)
                word = "beats" if ours > theirs else ("ties" if ours == theirs else "does NOT beat")
                parts.append(f"{word} it on {label} ({ours:+.4f} vs {theirs:+.4f})")
            lines.append(f"* {title} vs {name}: " + "; ".join(parts))
    bench = m.get("benchmark_annual_return", math.nan)
    ours = m.get("long_only_annual_return", math.nan)
    word = "beats" if ours > bench else "does NOT beat"
    lines.append(
        f"* the model's top-k long-only book {word} the equal-weight universe after costs "
        f"({ours:+.2%} vs {bench:+.2%} a year, net)"
    )
    return lines


def _dates(frame: pd.DataFrame) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(frame.index if "date" not in frame else frame["date"])


def plot_cumulative(result: WalkForwardResult, path: Path) -> Path:
    """Cumulative net return of each forecaster's long-short book, the model's long-only book and the
    equal-weight universe, over all test dates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, evaluation in result.pooled.items():
        r = evaluation.returns
        ax.plot(_dates(r), np.cumprod(1 + r["long_short_net"].to_numpy()) - 1, label=f"{name}: long-short", lw=1)
    model = result.pooled.get("model") or next(iter(result.pooled.values()))
    r = model.returns
    ax.plot(_dates(r), np.cumprod(1 + r["long_only_net"].to_numpy()) - 1, label="model: long-only", lw=1.5)
    ax.plot(_dates(r), np.cumprod(1 + r["benchmark"].to_numpy()) - 1, label="equal-weight universe", color="k", lw=1.5)
    ax.set_ylabel("cumulative net return")
    ax.set_title("Walk-forward test dates: top-k portfolios after costs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_monthly_ic(result: WalkForwardResult, path: Path) -> Path:
    """Mean RankIC per calendar month of the model (bars) and each baseline (lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for name, evaluation in result.pooled.items():
        ic = evaluation.ic
        monthly = pd.Series(ic["rank_ic"].to_numpy(), index=_dates(ic)).resample("MS").mean()
        if name == "model":
            ax.bar(monthly.index, monthly.to_numpy(), width=20, label="model", alpha=0.6)
        else:
            ax.plot(monthly.index, monthly.to_numpy(), label=name, lw=1, marker=".")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylabel("mean RankIC (next bar)")
    ax.set_title("RankIC per month")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(
    result: WalkForwardResult,
    folds: pd.DataFrame,
    out: str | Path,
    *,
    about: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> dict[str, Path]:
    """``report.md`` in ``out`` with ``cumulative_return.png`` and ``ic_per_month.png`` beside it.

    Args:
        result: the forecasters' evaluations (:func:`evaluate_forecasters`).
        folds: ``folds.csv``'s table (number and dates of each fold).
        out: the walk-forward folder.
        about: lines under the title (command, data, settings).
        notes: lines at the end (what is missing and why).

    Returns:
        The written files by name.
    """
    out = Path(out)
    files = {"cumulative_return": out / "cumulative_return.png", "ic_per_month": out / "ic_per_month.png"}
    plot_cumulative(result, files["cumulative_return"])
    plot_monthly_ic(result, files["ic_per_month"])
    any_eval = next(iter(result.pooled.values()))
    settings = any_eval.settings
    lines = ["# Walk-forward report", "", *about, ""]
    if "residual_kept" in folds:
        kept = int(folds["residual_kept"].astype(bool).sum())
        lines += [
            f"The tested model kept its Transformer residual on validation in {kept} of {len(folds)} folds; in the "
            "others it is its linear path alone (the same forecast as the `linear path` row). The `model, residual "
            "always kept` row is the Transformer with its whole residual in every fold, whatever validation chose.",
            "",
        ]
    lines += [
        f"Portfolios: top {settings['top_k']} long (and bottom {settings['top_k']} short for long-short), at most "
        f"{settings['n_drop']} names replaced a date, {settings['cost_bps']:g} bp per unit of turnover, traded on "
        "the next bar's forecast; the equal-weight universe is the long-only book's benchmark, cash the "
        "long-short book's (it is dollar-neutral: its IR is its Sharpe ratio).",
        "",
        "## Folds",
        "",
        "| fold | train | validation | test |",
        "|---:|---|---|---|",
    ]
    for row in folds.itertuples():
        lines.append(
            f"| {row.fold} | {row.train_start} .. {row.train_end} | {row.val_start} .. {row.val_end} | "
            f"{row.test_start} .. {row.test_end} |"
        )
    lines += ["", "## Pooled over the folds", ""]
    pooled = {name: e.summary for name, e in result.pooled.items()}
    lines += _table(pooled)
    bench = any_eval.summary
    lines += [
        "",
        f"Equal-weight universe: {_fmt(bench.get('benchmark_annual_return', math.nan), 'pct')} a year, Sharpe "
        f"{_fmt(bench.get('benchmark_sharpe', math.nan), 'ratio')}, max drawdown "
        f"{_fmt(bench.get('benchmark_max_drawdown', math.nan), 'dd')}.",
        "",
        *verdicts(result),
        "",
        "![cumulative return](cumulative_return.png)",
        "",
        "![RankIC per month](ic_per_month.png)",
        "",
        "## Per fold",
        "",
    ]
    for k in sorted(next(iter(result.by_fold.values()))):
        lines += [f"Fold {k}:", ""]
        lines += _table({name: folds_of[k].summary for name, folds_of in result.by_fold.items() if k in folds_of})
        lines.append("")
    if notes:
        lines += ["## Notes", "", *notes, ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    files["report"] = out / "report.md"
    return files


def fold_metrics(result: WalkForwardResult, k: int) -> dict[str, Any]:
    """The model's and the baselines' headline numbers of fold ``k`` as ``folds.csv`` columns."""
    row: dict[str, Any] = {}
    for name, folds_of in result.by_fold.items():
        if k not in folds_of:
            continue
        s = folds_of[k].summary
        column = next(c for c, n in FORECASTERS.items() if n == name)  # the predictions file's column
        prefix = "" if column == "prediction" else f"{column}_"
        row[f"{prefix}rank_ic"] = s.get("rank_ic_mean", math.nan)
        row[f"{prefix}rank_icir"] = s.get("rank_icir", math.nan)
        row[f"{prefix}long_short_annual_return"] = s.get("long_short_annual_return", math.nan)
        row[f"{prefix}long_short_ir"] = s.get("long_short_information_ratio", math.nan)
        if name == "model":
            row["benchmark_annual_return"] = s.get("benchmark_annual_return", math.nan)
    return row


def log_wandb(files: Mapping[str, Path], result: WalkForwardResult, init_args: Mapping[str, Any]) -> None:
    """The report's charts (``files``, :func:`write_report`'s) and pooled numbers as one wandb run, with the
    ``init_args`` of the config's ``WandbLogger`` (offline unless they say otherwise)."""
    import wandb

    offline = init_args.get("offline", True)
    run = wandb.init(
        project=init_args.get("project") or "lightning-tf",
        dir=os.path.abspath(init_args.get("save_dir") or "runs"),  # wandb's service resolves a relative one elsewhere
        name=f"walkforward-{files['report'].parent.name}",
        job_type="walkforward",
        mode="offline" if offline else "online",
        reinit=True,
    )
    run.log(
        {
            "walkforward/cumulative_return": wandb.Image(str(files["cumulative_return"])),
            "walkforward/ic_per_month": wandb.Image(str(files["ic_per_month"])),
            **{
                f"walkforward/{name}/{k}": v
                for name, e in result.pooled.items()
                for k, v in e.summary.items()
                if isinstance(v, float) and math.isfinite(v)
            },
        }
    )
    run.finish()
