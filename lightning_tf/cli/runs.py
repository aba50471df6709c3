"""A run of the ``lightning-tf`` command: its name (``<task>-<size>-<dataset>``), its folder
(``runs/lightning-tf/<run id>/``, with ``config.yaml``, ``checkpoints/`` and a link to the wandb
run), the config saved there and uploaded to wandb, and the summary printed when ``fit`` ends.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger

from lightning_tf.training import EXIT_STATUS, CheckpointError, LastCheckpoint, Lost, run_dir
from lightning_tf.training.private import lightning as private
from lightning_tf.training.rank_watch import EXIT_STATUS as LOST_STATUS

__all__ = [
    "ResumeError",
    "RunConfigCallback",
    "apply_wandb_run_defaults",
    "fit_summary",
    "latest_checkpoint",
    "link_wandb_run",
    "lost_rank_line",
    "newest_checkpoint",
    "quiet_wandb",
    "resolved_config",
    "resume_command",
    "resume_failure",
    "run_name",
    "scalars",
    "shown",
    "stopped_summary",
    "wandb_logger_args",
    "wandb_run_dir",
]


class RunConfigCallback(SaveConfigCallback):
    """Saves the resolved config as ``config.yaml`` in the run directory, beside ``checkpoints/``
    (``<save_dir>/<project>/<run id>/`` under the WandbLogger), so ``--config`` on that file repeats
    the run, and links the wandb run's folder there (:func:`link_wandb_run`); without a logger
    (``--trainer.logger false``, the debug config) nothing is written.

    Under wandb it also uploads the config to the run's config, nested by section (``trainer``,
    ``model``, ``data``, ``seed_everything``, ...), with the arguments the model and data were really
    built with (linked values included). Lightning would also log the model's and the data's
    hyperparameters flat (``lr``, ``d_model``, ``_instantiator``, ...), repeating
    ``model.init_args``: when every logger is a WandbLogger that flat copy is switched off, as
    ``save_hyperparameters(logger=False)`` would.

    Args:
        *args: SaveConfigCallback's (parser, config, config_filename, overwrite, multifile, save_to_log_dir),
            positional or by keyword.
        wandb_given: what :func:`apply_wandb_run_defaults` replaced (WandbLogger index, argument,
            value as given): put back in the saved config, so the name, job type and mode are
            derived again when the file is reused (say, by ``lightning-tf test``).
    """

    def __init__(self, *args: Any, wandb_given: list[tuple[int, str, Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wandb_given = wandb_given or []

    def _config_as_given(self) -> Namespace:
        config = self.config.clone()
        loggers = wandb_logger_args(config)
        for index, key, value in self.wandb_given:
            if index < len(loggers):
                loggers[index][key] = value
        return config

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if trainer.logger is None:
            return
        if all(isinstance(logger, WandbLogger) for logger in trainer.loggers):
            # the run's config, which save_config uploads, holds them: Lightning would log them again after setup
            private.skip_hyperparameter_logging(pl_module)
            if trainer.datamodule is not None:
                private.skip_hyperparameter_logging(trainer.datamodule)
        if self.already_saved:
            return
        # rank zero alone knows the run id (the run exists only there)
        path = os.path.join(run_dir(trainer), self.config_filename) if trainer.is_global_zero else ""
        if trainer.strategy.broadcast(not self.overwrite and bool(path) and os.path.isfile(path)):
            raise RuntimeError(f"{path} exists: not overwriting the config of an earlier run with the same id")
        if trainer.is_global_zero:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.parser.save(
                self._config_as_given(), path, skip_none=False, overwrite=self.overwrite, multifile=self.multifile
            )
            self.save_config(trainer, pl_module, stage)
            link_wandb_run(trainer)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        loggers = [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]
        if not loggers:
            return
        dumped = self.parser.dump(self._config_as_given(), skip_none=False)
        data = trainer.datamodule
        config = resolved_config(dumped, pl_module.hparams_initial, None if data is None else data.hparams_initial)
        for logger in loggers:
            logger.log_hyperparams(config)


def resolved_config(dumped: str, model_args: Mapping[str, Any], data_args: Mapping[str, Any] | None) -> dict[str, Any]:
    """The CLI config (``dumped``: the parser's YAML dump) as nested plain data, with the model's and
    the data's ``init_args`` completed by what they were built with (``model_args``, ``data_args``: their
    ``hparams_initial``; values linked from the data, which the parsed config leaves out)."""
    config = yaml.safe_load(dumped) or {}
    for section, built in (("model", model_args), ("data", data_args)):
        if built is None or not isinstance(config.get(section), dict):
            continue
        init_args = config[section].get("init_args") or {}
        # `_instantiator`, `_class_path`: LightningCLI's bookkeeping, not arguments
        init_args.update({k: v for k, v in built.items() if not k.startswith("_")})
        config[section]["init_args"] = init_args
    return config


def wandb_run_dir(trainer: Trainer) -> Path | None:
    """The folder of the trainer's wandb run (``<save_dir>/wandb/offline-run-<time>-<id>`` offline),
    None without a WandbLogger. On global rank zero only: the run exists there."""
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            files = getattr(logger.experiment, "dir", None)  # <run folder>/files
            if files and os.path.isdir(files):
                return Path(files).parent
    return None


def link_wandb_run(trainer: Trainer) -> Path | None:
    """Point ``<run directory>/wandb`` at the wandb run's folder (a relative symbolic link, replaced
    when a resumed run starts a new wandb folder), so that every output of a run is reached from one
    folder; where links cannot be made, ``wandb.txt`` there names the folder. Returns what was
    written (None without a wandb run)."""
    target = wandb_run_dir(trainer)
    if target is None:
        return None
    folder = run_dir(trainer)
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "wandb"
    try:
        if link.is_symlink():
            link.unlink()
        if not link.exists():
            link.symlink_to(os.path.relpath(target, folder), target_is_directory=True)
            return link
    except (OSError, NotImplementedError):  # no symbolic links here (some Windows setups, some mounts)
        pass
    note = folder / "wandb.txt"
    note.write_text(f"{target.resolve()}\n")
    return note


def run_name(model: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """``<task>-<size>-<dataset>`` from the resolved ``model:`` and ``data:`` sections (each a
    mapping with ``class_path`` and ``init_args``): ``text-tiny-synthetic``, ``text-d64-copy``,
    ``vision-digits-digits``, ``kline-d32-msft``.

    The task is the package under ``lightning_tf`` (else the model class's name); the size is the name of
    the ``pretrained`` model, else ``d<d_model>`` when ``d_model`` is set, else the ``preset``; the dataset
    is ``dataset``, else the name of ``path``, ``train_file`` or ``root`` without suffixes (its folder's
    name when the file is named for a split, as ``wmt14_en_de/train``), else the data class's name without
    ``DataModule``.
    """
    return "-".join(part for part in _run_parts(model, data) if part)


def _run_parts(model: Mapping[str, Any], data: Mapping[str, Any]) -> tuple[str, str, str]:
    """(task, size, dataset) of :func:`run_name`; size is "" when the model has neither."""
    model_path, data_path = str(model.get("class_path", "")), str(data.get("class_path", ""))
    model_args, data_args = model.get("init_args") or {}, data.get("init_args") or {}
    parts = model_path.split(".")
    task = parts[1] if len(parts) > 2 and parts[0] == "lightning_tf" else parts[-1].lower()
    if model_args.get("pretrained"):  # the pretrained model's name: opus-mt-de-en
        size = Path(str(model_args["pretrained"]).rstrip("/")).name
    elif model_args.get("d_model") is not None:
        size = f"d{model_args['d_model']}"
    else:
        size = model_args.get("preset") or ""
    return task, str(size), _dataset_name(data_path, data_args)


# File names that say which split, not which data: the folder names the data instead.


# File names that say which split, not which data: the folder names the data instead.
_SPLIT_NAMES = {"train", "training", "valid", "val", "validation", "dev", "test", "data", "images"}


def _dataset_name(data_path: str, data_args: Mapping[str, Any]) -> str:
    dataset = data_args.get("dataset")
    if dataset and dataset != "image_folder":  # a named dataset; `image_folder` is a layout
        return str(dataset)
    for key in ("path", "train_file", "root"):
        if data_args.get(key):
            path = Path(str(data_args[key]))
            stem = path.name.split(".")[0]  # msft.csv -> msft, train.en.gz -> train
            return path.parent.name if stem.lower() in _SPLIT_NAMES and path.parent.name else stem
    return data_path.rpartition(".")[2].removesuffix("DataModule").lower()


def wandb_logger_args(config: Namespace) -> list[Namespace]:
    """The ``init_args`` of each WandbLogger in ``config.trainer.logger`` (one or a list), created
    empty where missing."""
    loggers = config.get("trainer.logger")
    found = []
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        if isinstance(logger, Namespace) and str(logger.get("class_path", "")).endswith(".WandbLogger"):
            if logger.get("init_args") is None:
                logger["init_args"] = Namespace()
            found.append(logger.init_args)
    return found


def apply_wandb_run_defaults(config: Namespace, subcommand: str | None) -> list[tuple[int, str, Any]]:
    """Fill in what the user left unset on each WandbLogger of ``config`` (one subcommand's
    config, before instantiation): ``name`` from :func:`run_name`, ``group`` ``<task>-<dataset>``,
    ``tags`` ``[task, dataset]``, ``job_type`` the subcommand. Given values win.

    ``WANDB_MODE=online`` (or ``disabled``) in the environment also clears ``offline``: the
    WandbLogger would otherwise force offline mode over the environment's choice.

    A relative ``save_dir`` (or ``dir``) is made absolute against the working directory of now: wandb
    writes part of a run (its console log) from its service process, which resolves a relative folder
    against the working directory it was started in, so a process that changed folder since its first
    run (a notebook, a test) would write that part elsewhere and lose the run's data file.

    Returns what was replaced, as (WandbLogger index, argument, value as given).
    """
    replaced: list[tuple[int, str, Any]] = []
    model, data = config.get("model"), config.get("data")
    defaults: dict[str, Any] = {"job_type": subcommand}
    if isinstance(model, Namespace) and isinstance(data, Namespace):
        task, _, dataset = _run_parts(model.as_dict(), data.as_dict())
        name = run_name(model.as_dict(), data.as_dict())
        defaults.update(name=name, group=f"{task}-{dataset}", tags=[task, dataset])
    for index, init_args in enumerate(wandb_logger_args(config)):
        if os.environ.get("WANDB_MODE", "").lower() in ("online", "run", "disabled") and init_args.get("offline"):
            replaced.append((index, "offline", init_args.get("offline")))
            init_args["offline"] = False
        for key, value in defaults.items():
            if init_args.get(key) is None and value is not None:
                replaced.append((index, key, init_args.get(key)))
                init_args[key] = value
        for key in ("save_dir", "dir"):
            folder = init_args.get(key)
            if folder is not None and not os.path.isabs(folder):
                replaced.append((index, key, folder))
                init_args[key] = os.path.abspath(folder)
    return replaced


def scalars(metrics: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """The one-number entries of ``metrics`` whose name starts with ``prefix`` (all of them when none does)."""
    plain = {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
    return {k: v for k, v in plain.items() if k.startswith(prefix)} or plain


def shown(path: str | os.PathLike[str]) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    full = Path(path).absolute()
    try:
        return str(full.relative_to(Path.cwd()))
    except ValueError:
        return str(full)


def _next_command(subcommand: str, config: Path | None, ckpt: str, given_args: list[str]) -> str:
    """The command that runs ``subcommand`` on ``ckpt``: with the run's saved config, else with the
    fit's own arguments (without ``--ckpt_path`` and ``--test_after_fit``)."""
    if config is not None:
        args = ["--config", shown(config)]
    else:
        args, skip = [], False
        for arg in given_args[1:] if given_args[:1] == ["fit"] else given_args:
            if skip:
                skip = False
                continue
            name = arg.split("=", 1)[0]
            if name in ("--ckpt_path", "--test_after_fit"):
                skip = "=" not in arg
                continue
            args.append(arg)
    return shlex.join(["lightning-tf", subcommand, *args, "--ckpt_path", shown(ckpt)])


def latest_checkpoint(trainer: Trainer) -> str:
    """The run's ``last`` checkpoint: a ModelCheckpoint's ``save_last`` file, or the one a checkpoint
    callback writes under the name ``last`` after every epoch (``configs/trainer/default.yaml``); ""
    when there is none."""
    for cb in trainer.checkpoint_callbacks:
        for path in (getattr(cb, "last_model_path", ""), getattr(cb, "best_model_path", "")):
            if path and Path(path).stem.split("-v")[0] == "last":
                return str(path)
    return ""


def fit_summary(trainer: Trainer, given_args: list[str]) -> str:
    """What a fit leaves behind, printed at its end: the run folder, the best checkpoint (with its
    monitored value) and the last one, the saved config, the wandb run, and the ``lightning-tf test``
    and ``lightning-tf predict`` commands that use the best checkpoint.

    Args:
        trainer: the trainer after ``fit`` (global rank zero).
        given_args: the command's arguments (``fit ...``), repeated in the next commands when no config
            was saved (no logger).
    """
    folder = run_dir(trainer) if trainer.loggers else None
    ckpt = trainer.checkpoint_callback
    best = str(getattr(ckpt, "best_model_path", "") or "")
    last = latest_checkpoint(trainer)
    config = folder / "config.yaml" if folder is not None and (folder / "config.yaml").is_file() else None
    rows: list[tuple[str, str]] = []
    if best:
        score = getattr(ckpt, "best_model_score", None)
        monitored = f" ({ckpt.monitor} {float(score):.4g})" if score is not None and ckpt.monitor else ""
        rows.append(("best checkpoint", shown(best) + monitored))
    if last and last != best:
        rows.append(("last checkpoint", shown(last)))
    if not (best or last):
        rows.append(("checkpoints", "none saved (checkpointing is off)"))
    rows.append(("config", shown(config) if config is not None else "not saved (no logger)"))
    wandb_dir = wandb_run_dir(trainer)
    if wandb_dir is not None:
        offline = wandb_dir.name.startswith("offline-run-")
        upload = f" (offline; upload: wandb sync {shown(wandb_dir)})" if offline else ""
        rows.append(("wandb run", shown(wandb_dir) + upload))
    title = "fit interrupted" if trainer.interrupted else "fit done"
    lines = [f"{title}" + (f": {shown(folder)}" if folder is not None else "")]
    width = max(len(name) for name, _ in rows)
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    if best or last:
        lines.append("next:")
        lines += [f"  {_next_command(sub, config, best or last, given_args)}" for sub in ("test", "predict")]
    return "\n".join(lines)


def stopped_summary(trainer: Trainer, given_args: list[str]) -> str:
    """What a fit stopped by SIGTERM (or SLURM's requeue signal) leaves, printed as it exits: where it
    stopped, the checkpoint written there (:class:`~lightning_tf.training.preemption.LastCheckpoint`), and the
    command that resumes the run: the run's saved config (with the same wandb run id, so the run goes
    on in the same folder and wandb run), else the fit's own arguments, with ``--ckpt_path``."""
    stop = next((cb.stopped for cb in trainer.callbacks if isinstance(cb, LastCheckpoint) and cb.stopped), None)
    if stop is None:  # stopped before training started, or without LastCheckpoint: nothing new was saved
        return (
            f"lightning-tf: stopped by SIGTERM at global step {trainer.global_step} (exit status {EXIT_STATUS}); "
            "no checkpoint was written: run the same command again to go on"
        )
    command = resume_command(trainer, stop["path"], given_args)
    lines = [
        f"lightning-tf: stopped by {stop['signal']} after global step {stop['global_step']} (batch {stop['batch']} "
        f"of epoch {stop['epoch']}; exit status {EXIT_STATUS}); checkpoint: {shown(stop['path'])}",
        f"resume: {command}",
    ]
    if stop.get("hpc"):  # SLURM: the same command (no --ckpt_path) resumes from Lightning's hpc checkpoint
        lines.append(f"SLURM: {stop['hpc']}")
    return "\n".join(lines)


def resume_command(trainer: Trainer, ckpt: str, given_args: list[str]) -> str:
    """The command that resumes the run from ``ckpt``: the run's saved config (with the same wandb run id,
    so the run goes on in the same folder and wandb run), else the fit's own arguments, with ``--ckpt_path``.
    On any rank: the others do not know the wandb run id, and take the run folder from the checkpoint's
    (``<run folder>/checkpoints/``)."""
    logger = next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)
    if not trainer.loggers:
        folder = None
    elif trainer.is_global_zero:
        folder = run_dir(trainer)
    else:
        folder = Path(ckpt).parent.parent
    config = folder / "config.yaml" if folder is not None and (folder / "config.yaml").is_file() else None
    command = _next_command("fit", config, ckpt, given_args)
    run_id = (logger.version if trainer.is_global_zero else folder.name) if logger is not None and folder else None
    if config is not None and run_id:
        command += f" --trainer.logger.init_args.id {run_id}"
    return command


