"""TranslationDataModule: splits and direction, dedup, filters, bad input, batches, prediction input, the
tokenizer (trained on the training split, saved to the run folder, restored from a checkpoint, given by
``use_tokenizer``) and a real Tatoeba file when present."""

from __future__ import annotations

import gzip
import io
import logging
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.trainer.states import TrainerFn

from lightning_tf.text import TranslationDataModule
from lightning_tf.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, BPETokenizer
from tests.helpers.text import DE, EN, small_dm, split_text, tatoeba_rows, write_tsv

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TATOEBA = SHARED / "tatoeba_deu_eng" / "deu_eng.tsv"


# ---------------------------------------------------------------------------------------- bad input


def test_reader_errors_reach_setup(tmp_path: Path) -> None:
    """What a reader rejects (bad UTF-8, a missing file) stops ``setup`` with the reader's message."""
    path = tmp_path / "bad.tsv"
    path.write_bytes(b"Hi.\tHallo!\nRun!\tLauf!\nBad\tSch\xf6n\n")  # latin-1 "ö"
    dm = small_dm(dataset=None, train_file=str(path))
    with pytest.raises(ValueError, match=r"bad\.tsv:3: not valid UTF-8"):
        dm.setup("fit")
    with pytest.raises(FileNotFoundError, match="no such file"):
        small_dm(dataset=None, train_file=str(tmp_path / "nowhere" / "x.tsv")).setup("fit")


def test_empty_lines_are_dropped_counted_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = tatoeba_rows()
    rows[4] = ""  # blank line
    rows[7] = "Stop it.\t   "  # empty target
    path = write_tsv(tmp_path / "deu.txt", rows)
    dm = small_dm(dataset=None, train_file=str(path), min_frequency=1)
    with caplog.at_level(logging.INFO):
        dm.setup("fit")
    assert dm.stats["train/empty_dropped"] == 2 and dm.stats["train/lines"] == 20
    assert "dropped 2 of 20 lines with an empty sentence" in caplog.text


def test_empty_split_is_an_error(tmp_path: Path) -> None:
    empty = write_tsv(tmp_path / "empty.tsv", ["Hi.\t ", "  \tHallo!"])  # text, but every pair lacks a side
    train = write_tsv(tmp_path / "deu.txt", tatoeba_rows())
    with pytest.raises(ValueError, match=r"the test split is empty \(.*empty\.tsv: lines=2, empty_dropped=2\)"):
        small_dm(dataset=None, train_file=str(train), test_file=str(empty)).setup("fit")
    with pytest.raises(ValueError, match=r"the train split is empty \(.*empty\.tsv: lines=2, empty_dropped=2\)"):
        small_dm(dataset=None, train_file=str(empty)).setup("fit")
    with pytest.raises(ValueError, match=r"20 pairs cannot give 23 held-out pairs"):
        small_dm(dataset=None, train_file=str(train), n_val=3, n_test=20).setup("fit")


@pytest.mark.parametrize("content", ["", " \n\t\n\n"], ids=["empty", "whitespace"])
@pytest.mark.parametrize("role", ["train_tsv", "test_tsv", "aligned", "predict"])
def test_an_empty_or_blank_file_is_named(tmp_path: Path, content: str, role: str) -> None:
    """A file with no sentence says so and names itself, wherever it enters: not as "0 pairs cannot give
    6 held-out pairs" or an empty split further on."""
    train = write_tsv(tmp_path / "deu.txt", tatoeba_rows())
    bad = tmp_path / ("x.de" if role == "aligned" else "x.txt")
    bad.write_text(content, encoding="utf-8")
    name = r"x\.(de|txt)"
    expected = f"{name}: the file is empty" if not content else f"{name}: holds no sentences, only 3 blank lines"
    if role == "aligned":
        (tmp_path / "x.en").write_text("Hi.\nRun!\nGo.\n", encoding="utf-8")
    dm = {
        "train_tsv": lambda: small_dm(dataset=None, train_file=str(bad)),
        "test_tsv": lambda: small_dm(dataset=None, train_file=str(train), test_file=str(bad)),
        "aligned": lambda: small_dm(dataset=None, train_file=str(train), val_file=str(tmp_path / "x")),
        "predict": lambda: small_dm(dataset="copy", n_train=50, vocab_size=40, predict_file=str(bad)),
    }[role]()
    with pytest.raises(ValueError, match=expected):
        dm.setup("predict" if role == "predict" else "fit")


