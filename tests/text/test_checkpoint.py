"""A checkpoint holds the tokenizer as plain data: it loads with ``weights_only=True`` and a fresh
process translates raw text from it without any DataModule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer

from lightning_tf.text import BPETokenizer, Seq2SeqTransformer, TranslationDataModule, TranslationWriter

ROOT = Path(__file__).resolve().parents[2]
SENTENCES = ["c f a b", "a b c d e f g h i", "", "t s"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], TranslationDataModule]:
    tmp = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(0)
    dm = TranslationDataModule(dataset="copy", n_train=256, n_val=8, n_test=8, vocab_size=64, batch_size=32)
    model = Seq2SeqTransformer(
        vocab_size=64,
        d_model=32,
        n_heads=4,
        n_layers=2,
        d_ff=64,
        dropout=0.0,
        beam_size=2,
        extra_len=6,
        lr=3e-3,
        warmup_steps=20,
    )
    trainer = Trainer(
        max_steps=60,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=dm)
    path = tmp / "model.ckpt"
    trainer.save_checkpoint(path)
    return path, model.translate(SENTENCES), dm


def test_checkpoint_loads_with_weights_only(checkpoint: tuple[Path, list[str], TranslationDataModule]) -> None:
    path, _, dm = checkpoint
    ckpt = torch.load(path, weights_only=True, map_location="cpu")
    assert BPETokenizer.from_dict(ckpt["tokenizer"]) == dm.tokenizer
    json.dumps(ckpt["tokenizer"])  # plain JSON types only
    assert ckpt["hyper_parameters"]["vocab_size"] == 64


@pytest.mark.integration
def test_load_from_checkpoint_translates_in_a_fresh_process(
    checkpoint: tuple[Path, list[str], TranslationDataModule],
) -> None:
    path, expected, _ = checkpoint
    code = (
        "import json, sys\n"
        "from lightning_tf.text import Seq2SeqTransformer\n"
        "model = Seq2SeqTransformer.load_from_checkpoint(sys.argv[1], map_location='cpu')\n"
        f"print(json.dumps(model.translate({SENTENCES!r})))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == expected and len(got) == len(SENTENCES)


def test_translate_batches_keep_input_order(checkpoint: tuple[Path, list[str], TranslationDataModule]) -> None:
    path, expected, _ = checkpoint
    model = Seq2SeqTransformer.load_from_checkpoint(path, map_location="cpu")
    # one sentence per batch, and sorted-by-length batching, give the same answers in input order
    assert model.translate(SENTENCES, batch_size=1) == expected
    assert model.translate(SENTENCES[::-1], batch_size=2) == expected[::-1]
    # greedy through the public API equals beam size 1
    assert model.translate(SENTENCES, beam_size=1) == model.translate(SENTENCES, beam_size=1, batch_size=1)


def test_translate_errors_are_clear() -> None:
    model = Seq2SeqTransformer(vocab_size=64, d_model=32, n_heads=4, n_layers=1, max_len=8)
    with pytest.raises(RuntimeError, match="has no tokenizer"):
        model.translate(["hello"])
    model.tokenizer = BPETokenizer.train(["a b c d e f g h i j"] * 4, ["a b c"] * 4, 64)
    with pytest.raises(TypeError, match="expects a list of sentences"):
        model.translate("a b")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"sentence 1 has \d+ tokens \(EOS included\), more than max_len \(8\)"):
        model.translate(["a", "a b c d e f g h i j"])
    with pytest.raises(TypeError, match="translate expects sentences \\(str\\); item 1 is NoneType"):
        model.translate(["a b", None])  # type: ignore[list-item]
    for kwargs, message in (
        ({"beam_size": 2.5}, r"beam_size must be an integer >= 1, got 2\.5"),
        ({"beam_size": 0}, r"beam_size must be an integer >= 1, got 0"),
        ({"alpha": float("nan")}, r"alpha must be a finite number, got nan"),  # it changed the beams' order
        ({"no_repeat_ngram_size": -1}, r"no_repeat_ngram_size must be an integer >= 0, got -1"),
    ):
        with pytest.raises(ValueError, match=message):
            model.translate(["a b"], **kwargs)


def test_predict_writes_the_file_in_input_order(
    checkpoint: tuple[Path, list[str], TranslationDataModule], tmp_path: Path
) -> None:
    """``predict`` through the DataModule's ``predict_file`` (batched by length, so out of order)
    writes one translation per input line, in input order, equal to ``translate``."""
    path, _, _ = checkpoint
    lines = ["a b c d e f g h", "c", "b a", "t s r q p", "a"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    model = Seq2SeqTransformer.load_from_checkpoint(path, map_location="cpu")
    dm = TranslationDataModule(
        dataset="copy",
        n_train=256,
        n_val=8,
        n_test=8,
        vocab_size=64,
        batch_size=2,
        predict_file=str(tmp_path / "in.txt"),
    )
    writer = TranslationWriter(str(tmp_path / "out.txt"))
    Trainer(logger=False, enable_progress_bar=False, default_root_dir=tmp_path, callbacks=[writer]).predict(
        model, datamodule=dm, ckpt_path=path
    )
    assert (tmp_path / "out.txt").read_text().splitlines() == model.translate(lines)


def test_empty_lines_translate_to_empty_lines(
    checkpoint: tuple[Path, list[str], TranslationDataModule], tmp_path: Path
) -> None:
    """A blank input line is no sentence: ``translate`` and ``predict`` give "" for it instead of whatever the
    decoder guesses from a lone </s>, and keep the other lines in place."""
    path, _, _ = checkpoint
    model = Seq2SeqTransformer.load_from_checkpoint(path, map_location="cpu")
    assert model.translate(["", "   "], beam_size=1) == ["", ""]
    assert model.translate(["", "   "], beam_size=3) == ["", ""]
    lines = ["a b c", "", "c d", "  "]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    dm = TranslationDataModule(
        dataset="copy", n_train=256, n_val=8, n_test=8, vocab_size=64, predict_file=str(tmp_path / "in.txt")
    )
    writer = TranslationWriter(str(tmp_path / "out.txt"))
    Trainer(logger=False, enable_progress_bar=False, default_root_dir=tmp_path, callbacks=[writer]).predict(
        model, datamodule=dm, ckpt_path=path
    )
    out = (tmp_path / "out.txt").read_text().split("\n")
    assert out == [*model.translate(lines), ""]  # one line per input line, then the final newline
    assert out[1] == out[3] == "" and out[0] == model.translate(["a b c"])[0]


def test_a_loaded_model_predicts_with_its_own_tokenizer(
    checkpoint: tuple[Path, list[str], TranslationDataModule], tmp_path: Path
) -> None:
    """``trainer.predict(model, datamodule=dm)`` with a loaded model: predicting never learns a tokenizer, so a
    DataModule without one is one clear error, and one given another tokenizer (other seed, whose ids mean
    nothing to the model's embeddings) is another; given the model's tokenizer (``use_tokenizer`` or
    ``tokenizer_dir``) the data is encoded the model's way. A fresh model under ``ckpt_path`` (as the CLI builds
    it) gets the checkpoint's tokenizer, and so does the DataModule."""
    path, _, _ = checkpoint
    model = Seq2SeqTransformer.load_from_checkpoint(path, map_location="cpu")
    own = model.tokenizer
    assert own is not None
    lines = ["a b c d e f g h", "c", "b a", "t s r q p"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")

    def other_data(**kw: object) -> TranslationDataModule:
        return TranslationDataModule(
            dataset="copy",
            n_train=200,
            n_val=8,
            n_test=8,
            vocab_size=64,
            seed=7,
            predict_file=str(tmp_path / "in.txt"),
            **kw,  # type: ignore[arg-type]
        )

    def predict(dm: TranslationDataModule, out: str, module: Seq2SeqTransformer = model, **kw: object) -> list[str]:
        writer = TranslationWriter(str(tmp_path / out))
        Trainer(logger=False, enable_progress_bar=False, default_root_dir=tmp_path, callbacks=[writer]).predict(
            module,
            datamodule=dm,
            **kw,  # type: ignore[arg-type]
        )
        return (tmp_path / out).read_text().splitlines()

    dm = other_data()
    no_tokenizer = r"predict needs the trained model's tokenizer: give --ckpt_path .*tokenizer_dir"
    with pytest.raises(ValueError, match=no_tokenizer):
        predict(dm, "never.txt")
    assert dm.tokenizer is None and not (tmp_path / "never.txt").exists()
    learnt = TranslationDataModule(dataset="copy", n_train=200, n_val=8, n_test=8, vocab_size=64, seed=7)
    learnt.setup("fit")
    assert learnt.tokenizer is not None and learnt.tokenizer != own
    learnt.tokenizer.save(tmp_path / "other_tokenizer")
    mismatched = other_data(tokenizer_dir=str(tmp_path / "other_tokenizer"))
    with pytest.raises(ValueError, match=r"encoded with another tokenizer .*dm\.use_tokenizer\(model\.tokenizer\)"):
        predict(mismatched, "never.txt")
    assert mismatched.tokenizer != own and not (tmp_path / "never.txt").exists()
    expected = model.translate(lines)
    dm.use_tokenizer(own)  # after setup: the prediction input is encoded again
    assert predict(dm, "out.txt") == expected
    assert model.tokenizer == own and dm.tokenizer == own

    own.save(tmp_path / "tokenizer")
    assert predict(other_data(tokenizer_dir=str(tmp_path / "tokenizer")), "from_dir.txt") == expected
    fresh = Seq2SeqTransformer(**torch.load(path, weights_only=True)["hyper_parameters"])
    restored = other_data()
    assert predict(restored, "restored.txt", fresh, ckpt_path=path) == expected
    assert fresh.tokenizer == own and restored.tokenizer == own
