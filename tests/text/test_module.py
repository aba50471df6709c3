"""Seq2SeqTransformer: causality and padding through the LightningModule, sizes and presets, the loss,
the learning-rate schedule and its resumption, evaluation logging, predict, and the copy / reverse
tasks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.loggers import CSVLogger

from lightning_tf.text import PRESETS, BPETokenizer, Seq2SeqTransformer, TranslationWriter
from lightning_tf.text.plots import draw_samples, token_strings
from lightning_tf.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from lightning_tf.training import noam, warmup_cosine
from tests.helpers.text import IdDataModule, TextCopyDataModule, make_batch, pad_rows, word_sentences

V = 24
TINY = dict(vocab_size=V, d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0)


def trainer(tmp_path: Path | None = None, **kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = dict(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    return Trainer(**(defaults | kwargs))


@pytest.mark.parametrize(
    ("pos_encoding", "norm_first"), [("sinusoidal", True), ("learned", False), ("rope", True), ("alibi", False)]
)
def test_position_t_never_sees_label_t(pos_encoding: str, norm_first: bool) -> None:
    """Logits at target positions <= t are unchanged when target tokens t + 1 .. change: position t
    predicts token t + 1, so it must not see it."""
    model = Seq2SeqTransformer(**TINY, norm_first=norm_first, pos_encoding=pos_encoding).eval()
    src = torch.randint(4, V, (2, 7))
    tgt = torch.randint(4, V, (2, 9))
    tgt[:, 0] = BOS_ID
    base = model(src, tgt)  # (B, T, V)
    for t in (0, 3, 7):
        changed = tgt.clone()
        changed[:, t + 1 :] = torch.randint(4, V, changed[:, t + 1 :].shape)
        out = model(src, changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :], atol=1e-3), "later positions must react"


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "alibi"])
def test_source_padding_invariance(pos_encoding: str) -> None:
    model = Seq2SeqTransformer(**TINY, pos_encoding=pos_encoding).eval()
    src = pad_rows([[5, 6, 7, EOS_ID], [8, 9, 10, 11, 12, EOS_ID]])  # (2, 6)
    tgt = torch.tensor([[BOS_ID, 13, 14], [BOS_ID, 15, 16]])
    padded = torch.cat((src, torch.full((2, 5), PAD_ID)), dim=1)  # (2, 11)
    torch.testing.assert_close(model(padded, tgt), model(src, tgt), atol=1e-5, rtol=1e-5)
    # a real token in place of the padding does change the output (the mask is what hides it)
    leaked = padded.clone()
    leaked[0, 4:] = 9
    assert not torch.allclose(model(leaked, tgt)[0], model(src, tgt)[0], atol=1e-3)


def test_target_padding_leaves_loss_unchanged() -> None:
    model = Seq2SeqTransformer(**TINY).eval()
    batch = make_batch([([5, 6, 7], [8, 9]), ([10], [11, 12, 13])])
    padded = {
        "src": torch.cat((batch["src"], torch.zeros(2, 3, dtype=torch.long)), 1),
        "tgt": torch.cat((batch["tgt"], torch.zeros(2, 4, dtype=torch.long)), 1),
    }
    torch.testing.assert_close(model.loss(padded)[0], model.loss(batch)[0])
    # and the loss does depend on the real targets
    changed = {"src": batch["src"], "tgt": batch["tgt"].clone()}
    changed["tgt"][0, 1] = 20
    assert not torch.isclose(model.loss(changed)[0], model.loss(batch)[0])


def test_presets_and_overrides() -> None:
    base = Seq2SeqTransformer(vocab_size=1000, preset="base")
    assert len(base.encoder.layers) == 6 and len(base.decoder.layers) == 6
    assert base.size == PRESETS["base"] | {"n_decoder_layers": 6}
    layer = base.encoder.layers[0]
    assert not layer.norm_first and base.encoder.norm is None, "the paper's base model is Post-LN"
    assert layer.self_attn.n_heads == 8 and layer.self_attn.d_model == 512
    assert layer.ff.linear1.out_features == 2048 and layer.dropout1.p == 0.1
    # 6+6 layers of the paper's base with a shared 1000-token table
    per_enc = 4 * 512 * 512 + 4 * 512 + 2 * 512 * 2048 + 2048 + 512 + 2 * 2 * 512
    per_dec = per_enc + 4 * 512 * 512 + 4 * 512 + 2 * 512
    assert sum(p.numel() for p in base.parameters()) == 6 * per_enc + 6 * per_dec + 1000 * 512

    small = Seq2SeqTransformer(vocab_size=100, preset="small", n_layers=1, n_decoder_layers=2, norm_first=False)
    assert (len(small.encoder.layers), len(small.decoder.layers)) == (1, 2)
    assert small.size["d_model"] == PRESETS["small"]["d_model"] and not small.decoder.layers[0].norm_first


def test_shared_separate_and_tied_embeddings() -> None:
    shared = Seq2SeqTransformer(**TINY)
    assert shared.src_embed is None and shared.head.weight is shared.tgt_embed.weight
    separate = Seq2SeqTransformer(**TINY, share_embeddings=False, tie_output=False)
    assert separate.src_embed is not None

    def n(m):
        return sum(p.numel() for p in m.parameters())

    assert n(separate) == n(shared) + 2 * V * 32
    src, tgt = torch.randint(4, V, (2, 5)), torch.randint(4, V, (2, 4))
    separate.src_embed.weight.data.zero_()  # the encoder reads only the source table
    assert torch.allclose(separate.encode(src)[0], separate.encode(src + 1)[0])
    assert not torch.allclose(shared.encode(src)[0], shared.encode(src + 1)[0])
    shared(src, tgt).sum().backward()


def test_every_parameter_gets_a_gradient() -> None:
    model = Seq2SeqTransformer(**TINY, share_embeddings=False, tie_output=False, pos_encoding="learned")
    batch = make_batch([([5, 6, 7], [8, 9]), ([10, 11], [11, 12, 13])])
    model(batch["src"], batch["tgt"][:, :-1]).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by n_heads \(4\)"):
        Seq2SeqTransformer(vocab_size=V, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="label_smoothing must lie in"):
        Seq2SeqTransformer(vocab_size=V, label_smoothing=1.0)
    with pytest.raises(ValueError, match="warmup_steps must be at least 1 with scheduler 'noam', got 0"):
        Seq2SeqTransformer(vocab_size=V, warmup_steps=0)
    with pytest.raises(ValueError, match="warmup_steps must be at least 0 with scheduler 'cosine', got -1"):
        Seq2SeqTransformer(vocab_size=V, scheduler="cosine", warmup_steps=-1)
    with pytest.raises(ValueError, match=r"vocab_size \(3\) must exceed"):
        Seq2SeqTransformer(vocab_size=3)


def test_vocab_mismatch_names_both_values(tmp_path: Path) -> None:
    model = Seq2SeqTransformer(**(TINY | {"vocab_size": 30}))
    with pytest.raises(ValueError, match=r"model\.vocab_size \(30\) differs from the data's vocab_size \(12\)"):
        trainer(tmp_path, fast_dev_run=True).fit(model, datamodule=IdDataModule(vocab_size=12))


def test_noam_formula() -> None:
    w = 4000
    assert noam(w - 1, w) == pytest.approx(1.0)
    assert noam(0, w) == pytest.approx(1 / w)
    assert noam(4 * w - 1, w) == pytest.approx(0.5)
    # with peak lr = d^-0.5 * w^-0.5 it is eq. (3) of the paper at step_num = step + 1
    d, peak = 512, 512**-0.5 * w**-0.5
    for step in (0, 10, 3999, 4000, 20000):
        s = step + 1
        assert peak * noam(step, w) == pytest.approx(d**-0.5 * min(s**-0.5, s * w**-1.5))
    # the cosine: the peak at the last warmup step, half way between warmup and the end, 0 at the end
    assert warmup_cosine(9, 10, 110) == pytest.approx(1.0)
    assert warmup_cosine(60, 10, 110) == pytest.approx(0.5)
    assert warmup_cosine(110, 10, 110) == pytest.approx(0.0)


class LrRecorder(Callback):
    def __init__(self) -> None:
        self.lrs: dict[int, float] = {}

    def on_train_batch_start(self, trainer: Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.lrs[trainer.global_step] = trainer.optimizers[0].param_groups[0]["lr"]


@pytest.mark.parametrize("scheduler", ["noam", "cosine"])
def test_schedule_resumes_at_the_right_step(tmp_path: Path, scheduler: str) -> None:
    """Stop mid-warmup, resume from the checkpoint: the learning rate continues the schedule (no
    second warmup) and equals an uninterrupted run's, step by step. ``total_steps`` gives every run the
    schedule of 20 steps (the interrupted one stops at ``max_steps=5``), in which the warmup of 8 steps
    fits in half the run and is not shortened."""
    kw = dict(TINY, lr=1e-3, warmup_steps=8, scheduler=scheduler, total_steps=20)

    def dm():
        return IdDataModule(vocab_size=V, n_train=64, batch_size=4)

    torch.manual_seed(0)
    full = LrRecorder()
    trainer(tmp_path / "a", max_steps=20, callbacks=[full], limit_val_batches=0).fit(
        Seq2SeqTransformer(**kw), datamodule=dm()
    )
    torch.manual_seed(0)
    t1 = trainer(tmp_path / "b", max_steps=5, limit_val_batches=0)
    t1.fit(Seq2SeqTransformer(**kw), datamodule=dm())
    ckpt = tmp_path / "mid.ckpt"
    t1.save_checkpoint(ckpt)
    resumed = LrRecorder()
    trainer(tmp_path / "b", max_steps=20, callbacks=[resumed], limit_val_batches=0).fit(
        Seq2SeqTransformer(**kw), datamodule=dm(), ckpt_path=ckpt
    )
    assert sorted(resumed.lrs) == list(range(5, 20))
    factor = (lambda s: noam(s, 8)) if scheduler == "noam" else (lambda s: warmup_cosine(s, 8, 20))
    for step, lr in resumed.lrs.items():
        assert lr == pytest.approx(1e-3 * factor(step)), step
        assert lr == pytest.approx(full.lrs[step])
    assert resumed.lrs[5] > 5e-4, "a second warmup would restart near lr / warmup"


def test_cosine_needs_a_length(tmp_path: Path) -> None:
    model = Seq2SeqTransformer(**TINY, scheduler="cosine")
    with pytest.raises(ValueError, match="scheduler 'cosine' needs the run's length"):
        trainer(tmp_path, max_time="00:00:00:05", max_epochs=-1, max_steps=-1).fit(
            model, datamodule=IdDataModule(vocab_size=V)
        )


def test_validation_logs_bleu_chrf_and_signature(tmp_path: Path) -> None:
    """A short fit on a copy task through a real tokenizer logs BLEU and chrF of decoded text every
    second epoch, and the sacreBLEU signature once."""
    dm = TextCopyDataModule(n_train=64, n_val=8, batch_size=16)
    model = Seq2SeqTransformer(**(TINY | {"vocab_size": 64}), bleu_every_n_epochs=2, beam_size=2, extra_len=5)
    logger = CSVLogger(tmp_path)
    t = trainer(tmp_path, max_epochs=2, logger=logger, num_sanity_val_steps=0, log_every_n_steps=1)
    t.fit(model, datamodule=dm)
    rows = (Path(logger.log_dir) / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    epochs_with_bleu = [r.split(",")[header.index("epoch")] for r in rows[1:] if r.split(",")[header.index("val/bleu")]]
    assert epochs_with_bleu == ["1"], "BLEU only every second epoch"
    for key in ("val/loss", "val/perplexity", "val/token_acc", "val/chrf", "train/loss"):
        assert key in header
    hparams = (Path(logger.log_dir) / "hparams.yaml").read_text()
    assert "sacrebleu_bleu_signature: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in hparams
    assert model.tokenizer is dm.tokenizer
    result = t.test(model, datamodule=dm)[0]
    assert {"test/bleu", "test/chrf", "test/chrfpp", "test/ter", "test/loss", "test/perplexity"} <= set(result)
    assert 0.0 <= result["test/bleu"] <= 100.0 and result["test/ter"] >= 0.0
    assert 0.0 <= result["test/chrfpp"] <= 100.0


def test_perplexity_is_exp_of_unsmoothed_cross_entropy(tmp_path: Path) -> None:
    model = Seq2SeqTransformer(**TINY, label_smoothing=0.0)
    dm = IdDataModule(vocab_size=V, n_val=16, batch_size=16)
    result = trainer(tmp_path).validate(model, datamodule=dm, verbose=False)[0]
    assert result["val/perplexity"] == pytest.approx(math.exp(result["val/loss"]), rel=1e-4)


def test_wandb_gets_samples_table_and_attention_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every decoding epoch logs a sample table drawn across source lengths by ``sample_seed`` and the epoch
    (another draw each epoch), translated by the model of that epoch, and one cross-attention grid."""
    from lightning.pytorch.loggers import WandbLogger

    calls: dict[str, list] = {"table": [], "image": []}
    monkeypatch.setattr(
        WandbLogger, "log_table", lambda self, key, columns, data, **kw: calls["table"].append((key, columns, data))
    )
    monkeypatch.setattr(WandbLogger, "log_image", lambda self, key, images, **kw: calls["image"].append((key, images)))
    dm = TextCopyDataModule(n_train=32, n_val=12, batch_size=16)
    model = Seq2SeqTransformer(**(TINY | {"vocab_size": 64}), beam_size=1, extra_len=3, n_logged_samples=3)
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="test")
    trainer(tmp_path, max_epochs=2, logger=logger, num_sanity_val_steps=0).fit(model, datamodule=dm)
    assert dm.tokenizer is not None
    lengths = [len(ids) + 1 for ids in dm.tokenizer.encode(dm.val_text, "src")]  # the val loader keeps file order
    drawn = []
    for epoch, (key, columns, data) in enumerate(calls["table"]):
        assert key == "val/samples" and columns == ["source", "reference", "translation"]
        expected = [dm.val_text[i] for i in draw_samples(lengths, 3, seed=0, epoch=epoch)]
        assert [row[0] for row in data] == expected and all(row[1] == row[0] for row in data)  # copy task
        drawn.append(expected)
    assert len(drawn) == 2 and drawn[0] != drawn[1], "each epoch shows other sentences"
    assert [row[2] for row in calls["table"][-1][2]] == model.translate(drawn[1])  # the epoch's own translations
    assert [key for key, _ in calls["image"]] == ["val/cross_attention"] * 2
    images = calls["image"][0][1]
    layers, heads = 2, 4
    assert images[0].ndim == 3 and images[0].shape[2] == 3
    assert images[0].shape[0] > 100 * layers / 2 and images[0].shape[1] > 100 * heads / 2


