"""The ``lightning-tf`` command: LightningCLI in subclass mode.

``lightning-tf fit|validate|test|predict --config a.yaml --config b.yaml ...``: the model and
data are chosen by class path (or, for the classes of this package, by class name), and several
config files merge in order, later ones overriding earlier ones.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger

# Importing the task packages registers their classes, so they resolve by short name.
import lightning_tf.kline  # noqa: F401
import lightning_tf.text  # noqa: F401
import lightning_tf.vision  # noqa: F401

__all__ = ["DATA_LINKS", "LightningTFCLI", "make_cli", "RunConfigCallback", "apply_wandb_run_defaults", "main", "run_name"]

# Arguments the DataModule knows once built and the model needs: linked data -> model, so a config
# states them once (in `data:`). A link applies when the data has the attribute and the model class
# has the argument.
DATA_LINKS = (
    "vocab_size",  # text: the tokenizer's id capacity
    "num_classes", "in_chans", "image_size",  # vision: from the dataset
    "n_features", "n_targets", "target_channels", "context_len", "horizon",  # kline: from the columns
)


class RunConfigCallback(SaveConfigCallback):
    """Saves the resolved config as ``config.yaml`` in the run directory, beside ``checkpoints/``
    (``<save_dir>/<project>/<run id>/`` under the WandbLogger), so ``--config`` on that file repeats
    the run; without a logger (``--trainer.logger false``, the debug config) nothing is written.

    Under wandb it also uploads the config to the run's config, nested by section (``trainer``,
    ``model``, ``data``, ``seed_everything``, ...), with the arguments the model and data were really
    built with (linked values included). Lightning would also log the model's and the data's
    hyperparameters flat (``lr``, ``d_model``, ``_instantiator``, ...), repeating
    ``model.init_args``: when every logger is a WandbLogger that flat copy is switched off, as
    ``save_hyperparameters(logger=False)`` would.

    Args:
        parser, config, config_filename, overwrite, multifile, save_to_log_dir: as SaveConfigCallback.
        wandb_given: what :func:`apply_wandb_run_defaults` replaced (WandbLogger index, argument,
            value as given): put back in the saved config, so the name, job type and mode are
            derived again when the file is reused (say, by ``lightning-tf test``).
    """

    def __init__(
        self, *args: Any, wandb_given: list[tuple[int, str, Any]] | None = None, **kwargs: Any
    ) -> None:
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
            # read by Lightning's `_log_hyperparams` after the setup hooks, in every fit/validate/test/predict
            pl_module._log_hyperparams = False
            if trainer.datamodule is not None:
                trainer.datamodule._log_hyperparams = False
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
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        loggers = [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]
        if not loggers:
            return
        dumped = self.parser.dump(self._config_as_given(), skip_none=False)
        config = resolved_config(dumped, pl_module, trainer.datamodule)
        for logger in loggers:
            logger.log_hyperparams(config)


def run_dir(trainer: Trainer) -> str:
    """The directory of the trainer's run, where ModelCheckpoint puts ``checkpoints/``:
    ``<save_dir>/<name>/<version>`` of the first logger (for wandb: ``<save_dir>/<project>/<run id>``)."""
    logger = trainer.loggers[0]
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return os.path.join(logger.save_dir or trainer.default_root_dir, str(logger.name), version)


def resolved_config(
    dumped: str, model: LightningModule, datamodule: LightningDataModule | None
) -> dict[str, Any]:
    """The CLI config (``dumped``: the parser's YAML dump) as nested plain data, with the model's and
    the data's ``init_args`` completed by what they were built with (values linked from the data,
    which the parsed config leaves out)."""
    config = yaml.safe_load(dumped) or {}
    for section, obj in (("model", model), ("data", datamodule)):
        if obj is None or not isinstance(config.get(section), dict):
            continue
        init_args = config[section].get("init_args") or {}
        # `_instantiator`, `_class_path`: LightningCLI's bookkeeping, not arguments
        init_args.update({k: v for k, v in obj.hparams_initial.items() if not k.startswith("_")})
        config[section]["init_args"] = init_args
    return config


def run_name(model: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """``<task>-<size>-<dataset>`` from the resolved ``model:`` and ``data:`` sections (each a
    mapping with ``class_path`` and ``init_args``): ``text-tiny-synthetic``, ``text-d64-copy``,
    ``vision-digits-digits``, ``kline-d32-msft``.

    The task is the package under ``lightning_tf`` (else the model class's name); the size is
    ``d<d_model>`` when ``d_model`` is set, else the ``preset``; the dataset is ``dataset``, else the
    name of ``path``, ``train_file`` or ``root`` without suffixes (its folder's name when the file is
    named for a split, as ``wmt14_en_de/train``), else the data class's name without ``DataModule``.
    """
    return "-".join(part for part in _run_parts(model, data) if part)


def _run_parts(model: Mapping[str, Any], data: Mapping[str, Any]) -> tuple[str, str, str]:
    """(task, size, dataset) of :func:`run_name`; size is "" when the model has neither."""
    model_path, data_path = str(model.get("class_path", "")), str(data.get("class_path", ""))
    model_args, data_args = model.get("init_args") or {}, data.get("init_args") or {}
    parts = model_path.split(".")
    task = parts[1] if len(parts) > 2 and parts[0] == "lightning_tf" else parts[-1].lower()
    if model_args.get("d_model") is not None:
        size = f"d{model_args['d_model']}"
    else:
        size = model_args.get("preset") or ""
    return task, str(size), _dataset_name(data_path, data_args)


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
    return replaced


class LightningTFCLI(LightningCLI):
    """LightningCLI with data -> model argument links (:data:`DATA_LINKS`) and one extra switch,
    ``--test_after_fit``: after ``fit``, test the best checkpoint on the same DataModule in the same
    process.

    A linked model argument need not be written: the DataModule's value is used. One written with a
    value other than the model's default that differs from the data's is an error naming both.
    """

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--test_after_fit", type=bool, default=False, help="after fit, run test on the best checkpoint"
        )
        for name in DATA_LINKS:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")

    def instantiate_classes(self) -> None:
        given = _explicit_model_links(self.config[self.subcommand] if self.subcommand else self.config)
        super().instantiate_classes()
        for name, ours in given.items():
            theirs = getattr(self.datamodule, name, None)
            if theirs is not None and _plain(theirs) != _plain(ours):
                raise ValueError(
                    f"model.{name} ({ours}) differs from the data's {name} ({theirs}); the model takes it from the "
                    f"data: drop model.{name} from the config, or change data.{name}"
                )

    def before_instantiate_classes(self) -> None:
        # the wandb run is created with its name, group, tags and job type: they must be set before the logger is built
        config = self.config[self.subcommand] if self.subcommand else self.config
        _check_ckpt_last(config)
        given = apply_wandb_run_defaults(config, self.subcommand)
        if isinstance(self.save_config_callback, type) and issubclass(self.save_config_callback, RunConfigCallback):
            self.save_config_kwargs = {**self.save_config_kwargs, "wandb_given": given}

    def after_fit(self) -> None:
        if self.config[self.config.subcommand].get("test_after_fit"):
            has_best = bool(getattr(self.trainer.checkpoint_callback, "best_model_path", ""))
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path="best" if has_best else None)


def _check_ckpt_last(config: Namespace) -> None:
    """``--ckpt_path last`` looks in the run's own checkpoint folder, ``<save_dir>/<project>/<run id>``:
    a WandbLogger without a given id starts a new run, with a new, empty folder, and Lightning would
    only warn and train from scratch."""
    if config.get("ckpt_path") != "last":
        return
    loggers = config.get("trainer", Namespace()).get("logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        if isinstance(logger, Namespace) and str(logger.get("class_path", "")).endswith("WandbLogger"):
            init = logger.get("init_args") or Namespace()
            if not (init.get("id") or init.get("version")):
                raise ValueError(
                    "--ckpt_path last looks in this run's checkpoint folder, and a new wandb run has a new one: also "
                    "pass --trainer.logger.init_args.id <run id> (the folder name under runs/lightning-tf/), or give "
                    "the checkpoint's path"
                )


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _explicit_model_links(config: Namespace) -> dict[str, Any]:
    """The linked model arguments the config sets to something other than the model's default."""
    model = config.get("model")
    if not isinstance(model, Namespace) or not model.get("class_path"):
        return {}
    module_name, _, cls_name = model.class_path.rpartition(".")
    try:
        params = inspect.signature(getattr(sys.modules[module_name], cls_name)).parameters
    except (KeyError, AttributeError, TypeError, ValueError):
        return {}
    init_args = model.get("init_args") or Namespace()
    given = {}
    for name in DATA_LINKS:
        if name in params and name in init_args:
            value = init_args[name]
            if value is not None and _plain(value) != _plain(params[name].default):
                given[name] = value
    return given


def make_cli(args: list[str] | None = None, **kwargs: Any) -> LightningTFCLI:
    """The ``lightning-tf`` CLI on ``args`` (None: the command line), as the console script builds it:
    any LightningModule / LightningDataModule by class path or name, the run config saved beside the
    checkpoints (and uploaded to wandb). ``kwargs`` go to LightningCLI (e.g. ``run=False``)."""
    kwargs = {"save_config_callback": RunConfigCallback, "save_config_kwargs": {"overwrite": True}, **kwargs}
    return LightningTFCLI(
        LightningModule, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True, args=args, **kwargs
    )


# Errors that this package raises where input enters (a config value, a file, a column): shown as
# one line, without a traceback, unless LIGHTNING_TF_DEBUG is set.
INPUT_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError)


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``lightning-tf`` console script: ``fit``, ``validate``, ``test`` and
    ``predict`` (LightningCLI), ``export`` (:func:`lightning_tf.export.export_main`) and ``tour``
    (:func:`lightning_tf.tour.tour_main`, the three tasks on their embedded data)."""
    argv = sys.argv[1:] if args is None else list(args)
    try:
        if argv[:1] == ["export"]:
            from lightning_tf.export import export_main

            export_main(argv[1:])
            return
        if argv[:1] == ["tour"]:
            from lightning_tf.tour import tour_main

            tour_main(argv[1:])
            return
        make_cli(args)
    except INPUT_ERRORS as err:
        if os.environ.get("LIGHTNING_TF_DEBUG"):
            raise
        print(f"lightning-tf: error: {err}\n(set LIGHTNING_TF_DEBUG=1 for the traceback)", file=sys.stderr)
        raise SystemExit(2) from None
    except FloatingPointError as err:  # a non-finite loss (NaNGuard, or a module's own check)
        if os.environ.get("LIGHTNING_TF_DEBUG"):
            raise
        print(f"lightning-tf: training stopped: {err}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main(sys.argv[1:])
