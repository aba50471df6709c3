"""Scoring translations: target ids to text, what an evaluation epoch decodes (:class:`DecodedEpochs`),
corpus BLEU (Post 2018, sacreBLEU) and chrF (Popovic 2015) on detokenised text with their sacreBLEU
signatures, the test report's TER (Snover et al. 2006) and chrF++ (Popovic 2017, chrF with word bigrams),
and :func:`paired_bootstrap`: two systems' outputs on the same references compared by sacreBLEU's paired
bootstrap resampling (Koehn 2004), with p-values and 95% confidence intervals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from .tokenizer import BOS_ID, EOS_ID, PAD_ID, TextTokenizer

__all__ = ["DecodedEpochs", "SystemComparison", "corpus_scores", "paired_bootstrap", "target_texts", "report_scores"]

#: the metrics of :func:`report_scores` and :func:`paired_bootstrap`, by their log names
METRICS = ("bleu", "chrf", "chrfpp", "ter")


def target_texts(
    tokenizer: TextTokenizer | None, ids: Tensor, pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> list[str]:
    """Target ids ``(B, T)`` -> text, each row through its first EOS; without a tokenizer, the ids
    themselves (padding and the start token dropped) joined by spaces, so BLEU still measures id sequences."""
    if tokenizer is not None:
        return tokenizer.decode(ids, side="tgt")
    rows = []
    for row in ids.tolist():
        row = row[: row.index(eos_id)] if eos_id in row else row
        rows.append(" ".join(str(i) for i in row if i not in (pad_id, bos_id)))
    return rows


class DecodedEpochs:
    """Per stage, the hypotheses and references an evaluation epoch decodes, and the sentences its sample
    table is drawn from: ``(source ids + EOS, source text, reference)``."""

    def __init__(self) -> None:
        self.decoded: dict[str, tuple[list[str], list[str]]] = {}
        self.candidates: dict[str, list[tuple[list[int], str, str]]] = {}

    def add(self, stage: str, hyps: Sequence[str], refs: Sequence[str]) -> None:
        got_h, got_r = self.decoded.setdefault(stage, ([], []))
        got_h.extend(hyps)
        got_r.extend(refs)

    def add_candidates(self, stage: str, batch: dict[str, Any], pad_id: int, refs: Sequence[str]) -> None:
        """The batch's sentences: ids without padding, the source text (the ids, without one) and ``refs``."""
        rows = [row[row != pad_id].tolist() for row in batch["src"]]  # B x (S_b,): tokens + EOS
        srcs = batch["src_text"] if "src_text" in batch else [" ".join(map(str, r[:-1])) for r in rows]
        self.candidates.setdefault(stage, []).extend(zip(rows, srcs, refs, strict=True))

    def pop(self, stage: str) -> tuple[list[str], list[str], list[tuple[list[int], str, str]]]:
        """This process's hypotheses, references and candidates of ``stage``, forgotten here."""
        hyps, refs = self.decoded.pop(stage, ([], []))
        return hyps, refs, self.candidates.pop(stage, [])


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> tuple[Any, Any, dict[str, str]]:
    """Corpus BLEU and chrF of ``hyps`` against one reference each, and both sacreBLEU signatures."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(list(hyps), [list(refs)])
    chrf_score = chrf.corpus_score(list(hyps), [list(refs)])
    signature = {
        "sacrebleu_bleu_signature": str(bleu.get_signature()),
        "sacrebleu_chrf_signature": str(chrf.get_signature()),
    }
    return bleu_score, chrf_score, signature


def _metric(name: str) -> Any:
    from sacrebleu.metrics import BLEU, CHRF, TER

    if name == "bleu":
        return BLEU()
    if name == "chrf":
        return CHRF()
    if name == "chrfpp":
        return CHRF(word_order=2)  # chrF++
    if name == "ter":
        return TER()
    raise ValueError(f"unknown metric {name!r}; expected one of {list(METRICS)}")


def report_scores(hyps: Sequence[str], refs: Sequence[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Corpus BLEU, chrF, chrF++ and TER (lower is better) of ``hyps`` against one reference each, and
    their sacreBLEU signatures (``sacrebleu_<metric>_signature``)."""
    scores, signatures = {}, {}
    for name in METRICS:
        metric = _metric(name)
        scores[name] = float(metric.corpus_score(list(hyps), [list(refs)]).score)
        signatures[f"sacrebleu_{name}_signature"] = str(metric.get_signature())
    return scores, signatures


