"""The start-up benchmark still runs end to end (``--quick``: one repeat of every command). No time
is asserted here; the printed ratios must be the ratios of the printed times."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_startup_benchmark_smoke(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "startup.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/startup.py", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("machine: ")
    rows = re.findall(r"^\| `([^`]+)` \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$", proc.stdout, re.M)
    names = [row[0] for row in rows]
    assert names[0] == 'python -c "import lightning"' and len(names) == 6, proc.stdout
    assert {"lightning-tf --help", "lightning-tf export --help", "lightning-tf fit --help"} <= set(names)
    base = float(rows[0][1])
    assert float(rows[0][3]) == 1.0
    for _, median, fastest, ratio, _ in rows:
        assert float(fastest) <= float(median)
        assert float(ratio) == pytest.approx(float(median) / base, abs=0.011)
    assert out.is_file()
