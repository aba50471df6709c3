"""The study's base config, read by the same parser as ``lightning-tf fit`` without building anything: the
search space checked against it (every key a name the config knows, every value one it takes), the values
constraints read from it, and the best trial written back as one complete config (``best.yaml``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

from lightning_tf.cli.argument_errors import one_line_error
from lightning_tf.cli.lightning_cli import LightningTFCLI, make_cli

from .overrides import to_overrides
from .space import FloatParam, IntParam, SearchSpace

__all__ = ["BaseConfig", "check_space", "parse_config"]


class _ParseOnly(LightningTFCLI):
    """LightningTFCLI that parses (configs, overrides, types, choices) and stops: no seed, no classes built."""

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        try:
            super().parse_arguments(parser, args)
        except Exception as err:  # jsonargparse's ArgumentError (exit_on_error=False): its report in one line
            options = [o for action in parser._actions for o in action.option_strings]
            raise ValueError(one_line_error(str(err), options)) from None

    def _set_seed(self) -> None:
        pass

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass

    def after_instantiate_classes(self) -> None:
        pass


def parse_config(args: Sequence[str]) -> tuple[LightningArgumentParser, Namespace]:
    """The parser of ``lightning-tf fit`` (without the subcommand's own options such as ``--ckpt_path``) and
    ``args`` (``--config`` files and overrides) parsed by it; a rejected argument is one ValueError line."""
    cli = make_cli(list(args), cli_class=_ParseOnly, run=False, parser_kwargs={"exit_on_error": False})
    return cli.parser, cli.config


def _reason(line: str, name: str) -> str:
    """The parser's one line about ``name`` without the option name it starts with (the caller names it)."""
    head, sep, rest = line.partition(": ")
    if sep and (head.split(".")[-1] == name.split(".")[-1] or head.startswith("unrecognized")):
        return rest or line
    if line.startswith("unrecognized argument"):
        return "not an option of this config" + (line[line.index(";") :].split(" (see")[0] if ";" in line else "")
    return line


class BaseConfig:
    """The command's ``--config`` files and overrides as one parsed config, and the parser that read them.

    Args:
        args: the arguments ``lightning-tf fit`` would get (without ``fit``).
    """

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.parser, self.config = parse_config(self.args)

    def parse(self, extra: Sequence[str]) -> Namespace:
        """The config with ``extra`` arguments after the command's own (the same parser: no new CLI is built);
        a rejected argument is one ValueError line."""
        try:
            return self.parser.parse_args([*self.args, *extra])
        except Exception as err:  # jsonargparse's ArgumentError (exit_on_error=False)
            options = [o for action in self.parser._actions for o in action.option_strings]
            raise ValueError(one_line_error(str(err), options)) from None

    def get(self, name: str) -> Any:
        """The config's value at dotted ``name`` (None when unset)."""
        try:
            value = self.config.get(name)
        except (KeyError, AttributeError, TypeError):
            return None
        return value.as_dict() if isinstance(value, Namespace) else value

    def uses_wandb(self) -> bool:
        """The trainer logs with one WandbLogger (then each trial is a wandb run of the study's group)."""
        logger = self.config.get("trainer.logger")
        return isinstance(logger, Namespace) and str(logger.get("class_path", "")).endswith(".WandbLogger")

    def task_name(self) -> str:
        """``<task>-<size>-<dataset>`` of the config (:func:`lightning_tf.cli.runs.run_name`): the default study name."""
        from lightning_tf.cli.runs import run_name

        model, data = self.config.get("model"), self.config.get("data")
        if isinstance(model, Namespace) and isinstance(data, Namespace):
            return run_name(model.as_dict(), data.as_dict()) or "study"
        return "study"

    def dump(self, params: Mapping[str, Any]) -> str:
        """The complete config with ``params`` applied, as ``fit --config`` reads it (YAML, None values kept)."""
        return self.parser.dump(self.parse(to_overrides(params)), skip_unset=False)


def check_space(space: SearchSpace, base: BaseConfig) -> dict[str, Any]:
    """Check every key of ``space`` against the config's parser: one ValueError line naming the search file
    and the key that the parser rejects. A range is tried at its low end (the parser checks types, and both
    ends have one), a categorical with each choice. Returns the values the constraints read from the config
    (the names they use that are not searched)."""
    probes = {
        name: [param.low] if isinstance(param, (FloatParam, IntParam)) else param.probes()
        for name, param in space.params.items()
    }
    rounds = max(len(values) for values in probes.values())
    for i in range(rounds):
        values = {name: vals[i] if i < len(vals) else vals[-1] for name, vals in probes.items()}
        try:
            base.parse(to_overrides(values))
            continue
        except ValueError:
            pass
        for name, value in values.items():  # which key: one at a time
            try:
                base.parse(to_overrides({name: value}))
            except ValueError as err:
                raise ValueError(f"{space.source}: {name}: {_reason(str(err), name)}") from None
        raise ValueError(f"{space.source}: the config does not take these values together: {values}")
    fixed = {}
    for name in space.constraint_names():
        value = base.get(name)
        if value is None:
            raise ValueError(
                f"{space.source}: a constraint reads {name}, which the space does not search and the config "
                "leaves unset"
            )
        fixed[name] = value
    return fixed
