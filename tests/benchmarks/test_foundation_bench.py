"""The published-models benchmark still runs end to end on tiny random models (``--quick``), in this process:
both sides forecast the same (its agreement column), its table and JSON say the same, and the zero-shot rows say
they are unmeasured without the weights. No speed is asserted."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _benchmark(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "foundation_benchmark_under_test", ROOT / "benchmarks" / "foundation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_foundation_benchmark_smoke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("kronos_finance")
    pytest.importorskip("chronos")
    bench = _benchmark(monkeypatch)
    threads = torch.get_num_threads()
    result = bench.main(
        [
            "--quick",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--out",
            str(tmp_path / "f.md"),
            "--json",
            str(tmp_path / "f.json"),
        ]
    )
    torch.set_num_threads(threads)
    assert capsys.readouterr().out.startswith("machine: ")
    assert json.loads((tmp_path / "f.json").read_text()) == json.loads(json.dumps(result))
    rows = result["rows"]
    assert [r["model"] for r in rows] == ["kronos-quick"] * 2 + ["chronos-bolt-quick"] * 2
    for r in rows:
        assert r["agree"] < 1e-5 and r["ours_s"] > 0 and r["reference_s"] > 0 and r["ours_cpu_s"] > 0
    text = (tmp_path / "f.md").read_text()
    table = re.findall(r"^\| (kronos-quick|chronos-bolt-quick) \| (\d+) \| (\d+) \|", text, re.M)
    assert [(m, int(b), int(c)) for m, b, c in table] == [(r["model"], r["batch"], r["context"]) for r in rows]
    assert "Unmeasured: it needs the published weights (`--weights DIR`)" in text
    assert result["quality"] == []


def test_foundation_benchmark_refuses_a_missing_weights_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    bench = _benchmark(monkeypatch)
    with pytest.raises(SystemExit):
        bench.main(["--weights", str(tmp_path / "none")])
    assert re.search(r"error: --weights .*none: no such folder", capsys.readouterr().err)
