"""The package's shape: module-level imports form no cycle, nor do they with the imports under ``TYPE_CHECKING``
and inside functions,
task packages do not import each other, the core imports nothing of the package outside itself, no
LightningModule file imports its DataModule's module, no function outside a LightningModule's class takes a
LightningModule (read from the annotations, so every parameter has one), the K-line networks are torch modules
that import nothing of the rest, the layout rules of the top floor hold (:func:`layout_violations`), and a
dependency's private names are used only in its register (:func:`private_uses`). Each checker is also run on a tiny
synthetic package, so the checks can fail."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lightning_tf"
TASKS = ("text", "vision", "kline")


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: a module's name -> (its source, whether it is a package's ``__init__``)
Sources = dict[str, tuple[str, bool]]


def _sources(root: Path = PACKAGE) -> Sources:
    files = sorted(root.rglob("*.py"))
    return {_module_name(f, root): (f.read_text(encoding="utf-8"), f.name == "__init__.py") for f in files}


@functools.lru_cache(maxsize=None)
def _parse(source: str) -> ast.Module:
    """A module's syntax tree, parsed once for all the checks (none of them changes it)."""
    return ast.parse(source)


def _module_level_imports(
    source: str, name: str, is_package: bool, modules: set[str], type_checking: bool = False, functions: bool = False
) -> set[str]:
    """Package modules imported at module level; under ``TYPE_CHECKING`` only when ``type_checking``, inside
    functions only when ``functions``. ``modules`` names the package's modules (``from . import io`` imports the
    submodule)."""
    root = name.split(".")[0]
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.body if type_checking else [])
                visit(node.orelse)
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body if functions else [])
            elif isinstance(node, (ast.If, ast.Try, ast.ClassDef, ast.With, ast.For, ast.While)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == root)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join([*base, node.module] if node.module else base)
                else:
                    target = node.module or ""
                if target.split(".")[0] != root:
                    continue
                found.add(target)
                for alias in node.names:  # `from . import io` imports the submodule
                    if f"{target}.{alias.name}" in modules:
                        found.add(f"{target}.{alias.name}")

    visit(_parse(source).body)
    found.discard(name)
    return found


def _graph(sources: Sources | None = None, type_checking: bool = False, functions: bool = False) -> dict[str, set[str]]:
    sources = _sources() if sources is None else sources
    names = set(sources)
    graph: dict[str, set[str]] = {}
    for name, (source, is_package) in sources.items():
        deps = set()
        for dep in _module_level_imports(source, name, is_package, names, type_checking, functions):
            while dep not in names and "." in dep:
                dep = dep.rpartition(".")[0]  # an attribute of a module: the module
            if dep in names:
                deps.add(dep)
        graph[name] = deps
    return graph


def _find_cycle(graph: dict[str, set[str]], allowed: frozenset[tuple[str, str]] = frozenset()) -> list[str] | None:
    """The first import cycle of ``graph`` (``a -> b -> a``), or None. A package ``__init__`` that re-exports its
    submodules is imported by them only through their package: an edge from a submodule to its own package
    is not a cycle Python trips over. Edges in ``allowed`` are left out."""
    state: dict[str, int] = {}
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if node.startswith(dep + ".") or (node, dep) in allowed:
                continue
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (cycle := walk(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)):
            return cycle
    return None


