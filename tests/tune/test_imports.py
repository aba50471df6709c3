"""Optuna stays out of the task packages: only the modules of ``lightning_tf.tune`` that run studies import it,
no other module of the package imports them, and (integration) importing the CLI and every task package in a
fresh interpreter leaves ``optuna`` out of ``sys.modules``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import ROOT

PACKAGE = ROOT / "lightning_tf"
#: the modules that run studies or trials: the only ones that may import Optuna at module level
OPTUNA_MODULES = {"space", "study", "trials", "report", "reporter"}


def _module_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            prefix = "." * node.level + (node.module or "")
            names.add(prefix)
            names.update(f"{prefix}.{a.name}" if node.module else f"{prefix}{a.name}" for a in node.names)
    return names


def test_only_the_study_modules_import_optuna_and_nothing_outside_imports_them() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    importers, outside = [], []
    for path in files:
        imports = _module_level_imports(path)
        in_tune = path.parent.name == "tune"
        if any(n.split(".")[0] in ("optuna", "optuna_integration") for n in imports):
            importers.append(path.stem if in_tune else str(path.relative_to(ROOT)))
        if not in_tune and any(n.startswith("lightning_tf.tune") for n in imports):
            outside.append(str(path.relative_to(ROOT)))
    assert set(importers) <= OPTUNA_MODULES, importers
    assert {"trials", "reporter"} <= set(importers)  # the check looks where Optuna really is imported
    assert outside == []
    # the command's module (what `lightning-tf tune --help` loads) and the package need no Optuna
    for name in ("__init__", "command"):
        imports = _module_level_imports(PACKAGE / "tune" / f"{name}.py")
        assert not any(n.lstrip(".").split(".")[0] in OPTUNA_MODULES for n in imports), imports


@pytest.mark.integration
def test_importing_the_cli_and_the_tasks_leaves_optuna_out() -> None:
    code = (
        "import json, sys\n"
        "import lightning_tf.cli.lightning_cli, lightning_tf.text, lightning_tf.vision, lightning_tf.kline, lightning_tf.tune\n"
        "print(json.dumps({'tasks': 'lightning_tf.kline' in sys.modules,"
        " 'optuna': sorted(m for m in sys.modules if m.split('.')[0] in ('optuna', 'optuna_integration'))}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"tasks": True, "optuna": []}
