"""Seq2SeqTransformer.from_marian against transformers' MarianMTModel with the same weights: teacher-forced
logits within 1e-5, greedy generation token for token, beam search under the same scoring; to_marian back
into transformers with the same logits; the ``pretrained`` argument; and what is refused. The Marian models
are random, OPUS-MT-shaped (swish, scale_embedding, pad = start token, a non-zero final_logits_bias), at
two sizes, with shared and with untied embeddings (tests/helpers/marian.py)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_tf.text import Seq2SeqTransformer
from lightning_tf.text.tokenizer import BPETokenizer

V = 61  # ids 0 .. 60: </s> = 0, <pad> = 60
CONFIGS = {
    "small-shared": dict(size="SMALL", share=True, tie=True),
    "larger-shared": dict(size="LARGER", share=True, tie=True),
    "small-untied": dict(size="SMALL", share=False, tie=False),
    "small-tied-output-only": dict(size="SMALL", share=False, tie=True),
}
LENGTHS = (9, 4, 12, 1, 7)  # source lengths with </s>: padding in every batch


@pytest.fixture(autouse=True)
def _hf() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    warnings.filterwarnings("ignore", message=".*sacremoses.*")


def _reference(name: str, **kw: Any) -> Any:
    from tests.helpers import marian as helpers

    c = CONFIGS[name]
    return helpers.random_marian(V, getattr(helpers, c["size"]), share=c["share"], tie=c["tie"], **kw)


def _sources(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    from tests.helpers.marian import padded_sources

    return padded_sources(V, LENGTHS, seed)


@pytest.mark.parametrize("name", CONFIGS)
def test_teacher_forced_logits_equal_transformers(name: str) -> None:
    ref = _reference(name)
    ours = Seq2SeqTransformer.from_marian(ref).eval()
    hp = ours.hparams
    assert (hp.pad_id, hp.bos_id, hp.eos_id, hp.vocab_size) == (V - 1, V - 1, 0, V)
    assert (hp.share_embeddings, hp.tie_output) == (CONFIGS[name]["share"], CONFIGS[name]["tie"])
    assert (hp.activation, hp.pos_encoding, ours.size["norm_first"]) == ("silu", "sinusoidal_halves", False)
    src, mask = _sources()
    g = torch.Generator().manual_seed(1)
    tgt = torch.randint(1, V - 1, (len(LENGTHS), 11), generator=g)
    tgt[:, 0] = V - 1  # the decoder starts with <pad>, which must not be masked
    tgt[1, 6:] = V - 1  # and a right-padded target row
    with torch.no_grad():
        expected = ref(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = ours(src, tgt)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    # not vacuous: the logits spread, the bias and the source padding matter
    assert expected.std() > 0.5 and ref.final_logits_bias.abs().max() > 0.5
    with torch.no_grad():
        short = ours(src[1:2, : LENGTHS[1]], tgt[1:2])
        torch.testing.assert_close(short, got[1:2], atol=1e-5, rtol=0)  # padding in the batch changes nothing
        assert not torch.allclose(ours(src[1:2, : LENGTHS[0]].clamp(max=V - 2), tgt[1:2]), short, atol=1e-3)


def _hf_generate(ref: Any, src: torch.Tensor, mask: torch.Tensor, limits: list[int], **kw: Any) -> list[list[int]]:
    """transformers' generation, one sentence at a time (no padding), each with our limit; the generated ids
    after the start token, through </s>."""
    out = []
    for b, limit in enumerate(limits):
        n = int(mask[b].sum())
        with torch.no_grad():
            ids = ref.generate(
                input_ids=src[b : b + 1, :n],
                attention_mask=mask[b : b + 1, :n],
                max_new_tokens=limit,
                do_sample=False,
                bad_words_ids=[[V - 1]],
                forced_eos_token_id=0,
                **kw,
            )[0, 1:].tolist()
        out.append(ids[: ids.index(0) + 1] if 0 in ids else ids)
    return out


def _rows(ids: torch.Tensor) -> list[list[int]]:
    """Our generated rows through </s>, without the padding after it."""
    return [row[: row.index(0) + 1] if 0 in row else row for row in ids.tolist()]


# a bias towards </s> per model, so that random weights end some sentences before their length limit
GREEDY_EOS_BIAS = {"small-shared": 1.5, "larger-shared": 4.0, "small-untied": 3.0}
BEAM_EOS_BIAS = {"small-shared": 1.0, "larger-shared": 4.0, "small-untied": 3.0}


@pytest.mark.parametrize("name", GREEDY_EOS_BIAS)
def test_greedy_generation_equals_transformers(name: str) -> None:
    # float64 on both sides, so that a near-tie cannot be decided by the last bits of float32 rounding
    ref = _reference(name, eos_bias=GREEDY_EOS_BIAS[name]).double()
    ours = Seq2SeqTransformer.from_marian(ref, extra_len=30).double().eval()
    src, mask = _sources(seed=3)
    limits = ours.max_new_tokens(src).tolist()
    for ngram in (0, 2):  # with n-gram blocking as well (random weights otherwise repeat one token)
        got = _rows(ours.generate(src, beam_size=1, no_repeat_ngram_size=ngram))
        assert got == _hf_generate(ref, src, mask, limits, num_beams=1, no_repeat_ngram_size=ngram), ngram
    ended = [len(r) for r, lim in zip(got, limits, strict=True) if len(r) < lim]
    assert len(ended) >= 2 and max(ended) > 2  # not only forced ends, not only empty translations


@pytest.mark.parametrize("name", BEAM_EOS_BIAS)
def test_beam_search_equals_transformers_under_the_same_scoring(name: str) -> None:
    # with alpha = 0 (ours) and length_penalty = 0 (theirs) both rank by log-probability, and with
    # early_stopping=True transformers stops a sentence at beam_size finished hypotheses, as we do. One step
    # differs: at the length limit transformers forces </s> with log-probability 0, we add the model's
    # log P(</s>). That only lowers our score of hypotheses forced to end, so wherever transformers' best
    # ends before the limit ours must be the same, and wherever it is forced ours is forced too.
    ref = _reference(name, eos_bias=BEAM_EOS_BIAS[name]).double()
    ours = Seq2SeqTransformer.from_marian(ref, extra_len=30).double().eval()
    src, mask = _sources(seed=3)
    limits = ours.max_new_tokens(src).tolist()
    for k in (2, 4):
        got = _rows(ours.generate(src, beam_size=k, alpha=0.0, no_repeat_ngram_size=2))
        expected = _hf_generate(
            ref, src, mask, limits, num_beams=k, length_penalty=0.0, early_stopping=True, no_repeat_ngram_size=2
        )
        early = [b for b, lim in enumerate(limits) if len(expected[b]) < lim]
        assert [got[b] for b in early] == [expected[b] for b in early], k
        assert all(len(got[b]) == limits[b] for b in range(len(limits)) if b not in early), k
        assert any(len(expected[b]) > 2 for b in early), k  # not vacuous: real translations end on their own
        assert got != _rows(ours.generate(src, beam_size=1, no_repeat_ngram_size=2))  # the beams found others


def test_to_marian_round_trip_loads_in_transformers_with_equal_logits(tmp_path: Path) -> None:
    from transformers import MarianMTModel, MarianTokenizer

    from lightning_tf.text.spm_tokenizer import SentencePieceTokenizer
    from tests.helpers.marian import SMALL, random_marian, write_tokenizer_folder

    tok = SentencePieceTokenizer.load(write_tokenizer_folder(tmp_path / "tok"))
    src_ids = tok.encode(["Der Hund sieht die Katze.", "Am Montag haben zweiundneunzig Katzen gesehen."], "src")
    src = torch.full((2, max(map(len, src_ids)) + 1), tok.pad_id)
    for b, row in enumerate(src_ids):
        src[b, : len(row) + 1] = torch.tensor(row + [tok.eos_id])
    tgt = torch.cat((torch.full((2, 1), tok.pad_id), src[:, :-1].clamp(max=tok.pad_id - 1)), dim=1)
    for share, tie in ((True, True), (False, False)):
        ref = random_marian(tok.vocab_size, SMALL, share=share, tie=tie, seed=5)
        ours = Seq2SeqTransformer.from_marian(ref, tokenizer=tok).eval()
        with torch.no_grad():
            for p in ours.parameters():  # a model that moved away from the reference, as fine-tuning does
                p.add_(0.01 * torch.randn_like(p))
            expected = ours(src, tgt)
        out = ours.to_marian(tmp_path / f"out{share}{tie}")
        back = MarianMTModel.from_pretrained(out).eval()
        with torch.no_grad():
            got = back(input_ids=src, attention_mask=src != tok.pad_id, decoder_input_ids=tgt).logits
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        assert not torch.allclose(got, ref(input_ids=src, decoder_input_ids=tgt).logits, atol=1e-3)
        config = json.loads((out / "config.json").read_text())
        assert (config["share_encoder_decoder_embeddings"], config["tie_word_embeddings"]) == (share, tie)
        assert config["activation_function"] == "swish" and config["decoder_start_token_id"] == tok.pad_id
        marian_tok = MarianTokenizer.from_pretrained(str(out))
        assert marian_tok("Der Hund sieht die Katze.").input_ids == src[0][src[0] != tok.pad_id].tolist()
        assert (back.generation_config.num_beams, back.generation_config.bad_words_ids) == (4, [[tok.pad_id]])


def test_a_model_built_here_goes_out_to_transformers(tmp_path: Path) -> None:
    # the way out checked on its own: a Marian-shaped model of ours, never built from a Marian model
    from transformers import MarianMTModel

    from lightning_tf.text.spm_tokenizer import SentencePieceTokenizer
    from tests.helpers.marian import write_tokenizer_folder

    tok = SentencePieceTokenizer.load(write_tokenizer_folder(tmp_path / "tok"))
    ours = Seq2SeqTransformer(
        vocab_size=tok.vocab_size,
        d_model=32,
        n_heads=4,
        n_layers=2,
        n_decoder_layers=1,
        d_ff=48,
        norm_first=False,
        activation="silu",
        pos_encoding="sinusoidal_halves",
        max_len=64,
        share_embeddings=False,
        output_bias=True,
        pad_id=tok.pad_id,
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
    ).eval()
    ours.tokenizer = tok
    with torch.no_grad():
        ours.head.bias.normal_()
        for name, p in ours.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    back = MarianMTModel.from_pretrained(ours.to_marian(tmp_path / "out")).eval()
    src = torch.tensor([[5, 9, 17, 0], [8, 0, tok.pad_id, tok.pad_id]])
    tgt = torch.tensor([[tok.pad_id, 4, 30, 7], [tok.pad_id, 11, 3, tok.pad_id]])
    with torch.no_grad():
        torch.testing.assert_close(
            back(input_ids=src, attention_mask=src != tok.pad_id, decoder_input_ids=tgt).logits,
            ours(src, tgt),
            atol=1e-5,
            rtol=0,
        )


def test_dropout_rates_come_from_the_marian_config_and_go_back(tmp_path: Path) -> None:
    from transformers import MarianConfig

    from lightning_tf.text.spm_tokenizer import SentencePieceTokenizer
    from tests.helpers.core import hidden_dropout_rates
    from tests.helpers.marian import SMALL, padded_sources, random_marian, write_tokenizer_folder

    tok = SentencePieceTokenizer.load(write_tokenizer_folder(tmp_path / "tok"))
    ref = random_marian(tok.vocab_size, SMALL)
    ref.config.dropout, ref.config.activation_dropout = 0.15, 0.4
    src, _ = padded_sources(tok.vocab_size, (30, 24, 30, 17) * 4)
    tgt = src.clamp(max=tok.pad_id - 1)

    def rates(model: Seq2SeqTransformer) -> list[float]:
        return hidden_dropout_rates(model, lambda: model(src, tgt))

    ours = Seq2SeqTransformer.from_marian(ref, tokenizer=tok)
    assert (ours.size["dropout"], ours.hparams.ffn_dropout) == (0.15, 0.4)
    got = rates(ours)  # 1 + 2 layers of 16 x 30 positions x 32 hidden units
    assert len(got) == 3 and all(abs(r - 0.4) < 0.05 for r in got), got
    config = MarianConfig.from_pretrained(ours.to_marian(tmp_path / "out"))
    assert (config.dropout, config.activation_dropout) == (0.15, 0.4)
    # a rate given by the user wins over the config's, and goes out as given
    own = Seq2SeqTransformer.from_marian(ref, tokenizer=tok, ffn_dropout=0.0)
    assert own.hparams.ffn_dropout == 0.0 and all(r == 0 for r in rates(own))
    assert MarianConfig.from_pretrained(own.to_marian(tmp_path / "own")).activation_dropout == 0.0
    # a model of ours with ffn_dropout left at None drops its hidden units at `dropout`, and says so to Marian
    plain = Seq2SeqTransformer(
        vocab_size=tok.vocab_size,
        d_model=16,
        n_heads=2,
        n_layers=1,
        d_ff=32,
        dropout=0.25,
        norm_first=False,
        activation="silu",
        pos_encoding="sinusoidal_halves",
        output_bias=True,
        pad_id=tok.pad_id,
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
    )
    plain.tokenizer = tok
    assert all(abs(r - 0.25) < 0.05 for r in rates(plain))
    assert MarianConfig.from_pretrained(plain.to_marian(tmp_path / "plain")).activation_dropout == 0.25


def test_to_marian_refuses_what_marian_cannot_express(tmp_path: Path) -> None:
    model = Seq2SeqTransformer(vocab_size=40, preset="tiny")
    with pytest.raises(ValueError, match="norm_first is True; a Marian model is Post-LN"):
        model.to_marian(tmp_path)
    model = Seq2SeqTransformer(vocab_size=40, preset="tiny", norm_first=False)
    with pytest.raises(ValueError, match="pos_encoding is 'sinusoidal'; a Marian model needs 'sinusoidal_halves'"):
        model.to_marian(tmp_path)
    model = Seq2SeqTransformer(
        vocab_size=40, preset="tiny", norm_first=False, pos_encoding="sinusoidal_halves", activation="swiglu"
    )
    with pytest.raises(ValueError, match="activation is 'swiglu'"):
        model.to_marian(tmp_path)
    model = Seq2SeqTransformer(vocab_size=40, preset="tiny", norm_first=False, pos_encoding="sinusoidal_halves")
    model.tokenizer = BPETokenizer.train(["ein Hund", "eine Katze"] * 5, ["a dog", "a cat"] * 5, 40)
    with pytest.raises(ValueError, match="tokenizer to be a SentencePieceTokenizer, got BPETokenizer"):
        model.to_marian(tmp_path)


def test_from_marian_refuses_what_our_model_cannot_express() -> None:
    from transformers import MarianConfig, MarianMTModel

    base = dict(
        vocab_size=20,
        d_model=8,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        pad_token_id=19,
        decoder_start_token_id=19,
        activation_function="swish",
    )
    cases = [
        (dict(decoder_attention_heads=4), r"encoder_attention_heads \(2\) differs from decoder_attention_heads \(4\)"),
        (dict(decoder_ffn_dim=8), r"encoder_ffn_dim \(16\) differs from decoder_ffn_dim \(8\)"),
        (dict(decoder_vocab_size=25, share_encoder_decoder_embeddings=False), r"decoder_vocab_size \(25\) differs"),
        (dict(activation_function="gelu_new"), "activation_function 'gelu_new' is not one of"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            Seq2SeqTransformer.from_marian(MarianMTModel(MarianConfig(**(base | change))))
    with pytest.raises(ValueError, match=r"from_marian takes \['d_model'\] from the Marian model"):
        Seq2SeqTransformer.from_marian(MarianMTModel(MarianConfig(**base)), d_model=16)


def test_pretrained_argument_reads_a_local_marian_folder(tmp_path: Path) -> None:
    from transformers import MarianMTModel

    from lightning_tf.text.spm_tokenizer import SentencePieceTokenizer
    from tests.helpers.marian import write_marian_folder

    folder = write_marian_folder(tmp_path / "opus-mt-tiny")
    model = Seq2SeqTransformer(pretrained=str(folder), lr=1e-4).eval()
    ref = MarianMTModel.from_pretrained(folder).eval()
    hp = model.hparams
    assert hp.pretrained is None and hp.lr == 1e-4 and hp.vocab_size == ref.config.vocab_size
    assert model.tokenizer == SentencePieceTokenizer.load(folder) and model.src_lang is None  # the data's, at fit
    src = model.encode_texts(["Der Hund sieht die Katze.", "Wo ist er?"])
    tgt = torch.cat((torch.full((2, 1), hp.bos_id), src[:, :-1]), dim=1)
    with torch.no_grad():
        expected = ref(input_ids=src, attention_mask=src != hp.pad_id, decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), expected, atol=1e-5, rtol=0)
    # rebuilt from its own hyperparameters (what a checkpoint does), the model needs no Marian folder
    again = Seq2SeqTransformer(**{k: v for k, v in hp.items() if not k.startswith("_")})
    assert again.hparams.pretrained is None and again.size == model.size
    with pytest.raises(ValueError, match=r"model\.vocab_size \(1000\) differs from the pretrained model's \(\d+\)"):
        Seq2SeqTransformer(pretrained=str(folder), vocab_size=1000)
    with pytest.raises(ValueError, match=r"model\.d_model \(512\) differs from the pretrained model's \(16\)"):
        Seq2SeqTransformer(pretrained=str(folder), d_model=512)
    # an architecture argument equal to the pretrained model's is fine, and the dropout rates are the user's to
    # choose (left at None: the model's, OPUS-MT's activation_dropout 0 for the feed-forward hidden units)
    assert Seq2SeqTransformer(pretrained=str(folder), d_model=16, dropout=0.3).size["dropout"] == 0.3
    assert (hp.ffn_dropout, again.hparams.ffn_dropout) == (ref.config.activation_dropout,) * 2 == (0.0, 0.0)
    assert Seq2SeqTransformer(pretrained=str(folder), ffn_dropout=0.2).hparams.ffn_dropout == 0.2


def test_what_else_is_refused_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import MarianConfig, MarianMTModel

    from lightning_tf.text.marian import marian_arguments, marian_state_dict
    from lightning_tf.text.spm_tokenizer import SentencePieceTokenizer
    from tests.helpers.marian import SMALL, random_marian, write_tokenizer_folder

    config = MarianConfig(
        vocab_size=20,
        d_model=8,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        pad_token_id=19,
        decoder_start_token_id=19,
        eos_token_id=[0, 1],
    )
    with pytest.raises(ValueError, match=r"eos_token_id must be one int, got \[0, 1\]"):
        marian_arguments(MarianMTModel(config))
    shared = _reference("small-shared")
    with pytest.raises(ValueError, match="share the encoder and decoder embeddings: True.*share_embeddings=False"):
        marian_state_dict(shared, share_embeddings=False, tie_output=marian_arguments(shared)["tie_output"])
    # a tokenizer with another capacity than the model's embeddings
    folder = write_tokenizer_folder(tmp_path / "folder")
    tok = SentencePieceTokenizer.load(folder)
    random_marian(tok.vocab_size + 3, SMALL).save_pretrained(folder)
    with pytest.raises(ValueError, match=rf"tokenizer's vocab_size \({tok.vocab_size}\) differs from the model's"):
        Seq2SeqTransformer(pretrained=str(folder))
    with pytest.raises(ValueError, match=rf"tokenizer's vocab_size \({tok.vocab_size}\) differs from the model's"):
        Seq2SeqTransformer.from_marian(random_marian(tok.vocab_size + 3, SMALL), tokenizer=tok)
    model = Seq2SeqTransformer.from_marian(random_marian(tok.vocab_size + 3, SMALL))
    model.tokenizer = tok
    with pytest.raises(ValueError, match=r"to_marian: the tokenizer's vocab_size .* differs from the model's"):
        model.to_marian(tmp_path / "out")
    # without the hf extra the message says what to install
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'lightning-tf\[hf\]'"):
        Seq2SeqTransformer(pretrained=str(folder))