def newest_checkpoint(trainer: Trainer) -> str:
    """The newest file (by modification time) among those the run's checkpoint callbacks have written or
    resumed with: a file that exists is complete (checkpoints are renamed into place whole). "" when none."""
    paths: set[str] = set()
    for cb in trainer.checkpoint_callbacks:
        paths.update(str(p) for p in (getattr(cb, "best_model_path", ""), getattr(cb, "last_model_path", "")) if p)
        paths.update(str(p) for p in getattr(cb, "best_k_models", {}))
    found = [p for p in paths if os.path.isfile(p)]
    return max(found, key=lambda p: os.stat(p).st_mtime_ns, default="")


def lost_rank_line(trainer: Trainer, lost: Lost, given_args: list[str]) -> str:
    """The one line printed when a rank of a data-parallel run dies (:class:`~lightning_tf.training.RankWatch`):
    which rank, how, where the run was, and the command that resumes it from the newest checkpoint."""
    head = f"lightning-tf: {lost}; every rank stopped at global step {trainer.global_step} (exit status {LOST_STATUS})"
    if trainer.state.fn != "fit":
        return f"{head}; run the same command again"
    ckpt = newest_checkpoint(trainer)
    if not ckpt:
        return f"{head}; no checkpoint was written yet: run the same command again"
    try:
        step = f" (global step {torch.load(ckpt, map_location='cpu', mmap=True, weights_only=True)['global_step']})"
    except Exception:  # the line goes out without the step rather than not at all
        step = ""
    return f"{head}; resume from {shown(ckpt)}{step}: {resume_command(trainer, ckpt, given_args)}"


