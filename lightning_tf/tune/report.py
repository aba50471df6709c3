"""What a study leaves in its folder (docs/tune.md, results): ``best.yaml`` (the best trial as one complete config),
``trials.csv``, ``summary.md`` and Optuna's matplotlib figures.
"""

from __future__ import annotations

import copy
import csv
import datetime
import os
import warnings
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from .study import retried, retry, state_name, tally

__all__ = ["FIGURES", "best_config", "brief", "ranked_trials", "shown", "trial_rows", "write_report"]

#: figure file -> Optuna's matplotlib function that draws it
FIGURES = {
    "history.png": "plot_optimization_history",
    "importances.png": "plot_param_importances",
    "parallel_coordinate.png": "plot_parallel_coordinate",
    "intermediate_values.png": "plot_intermediate_values",
}


def best_config(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a complete config, as ``fit --print_config`` writes it) with each dotted ``params`` name set."""
    out = copy.deepcopy(config)
    for name, value in params.items():
        *path, last = name.split(".")
        node = out
        for key in path:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"{name}: {key} is not a section of the config")
        node[last] = value
    return out


def shown(path: str | Path) -> str:
    """``path`` relative to the working directory when below it (a storage URL as it is)."""
    if "://" in str(path):
        return str(path)
    full = Path(path).absolute()
    return str(full.relative_to(Path.cwd())) if full.is_relative_to(Path.cwd()) else str(full)


def brief(value: Any) -> str:
    """A parameter's value as the report and the trial lines show it: a float to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def ranked_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The complete trials, best first (ties: the earlier trial)."""
    sign = -1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1
    return sorted(study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: (sign * t.value, t.number))


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per trial of ``trials.csv`` (its columns: docs/tune.md, results)."""
    trials, again = study.trials, retried(study.trials)
    names = list(dict.fromkeys(name for t in trials for name in t.params))
    metrics = sorted({k for t in trials for k in t.user_attrs.get("val_metrics", {})})
    rows = []
    for t in trials:
        attrs = t.user_attrs
        row = {"number": t.number, "state": state_name(t, again), "value": t.value}
        row |= {"epochs": len(t.intermediate_values), "seconds": t.duration and round(t.duration.total_seconds(), 1)}
        row |= {name: t.params.get(name) for name in names}
        row |= {name: attrs.get("val_metrics", {}).get(name) for name in metrics}
        row |= {"reason": attrs.get("reason", ""), "run_dir": attrs.get("run_dir", ""), "job": attrs.get("job")}
        row["retry_of"] = retry.retried_trial_number(t)
        row["started"] = t.datetime_start.isoformat(timespec="seconds") if t.datetime_start else ""
        row["finished"] = t.datetime_complete.isoformat(timespec="seconds") if t.datetime_complete else ""
        rows.append(row)
    return rows


def _figures(study: optuna.Study, folder: Path) -> dict[str, str]:
    """Draw each figure of :data:`FIGURES`; file -> "" when drawn, else why not."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    if not ranked_trials(study):
        return {name: "no complete trial yet" for name in FIGURES}
    done = {}
    for name, function in FIGURES.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ExperimentalWarning of the matplotlib backend
                axes = getattr(ovm, function)(study)  # each of the four draws one Axes
            axes.figure.savefig(folder / name, dpi=110, bbox_inches="tight")
            done[name] = ""
        except Exception as err:  # noqa: BLE001 - a figure that cannot be drawn yet is noted, not fatal
            done[name] = (str(err).strip().splitlines() or [type(err).__name__])[0]
        plt.close("all")
    return done


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def write_report(study: optuna.Study, folder: str | Path) -> dict[str, Path]:
    """Write the study's report into ``folder``; what was written, by kind (``best`` only when a trial completed
    and the study holds its config)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    metric, config = study.user_attrs.get("metric", "value"), study.user_attrs.get("config")
    ranked = ranked_trials(study)
    written = {"trials": folder / "trials.csv", "summary": folder / "summary.md"}
    if ranked and config:
        best, written["best"] = ranked[0], folder / "best.yaml"
        written["best"].write_text(
            f"# The best trial of study {study.study_name}: trial {best.number}, {metric} {best.value:.6g}"
            f" ({study.direction.name.lower()}).\n"
            f"# Its parameters: {', '.join(f'{k}={brief(v)}' for k, v in best.params.items())}\n"
            f"#   lightning-tf fit --config {shown(written['best'])}\n"
            + yaml.safe_dump(best_config(config, best.params), sort_keys=False)
        )
    rows = trial_rows(study)
    with open(written["trials"], "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["number", "state", "value"])
        writer.writeheader()
        writer.writerows(rows)
    figures = _figures(study, folder) if study.trials else {}
    written |= {name: folder / name for name, why in figures.items() if not why}
    written["summary"].write_text("\n".join(_summary(study, rows, ranked, figures, folder)) + "\n")
    return written


def _summary(
    study: optuna.Study, rows: list[dict[str, Any]], ranked: list[FrozenTrial], figures: dict[str, str], folder: Path
) -> list[str]:
    """The lines of ``summary.md``."""
    attrs, counts = study.user_attrs, tally(study.trials)
    metric, max_epochs = attrs.get("metric", "value"), attrs.get("max_epochs")
    done = [t for t in study.trials if t.datetime_complete]
    span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)) if done else None
    epochs, trained = sum(r["epochs"] for r in rows), sum(1 for r in rows if r["epochs"])
    lines = [
        f"# Study {study.study_name}\n",
        f"{len(rows)} trials: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ".",
        f"From the first trial's start to the last one's end {span.total_seconds() / 60 if span else 0:.1f} min; "
        f"the trials' own time {sum(r['seconds'] or 0 for r in rows) / 60:.1f} min.",
        f"Objective: {metric}, {study.direction.name.lower()}d; search space: "
        f"{shown(attrs['search']) if 'search' in attrs else '?'}.",
    ]
    if trained and max_epochs:
        full = trained * max_epochs
        lines.append(
            f"Epochs run: {epochs} of the {full} that full runs of the trials that trained would take "
            f"({100 * (1 - epochs / full):.0f}% saved by pruning and early stopping)."
        )
    if ranked:
        best, run = ranked[0], ranked[0].user_attrs.get("run_dir", "")
        names = list(dict.fromkeys(k for t in ranked[:10] for k in t.params))
        top = [
            [str(i + 1), str(t.number), f"{t.value:.6g}", str(len(t.intermediate_values))]
            + [brief(t.params[n]) if n in t.params else "" for n in names]
            for i, t in enumerate(ranked[:10])
        ]
        lines += [
            "\n## Best trial\n",
            f"Trial {best.number}: {metric} **{best.value:.6g}** after {len(best.intermediate_values)} epochs "
            f"({best.duration.total_seconds():.0f} s), run folder "
            f"`{os.path.relpath(run, folder) if run else ''}`.\n",
            *_table([[f"`{k}`", brief(v)] for k, v in best.params.items()], ["parameter", "value"]),
            f"\nTrain it: `lightning-tf fit --config {shown(folder / 'best.yaml')}`",
            "\n## Top 10\n",
            *_table(top, ["rank", "trial", metric, "epochs", *(n.rpartition(".")[2] for n in names)]),
        ]
    else:
        lines.append("\nNo trial has completed yet.")
    if ended := [r for r in rows if r["state"] in ("failed", "refused", "interrupted")]:
        why = "interrupted: its command stopped (a kill, a lost machine)"
        lines.append("\n## Failed, refused and interrupted trials\n")
        lines += [f"- trial {r['number']} ({r['state']}): {r['reason'] or why}" for r in ended]
    if figures:
        lines.append("\n## Figures\n")
        lines += [f"![{name}]({name})" if not why else f"- {name}: not drawn ({why})" for name, why in figures.items()]
    lines.append(f"\nWritten {datetime.datetime.now().isoformat(timespec='seconds')}; trials.csv holds every trial.")
    return lines
