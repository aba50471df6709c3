"""Prepared corpora: built once and reused, rebuilt for a changed input line or setting, never used when
damaged or unfinished; equal to encoding the pairs directly; memory-mapped datasets that pickle small."""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lightning_tf.text import TranslationDataModule, corpus
from lightning_tf.text.corpus import CorpusSpec, prepare_corpus
from lightning_tf.text.synthetic import english_german_pairs
from lightning_tf.text.tokenizer import BPETokenizer
from tests.helpers.text import small_dm, split_text, tatoeba_rows, write_tsv

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The folders ``build_corpus`` is asked to fill, in order."""
    seen: list[Path] = []
    real = corpus.build_corpus

    def counting(spec: CorpusSpec, out: Path, progress: bool = True) -> dict:
        seen.append(out)
        return real(spec, out, progress)

    monkeypatch.setattr(corpus, "build_corpus", counting)
    return seen


def _ids(dm: TranslationDataModule, split: str) -> list[tuple[list[int], list[int]]]:
    d = dm.datasets[split]
    return [(d.src_ids[i].tolist(), d.tgt_ids[i].tolist()) for i in range(len(d))]


def test_a_build_reads_its_inputs_checksum_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_tsv(tmp_path / "deu.txt", tatoeba_rows())
    seen: list[str] = []
    real = corpus.file_identity
    monkeypatch.setattr(corpus, "file_identity", lambda p: seen.append(Path(p).name) or real(p))
    spec = CorpusSpec(dataset=None, train_file=str(path), n_val=2, n_test=2, min_frequency=1)
    prepare_corpus(spec, tmp_path / "cache", progress=False)
    assert seen == ["deu.txt"]  # the key, the build and its manifest share one fingerprint


def test_a_second_run_reuses_the_prepared_corpus(tmp_path: Path, builds: list[Path], caplog) -> None:
    path = write_tsv(tmp_path / "deu.txt", tatoeba_rows())
    kw = dict(dataset=None, train_file=str(path), min_frequency=1, cache_dir=str(tmp_path / "cache"))
    first = small_dm(**kw)
    first.prepare_data()
    assert first.datasets == {} and first.tokenizer is None  # prepare_data assigns no state
    first.setup("fit")
    assert len(builds) == 1 and builds[0].parent == tmp_path / "cache" / "text"
    second = small_dm(**kw)
    with caplog.at_level(logging.INFO):
        second.prepare_data()
        second.setup("fit")
    assert len(builds) == 1, "the second run built the corpus again"
    assert "reusing the prepared corpus" in caplog.text and str(tmp_path / "cache") in caplog.text
    assert second.tokenizer == first.tokenizer and second.stats == first.stats
    for split in ("train", "val", "test"):
        assert _ids(second, split) == _ids(first, split)
        assert split_text(second, split) == split_text(first, split)


def test_a_changed_line_or_setting_is_not_reused(tmp_path: Path, builds: list[Path]) -> None:
    rows = tatoeba_rows()
    path = write_tsv(tmp_path / "deu.txt", rows)
    kw = dict(dataset=None, train_file=str(path), min_frequency=1, dedup="none", n_val=2, n_test=2)
    small_dm(**kw).setup("fit")
    rows[5] = rows[5].replace("Hi.", "Ho.", 1) if "Hi." in rows[5] else "Xy.\t" + rows[5].split("\t", 1)[1]
    write_tsv(path, rows)  # one line changed, same size, possibly the same modification time
    changed = small_dm(**kw)
    changed.setup("fit")
    assert len(builds) == 2
    everything = {s for split in ("train", "val", "test") for s in split_text(changed, split)[0]}
    assert rows[5].split("\t")[0] in everything
    keys = {small_dm(**kw).corpus_spec().key()}
    for setting in (
        {"vocab_size": 100},
        {"min_frequency": 2},
        {"max_length": 30},
        {"dedup": "pair"},
        {"seed": 1},
        {"joint_vocab": False},
        {"n_val": 3},
        {"src_lang": "de", "tgt_lang": "en"},
    ):
        key = small_dm(**{**kw, **setting}).corpus_spec().key()
        assert key not in keys, setting
        keys.add(key)
    tok = changed.tokenizer
    assert tok is not None
    given = small_dm(**kw)
    given.use_tokenizer(tok)  # a given tokenizer is part of the key, its training settings are not
    assert given.corpus_spec(tok).key() not in keys


def test_a_damaged_corpus_is_rebuilt_and_said(tmp_path: Path, builds: list[Path], caplog) -> None:
    path = write_tsv(tmp_path / "deu.txt", tatoeba_rows())
    kw = dict(dataset=None, train_file=str(path), min_frequency=1)
    dm = small_dm(**kw)
    dm.setup("fit")
    before = _ids(dm, "train")
    ids = dm.corpus.path / "train.src.ids"
    ids.write_bytes(ids.read_bytes()[:-4])  # a truncated file
    again = small_dm(**kw)
    with pytest.warns(UserWarning, match=r"cannot be used \(train\.src\.ids has \d+ bytes, the manifest says"):
        again.setup("fit")
    assert len(builds) == 2 and _ids(again, "train") == before


def test_an_unfinished_build_is_removed_and_said(tmp_path: Path, builds: list[Path]) -> None:
    spec = CorpusSpec(dataset="copy", n_train=100, n_val=5, n_test=5, vocab_size=40)
    stale = tmp_path / "text" / f"{spec.key()}.tmp12345"
    stale.mkdir(parents=True)
    (stale / "train.src.ids").write_bytes(b"\x00" * 10)  # what a killed build leaves
    with pytest.warns(UserWarning, match=r"removing .*\.tmp12345: an unfinished build of this corpus"):
        path = prepare_corpus(spec, tmp_path)
    assert not stale.exists() and path == tmp_path / "text" / spec.key() and len(builds) == 1


@pytest.mark.integration
def test_a_killed_build_leaves_nothing_usable_and_the_next_run_builds(tmp_path: Path) -> None:
    """A process killed (SIGKILL) while encoding leaves no corpus folder; the next run says what it removes
    and builds a complete corpus."""
    code = f"""
