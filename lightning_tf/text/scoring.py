"""Scoring translations: target ids to text, what an evaluation epoch decodes (:class:`DecodedEpochs`), and
corpus BLEU (Post 2018, sacreBLEU) and chrF (Popovic 2015) on detokenised text with their sacreBLEU
signatures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from .tokenizer import BOS_ID, EOS_ID, PAD_ID, TextTokenizer

__all__ = ["DecodedEpochs", "corpus_scores", "target_texts"]


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
