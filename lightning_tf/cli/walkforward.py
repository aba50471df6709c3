"""``lightning-tf walkforward``: the K-line model trained and tested fold by fold on a universe's dates, with the
baselines on the same folds, and one report. The command holds the plan, the run and the gather; what a fold
computes and keeps is the universe workflow's (:mod:`lightning_tf.kline.universe`).

The plan: the folds (:func:`lightning_tf.kline.universe.folds`) on the config's trading dates, kept as
``<out>/walkforward.json``. The run: each fold is an ordinary ``fit`` and test of the given config through
:func:`~lightning_tf.cli.lightning_cli.make_cli` with the fold's dates as data overrides (``splits``:
``train_start``, ``val_start``, ``test_start``, ``test_end``, ``embargo``), and its
:class:`~lightning_tf.kline.universe.FoldRecorder` writes into ``<out>/fold_<k>/``: ``model.ckpt`` (the tested
checkpoint) and ``predictions.parquet`` (its test windows, the model beside the baselines); then ``done.json``. A
fold with both is finished, so the same command run again after a kill goes on from the first unfinished fold.
``--fold k`` runs fold ``k`` alone (one job of a SLURM array, each on its own GPUs). The gather (``--gather``, or
after the last fold): the report (:mod:`lightning_tf.kline.universe.report`) from the finished folds:
``folds.csv``, ``predictions.parquet`` (every test date), ``report.md`` with its charts, and the charts to wandb
(offline) when the config logs to wandb.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from importlib import import_module
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.utilities import rank_zero_only

from lightning_tf.kline.pretrained import is_published
from lightning_tf.kline.universe.folds import Fold
from lightning_tf.kline.universe.folds import folds as make_folds
from lightning_tf.kline.universe.kronos import KronosColumn
from lightning_tf.kline.universe.recorder import MODEL, PREDICTIONS, FoldRecorder
from lightning_tf.kline.universe.report import (
    default_top_k,
    evaluate_forecasters,
    fold_metrics,
    log_wandb,
    write_report,
)
from lightning_tf.training.private.jsonargparse import option_strings

from .argument_errors import one_line_error
from .lightning_cli import LightningTFCLI, make_cli

__all__ = ["walkforward"]

PLAN = "walkforward.json"
DONE = "done.json"


class _ParseOnly(LightningTFCLI):
    """Parses the configs and overrides as ``fit`` does and builds nothing."""

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        try:
            super().parse_arguments(parser, args)
        except Exception as err:  # jsonargparse's ArgumentError (exit_on_error=False): one line
            options = option_strings(parser)
            raise ValueError(one_line_error(str(err), options)) from None

    def _set_seed(self) -> None:
        pass

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass

    def after_instantiate_classes(self) -> None:
        pass


def _config(forwarded: list[str]) -> Namespace:
    cli = make_cli(list(forwarded), cli_class=_ParseOnly, run=False, parser_kwargs={"exit_on_error": False})
    return cli.config


def _datamodule(config: Namespace) -> Any:
    """The config's DataModule, built from its class path and arguments (to read the dates and sizes)."""
    data = config.get("data")
    if not isinstance(data, Namespace) or "class_path" not in data:
        raise ValueError("walkforward needs a data config: --config a K-line config (data: KLineDataModule)")
    module, _, name = str(data.class_path).rpartition(".")
    cls = getattr(import_module(module), name)
    init = data.get("init_args") or Namespace()
    arguments = init.as_dict()
    dm = cls.from_arguments(arguments) if hasattr(cls, "from_arguments") else cls(**arguments)
    if not hasattr(dm, "trading_dates"):
        raise ValueError(f"walkforward needs a K-line DataModule with dates; {data.class_path} has none")
    return dm


def _uses_wandb(config: Namespace) -> dict[str, Any] | None:
    logger = config.get("trainer.logger")
    loggers = logger if isinstance(logger, list) else [logger]
    for one in loggers:
        if isinstance(one, Namespace) and str(one.get("class_path", "")).endswith("WandbLogger"):
            return (one.get("init_args") or Namespace()).as_dict()
    return None


def _day(t: Any) -> str:
    return pd.Timestamp(t).strftime("%Y-%m-%d")