@dataclass(frozen=True)
class SystemComparison:
    """One metric of :func:`paired_bootstrap`.

    Args:
        metric: ``bleu``, ``chrf``, ``chrfpp`` or ``ter`` (lower is better).
        baseline: the baseline's corpus score.
        system: the other system's corpus score.
        baseline_mean: the baseline's mean over the bootstrap samples.
        baseline_ci: half-width of the baseline's 95% confidence interval.
        system_mean: the system's mean over the bootstrap samples.
        system_ci: half-width of the system's 95% confidence interval.
        p_value: the paired bootstrap p-value of the difference (sacreBLEU's ``paired_bs``).
        signature: sacreBLEU's signature of the test.
    """

    metric: str
    baseline: float
    system: float
    baseline_mean: float
    baseline_ci: float
    system_mean: float
    system_ci: float
    p_value: float
    signature: str

    @property
    def delta(self) -> float:
        """``system - baseline`` (negative is better for TER)."""
        return self.system - self.baseline

    def significant(self, alpha: float = 0.05) -> bool:
        """Whether the difference is significant at level ``alpha``."""
        return self.p_value < alpha


def paired_bootstrap(
    references: Sequence[str],
    baseline: Sequence[str],
    system: Sequence[str],
    metrics: Sequence[str] = ("bleu", "chrf", "ter"),
    n_samples: int = 1000,
    seed: int = 12345,
) -> list[SystemComparison]:
    """Compare ``system`` with ``baseline`` on the same ``references`` (one line each, aligned) by
    sacreBLEU's paired bootstrap resampling (``PairedTest(test_type="bs")``, its public API).

    Args:
        references: the reference translations.
        baseline: the baseline system's translations.
        system: the other system's translations.
        metrics: among ``bleu``, ``chrf``, ``chrfpp``, ``ter``.
        n_samples: bootstrap resamples.
        seed: the resampling seed (sacreBLEU's ``SACREBLEU_SEED``), for repeatable p-values.

    Returns:
        One :class:`SystemComparison` per metric, in the order given.

    Raises:
        ValueError: files of different lengths, no sentences, an unknown metric.
    """
    import os

    from sacrebleu.significance import PairedTest

    refs, base, other = list(references), list(baseline), list(system)
    if not refs:
        raise ValueError("no reference sentences to compare on")
    if not len(refs) == len(base) == len(other):
        raise ValueError(
            f"references, baseline and system must have as many lines: {len(refs)}, {len(base)} and {len(other)}"
        )
    if n_samples < 1:
        raise ValueError(f"n_samples must be at least 1, got {n_samples}")
    built = {name: _metric(name) for name in metrics}
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)  # PairedTest reads its seed from the environment
    try:
        test = PairedTest([("baseline", base), ("system", other)], built, [refs], test_type="bs", n_samples=n_samples)
        signatures, scores = test()
    finally:
        if previous is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = previous
    out = []
    # PairedTest names each metric by its score's name (BLEU, chrF2, chrF2++, TER), in the order given
    for name, key in zip(metrics, [k for k in scores if k != "System"], strict=True):
        b, s = scores[key]
        out.append(
            SystemComparison(
                metric=name,
                baseline=float(b.score),
                system=float(s.score),
                baseline_mean=float(b.mean),
                baseline_ci=float(b.ci),
                system_mean=float(s.mean),
                system_ci=float(s.ci),
                p_value=float(s.p_value),
                signature=str(signatures[key]),
            )
        )
    return out