def test_over_long_pairs_are_dropped_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = tatoeba_rows()
    long = " ".join(["word"] * 30)
    rows += [f"{long}.\tkurz.", f"short.\t{long}."]
    path = write_tsv(tmp_path / "deu.txt", rows)
    dm = small_dm(
        dataset=None,
        train_file=str(path),
        val_file=str(path),
        test_file=str(path),
        max_length=20,
        dedup="none",
        min_frequency=1,
    )
    with caplog.at_level(logging.INFO):
        dm.setup("fit")
    for split in ("train", "val", "test"):
        assert dm.stats[f"{split}/too_long_dropped"] == 2
        assert len(dm.datasets[split]) == 20
        assert max(dm.datasets[split].src_ids.lengths.max(), dm.datasets[split].tgt_ids.lengths.max()) <= 20
    assert "dropped 2 of 22 pairs longer than max_length=20 tokens" in caplog.text
    with pytest.raises(ValueError, match="the train split is empty after dropping pairs over max_length=1"):
        small_dm(dataset=None, train_file=str(path), max_length=1, max_tokens=64, n_val=1, n_test=1).setup("fit")


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="set dataset .* or train_file"):
        TranslationDataModule(dataset=None)
    with pytest.raises(ValueError, match="set dataset to null to read train_file"):
        TranslationDataModule(dataset="synthetic", train_file="x.tsv")
    with pytest.raises(ValueError, match=r"max_tokens \(50\) must fit one pair of max_length \(100\)"):
        TranslationDataModule(max_tokens=50)
    with pytest.raises(ValueError, match="set batch_size, max_tokens or both"):
        TranslationDataModule(max_tokens=None)
    with pytest.raises(ValueError, match="synthetic corpus is English-German"):
        TranslationDataModule(src_lang="fr")
    with pytest.raises(ValueError, match=r"n_val \(0\) must be >= 1"):
        TranslationDataModule(n_val=0)
    with pytest.raises(RuntimeError, match="call setup"):
        TranslationDataModule().train_dataloader()


# ---------------------------------------------------------------------------------------- splits


def test_seeded_split_of_one_file_and_direction(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "deu.txt", tatoeba_rows())
    kw = dict(dataset=None, train_file=str(path), src_lang="de", tgt_lang="en", min_frequency=1, dedup="none")
    a, b, c = small_dm(seed=1, **kw), small_dm(seed=1, **kw), small_dm(seed=2, **kw)
    for dm in (a, b, c):
        dm.setup("fit")
    assert a.vocab_size == 200 and a.pad_id == PAD_ID
    assert split_text(a, "test") == split_text(b, "test") != split_text(c, "test")
    assert (len(split_text(a, "val")[0]), len(split_text(a, "test")[0])) == (3, 3)
    # de->en: the source side holds German, the target the English sentence of the same row
    for s, t in zip(*split_text(a, "train"), strict=True):
        assert DE.index(s) == EN.index(t) or s == "Hallo!"
    everything = {*split_text(a, "train")[1], *split_text(a, "val")[1], *split_text(a, "test")[1]}
    assert everything == set(EN)


def test_train_pairs_that_occur_in_test_are_removed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    train = write_tsv(tmp_path / "train.tsv", [*tatoeba_rows(), "Hi.\tGrüß Gott!", "Hi.\tHallo!"])
    test = write_tsv(tmp_path / "test.tsv", ["Hi.\tHallo!", "Cheers!\tProst!", "Unseen.\tNeu."])
    val = write_tsv(tmp_path / "val.tsv", ["We know.\tWir wissen es."])
    kw = dict(dataset=None, train_file=str(train), val_file=str(val), test_file=str(test), min_frequency=1)
    by_pair = small_dm(dedup="pair", **kw)
    with caplog.at_level(logging.INFO):
        by_pair.setup("fit")
    # "Hi.\tHallo!" twice, "Cheers!", "We know." (val)
    assert by_pair.stats["train/overlap_removed"] == 4
    assert "removed 4 training pairs whose pair also occurs in val or test" in caplog.text
    train_pairs = set(zip(*split_text(by_pair, "train"), strict=True))
    assert ("Hi.", "Hallo!") not in train_pairs and ("Hi.", "Grüß Gott!") in train_pairs
    by_source = small_dm(dedup="source", **kw)
    by_source.setup("fit")
    assert by_source.stats["train/overlap_removed"] == 5  # also "Hi.\tGrüß Gott!"
    assert "Hi." not in split_text(by_source, "train")[0]
    either = small_dm(dedup="either", src_lang="de", tgt_lang="en", **kw)
    either.setup("fit")
    assert either.stats["train/overlap_removed"] == 6  # also "Hello!\tHallo!" (German "Hallo!" is a test source)
    kept = small_dm(dedup="none", **kw)
    kept.setup("fit")
    assert kept.stats["train/overlap_removed"] == 0 and len(kept.datasets["train"]) == 22


