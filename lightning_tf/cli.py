"""The ``lightning-tf`` command: LightningCLI in subclass mode.

``lightning-tf fit|validate|test|predict --config a.yaml --config b.yaml ...``: the model and
data are chosen by class path (or, for the classes of this package, by class name), and several
config files merge in order, later ones overriding earlier ones.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger

from lightning_tf.training import check_agreement, run_dir

# Importing the task packages registers their classes, so they resolve by short name.
import lightning_tf.kline  # noqa: F401
import lightning_tf.text  # noqa: F401
import lightning_tf.vision  # noqa: F401

__all__ = ["DATA_LINKS", "LightningTFCLI", "RunConfigCallback", "OneLineParser", "apply_wandb_run_defaults", "make_cli",
           "one_line_error", "run_name"]

log = logging.getLogger(__name__)

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
        try:
            super().instantiate_classes()
        except (ValueError, TypeError) as err:
            one_line = instantiation_error(err)
            if one_line is err or debug_mode():
                raise
            raise one_line from _root_cause(err)
        for name, ours in given.items():
            check_agreement(name, ours, getattr(self.datamodule, name, None))

    def before_instantiate_classes(self) -> None:
        # the wandb run is created with its name, group, tags and job type: they must be set before the logger is built
        config = self.config[self.subcommand] if self.subcommand else self.config
        _check_ckpt_last(config)
        _drop_logger_callbacks_without_logger(config)
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


# callbacks that need a logger (Lightning raises at fit start without one)
_NEEDS_LOGGER = ("LearningRateMonitor",)


def _drop_logger_callbacks_without_logger(config: Namespace) -> None:
    """``--trainer.logger false`` with a trainer config that monitors the learning rate: the monitor
    has nothing to log to (Lightning would stop with a MisconfigurationException), so it is left out."""
    trainer = config.get("trainer")
    if not isinstance(trainer, Namespace) or trainer.get("logger") is not False:
        return
    callbacks = trainer.get("callbacks")
    if not isinstance(callbacks, list):
        return
    kept = [cb for cb in callbacks if not str(getattr(cb, "class_path", "")).endswith(_NEEDS_LOGGER)]
    if len(kept) != len(callbacks):
        log.info("no logger: learning-rate monitoring is off")
        trainer["callbacks"] = kept


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
    kwargs = {
        "save_config_callback": RunConfigCallback,
        "save_config_kwargs": {"overwrite": True},
        "parser_class": OneLineParser,
        **kwargs,
    }
    return LightningTFCLI(
        LightningModule, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True, args=args, **kwargs
    )


# ----------------------------------------------------------------------------------- one-line errors
# jsonargparse reports a bad value as a Union report (the subtypes, the reason on an inner line,
# "Expected a <class 'NoneType'>", a dump of every init argument) after the whole usage text. The
# user needs the argument and the reason: these helpers cut the report down to that one line.

_KEY = re.compile(r'Parser key "([^"]+)"')
_CLASS_PATH = re.compile(r"class_path[= ]'([\w.]+)'")
_LITERAL = re.compile(r"Expected a (?:typing\.)?Literal\[(.*)\]\. Got value: (.*)")
_EXPECTED = re.compile(r"Expected a <class '(\w+)'>")
_NOT_ACCEPTED = re.compile(r"Option '([\w.]+)' is not accepted")
_GIVEN = re.compile(r"Given value: (.*)")
_NOISE = ("Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value",
          "Problem with given class_path")


def debug_mode() -> bool:
    """``LIGHTNING_TF_DEBUG=1``: show jsonargparse's full report and Python tracebacks."""
    return bool(os.environ.get("LIGHTNING_TF_DEBUG"))


