"""``lightning_tf.lazy_exports``: a name is imported on first use and then kept, ``dir()`` lists every export
before that, an unknown name is an AttributeError; every package that loads its names lazily does it with this one
helper, and its ``TYPE_CHECKING`` imports (what type checkers and editors read) name exactly its table: the same
names from the same modules."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cli import ROOT

PACKAGE = ROOT / "lightning_tf"


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package ``lazypkg`` whose ``Thing`` (in ``.things``) and ``deep`` (in ``.sub.deeper``) load lazily."""
    root = tmp_path / "lazypkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text(
        "from lightning_tf import lazy_exports\n"
        "__getattr__, __dir__ = lazy_exports(__name__, {'Thing': '.things', 'deep': '.sub.deeper'})\n"
        "eager = 1\n"
    )
    (root / "things.py").write_text("LOADS = []\nLOADS.append(1)\nclass Thing: ...\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "deeper.py").write_text("def deep():\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "lazypkg"
    for name in [m for m in sys.modules if m == "lazypkg" or m.startswith("lazypkg.")]:
        del sys.modules[name]


def test_a_name_loads_on_first_use_and_is_then_kept(package: str) -> None:
    pkg = importlib.import_module(package)
    assert f"{package}.things" not in sys.modules and f"{package}.sub.deeper" not in sys.modules
    assert {"Thing", "deep", "eager"} <= set(dir(pkg)) and dir(pkg) == sorted(dir(pkg))
    thing = pkg.Thing
    things = sys.modules[f"{package}.things"]
    assert thing is things.Thing and vars(pkg)["Thing"] is thing  # in the namespace: no second lookup
    assert pkg.Thing is thing and things.LOADS == [1]
    assert f"{package}.sub.deeper" not in sys.modules and pkg.deep() == 42
    with pytest.raises(AttributeError, match=r"^module 'lazypkg' has no attribute 'Nothing'$"):
        pkg.Nothing  # noqa: B018
    assert not hasattr(pkg, "things_that_are_not_exported")


def _lazy_packages() -> dict[str, ast.Module]:
    """The package's ``__init__`` files that call ``lazy_exports``, by package name."""
    found = {}
    for path in sorted(PACKAGE.rglob("__init__.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "lazy_exports"]
        if calls:
            found[".".join(path.parent.relative_to(ROOT).parts)] = tree
    return found


def _table(tree: ast.Module) -> dict[str, str]:
    """The exports table an ``__init__`` gives ``lazy_exports``: name -> module."""
    (call,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "lazy_exports"]
    table = call.args[1]
    if isinstance(table, ast.Name):  # a table assigned to a name first
        (table,) = [
            n.value
            for n in tree.body
            if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == [table.id]
        ]
    return ast.literal_eval(table)


def _type_checking_imports(tree: ast.Module) -> dict[str, str]:
    """The names an ``__init__`` imports under ``if TYPE_CHECKING:``: name -> module (``.data``)."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                assert isinstance(item, ast.ImportFrom) and item.level == 1, ast.unparse(item)
                for alias in item.names:
                    assert alias.asname is None and alias.name not in found, alias.name
                    found[alias.name] = "." + (item.module or "")
    return found


def test_every_lazy_package_uses_the_helper_and_types_exactly_its_table() -> None:
    packages = _lazy_packages()
    assert set(packages) == {
        "lightning_tf.training",
        "lightning_tf.kline",
        "lightning_tf.kline.evaluation",
        "lightning_tf.kline.universe",
        "lightning_tf.serve",
    }
    for name, tree in packages.items():
        table = _table(tree)
        assert len(table) > 5, name
        assert _type_checking_imports(tree) == table, name
    for path in PACKAGE.rglob("*.py"):  # no package writes its own
        if path != PACKAGE / "__init__.py":
            assert "def __getattr__(" not in path.read_text(encoding="utf-8"), path


def test_each_export_is_the_object_its_module_defines() -> None:
    pytest.importorskip("litserve")  # serve's exports import it
    for name, tree in _lazy_packages().items():
        package = importlib.import_module(name)
        for export, module in _table(tree).items():
            assert getattr(package, export) is getattr(importlib.import_module(module, name), export), export
            assert export in package.__all__ and export in dir(package)


def test_the_check_reads_a_table_and_its_type_checking_imports() -> None:
    """The checker itself: a name typed but not exported, or from another module, differs."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from .a import A, B\n"
        "    from .sub.c import C\n"
        "_WHERE = {'A': '.a', 'B': '.b', 'C': '.sub.c'}\n"
        "__getattr__, __dir__ = lazy_exports(__name__, _WHERE)\n"
    )
    tree = ast.parse(source)
    assert _type_checking_imports(tree) == {"A": ".a", "B": ".a", "C": ".sub.c"}
    assert _table(tree) == {"A": ".a", "B": ".b", "C": ".sub.c"} != _type_checking_imports(tree)
