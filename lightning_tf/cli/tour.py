"""``lightning-tf tour``: the main job. Trains and tests the three tasks on their embedded data, one
after the other in this process, and prints one summary table: BLEU and chrF of the translation
model, accuracy of the ViT, the forecaster's error beside its baselines, and where each run left its
checkpoints and its (offline) wandb run.

Each task is the experiment config's ``fit --test_after_fit true`` under
``configs/trainer/default.yaml``; arguments after ``--`` go to every task (``lightning-tf tour --
--trainer.max_epochs 1``). The table is also written to ``runs/tour_summary.md`` (to
``<dir>/tour_summary.md`` with ``--trainer.default_root_dir <dir>``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lightning_tf.training.resources import find

__all__ = ["TASKS", "TaskResult", "run_task", "summary_table", "tour"]

# task -> (experiment config, what it shows)
TASKS: dict[str, tuple[str, str]] = {
    "text": ("configs/text/synthetic.yaml", "English -> German, generated corpus"),
    "vision": ("configs/vision/digits.yaml", "ViT on 8x8 digits (sklearn)"),
    "kline": ("configs/kline/msft_daily.yaml", "MSFT daily, next-5-day returns"),
}


@dataclass
class TaskResult:
    """What one task's fit + test left behind."""

    task: str
    data: str
    metrics: dict[str, float] = field(default_factory=dict)
    verdicts: list[str] = field(default_factory=list)
    minutes: float = math.nan
    checkpoint: str = ""
    wandb_dir: str = ""


def _configs_dir(root: Path | None) -> Path:
    """The directory holding ``configs/``: ``root`` if given, else the working directory, the clone this
    package runs from or the installed package (:func:`lightning_tf.training.resources.find`)."""
    wanted = Path("configs") / "trainer" / "default.yaml"
    if root is not None:
        if (root / wanted).is_file():
            return root
        raise FileNotFoundError(f"{wanted} not found under {root}; pass --root <a folder holding configs/>")
    found = find(wanted)
    if found is None:
        raise FileNotFoundError(f"{wanted} not found here, in a clone or in the installed package")
    return found.parents[2]


def run_task(task: str, root: Path, extra: list[str]) -> TaskResult:
    """Fit and test one task through the CLI, in this process; collect its numbers and paths."""
    # here, not at the top: `lightning-tf tour --help` and its argument errors answer without Lightning
    from lightning.pytorch.loggers import WandbLogger

    from lightning_tf.cli.lightning_cli import make_cli

    config, what = TASKS[task]
    args = [
        "fit",
        "--config",
        str(root / "configs/trainer/default.yaml"),
        "--config",
        str(root / config),
        "--test_after_fit",
        "true",
        *extra,
    ]
    start = time.perf_counter()
    cli = make_cli(args)
    result = TaskResult(task, what, minutes=(time.perf_counter() - start) / 60)
    trainer, model = cli.trainer, cli.model
    result.metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
    summary: dict[str, Any] = getattr(model, "test_summary", {}) or {}
    # the forecaster: the model and its baselines on the same test windows, then the backtest and the selection
    forecasts = {n: s for n, s in summary.items() if n not in ("about", "intervals", "backtest")}
    if "model" in forecasts:
        scale = "orig" if "orig" in forecasts["model"] else "model"
        for name, scales in forecasts.items():
            if scale in scales:
                result.metrics[f"{name} MSE"] = scales[scale]["mse"]
        ours = forecasts["model"][scale]["mse"]
        for name, scales in forecasts.items():
            if name != "model" and scale in scales:
                theirs = scales[scale]["mse"]
                verdict = "beats" if ours < theirs else "ties" if ours == theirs else "does not beat"
                result.verdicts.append(f"{verdict} {name}")
        if "backtest" in summary:
            result.verdicts.append(summary["backtest"]["verdict"])
        if "about" in summary:
            result.verdicts.append(summary["about"]["selection"])
    ckpt = trainer.checkpoint_callback
    result.checkpoint = str(getattr(ckpt, "best_model_path", "") or getattr(ckpt, "last_model_path", "") or "")
    if isinstance(trainer.logger, WandbLogger):
        import wandb

        run_dir = Path(trainer.logger.experiment.dir).parent  # .../offline-run-<time>-<id>/files -> the run
        result.wandb_dir = str(run_dir)
        wandb.finish()  # the next task starts its own run
    return result


