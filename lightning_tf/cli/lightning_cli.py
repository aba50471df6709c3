"""The ``lightning-tf`` command: LightningCLI in subclass mode.

``lightning-tf fit|validate|test|predict --config a.yaml --config b.yaml ...``: the model and
data are chosen by class path (or, for the classes of this package, by class name), and several
config files merge in order, later ones overriding earlier ones.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
import traceback
from functools import partial
from typing import Any, Literal, Optional

import torch
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import (
    LearningRateMonitor,
    ModelCheckpoint,
    ModelSummary,
    ProgressBar,
    RichModelSummary,
)
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lightning_tf.cli.argument_errors import OneLineParser, debug_mode, instantiation_error, root_cause
from lightning_tf.cli.console import metrics_table, quiet, quiet_eval
from lightning_tf.cli.flat_data import PARSER_MODE, nest_flat_flags
from lightning_tf.cli.runs import (
    ResumeError,
    RunConfigCallback,
    apply_wandb_run_defaults,
    fit_summary,
    lost_rank_line,
    quiet_wandb,
    resume_failure,
    scalars,
    shown,
    stopped_summary,
    wandb_logger_args,
)

# Importing the tasks' LightningModules and DataModules registers them as subclasses, so they resolve by short
# name (`--model KLineForecaster`) and `fit --help` lists them (the task packages load their names lazily).
from lightning_tf.kline import KLineDataModule, KLineForecaster, MultivariateDataModule  # noqa: F401
from lightning_tf.text import Seq2SeqTransformer, TranslationDataModule  # noqa: F401
from lightning_tf.training import (
    CheckpointError,
    CompactModelSummary,
    RankWatch,
    check_agreement,
    check_checkpoint,
    run_dir,
)
from lightning_tf.training.private.lightning import summary_depth
from lightning_tf.vision import ImageDataModule, ViTClassifier  # noqa: F401

__all__ = ["DATA_LINKS", "LightningTFCLI", "make_cli", "run"]

log = logging.getLogger(__name__)

# Arguments the DataModule knows once built and the model needs: linked data -> model, so a config
# states them once (in `data:`). A link applies when the data has the attribute and the model class
# has the argument.
DATA_LINKS = (
    "vocab_size",  # text: the tokenizer's id capacity
    "num_classes",
    "in_chans",
    "image_size",  # vision: from the dataset
    "n_features",
    "n_targets",
    "target_channels",
    "context_len",
    "horizon",  # kline: from the columns
)


class LightningTFCLI(LightningCLI):
    """LightningCLI with data -> model argument links (:data:`DATA_LINKS`), one extra switch,
    ``--test_after_fit`` (after ``fit``, test the best checkpoint on the same DataModule in the same
    process), and what it prints: after ``fit`` a short summary (:func:`fit_summary`: checkpoints,
    config, wandb run, the ``test`` and ``predict`` commands to run next), after ``test`` and
    ``validate`` one compact table of the metrics (Lightning's own table with ``--verbose true``), or,
    after ``test``, the module's own report when it has one (``test_report() -> str``).

    A linked model argument need not be written: the DataModule's value is used. One written with a
    value other than the model's default that differs from the data's is an error naming both.
    """

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        # configs and flags written when the K-line DataModule took flat arguments: moved into its groups
        if isinstance(args, (list, tuple)):
            args = nest_flat_flags([str(a) for a in args])
        elif args is None:
            sys.argv[1:] = nest_flat_flags(sys.argv[1:])
        # kept for the "next" commands of a fit without a saved config
        self.given_args = [str(a) for a in args] if isinstance(args, (list, tuple)) else sys.argv[1:]
        super().parse_arguments(parser, args)
        # the linked model arguments the user wrote, taken before LightningCLI merges a checkpoint's
        # hyperparameters into the model config (`--ckpt_path`): those are the checkpoint's, not given
        subcommand = self.config.get("subcommand")
        self._given_links = _explicit_model_links(self.config[subcommand] if subcommand else self.config)

    def _parse_ckpt_path(self) -> None:
        # the checkpoint is checked where it enters, before LightningCLI reads its hyperparameters (and would
        # put its model class in place of the config's): one line for a missing, broken, foreign or too new file
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        path = config.get("ckpt_path")
        if path and path not in ("last", "best", "hpc") and "://" not in str(path):
            check_checkpoint(path, model_class=_callback_class(config.get("model")))
        # LightningCLI puts the checkpoint's hyperparameters over the whole config; a model argument the command
        # line of a validate, test or predict sets (predict --model.beam_size 1) is the user's for this run: it wins
        # over the checkpoint's. Not for fit, which resumes the run the checkpoint holds, nor for pretrained, a
        # starting point the checkpoint has consumed (it records pretrained: null)
        given = {}
        names = _command_line_model_args(self.given_args) if subcommand in ("validate", "test", "predict") else []
        for name in (n for n in names if n != "pretrained"):
            with contextlib.suppress(KeyError, AttributeError, TypeError):
                given[name] = config["model"]["init_args"][name]
        super()._parse_ckpt_path()
        model = (self.config[subcommand] if subcommand else self.config).get("model")
        for name, value in given.items():
            with contextlib.suppress(KeyError, AttributeError, TypeError):
                model["init_args"][name] = value

    def _run_subcommand(self, subcommand: str) -> None:
        try:
            super()._run_subcommand(subcommand)
        except SIGTERMException:
            if self.trainer.is_global_zero:  # what was saved, and the command that goes on from there
                print(stopped_summary(self.trainer, getattr(self, "given_args", [])), file=sys.stderr, flush=True)
            raise
        except (CheckpointError, FloatingPointError):  # one line already (the CLI prints them)
            raise
        except Exception as err:
            ckpt = self.config[subcommand].get("ckpt_path") if subcommand == "fit" else None
            if not ckpt or debug_mode():
                raise
            # a resumed run that cannot go on: one line naming the checkpoint and the cause, printed by rank 0
            if not self.trainer.is_global_zero:
                raise SystemExit(2) from None
            raise ResumeError(resume_failure(self.trainer, str(self.trainer.ckpt_path or ckpt), err)) from None

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--test_after_fit", type=bool, default=False, help="after fit, run test on the best checkpoint"
        )
        parser.add_argument(
            "--float32_matmul_precision",
            type=Optional[Literal["highest", "high", "medium"]],
            default=None,
            help="torch.set_float32_matmul_precision: 'high' lets float32 matmuls use TF32 tensor cores (GPU)",
        )
        for name in DATA_LINKS:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any) -> LightningArgumentParser:
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        parser.parser_mode = PARSER_MODE  # YAML, with a K-line data section's flat arguments moved into groups
        if subcommand in ("validate", "test"):
            parser.set_defaults(verbose=False)  # one compact table instead (see _print_results)
        return parser

    def instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        given = getattr(self, "_given_links", None)
        if given is None:
            given = _explicit_model_links(config)
        try:
            super().instantiate_classes()
        except (ValueError, TypeError) as err:
            one_line = instantiation_error(err, DATA_LINKS)
            if one_line is err or debug_mode():
                raise
            raise one_line from root_cause(err)
        except RuntimeError as err:  # the Trainer refusing its settings (two EarlyStopping callbacks of one state)
            where = traceback.extract_tb(err.__traceback__)[-1].filename.replace(os.sep, "/")
            if debug_mode() or "lightning/pytorch/trainer/" not in where:  # another class's error: as it is
                raise
            first = str(err).strip().split(". ")[0].rstrip(".")
            hint = " (a callback given twice? the trainer config may have it already)" if "callback" in first else ""
            raise ValueError(f"trainer: {first}{hint}") from err
        for name, ours in given.items():
            check_agreement(name, ours, getattr(self.datamodule, name, None))
        for callback in self.trainer.callbacks:
            if isinstance(callback, RankWatch):  # a rank that dies: one line with the command that resumes
                callback.report = partial(lost_rank_line, self.trainer, given_args=getattr(self, "given_args", []))
                callback.details = debug_mode()
        quiet_wandb(self.trainer)
        _compact_model_summary(self.trainer, config)

    def before_instantiate_classes(self) -> None:
        # the wandb run is created with its name, group, tags and job type: they must be set before the logger is built
        config = self.config[self.subcommand] if self.subcommand else self.config
        # NCCL: a collective that fails or outlives the process group's timeout ends the process instead of
        # hanging (torch's default where unset; set here before the launcher copies the environment to the ranks)
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
        if config.get("float32_matmul_precision"):
            torch.set_float32_matmul_precision(config.float32_matmul_precision)
        _check_ckpt_last(config)
        _drop_callbacks_switched_off(config)
        given = apply_wandb_run_defaults(config, self.subcommand)
        for init_args in wandb_logger_args(config):
            # wandb looks for a git repository from its folder and warns when the folder does not exist yet
            os.makedirs(init_args.get("save_dir") or init_args.get("dir") or ".", exist_ok=True)
        if isinstance(self.save_config_callback, type) and issubclass(self.save_config_callback, RunConfigCallback):
            self.save_config_kwargs = {**self.save_config_kwargs, "wandb_given": given}

    def _quiet_eval_from_checkpoint(self) -> None:
        if self.config[self.subcommand].get("ckpt_path"):
            quiet_eval()

    before_validate = before_test = before_predict = _quiet_eval_from_checkpoint

    def after_fit(self) -> None:
        trainer = self.trainer
        if self.config[self.config.subcommand].get("test_after_fit") and not trainer.interrupted:
            # the monitored callback's best (the path, not "best": Lightning warns when there are several callbacks)
            best = getattr(trainer.checkpoint_callback, "best_model_path", "") or None
            trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best, verbose=False)
            self._print_results("test")
        if trainer.is_global_zero:
            print(fit_summary(trainer, getattr(self, "given_args", [])), flush=True)

    def after_validate(self) -> None:
        if not self.config[self.subcommand].get("verbose"):
            self._print_results("validate")
        self._print_run_folder()

    def after_test(self) -> None:
        if not self.config[self.subcommand].get("verbose"):
            self._print_results("test")
        self._print_run_folder()

    def after_predict(self) -> None:
        self._print_run_folder()

    def _print_results(self, stage: str) -> None:
        """The module's ``test_report()`` after a test, when it has one and it says something; else
        the stage's logged metrics as one compact table (global rank zero)."""
        if not self.trainer.is_global_zero:
            return
        report = getattr(self.model, "test_report", None) if stage == "test" else None
        text = report() if callable(report) else None
        if not text:
            prefix = "val" if stage == "validate" else stage
            text = metrics_table(scalars(self.trainer.callback_metrics, f"{prefix}/"), prefix)
        print(text, flush=True)

    def _print_run_folder(self) -> None:
        trainer = self.trainer
        if trainer.is_global_zero and trainer.loggers:
            print(f"run folder: {shown(run_dir(trainer))}", flush=True)


def _compact_model_summary(trainer: Trainer, config: Namespace) -> None:
    """Put :class:`CompactModelSummary` in place of the summary Lightning adds by default (kept when
    the config names a summary callback; none with ``enable_model_summary: false``)."""
    trainer_config = config.get("trainer")
    callbacks = trainer_config.get("callbacks") if isinstance(trainer_config, Namespace) else None
    named = [str(getattr(cb, "class_path", "")) for cb in callbacks or [] if isinstance(cb, Namespace)]
    if any(path.endswith("ModelSummary") for path in named):
        return
    for i, callback in enumerate(trainer.callbacks):
        if type(callback) in (ModelSummary, RichModelSummary):
            trainer.callbacks[i] = CompactModelSummary(max_depth=summary_depth(callback))


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


def _switched_off(trainer: Namespace) -> tuple[type, ...]:
    """The callback classes a trainer config switches off: the learning-rate monitor without a logger
    (``logger: false``), checkpoints with ``enable_checkpointing: false``, the progress bar with
    ``enable_progress_bar: false``. Lightning stops with a MisconfigurationException when such a
    callback is in the list anyway (the default trainer config lists all three)."""
    off = {"logger": LearningRateMonitor, "enable_checkpointing": ModelCheckpoint, "enable_progress_bar": ProgressBar}
    return tuple(cls for key, cls in off.items() if trainer.get(key) is False)


def _command_line_model_args(args: list[str]) -> list[str]:
    """The model's init arguments ``args`` set (``--model.beam_size 1``, ``--model.init_args.alpha=0.8``)."""
    names = []
    for arg in args:
        if arg.startswith("--model."):
            name = arg.removeprefix("--model.").split("=", 1)[0].removeprefix("init_args.")
            if name and "." not in name and name not in ("class_path", "init_args"):
                names.append(name)
    return names


def _callback_class(callback: Any) -> type | None:
    """The class a callback (or model) entry of the config names (None when it cannot be imported)."""
    class_path = str(getattr(callback, "class_path", "") or "")
    module_name, _, name = class_path.rpartition(".")
    try:
        return getattr(sys.modules.get(module_name) or __import__(module_name, fromlist=[name]), name)
    except (ImportError, AttributeError, ValueError):
        return None


def _drop_callbacks_switched_off(config: Namespace) -> None:
    """Leave out the callbacks of the trainer config that its switches turn off (:func:`_switched_off`):
    ``--trainer.logger false``, ``--trainer.enable_checkpointing false`` and
    ``--trainer.enable_progress_bar false`` work with every trainer config, and ``configs/trainer/debug.yaml``
    after ``configs/trainer/default.yaml``."""
    trainer = config.get("trainer")
    if not isinstance(trainer, Namespace) or not isinstance(trainer.get("callbacks"), list):
        return
    off = _switched_off(trainer)
    if off:
        kept = [cb for cb in trainer["callbacks"] if not issubclass(_callback_class(cb) or object, off)]
        if len(kept) != len(trainer["callbacks"]):
            log.info(
                "left out, switched off by the trainer config: %s",
                [cb.class_path for cb in trainer["callbacks"] if cb not in kept],
            )
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


def make_cli(
    args: list[str] | None = None, cli_class: type[LightningTFCLI] = LightningTFCLI, **kwargs: Any
) -> LightningTFCLI:
    """The ``lightning-tf`` CLI on ``args`` (None: the command line), as the console script builds it:
    any LightningModule / LightningDataModule by class path or name, the run config saved beside the
    checkpoints (and uploaded to wandb), seed 0 unless the config says otherwise, and without the
    library messages :func:`lightning_tf.cli.console.quiet` lists. ``cli_class``: a subclass of
    :class:`LightningTFCLI` to build instead (``lightning-tf tune`` parses configs with one that
    instantiates nothing). ``kwargs`` go to LightningCLI (e.g. ``run=False``)."""
    kwargs = {
        "save_config_callback": RunConfigCallback,
        "save_config_kwargs": {"overwrite": True},
        "parser_class": OneLineParser,
        # LightningCLI's default (True) also seeds 0, after warning "No seed found"
        "seed_everything_default": 0,
        **kwargs,
        "parser_kwargs": {"prog": "lightning-tf", "parser_mode": PARSER_MODE, **kwargs.get("parser_kwargs", {})},
    }
    with quiet():
        return cli_class(
            LightningModule,
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            args=args,
            **kwargs,
        )


def run(argv: list[str], from_command_line: bool = False) -> None:
    """``lightning-tf fit|validate|test|predict ...``: ``argv`` is the subcommand and its arguments, config
    names resolved to the package's bundled files where the working directory has none."""
    from lightning_tf.training.resources import bundled_configs

    argv = [argv[0], *bundled_configs(argv[1:])]
    if from_command_line:
        sys.argv[1:] = argv
    make_cli(None if from_command_line else argv)  # None: LightningCLI reads sys.argv itself
