"""The corpus benchmark runs end to end on a tiny generated corpus (``--in-process``: the phases in the test's
process, the two ranks forked), and its tables say what the phases measured: every bar of the files is kept,
cut or dropped, the files left out are counted by reason, the panel holds the bars kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.kline import make_bars

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A corpus laid out as the Kaggle one: Data/Stocks and Data/ETFs of ``<ticker>.us.txt`` files."""
    data = tmp_path / "Data"
    for folder, n in (("Stocks", 6), ("ETFs", 3)):
        (data / folder).mkdir(parents=True)
        for k in range(n):
            bars = make_bars(400, seed=k, start="2007-01-02")
            bars.assign(Date=bars["Date"].dt.strftime("%Y-%m-%d"), OpenInt=0).to_csv(
                data / folder / f"{folder[0].lower()}{k}.us.txt", index=False
            )
    (data / "Stocks" / "empty.us.txt").write_bytes(b"")
    make_bars(50, seed=9, start="2008-07-01").to_csv(data / "ETFs" / "later.us.txt", index=False)
    return data


def test_corpus_benchmark_smoke(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import corpus as bench  # benchmarks/corpus.py

    out = tmp_path / "results" / "corpus"
    argv = ["--corpus", str(corpus), "--cut", "2008-06-24", "--fractions", "0.5", "1", "--workers", "0"]
    results = bench.main([*argv, "--work", str(tmp_path / "work"), "--out", str(out), "--in-process"])
    assert json.loads(out.with_suffix(".json").read_text()) == json.loads(json.dumps(results))
    text = out.with_suffix(".md").read_text()
    assert text.startswith("# The pretraining corpus at full size") and "Load average at the start" in text
    assert "| files | MB | bars in files | cut | read_workers | seconds |" in text
    assert "In-process smoke run" in text
    reads = results["read"]
    assert [(r["fraction"], r["cut"]) for r in reads] == [(0.5, "2008-06-24"), (1.0, "2008-06-24"), (1.0, None)]
    whole = reads[1]
    assert whole["files"] == 11 and whole["bars_in_files"] == 9 * 400 + 50
    assert whole["left_out"] == {"empty": 1, "with no bar before the cut": 1}
    # 2008-06-24 is the 386th business day from 2007-01-02: 15 of each file's 400 bars are cut, and all of one
    assert whole["cut_bars"] == 9 * 15 + 50 and whole["bars"] == 9 * 385 and whole["tickers"] == 9
    assert reads[2]["bars"] == whole["bars_in_files"] and reads[2]["cut_bars"] == 0
    assert reads[0]["files"] == 6 and reads[0]["bars"] < whole["bars"]  # every 2nd file
    prepared = results["prepare"][-1]
    assert prepared["panel_rows"] == whole["bars"] and prepared["tickers"] == 9
    assert prepared["windows"]["test"] == 0 < prepared["windows"]["val"] < prepared["windows"]["train"]
    assert prepared["panel_mb"] > 0 and prepared["seconds"] >= sum(prepared["phase_seconds"].values()) - 1e-6
    assert [len(row["ranks"]) for row in results["share"]] == [1, 2]
    assert all(rank["pss_mb"] > 0 for row in results["share"] for rank in row["ranks"])
