"""The search space of ``lightning-tf tune``: a YAML file keyed by the config's own dotted names.

.. code-block:: yaml

    model.init_args.lr: {type: float, low: 1.0e-4, high: 3.0e-3, log: true}
    model.init_args.n_layers: {type: int, low: 2, high: 6, step: 2}
    model.init_args.backbone: {type: categorical, choices: [patches, variates, bars]}
    constraints:
      - model.init_args.d_model % model.init_args.n_heads == 0

Each entry becomes one Optuna distribution (``suggest_float``, ``suggest_int``, ``suggest_categorical``)
named by its key, so a trial's parameters read as the overrides they are. ``constraints`` (optional) are
expressions over config names (:class:`~.constraints.Constraint`) that a trial's values must satisfy before
it starts. Everything here is checked where the file is read, each error one line naming the file and the
key; whether a key exists in the config and takes its values is checked against the config's parser
(:func:`lightning_tf.tune.config.check_space`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from .constraints import Constraint

__all__ = ["CategoricalParam", "FloatParam", "IntParam", "Param", "SearchSpace", "Suggester"]

_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_TYPES = ("float", "int", "categorical")
_FIELDS = {
    "float": ("type", "low", "high", "log", "step"),
    "int": ("type", "low", "high", "step", "log"),
    "categorical": ("type", "choices"),
}


class Suggester(Protocol):
    """What a space asks of an Optuna trial (``optuna.Trial``, ``optuna.trial.FixedTrial``)."""

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float: ...

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int: ...

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


@dataclass(frozen=True)
class FloatParam:
    """A float in ``[low, high]``, on a log scale with ``log``, on a grid of ``step`` when given."""

    name: str
    low: float
    high: float
    log: bool = False
    step: float | None = None

    def suggest(self, trial: Suggester) -> float:
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)

    def probes(self) -> list[Any]:
        return [self.low, self.high]


@dataclass(frozen=True)
class IntParam:
    """An integer in ``[low, high]`` by ``step``, on a log scale with ``log``."""

    name: str
    low: int
    high: int
    step: int = 1
    log: bool = False

    def suggest(self, trial: Suggester) -> int:
        return trial.suggest_int(self.name, self.low, self.high, step=self.step, log=self.log)

    def probes(self) -> list[Any]:
        return [self.low, self.high]


@dataclass(frozen=True)
class CategoricalParam:
    """One of ``choices`` (None, booleans, numbers or strings, as Optuna stores them)."""

    name: str
    choices: tuple[Any, ...]

    def suggest(self, trial: Suggester) -> Any:
        return trial.suggest_categorical(self.name, list(self.choices))

    def probes(self) -> list[Any]:
        return list(self.choices)


Param = FloatParam | IntParam | CategoricalParam


def _number(where: str, field: str, value: Any, integer: bool) -> float | int:
    """``value`` of a range bound as a number; YAML reads ``1e-4`` (no dot) as text, which a float bound takes."""
    if isinstance(value, bool) or value is None:
        pass
    elif integer and isinstance(value, int):
        return value
    elif not integer and isinstance(value, (int, float)):
        return float(value)
    elif not integer and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    kind = "an integer" if integer else "a number"
    raise ValueError(f"{where}: {field} must be {kind}, got {value!r}")


def _flag(where: str, field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: {field} must be true or false, got {value!r}")
    return value


def _param(where: str, name: str, spec: Any) -> Param:
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"{where}: expected a range such as {{type: float, low: 0.0001, high: 0.003, log: true}}, got {spec!r}"
        )
    kind = spec.get("type")
    if kind not in _TYPES:
        got = "no type" if kind is None else f"type {kind!r}"
        raise ValueError(f"{where}: {got}; type is one of {', '.join(_TYPES)}")
    unknown = [str(k) for k in spec if k not in _FIELDS[kind]]
    if unknown:
        fields = ", ".join(_FIELDS[kind])
        raise ValueError(f"{where}: unknown field {unknown[0]!r} for type {kind}; fields are {fields}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or len(choices) < 2:
            raise ValueError(f"{where}: choices must be a list of at least two values, got {choices!r}")
        for choice in choices:
            if choice is not None and not isinstance(choice, (bool, int, float, str)):
                raise ValueError(f"{where}: choice {choice!r} is not a number, string, boolean or null")
        plain = [(type(c), c) for c in choices]
        if len(set(plain)) != len(plain):
            raise ValueError(f"{where}: choices repeat a value: {choices}")
        return CategoricalParam(name, tuple(choices))
    for field in ("low", "high"):
        if field not in spec:
            raise ValueError(f"{where}: {field} is missing (a {kind} range needs low and high)")
    integer = kind == "int"
    low, high = _number(where, "low", spec["low"], integer), _number(where, "high", spec["high"], integer)
    log = _flag(where, "log", spec.get("log", False))
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{where}: low and high must be finite, got {low} and {high}")
    if low >= high:
        raise ValueError(f"{where}: low ({low}) must be below high ({high})")
    if log and low <= 0:
        raise ValueError(f"{where}: a log range needs low > 0, got {low}")
    step = spec.get("step")
    if step is not None:
        step = _number(where, "step", step, integer)
        if step <= 0:
            raise ValueError(f"{where}: step must be > 0, got {step}")
        if log and (not integer or step != 1):
            raise ValueError(f"{where}: step and log do not combine (Optuna samples a log range continuously)")
        count = (high - low) / step
        if abs(count - round(count)) > 1e-9 * max(1.0, abs(count)):
            raise ValueError(f"{where}: high - low ({high - low:g}) is not a multiple of step ({step:g})")
    if integer:
        return IntParam(name, int(low), int(high), int(step or 1), log)
    return FloatParam(name, float(low), float(high), log, None if step is None else float(step))


@dataclass(frozen=True)
class SearchSpace:
    """The parameters (in file order) and constraints of a search file.

    Args:
        params: config name -> its range.
        constraints: what a trial's values must satisfy before it starts.
        source: where the space was read (named by its errors).
        text: the file's text, kept with the study.
    """

    params: dict[str, Param]
    constraints: tuple[Constraint, ...] = ()
    source: str = "search space"
    text: str = ""

    @classmethod
    def load(cls, path: str | Path) -> SearchSpace:
        """Read and check a search file."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"search file {path} not found")
        text = path.read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            line = f" (line {mark.line + 1})" if mark is not None else ""
            raise ValueError(f"{path}: not valid YAML{line}: {getattr(err, 'problem', err)}") from None
        return cls.from_mapping(data, str(path), text)

    @classmethod
    def from_mapping(cls, data: Any, source: str = "search space", text: str = "") -> SearchSpace:
        """The space a search file's parsed YAML (``data``) describes."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: expected a mapping of config names to ranges, got {type(data).__name__}")
        params: dict[str, Param] = {}
        constraints: list[Constraint] = []
        for key, spec in data.items():
            if key == "constraints":
                if not isinstance(spec, list) or not all(isinstance(c, str) for c in spec):
                    raise ValueError(f"{source}: constraints must be a list of expressions, got {spec!r}")
                for text_ in spec:
                    try:
                        constraints.append(Constraint(text_))
                    except ValueError as err:
                        raise ValueError(f"{source}: {err}") from None
                continue
            if not isinstance(key, str) or not _NAME.fullmatch(key):
                raise ValueError(
                    f"{source}: {key!r} is not a config name; keys are the config's dotted names, "
                    "such as model.init_args.lr"
                )
            params[key] = _param(f"{source}: {key}", key, spec)
        if not params:
            raise ValueError(f"{source}: no parameters to search")
        return cls(params, tuple(constraints), source, text)

    def suggest(self, trial: Suggester) -> dict[str, Any]:
        """The trial's value of each parameter, in file order."""
        return {name: param.suggest(trial) for name, param in self.params.items()}

    def violated(self, values: Mapping[str, Any]) -> Constraint | None:
        """The first constraint ``values`` (every name the constraints read) break, else None."""
        for constraint in self.constraints:
            if not constraint.holds(values):
                return constraint
        return None

    def refusal(self, values: Mapping[str, Any]) -> str | None:
        """Why a trial with ``values`` (its parameters and the config values the constraints read) must not
        start: the first broken constraint with the values it read; None when every constraint holds."""
        broken = self.violated(values)
        return None if broken is None else f"refused: {broken.explain(values)} is false"

    def constraint_names(self) -> list[str]:
        """The config names the constraints read that the space does not search (taken from the config)."""
        names = {n for c in self.constraints for n in c.names}
        return sorted(names - set(self.params))