def test_aligned_files_per_split(tmp_path: Path) -> None:
    for split, rng in (("train", range(0, 14)), ("val", range(14, 17)), ("test", range(17, 20))):
        (tmp_path / f"{split}.en").write_text("".join(EN[i] + "\n" for i in rng), encoding="utf-8")
        with gzip.open(tmp_path / f"{split}.de.gz", "wt", encoding="utf-8") as f:
            f.write("".join(DE[i] + "\n" for i in rng))
    dm = small_dm(
        dataset=None,
        train_file=str(tmp_path / "train"),
        val_file=str(tmp_path / "val"),
        test_file=str(tmp_path / "test"),
        src_lang="de",
        tgt_lang="en",
        min_frequency=1,
    )
    dm.setup("fit")
    assert split_text(dm, "val")[0] == DE[14:17] and split_text(dm, "test")[1] == EN[17:20]
    assert len(dm.datasets["train"]) == 14


def test_n_train_caps_file_pairs(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "deu.txt", tatoeba_rows())
    dm = small_dm(dataset=None, train_file=str(path), n_train=5, min_frequency=1)
    dm.setup("fit")
    assert len(dm.datasets["train"]) == 5


def test_tokenizer_is_trained_on_train_split_only(tmp_path: Path) -> None:
    rows = tatoeba_rows()
    test = write_tsv(tmp_path / "test.tsv", ["Xylophon zzz.\tQuixotic qqq."])
    dm = small_dm(dataset=None, train_file=str(write_tsv(tmp_path / "t.tsv", rows)), test_file=str(test), n_val=2)
    dm.setup("fit")
    assert dm.tokenizer is not None
    vocab = dm.tokenizer.src.get_vocab()
    assert "X" not in vocab and "Q" not in vocab and "z" not in vocab
    assert 1 in dm.datasets["test"].src_ids[0].tolist()  # <unk>


# ---------------------------------------------------------------------------------------- batches


@pytest.fixture(scope="module")
def synthetic_dm() -> TranslationDataModule:
    dm = TranslationDataModule(n_train=3000, n_val=100, n_test=100, vocab_size=800, max_tokens=1024, seed=3)
    dm.setup("fit")
    return dm


def test_batches_frame_and_pad_the_pairs(synthetic_dm: TranslationDataModule) -> None:
    tok = synthetic_dm.tokenizer
    assert isinstance(tok, BPETokenizer) and tok.vocab_size == synthetic_dm.vocab_size == 800
    train_loader = synthetic_dm.train_dataloader()
    order = iter(train_loader.batch_sampler)
    for loader in (train_loader, synthetic_dm.val_dataloader(), synthetic_dm.test_dataloader()):
        batch = next(iter(loader))
        src, tgt = batch["src"], batch["tgt"]
        assert src.dtype == tgt.dtype == torch.long and src.shape[0] == tgt.shape[0]
        assert (tgt[:, 0] == BOS_ID).all() and src.max() < 800
        if loader is train_loader:  # the training split keeps no raw text: its rows are the corpus's ids
            assert set(batch) == {"src", "tgt"}
            d = synthetic_dm.datasets["train"]
            expected = [(d.src_ids[i].tolist(), d.tgt_ids[i].tolist()) for i in next(order)]
        else:
            expected = [
                (tok.encode([s], "src")[0], tok.encode([t], "tgt")[0])
                for s, t in zip(batch["src_text"], batch["tgt_text"], strict=True)
            ]
            assert tok.decode(tgt, "tgt") == batch["tgt_text"] and tok.decode(src, "src") == batch["src_text"]
        assert len(expected) == src.shape[0]
        for b, (s_ids, t_ids) in enumerate(expected):
            s, t = src[b][src[b] != PAD_ID].tolist(), tgt[b][tgt[b] != PAD_ID].tolist()
            assert s == [*s_ids, EOS_ID] and t == [BOS_ID, *t_ids, EOS_ID]
            assert (src[b, len(s) :] == PAD_ID).all() and (tgt[b, len(t) :] == PAD_ID).all()  # right padding


