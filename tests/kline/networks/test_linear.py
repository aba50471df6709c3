"""The linear path: the closed-form fit (exact on a linear rule, weighted to the training loss, the input,
pooling and ridge chosen on validation, training windows only), the zero residual on top of it, and the
selection of the tested model on validation."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import KLineForecaster, MultivariateDataModule, PatchTST
from lightning_tf.kline.networks.closed_form import GramStats, ridge_solutions
from lightning_tf.kline.networks.linear import LinearPath
from tests.helpers.kline import TINY, SineDataModule


def _windows(series: torch.Tensor, L: int, F: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.arange(len(series) - L - F + 1)
    x = torch.stack([series[i : i + L] for i in idx])  # (B, L, C)
    y = torch.stack([series[i + L : i + L + F] for i in idx])  # (B, F, C)
    return x, y


def _ar2(T: int = 300) -> torch.Tensor:
    """Two channels of a noiseless AR(2) with a drift: the future is a fixed linear map of the past."""
    s = torch.zeros(T, 2, dtype=torch.float64)
    s[:2] = torch.tensor([[1.0, -0.5], [0.3, 0.8]], dtype=torch.float64)
    for t in range(2, T):
        s[t] = 1.6 * s[t - 1] - 0.8 * s[t - 2] + 0.1
    return s


def test_ridge_solutions_and_the_weighted_gram() -> None:
    """Weighted least squares from the accumulated statistics equals numpy's on sqrt(w)-scaled rows; the
    intercept (last feature) is never shrunk."""
    g = torch.Generator().manual_seed(0)
    z = torch.cat((torch.randn(50, 3, generator=g, dtype=torch.float64), torch.ones(50, 1, dtype=torch.float64)), 1)
    t = torch.randn(50, 2, generator=g, dtype=torch.float64) + 5.0
    w = torch.rand(50, generator=g, dtype=torch.float64) + 0.5
    stats = GramStats()
    stats.add(z[:20], t[:20], w[:20])
    stats.add(z[20:], t[20:], w[20:])
    (_, w0), (_, big) = ridge_solutions(stats, (0.0, 1e6))
    expected = np.linalg.lstsq((z * w.sqrt()[:, None]).numpy(), (t * w.sqrt()[:, None]).numpy(), rcond=None)[0]
    np.testing.assert_allclose(w0.numpy(), expected, rtol=1e-8, atol=1e-10)
    assert big[:3].abs().max() < 1e-4 and (big[3] - (w[:, None] * t).sum(0) / w.sum()).abs().max() < 1e-3
    mse = ((z @ w0 - t) ** 2 * w[:, None]).sum(0) / w.sum()
    torch.testing.assert_close(stats.residual_mean_square(w0), mse)


@pytest.mark.parametrize("pooling", ["pooled", "per_channel"])
def test_the_linear_path_recovers_an_exactly_linear_rule(pooling: str) -> None:
    x, y = _windows(_ar2(), 12, 4)
    path = LinearPath(12, 4, n_features=2, n_targets=2, pooling=pooling)
    ones = torch.ones(len(x), 2, dtype=torch.float64)
    fit = path.fit([(x[:200], y[:200], ones[:200])], None, channels=[0, 1], ridges=(0.0,), normalized=False)
    assert fit.pooling == pooling and fit.train_mse < 1e-12 and bool(path.fitted)
    with torch.no_grad():
        torch.testing.assert_close(path(x[200:].float(), [0, 1]).double(), y[200:], atol=1e-3, rtol=1e-4)
    if pooling == "pooled":
        torch.testing.assert_close(path.weight[0], path.weight[1])


def test_revin_fit_minimises_the_model_scale_error() -> None:
    """On the RevIN-normalised window, each window's error is weighted by its squared scale: the fit is the
    least-squares solution of the model-scale error, found here by gradient descent from another start."""
    g = torch.Generator().manual_seed(0)
    x = (
        torch.randn(64, 8, 1, generator=g, dtype=torch.float64)
        * torch.rand(64, 1, 1, generator=g, dtype=torch.float64)
        * 3
    )
    y = torch.randn(64, 2, 1, generator=g, dtype=torch.float64) + x[:, -1:, :]
    net = PatchTST(1, 1, 8, 2, [0], residual="off", linear_input="revin", patch_len=4, stride=4)
    fit = net.fit_linear(lambda: [(x, y)], ridges=(0.0,))
    assert fit.input == "revin"
    w = net.linear.weight.detach().double().clone().requires_grad_(True)
    plain, mean, std = net._target_scale(x)

    def loss(weight: torch.Tensor) -> torch.Tensor:
        pred = (torch.einsum("blk,klf->bfk", plain[..., [0]], weight[:, :8]) + weight[:, 8].T) * std + mean
        return ((pred - y) ** 2).mean()

    grad = torch.autograd.grad(loss(w), w)[0]
    assert grad.abs().max() < 1e-6  # a stationary point of the model-scale training MSE
    assert loss(w).item() == pytest.approx(fit.train_mse, rel=1e-5)


def test_validation_chooses_the_input_and_a_fixed_ridge_is_kept() -> None:
    """A level series (absolute values matter): the plain window validates better than the normalised one,
    and ``auto`` keeps it under the lowest-validation-error rule (``select_se=0``); a given ridge is the one used."""
    dm = SineDataModule(n_features=2, context_len=24, horizon=4, n_bars=600, noise=0.3)
    dm.setup()

    def pairs(ds):
        return [(torch.stack([ds[i]["x"] for i in range(len(ds))]), torch.stack([ds[i]["y"] for i in range(len(ds))]))]  # noqa: E731

    scores = {}
    for choice in ("revin", "raw", "auto"):
        net = PatchTST(2, 2, 24, 4, [0, 1], residual="off", linear_input=choice, patch_len=4, stride=4)
        ridges = (1e-3,) if choice == "auto" else (0.0, 1e-3, 1e-1)
        fit = net.fit_linear(lambda: pairs(dm.train_set), lambda: pairs(dm.val_set), ridges=ridges, select_se=0.0)
        scores[choice] = fit
    assert scores["auto"].input == min(("revin", "raw"), key=lambda c: scores[c].val_mse)
    assert scores["auto"].ridge == 1e-3


def test_a_zero_residual_reproduces_the_linear_path_bit_for_bit() -> None:
    """After the closed-form fit, before any step, the model's forecast is the linear path's own, bit for bit,
    with and without RevIN-normalised input and with the gate open."""
    L.seed_everything(0)
    dm = SineDataModule(n_features=2, context_len=32, horizon=6, n_bars=400)
    x = torch.randn(5, 32, 2) * 2 + 1
    for linear_input in ("revin", "raw"):
        seen: dict[str, torch.Tensor] = {}

        class BeforeTheFirstStep(L.Callback):
            def on_train_batch_start(self, trainer: L.Trainer, model: KLineForecaster, *args: object) -> None:
                if seen:
                    return
                model.eval()
                parts = model.net.parts(x)[0]
                plain, mean, std = model.net._target_scale(x)
                by_hand = model.net.linear(plain if linear_input == "revin" else x, [0, 1])  # (B, F, K)
                seen.update(
                    model=model(x),
                    by_hand=by_hand * std + mean if linear_input == "revin" else by_hand,
                    residual=parts.residual,
                    linear_only=model.net.combine(parts, gate=0.0),
                    fitted=model.net.linear.fitted.clone(),
                    gate=model.net.residual_gate.clone(),
                )
                model.train()

        model = KLineForecaster(
            n_features=2, n_targets=2, context_len=32, horizon=6, linear_input=linear_input, revin_affine=True, **TINY
        )
        L.Trainer(
            max_steps=1,
            limit_val_batches=0,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[BeforeTheFirstStep()],
        ).fit(model, dm)
        assert bool(seen["fitted"]) and bool((seen["gate"] == 1.0).all())
        assert torch.equal(seen["residual"], torch.zeros_like(seen["residual"]))
        assert torch.equal(seen["model"], seen["by_hand"]) and torch.equal(seen["model"], seen["linear_only"])


def _etth1(path: Path, n: int = 20 * 30 * 24) -> pd.DataFrame:
    t = np.arange(n)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"date": pd.date_range("2016-07-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S")})
    for k, name in enumerate(["HUFL", "OT"]):
        frame[name] = np.sin(2 * np.pi * t / 24 + k) + 0.3 * rng.standard_normal(n)
    frame.to_csv(path, index=False)
    return frame


def _fit_linear_path(path: Path, **kw) -> KLineForecaster:
    dm = MultivariateDataModule(str(path), context_len=24, horizon=4, batch_size=512)
    model = KLineForecaster(
        n_features=2,
        n_targets=2,
        context_len=24,
        horizon=4,
        baselines=False,
        **{**TINY, "patch_len": 8, "stride": 8},
        **kw,
    )
    # the frozen linear path does not move in the one step; the validation windows are read by the fit alone
    L.Trainer(
        max_steps=1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(model, dm)
    return model


def test_the_closed_form_fit_reads_training_windows_only(tmp_path: Path) -> None:
    """Changing every test row leaves the fit bit-identical (validation choosing as before); changing every
    validation row too, once the choice is fixed (ridge and pooling given). Changing a training row moves it."""
    frame = _etth1(tmp_path / "ETTh1.csv")
    fixed = {"linear_ridge": 1e-3, "linear_pooling": "pooled", "linear_input": "raw"}
    before = _fit_linear_path(tmp_path / "ETTh1.csv").net.linear.weight.detach().clone()
    before_fixed = _fit_linear_path(tmp_path / "ETTh1.csv", **fixed).net.linear.weight.detach().clone()
    train_end, val_end = 12 * 30 * 24, 16 * 30 * 24
    changed = frame.copy()
    changed.loc[val_end:, ["HUFL", "OT"]] *= 7.0  # the test months
    changed.to_csv(tmp_path / "ETTh1.csv", index=False)
    assert torch.equal(_fit_linear_path(tmp_path / "ETTh1.csv").net.linear.weight, before)
    changed.loc[train_end:, ["HUFL", "OT"]] += 3.0  # and the validation months
    changed.to_csv(tmp_path / "ETTh1.csv", index=False)
    assert torch.equal(_fit_linear_path(tmp_path / "ETTh1.csv", **fixed).net.linear.weight, before_fixed)
    changed.loc[train_end - 1, "OT"] += 1.0  # one training row
    changed.to_csv(tmp_path / "ETTh1.csv", index=False)
    assert not torch.equal(_fit_linear_path(tmp_path / "ETTh1.csv", **fixed).net.linear.weight, before_fixed)


class _NoisyResidual(KLineForecaster):
    """A residual that can only hurt: its output layer is set to noise after every step."""

    def on_train_batch_end(self, *args: object) -> None:
        with torch.no_grad():
            self.net.head.weight.normal_(0.0, 1.0)


def test_a_residual_that_never_beats_the_linear_path_is_switched_off() -> None:
    """The validation loss of the linear path alone is measured beside the full model's; under a loss other
    than MSE a residual that never lowers it stays off (``val/loss`` is the linear path's), and the summary
    says so in one line."""
    L.seed_everything(0)
    dm = SineDataModule(n_features=2, context_len=32, horizon=6, n_bars=500)
    model = _NoisyResidual(n_features=2, n_targets=2, context_len=32, horizon=6, loss="huber", **TINY)
    t = L.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    t.fit(model, dm)
    m = t.callback_metrics
    assert float(m["val/loss_residual"]) > float(m["val/loss_linear"]) == pytest.approx(float(m["val/loss"]))
    assert not model.residual_kept and bool((model.net.residual_gate == 0.0).all())
    x = next(iter(dm.val_dataloader()))["x"]
    model.eval()
    assert torch.equal(model(x), model.net.combine(model.net.parts(x)[0], gate=0.0))
    t.test(model, dm, verbose=False)
    assert model.test_summary["about"]["selection"].startswith(
        "tested model: the linear path alone; the Transformer residual did not beat it on validation by more than "
        "noise (loss "
    )


def test_under_mse_a_noisy_residual_is_weighed_down_on_validation() -> None:
    """Under MSE the residual's weight per target is the validation least-squares weight: noise gets a weight
    near 0, and ``val/loss`` (the weighted model's) is never above the linear path's or the full model's."""
    L.seed_everything(0)
    dm = SineDataModule(n_features=2, context_len=32, horizon=6, n_bars=500)
    model = _NoisyResidual(n_features=2, n_targets=2, context_len=32, horizon=6, **TINY)
    t = L.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    t.fit(model, dm)
    m = t.callback_metrics
    assert float(m["val/loss"]) <= min(float(m["val/loss_linear"]), float(m["val/loss_residual"]))
    assert bool((model.net.residual_gate < 0.2).all())
    full, linear, weighted, gain, se = model.val_selection.tolist()
    assert weighted == pytest.approx(float(m["val/loss"])) and linear == pytest.approx(float(m["val/loss_linear"]))
    # the module follows the rule's decision: kept exactly when the out-of-sample gain passes the bar, and
    # then val/loss is the weighted model's; a bar no gain can pass leaves the linear path alone
    for keep_se in (0.0, 1e6):
        L.seed_everything(0)
        model = KLineForecaster(n_features=2, n_targets=2, context_len=32, horizon=6, residual_keep_se=keep_se, **TINY)
        t = L.Trainer(
            max_epochs=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        t.fit(model, dm)
        full, linear, weighted, gain, se = model.val_selection.tolist()
        assert se > 0 and weighted <= linear  # in sample the weighted residual never loses
        assert model.residual_kept is (gain > keep_se * se and bool((model.net.residual_gate > 0).any()))
        assert float(t.callback_metrics["val/loss"]) == pytest.approx(
            weighted if model.residual_kept else linear, rel=1e-4
        )
    assert not model.residual_kept
    assert "did not beat it on validation by more than noise" in model.selection_line()
    assert "1e+06 standard error" in model.selection_line()
    with pytest.raises(ValueError, match=r"residual_keep_se must be >= 0, got -1"):
        KLineForecaster(n_features=2, n_targets=2, context_len=32, horizon=6, residual_keep_se=-1)
    with pytest.raises(ValueError, match=r"selection_blocks must be >= 2, got 1"):
        KLineForecaster(n_features=2, n_targets=2, context_len=32, horizon=6, selection_blocks=1)


def test_configuration_errors_name_the_values() -> None:
    kw = dict(n_features=2, n_targets=2, context_len=32, horizon=6)
    with pytest.raises(ValueError, match="residual 'off' with linear 'frozen' leaves nothing to train"):
        KLineForecaster(**kw, residual="off")
    with pytest.raises(ValueError, match=r"residual must be 'on', 'off', 'only' or 'blend', got 'maybe'"):
        KLineForecaster(**kw, residual="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"linear must be 'frozen' or 'tuned' \(with .*\), got 'warm'"):
        KLineForecaster(**kw, linear="warm")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"with residual: blend, 'frozen'\), got 'tuned'"):
        KLineForecaster(**kw, residual="blend", linear="tuned")  # the Transformer trains alone: nothing to tune
    with pytest.raises(ValueError, match="linear_input 'revin' needs revin: true"):
        KLineForecaster(**kw, revin=False, linear_input="revin")
    with pytest.raises(ValueError, match=r"linear_select_se must be >= 0, got -1"):
        KLineForecaster(**kw, linear_select_se=-1.0)
    assert KLineForecaster(**kw, residual=False, linear="tuned").hparams.residual == "off"  # YAML's unquoted off
    with pytest.raises(ValueError, match="residual 'only' has no linear path to fit"):
        PatchTST(2, 2, 32, 6).fit_linear(lambda: [])


def test_the_dlinear_form_folds_into_one_map_of_the_window() -> None:
    """Weights over ``[remainder, trend, 1]`` give the same forecast as their fold over ``[window, 1]``, per
    target channel and over every channel (mixing)."""
    from lightning_tf.kline.networks.closed_form import fold_decomposed, moving_average, trend_matrix

    g = torch.Generator().manual_seed(0)
    L, C, O, k = 12, 3, 5, 5
    x = torch.randn(7, L, C, generator=g, dtype=torch.float64)
    trend = moving_average(x, k)
    M = trend_matrix(L, k)
    torch.testing.assert_close(x.transpose(1, 2) @ M, trend.transpose(1, 2))  # trend = window @ M
    for channels, parts in (
        (1, torch.cat((x - trend, trend), 1)[:, :, 0]),
        (C, torch.cat((x - trend, trend), 1).reshape(7, -1)),
    ):
        w = torch.randn(parts.shape[1] + 1, O, generator=g, dtype=torch.float64)
        plain = x[:, :, 0] if channels == 1 else x.reshape(7, -1)
        folded = fold_decomposed(w, M, channels)
        torch.testing.assert_close(plain @ folded[:-1] + folded[-1], parts @ w[:-1] + w[-1])
