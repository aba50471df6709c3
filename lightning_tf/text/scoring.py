"""Scoring translations: target ids to text, and corpus BLEU (Post 2018, sacreBLEU) and chrF (Popovic
2015) on detokenised text with their sacreBLEU signatures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from .tokenizer import BOS_ID, EOS_ID, PAD_ID, BPETokenizer

__all__ = ["corpus_scores", "target_texts"]


def target_texts(tokenizer: BPETokenizer | None, ids: Tensor) -> list[str]:
    """Target ids ``(B, T)`` -> text, each row through its first EOS; without a tokenizer, the ids
    themselves joined by spaces (so BLEU still measures id sequences)."""
    if tokenizer is not None:
        return tokenizer.decode(ids, side="tgt")
    rows = []
    for row in ids.tolist():
        row = row[: row.index(EOS_ID)] if EOS_ID in row else row
        rows.append(" ".join(str(i) for i in row if i not in (PAD_ID, BOS_ID)))
    return rows


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
