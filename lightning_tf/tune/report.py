"""What a study leaves in its folder: ``best.yaml`` (the best trial as one complete config that
``lightning-tf fit --config best.yaml`` trains), ``trials.csv`` (one row per trial), ``summary.md`` (the
best trial, the top 10, how many were pruned or failed, wall time) and figures drawn by Optuna's matplotlib
visualisations (optimisation history, parameter importances, parallel coordinates, the validation curves).
"""

from __future__ import annotations

import csv
import datetime
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

__all__ = ["FIGURES", "ranked_trials", "state_name", "study_wall_seconds", "trial_rows", "write_report"]

log = logging.getLogger(__name__)

#: figure file -> Optuna's matplotlib function that draws it
FIGURES = {
    "history.png": "plot_optimization_history",
    "importances.png": "plot_param_importances",
    "parallel_coordinate.png": "plot_parallel_coordinate",
    "intermediate_values.png": "plot_intermediate_values",
}


def state_name(trial: FrozenTrial) -> str:
    """``complete``, ``pruned``, ``failed``, ``refused``, ``interrupted``, ``running`` or ``waiting``."""
    if trial.state == TrialState.FAIL:
        if trial.user_attrs.get("interrupted"):
            return "interrupted"
        return "refused" if trial.user_attrs.get("refused") else "failed"
    return trial.state.name.lower()


def _shown(path: str | Path) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    full = Path(path).absolute()
    try:
        return str(full.relative_to(Path.cwd()))
    except ValueError:
        return str(full)


def _inside(path: str | Path, folder: Path) -> str:
    """``path`` relative to ``folder`` (the study folder, where summary.md is) when below it."""
    try:
        return os.path.relpath(path, folder) if Path(path).absolute().is_relative_to(folder.absolute()) else str(path)
    except ValueError:
        return str(path)


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per trial: number, state, value, epochs, seconds, each parameter, the validation metrics of its best
    epoch, why it ended, its folder."""
    names = list(dict.fromkeys(name for t in study.trials for name in t.params))
    metrics = sorted({k for t in study.trials for k in t.user_attrs.get("val_metrics", {})})
    rows = []
    for t in study.trials:
        row: dict[str, Any] = {
            "number": t.number,
            "state": state_name(t),
            "value": t.value,
            "epochs": t.user_attrs.get("epochs", len(t.intermediate_values)),
            "seconds": t.user_attrs.get("seconds"),
        }
        row.update({name: t.params.get(name) for name in names})
        row.update({name: t.user_attrs.get("val_metrics", {}).get(name) for name in metrics})  # at its best epoch
        row.update(
            {
                "reason": t.user_attrs.get("reason", ""),
                "run_dir": t.user_attrs.get("run_dir", ""),
                "worker": t.user_attrs.get("worker"),
                "retry_of": t.user_attrs.get("retry_of"),
                "started": t.datetime_start.isoformat(timespec="seconds") if t.datetime_start else "",
                "finished": t.datetime_complete.isoformat(timespec="seconds") if t.datetime_complete else "",
            }
        )
        rows.append(row)
    return rows


def study_wall_seconds(study: optuna.Study) -> float:
    """Wall time the study's commands ran (each run of ``lightning-tf tune`` records its own), else the span
    from the first trial's start to the last one's end."""
    runs = [v for k, v in study.user_attrs.items() if k.startswith("run:") and isinstance(v, dict)]
    if runs:
        return float(sum(r.get("wall_s", 0.0) for r in runs))
    starts = [t.datetime_start for t in study.trials if t.datetime_start]
    ends = [t.datetime_complete for t in study.trials if t.datetime_complete]
    return (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0


def ranked_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The complete trials, best first (ties: the earlier trial)."""
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE and t.value is not None]
    reverse = study.direction == optuna.study.StudyDirection.MAXIMIZE
    return sorted(complete, key=lambda t: (t.value, t.number) if not reverse else (-t.value, t.number))