def _headline(r: TaskResult) -> tuple[str, str]:
    m = r.metrics
    if r.task == "text":
        return "test BLEU / chrF", f"{m.get('test/bleu', math.nan):.1f} / {m.get('test/chrf', math.nan):.1f}"
    if r.task == "vision":
        return (
            "test accuracy (top-1 / top-5)",
            f"{m.get('test/acc', math.nan):.1%} / {m.get('test/top5', math.nan):.1%}",
        )
    if "model MSE" in m:
        base = ", ".join(f"{k.split()[0]} {v:.4g}" for k, v in m.items() if k.endswith(" MSE") and k != "model MSE")
        return "test MSE (baselines)", f"{m['model MSE']:.4g} ({base})"
    return "test", ", ".join(f"{k} {v:.4g}" for k, v in m.items())


def summary_table(results: list[TaskResult]) -> str:
    """The tour's summary as a markdown table (one row per task), then the run locations."""
    lines = ["| task | data | metric | result | verdict | minutes |", "|---|---|---|---|---|---|"]
    for r in results:
        metric, value = _headline(r)
        verdict = "; ".join(r.verdicts) if r.verdicts else "-"
        lines.append(f"| {r.task} | {r.data} | {metric} | {value} | {verdict} | {r.minutes:.1f} |")
    lines.append("")
    for r in results:
        lines.append(f"- {r.task}: checkpoint `{r.checkpoint or 'none'}`; wandb run `{r.wandb_dir or 'none'}`")
    if any(r.wandb_dir for r in results):
        lines.append("")
        lines.append("Upload the offline wandb runs with `wandb sync <run dir>` (after `wandb login`).")
    return "\n".join(lines)


def _print_rich(results: list[TaskResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="lightning-tf tour: the three tasks on their embedded data")
    for col in ("task", "data", "metric", "result", "verdict", "min"):
        table.add_column(col)
    for r in results:
        metric, value = _headline(r)
        table.add_row(r.task, r.data, metric, value, "\n".join(r.verdicts) or "-", f"{r.minutes:.1f}")
    console = Console(width=None if Console().is_terminal else 160)
    console.print(table)
    for r in results:
        console.print(f"[bold]{r.task}[/]: checkpoint {r.checkpoint or 'none'}; wandb run {r.wandb_dir or 'none'}")
    if any(r.wandb_dir for r in results):
        console.print("Upload the offline wandb runs with `wandb sync <run dir>` (after `wandb login`).")


def tour(
    tasks: list[Literal["text", "vision", "kline"]] = list(TASKS),  # noqa: B006 (read, never changed)
    root: Path | None = None,
    forwarded: list[str] | None = None,
) -> list[TaskResult]:
    """Train and test the three tasks on their embedded data, one after the other in this process, and print
    one summary table (also written to runs/tour_summary.md). Arguments after -- go to every task's fit
    (lightning-tf tour -- --trainer.max_epochs 1).

    Args:
        tasks: tasks to run, in order
        root: the directory holding configs/ (default: found)
        forwarded: arguments for every task's fit (what follows --)
    """
    extra = list(forwarded or [])
    folder = _configs_dir(root)
    results = [run_task(task, folder, extra) for task in tasks]
    _print_rich(results)
    table = summary_table(results)
    out = Path("runs") / "tour_summary.md"
    for i, a in enumerate(extra[:-1]):
        if a == "--trainer.default_root_dir":
            out = Path(extra[i + 1]) / "tour_summary.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table + "\n")
    print(f"summary written to {out}")
    return results
