"""After training, a run predicts from its saved config and checkpoint alone: the training TSV moved away,
from an empty folder, both ``Seq2SeqTransformer.load_from_checkpoint(ckpt).translate`` and
``lightning-tf predict --config <run>/config.yaml --ckpt_path <ckpt> --data.predict_file <new>`` translate,
and predict says what it wrote, without rebuilding the training data or the tokenizer."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch

from lightning_tf.text import BPETokenizer, Seq2SeqTransformer
from tests.helpers.cli import ROOT, cli, run_dir_args

LINES = ["a b c d", "", "q r s t u v", "z y"]


def _reverse_tsv(path: Path, n: int = 160, seed: int = 0) -> Path:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = [rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))]
        rows.append(f"{' '.join(words)}\t{' '.join(reversed(words))}\n")
    path.write_text("".join(rows), encoding="utf-8")
    return path


@pytest.mark.integration
def test_a_tsv_trained_run_predicts_from_its_config_and_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, runs, empty = tmp_path / "data", tmp_path / "runs", tmp_path / "empty"
    for folder in (data, empty):
        folder.mkdir()
    tsv = _reverse_tsv(data / "reverse.tsv")
    cli(
        "fit",
        "--config",
        str(ROOT / "configs/trainer/default.yaml"),
        "--config",
        str(ROOT / "configs/text/reverse.yaml"),
        "--data.dataset",
        "null",
        "--data.train_file",
        str(tsv),
        "--data.n_val",
        "8",
        "--data.n_test",
        "8",
        "--model.d_model",
        "16",
        "--model.n_heads",
        "2",
        "--model.n_layers",
        "1",
        "--model.d_ff",
        "32",
        "--trainer.max_steps",
        "3",
        "--trainer.limit_val_batches",
        "1",
        *run_dir_args(runs),
        cwd=tmp_path,
    )
    (config,) = runs.rglob("config.yaml")
    run, ckpt = config.parent, config.parent / "checkpoints" / "last.ckpt"
    assert ckpt.is_file() and (run / "tokenizer").is_dir()
    tsv.rename(tmp_path / "moved_away.tsv")  # the training data is gone
    new = tmp_path / "new.txt"
    new.write_text("\n".join(LINES) + "\n", encoding="utf-8")

    # everything inference needs is in the checkpoint, as plain data
    state = torch.load(ckpt, weights_only=True, map_location="cpu")
    assert BPETokenizer.from_dict(state["tokenizer"]) == BPETokenizer.load(run / "tokenizer")
    assert (state["src_lang"], state["tgt_lang"]) == ("en", "de")
    assert state["hyper_parameters"]["max_len"] == 256

    monkeypatch.chdir(empty)
    model = Seq2SeqTransformer.load_from_checkpoint(ckpt, map_location="cpu")
    assert (model.src_lang, model.tgt_lang) == ("en", "de")
    expected = model.translate(LINES)
    assert len(expected) == 4 and expected[1] == "" and all(expected[i] for i in (0, 2, 3))

    proc = cli("predict", "--config", str(config), "--ckpt_path", str(ckpt), "--data.predict_file", str(new), cwd=empty)
    wrote = re.search(r"wrote 4 translations to (\S+)", proc.stdout)
    assert wrote, proc.stdout[-2000:]
    out = Path(wrote[1]) if Path(wrote[1]).is_absolute() else empty / wrote[1]
    assert out.read_text(encoding="utf-8").splitlines() == expected
    assert out.parent.parent == run.parent and out.parent != run, "into the predict run's own folder"
    assert not (out.parent / "tokenizer").exists(), "predict writes no tokenizer folder"
    assert "moved_away" not in proc.stdout + proc.stderr and not any(empty.iterdir())