def test_module_level_imports_form_no_cycle() -> None:
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_cycle_counting_type_checking_imports() -> None:
    """Imports under ``TYPE_CHECKING`` count too: a helper module that names its LightningModule's class for a
    type hint depends on it as much as one that imports it, and the module depends on the helper."""
    graph = _graph(type_checking=True)
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle (counting TYPE_CHECKING imports): " + " -> ".join(cycle or [])


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    """Nor through an import deferred into a function: two modules that need each other are one concept in two
    files (or need a third that both use), whenever the import runs."""
    cycle = _find_cycle(_graph(type_checking=True, functions=True))
    assert cycle is None, "import cycle (counting imports inside functions): " + " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle_through_an_import_inside_a_function() -> None:
    """The checker itself: ``b`` imports ``a`` inside a method, the only way the two meet."""
    sources: Sources = {
        "pkg": ("", True),
        "pkg.a": ("from .b import B\nclass A: ...\n", False),
        "pkg.b": ("class B:\n    def make(self) -> object:\n        from .a import A\n        return A()\n", False),
    }
    assert _find_cycle(_graph(sources, type_checking=True)) is None
    assert _graph(sources, functions=True)["pkg.b"] == {"pkg.a"}
    assert _find_cycle(_graph(sources, functions=True)) == ["pkg.a", "pkg.b", "pkg.a"]


def test_the_cycle_check_finds_a_cycle_through_type_checking_and_not_through_the_own_package() -> None:
    """The checker itself, on a tiny package: ``a`` imports ``b`` at run time, ``b`` names ``a`` for typing."""
    sources: Sources = {
        "pkg": ("from .a import A\nfrom .b import B\n", True),
        "pkg.a": ("from . import b\nfrom pkg import B\nclass A: ...\n", False),  # pkg.a -> pkg: not a cycle
        "pkg.b": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nclass B: ...\n", False),
    }
    assert _graph(sources) == {"pkg": {"pkg.a", "pkg.b"}, "pkg.a": {"pkg", "pkg.b"}, "pkg.b": set()}
    assert _find_cycle(_graph(sources)) is None
    assert _find_cycle(_graph(sources, type_checking=True)) == ["pkg.a", "pkg.b", "pkg.a"]
    assert _find_cycle(_graph(sources, type_checking=True), frozenset({("pkg.b", "pkg.a")})) is None


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


#: the package's top floor: the engine, the runtime, the tasks, the commands, and what is truly shared
TOP_FLOOR = {
    "core": "the torch-only engine",
    "training": "the runtime every task uses",
    **{task: "a task" for task in TASKS},
    "cli": "the lightning-tf command",
    "serve": "lightning-tf serve",
    "tune": "lightning-tf tune",
}
TOP_MODULES = {"lightning_tf", "lightning_tf.__main__", "lightning_tf.export"}
COMMAND_PACKAGES = ("cli", "serve", "tune")


