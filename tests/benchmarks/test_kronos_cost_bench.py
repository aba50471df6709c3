"""The Kronos cost benchmark still runs end to end on a tiny model (``--quick``), in this process: its rows, its
projections for the universe (origins over the measured rate) and its JSON agree with its table. No speed is
asserted."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_kronos_cost_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("kronos_cost_under_test", ROOT / "benchmarks" / "kronos_cost.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    out, js = tmp_path / "cost.md", tmp_path / "cost.json"
    args = ["--quick", "--batch", "4", "--tune_batch", "2", "--repeats", "1", "--out", str(out), "--json", str(js)]
    result = module.main(args)
    torch.set_num_threads(threads)
    assert json.loads(js.read_text()) == json.loads(json.dumps(result))
    rows = result["forecast"]
    assert [(r["context"], r["samples"]) for r in rows] == [(59, 1), (59, 5), (64, 1), (16, 1)]
    for r in rows:
        assert r["universe_hours"] == pytest.approx(module.UNIVERSE_ORIGINS / r["origins_per_s"] / 3600)
        assert r["origins_per_s"] == pytest.approx(4 / r["seconds"])
    text = out.read_text()
    table = re.findall(r"^\| (\d+) \| (\d+) \| ", text, re.M)
    assert [(int(c), int(s)) for c, s in table] == [(r["context"], r["samples"]) for r in rows]
    assert result["finetune"]["window"] == 65 and result["finetune"]["seconds"] > 0
