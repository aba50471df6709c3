"""The registers list every private method of a dependency that a class of the package overrides: each register's
``OVERRIDES`` names exactly the classes that override it (a stale entry fails too), each override takes the
arguments of the method it replaces, and no class sets an attribute of a dependency's base class that is private
there (a register's function does). ``tests/test_structure.py`` checks the private names read outside the registers;
each register's own test checks that its names still mean what it assumes."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import types
from collections.abc import Iterator

from tests.helpers.cli import ROOT

PACKAGE = ROOT / "lightning_tf"
REGISTERS = ("jsonargparse", "lightning", "litserve", "python", "torch", "torchvision")


def _modules() -> Iterator[str]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _classes() -> list[type]:
    """Every class the package's modules define (at module level), importing each module."""
    found = []
    for name in _modules():
        if name == "lightning_tf.__main__":
            continue
        module = importlib.import_module(name)
        found += [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == name]
    return found


def _external(cls: type) -> list[type]:
    return [b for b in cls.__mro__[1:] if b is not object and not b.__module__.startswith("lightning_tf")]


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


#: what a class body defines as a method (the private names a metaclass sets, ``_abc_impl``, are data)
METHODS = (types.FunctionType, staticmethod, classmethod, property)


def _overrides(classes: list[type]) -> dict[str, set[str]]:
    """``<dependency class>.<method>`` -> the package's classes that override that private method."""
    found: dict[str, set[str]] = {}
    for cls in classes:
        for attr in (a for a, v in vars(cls).items() if _private(a) and isinstance(v, METHODS)):
            base = next((b for b in _external(cls) if attr in vars(b)), None)
            if base is not None:
                found.setdefault(f"{_name(base)}.{attr}", set()).add(_name(cls))
    return found


def _listed() -> dict[str, set[str]]:
    listed: dict[str, set[str]] = {}
    for library in REGISTERS:
        register = importlib.import_module(f"lightning_tf.training.private.{library}")
        for key, classes in register.OVERRIDES.items():
            assert key not in listed, f"{key} is in two registers"
            listed[key] = set(classes)
    return listed


def test_every_overridden_private_method_is_in_its_register_with_its_classes() -> None:
    found = _overrides(_classes())
    assert {"lightning.pytorch.cli.LightningCLI._run_subcommand", "litserve.server.LitServer._init_manager"} <= set(
        found
    )  # the scan sees overrides where they are
    assert found == _listed()


def _positional(function: object) -> tuple[list[str], bool]:
    """The names of ``function``'s positional parameters, and whether it takes ``*args``."""
    params = inspect.signature(function).parameters.values()  # type: ignore[arg-type]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names, any(p.kind == p.VAR_POSITIONAL for p in params)


def test_each_override_takes_the_arguments_of_the_method_it_replaces() -> None:
    """An override names the replaced method's leading arguments as they are (and all of them without ``*args``):
    a release that adds, removes or reorders one fails here, before the override is called wrongly."""
    classes = {_name(c): c for c in _classes()}
    for key, overriding in _listed().items():
        path, _, method = key.rpartition(".")
        module, _, qualname = path.rpartition(".")
        base = getattr(importlib.import_module(module), qualname)
        theirs, _ = _positional(getattr(base, method))
        for name in overriding:
            ours, rest = _positional(getattr(classes[name], method))
            assert theirs[: len(ours)] == ours and (rest or ours == theirs), f"{name}.{method}{ours} vs {key}{theirs}"


def _set_attributes(cls: type) -> set[str]:
    """The private attributes the class's own code sets on ``self``."""
    try:
        tree = ast.parse(inspect.getsource(cls).strip() if cls.__qualname__ == cls.__name__ else "")
    except (OSError, TypeError, IndentationError):
        return set()
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr)
        if isinstance(node.value, ast.Name) and node.value.id == "self"
    }


@functools.cache
def _source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):  # a class without Python source
        return ""


def test_no_class_sets_a_private_attribute_of_a_dependencys_base_class() -> None:
    """``self._x = ...`` in a subclass of a dependency's class that itself uses ``self._x`` changes the dependency's
    state behind its back: that goes through a register (``litserve.set_transport``), where a test guards it."""
    shared = []
    for cls in _classes():
        bases = _external(cls)
        if not bases:
            continue
        text = "\n".join(_source(base) for base in bases)
        shared += [f"{_name(cls)}: self.{a}" for a in _set_attributes(cls) if re.search(rf"self\.{a}\b", text)]
    assert shared == []


def test_each_library_with_a_register_has_an_upper_bound_the_installed_release_meets() -> None:
    """A release that renames a private name must not install: each register's library is bounded above in
    ``pyproject.toml`` (Python, the standard library's register, is checked by CI's interpreters instead)."""
    import tomllib
    from importlib.metadata import version

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    requirements = {Requirement(r).name: Requirement(r) for r in listed}
    for distribution in sorted(set(REGISTERS) - {"python"}):  # each register is named after its distribution
        specifier = requirements[distribution].specifier
        assert any(s.operator in ("<", "<=", "==", "~=") for s in specifier), (
            f"{distribution}{specifier}: no upper bound"
        )
        assert specifier.contains(version(distribution), prereleases=True), f"{distribution} {version(distribution)}"
