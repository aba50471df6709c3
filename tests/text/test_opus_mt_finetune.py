"""configs/text/opus_mt_finetune.yaml end to end through the real command, offline, on a random tiny Marian model
and its SentencePiece tokenizer saved to a local folder (in place of Helsinki-NLP/opus-mt-de-en): a few
fine-tuning steps with validation BLEU, a test, checkpoints; the checkpoint loads with ``weights_only=True``,
holds no transformers object and translates through ``translate()`` as transformers translates its export;
``predict`` and ``export`` (safetensors and marian) from it, without the Marian weights; and a resume."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.cli import cli, run_dir_args

pytestmark = pytest.mark.integration

CONFIG = "configs/text/opus_mt_finetune.yaml"
SENTENCES = ["Der Hund sieht die Katze.", "Am Montag haben zweiundneunzig Katzen eine Flasche gesehen.", ""]


def _plain_types_only(value: Any, where: str = "checkpoint") -> None:
    """Every leaf a tensor or a plain Python value: nothing of transformers (or any other class) inside."""
    if isinstance(value, dict):
        for k, v in value.items():
            assert isinstance(k, (str, int)), f"{where}: key {k!r}"
            _plain_types_only(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _plain_types_only(v, f"{where}[{i}]")
    else:
        assert value is None or isinstance(value, (bool, int, float, str, bytes, torch.Tensor)), (where, type(value))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from tests.helpers.marian import EN_DE, write_marian_folder

    tmp = tmp_path_factory.mktemp("opus_mt")
    folder = write_marian_folder(tmp / "opus-mt-tiny")
    tsv = tmp / "deu.txt"
    tsv.write_text("".join(f"{en}\t{de}\tCC-BY 2.0 (France)\n" for en, de in EN_DE[:240]), encoding="utf-8")
    args = [
        "--config",
        "configs/trainer/default.yaml",
        "--config",
        CONFIG,
        *run_dir_args(tmp),
        "--model.init_args.pretrained",
        str(folder),
        "--data.init_args.tokenizer_dir",
        str(folder),
        "--data.init_args.train_file",
        str(tsv),
        "--data.init_args.n_val",
        "16",
        "--data.init_args.n_test",
        "16",
        "--data.init_args.max_tokens",
        "1024",
        "--model.init_args.warmup_steps",
        "2",
        "--model.init_args.bleu_max_batches",
        "1",
        "--model.init_args.extra_len",
        "8",
        "--trainer.limit_train_batches",
        "2",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.accelerator",
        "cpu",
    ]
    proc = cli("fit", *args, "--trainer.max_epochs", "2", "--test_after_fit", "true", timeout=600)
    assert re.search(r"^test:\n +bleu +[0-9.]+ ", proc.stdout, re.M), proc.stdout[-2000:]
    assert "val/loss" not in proc.stderr  # validated every epoch (the best checkpoint monitors it)
    (ckpt,) = (tmp / "lightning-tf").glob("*/checkpoints/last.ckpt")
    return {"tmp": tmp, "folder": folder, "ckpt": ckpt, "run": ckpt.parent.parent, "tsv": tsv, "args": args}


def test_the_checkpoint_holds_plain_types_and_the_resolved_architecture(run: dict[str, Any]) -> None:
    ckpt = torch.load(run["ckpt"], map_location="cpu", weights_only=True)
    _plain_types_only(ckpt)
    hp = ckpt["hyper_parameters"]
    config = json.loads((run["folder"] / "config.json").read_text())
    assert hp["pretrained"] is None and (hp["d_model"], hp["vocab_size"]) == (config["d_model"], config["vocab_size"])
    assert (hp["pad_id"], hp["bos_id"], hp["eos_id"]) == (config["pad_token_id"], config["pad_token_id"], 0)
    assert ckpt["tokenizer"]["kind"] == "sentencepiece" and (ckpt["src_lang"], ckpt["tgt_lang"]) == ("de", "en")
    assert ckpt["global_step"] == 4


def test_the_checkpoint_translates_as_transformers_translates_its_export(run: dict[str, Any], tmp_path: Path) -> None:
    # in a fresh process, from the checkpoint alone: no Marian model code is imported to translate
    code = (
        "import json, sys\n"
        "from lightning_tf.text import Seq2SeqTransformer\n"
        f"m = Seq2SeqTransformer.load_from_checkpoint({str(run['ckpt'])!r}, map_location='cpu', weights_only=True)\n"
        f"out = m.translate({SENTENCES!r}, beam_size=1)\n"
        "print(json.dumps({'out': out, 'marian': 'transformers.models.marian.modeling_marian' in sys.modules}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["marian"] is False and result["out"][2] == ""

    from transformers import MarianMTModel, MarianTokenizer

    from lightning_tf.text import Seq2SeqTransformer

    model = Seq2SeqTransformer.load_from_checkpoint(run["ckpt"], map_location="cpu", weights_only=True)
    out = model.to_marian(tmp_path / "marian")
    ref, ref_tok = MarianMTModel.from_pretrained(out).eval(), MarianTokenizer.from_pretrained(str(out))
    expected = []
    for sentence in SENTENCES[:2]:
        src = ref_tok([sentence], return_tensors="pt")
        limit = int(model.max_new_tokens(src.input_ids)[0])
        with torch.no_grad():
            ids = ref.generate(**src, num_beams=1, do_sample=False, max_new_tokens=limit)
        expected.append(ref_tok.batch_decode(ids, skip_special_tokens=True)[0])
    assert result["out"][:2] == expected


def test_predict_and_export_from_the_checkpoint_without_the_marian_weights(run: dict[str, Any], tmp_path: Path) -> None:
    from lightning_tf.export import load_safetensors
    from lightning_tf.text import Seq2SeqTransformer

    model = Seq2SeqTransformer.load_from_checkpoint(run["ckpt"], map_location="cpu", weights_only=True)
    lines = SENTENCES[:2] + ["Wo ist der Bahnhof?"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    moved = run["folder"].with_name("moved-away")
    run["folder"].rename(moved)  # the pretrained model is gone: the run's own tokenizer folder serves
    try:
        cli(
            "predict",
            "--config",
            str(run["run"] / "config.yaml"),
            "--ckpt_path",
            str(run["ckpt"]),
            "--data.init_args.predict_file",
            str(tmp_path / "in.txt"),
            "--data.init_args.tokenizer_dir",
            str(run["run"] / "tokenizer"),
            "--trainer.logger",
            "false",
            "--trainer.callbacks+=lightning_tf.text.TranslationWriter",
            "--trainer.callbacks.output_file",
            str(tmp_path / "out.txt"),
            "--trainer.accelerator",
            "cpu",
        )
        assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == model.translate(lines)
        cli("export", "--ckpt_path", str(run["ckpt"]), "--format", "safetensors", "--output", str(tmp_path / "st"))
        assert load_safetensors(tmp_path / "st").translate(lines) == model.translate(lines)
        proc = cli("export", "--ckpt_path", str(run["ckpt"]), "--format", "marian", "--output", str(tmp_path / "hf"))
        assert "source.spm" in proc.stdout and "model.safetensors" in proc.stdout
    finally:
        moved.rename(run["folder"])
    from transformers import MarianMTModel

    back = MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    src = model.encode_texts(lines)
    tgt = torch.cat((torch.full((3, 1), model.hparams.bos_id), src[:, :-1]), dim=1)
    with torch.no_grad():
        expected = model.eval()(src, tgt)
        got = back(input_ids=src, attention_mask=src != model.hparams.pad_id, decoder_input_ids=tgt).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_resume_reads_the_checkpoint_not_the_pretrained_weights(run: dict[str, Any]) -> None:
    weights = run["folder"] / "model.safetensors"
    hidden = weights.with_name("weights.hidden")
    weights.rename(hidden)  # only the tokenizer files are left: resuming must not build the Marian model
    try:
        cli(
            "fit",
            *run["args"],
            "--trainer.max_epochs",
            "3",
            "--ckpt_path",
            str(run["ckpt"]),
            "--trainer.logger.init_args.id",
            run["run"].name,
            timeout=600,
        )
    finally:
        hidden.rename(weights)
    assert torch.load(run["ckpt"], map_location="cpu", weights_only=True)["global_step"] == 6
