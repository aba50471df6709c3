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
    assert result["quality"] == [] and result["forecaster"] == {}
    assert "## Chronos-Bolt through the K-line forecaster\n\nUnmeasured" in text


def test_chronos_bolt_through_the_forecaster_on_etth1_smoke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``--quick --etth1``: the forecaster started from tiny random Chronos-Bolt weights scores ETTh1's first test
    windows; the row's numbers are the forecaster's own on those windows."""
    pytest.importorskip("chronos")
    from tests.helpers.kline import write_etth1

    bench = _benchmark(monkeypatch)
    etth1 = write_etth1(tmp_path)
    threads = torch.get_num_threads()
    args = ["--quick", "--models", "chronos-bolt-small", "--repeats", "1", "--threads", "1", "--etth1", str(etth1)]
    result = bench.main([*args, "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "f.md")])
    torch.set_num_threads(threads)
    row = result["forecaster"]["chronos-bolt-quick"]["etth1"]
    assert (row["context"], row["horizon"], row["windows"]) == (64, 16, 256)
    assert 0 < row["mae"] ** 2 <= row["mse"]  # Jensen: the mean square is at least the squared mean
    text = (tmp_path / "f.md").read_text()
    assert f"| chronos-bolt-quick, zero-shot | {row['mse']:.4f} | {row['mae']:.4f} |" in text
    assert "A smoke run: tiny random weights" in text


@pytest.mark.integration
def test_chronos_bolt_walkforward_rows_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--quick --walkforward``: Chronos-Bolt zero-shot and fine-tuned walk-forwards on a generated universe, each a
    ``lightning-tf walkforward`` process, pooled beside LightGBM and the linear path of the same folds, and Kronos
    zero-shot from the raw bars in the zero-shot one."""
    pytest.importorskip("chronos")
    pytest.importorskip("lightgbm")
    from tests.helpers.universe import write_universe

    bench = _benchmark(monkeypatch)
    universe = tmp_path / "universe.csv"
    write_universe(universe, n_tickers=12, n_days=700, start="2009-01-02")
    threads = torch.get_num_threads()
    args = ["--quick", "--models", "kronos-small", "chronos-bolt-small", "--repeats", "1", "--threads", "1"]
    args.append("--walkforward")
    result = bench.main(
        [*args, "--universe", str(universe), "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "f.md")]
    )
    torch.set_num_threads(threads)
    found = result["forecaster"]["chronos-bolt-quick"]["universe"]
    assert set(found["pooled"]) == {
        "Chronos-Bolt, zero-shot",
        "Chronos-Bolt, fine-tuned (chronos_bolt.yaml)",
        "Kronos, zero-shot (from the raw bars)",
        "Kronos, fine-tuned (from the raw bars)",
        "LightGBM",
        "linear path",
    }
    assert all(-1 < s["rank_ic_mean"] < 1 for s in found["pooled"].values())
    for row in ("zero_shot", "fine_tuned"):
        assert (Path(found["runs"][row]["out"]) / "report.md").exists()
    # zero-shot trains nothing of the forecaster's; the fine-tuned Kronos keeps each fold's weights
    trained = sorted(
        p.relative_to(tmp_path / "w" / "walkforward" / "zero_shot").as_posix()
        for p in (tmp_path / "w" / "walkforward" / "zero_shot").rglob("*.ckpt")
    )
    assert trained == ["fold_1/kronos/kronos.ckpt", "fold_2/kronos/kronos.ckpt"]


def test_foundation_benchmark_refuses_a_missing_weights_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    bench = _benchmark(monkeypatch)
    with pytest.raises(SystemExit):
        bench.main(["--weights", str(tmp_path / "none")])
    assert re.search(r"error: --weights .*none: no such folder", capsys.readouterr().err)