def _floor(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in TOP_FLOOR else None


def layout_violations(sources: Sources) -> list[str]:
    """What breaks the layout rules: every module lives in a folder of :data:`TOP_FLOOR` or is one of
    :data:`TOP_MODULES`; a task imports only ``core/``, ``training/`` and itself; ``training/`` imports only
    ``core/`` and itself; nothing imports a command package (``cli/``, ``serve/``, ``tune/``) but the
    package's ``__main__`` (the command table names the others as strings) and the command package itself.
    Imports inside functions and under ``TYPE_CHECKING`` count."""
    found = []
    for name in sources:
        if name not in TOP_MODULES and _floor(name) is None:
            found.append(f"{name}: not in a folder of the top floor ({', '.join(TOP_FLOOR)}) nor a shared module")
    graph = _graph(sources, type_checking=True, functions=True)
    for module, deps in graph.items():
        floor = _floor(module)
        for dep in sorted(deps):
            target = _floor(dep)
            if target in COMMAND_PACKAGES and target != floor and module != "lightning_tf.__main__":
                found.append(f"{module} imports {dep}: nothing imports a command package")
            elif floor in TASKS and target not in ("core", "training", floor) and dep != "lightning_tf":
                found.append(f"{module} imports {dep}: a task imports only core/ and training/")
            elif floor == "training" and target not in ("core", "training") and dep != "lightning_tf":
                found.append(f"{module} imports {dep}: training/ imports only core/")
    return found


def test_the_layout_rules_hold() -> None:
    assert layout_violations(_sources()) == []


def test_the_layout_check_finds_each_kind_of_violation() -> None:
    sources: Sources = {
        "lightning_tf": ("", True),
        "lightning_tf.__main__": ("from lightning_tf.cli import commands", False),
        "lightning_tf.loose": ("", False),
        "lightning_tf.core": ("", True),
        "lightning_tf.training": ("", True),
        "lightning_tf.training.loaders": ("import lightning_tf.text", False),
        "lightning_tf.text": ("", True),
        "lightning_tf.text.module": ("def f():\n    from lightning_tf.export import x", False),
        "lightning_tf.vision": ("", True),
        "lightning_tf.vision.data": (
            "from lightning_tf.training import loaders\nfrom lightning_tf.core import y",
            False,
        ),
        "lightning_tf.kline": ("", True),
        "lightning_tf.export": ("", False),
        "lightning_tf.cli": ("", True),
        "lightning_tf.cli.commands": ("from lightning_tf.training import find", False),
        "lightning_tf.tune": ("", True),
        "lightning_tf.tune.trial": ("from lightning_tf.cli import commands", False),
    }
    found = layout_violations(sources)
    assert sorted(found) == [
        "lightning_tf.loose: not in a folder of the top floor (core, training, text, vision, kline, cli, serve, "
        "tune) nor a shared module",
        "lightning_tf.text.module imports lightning_tf.export: a task imports only core/ and training/",
        "lightning_tf.training.loaders imports lightning_tf.text: training/ imports only core/",
        "lightning_tf.tune.trial imports lightning_tf.cli.commands: nothing imports a command package",
        "lightning_tf.tune.trial imports lightning_tf.cli: nothing imports a command package",
    ]


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


@pytest.mark.parametrize(
    ("folder", "allowed", "banned"),
    [
        # the backbones, shared layers, linear path and closed-form fit; a published backbone is built from
        # kline/published's modules
        ("networks", ("networks", "published"), {"lightning", "pytorch_lightning", "torchmetrics", "pandas"}),
        # the published models (pandas only turns time stamps into Kronos's calendar fields)
        ("published", ("published",), {"lightning", "pytorch_lightning", "torchmetrics"}),
    ],
)
def test_the_kline_networks_are_torch_modules_that_know_nothing_of_the_rest(
    folder: str, allowed: tuple[str, ...], banned: set[str]
) -> None:
    """``kline/networks`` and ``kline/published`` import neither Lightning nor the data side nor anything of
    ``kline`` outside themselves (networks may build a published model), under ``TYPE_CHECKING`` and inside
    functions too, and no function there takes the LightningModule."""
    files = sorted((PACKAGE / "kline" / folder).rglob("*.py"))
    assert len(files) >= 8
    inside = (*(f"lightning_tf.kline.{a}" for a in allowed), "lightning_tf.core")
    for f in files:
        imports = _all_imports(f)
        ours = {m for m in imports if m.startswith("lightning_tf")}
        outside = {m for m in ours if not m.startswith(inside)}
        assert not outside, f"{f.relative_to(PACKAGE)} imports {sorted(outside)}"
        third = {m.split(".")[0] for m in imports - ours}
        banned = third & banned
        assert not banned, f"{f.relative_to(PACKAGE)} imports {sorted(banned)}"
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                    hint = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                    assert "KLineForecaster" not in hint and "LightningModule" not in hint, (
                        f"{f.relative_to(PACKAGE)}: {node.name}({arg.arg}: {hint})"
                    )


# ------------------------------------------------------------- no helper takes the LightningModule

#: Lightning's base classes whose hooks a package class overrides with the signature Lightning calls
#: (``pl_module`` included): the callbacks, the checkpoint callbacks, the prediction writers, LightningCLI's
#: config callback and optuna-integration's pruning callback (a Lightning callback).
LIGHTNING_CALLBACKS = (
    "Callback",
    "ModelCheckpoint",
    "BasePredictionWriter",
    "SaveConfigCallback",
    "PyTorchLightningPruningCallback",
)


def _lightning_hooks() -> frozenset[str]:
    from lightning.pytorch import Callback
    from lightning.pytorch.callbacks import BasePredictionWriter
    from lightning.pytorch.cli import SaveConfigCallback

    bases = (Callback, BasePredictionWriter, SaveConfigCallback)
    return frozenset(n for base in bases for n in vars(base) if not n.startswith("_"))


def _subclasses(trees: dict[str, ast.Module], roots: set[str]) -> set[str]:
    """Class names in ``trees`` that derive, directly or through other classes there, from one named in ``roots``
    (bases compared by their last name: ``pl.LightningModule`` is ``LightningModule``), with ``roots``."""
    found, grew = set(roots), True
    classes = [n for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    while grew:
        grew = False
        for c in classes:
            if c.name not in found and any(ast.unparse(b).split(".")[-1].split("[")[0] in found for b in c.bases):
                found.add(c.name)
                grew = True
    return found


def _names_in(annotation: ast.expr) -> set[str]:
    """Every class name an annotation mentions, in quoted forward references too (``"Seq2SeqTransformer"``)."""
    names: set[str] = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                names |= _names_in(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                pass
    return names


def _module_takers(sources: Sources, hooks: frozenset[str]) -> set[tuple[str, str]]:
    """``(module, qualified function name)`` of every function or method whose signature takes a LightningModule:
    a parameter annotated with ``LightningModule``, a package class derived from it, or a module-level alias of
    one (``Source = Union[str, "LightningModule"]``), ``type[...]`` of one included. Left out: the methods of a
    LightningModule's own class, and a Lightning callback's overrides of Lightning's hooks (``hooks``), whose
    signature is Lightning's."""
    trees = {name: _parse(source) for name, (source, _) in sources.items()}
    modules = _subclasses(trees, {"LightningModule"})
    callbacks = _subclasses(trees, set(LIGHTNING_CALLBACKS))
    found: set[tuple[str, str]] = set()
    for name, tree in trees.items():
        aliases = {
            t.id
            for n in tree.body
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and _names_in(n.value) & modules
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        }
        taken = modules | aliases

        def visit(nodes: list[ast.stmt], prefix: str, owner: ast.ClassDef | None) -> None:
            for node in nodes:
                if isinstance(node, ast.ClassDef):
                    if node.name not in modules:  # a LightningModule's own class may take itself
                        visit(node.body, f"{prefix}{node.name}.", node)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    hook = owner is not None and owner.name in callbacks and node.name in hooks
                    a = node.args
                    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
                    if not hook and any(p.annotation is not None and _names_in(p.annotation) & taken for p in params):
                        found.add((name, prefix + node.name))
                    visit(node.body, f"{prefix}{node.name}.", None)
                elif isinstance(node, (ast.If, ast.Try, ast.With)):
                    visit([*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])], prefix, owner)

        visit(tree.body, "", None)
    return found


#: The export's functions, whose input is a trained model of any task (as ``torch.onnx.export`` takes a module):
#: its weights, its example input, its hparams and ``on_save_checkpoint`` sidecar. This list must not grow.
EXPORT_MODULE_TAKERS = frozenset(
    {
        ("lightning_tf.export", "_describe"),
        ("lightning_tf.export", "_onnx_spec"),
        ("lightning_tf.export", "_verify_onnx"),
        ("lightning_tf.export", "export_onnx"),
        ("lightning_tf.export", "export_safetensors"),
        ("lightning_tf.export", "load_module"),
        ("lightning_tf.export", "load_safetensors"),
    }
)


#: The Lightning register's reader of a field Lightning keeps on every LightningModule (its trainer, or None): it
#: takes Lightning's class, whose private field it reads, not a task's module.
REGISTER_MODULE_TAKERS = frozenset({("lightning_tf.training.private.lightning", "attached_trainer")})


def test_no_function_outside_a_lightning_module_takes_one() -> None:
    """A helper receives what it uses, never the whole LightningModule (that is what keeps imports one-way)."""
    found = _module_takers(_sources(), _lightning_hooks())
    allowed = EXPORT_MODULE_TAKERS | REGISTER_MODULE_TAKERS
    assert not found - allowed, f"these take a LightningModule: {sorted(found - allowed)}"
    assert not allowed - found, f"no longer take one: remove {sorted(allowed - found)}"


def _unannotated(sources: Sources) -> set[tuple[str, str, str]]:
    """``(module, function, parameter)`` of every parameter without an annotation (``self`` and ``cls`` aside):
    the check above reads annotations, so a parameter without one would pass it unseen."""
    found: set[tuple[str, str, str]] = set()
    for name, (source, _) in sources.items():
        for node in ast.walk(_parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]:
                    if p.annotation is None and p.arg not in ("self", "cls"):
                        found.add((name, node.name, p.arg))
    return found


def test_every_parameter_is_annotated() -> None:
    missing = _unannotated(_sources())
    assert not missing, f"annotate these parameters: {sorted(missing)}"


def test_the_signature_check_finds_a_function_that_takes_a_lightning_module() -> None:
    """The checker itself, on a tiny package: every way of naming the module is found, its own methods and a
    callback's Lightning hooks are not."""
    sources: Sources = {
        "pkg": ("", True),
        "pkg.module": (
            "import lightning.pytorch as pl\n"
            "class Base(pl.LightningModule): ...\n"
            "class Model(Base):\n"
            "    def merge(self, other: Model) -> None: ...\n"  # its own class: allowed
            "    @classmethod\n"
            "    def build(cls) -> Model: ...\n",
            False,
        ),
        "pkg.helpers": (
            "from typing import TYPE_CHECKING, Union\n"
            "from lightning.pytorch import Callback, LightningModule\n"
            "if TYPE_CHECKING:\n"
            "    from .module import Model\n"
            "Source = Union[str, 'LightningModule']\n"
            "def log_samples(model: Model, stage: str) -> None: ...\n"
            "def quoted(model: 'Model | None') -> None: ...\n"
            "def build(cls: type[Model]) -> None: ...\n"
            "def load(source: Source) -> None: ...\n"
            "def fine(x: int, model: object, other=None) -> Model: ...\n"  # returns one: allowed; `other` unannotated
            "class Plots:\n"
            "    def figure(self, *, module: pl.LightningModule) -> None: ...\n"
            "class Writer(Callback):\n"
            "    def on_test_end(self, trainer: object, pl_module: LightningModule) -> None: ...\n"  # a hook
            "    def write(self, pl_module: LightningModule) -> None:\n"  # not a hook
            "        def inner(m: Base) -> None: ...\n",
            False,
        ),
    }
    assert _unannotated(sources) == {("pkg.helpers", "fine", "other")}
    assert _module_takers(sources, frozenset({"on_test_end"})) == {
        ("pkg.helpers", f)
        for f in ("log_samples", "quoted", "build", "load", "Plots.figure", "Writer.write", "Writer.write.inner")
    }


# ------------------------------------------------------------- a dependency's private names: only in the registers

#: where the registers live (one module per library; ``training/private/__init__.py`` lists them)
REGISTERS = "lightning_tf.training.private"
#: names that start with ``_`` and are public all the same (documented as such)
PUBLIC_UNDERSCORE = frozenset({"os._exit"})
#: private reads not yet moved into a register, in modules another change is rewriting: each is to call its
#: register's function (``option_strings``, ``attached_trainer``) and leave this list. It must not grow.
NOT_YET_IN_A_REGISTER: frozenset[tuple[str, str]] = frozenset()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _class_attributes(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Per class of the package (by name), the names it and its package base classes define: methods,
    class-level names, ``self.<name>`` it sets."""
    own: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            names = own.setdefault(node.name, set())
            bases.setdefault(node.name, []).extend(ast.unparse(b).split(".")[-1].split("[")[0] for b in node.bases)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                    if isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls"):
                        names.add(sub.attr)

    def defined(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        found = set(own.get(name, ()))
        for base in bases.get(name, []):
            if base in own and base not in seen:
                found |= defined(base, seen | {name})
        return found

    return {name: defined(name) for name in own}


def private_uses(sources: Sources) -> set[tuple[str, str]]:
    """``(module, expression)`` of every use of a dependency's private name outside the registers: ``self._name``
    that neither its class nor the class's package bases define, ``x._name`` that no class of the package
    defines, the same through ``getattr``, ``setattr`` or ``hasattr``, and an import of a private name or from a
    private module of another package. (A private method a class overrides is listed in its register's
    ``OVERRIDES`` instead, and checked by ``tests/training/private/test_registers.py``.)"""
    trees = {name: _parse(source) for name, (source, _) in sources.items()}
    classes = _class_attributes(trees)
    anywhere = set().union(*classes.values())
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, module: str, owner: str | None) -> None:
        if isinstance(node, ast.ClassDef):
            owner = node.name
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            mine = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls") and owner is not None
            if node.attr not in (classes[owner] if mine else anywhere):  # type: ignore[index]
                found.add((module, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) > 1:
                key = node.args[1]
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and _is_private(key.value):
                    if key.value not in anywhere:
                        found.add((module, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and not node.level:
            name = node.module or ""
            if name.split(".")[0] != module.split(".")[0]:
                if any(_is_private(part) for part in name.split(".")):
                    found.add((module, f"from {name} import ..."))
                found.update((module, f"{name}.{a.name}") for a in node.names if _is_private(a.name))
        for child in ast.iter_child_nodes(node):
            visit(child, module, owner)

    for name, tree in trees.items():
        if name != REGISTERS and not name.startswith(REGISTERS + "."):
            visit(tree, name, None)
    return {(module, expr) for module, expr in found if expr not in PUBLIC_UNDERSCORE}


def test_a_dependencys_private_names_are_used_only_in_its_register() -> None:
    found = private_uses(_sources())
    assert found - NOT_YET_IN_A_REGISTER == set(), f"move these into lightning_tf/training/private/: {sorted(found)}"
    assert NOT_YET_IN_A_REGISTER <= found, f"moved: remove from the list {sorted(NOT_YET_IN_A_REGISTER - found)}"


def test_the_private_name_check_finds_each_kind_of_use() -> None:
    """The checker itself, on a tiny package: reads, writes, ``getattr`` and imports of another package's private
    names are found; the package's own private names, ``os._exit`` and the registers themselves are not."""
    sources: Sources = {
        "lightning_tf": ("", True),
        "lightning_tf.training.private.lib": ("def read(x):\n    return x._hidden\n", False),
        "lightning_tf.task": (
            "import os\n"
            "from lib import _Secret\n"
            "from lib._impl import thing\n"
            "from lightning_tf._own import x\n"  # the package's own module
            "class Model(Base):\n"
            "    _table = {}\n"
            "    def _step(self):\n"
            "        self._cache = 1\n"
            "        return self._trainer, self._cache, self._step, other._table\n"
            "class Watch(Callback):\n"
            "    def setup(self, trainer):\n"
            "        self._trainer = trainer\n"  # its own attribute: Model's self._trainer is still Lightning's
            "class Child(Model):\n"
            "    def go(self):\n"
            "        return self._cache, self._step\n"  # defined by its package base
            "def f(trainer, logger):\n"
            "    trainer._connector.flag = True\n"
            "    os._exit(0)\n"
            "    return getattr(logger, '_init', None), getattr(logger, '_cache')\n",
            False,
        ),
    }
    assert private_uses(sources) == {
        ("lightning_tf.task", "lib._Secret"),
        ("lightning_tf.task", "from lib._impl import ..."),
        ("lightning_tf.task", "self._trainer"),
        ("lightning_tf.task", "trainer._connector"),
        ("lightning_tf.task", "getattr(logger, '_init', None)"),
    }
