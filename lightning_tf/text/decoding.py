"""Batched greedy and beam search for encoder-decoder models, on the core's KV cache.

Beam search follows fairseq's ``SequenceGenerator`` (Ott et al. 2019): every step scores all
``K x V`` extensions of the ``K`` live hypotheses of a sentence, takes the best ``2K``; an EOS among
the best ``K`` candidates finishes a hypothesis, the best ``K`` non-EOS candidates stay alive, and a
sentence is done once it has ``K`` finished hypotheses (or reached its length limit). Finished
hypotheses are ranked by the length-normalised score of GNMT (Wu et al. 2016, eq. 14)::

    score(Y) = log P(Y | X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6) ** alpha

where ``|Y|`` counts the generated tokens including the final EOS. With ``beam_size=1`` the search
is exactly greedy decoding, whatever ``alpha``.

Both searches never emit PAD or BOS, optionally block repeated n-grams (Paulus et al. 2018), and
force EOS at each sentence's length limit. With ``use_cache=False`` every step recomputes the whole
prefix: the reference the cached path is tested against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from lightning_tf.core import DecoderCache

__all__ = [
    "EncoderDecoder",
    "beam_search",
    "block_repeated_ngrams",
    "decode_by_length",
    "greedy_search",
    "length_penalty",
]


class EncoderDecoder(Protocol):
    """What the searches need from a model (implemented by :class:`~lightning_tf.text.Seq2SeqTransformer`)."""

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Source ids ``(B, S)`` -> memory ``(B, S, D)`` and its key mask ``(B, 1, 1, S)``."""
        ...

    def decode_step(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """Target ids ``(B, T)`` (only the new ones with a cache) -> next-token logits ``(B, V)`` of the
        last position."""
        ...

    def init_cache(self, capacity: int) -> DecoderCache:
        """An empty decoder cache for ``capacity`` target positions."""
        ...


def length_penalty(length: Tensor | float, alpha: float) -> Tensor:
    """GNMT's length penalty ``((5 + length) / 6) ** alpha``; a finished hypothesis scores
    ``log P / length_penalty(length, alpha)``."""
    return ((5.0 + torch.as_tensor(length, dtype=torch.float32)) / 6.0) ** alpha


def block_repeated_ngrams(scores: Tensor, prefix: Tensor, n: int) -> Tensor:
    """Set to -inf the score of every token that would repeat an n-gram already in ``prefix``.

    Args:
        scores: next-token scores ``(R, V)``.
        prefix: tokens generated so far ``(R, t)``.
        n: n-gram size; ``n <= 0`` disables blocking.

    Returns:
        The masked scores ``(R, V)`` (a new tensor).
    """
    t = prefix.shape[1]
    if n <= 0 or t < n:
        return scores
    windows = prefix.unfold(1, n, 1)  # (R, t - n + 1, n)
    context = prefix[:, t - n + 1 :].unsqueeze(1)  # (R, 1, n - 1): the n-gram the next token would complete
    match = (windows[:, :, : n - 1] == context).all(dim=2)  # (R, t - n + 1)
    # scatter_add, not scatter: a token banned by one window must stay banned if another window also names it
    banned = torch.zeros_like(scores, dtype=torch.int32).scatter_add_(1, windows[:, :, -1], match.int()) > 0  # (R, V)
    return scores.masked_fill(banned, float("-inf"))


def _restrict(
    scores: Tensor, prefix: Tensor, at_limit: Tensor, pad_id: int, bos_id: int, eos_id: int, no_repeat_ngram_size: int
) -> Tensor:
    """Mask PAD and BOS, repeated n-grams, and everything but EOS in rows at their length limit."""
    scores = scores.clone()
    scores[:, [pad_id, bos_id]] = float("-inf")
    scores = block_repeated_ngrams(scores, prefix, no_repeat_ngram_size)
    if bool(at_limit.any()):
        eos = scores[:, eos_id].clone()
        scores[at_limit] = float("-inf")
        scores[:, eos_id] = eos
    return scores


def _check_limits(src: Tensor, max_new_tokens: Tensor | int) -> Tensor:
    limit = torch.as_tensor(max_new_tokens, device=src.device).expand(src.shape[0]).long()  # (B,)
    if bool((limit < 1).any()):
        raise ValueError(f"max_new_tokens must be at least 1 for every sentence, got {limit.tolist()}")
    return limit


@torch.no_grad()
def greedy_search(
    model: EncoderDecoder,
    src: Tensor,
    max_new_tokens: Tensor | int,
    *,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    no_repeat_ngram_size: int = 0,
    use_cache: bool = True,
) -> Tensor:
    """Pick the most likely next token until EOS.

    Args:
        model: the encoder-decoder.
        src: source ids ``(B, S)``, right-padded with ``pad_id``.
        max_new_tokens: per-sentence limit ``(B,)`` (or one int) on generated tokens, EOS included;
            a sentence that reaches it ends with a forced EOS.
        pad_id: padding id (never generated; fills the rows after their EOS).
        bos_id: start id fed first (never generated).
        eos_id: end id.
        no_repeat_ngram_size: forbid repeating any n-gram of this size (0: off).
        use_cache: decode on the KV cache (False: recompute the whole prefix every step).

    Returns:
        Generated ids ``(B, T)``: each row ends with EOS, then PAD.
    """
    B = src.shape[0]
    limit = _check_limits(src, max_new_tokens)  # (B,)
    memory, src_mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
    cache = model.init_cache(int(limit.max())) if use_cache else None
    tokens = src.new_full((B, 1), bos_id)  # (B, 1 + t)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for step in range(int(limit.max())):
        logits = model.decode_step(tokens[:, -1:] if use_cache else tokens, memory, src_mask, cache)  # (B, V)
        logits = _restrict(
            logits.float(), tokens[:, 1:], step + 1 >= limit, pad_id, bos_id, eos_id, no_repeat_ngram_size
        )
        nxt = logits.argmax(-1).masked_fill(done, pad_id)  # (B,)
        tokens = torch.cat((tokens, nxt[:, None]), dim=1)  # (B, 2 + t)
        done |= nxt == eos_id
        if bool(done.all()):
            break
    return tokens[:, 1:]  # (B, T)


@torch.no_grad()
def beam_search(
    model: EncoderDecoder,
    src: Tensor,
    max_new_tokens: Tensor | int,
    *,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    no_repeat_ngram_size: int = 0,
    use_cache: bool = True,
) -> tuple[Tensor, Tensor]:
    """Beam search with GNMT length normalisation (see the module docstring).

    Args:
        model: the encoder-decoder.
        src: source ids ``(B, S)``, right-padded with ``pad_id``.
        max_new_tokens: per-sentence limit ``(B,)`` (or one int) on generated tokens, EOS included.
        pad_id: padding id (never generated).
        bos_id: start id (never generated).
        eos_id: end id.
        beam_size: hypotheses kept per sentence K.
        alpha: length-penalty exponent (0: rank by raw log-probability; larger favours longer output).
        no_repeat_ngram_size: forbid repeating any n-gram of this size (0: off).
        use_cache: decode on the KV cache, reordered as beams are selected (False: recompute).

    Returns:
        The best hypothesis per sentence ``(B, T)`` (ending with EOS, then PAD) and its normalised
        score ``(B,)``.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    B, K, dev = src.shape[0], beam_size, src.device
    limit = _check_limits(src, max_new_tokens)  # (B,)
    T_max = int(limit.max())
    memory, src_mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
    memory = memory.repeat_interleave(K, dim=0)  # (B*K, S, D)
    src_mask = src_mask.repeat_interleave(K, dim=0)  # (B*K, 1, 1, S)
    cache = model.init_cache(T_max) if use_cache else None

    tokens = src.new_full((B * K, 1), bos_id)  # (B*K, 1 + t)
    scores = torch.zeros(B, K, device=dev)  # cumulative log-probabilities of the live hypotheses
    scores[:, 1:] = float("-inf")  # all beams start identical: keep one
    fin_tokens = src.new_full((B, K, T_max), pad_id)  # finished hypotheses
    fin_scores = torch.full((B, K), float("-inf"), device=dev)  # their normalised scores
    fin_count = torch.zeros(B, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    rows = torch.arange(B, device=dev)

    for step in range(T_max):
        logits = model.decode_step(tokens[:, -1:] if use_cache else tokens, memory, src_mask, cache)  # (B*K, V)
        V = logits.shape[-1]
        at_limit = (step + 1 >= limit).repeat_interleave(K)  # (B*K,)
        lprobs = _restrict(
            logits.float().log_softmax(-1), tokens[:, 1:], at_limit, pad_id, bos_id, eos_id, no_repeat_ngram_size
        )  # (B*K, V)
        cand = (scores.view(B * K, 1) + lprobs).view(B, K * V)  # (B, K*V)
        top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=1)  # (B, 2K)
        top_beam, top_tok = top_idx // V, top_idx % V  # (B, 2K) each
        is_eos = (top_tok == eos_id) & torch.isfinite(top_scores)  # (B, 2K)

        # an EOS among the best K candidates finishes its hypothesis
        new_fin = is_eos[:, :K] & ~done[:, None]  # (B, K)
        slot = fin_count[:, None] + new_fin.long().cumsum(1) - 1  # (B, K)
        new_fin &= slot < K
        if bool(new_fin.any()):
            b, c = new_fin.nonzero(as_tuple=True)  # (n,) each
            s = slot[b, c]
            fin_tokens[b, s, :step] = tokens[b * K + top_beam[b, c], 1:]
            fin_tokens[b, s, step] = eos_id
            fin_scores[b, s] = top_scores[b, c] / length_penalty(step + 1, alpha)
            fin_count += new_fin.sum(1)
        done |= (fin_count >= K) | (step + 1 >= limit)
        if bool(done.all()):
            break

        # the best K candidates that are not EOS stay alive (at most K of the 2K are EOS)
        rank = torch.arange(top_idx.shape[1], device=dev).expand(B, -1) + is_eos * top_idx.shape[1]  # (B, 2K)
        keep = rank.topk(K, dim=1, largest=False).indices.sort(dim=1).values  # (B, K)
        scores = top_scores.gather(1, keep)  # (B, K)
        origin = (rows[:, None] * K + top_beam.gather(1, keep)).view(-1)  # (B*K,)
        tokens = torch.cat((tokens[origin], top_tok.gather(1, keep).view(-1, 1)), dim=1)  # (B*K, 2 + t)
        if cache is not None:
            cache.reorder(origin)

    # a sentence stopped by its limit before any EOS (only with K > V) keeps its best live hypothesis
    empty = fin_count == 0
    if bool(empty.any()):
        live = tokens.view(B, K, -1)[:, 0, 1:]  # (B, t)
        fin_tokens[empty, 0, : live.shape[1]] = live[empty]
        fin_scores[empty, 0] = scores[empty, 0] / length_penalty(live.shape[1], alpha)
    best = fin_scores.argmax(dim=1)  # (B,)
    out = fin_tokens[rows, best]  # (B, T_max)
    width = int((out != pad_id).sum(1).max())
    return out[:, :width], fin_scores[rows, best]


def decode_by_length(ids: Tensor, pad_id: int, batch_size: int, decode: Callable[[Tensor], list[str]]) -> list[str]:
    """Decode the rows of ``ids (N, S)`` in batches of up to ``batch_size`` rows of similar length (sorted by
    length, each batch cut to its longest row, so little padding is decoded); one output per row, in row order.

    Args:
        ids: source ids, right-padded with ``pad_id``.
        pad_id: the padding id.
        batch_size: rows decoded together.
        decode: source ids ``(b, S_b)`` -> one output per row.
    """
    lengths = (ids != pad_id).sum(1).tolist()
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out: list[str] = [""] * len(lengths)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        for i, text in zip(chunk, decode(ids[chunk, : max(lengths[i] for i in chunk)]), strict=True):  # (b, S_b)
            out[i] = text
    return out
