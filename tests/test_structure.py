"""The package's shape: module-level imports form no cycle, task packages do not import each other, the
core imports nothing of the package outside itself, no LightningModule file imports its DataModule's
module, the K-line networks are torch modules that import nothing of the rest, and no file grows past
550 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lightning_tf"
TASKS = ("text", "vision", "kline")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> set[str]:
    """Package modules imported at module level (not under ``TYPE_CHECKING``, not inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("lightning_tf"))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join([*base, node.module] if node.module else base)
                else:
                    target = node.module or ""
                if not target.startswith("lightning_tf"):
                    continue
                found.add(target)
                for alias in node.names:  # `from . import io` imports the submodule
                    sub = f"{target}.{alias.name}"
                    if (PACKAGE.parent / Path(*sub.split("."))).with_suffix(".py").exists():
                        found.add(sub)

    visit(tree.body)
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    names = {_module_name(f) for f in files}
    graph: dict[str, set[str]] = {}
    for f in files:
        deps = set()
        for dep in _runtime_imports(f):
            while dep not in names and "." in dep:
                dep = dep.rpartition(".")[0]  # an attribute of a module: the module
            if dep in names:
                deps.add(dep)
        graph[_module_name(f)] = deps
    return graph


def test_module_level_imports_form_no_cycle() -> None:
    graph = _graph()
    # a package __init__ that re-exports its submodules is imported by them only through their package;
    # an edge submodule -> its own package __init__ is not a cycle Python trips over
    state: dict[str, int] = {}
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if node.startswith(dep + "."):
                continue  # a submodule importing from its own package
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                walk(dep)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)


def test_task_packages_do_not_import_each_other_and_the_core_stands_alone() -> None:
    graph = _graph()
    for module, deps in graph.items():
        parts = module.split(".")
        if len(parts) > 1 and parts[1] in TASKS:
            others = {d for d in deps if d.split(".")[1:2] and d.split(".")[1] in TASKS and d.split(".")[1] != parts[1]}
            assert not others, f"{module} imports another task: {sorted(others)}"
        if len(parts) > 1 and parts[1] == "core":
            outside = {d for d in deps if not d.startswith("lightning_tf.core")}
            assert not outside, f"{module} (core) imports {sorted(outside)}"
    for task in TASKS:
        deps = graph[f"lightning_tf.{task}.module"]
        assert f"lightning_tf.{task}.data" not in deps, f"{task}/module.py imports its DataModule's module"


def test_no_package_file_over_550_lines() -> None:
    long = {str(f.relative_to(PACKAGE)): n for f in PACKAGE.rglob("*.py")
            if (n := len(f.read_text(encoding="utf-8").splitlines())) > 550}
    assert not long, long


def _all_imports(path: Path) -> set[str]:
    """Every module ``path`` imports anywhere (module level, functions, ``TYPE_CHECKING``), absolute names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            found.add(".".join([*base, node.module] if node.module else base))
    return found


def test_the_kline_networks_are_torch_modules_that_know_nothing_of_the_rest() -> None:
    """``kline/networks`` (the backbones, shared layers, linear path and closed-form fit) imports neither
    Lightning nor the data side nor anything of ``kline`` outside itself, under ``TYPE_CHECKING`` and inside
    functions too, and no function there takes the LightningModule."""
    files = sorted((PACKAGE / "kline" / "networks").rglob("*.py"))
    assert len(files) >= 8
    for f in files:
        imports = _all_imports(f)
        ours = {m for m in imports if m.startswith("lightning_tf")}
        outside = {m for m in ours if not m.startswith(("lightning_tf.kline.networks", "lightning_tf.core"))}
        assert not outside, f"{f.relative_to(PACKAGE)} imports {sorted(outside)}"
        third = {m.split(".")[0] for m in imports - ours}
        banned = third & {"lightning", "pytorch_lightning", "torchmetrics", "pandas"}
        assert not banned, f"{f.relative_to(PACKAGE)} imports {sorted(banned)}"
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                    hint = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                    assert "KLineForecaster" not in hint and "LightningModule" not in hint, (
                        f"{f.relative_to(PACKAGE)}: {node.name}({arg.arg}: {hint})")
