"""The ``lightning-tf`` command table: each subcommand mapped to the function that runs it.

``fit``, ``validate``, ``test`` and ``predict`` are LightningCLI's (:mod:`.lightning_cli`) and parse their own
arguments. Every other command is a plain function whose typed signature and Google-style docstring are its
options (as litgpt's ``__main__``): :func:`parser_for` turns the signature into an ``argparse`` parser, so
``lightning-tf <command> --help`` and an argument error answer before torch or Lightning is imported (the
table names modules as strings and imports only the one command that runs).

Options keep the shapes users type: a ``bool`` that defaults to False is a switch (``--no_verify``), a
``list`` takes several values (``--tasks vision kline``), a ``Literal`` lists its choices, and a parameter
without a default is positional (``lightning-tf serve CKPT``), or a required option when it is keyword-only
(``lightning-tf export --ckpt_path CKPT``); ``--output`` is also ``-o``. A command that forwards arguments to each
LightningCLI run it starts (``tour``, ``tune``, ``walkforward``) receives them in its ``forwarded`` parameter: what follows
``--`` (and, for ``tune``, every option that is not its own).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

__all__ = ["COMMANDS", "Command", "main", "parser_for", "run_command"]

#: the parameter that receives the arguments a command forwards to LightningCLI
FORWARDED = "forwarded"


@dataclass(frozen=True)
class Command:
    """One subcommand.

    Args:
        target: ``"module:function"`` that runs it (imported only when the command runs).
        help: the line ``lightning-tf --help`` shows.
        forward: which arguments reach the function's ``forwarded`` parameter: ``none``, ``after_dashes``
            (what follows ``--``) or ``unknown`` (every option not the function's own, and what follows ``--``).
        lightning: LightningCLI parses the arguments itself (``fit``, ``validate``, ``test``, ``predict``).
    """

    target: str
    help: str
    forward: Literal["none", "after_dashes", "unknown"] = "none"
    lightning: bool = False


_LIGHTNING = "lightning_tf.cli.lightning_cli:run"

COMMANDS: dict[str, Command] = {
    "fit": Command(
        _LIGHTNING,
        "train a model (--config configs/trainer/default.yaml --config configs/<task>/<experiment>.yaml)",
        lightning=True,
    ),
    "validate": Command(_LIGHTNING, "evaluate a checkpoint on the validation split", lightning=True),
    "test": Command(_LIGHTNING, "evaluate a checkpoint on the test split", lightning=True),
    "predict": Command(_LIGHTNING, "run a checkpoint on new inputs and write the predictions", lightning=True),
    "export": Command("lightning_tf.cli.export:export", "write a checkpoint as safetensors (+ config) or ONNX"),
    "average": Command(
        "lightning_tf.cli.average:average", "average the parameters of checkpoints of one model (CKPT... -o OUT)"
    ),
    "compare": Command(
        "lightning_tf.cli.compare:compare",
        "paired bootstrap of two systems' translations on the same references (BLEU, chrF, TER)",
    ),
    "serve": Command(
        "lightning_tf.serve.command:serve", "serve a checkpoint over HTTP (LitServe), batching concurrent requests"
    ),
    "tour": Command(
        "lightning_tf.cli.tour:tour",
        "train and test the three tasks on their embedded data, one summary table",
        forward="after_dashes",
    ),
    "tune": Command(
        "lightning_tf.tune.command:tune",
        "search a config's hyperparameters with Optuna (--search configs/search/<task>.yaml; docs/tune.md)",
        forward="unknown",
    ),
    "walkforward": Command(
        "lightning_tf.cli.walkforward:walkforward",
        "train and test a K-line config fold by fold over its dates, baselines beside it, one report (docs/kline.md)",
        forward="unknown",
    ),
}

# Errors this package raises where input enters (a config value, a file, a column): shown as one
# line, without a traceback, unless LIGHTNING_TF_DEBUG is set.
INPUT_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the house's error format: ``lightning-tf: error: <reason>`` on one line and exit
    status 2; the usage stays behind ``--help`` (``LIGHTNING_TF_DEBUG=1``: argparse's own report)."""

    def error(self, message: str) -> NoReturn:
        if os.environ.get("LIGHTNING_TF_DEBUG"):
            super().error(message)
        sys.stderr.write(f"lightning-tf: error: {message}\n")
        self.exit(2)


def _resolve(target: str) -> Callable[..., Any]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The description (the docstring before ``Args:``) and each argument's help line."""
    doc = inspect.getdoc(fn) or ""
    head, _, args = doc.partition("\nArgs:\n")
    helps: dict[str, str] = {}
    name = None
    for line in args.splitlines():
        if not line.strip():
            name = None
            continue
        indent = len(line) - len(line.lstrip())
        key, colon, rest = line.strip().partition(":")
        if indent <= 4 and colon and key.isidentifier():
            name = key
            helps[name] = rest.strip()
        elif name is not None:
            helps[name] += " " + line.strip()
    return " ".join(head.replace("``", "").split()) if head else "", {k: v.replace("``", "") for k, v in helps.items()}


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _scalar(annotation: Any, name: str) -> dict[str, Any]:
    """argparse keywords for one value of ``annotation``."""
    if typing.get_origin(annotation) is Literal:
        choices = typing.get_args(annotation)
        return {"choices": choices, "type": type(choices[0])}
    if annotation in (str, int, float, Path):
        return {"type": annotation}
    raise TypeError(
        f"option --{name}: unsupported type {annotation!r} (str, int, float, Path, Literal, list, X | None)"
    )


def parser_for(name: str, fn: Callable[..., Any]) -> ArgumentParser:
    """The parser of command ``name`` from ``fn``'s signature (types, defaults) and docstring (help)."""
    description, helps = _docstring(fn)
    parser = ArgumentParser(prog=f"lightning-tf {name}", description=description)
    hints = typing.get_type_hints(fn)
    for param in inspect.signature(fn).parameters.values():
        if param.name == FORWARDED:
            continue
        annotation, optional = _unwrap_optional(hints.get(param.name, str))
        help_text = helps.get(param.name, "")
        has_default = param.default is not inspect.Parameter.empty
        if has_default and param.default not in (None, False, [], ()):
            help_text += f" (default: {param.default})"
        positional = not has_default and param.kind is not inspect.Parameter.KEYWORD_ONLY
        flag = [param.name] if positional else [f"--{param.name}"]
        if param.name == "output" and not positional:  # the usual short form of an output path
            flag.append("-o")
        kwargs: dict[str, Any] = {"help": help_text}
        if has_default:
            kwargs["default"] = param.default
        elif not positional:
            kwargs["required"] = True
        if annotation is bool:
            if param.default is not False:
                raise TypeError(f"option --{param.name}: a switch must default to False")
            kwargs["action"] = "store_true"
        elif typing.get_origin(annotation) is list:
            (item,) = typing.get_args(annotation)
            kwargs.update(_scalar(item, param.name), nargs="+")
        else:
            kwargs.update(_scalar(annotation, param.name))
            if optional and "metavar" not in kwargs and "choices" not in kwargs:
                kwargs["metavar"] = param.name.upper()
        parser.add_argument(*flag, **kwargs)
    return parser


def run_command(command: str, argv: Sequence[str]) -> Any:
    """Run the plain-function ``command`` on its arguments ``argv``."""
    spec = COMMANDS[command]
    fn = _resolve(spec.target)
    argv = list(argv)
    forwarded: list[str] = []
    if spec.forward != "none" and "--" in argv:
        cut = argv.index("--")
        argv, forwarded = argv[:cut], argv[cut + 1 :]
    parser = parser_for(command, fn)
    if spec.forward == "unknown":
        namespace, unknown = parser.parse_known_args(argv)
        forwarded = unknown + forwarded
    else:
        namespace = parser.parse_args(argv)
    kwargs = vars(namespace)
    if FORWARDED in inspect.signature(fn).parameters:
        kwargs[FORWARDED] = forwarded
    return fn(**kwargs)


def _usage() -> str:
    lines = [
        "usage: lightning-tf <command> [options]   (lightning-tf <command> --help for its options)",
        "",
        "commands:",
    ]
    lines += [f"  {name:<11} {spec.help}" for name, spec in COMMANDS.items()]
    lines += ["", "Errors are one line; LIGHTNING_TF_DEBUG=1 shows the full report and the traceback."]
    return "\n".join(lines)


def _dispatch(argv: list[str], from_command_line: bool) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return
    command, rest = argv[0], argv[1:]
    spec = COMMANDS.get(command)
    if spec is not None and not spec.lightning:
        run_command(command, rest)
    elif spec is not None or command.startswith("-"):  # LightningCLI's own options (--version, ...)
        _resolve(_LIGHTNING)([command, *rest], from_command_line)
    else:
        import difflib

        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; commands are {', '.join(COMMANDS)}"
        raise ValueError(f"unknown command {command!r}{hint}")


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``lightning-tf`` console script, on ``args`` (None: the command line)."""
    argv = sys.argv[1:] if args is None else list(args)
    debug = bool(os.environ.get("LIGHTNING_TF_DEBUG"))
    try:
        _dispatch(argv, from_command_line=args is None)
    except INPUT_ERRORS as err:
        if debug:
            raise
        print(f"lightning-tf: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except FloatingPointError as err:  # a non-finite loss (NaNGuard)
        if debug:
            raise
        print(f"lightning-tf: training stopped: {err}", file=sys.stderr)
        raise SystemExit(1) from None
