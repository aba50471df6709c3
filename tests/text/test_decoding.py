"""Greedy and beam search: cached == uncached, beam 1 == greedy, the length penalty's ranking,
n-gram blocking, never PAD/BOS, the length limit."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from lightning_tf.core import DecoderCache
from lightning_tf.text import Seq2SeqTransformer, beam_search, block_repeated_ngrams, greedy_search, length_penalty
from lightning_tf.text.decoding import decode_by_length
from lightning_tf.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tests.helpers.text import pad_rows

IDS = dict(pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID)
V = 20


class Biased:
    """A model whose logits get a fixed bias per token (to make EOS, PAD or BOS tempting)."""

    def __init__(self, model: Seq2SeqTransformer, bias: dict[int, float]) -> None:
        self.model, self.bias = model, torch.zeros(model.hparams.vocab_size)
        for i, b in bias.items():
            self.bias[i] = b

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.model.encode(src)

    def decode_step(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        return self.model.decode_step(tgt, memory, src_mask, cache) + self.bias

    def init_cache(self, capacity: int) -> DecoderCache:
        return self.model.init_cache(capacity)


def model_and_src(pos_encoding: str = "sinusoidal", norm_first: bool = True) -> tuple[Biased, Tensor]:
    torch.manual_seed(0)
    model = Seq2SeqTransformer(
        vocab_size=V,
        d_model=32,
        n_heads=4,
        n_layers=2,
        d_ff=64,
        dropout=0.0,
        norm_first=norm_first,
        pos_encoding=pos_encoding,
    ).eval()
    src = pad_rows([[5, 6, 7, 8, 9, EOS_ID], [10, 11, EOS_ID], [12, 13, 14, 15, 16, 17, 18, 19, EOS_ID]])  # (3, 9)
    # EOS made likely enough that rows stop at different steps, before their limits
    return Biased(model, {EOS_ID: 2.5}), src


@pytest.mark.parametrize(
    ("pos_encoding", "norm_first"), [("sinusoidal", True), ("rope", True), ("alibi", False), ("learned", False)]
)
def test_cached_greedy_equals_uncached(pos_encoding: str, norm_first: bool) -> None:
    model, src = model_and_src(pos_encoding, norm_first)
    cached = greedy_search(model, src, 12, **IDS)
    uncached = greedy_search(model, src, 12, **IDS, use_cache=False)
    assert torch.equal(cached, uncached)
    lengths = ((cached != PAD_ID).sum(1)).tolist()
    assert len(set(lengths)) > 1 and min(lengths) < 12, f"rows should stop at different steps: {lengths}"


@pytest.mark.parametrize(("pos_encoding", "norm_first"), [("sinusoidal", True), ("rope", False), ("alibi", True)])
def test_cached_beam_equals_uncached(pos_encoding: str, norm_first: bool) -> None:
    model, src = model_and_src(pos_encoding, norm_first)
    cached, cached_score = beam_search(model, src, 12, **IDS, beam_size=4, alpha=0.6)
    uncached, uncached_score = beam_search(model, src, 12, **IDS, beam_size=4, alpha=0.6, use_cache=False)
    assert torch.equal(cached, uncached)
    torch.testing.assert_close(cached_score, uncached_score)


def test_beam_score_is_the_normalised_log_probability() -> None:
    model, src = model_and_src()
    out, score = beam_search(model, src, 12, **IDS, beam_size=3, alpha=0.8)
    tgt = torch.cat((torch.full((3, 1), BOS_ID), out), dim=1)  # (B, 1 + T)
    memory, mask = model.encode(src)
    lp = (
        (model.model.decode(tgt[:, :-1], memory, mask) + model.bias).log_softmax(-1).gather(-1, out[..., None])[..., 0]
    )  # (B, T)
    lengths = (out != PAD_ID).sum(1)
    logp = (lp * (out != PAD_ID)).sum(1)
    torch.testing.assert_close(score, logp / length_penalty(lengths, 0.8), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("ngram", [0, 2])
def test_beam_size_one_equals_greedy(alpha: float, ngram: int) -> None:
    model, src = model_and_src()
    greedy = greedy_search(model, src, 15, **IDS, no_repeat_ngram_size=ngram)
    beam, _ = beam_search(model, src, 15, **IDS, beam_size=1, alpha=alpha, no_repeat_ngram_size=ngram)
    assert torch.equal(greedy, beam)


def test_beam_search_beats_greedy_on_log_probability() -> None:
    model, src = model_and_src()
    greedy = greedy_search(model, src, 12, **IDS)
    _, beam_score = beam_search(model, src, 12, **IDS, beam_size=8, alpha=0.0)
    tgt = torch.cat((torch.full((3, 1), BOS_ID), greedy), dim=1)
    memory, mask = model.encode(src)
    lp = (
        (model.model.decode(tgt[:, :-1], memory, mask) + model.bias)
        .log_softmax(-1)
        .gather(-1, greedy[..., None])[..., 0]
    )
    greedy_logp = (lp * (greedy != PAD_ID)).sum(1)
    assert bool((beam_score >= greedy_logp - 1e-5).all())


class TableModel:
    """A hand-made "model": next-token log-probabilities looked up from the prefix (no cache)."""

    TABLE = {
        (): {4: 0.8, 5: 0.2},
        (4,): {EOS_ID: 0.6, 4: 0.4},
        (4, 4): {EOS_ID: 1.0},
        (5,): {5: 1.0},
        (5, 5): {5: 1.0},
        (5, 5, 5): {5: 1.0},
        (5, 5, 5, 5): {EOS_ID: 1.0},
    }
    # the complete hypotheses and their log-probabilities
    HYPOTHESES = {
        (4, EOS_ID): math.log(0.8 * 0.6),
        (4, 4, EOS_ID): math.log(0.8 * 0.4),
        (5, 5, 5, 5, EOS_ID): math.log(0.2),
    }

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return torch.zeros(src.shape[0], 1, 1), torch.ones(src.shape[0], 1, 1, 1, dtype=torch.bool)

    def decode_step(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        out = torch.full((tgt.shape[0], 8), float("-inf"))
        for b, row in enumerate(tgt.tolist()):
            for tok, p in self.TABLE.get(tuple(row[1:]), {EOS_ID: 1.0}).items():
                out[b, tok] = math.log(p)
        return out

    def init_cache(self, capacity: int) -> DecoderCache:
        return DecoderCache(1)


def test_length_penalty_formula() -> None:
    assert length_penalty(1, 0.0).item() == 1.0
    torch.testing.assert_close(length_penalty(7, 0.6), torch.tensor((12 / 6) ** 0.6))
    torch.testing.assert_close(length_penalty(torch.tensor([1, 10]), 1.0), torch.tensor([1.0, 2.5]))


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0, 3.0, 4.0])
def test_length_penalty_ranks_hypotheses_as_its_formula_says(alpha: float) -> None:
    def formula(hyp: tuple[int, ...]) -> float:
        return TableModel.HYPOTHESES[hyp] / ((5 + len(hyp)) / 6) ** alpha

    expected = max(TableModel.HYPOTHESES, key=formula)
    out, score = beam_search(
        TableModel(), torch.ones(1, 1, dtype=torch.long), 10, **IDS, beam_size=3, alpha=alpha, use_cache=False
    )
    assert tuple(out[0].tolist()) == expected
    assert score.item() == pytest.approx(formula(expected), rel=1e-5)


def test_length_penalty_changes_the_winner() -> None:
    """The hand-made table is built so that the ranking flips between alpha 2 and 3 (else the
    test above would pass with any alpha ignored)."""
    winners = set()
    for alpha in (0.0, 4.0):
        out, _ = beam_search(
            TableModel(), torch.ones(1, 1, dtype=torch.long), 10, **IDS, beam_size=3, alpha=alpha, use_cache=False
        )
        winners.add(tuple(out[0].tolist()))
    assert winners == {(4, EOS_ID), (5, 5, 5, 5, EOS_ID)}


def test_block_repeated_ngrams_by_hand() -> None:
    prefix = torch.tensor([[5, 6, 7, 5, 6], [5, 6, 7, 5, 6]])
    scores = torch.zeros(2, 10)

    def banned(n):
        return set(torch.nonzero(torch.isinf(block_repeated_ngrams(scores, prefix, n)[0])).flatten().tolist())

    assert banned(3) == {7}  # "5 6" was followed by 7
    assert banned(2) == {7}  # "6" was followed by 7
    assert banned(1) == {5, 6, 7}
    assert banned(4) == set()  # "7 5 6" never occurred before
    assert banned(0) == set() and banned(6) == set()
    # two earlier occurrences of the context with different continuations ban both
    both = block_repeated_ngrams(torch.zeros(1, 10), torch.tensor([[4, 8, 4, 9, 4]]), 2)
    assert set(torch.nonzero(torch.isinf(both[0])).flatten().tolist()) == {8, 9}


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_ngram_blocking_blocks(search: str) -> None:
    model, src = model_and_src()
    model.bias[7] = 30.0  # token 7 dominates: without blocking it repeats
    model.bias[EOS_ID] = 0.0

    def run(n: int) -> Tensor:
        if search == "greedy":
            return greedy_search(model, src, 10, **IDS, no_repeat_ngram_size=n)
        return beam_search(model, src, 10, **IDS, beam_size=3, alpha=0.6, no_repeat_ngram_size=n)[0]

    assert (run(0)[:, :3] == 7).all()
    for n in (1, 2, 3):
        for row in run(n).tolist():
            row = row[: row.index(EOS_ID)] if EOS_ID in row else row
            grams = [tuple(row[i : i + n]) for i in range(len(row) - n + 1)]
            assert len(grams) == len(set(grams)), (n, row)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_never_emits_pad_or_bos_and_stops_at_the_limit(search: str) -> None:
    model, src = model_and_src()
    model.bias[PAD_ID], model.bias[BOS_ID], model.bias[EOS_ID] = 50.0, 50.0, -50.0
    limit = torch.tensor([3, 5, 7])
    out = greedy_search(model, src, limit, **IDS) if search == "greedy" else beam_search(model, src, limit, **IDS)[0]
    for row, n in zip(out.tolist(), limit.tolist(), strict=True):
        body = row[: row.index(EOS_ID)]
        assert len(body) + 1 == n, "EOS is forced at the limit"
        assert PAD_ID not in body and BOS_ID not in body
        assert all(t == PAD_ID for t in row[n:])


def test_bad_search_arguments() -> None:
    model, src = model_and_src()
    with pytest.raises(ValueError, match="beam_size must be at least 1, got 0"):
        beam_search(model, src, 5, **IDS, beam_size=0)
    with pytest.raises(ValueError, match=r"max_new_tokens must be at least 1.*\[0, 0, 0\]"):
        greedy_search(model, src, 0, **IDS)


def test_decode_by_length_batches_similar_lengths_without_extra_padding_and_keeps_row_order() -> None:
    lengths = [5, 1, 3, 7, 2, 6, 4]
    ids = torch.full((len(lengths), 9), PAD_ID)  # (N, S): wider than any row
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.arange(10 + i, 10 + i + n)
    seen: list[list[int]] = []

    def decode(src: Tensor) -> list[str]:
        seen.append([int((row != PAD_ID).sum()) for row in src])
        assert src.shape[1] == max(seen[-1]), "each batch is cut to its longest row"
        return [" ".join(map(str, row[row != PAD_ID].tolist())) for row in src]

    out = decode_by_length(ids, PAD_ID, 3, decode)
    assert seen == [[1, 2, 3], [4, 5, 6], [7]], "shortest first, in batches of 3"
    assert out == [" ".join(str(10 + i + k) for k in range(n)) for i, n in enumerate(lengths)], "in row order"
