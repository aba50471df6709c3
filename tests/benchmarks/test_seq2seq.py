"""The seq2seq benchmark still runs: it checks parameter counts of the two training models and that
cached and uncached decoding agree (the script aborts otherwise), and prints its tables. No speed is
asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_seq2seq_benchmark_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/seq2seq.py",
            "--quick",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--json",
            str(tmp_path / "out.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "| model | batch (B x S x T) | params | ours tok/s | torch tok/s | ours/torch | ours/torch (fastest) |"
        in proc.stdout
    )
    assert "| search | output tokens | cached s | uncached s | speed-up |" in proc.stdout
    out = json.loads((tmp_path / "out.json").read_text())
    assert len(out["train"]) == 1 and out["train"][0]["ours_tok_s"] > 0
    assert [(r["search"], r["out_len"]) for r in out["decode"]] == [
        ("greedy", 8),
        ("greedy", 16),
        ("beam4", 8),
        ("beam4", 16),
    ]