def test_eval_loaders_keep_every_pair_once(synthetic_dm: TranslationDataModule) -> None:
    for split, loader in (("val", synthetic_dm.val_dataloader()), ("test", synthetic_dm.test_dataloader())):
        texts = [t for batch in loader for t in batch["tgt_text"]]
        assert sorted(texts) == sorted(synthetic_dm.datasets[split].tgt_text)


def test_train_padding_fraction_is_logged_and_low(synthetic_dm: TranslationDataModule, caplog) -> None:
    with caplog.at_level(logging.INFO):
        synthetic_dm.train_dataloader()
    assert synthetic_dm.padding_fraction is not None and synthetic_dm.padding_fraction < 0.1
    assert "% padding" in caplog.text


def test_predict_batches_carry_line_numbers(tmp_path: Path, synthetic_dm: TranslationDataModule) -> None:
    lines = [
        "The dog sees the cat.",
        "",
        "My friends have bought twenty-one apples.",
        "I buy a car.",
        " ".join(["the red car"] * 40),
    ]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    dm = TranslationDataModule(
        n_train=3000,
        n_val=100,
        n_test=100,
        vocab_size=800,
        max_tokens=1024,
        seed=3,
        predict_file=str(tmp_path / "in.txt"),
        batch_size=2,
    )
    dm.tokenizer, dm.datasets = synthetic_dm.tokenizer, synthetic_dm.datasets
    dm.setup("predict")
    with pytest.warns(UserWarning, match="truncated 1 of 5 lines to max_length=100"):
        loader = dm.predict_dataloader()  # the lines are encoded once the tokenizer is known
    got = {}
    for batch in loader:
        assert batch["index"].dtype == torch.long and len(batch["src_text"]) <= 2
        for i, text, row in zip(batch["index"].tolist(), batch["src_text"], batch["src"], strict=True):
            got[i] = (text, row)
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert [got[i][0] for i in range(5)] == lines
    assert got[1][1][0] == EOS_ID  # an empty line still gets an output line
    assert dm.tokenizer.decode(got[2][1][None], "src") == [lines[2]]
    with pytest.raises(RuntimeError, match="set predict_file"):
        synthetic_dm.predict_dataloader()


def test_algorithmic_tasks() -> None:
    for task, fn in (("copy", lambda w: w), ("reverse", lambda w: w[::-1]), ("sort", sorted)):
        dm = TranslationDataModule(dataset=task, n_train=300, n_val=20, n_test=20, vocab_size=40, max_words=8)
        dm.setup("fit")
        src, tgt = split_text(dm, "train")
        assert all(t.split() == list(fn(s.split())) for s, t in zip(src, tgt, strict=True))
        assert all(2 <= len(s.split()) <= 8 for s in src)
        batch = next(iter(dm.val_dataloader()))
        assert dm.tokenizer is not None and dm.tokenizer.decode(batch["tgt"], "tgt") == batch["tgt_text"]


def test_state_dict_restores_the_tokenizer(synthetic_dm: TranslationDataModule) -> None:
    state = synthetic_dm.state_dict()
    other = TranslationDataModule(n_train=3000, n_val=100, n_test=100, vocab_size=800, max_tokens=1024, seed=4)
    other.setup("fit")
    assert other.tokenizer != synthetic_dm.tokenizer
    other.load_state_dict(torch.load(_roundtrip(state), weights_only=True))
    assert other.tokenizer == synthetic_dm.tokenizer
    d = other.datasets["test"]
    assert d.src_ids[0].tolist() == other.tokenizer.encode([d.src_text[0]], "src")[0]  # encoded with the restored one


def test_use_tokenizer_replaces_learning_one(synthetic_dm: TranslationDataModule) -> None:
    """A given tokenizer (a trained model's) is used instead of learning one on this DataModule's split."""
    tok = synthetic_dm.tokenizer
    assert tok is not None
    other = TranslationDataModule(n_train=3000, n_val=100, n_test=100, vocab_size=800, max_tokens=1024, seed=4)
    other.use_tokenizer(tok)  # before setup; seed 4 alone learns another one (test above)
    other.setup("fit")
    assert other.tokenizer is tok
    d = other.datasets["test"]
    assert d.src_ids[0].tolist() == tok.encode([d.src_text[0]], "src")[0]
    assert d.tgt_ids[0].tolist() == tok.encode([d.tgt_text[0]], "tgt")[0]
    with pytest.raises(ValueError, match=r"tokenizer vocab_size \(800\) differs from vocab_size \(900\)"):
        TranslationDataModule(vocab_size=900).use_tokenizer(tok)