def test_attention_figure_has_no_padding_on_its_axes() -> None:
    """The heatmap of a sentence taken from a padded batch shows its real source tokens (through </s>) across
    and the translation's tokens (through </s>) down: no <pad> column or row."""
    model = Seq2SeqTransformer(**(TINY | {"vocab_size": 64}), extra_len=3).eval()
    model.tokenizer = BPETokenizer.train(word_sentences(64, 0), word_sentences(64, 0), 64)
    ids = model.tokenizer.encode(["the big dog sees a red car."], "src")[0] + [EOS_ID]
    fig = model.attention_figure(torch.tensor(ids + [PAD_ID] * 5))
    assert len(fig.axes) == 2 * 4  # layers x heads
    for ax in fig.axes:
        xs = [t.get_text() for t in ax.get_xticklabels()]
        ys = [t.get_text() for t in ax.get_yticklabels()]
        assert xs == token_strings(model.tokenizer, torch.tensor(ids), "src") and xs[-1] == "</s>"
        assert "<pad>" not in xs + ys and ys[-1] == "</s>" and "</s>" not in ys[:-1]
        assert ax.images[0].get_array().shape == (len(ys), len(xs))


def test_draw_samples_spans_lengths_and_changes_per_epoch() -> None:
    lengths = [(7 * i) % 23 + 1 for i in range(60)]  # 60 items, lengths 1..23 in no order
    first = draw_samples(lengths, 6, seed=0, epoch=3)
    assert first == draw_samples(lengths, 6, seed=0, epoch=3), "deterministic given seed and epoch"
    assert first != draw_samples(lengths, 6, seed=0, epoch=4) and first != draw_samples(lengths, 6, seed=1, epoch=3)
    order = sorted(range(60), key=lambda i: (lengths[i], i))
    for k, i in enumerate(first):  # one from each sixth of the items sorted by length
        assert order.index(i) // 10 == k
    assert draw_samples(lengths[:4], 6, seed=0, epoch=0) == sorted(range(4), key=lambda i: (lengths[i], i))


