"""The Marian benchmark still runs end to end (``--quick``) and its tables add up. No speed is asserted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_marian_benchmark_smoke(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    out = tmp_path / "marian.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/marian.py", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("machine: ")
    result = json.loads(out.read_text())
    by_setting = {r["setting"]: r for r in result["agreement"]}
    assert set(by_setting) == {"greedy", "beam 4, the same scoring", "beam 4, each side's default"}
    for r in by_setting.values():
        assert 0 <= r["same_ended"] <= r["ended"] <= r["sentences"] and r["same"] <= r["sentences"]
    # the equalities the unit tests prove hold here too: greedy everywhere, the same scoring where it can
    assert by_setting["greedy"]["same"] == by_setting["greedy"]["sentences"]
    same_scoring = by_setting["beam 4, the same scoring"]
    assert same_scoring["ended"] > 0 and same_scoring["same_ended"] == same_scoring["ended"]
    rows = re.findall(r"^\| (greedy|beam 4) \| (\d+) \| (\d+) \| (\d+) \| ([0-9.]+) \|$", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["greedy", "beam 4"]
    for r, saved in zip(rows, result["speed"], strict=True):
        assert float(r[4]) == pytest.approx(saved["ratio"], abs=0.006)