def _plan(
    dm: Any, n_folds: int, test_span: int, val_span: int, embargo: int | None, window: str, train_span: int | None
) -> tuple[list[Fold], int]:
    horizon = int(dm.horizon)
    embargo = horizon if embargo is None else embargo
    if embargo < horizon:
        raise ValueError(f"--embargo ({embargo}) must be at least the data's horizon ({horizon}) bars")
    dates = dm.trading_dates()
    if len(tickers := dm.path_tickers()) < 2:
        raise ValueError(
            f"data: one ticker ({tickers[0]}) in {dm.path}; a walk-forward ranks the tickers of each date (RankIC, "
            "portfolios): give a universe (a long table with a ticker column, or a folder of files)"
        )
    min_train = int(dm.context_len) + horizon + embargo + 1
    return make_folds(dates, n_folds, test_span, val_span, embargo, window, train_span, min_train=min_train), embargo


def _check_plan(out: Path, plan: dict[str, Any]) -> None:
    """The folder's plan must be this one: a folder of other folds would mix two walk-forwards."""
    path = out / PLAN
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        if before.get("folds") != plan["folds"] or before.get("refit") != plan["refit"]:
            raise ValueError(
                f"{out}: holds a walk-forward with other folds or refit ({PLAN}); use another --out or remove it"
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        _write_json(path, plan)


def _write_json(path: Path, value: Any) -> None:
    """``value`` as JSON at ``path``, whole or not at all: folds started together (an array's jobs) read the plan
    another has just written, and a kill while ``done.json`` is written must not leave a fold looking finished."""
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    with os.fdopen(handle, "w", encoding="utf-8") as f:
        f.write(json.dumps(value, indent=1, default=float))
    os.replace(partial, path)


def _finished(folder: Path) -> bool:
    return (folder / PREDICTIONS).exists() and (folder / DONE).exists()


def _overrides(fold: Fold, embargo: int, folder: Path) -> list[str]:
    args = [f"--data.init_args.splits.{k}={v}" for k, v in fold.data_overrides(embargo).items()]
    return [*args, f"--trainer.default_root_dir={folder}"]


def _run_fold(
    fold: Fold,
    n_folds: int,
    embargo: int,
    out: Path,
    refit: str,
    forwarded: list[str],
    lightgbm: bool,
    started: float,
    zero_shot: Path | None = None,
    kronos: KronosColumn | None = None,
) -> None:
    folder = out / f"fold_{fold.number}"
    previous = out / f"fold_{fold.number - 1}" / MODEL
    first = out / "fold_1" / MODEL
    print(
        f"walk-forward fold {fold.number}/{n_folds}: train {_day(fold.train_start)} .. {_day(fold.train_end)}, "
        f"validate {_day(fold.val_start)} .. {_day(fold.val_end)}, test {_day(fold.test_start)} .. "
        f"{_day(fold.test_end)} (elapsed {time.perf_counter() - started:.0f} s)",
        flush=True,
    )
    warm_from = None
    test_only = (refit == "once" and fold.number > 1) or zero_shot is not None
    if zero_shot is not None:
        first = zero_shot  # every fold tests the pretrained model as it is
    elif fold.number > 1 and refit in ("warm", "once"):
        need = first if refit == "once" else previous
        if not need.exists():
            raise ValueError(f"--refit {refit}: fold {fold.number} needs {need}; run the earlier fold(s) first")
        warm_from = None if test_only else need
    zero = rank_zero_only.rank == 0  # under DDP every rank runs this command; one writes the files
    if folder.exists() and zero:  # what a killed run of this fold left: it runs again from the start
        shutil.rmtree(folder)
    t0 = time.perf_counter()
    recorder = FoldRecorder(folder, warm_from=warm_from, lightgbm=lightgbm, keep_model=not test_only, kronos=kronos)
    kwargs = {
        "parser_kwargs": {"exit_on_error": False, "fit": {"exit_on_error": False}, "test": {"exit_on_error": False}}
    }
    if zero_shot is not None and is_published(zero_shot):
        # a published model alone, as published: built from the config with its weights, no linear path to fit
        model = [f"--model.init_args.pretrained={zero_shot}", "--model.init_args.residual=only"]
        args = ["test", *forwarded, *_overrides(fold, embargo, folder), *model]
    elif test_only:
        args = ["test", *forwarded, *_overrides(fold, embargo, folder), f"--ckpt_path={first}"]
    else:
        args = ["fit", *forwarded, *_overrides(fold, embargo, folder), "--test_after_fit=true"]
    cli = make_cli(args, trainer_defaults={"callbacks": [recorder]}, **kwargs)
    _finish_wandb()
    if not zero:
        return
    recorder.after_run(cli.datamodule)
    if not (folder / PREDICTIONS).exists():
        raise RuntimeError(f"fold {fold.number}: the run ended without testing (no {folder / PREDICTIONS})")
    model = recorder.test_summary.get("model", {}) if recorder.test_summary else {}
    done = {
        **fold.row(),
        "seconds": round(time.perf_counter() - t0, 1),
        "residual_kept": recorder.residual_kept,
        "checkpoint": str(first if test_only else folder / MODEL),
        "test": {scale: metrics for scale, metrics in model.items() if isinstance(metrics, dict)},
        "notes": recorder.notes,
    }
    _write_json(folder / DONE, done)


def _finish_wandb() -> None:
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def _gather(
    out: Path,
    plan: dict[str, Any],
    top_k: int | None,
    n_drop: int | None,
    cost_bps: float,
    wandb_args: dict[str, Any] | None,
) -> dict[str, Path]:
    numbers = [f["number"] for f in plan["folds"]]
    missing = [k for k in numbers if not _finished(out / f"fold_{k}")]
    if missing:
        raise ValueError(f"{out}: fold(s) {missing} are not finished; run them (--fold k) before --gather")
    parts, rows, notes = [], [], []
    for fold in plan["folds"]:
        k = fold["number"]
        frame = pd.read_parquet(out / f"fold_{k}" / PREDICTIONS)
        frame.insert(0, "fold", k)
        parts.append(frame)
        done = json.loads((out / f"fold_{k}" / DONE).read_text(encoding="utf-8"))
        rows.append(
            {
                "fold": k,
                **{key: fold[key] for key in fold if key != "number"},
                "seconds": done["seconds"],
                "residual_kept": done.get("residual_kept", False),
            }
        )
        notes += [f"* fold {k}: {n}" for n in done.get("notes", [])]
    predictions = pd.concat(parts, ignore_index=True)
    predictions.to_parquet(out / PREDICTIONS, index=False)
    top_k = default_top_k(predictions) if top_k is None else top_k
    n_drop = max(1, top_k // 5) if n_drop is None else n_drop
    result = evaluate_forecasters(predictions, top_k=top_k, n_drop=n_drop, cost_bps=cost_bps)
    table = pd.DataFrame([{**row, **fold_metrics(result, row["fold"])} for row in rows])
    table.to_csv(out / "folds.csv", index=False)
    about = [
        f"`lightning-tf walkforward {' '.join(plan['command'])}`",
        "",
        f"{len(numbers)} folds ({plan['window']} training window, refit {plan['refit']}, embargo {plan['embargo']} "
        f"bars); {predictions['ticker'].nunique()} tickers, {predictions['date'].nunique()} test dates "
        f"{_day(predictions['date'].min())} .. {_day(predictions['date'].max())}; forecasters: "
        + ", ".join(result.pooled),
    ]
    files = write_report(result, table.rename(columns={"number": "fold"}), out, about=about, notes=notes)
    files.update(folds=out / "folds.csv", predictions=out / PREDICTIONS)
    if wandb_args is not None:
        log_wandb(files, result, wandb_args)
    print(f"walk-forward report: {files['report']}", flush=True)
    for line in (files["report"]).read_text(encoding="utf-8").splitlines():
        if line.startswith("* the model"):
            print(line, flush=True)
    return files


def walkforward(
    folds: int = 4,
    test_span: int = 252,
    val_span: int = 126,
    embargo: int | None = None,
    refit: Literal["every", "warm", "once"] = "every",
    window: Literal["expanding", "rolling"] = "expanding",
    train_span: int | None = None,
    fold: int | None = None,
    gather: bool = False,
    out: Path = Path("runs/walkforward"),
    top_k: int | None = None,
    n_drop: int | None = None,
    cost_bps: float = 10.0,
    no_lightgbm: bool = False,
    zero_shot: Path | None = None,
    kronos: str | None = None,
    kronos_tokenizer: str | None = None,
    kronos_context: int | None = None,
    kronos_samples: int = 1,
    kronos_finetune_steps: int = 0,
    kronos_finetune_lr: float = 2e-5,
    forwarded: list[str] | None = None,
) -> dict[str, Path] | None:
    """Train and test a K-line config fold by fold over its dates (walk-forward), the baselines on the same
    folds, and write one report (every option not listed here goes to each fold's fit, e.g. --config).

    Args:
        folds: folds; their test spans are consecutive and end on the data's last date.
        test_span: test dates per fold (252: a year of daily bars).
        val_span: validation dates per fold, before its test dates.
        embargo: dates (and bars) between training and validation and between validation and test; at least the
            horizon (default: the horizon).
        refit: every fold trained from scratch (every), from the previous fold's weights (warm), or fold 1 only
            and tested on every fold (once).
        window: training from the first date (expanding) or the last train_span dates (rolling).
        train_span: training dates of a rolling window (default: as many as the first fold has).
        fold: run this fold alone (1..folds), e.g. one job of a SLURM array; then --gather.
        gather: write the report from the finished folds (no training).
        out: the walk-forward's folder (per-fold checkpoints and predictions, folds.csv, report.md).
        top_k: names in the long (and short) book (default: a tenth of the universe).
        n_drop: most names replaced a date (default: top_k / 5).
        cost_bps: cost in basis points per unit of turnover.
        no_lightgbm: leave the LightGBM baseline out.
        zero_shot: a pretrained forecaster's checkpoint, tested on every fold as it is (no training; the data config
            must give it the windows it reads: the same context, horizon and features); a fold whose validation or
            test dates it has seen is warned of. Or a published model (``amazon/chronos-bolt-small``, or a folder of
            its files): the config's forecaster started from it, tested alone (``residual: only``) on every fold.
        kronos: a published Kronos (``NeoQuasar/Kronos-small``, its folder, or a folder ``to_kronos`` wrote): its
            zero-shot forecasts from the raw bars on every fold's test dates, beside the model (``Kronos zero-shot``).
        kronos_tokenizer: the Kronos tokenizer (hub name or folder) where --kronos does not say which.
        kronos_context: bars Kronos reads before each origin (at most its max_context; default: max_context less
            the horizon, so that it keeps its cache through the forecast).
        kronos_samples: continuations Kronos draws per origin; its forecast is their mean.
        kronos_finetune_steps: also fine-tune Kronos on each fold's training bars for this many steps, its own
            objective (windows of kronos_context + 1 bars), and forecast with it beside (``Kronos fine-tuned``).
        kronos_finetune_lr: the fine-tuning's peak learning rate.
    """
    forwarded = list(forwarded or [])
    from lightning_tf.training.resources import bundled_configs

    forwarded = bundled_configs(forwarded)
    config = _config(forwarded)
    dm = _datamodule(config)
    fold_list, embargo = _plan(dm, folds, test_span, val_span, embargo, window, train_span)
    kronos_column = None
    if kronos is None and kronos_finetune_steps:
        raise ValueError("--kronos_finetune_steps fine-tunes the model --kronos names: give --kronos")
    if kronos is not None and not gather:
        kronos_column = KronosColumn(
            kronos,
            kronos_tokenizer,
            kronos_context,
            kronos_samples,
            finetune_steps=kronos_finetune_steps,
            finetune_lr=kronos_finetune_lr,
        )
        FoldRecorder.preload(kronos_column)  # a name that cannot be read fails here, before any fold trains
    out = Path(out)
    plan = {
        "command": [*sys.argv[2:]] if sys.argv[1:2] == ["walkforward"] else forwarded,
        "folds": [f.row() for f in fold_list],
        "refit": refit if zero_shot is None else f"none (zero-shot: {zero_shot})",
        "window": window,
        "embargo": embargo,
    }
    if rank_zero_only.rank == 0:
        _check_plan(out, plan)
    if fold is not None and not 1 <= fold <= len(fold_list):
        raise ValueError(f"--fold {fold}: the walk-forward has folds 1..{len(fold_list)}")
    if not gather:
        started = time.perf_counter()
        chosen = [f for f in fold_list if fold is None or f.number == fold]
        for f in chosen:
            if _finished(out / f"fold_{f.number}"):
                print(f"walk-forward fold {f.number}/{len(fold_list)}: finished earlier, kept", flush=True)
                continue
            _run_fold(
                f, len(fold_list), embargo, out, refit, forwarded, not no_lightgbm, started, zero_shot, kronos_column
            )
        if fold is not None or rank_zero_only.rank != 0:
            return None
    return _gather(out, plan, top_k, n_drop, cost_bps, _uses_wandb(config))
