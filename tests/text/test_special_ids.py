"""The special ids are the model's arguments (and its tokenizer's), not constants: Marian's layout (eos = 0,
pad = the last id and the decoder's start token) trains, decodes and checks its data like the default
one. No transformers needed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Trainer

from lightning_tf.text import Seq2SeqTransformer
from tests.helpers.text import TextCopyDataModule

V = 30
PAD = BOS = V - 1  # Marian: the pad id starts the decoder
EOS = 0
MARIAN_IDS = dict(pad_id=PAD, bos_id=BOS, eos_id=EOS)
TINY = dict(
    vocab_size=V,
    d_model=32,
    n_heads=4,
    n_layers=2,
    d_ff=64,
    dropout=0.0,
    norm_first=False,
    activation="silu",
    pos_encoding="sinusoidal_halves",
    output_bias=True,
)


def _src() -> torch.Tensor:
    return torch.tensor([[5, 9, 12, 7, EOS], [8, 3, EOS, PAD, PAD], [4, EOS, PAD, PAD, PAD]])  # (3, 5)


def test_the_start_token_is_attended_although_it_is_the_pad_id() -> None:
    model = Seq2SeqTransformer(**TINY, **MARIAN_IDS).eval()
    tgt = torch.tensor([[BOS, 6, 11, 2], [BOS, 13, 4, 20], [BOS, 7, 7, 7]])
    with torch.no_grad():
        base = model(_src(), tgt)
        model.tgt_embed.weight[PAD].normal_()  # the start token's embedding (zero at initialisation)
        moved = model(_src(), tgt)
    # every later position reads the start token through self-attention: it is a key, not masked padding
    assert (moved - base)[:, 1:].abs().amax(dim=-1).min() > 1e-4


def test_source_padding_with_the_last_id_changes_nothing() -> None:
    model = Seq2SeqTransformer(**TINY, **MARIAN_IDS).eval()
    src = _src()
    tgt = torch.tensor([[BOS, 6, 11]] * 3)
    with torch.no_grad():
        full = model(src, tgt)
        for b, n in enumerate((5, 3, 2)):
            torch.testing.assert_close(model(src[b : b + 1, :n], tgt[b : b + 1]), full[b : b + 1], atol=1e-5, rtol=0)


def test_decoding_with_marian_ids_never_emits_the_start_token_and_pads_after_eos() -> None:
    torch.manual_seed(0)
    model = Seq2SeqTransformer(**TINY, **MARIAN_IDS, extra_len=6).eval()
    with torch.no_grad():
        model.head.bias[EOS] = 3.0  # some sentences end before their limit
    for beam in (1, 3):
        out = model.generate(_src(), beam_size=beam)
        cached, recomputed = out, model.generate(_src(), beam_size=beam, use_cache=False)
        assert torch.equal(cached, recomputed)
        for row in out.tolist():
            end = row.index(EOS)
            assert PAD not in row[:end] and all(i == PAD for i in row[end + 1 :])
        assert (out == EOS).sum() == 3


def test_the_loss_ignores_pad_targets_only() -> None:
    model = Seq2SeqTransformer(**TINY, **MARIAN_IDS, label_smoothing=0.0).eval()
    tgt = torch.tensor([[BOS, 6, 11, 2, EOS], [BOS, 13, EOS, PAD, PAD], [BOS, EOS, PAD, PAD, PAD]])
    loss, logits, target = model.loss({"src": _src(), "tgt": tgt})
    keep = target != PAD
    expected = F.cross_entropy(logits[keep], target[keep])
    torch.testing.assert_close(loss, expected)
    assert int(keep.sum()) == 4 + 2 + 1


def test_special_ids_must_fit_the_vocabulary() -> None:
    with pytest.raises(ValueError, match=r"vocab_size \(30\) must exceed the special ids \(\{'pad_id': 30"):
        Seq2SeqTransformer(vocab_size=V, pad_id=V)
    with pytest.raises(ValueError, match=r"must exceed the special ids .*'eos_id': -1"):
        Seq2SeqTransformer(vocab_size=V, eos_id=-1)


def test_data_with_other_special_ids_is_refused(tmp_path: Path) -> None:
    # the data's BPE tokenizer has <pad> = 0 and </s> = 3; a model built for Marian's ids must say so
    model = Seq2SeqTransformer(**(TINY | {"vocab_size": 64}), pad_id=63, bos_id=63, eos_id=0)
    trainer = Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        fast_dev_run=True,
        default_root_dir=tmp_path,
    )
    with pytest.raises(ValueError, match=r"model\.pad_id \(63\) differs from the data's pad_id \(0\)"):
        trainer.fit(model, datamodule=TextCopyDataModule(vocab_size=64))
