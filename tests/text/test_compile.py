"""``compile: true`` compiles the teacher-forced forward of the loss (decoding stays eager): the compiled
module computes the eager module's loss, gradients and evaluation outputs, keeps the eager state-dict
keys, and trains through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightning_tf.text import Seq2SeqTransformer
from tests.helpers.cli import ROOT, cli, run_dir_args
from tests.helpers.text import make_batch

pytestmark = pytest.mark.integration

TINY = dict(vocab_size=24, d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0)


@pytest.fixture(scope="module", autouse=True)
def _can_compile() -> None:
    try:
        torch.compile(lambda x: x * 2 + 1)(torch.ones(3))
    except Exception as err:  # no C++ compiler, unsupported platform, ...
        pytest.skip(f"torch._dynamo cannot compile on this platform: {type(err).__name__}: {err}")


def test_compiled_loss_gradients_and_eval_outputs_equal_eager() -> None:
    eager = Seq2SeqTransformer(**TINY)
    compiled = Seq2SeqTransformer(**TINY, compile=True)
    compiled.load_state_dict(eager.state_dict())
    compiled.configure_model()
    compiled.configure_model()  # Lightning calls it in every stage: compiled once
    assert compiled._compiled_forward is not None and eager._compiled_forward is None
    assert list(compiled.state_dict()) == list(eager.state_dict()), "no _orig_mod. in the keys"
    batch = make_batch([([5, 6, 7], [8, 9]), ([10, 11, 12, 13], [11, 12, 13, 14, 15])])
    losses = []
    for model in (eager, compiled):
        loss = model.loss(batch)[0]
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=0)
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-7, msg=name)
    eager.eval(), compiled.eval()
    with torch.no_grad():
        loss_e, logits_e, _ = eager.loss(batch)
        loss_c, logits_c, _ = compiled.loss(batch)
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=0)
    torch.testing.assert_close(logits_c, logits_e, rtol=1e-5, atol=1e-6)
    src = batch["src"]
    assert torch.equal(compiled.generate(src, beam_size=2), eager.generate(src, beam_size=2))  # eager decoding


@pytest.mark.slow  # 50 s of compiling; the integration tier keeps the compiled forward's parity tests
def test_cli_fit_with_compile(tmp_path: Path) -> None:
    cli(
        "fit",
        "--config",
        str(ROOT / "configs/trainer/default.yaml"),
        "--config",
        str(ROOT / "configs/text/reverse.yaml"),
        "--model.compile",
        "true",
        "--trainer.fast_dev_run",
        "1",
        "--data.n_train",
        "64",
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
        *run_dir_args(tmp_path),
    )
