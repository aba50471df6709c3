"""Argument errors of the ``lightning-tf`` command in one line.

jsonargparse reports a bad value as a Union report (the subtypes, the reason on an inner line,
"Expected a <class 'NoneType'>", a dump of every init argument) after the whole usage text. The user
needs the argument and the reason: :class:`OneLineParser` (a rejected value, an unknown argument or
choice) and :func:`instantiation_error` (a class's own error while the model or data is built) cut the
report down to ``<argument>: <reason>``; ``LIGHTNING_TF_DEBUG=1`` shows the full report.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import sys
from typing import NoReturn

from lightning.pytorch.cli import LightningArgumentParser

from lightning_tf.training.private.jsonargparse import option_strings

__all__ = ["OneLineParser", "debug_mode", "instantiation_error", "one_line_error", "root_cause"]

_KEY = re.compile(r'Parser key "([^"]+)"')
_CLASS_PATH = re.compile(r"class_path[= ]'([\w.]+)'")
_LITERAL = re.compile(r"Expected a (?:typing\.)?Literal\[(.*)\]\. Got value: (.*)")
_EXPECTED = re.compile(r"Expected a <class '(\w+)'>")
_NOT_ACCEPTED = re.compile(r"Option '([\w.]+)' is not accepted")
_GIVEN = re.compile(r"Given value: (.*)")
#: the class_path jsonargparse tries when a config gives init_args and no class (the subclass mode's base)
_BASES = ("lightning.LightningModule", "lightning.LightningDataModule")
_NOISE = (
    "Does not validate against any of the Union subtypes",
    "Subtypes:",
    "Errors:",
    "Given value",
    "Problem with given class_path",
)


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
            if class_path in _BASES:  # init_args without a class: an overlay config given alone or first
                section = key or "model"
                return (
                    f"{where}: {section}.init_args are given but no {section} class: put a config that names "
                    f"{section}.class_path (configs/<task>/<experiment>.yaml) before this one"
                )
            return f"{where}: no such argument of {owner}{_suggest(name, _init_params(class_path))}"
        if m := _LITERAL.search(line):
            choices = ", ".join(c.strip().strip("'\"") for c in m[1].split(","))
            return f"{key}: {m[2].strip()!r} is not one of {choices}"
    reasons = [
        line
        for line in lines
        if line and not _KEY.match(line) and not line.startswith(_NOISE) and line != "Expected a <class 'NoneType'>"
    ]
    expected = [m[1] for line in reasons if (m := _EXPECTED.fullmatch(line))]
    given = next((m[1] for line in lines if (m := _GIVEN.match(line))), None)
    if expected and len(expected) == len(reasons):
        got = f", got {given!r}" if given is not None else ""
        return f"{key}: expected {' or '.join(expected)}{got}"
    reason = reasons[0] if reasons else message.splitlines()[0]
    return f"{key}: {reason}" if key else reason


def root_cause(err: BaseException) -> BaseException:
    while err.__cause__ is not None:
        err = err.__cause__
    return err


def _qualify(reason: str, section: str, names: list[str], data_links: tuple[str, ...] = ()) -> str:
    """``reason`` with every argument it states in the house style (``d_model (64)``, ``pos_encoding
    'rope'``) written as the option that sets it: ``model.d_model (64)``; a model argument the data
    decides (one of ``data_links``) as ``data.<name>``."""
    if not names:
        return reason
    pattern = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))

    def option(m: re.Match[str]) -> str:
        owner = "data" if section == "model" and m[1] in data_links else section
        return f"{owner}.{m[1]}"

    return re.sub(rf"(?<![\w.])({pattern})(?= [('])", option, reason)


def instantiation_error(err: Exception, data_links: tuple[str, ...] = ()) -> Exception:
    """A class's own error that jsonargparse wrapped in its Union report while building the model or
    the data, as one line naming the argument:

    * a reason that states arguments in the house style gets each written as its option:
      ``model.d_model (64) must be divisible by model.n_heads (3)``, ``data.batch_size (0) must be >= 1``;
    * else the argument whose given value the reason mentions (when exactly one does) prefixes it:
      ``model.dropout: dropout probability has to be between 0 and 1, but got 1.5``; else the section.

    ``data_links``: the model arguments the data decides (named ``data.<name>``).
    Returns ``err`` unchanged when it is not such a report."""
    cause = root_cause(err)
    if cause is err or "Does not validate against any of the Union subtypes" not in str(err):
        return err
    text = str(err)
    m = re.search(r"<class 'lightning\.pytorch\.core\.(module|datamodule)\.", text)
    section = {"module": "model", "datamodule": "data"}.get(m[1] if m else "", "")
    reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    given = re.search(r"init_args=Namespace\((.*)\)\)\s*$", text, re.S)
    arguments = re.findall(r"(?<![\w.])(\w+)=", given[1]) if given else []
    arguments += list(data_links) if section == "model" else []
    qualified = _qualify(reason, section, arguments, data_links) if section else reason
    if qualified != reason:
        reason = qualified
    else:
        named = []
        for name, value in re.findall(r"(\w+)=('[^']*'|[^,()]+)", given[1]) if given else []:
            value = value.strip("'")
            mentioned = re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.])", reason)
            if value and value not in ("None", "True", "False") and mentioned:
                named.append(name)
        if len(named) > 1:  # several arguments hold that value: the one the reason also names
            named = [name for name in named if re.search(rf"\b{name}\b", reason)]
        where = f"{section}.{named[0]}" if section and len(named) == 1 else section
        if where:
            reason = f"{where}: {reason}"
    known = (ValueError, TypeError, FileNotFoundError, NotADirectoryError)
    kind = type(cause) if isinstance(cause, known) else ValueError
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
        sys.stderr.write(f"lightning-tf: error: {one_line_error(message, option_strings(parser))}\n")
        self.exit(2)