def _init_params(class_path: str | None) -> list[str]:
    """The ``__init__`` argument names of the class at ``class_path`` ([] when it cannot be imported)."""
    if not class_path:
        return []
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(sys.modules.get(module_name) or __import__(module_name, fromlist=[name]), name)
        return [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    except (ImportError, AttributeError, TypeError, ValueError):
        return []


def _suggest(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def one_line_error(message: str, known_options: list[str] | None = None) -> str:
    """jsonargparse's error ``message`` as one line: ``<argument>: <reason>``.

    ``known_options``: the parser's option names (``--model.lr``, ...), for the nearest-name
    suggestion on an unrecognised argument."""
    keys = [k for k in _KEY.findall(message) if k]
    class_path = (_CLASS_PATH.search(message) or [None, None])[1]
    lines = [line.strip().lstrip("- ").strip() for line in message.splitlines()]
    if message.lower().startswith("unrecognized arguments:"):
        args = message.split(":", 1)[1].split()
        names = [o for o in (known_options or []) if o.startswith("--")]
        hints = [f"{a}{_suggest(a.split('=')[0], names)}" for a in args if a.startswith("-")] or args
        return f"unrecognized argument {', '.join(hints)} (see --help)"
    key = ".".join(k.removeprefix("init_args.") for k in keys)
    key = re.sub(r"\.init_args\.", ".", key)
    for line in lines:
        if m := _NOT_ACCEPTED.search(line):
            name = m[1]
            where = f"{key}.{name}" if key else name
            owner = class_path.rpartition(".")[2] if class_path else "this class"
            return f"{where}: no such argument of {owner}{_suggest(name, _init_params(class_path))}"
        if m := _LITERAL.search(line):
            choices = ", ".join(c.strip().strip("'\"") for c in m[1].split(","))
            return f"{key}: {m[2].strip()!r} is not one of {choices}"
    reasons = [
        line for line in lines
        if line and not _KEY.match(line) and not line.startswith(_NOISE) and line != "Expected a <class 'NoneType'>"
    ]
    expected = [m[1] for line in reasons if (m := _EXPECTED.fullmatch(line))]
    given = next((m[1] for line in lines if (m := _GIVEN.match(line))), None)
    if expected and len(expected) == len(reasons):
        got = f", got {given!r}" if given is not None else ""
        return f"{key}: expected {' or '.join(expected)}{got}"
    reason = reasons[0] if reasons else message.splitlines()[0]
    return f"{key}: {reason}" if key else reason


def _root_cause(err: BaseException) -> BaseException:
    while err.__cause__ is not None:
        err = err.__cause__
    return err


def instantiation_error(err: Exception) -> Exception:
    """A class's own error (``ValueError("dropout probability ... 1.5")``) that jsonargparse wrapped in
    its Union report while building the model or the data, as one line naming the argument:
    ``model.dropout: dropout probability has to be between 0 and 1, but got 1.5``. The argument is
    the one whose given value the reason mentions (when exactly one does); else the section is named.
    Returns ``err`` unchanged when it is not such a report."""
    cause = _root_cause(err)
    if cause is err or "Does not validate against any of the Union subtypes" not in str(err):
        return err
    text = str(err)
    m = re.search(r"<class 'lightning\.pytorch\.core\.(module|datamodule)\.", text)
    section = {"module": "model", "datamodule": "data"}.get(m[1] if m else "", "")
    reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    given = re.search(r"init_args=Namespace\((.*)\)\)\s*$", text, re.S)
    named = []
    if given:
        for name, value in re.findall(r"(\w+)=('[^']*'|[^,()]+)", given[1]):
            value = value.strip("'")
            if value and value not in ("None", "True", "False") and re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.])", reason):
                named.append(name)
    if len(named) > 1:  # several arguments hold that value: the one the reason also names
        named = [name for name in named if re.search(rf"\b{name}\b", reason)]
    where = f"{section}.{named[0]}" if section and len(named) == 1 else section
    if where:
        reason = f"{where}: {reason}"
    kind = type(cause) if isinstance(cause, (ValueError, TypeError, FileNotFoundError, NotADirectoryError)) else ValueError
    try:
        return kind(reason)
    except TypeError:  # an exception class with another signature
        return ValueError(reason)


class OneLineParser(LightningArgumentParser):
    """LightningCLI's parser, reporting a rejected argument in one line (``lightning-tf: error:
    model.pos_encoding: 'wavelet' is not one of sinusoidal, learned, rope, alibi, none``) and exit
    status 2; the usage stays behind ``--help``, the full report behind ``LIGHTNING_TF_DEBUG=1``."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:  # type: ignore[override]
        if debug_mode() or not self.exit_on_error:
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        options = [o for action in parser._actions for o in action.option_strings]
        sys.stderr.write(f"lightning-tf: error: {one_line_error(message, options)}\n")
        self.exit(2)
