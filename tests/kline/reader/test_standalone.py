"""The bar-file reader stands on its own: no module of ``lightning_tf.kline.reader`` imports torch,
Lightning or torchmetrics (anywhere, functions included), and reading a file in a fresh interpreter loads
none of them, although the package above it holds the LightningModule."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
READER = ROOT / "lightning_tf" / "kline" / "reader"
HEAVY = ("torch", "lightning", "torchmetrics", "pytorch_lightning")


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_reader_module_imports_torch_or_lightning() -> None:
    files = sorted(READER.glob("*.py"))
    assert len(files) >= 6
    for f in files:
        assert not _imported(f) & set(HEAVY), f"{f.name} imports {sorted(_imported(f) & set(HEAVY))}"
    assert _imported(ROOT / "lightning_tf" / "kline" / "module.py") & set(HEAVY)  # the check sees imports


def test_reading_bars_loads_no_torch_and_no_lightning() -> None:
    code = (
        "import sys; from lightning_tf.kline.reader import read_bars; "
        f"f = read_bars({str(ROOT / 'data' / 'msft.csv')!r}); "
        f"print(len(f), sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rows, loaded = out.stdout.split(" ", 1)
    assert int(rows) > 7000 and loaded.strip() == "[]"