def _roundtrip(obj: object) -> object:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_tokenizer_dir_is_reused(tmp_path: Path, synthetic_dm: TranslationDataModule) -> None:
    assert synthetic_dm.tokenizer is not None
    synthetic_dm.tokenizer.save(tmp_path / "tok")
    dm = TranslationDataModule(n_train=500, n_val=50, n_test=50, vocab_size=800, tokenizer_dir=str(tmp_path / "tok"))
    dm.setup("fit")
    assert dm.tokenizer == synthetic_dm.tokenizer
    # prediction with a saved tokenizer reads no training data
    (tmp_path / "in.txt").write_text("I buy a car.\n", encoding="utf-8")
    pred = TranslationDataModule(
        dataset=None,
        train_file=str(tmp_path / "absent.tsv"),
        vocab_size=800,
        tokenizer_dir=str(tmp_path / "tok"),
        predict_file=str(tmp_path / "in.txt"),
    )
    pred.setup("predict")
    assert pred.datasets == {} and next(iter(pred.predict_dataloader()))["src_text"] == ["I buy a car."]
    with pytest.raises(ValueError, match=r"tokenizer vocab_size \(800\) differs from vocab_size \(900\)"):
        TranslationDataModule(
            n_train=500, n_val=50, n_test=50, vocab_size=900, tokenizer_dir=str(tmp_path / "tok")
        ).setup()