class ResumeError(CheckpointError):
    """A run resumed from a checkpoint could not go on (the CLI prints the message as one line)."""


def resume_failure(trainer: Trainer, path: str, err: BaseException) -> str:
    """One line for a resumed ``fit`` that stopped with ``err``: the checkpoint, where the run was, the cause."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    cause = f"{type(err).__name__}: {lines[0] if lines else repr(err)}"
    return (
        f"{shown(path)}: the run resumed from this checkpoint cannot go on (at global step {trainer.global_step}, "
        f"epoch {trainer.current_epoch}): {cause} (LIGHTNING_TF_DEBUG=1 shows the traceback)"
    )


def quiet_wandb(trainer: Trainer) -> None:
    """Before a WandbLogger starts its run: leave out the ``anonymous`` argument Lightning always
    passes (wandb warns that the setting is gone, whatever its value), and keep an offline run silent
    (its banner and closing lines; the fit summary names its folder and the ``wandb sync`` command).
    ``WANDB_SILENT`` in the environment, or ``settings`` given to the logger, decide instead."""
    for logger in trainer.loggers:
        if not isinstance(logger, WandbLogger) or private.wandb_started(logger):
            continue
        init = private.wandb_init_args(logger)
        if init.get("anonymous") is None:
            init.pop("anonymous", None)
        offline = private.wandb_offline(logger) or os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun")
        if offline and init.get("settings") is None and "WANDB_SILENT" not in os.environ:
            import wandb

            init["settings"] = wandb.Settings(silent=True)