def test_predict_writes_translations_in_input_order(tmp_path: Path) -> None:
    dm = IdDataModule(n_val=10, batch_size=4)
    model = Seq2SeqTransformer(**(TINY | {"vocab_size": 12}), beam_size=2, extra_len=3)
    writer = TranslationWriter(str(tmp_path / "out" / "pred.txt"))
    batches = trainer(tmp_path, callbacks=[writer]).predict(model, datamodule=dm)
    assert [b["index"][0] for b in batches] == [9, 5, 1], "the loader yields the lines in reverse"
    lines = (tmp_path / "out" / "pred.txt").read_text().splitlines()
    assert len(lines) == 10
    src = make_batch(dm.val_pairs)["src"]
    assert lines == model._texts(model.generate(src))


def run_algorithmic_task(task: str, tmp_path: Path) -> float:
    torch.manual_seed(0)
    steps = 500
    dm = IdDataModule(task, vocab_size=12, n_train=steps * 64, n_val=256, min_len=2, max_len=8, batch_size=64)
    model = Seq2SeqTransformer(
        vocab_size=12,
        d_model=64,
        n_heads=4,
        n_layers=2,
        d_ff=128,
        dropout=0.0,
        lr=2e-3,
        warmup_steps=50,
        label_smoothing=0.0,
        beam_size=1,
    )
    trainer(tmp_path, max_steps=steps, limit_val_batches=0, gradient_clip_val=1.0).fit(model, datamodule=dm)
    batch = make_batch(dm.val_pairs)
    out = model.eval().generate(batch["src"], beam_size=1)  # (B, <= T)
    target = batch["tgt"][:, 1:]  # (B, T): tokens + EOS, then PAD
    out = torch.nn.functional.pad(out, (0, max(0, target.shape[1] - out.shape[1])), value=PAD_ID)[:, : target.shape[1]]
    return (out == target).all(dim=1).float().mean().item()


@pytest.mark.slow
@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_learns_algorithmic_task(task: str, tmp_path: Path) -> None:
    """500 steps of 64 strings (2-8 tokens over 8 symbols): >= 99% exact match by greedy decoding."""
    assert run_algorithmic_task(task, tmp_path) >= 0.99