import os, signal
from lightning_tf.text import corpus
real = corpus._encode
def dying(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
corpus._encode = dying
corpus.prepare_corpus(corpus.CorpusSpec(dataset="copy", n_train=200, n_val=5, n_test=5, vocab_size=40), {str(tmp_path)!r})
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=300)
    assert done.returncode == -signal.SIGKILL
    spec = CorpusSpec(dataset="copy", n_train=200, n_val=5, n_test=5, vocab_size=40)
    assert not (tmp_path / "text" / spec.key()).exists() and list((tmp_path / "text").glob("*.tmp*"))
    with pytest.warns(UserWarning, match="an unfinished build of this corpus, left by an interrupted run"):
        path = prepare_corpus(spec, tmp_path)
    assert (path / "manifest.json").is_file() and not list((tmp_path / "text").glob("*.tmp*"))


def test_prepared_ids_equal_encoding_the_generated_pairs_directly() -> None:
    """The streamed pipeline (text columns on disk, BPE from batches, chunked encoding) gives what
    encoding the generated pairs in memory gives, with a tokenizer trained on the lists themselves."""
    dm = TranslationDataModule(n_train=3000, n_val=100, n_test=100, vocab_size=500, seed=5)
    dm.setup("fit")
    pairs = english_german_pairs(3200, 5)
    splits = {"test": pairs[:100], "val": pairs[100:200], "train": pairs[200:]}
    held = {s for s, _ in splits["val"] + splits["test"]}
    splits["train"] = [p for p in splits["train"] if p[0] not in held]  # dedup="source"
    train_src, train_tgt = [p[0] for p in splits["train"]], [p[1] for p in splits["train"]]
    tok = BPETokenizer.train(train_src, train_tgt, 500)
    assert tok == dm.tokenizer
    for split, ps in splits.items():
        src, tgt = tok.encode([p[0] for p in ps], "src"), tok.encode([p[1] for p in ps], "tgt")
        assert _ids(dm, split) == list(zip(src, tgt, strict=True))
    assert split_text(dm, "test") == ([p[0] for p in splits["test"]], [p[1] for p in splits["test"]])


def test_datasets_are_memory_mapped_and_pickle_small() -> None:
    dm = TranslationDataModule(dataset="copy", n_train=20_000, n_val=50, n_test=50, vocab_size=40)
    dm.setup("fit")
    train = dm.datasets["train"]
    src, tgt, src_text, tgt_text = train[123]
    assert isinstance(train.src_ids.values, np.memmap) and np.shares_memory(src, train.src_ids.values)
    assert src_text is None and tgt_text is None  # the training split keeps no raw text
    assert len(pickle.dumps(train)) < 2000 < train.src_ids.values.nbytes
    assert dm.datasets["val"][0][2] == dm.datasets["val"].src_text[0] != ""


def test_the_default_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LIGHTNING_TF_CACHE", str(tmp_path / "a"))
    assert corpus.default_cache_root() == tmp_path / "a"
    monkeypatch.delenv("LIGHTNING_TF_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert corpus.default_cache_root() == tmp_path / "xdg" / "lightning-tf"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert corpus.default_cache_root() == tmp_path / "home" / ".cache" / "lightning-tf"
    assert os.environ.get("LIGHTNING_TF_CACHE") is None


@pytest.mark.integration
def test_spawned_workers_map_the_corpus_and_give_the_same_batches() -> None:
    """Workers started with ``spawn`` receive the dataset as its paths and map the files themselves: their
    batches equal those of the main process."""
    dm = TranslationDataModule(dataset="copy", n_train=2000, n_val=20, n_test=20, vocab_size=40, batch_size=64)
    dm.setup("fit")
    plain = [b["src"].tolist() for b in dm.train_dataloader()]
    dm.hparams.num_workers = 1
    loader = dm.train_dataloader()
    loader.multiprocessing_context = "spawn"
    assert [b["src"].tolist() for b in loader] == plain
