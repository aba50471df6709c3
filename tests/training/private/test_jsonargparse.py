"""The jsonargparse private names that ``lightning_tf/training/private/jsonargparse.py`` relies on still exist and
still mean what it assumes: a parser's actions, nested class arguments and subcommands included."""

from __future__ import annotations

from jsonargparse import ArgumentParser

from lightning_tf.cli.argument_errors import OneLineParser
from lightning_tf.training.private.jsonargparse import option_strings


class Model:
    def __init__(self, lr: float = 0.1, n_layers: int = 2) -> None:
        self.lr, self.n_layers = lr, n_layers


def test_option_strings_are_every_option_a_parser_takes_in_order() -> None:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_class_arguments(Model, "model")
    assert option_strings(parser) == ["-h", "--help", "--seed", "--model", "--model.lr", "--model.n_layers"]
    parsed = parser.parse_args(["--model.lr=0.5"])  # each option is one the parser takes
    assert parsed.model.lr == 0.5


def test_option_strings_of_the_cli_parser_name_its_arguments() -> None:
    parser = OneLineParser(exit_on_error=False)
    parser.add_argument("--test_after_fit", type=bool, default=False)
    parser.add_class_arguments(Model, "model")
    assert {"--test_after_fit", "--model.lr", "--model.n_layers"} <= set(option_strings(parser))
