"""The core is torch only: importing it pulls in no task libraries, and every module has ``__all__``."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import lightning_tf.core as core

FORBIDDEN = ("lightning", "pytorch_lightning", "pandas", "timm", "torchvision", "tokenizers")
CORE_DIR = Path(core.__file__).parent
CORE_FILES = sorted(CORE_DIR.glob("*.py"))


def test_core_import_leaves_task_libraries_out() -> None:
    code = (
        "import json, sys\n"
        "import lightning_tf.core\n"
        f"forbidden = {FORBIDDEN!r}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in forbidden)\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'loaded': loaded}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["torch"]  # the import really happened
    assert report["loaded"] == []


def test_core_file_list_is_complete() -> None:
    # guards the parametrized tests below against an empty or renamed directory
    names = {p.stem for p in CORE_FILES}
    assert {"masks", "attention", "positional", "feedforward", "blocks", "transformer"} <= names


@pytest.mark.parametrize("name", core.__all__)
def test_every_public_name_is_importable(name: str) -> None:
    module = importlib.import_module("lightning_tf.core")
    assert getattr(module, name) is not None


def test_all_has_no_duplicates() -> None:
    assert len(core.__all__) == len(set(core.__all__))


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.name)
def test_every_core_module_defines_all(path: Path) -> None:
    tree = ast.parse(path.read_text())
    assigned = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
    ]
    assert assigned, f"{path.name} has no module-level __all__"
    module_name = "lightning_tf.core" if path.stem == "__init__" else f"lightning_tf.core.{path.stem}"
    module = importlib.import_module(module_name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == [], f"{path.name}: __all__ names {missing} that it does not define"


def test_core_reexports_every_module_public_name() -> None:
    exported = set(core.__all__)
    for path in CORE_FILES:
        if path.stem == "__init__":
            continue
        module = importlib.import_module(f"lightning_tf.core.{path.stem}")
        for name in module.__all__:
            assert name in exported, f"{path.stem}.{name} is not re-exported by lightning_tf.core"
            assert getattr(core, name) is getattr(module, name)
