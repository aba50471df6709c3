"""BPETokenizer: special ids, round trips of spacing, punctuation and Unicode, serialisation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

import lightning_tf.text.tokenizer as tokenizer_module
from lightning_tf.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, BPETokenizer

SRC = [
    "Hello, world!  It's 3.5 km -- isn't it?",
    "The cat (a black one) sat on the mat; then: nothing...",
    "\"Quoted\" words, 'single' ones, and 100% effort.",
    "Café naïve façade — über alles.",
]
TGT = [
    "Hallo, Welt!  Es sind 3,5 km -- oder?",
    "Die Katze (eine schwarze) saß auf der Matte; dann: nichts...",
    "„Zitierte“ Wörter, ‚einfache‘ und 100 % Einsatz.",
    "Die Straße ist groß — fünf Äpfel.",
]


@pytest.fixture(scope="module", params=[True, False], ids=["joint", "separate"])
def tok(request: pytest.FixtureRequest) -> BPETokenizer:
    return BPETokenizer.train(SRC * 3, TGT * 3, vocab_size=120, joint=request.param)


def test_special_ids_are_fixed_on_both_sides(tok: BPETokenizer) -> None:
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    for side in (tok.src, tok.tgt):
        assert [side.token_to_id(t) for t in ("<pad>", "<unk>", "<s>", "</s>")] == [0, 1, 2, 3]


def test_every_id_is_below_the_capacity(tok: BPETokenizer) -> None:
    assert tok.vocab_size == 120
    ids = tok.encode(SRC, "src") + tok.encode(TGT, "tgt")
    assert max(max(r) for r in ids) < 120
    assert tok.src.get_vocab_size() <= 120 and tok.tgt.get_vocab_size() <= 120


def test_encode_has_no_specials(tok: BPETokenizer) -> None:
    for row in tok.encode(SRC, "src") + tok.encode(TGT, "tgt"):
        assert not {PAD_ID, BOS_ID, EOS_ID} & set(row)


@pytest.mark.parametrize("side,texts", [("src", SRC), ("tgt", TGT)])
def test_round_trip_keeps_spacing_and_punctuation(tok: BPETokenizer, side: str, texts: list[str]) -> None:
    assert tok.decode(tok.encode(texts, side), side) == texts  # type: ignore[arg-type]


def test_round_trip_of_unseen_combinations(tok: BPETokenizer) -> None:
    # new words from seen characters: BPE falls back to smaller pieces, never to <unk>
    text = ["Hit, the (hat) is... 'on' -- not 5.3 km!", "tea-cat: no"]
    ids = tok.encode(text, "src")
    assert UNK_ID not in {i for r in ids for i in r}
    assert tok.decode(ids, "src") == text


def test_nfkc_normalisation(tok: BPETokenizer) -> None:
    # the ligature "ﬁ" and the full-width "Ｈ" are compatibility forms of "fi" and "H"
    text = "Ｈello, ﬁve cafe\u0301s."
    assert unicodedata.normalize("NFKC", text) == "Hello, five cafés."
    ids = tok.encode([text], "src")
    assert ids == tok.encode(["Hello, five cafés."], "src")
    assert tok.decode(ids, "src") == ["Hello, five cafés."]


def test_unseen_character_becomes_unk(tok: BPETokenizer) -> None:
    assert UNK_ID in tok.encode(["世"], "src")[0]


def test_literal_special_strings_are_text(tok: BPETokenizer) -> None:
    ids = tok.encode(["a </s> b <pad>"], "src")[0]
    assert not {PAD_ID, BOS_ID, EOS_ID} & set(ids)


def test_decode_stops_at_eos_and_drops_pad_and_bos(tok: BPETokenizer) -> None:
    a, b = tok.encode(["Hello, world!", "The cat"], "src")
    rows = torch.tensor([[BOS_ID, *a, EOS_ID, *b, PAD_ID], [BOS_ID, *b, EOS_ID, PAD_ID, *a]][:1])
    assert tok.decode(rows, "src") == ["Hello, world!"]
    padded = [[BOS_ID, *b, *([PAD_ID] * 3)], [*a, EOS_ID, EOS_ID]]
    assert tok.decode(padded, "src") == ["The cat", "Hello, world!"]


def test_to_dict_is_plain_json_and_round_trips(tok: BPETokenizer) -> None:
    d = tok.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert all(isinstance(v, (str, int, bool)) for v in d.values())
    again = BPETokenizer.from_dict(d)
    assert again.joint == tok.joint and again.vocab_size == tok.vocab_size
    for side, texts in (("src", SRC), ("tgt", TGT)):
        assert again.encode(texts, side) == tok.encode(texts, side)
    assert again.encode(["a </s>"], "src") == tok.encode(["a </s>"], "src")
    assert again == tok


def test_save_and_load(tok: BPETokenizer, tmp_path) -> None:
    tok.save(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    expected = ["tokenizer.json"] if tok.joint else ["tokenizer_src.json", "tokenizer_tgt.json"]
    assert names == sorted([*expected, "tokenizer_config.json"])
    # the json files are plain HF tokenizers
    assert Tokenizer.from_file(str(tmp_path / expected[-1])).token_to_id("</s>") == EOS_ID
    again = BPETokenizer.load(tmp_path)
    assert again == tok and again.encode(TGT, "tgt") == tok.encode(TGT, "tgt")


def test_joint_and_separate_vocabularies_differ() -> None:
    joint = BPETokenizer.train(SRC * 3, TGT * 3, vocab_size=120, joint=True)
    separate = BPETokenizer.train(SRC * 3, TGT * 3, vocab_size=120, joint=False)
    assert joint.joint and not separate.joint
    assert joint.src is joint.tgt
    assert separate.src.get_vocab() != separate.tgt.get_vocab()
    # German-only merges exist only on the target side of the separate tokenizer
    assert "Ä" not in separate.src.get_vocab() and "Ä" in separate.tgt.get_vocab()


def test_training_is_deterministic() -> None:
    a = BPETokenizer.train(SRC * 3, TGT * 3, vocab_size=150)
    b = BPETokenizer.train(SRC * 3, TGT * 3, vocab_size=150)
    assert a == b


def test_bad_arguments_are_named(tok: BPETokenizer, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"vocab_size \(5\) must be at least 8"):
        BPETokenizer.train(SRC, TGT, vocab_size=5)
    with pytest.raises(ValueError, match="cannot train a tokenizer on 0 source"):
        BPETokenizer.train([], TGT, vocab_size=100)
    with pytest.raises(ValueError, match="side must be 'src' or 'tgt', got 'de'"):
        tok.encode(["x"], "de")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"decode expects ids of shape \(B, T\), got \(3,\)"):
        tok.decode(torch.tensor([4, 5, 3]), "src")
    with pytest.raises(ValueError, match=r"lacks \['src'\]"):
        BPETokenizer.from_dict({"vocab_size": 10, "joint": True})
    with pytest.raises(FileNotFoundError, match="tokenizer_config.json not found"):
        BPETokenizer.load(tmp_path / "nothing")
    with pytest.raises(ValueError, match=r"over vocab_size \(50\)"):
        BPETokenizer(tok.src, tok.tgt, vocab_size=50)


# Loads the two modules by path: importing the package would import Lightning, several seconds per process.
_REPRO = """
import importlib.util, sys
def load(name):
    spec = importlib.util.spec_from_file_location(name, sys.argv[1] + "/" + name + ".py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
pairs = load("synthetic").synthetic_pairs("synthetic", n=3000, seed=0, max_words=15)
BPETokenizer = load("tokenizer").BPETokenizer
print(repr(pairs))
for joint in (True, False):
    tok = BPETokenizer.train([p[0] for p in pairs], [p[1] for p in pairs], vocab_size=600, joint=joint)
    print(tok.src.to_str())
    print(tok.tgt.to_str())
"""


@pytest.mark.integration
def test_corpus_and_tokenizer_are_identical_across_processes() -> None:
    """Python's string hashing (PYTHONHASHSEED) and the Rust thread count (RAYON_NUM_THREADS) change between
    processes; neither may change the generated corpus or the learnt merges (joint and separate)."""
    outputs = []
    for hashseed, threads in (("1", "1"), ("2", "2"), ("3", "4")):
        env = {**os.environ, "PYTHONHASHSEED": hashseed, "RAYON_NUM_THREADS": threads, "OMP_NUM_THREADS": "1"}
        env.pop("TOKENIZERS_PARALLELISM", None)
        proc = subprocess.run(
            [sys.executable, "-c", _REPRO, str(Path(tokenizer_module.__file__).parent)],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append(proc.stdout.splitlines())
    assert len(outputs[0]) == 5
    assert all(json.loads(line)["model"]["merges"] for line in outputs[0][1:])  # something was learnt
    assert outputs[1] == outputs[0]
    assert outputs[2] == outputs[0]