def _figures(study: optuna.Study, folder: Path) -> dict[str, str]:
    """Draw each figure of :data:`FIGURES`; file -> "" when drawn, else why not."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    done: dict[str, str] = {}
    if not ranked_trials(study):
        return {name: "no complete trial yet" for name in FIGURES}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for name, function in FIGURES.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ExperimentalWarning of the matplotlib backend
                ax = getattr(ovm, function)(study)
            figure = (ax.flat[0] if hasattr(ax, "flat") else ax).figure
            figure.savefig(folder / name, dpi=110, bbox_inches="tight")
            plt.close(figure)
            done[name] = ""
        except Exception as err:  # noqa: BLE001 - a figure that cannot be drawn yet is noted, not fatal
            done[name] = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            plt.close("all")
    optuna.logging.set_verbosity(verbosity)
    return done


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def write_report(study: optuna.Study, folder: str | Path, best_config: str | None) -> dict[str, Path]:
    """Write the study's report into ``folder``. ``best_config``: the best trial's complete config (YAML),
    None when no trial has completed. Returns what was written, by kind."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    metric = study.user_attrs.get("metric", "value")
    ranked = ranked_trials(study)
    best = ranked[0] if ranked else None

    best_path = folder / "best.yaml"
    if best is not None and best_config is not None:
        header = (
            f"# The best trial of study {study.study_name}: trial {best.number}, {metric} {best.value:.6g}"
            f" ({study.direction.name.lower()}).\n"
            f"# Its parameters: {', '.join(f'{k}={_value(v)}' for k, v in best.params.items())}\n"
            f"#   lightning-tf fit --config {_shown(best_path)}\n"
        )
        best_path.write_text(header + best_config)
        written["best"] = best_path

    rows = trial_rows(study)
    csv_path = folder / "trials.csv"
    with open(csv_path, "w", newline="") as handle:
        fields = list(rows[0]) if rows else ["number", "state", "value"]
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    written["trials"] = csv_path

    figures = _figures(study, folder) if study.trials else {}
    written.update({name: folder / name for name, why in figures.items() if not why})

    counts: dict[str, int] = {}
    for t in study.trials:
        counts[state_name(t)] = counts.get(state_name(t), 0) + 1
    wall = study_wall_seconds(study)
    trial_s = sum(float(t.user_attrs.get("seconds") or 0.0) for t in study.trials)
    lines = [
        f"# Study {study.study_name}",
        "",
        f"{len(study.trials)} trials: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ".",
        f"Wall time {wall / 60:.1f} min; the trials' own time {trial_s / 60:.1f} min.",
        f"Objective: {metric}, {study.direction.name.lower()}d; search space: "
        f"{_shown(study.user_attrs['search']) if 'search' in study.user_attrs else '?'}.",
    ]
    max_epochs = study.user_attrs.get("max_epochs")
    epochs = sum(int(t.user_attrs.get("epochs", 0)) for t in study.trials)
    full = sum(1 for t in study.trials if t.user_attrs.get("epochs")) * (max_epochs or 0)
    if max_epochs and full:
        lines.append(
            f"Epochs run: {epochs} of the {full} that full runs of the trials that trained would take "
            f"({100 * (1 - epochs / full):.0f}% saved by pruning and early stopping)."
        )
    lines.append("")
    if best is not None:
        lines += [
            "## Best trial",
            "",
            f"Trial {best.number}: {metric} **{best.value:.6g}** after {best.user_attrs.get('epochs', '?')} "
            f"epochs ({float(best.user_attrs.get('seconds') or 0):.0f} s), run folder "
            f"`{_inside(best.user_attrs.get('run_dir', ''), folder)}`.",
            "",
        ]
        lines += _table([[f"`{k}`", _value(v)] for k, v in best.params.items()], ["parameter", "value"])
        lines += ["", f"Train it: `lightning-tf fit --config {_shown(best_path)}`", ""]
    else:
        lines += ["No trial has completed yet.", ""]
    if ranked:
        names = list(dict.fromkeys(k for t in ranked[:10] for k in t.params))
        table = [
            [
                str(i + 1),
                str(t.number),
                f"{t.value:.6g}",
                str(t.user_attrs.get("epochs", "")),
                *(_value(t.params.get(n)) for n in names),
            ]
            for i, t in enumerate(ranked[:10])
        ]
        lines += ["## Top 10", ""]
        lines += _table(table, ["rank", "trial", metric, "epochs", *(_short(n) for n in names)])
        lines.append("")
    ended = [t for t in study.trials if state_name(t) in ("failed", "refused", "interrupted")]
    if ended:
        lines += ["## Failed, refused and interrupted trials", ""]
        lines += [f"- trial {t.number} ({state_name(t)}): {t.user_attrs.get('reason', '')}" for t in ended]
        lines.append("")
    if figures:
        lines += ["## Figures", ""]
        for name, why in figures.items():
            lines.append(f"![{name}]({name})" if not why else f"- {name}: not drawn ({why})")
        lines.append("")
    lines.append(f"Written {datetime.datetime.now().isoformat(timespec='seconds')}; trials.csv holds every trial.")
    summary = folder / "summary.md"
    summary.write_text("\n".join(lines) + "\n")
    written["summary"] = summary
    return written
