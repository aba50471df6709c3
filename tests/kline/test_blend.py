"""``residual: blend``: the Transformer trained alone, stacked with the closed-form linear path by a weight
per target chosen on validation. Its part is its forecast less the linear path's, so a weight ``w`` gives
``(1 - w) linear + w Transformer`` exactly, training sees the Transformer alone, and the selection rule of
``residual: on`` decides the weight."""

from __future__ import annotations

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from lightning_tf.kline import KLineForecaster, PatchTST
from tests.helpers.kline import TINY, SineDataModule, net_args

NET = {
    "patch_len": 8,
    "stride": 4,
    "d_model": 16,
    "n_heads": 2,
    "n_layers": 1,
    "d_ff": 32,
    "dropout": 0.0,
    "head_dropout": 0.0,
}


def _batches(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two channels: a noisy AR-like level with a per-window offset, so the RevIN and raw fits differ."""
    g = torch.Generator().manual_seed(seed)
    walk = torch.randn(n, 38, 2, generator=g).cumsum(1) * 0.3 + torch.randn(n, 1, 2, generator=g) * 3  # (n, 38, 2)
    return [(walk[:, :32], walk[:, 32:])]  # x (n, 32, 2), y (n, 6, 2)


@pytest.mark.parametrize("linear_input", ["revin", "raw"])
def test_a_weight_mixes_the_linear_path_and_the_transformer_alone_exactly(linear_input: str) -> None:
    torch.manual_seed(0)
    blend = PatchTST(
        2, 2, 32, 6, residual="blend", linear_input=linear_input, revin_affine=True, **net_args(**NET)
    ).double()
    torch.manual_seed(0)
    only = PatchTST(2, 2, 32, 6, residual="only", revin_affine=True, **net_args(**NET)).double()
    only.load_state_dict({k: v for k, v in blend.state_dict().items() if k in only.state_dict()})
    with torch.no_grad():  # a learnt RevIN affine map, undone on the Transformer's output in both
        blend.revin.weight.uniform_(0.5, 2.0)
        blend.revin.bias.uniform_(-1.0, 1.0)
        only.revin.load_state_dict(blend.revin.state_dict())
    fit = blend.fit_linear(lambda: _batches(300, 1), lambda: _batches(100, 2))
    assert fit.input == linear_input
    x = _batches(7, 3)[0][0].double()  # (7, 32, 2)
    blend.eval()
    only.eval()
    parts = blend.parts(x)[0]
    linear = blend.combine(parts, gate=0.0)  # (7, 6, 2)
    transformer = only.combine(only.parts(x)[0])  # (7, 6, 2)
    assert not torch.allclose(linear, transformer, atol=1e-3)  # two different forecasts
    torch.testing.assert_close(blend.combine(parts, gate=1.0), transformer, rtol=1e-10, atol=1e-10)
    for w in (0.25, 0.7):
        torch.testing.assert_close(
            blend.combine(parts, gate=w), (1 - w) * linear + w * transformer, rtol=1e-10, atol=1e-10
        )
    blend.residual_gate.copy_(torch.tensor([0.0, 0.6], dtype=torch.float64))  # per target, as validation leaves it
    out = blend.forward_quantiles(x)
    torch.testing.assert_close(out[..., 0], linear[..., 0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out[..., 1], 0.4 * linear[..., 1] + 0.6 * transformer[..., 1], rtol=1e-10, atol=1e-10)


def test_training_sees_the_transformer_alone_and_validation_picks_the_weight() -> None:
    """The training loss is the Transformer's own; after validation the gate is the rule's weight, and the
    model forecasts ``(1 - w) linear + w Transformer`` with it; the summary names the blend."""
    L.seed_everything(0)
    dm = SineDataModule(n_features=2, context_len=32, horizon=6, n_bars=500)
    seen: dict[str, float] = {}

    class FirstStep(L.Callback):
        def on_train_batch_start(self, trainer: L.Trainer, pl_module: KLineForecaster, batch, idx) -> None:
            seen.setdefault("batch", batch)

        def on_before_backward(self, trainer: L.Trainer, pl_module: KLineForecaster, loss: torch.Tensor) -> None:
            if "loss" in seen:
                return
            batch = seen["batch"]
            with torch.no_grad():
                parts = pl_module.net.parts(batch["x"])[0]
                alone = parts.residual * parts.std + pl_module.net.combine(parts, gate=0.0)  # T, model scale
            seen["loss"], seen["alone"] = float(loss.detach()), float(F.mse_loss(alone, batch["y"]))

    model = KLineForecaster(
        n_features=2,
        n_targets=2,
        context_len=32,
        horizon=6,
        residual="blend",
        residual_keep_se=0.0,
        dropout=0.0,
        head_dropout=0.0,
        **TINY,
    )
    t = L.Trainer(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[FirstStep()],
    )
    t.fit(model, dm)
    assert seen["loss"] == pytest.approx(seen["alone"], rel=1e-5)
    full, linear, weighted, gain, _se = model.val_selection.tolist()
    assert full != linear and weighted <= min(full, linear)
    gate = model.net.residual_gate
    assert model.residual_kept is (gain > 0) and bool(((gate >= 0) & (gate <= 1)).all())
    model.eval()
    x = next(iter(dm.val_dataloader()))["x"]
    parts = model.net.parts(x)[0]
    lin, alone = model.net.combine(parts, gate=0.0), model.net.combine(parts, gate=1.0)
    torch.testing.assert_close(model(x), (1 - gate) * lin + gate * alone, rtol=1e-5, atol=1e-6)
    assert "Transformer (trained alone)" in model.selection_line()


def test_the_blend_refuses_a_tuned_linear_path_and_carries_quantiles() -> None:
    with pytest.raises(ValueError, match=r"with residual: blend, 'frozen'\), got 'tuned'"):
        KLineForecaster(n_features=2, n_targets=2, context_len=32, horizon=6, residual="blend", linear="tuned")
    with pytest.raises(ValueError, match=r"residual must be 'on', 'off', 'only' or 'blend', got 'mix'"):
        PatchTST(2, 2, 32, 6, residual="mix")  # type: ignore[arg-type]
    net = PatchTST(2, 2, 32, 6, residual="blend", quantiles=[0.1, 0.5, 0.9], **net_args(**NET))
    net.fit_linear(lambda: _batches(200, 4), lambda: _batches(80, 5))
    net.residual_gate.fill_(0.5)
    q = net.eval().forward_quantiles(_batches(5, 6)[0][0])  # (5, 6, 2, 3)
    assert q.shape == (5, 6, 2, 3) and bool((q.diff(dim=-1) > 0).all())
