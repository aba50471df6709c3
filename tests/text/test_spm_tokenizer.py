"""SentencePieceTokenizer against transformers' MarianTokenizer on the same files: the same ids on both sides
(casing, punctuation, unknown characters, pieces the vocabulary lacks, spacing, special tokens written in
the text, language codes), the same decoded text; its storage (dict, checkpoint, folder) and its errors.
The SentencePiece models are trained in the test (tests/helpers/marian.py)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("sentencepiece")

from lightning_tf.text.spm_tokenizer import SentencePieceTokenizer  # noqa: E402
from lightning_tf.text.tokenizer import BPETokenizer  # noqa: E402
from lightning_tf.text.tokenizer_kinds import load_tokenizer, tokenizer_from_dict  # noqa: E402
from tests.helpers.marian import EN_DE, marian_vocab, spm_pieces, train_spm, write_tokenizer_folder  # noqa: E402

TEXTS = [
    "Der Hund sieht die Katze.",
    "DER HUND SIEHT DIE KATZE!",  # casing
    "der hund sieht die katze",
    "Sie sagen, dass sie dreiundsechzig Tische abholen wollen.",
    "Wo? Hier: (ja) \"nein\" 'vielleicht'; 1,5 - 3.14 ... !!",  # punctuation
    "Preis: 5 € für ½ Pfund Käse — 漢字 😀 ñ",  # characters never seen in training
    "  zwei   Leerzeichen  ",
    "Tab\tund\nZeilenumbruch",
    "",
    "ein </s> im Satz <unk> und <pad>",  # special tokens written in the text
    ">>en<< Am Montag",  # a language code
    "<s> Anfang",
]
DROPPED = ("▁Katze",)  # a piece the vocabulary lacks: <unk>, as in MarianTokenizer


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = write_tokenizer_folder(tmp_path_factory.mktemp("marian_tok"), drop=DROPPED)
    assert all(p not in json.loads((directory / "vocab.json").read_text()) for p in DROPPED)
    return directory


def _reference(directory: Path):
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses" (not used to tokenize)
        return transformers.MarianTokenizer.from_pretrained(str(directory))


def test_ids_equal_marian_tokenizer_on_both_sides(folder: Path) -> None:
    ours, ref = SentencePieceTokenizer.load(folder), _reference(folder)
    for side in ("src", "tgt"):
        got = ours.encode(TEXTS, side)
        for text, ids in zip(TEXTS, got, strict=True):
            expected = ref(text).input_ids if side == "src" else ref(text_target=text).input_ids
            assert ids + [ours.eos_id] == expected, (side, text)
        assert got == [ours.encode([t], side)[0] for t in TEXTS]  # batching changes nothing
        assert all(0 <= i < ours.vocab_size for row in got for i in row)
    # the set is not vacuous: it has unknown characters, a missing piece and the specials written in the text
    flat = [i for row in ours.encode(TEXTS, "src") for i in row]
    assert flat.count(ours.unk_id) >= 5 and ours.eos_id in flat and ours.pad_id in flat
    assert ours.encode(["Katze"], "src")[0] == [ours.unk_id] != ours.encode(["katze"], "src")[0]


def test_decoded_text_equals_marian_tokenizer(folder: Path) -> None:
    ours, ref = SentencePieceTokenizer.load(folder), _reference(folder)
    plain = TEXTS[:9]  # without specials written in the text
    rows = ours.encode(plain, "tgt")
    padded = [r + [ours.eos_id] + [ours.pad_id] * 3 for r in rows]
    got = ours.decode(padded, "tgt")
    width = max(len(r) for r in padded)
    assert got == ours.decode(torch.tensor([r + [ours.pad_id] * (width - len(r)) for r in padded]), "tgt")
    for text, row, out in zip(plain, rows, got, strict=True):
        assert out == ref.decode(row, skip_special_tokens=False), text  # <unk> stays visible, as there
        if ours.unk_id not in row:
            assert out == ref.decode(row + [ours.eos_id, ours.pad_id], skip_special_tokens=True), text
    assert got[0] == "Der Hund sieht die Katze." and "<unk>" in got[5]
    # a start token (= pad) first and everything after the first </s> are dropped
    start = [[ours.bos_id, *rows[0], ours.eos_id, *rows[3]]]
    assert ours.decode(start, "tgt") == [got[0]]


def test_storage_round_trips(folder: Path, tmp_path: Path) -> None:
    tok = SentencePieceTokenizer.load(folder)
    d = tok.to_dict()
    assert json.loads(json.dumps(d)) == d  # plain JSON types
    again = tokenizer_from_dict(d)
    assert isinstance(again, SentencePieceTokenizer) and again == tok
    torch.save({"tokenizer": d}, tmp_path / "x.ckpt")
    loaded = torch.load(tmp_path / "x.ckpt", weights_only=True)
    assert SentencePieceTokenizer.from_dict(loaded["tokenizer"]) == tok
    saved = tok.save(tmp_path / "saved")
    assert load_tokenizer(saved) == tok and SentencePieceTokenizer.is_saved_in(saved)
    assert again.encode(TEXTS, "src") == tok.encode(TEXTS, "src")
    # a capacity above the vocabulary and another start token survive the folder
    wider = SentencePieceTokenizer(tok.src_model, tok.tgt_model, tok.vocab, vocab_size=tok.vocab_size + 5, bos_id=3)
    assert wider != tok and load_tokenizer(wider.save(tmp_path / "wider")) == wider


def test_saved_folder_loads_in_transformers_with_the_same_ids(folder: Path, tmp_path: Path) -> None:
    tok = SentencePieceTokenizer.load(folder)
    ref = _reference(tok.save(tmp_path / "saved"))
    assert [ref(t).input_ids for t in TEXTS] == [r + [tok.eos_id] for r in tok.encode(TEXTS, "src")]
    assert (ref.source_lang, ref.target_lang) == ("de", "en")
    assert SentencePieceTokenizer.from_marian(ref) == SentencePieceTokenizer.load(folder)


def test_separate_vocabularies_equal_marian_tokenizer(tmp_path: Path) -> None:
    src, tgt = train_spm([d for _, d in EN_DE], 100), train_spm([e for e, _ in EN_DE], 90)
    src_vocab, tgt_vocab = marian_vocab([src]), marian_vocab([tgt])
    assert len(src_vocab) != len(tgt_vocab)
    with pytest.raises(ValueError, match=r"vocabularies give .* different ids: \[0, 1, \d+\] and \[0, 1, \d+\]"):
        SentencePieceTokenizer(src, tgt, src_vocab, tgt_vocab)  # each <pad> last: the sizes differ
    # Marian's separate vocabularies have one size (the conversion refuses others): fill the smaller one
    size = max(len(src_vocab), len(tgt_vocab))
    src_vocab, tgt_vocab = (marian_vocab([m], filler=size - len(v)) for m, v in ((src, src_vocab), (tgt, tgt_vocab)))
    tok = SentencePieceTokenizer(src, tgt, src_vocab, tgt_vocab)
    assert not tok.joint and tok.vocab_size == size and tok.pad_id == size - 1
    ref = _reference(tok.save(tmp_path))
    assert ref.separate_vocabs
    for side, texts in (("src", [d for _, d in EN_DE[:20]]), ("tgt", [e for e, _ in EN_DE[:20]])):
        got = tok.encode(texts, side)
        for text, ids in zip(texts, got, strict=True):
            assert ids + [tok.eos_id] == (ref(text) if side == "src" else ref(text_target=text)).input_ids
    rows = tok.encode([e for e, _ in EN_DE[:20]], "tgt")
    assert tok.decode(rows, "tgt") == [ref.decode(r, skip_special_tokens=True) for r in rows]
    assert tok.decode(rows, "tgt")[0] == EN_DE[0][0]


def test_load_tokenizer_tells_the_kinds_apart(folder: Path, tmp_path: Path) -> None:
    assert isinstance(load_tokenizer(folder), SentencePieceTokenizer)
    bpe = BPETokenizer.train([d for _, d in EN_DE], [e for e, _ in EN_DE], 200)
    assert load_tokenizer(bpe.save(tmp_path / "bpe")) == bpe
    old = {k: v for k, v in bpe.to_dict().items() if k != "kind"}  # a dict from before there were kinds
    assert tokenizer_from_dict(old) == bpe
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no tokenizer: neither"):
        load_tokenizer(tmp_path / "empty")
    with pytest.raises(ValueError, match="unknown tokenizer kind 'wordpiece'"):
        tokenizer_from_dict({"kind": "wordpiece"})


def test_load_tokenizer_offline_names_the_missing_hub_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match=r"tokenizer 'nobody/no-such-model': no such folder, and not a model"):
        load_tokenizer("nobody/no-such-model")


def test_bad_input_is_named(folder: Path, tmp_path: Path) -> None:
    tok = SentencePieceTokenizer.load(folder)
    vocab = dict(tok.vocab)
    with pytest.raises(ValueError, match=r"vocab lacks the special tokens \['<pad>'\]"):
        SentencePieceTokenizer(tok.src_model, tok.tgt_model, {k: v for k, v in vocab.items() if k != "<pad>"})
    with pytest.raises(ValueError, match=rf"vocab_size \(10\) must exceed the largest vocabulary id \({tok.pad_id}\)"):
        SentencePieceTokenizer(tok.src_model, tok.tgt_model, vocab, vocab_size=10)
    with pytest.raises(ValueError, match="src_model is not a SentencePiece model"):
        SentencePieceTokenizer(b"not a model", tok.tgt_model, vocab)
    with pytest.raises(ValueError, match=r"bos_id \(-1\) must lie in"):
        SentencePieceTokenizer(tok.src_model, tok.tgt_model, vocab, bos_id=-1)
    with pytest.raises(ValueError, match="side must be 'src' or 'tgt', got 'de'"):
        tok.encode(["x"], "de")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"decode expects ids of shape \(B, T\)"):
        tok.decode(torch.zeros(3, dtype=torch.long), "tgt")
    with pytest.raises(ValueError, match=r"tokenizer dict lacks \['src_model'"):
        SentencePieceTokenizer.from_dict({"kind": "sentencepiece"})
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "source.spm").write_bytes(tok.src_model)
    with pytest.raises(FileNotFoundError, match="no target.spm, vocab.json; not a Marian tokenizer folder"):
        SentencePieceTokenizer.load(tmp_path / "half")
    (tmp_path / "half" / "target.spm").write_bytes(tok.tgt_model)
    (tmp_path / "half" / "vocab.json").write_text('["a list"]')
    with pytest.raises(ValueError, match="vocab.json: not a JSON object of piece -> id"):
        SentencePieceTokenizer.load(tmp_path / "half")


def test_the_pieces_of_both_models_are_in_the_vocabulary(folder: Path) -> None:
    # the helper builds the vocabulary as the conversion does: a real check that the fixture is Marian-shaped
    tok = SentencePieceTokenizer.load(folder)
    pieces = set(spm_pieces(tok.src_model)) | set(spm_pieces(tok.tgt_model))
    assert pieces - set(tok.vocab) == set(DROPPED)
    assert (tok.eos_id, tok.unk_id, tok.pad_id, tok.bos_id) == (0, 1, len(tok.vocab) - 1, len(tok.vocab) - 1)
    assert tok.id_to_token(tok.eos_id, "tgt") == "</s>" and tok.id_to_token(10**6, "tgt") is None


def test_without_sentencepiece_the_message_says_what_to_install(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = SentencePieceTokenizer.load(folder).to_dict()
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(ModuleNotFoundError, match=r"needs sentencepiece: pip install 'lightning-tf\[hf\]'"):
        tokenizer_from_dict(d)  # a checkpoint's Marian tokenizer on a machine without the extra
