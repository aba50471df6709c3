"""The device benchmark runner (benchmarks/gpu.py) on the CPU: it runs a per-topic benchmark at its smoke size
and writes the page with the machine and that benchmark's table; a benchmark that runs past its limit is
stopped, its whole process group with it, and the page says so with what it printed. No speed is asserted."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

# subprocesses: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu.py"


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_runner_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_the_runner_writes_the_page_of_a_cpu_run(tmp_path: Path) -> None:
    out = tmp_path / "gpu.md"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--only", "layers", "--limit-s", "50"]
    proc = subprocess.run([*command, "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    page = out.read_text()
    assert page.startswith("# lightning-tf on the CPU (quick smoke sizes)\n")
    assert f"- torch {torch.__version__}," in page and "at most 50 s" in page
    assert "## layers\n" in page and "--device cpu --quick --layers encoder --modes train`: ok," in page
    rows = [ln for ln in page.splitlines() if ln.startswith("| encoder |")]
    assert [r.split(" | ")[2] for r in rows] == ["train", "train"], rows  # the two quick shapes, train only
    assert "## vit" not in page and "```" not in page  # only what was asked; no failure tail


def test_a_benchmark_past_its_limit_is_stopped_with_what_it_printed(tmp_path: Path) -> None:
    runner = _runner()
    marker = tmp_path / "grandchild-alive"
    # a child that prints a table, starts a grandchild and sleeps: both must die at the limit
    grandchild = f"import time; time.sleep(3); open({str(marker)!r}, 'w')"
    code = (
        "import subprocess, sys, time\n"
        "print('#### partial'); print('| a | b |'); print('|---|---|'); print('| 1 | 2 |', flush=True)\n"
        f"subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
        "time.sleep(30)\n"
    )
    outcome = runner.run_limited([sys.executable, "-c", code], limit_s=1.5)
    assert outcome.status == "stopped at the 1.5 s limit" and outcome.seconds < 10
    section = "\n".join(runner.section("slow", [sys.executable, "slow.py"], outcome))
    assert "`python slow.py`: stopped at the 1.5 s limit" in section
    assert "partial\n\n| a | b |\n|---|---|\n| 1 | 2 |" in section and "```" in section
    failed = runner.run_limited([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"], 30)
    assert failed.status == "failed (exit 3)" and "boom" in "\n".join(runner.section("x", ["p", "x.py"], failed))
    time.sleep(2.5)
    assert not marker.exists()  # the grandchild went with its group


def test_the_page_keeps_each_table_with_its_title_and_not_the_progress_lines() -> None:
    printed = (
        "machine: cpu\n  encoder train: ours 1 ms\n\n| a |\n|---|\n| 1 |\nnote\n"
        "#### Decoding\n\n| b |\n|---|\n(b) windows/s:\n| c |\n|---|\n"
    )
    assert _runner().tables(printed) == ["", "| a |", "|---|", "| 1 |"] + [
        "",
        "Decoding",
        "",
        "| b |",
        "|---|",
        "",
        "(b) windows/s:",
        "",
        "| c |",
        "|---|",
    ]
