"""The test report's chrF++ and TER, and the paired bootstrap comparison of two systems (Python and CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU, CHRF, TER

from lightning_tf.__main__ import main
from lightning_tf.text import paired_bootstrap, report_scores

REFS = [
    "the cat sat on the mat",
    "a dog runs fast in the park",
    "hello world once again",
    "it is raining today in the city",
    "we will meet tomorrow at noon",
    "the train leaves at seven",
    "she reads a book every night",
    "my brother plays the guitar",
] * 3
GOOD = list(REFS)
GOOD[1] = "a dog runs quickly in the park"
BAD = [" ".join(r.split()[:-2]) for r in REFS]  # every sentence loses its last two words


def test_test_scores_are_sacrebleus() -> None:
    scores, signatures = report_scores(BAD, REFS)
    assert scores["bleu"] == pytest.approx(BLEU().corpus_score(BAD, [REFS]).score)
    assert scores["chrf"] == pytest.approx(CHRF().corpus_score(BAD, [REFS]).score)
    assert scores["chrfpp"] == pytest.approx(CHRF(word_order=2).corpus_score(BAD, [REFS]).score)
    assert scores["ter"] == pytest.approx(TER().corpus_score(BAD, [REFS]).score)
    assert scores["chrfpp"] != scores["chrf"] and scores["ter"] > 20
    assert "nw:2" in signatures["sacrebleu_chrfpp_signature"]
    assert signatures["sacrebleu_ter_signature"].startswith("nrefs:1|case:lc|tok:tercom")


def test_a_clearly_better_system_is_significant_and_the_scores_are_the_corpus_scores() -> None:
    rows = {r.metric: r for r in paired_bootstrap(REFS, BAD, GOOD, metrics=("bleu", "chrf", "ter"), n_samples=300)}
    assert list(rows) == ["bleu", "chrf", "ter"]
    assert rows["bleu"].baseline == pytest.approx(BLEU().corpus_score(BAD, [REFS]).score)
    assert rows["bleu"].system == pytest.approx(BLEU().corpus_score(GOOD, [REFS]).score)
    assert rows["ter"].delta < 0 < rows["bleu"].delta  # TER: lower is better
    for r in rows.values():
        assert r.significant() and 0 < r.p_value < 0.05
        assert r.baseline_ci > 0 and abs(r.baseline_mean - r.baseline) < 3 * r.baseline_ci
        assert "bs:300" in r.signature
    # the same seed gives the same p-values and intervals
    again = {r.metric: r for r in paired_bootstrap(REFS, BAD, GOOD, metrics=("bleu", "chrf", "ter"), n_samples=300)}
    assert again == rows


def test_a_small_difference_is_not_significant() -> None:
    """Two systems apart by one word of one sentence in three repeats. (Two identical systems are sacreBLEU's
    degenerate case: every resampled difference ties the observed 0, and it reports the smallest p-value.)"""
    other = list(REFS)
    other[3] = "it is raining today in a city"
    (row,) = paired_bootstrap(REFS, GOOD, other, metrics=("chrf",), n_samples=200)
    assert abs(row.delta) < 1 and not row.significant() and row.p_value > 0.2


def test_bad_inputs_are_one_line() -> None:
    with pytest.raises(ValueError, match=r"as many lines: 24, 24 and 23"):
        paired_bootstrap(REFS, BAD, GOOD[:-1])
    with pytest.raises(ValueError, match=r"unknown metric 'meteor'"):
        paired_bootstrap(REFS, BAD, GOOD, metrics=("meteor",))


def test_compare_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, lines in (("ref.txt", REFS), ("a.txt", BAD), ("b.txt", GOOD)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    main(["compare", "--references", str(tmp_path / "ref.txt"), str(tmp_path / "a.txt"), str(tmp_path / "b.txt"),
          "--metrics", "bleu", "chrfpp", "--n_samples", "200"])  # fmt: off
    out = capsys.readouterr().out
    (bleu,) = paired_bootstrap(REFS, BAD, GOOD, metrics=("bleu",), n_samples=200)
    line = next(row for row in out.splitlines() if row.startswith("bleu"))
    assert f"{bleu.baseline:.2f}" in line and f"{bleu.system:.2f}" in line and f"{bleu.p_value:.4f} *" in line
    assert any(row.startswith("chrfpp") for row in out.splitlines())
    with pytest.raises(SystemExit):
        main(
            ["compare", "--references", str(tmp_path / "missing.txt"), str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
        )
    assert "references file" in capsys.readouterr().err