class _Recorder(pl.LightningModule):
    """Consumes batches and records their first source sentences per epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.seen: dict[int, list[tuple[int, ...]]] = {}

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).extend(tuple(r[r != PAD_ID].tolist()) for r in batch["src"])
        return self.w * batch["src"].float().mean()

    def predict_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return batch["index"]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_with_a_trainer_epochs_reshuffle_and_the_tokenizer_is_saved(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("I buy a car.\nThe dog sees the cat.\n", encoding="utf-8")
    dm = TranslationDataModule(
        n_train=400, n_val=20, n_test=20, vocab_size=500, batch_size=32, predict_file=str(tmp_path / "in.txt")
    )
    model = _Recorder()
    trainer = pl.Trainer(
        max_epochs=2,
        default_root_dir=tmp_path,
        logger=CSVLogger(tmp_path),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=dm)
    rows = sorted((*r.tolist(), EOS_ID) for r in dm.datasets["train"].src_ids)  # every training pair, once
    assert sorted(model.seen[0]) == sorted(model.seen[1]) == rows
    assert model.seen[0] != model.seen[1]  # Lightning's set_epoch reached the batch sampler
    # in the run folder, beside where ModelCheckpoint puts "checkpoints"
    assert BPETokenizer.load(tmp_path / "lightning_logs" / "version_0" / "tokenizer") == dm.tokenizer
    metrics = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text()
    assert "data/padding_fraction" in metrics and "data/train_pairs" in metrics
    out = trainer.predict(model, datamodule=dm)
    smoke = TranslationDataModule(n_train=400, n_val=20, n_test=20, vocab_size=500, batch_size=32)
    pl.Trainer(
        fast_dev_run=True,
        default_root_dir=tmp_path / "smoke",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(_Recorder(), datamodule=smoke)
    assert not (tmp_path / "smoke").exists()  # a smoke run leaves no files
    assert sorted(torch.cat(out).tolist()) == [0, 1]  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- Tatoeba


@pytest.mark.skipif(not TATOEBA.is_file(), reason=f"{TATOEBA} not present")
def test_tatoeba_de_en(caplog: pytest.LogCaptureFixture) -> None:
    dm = TranslationDataModule(
        dataset=None,
        train_file=str(TATOEBA),
        src_lang="de",
        tgt_lang="en",
        vocab_size=8000,
        n_val=500,
        n_test=1000,
        seed=0,
    )
    with caplog.at_level(logging.INFO):
        dm.setup("fit")
    s = dm.stats
    assert s["train/lines"] == 50_001 and s["train/empty_dropped"] == 0
    assert (s["val/pairs"], s["test/pairs"]) == (500, 1000)
    # German sentences repeat with other English translations: those in val/test leave the training split
    assert 100 < s["train/overlap_removed"] < 1000
    assert s["train/pairs"] == 50_001 - 1500 - s["train/overlap_removed"] - s["train/too_long_dropped"]
    held_out = set(split_text(dm, "val")[0]) | set(split_text(dm, "test")[0])
    assert not held_out & set(split_text(dm, "train")[0])
    test = dm.datasets["test"]
    assert dm.tokenizer is not None and dm.tokenizer.decode([test.tgt_ids[0].tolist()], "tgt") == [test.tgt_text[0]]
    # Tatoeba is German->English here: the target side reads as English
    assert sum(t.split()[0] in {"I", "Tom", "You", "We", "He", "It"} for t in test.tgt_text) > 300
    assert dm.train_dataloader() is not None and dm.padding_fraction is not None and dm.padding_fraction < 0.1


def test_a_restored_tokenizer_replaces_the_one_saved_at_setup(tmp_path: Path) -> None:
    """``--ckpt_path`` restores the DataModule after ``setup``: the run folder must then hold the checkpoint's
    tokenizer, not the one ``setup`` learnt (which the model never used)."""
    trained = TranslationDataModule(n_train=300, n_val=20, n_test=20, vocab_size=500, seed=1)
    trained.setup("fit")
    dm = TranslationDataModule(n_train=300, n_val=20, n_test=20, vocab_size=500, seed=2)
    dm.trainer = pl.Trainer(default_root_dir=tmp_path, logger=CSVLogger(tmp_path), enable_progress_bar=False)
    dm.setup("test")
    saved = tmp_path / "lightning_logs" / "version_0" / "tokenizer"
    assert BPETokenizer.load(saved) == dm.tokenizer != trained.tokenizer
    dm.load_state_dict(trained.state_dict())
    assert BPETokenizer.load(saved) == trained.tokenizer


def test_predict_setup_reads_only_the_predict_file(tmp_path: Path) -> None:
    """``setup("predict")`` reads no training data (the TSV it names is gone), learns no tokenizer and writes
    no tokenizer folder; the lines are encoded once the checkpoint's tokenizer is restored (``load_state_dict``,
    as Lightning does under ``ckpt_path`` after ``setup``), and without any tokenizer the loader says what to give."""
    trained = TranslationDataModule(dataset="copy", n_train=200, n_val=8, n_test=8, vocab_size=40, seed=1)
    trained.setup("fit")
    (tmp_path / "in.txt").write_text("a b c\n\nc d\n", encoding="utf-8")
    dm = TranslationDataModule(
        dataset=None, train_file=str(tmp_path / "moved_away.tsv"), vocab_size=40, predict_file=str(tmp_path / "in.txt")
    )
    dm.trainer = pl.Trainer(default_root_dir=tmp_path, logger=CSVLogger(tmp_path), enable_progress_bar=False)
    dm.trainer.state.fn = TrainerFn.PREDICTING  # as Trainer.predict sets it before prepare_data
    dm.prepare_data()
    dm.setup("predict")
    assert dm.tokenizer is None and dm.corpus is None and dm.datasets == {}
    assert dm.predict_text == ["a b c", "", "c d"]
    no_tokenizer = r"predict needs the trained model's tokenizer: give --ckpt_path .*data\.tokenizer_dir"
    with pytest.raises(ValueError, match=no_tokenizer):
        dm.predict_dataloader()
    dm.load_state_dict(trained.state_dict())
    batches = list(dm.predict_dataloader())
    assert sorted(i for b in batches for i in b["index"].tolist()) == [0, 1, 2]
    first = next(b for b in batches if 0 in b["index"].tolist())
    row = first["src"][first["index"].tolist().index(0)]
    assert trained.tokenizer.decode(row[None], "src") == ["a b c"]
    assert not any(tmp_path.rglob("tokenizer*")), "predict writes no tokenizer folder"
    only_predict = TranslationDataModule(dataset=None, vocab_size=40, predict_file=str(tmp_path / "in.txt"))
    only_predict.setup("predict")
    assert only_predict.predict_text == ["a b c", "", "c d"]
    with pytest.raises(ValueError, match="set dataset .* or train_file: predict_file alone only predicts"):
        only_predict.setup("fit")
