"""The ``lightning-tf`` command (also ``python -m lightning_tf``): dispatches to LightningCLI's
``fit``, ``validate``, ``test`` and ``predict`` (:mod:`lightning_tf.cli`), ``export``
(:mod:`lightning_tf.export`), ``serve`` (:mod:`lightning_tf.serve`), ``tour`` (:mod:`lightning_tf.tour`) and
``tune`` (:mod:`lightning_tf.tune`), and turns the errors a user can fix into one line."""

from __future__ import annotations

import os
import sys

__all__ = ["COMMANDS", "main"]

#: command -> what it does (the first four are LightningCLI's)
COMMANDS = {
    "fit": "train a model (--config configs/trainer/default.yaml --config configs/<task>/<experiment>.yaml)",
    "validate": "evaluate a checkpoint on the validation split",
    "test": "evaluate a checkpoint on the test split",
    "predict": "run a checkpoint on new inputs and write the predictions",
    "export": "write a checkpoint as safetensors (+ config) or ONNX",
    "serve": "serve a checkpoint over HTTP (LitServe), batching concurrent requests",
    "tour": "train and test the three tasks on their embedded data, one summary table",
    "tune": "search a config's hyperparameters with Optuna (--search configs/search/<task>.yaml; docs/tune.md)",
}

# Errors this package raises where input enters (a config value, a file, a column): shown as one
# line, without a traceback, unless LIGHTNING_TF_DEBUG is set.
INPUT_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError)


def _usage() -> str:
    lines = ["usage: lightning-tf <command> [options]   (lightning-tf <command> --help for its options)", "",
             "commands:"]
    lines += [f"  {name:<9} {what}" for name, what in COMMANDS.items()]
    lines += ["", "Errors are one line; LIGHTNING_TF_DEBUG=1 shows the full report and the traceback."]
    return "\n".join(lines)


def _dispatch(argv: list[str], from_command_line: bool) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return
    command, rest = argv[0], argv[1:]
    if command == "export":
        from lightning_tf.export import export_main

        export_main(rest)
    elif command == "serve":
        from lightning_tf.serve.command import serve_main

        serve_main(rest)
    elif command == "tour":
        from lightning_tf.tour import tour_main

        tour_main(rest)
    elif command == "tune":
        from lightning_tf.tune.command import tune_main

        tune_main(rest)
    elif command in COMMANDS or command.startswith("-"):  # LightningCLI's own options (--version, ...)
        from lightning_tf.cli import make_cli

        from lightning_tf.resources import bundled_configs

        argv = [command, *bundled_configs(rest)]
        if from_command_line:
            sys.argv[1:] = argv
        make_cli(None if from_command_line else argv)  # None: LightningCLI reads sys.argv itself
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


if __name__ == "__main__":
    main()
