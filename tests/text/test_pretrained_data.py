"""TranslationDataModule with a pretrained (Marian) tokenizer: ``tokenizer_dir`` names a Marian folder,
``vocab_size: null`` takes its capacity, batches carry its special ids (</s> = 0, <pad> = the last id, which
also starts every target), no BPE is trained, and the tokenizer travels in the DataModule's state."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_tf.text import TranslationDataModule
from lightning_tf.text.tokenizer_kinds import tokenizer_from_dict
from tests.helpers.text import tatoeba_rows, write_tsv


def test_vocab_size_null_needs_a_tokenizer() -> None:
    with pytest.raises(ValueError, match="vocab_size: null takes the capacity of the tokenizer_dir tokenizer"):
        TranslationDataModule(vocab_size=None)


def test_a_marian_tokenizer_folder_feeds_the_batches(tmp_path: Path) -> None:
    pytest.importorskip("sentencepiece")
    from lightning_tf.text.spm_tokenizer import SentencePieceTokenizer
    from tests.helpers.marian import write_tokenizer_folder

    folder = write_tokenizer_folder(tmp_path / "opus-mt-tiny")
    tok = SentencePieceTokenizer.load(folder)
    tsv = write_tsv(tmp_path / "deu.txt", tatoeba_rows())
    dm = TranslationDataModule(
        dataset=None,
        train_file=str(tsv),
        src_lang="de",
        tgt_lang="en",
        n_val=3,
        n_test=3,
        tokenizer_dir=str(folder),
        vocab_size=None,
        max_tokens=512,
        max_length=40,
    )
    assert dm.tokenizer == tok and dm.vocab_size == tok.vocab_size  # at construction: the CLI links vocab_size
    assert (dm.pad_id, dm.bos_id, dm.eos_id) == (tok.pad_id, tok.pad_id, 0)
    dm.setup("fit")
    assert dm.tokenizer == tok  # used, not replaced by a trained BPE
    batch = next(iter(dm.val_dataloader()))
    for b, (src_text, tgt_text) in enumerate(zip(batch["src_text"], batch["tgt_text"], strict=True)):
        src, tgt = tok.encode([src_text], "src")[0], tok.encode([tgt_text], "tgt")[0]
        assert batch["src"][b, : len(src) + 1].tolist() == src + [0]
        assert batch["tgt"][b, : len(tgt) + 2].tolist() == [tok.pad_id, *tgt, 0]  # the start token is <pad>
        assert (batch["src"][b, len(src) + 1 :] == tok.pad_id).all()
        assert (batch["tgt"][b, len(tgt) + 2 :] == tok.pad_id).all()
    assert (batch["src"] == tok.pad_id).any()  # padding in the batch, with the tokenizer's pad id
    assert tokenizer_from_dict(dm.state_dict()["tokenizer"]) == tok
    with pytest.raises(ValueError, match=rf"tokenizer vocab_size \({tok.vocab_size}\) differs from vocab_size \(1000"):
        TranslationDataModule(tokenizer_dir=str(folder))  # an explicit capacity must match
    # predict batches too
    (tmp_path / "in.txt").write_text("Wo ist er?\n\nGeh.\n", encoding="utf-8")
    pred = TranslationDataModule(
        dataset=None,
        predict_file=str(tmp_path / "in.txt"),
        tokenizer_dir=str(folder),
        vocab_size=None,
        src_lang="de",
        tgt_lang="en",
    )
    pred.setup("predict")
    rows = {}
    for b in pred.predict_dataloader():
        for i, row in zip(b["index"].tolist(), b["src"].tolist(), strict=True):
            rows[i] = row
    lines = ["Wo ist er?", "", "Geh."]
    for i, text in enumerate(lines):
        ids = tok.encode([text], "src")[0] + [0]  # Marian's </s> ends every source
        assert rows[i][: len(ids)] == ids and all(t == tok.pad_id for t in rows[i][len(ids) :])
