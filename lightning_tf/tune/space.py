"""The search file of ``lightning-tf tune`` (docs/tune.md, the search file): the config's own dotted names mapped to
the arguments of Optuna's ``FloatDistribution``, ``IntDistribution`` or ``CategoricalDistribution``, which check
them, each drawn with ``suggest_*`` under its name; errors are one line naming the file and the key. A trial's
values reach its ``fit`` as overrides (``--model.init_args.lr=0.0012``).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import Trial

__all__ = ["format_value", "load_space", "probe", "suggest", "to_overrides"]

_KINDS = {"float": FloatDistribution, "int": IntDistribution, "categorical": CategoricalDistribution}
_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _distribution(where: str, spec: Any) -> BaseDistribution:
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected a range such as {{type: float, low: 0.0001, high: 0.003, log: true}}")
    fields = dict(spec)
    kind = fields.pop("type", None)
    if kind not in _KINDS:
        raise ValueError(f"{where}: type is one of {', '.join(_KINDS)}, got {kind!r}")
    number = int if kind == "int" else (int, float)
    for bound in ("low", "high", "step"):
        value = fields.get(bound)
        if kind == "float" and isinstance(value, str):  # YAML reads 1e-4 (no dot) as text: a float bound takes it
            with contextlib.suppress(ValueError):
                value = fields[bound] = float(value)
        if value is not None and (isinstance(value, bool) or not isinstance(value, number)):
            raise ValueError(f"{where}: {bound} must be {'an integer' if kind == 'int' else 'a number'}, got {value!r}")
    if kind == "categorical":
        choices = fields.get("choices")
        if not isinstance(choices, list) or len(choices) < 2 or len(set(map(repr, choices))) < len(choices):
            raise ValueError(f"{where}: choices must be a list of two or more different values, got {choices!r}")
    try:
        return _KINDS[kind](**fields)
    except TypeError as err:  # a field the distribution does not take
        raise ValueError(f"{where}: {str(err).split('() ', 1)[-1]} (type {kind})") from None
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def load_space(path: str | Path) -> dict[str, BaseDistribution]:
    """The search file at ``path`` as config name -> distribution, in file order."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"search file {path} not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise ValueError(f"{path}: not valid YAML" + (f" (line {mark.line + 1})" if mark else "")) from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: expected a mapping of config names to ranges, got {data!r}")
    space = {}
    for key, spec in data.items():
        if not isinstance(key, str) or not _NAME.fullmatch(key):
            raise ValueError(f"{path}: {key!r} is not a config name such as model.init_args.lr")
        space[key] = _distribution(f"{path}: {key}", spec)
    return space


def suggest(trial: Trial, space: dict[str, BaseDistribution]) -> dict[str, Any]:
    """The trial's value of each parameter, drawn with Optuna's ``suggest_*`` under its config name."""
    values = {}
    for name, d in space.items():
        if isinstance(d, CategoricalDistribution):
            values[name] = trial.suggest_categorical(name, list(d.choices))
        else:
            draw = trial.suggest_int if isinstance(d, IntDistribution) else trial.suggest_float
            values[name] = draw(name, d.low, d.high, step=d.step, log=d.log)
    return values


def probe(space: dict[str, BaseDistribution]) -> dict[str, Any]:
    """One value of each parameter (the low end of a range, the first choice): what the config is checked with."""
    return {name: d.choices[0] if isinstance(d, CategoricalDistribution) else d.low for name, d in space.items()}


def format_value(value: Any) -> str:
    """``value`` as the config parser reads it back: ``patches``, ``true``, ``null``, ``3``, ``1.0e-05``."""
    if isinstance(value, str):
        return value  # as it is: ``on`` stays the string
    # one line of YAML, whose floats keep a decimal point (YAML 1.1 reads ``1e-05`` as text); a scalar ends in "..."
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=math.inf)
    return text.removesuffix("\n...\n").strip()


def to_overrides(params: Mapping[str, Any]) -> list[str]:
    """``--<name>=<value>`` for each parameter, in order."""
    return [f"--{name}={format_value(value)}" for name, value in params.items()]
