"""KLineForecaster: gradients, channel independence, RevIN wiring, data agreement, a learnable
series beaten well below persistence, baselines on the same windows, checkpoints."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from lightning_tf.kline import KLineDataModule, KLineForecaster
from lightning_tf.kline.layers import n_patches

from .synthetic import SCALE, SHIFT, SineDataModule

TINY = {"patch_len": 8, "stride": 4, "d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32}


def tiny(**kw) -> KLineForecaster:
    args = dict(n_features=3, n_targets=3, context_len=32, horizon=6, **TINY)
    args.update(kw)
    return KLineForecaster(**args)


def trainer(max_epochs: int = 1, **kw) -> L.Trainer:
    return L.Trainer(max_epochs=max_epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, **kw)


def write_bars(path: Path, n: int = 400, seed: int = 0) -> pd.DataFrame:
    """A random-walk daily OHLCV file on business days."""
    rng = np.random.default_rng(seed)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = close * np.exp(rng.normal(0, 0.003, n))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.004, n)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.004, n)))
    df = pd.DataFrame({"Date": pd.bdate_range("2020-01-01", periods=n).strftime("%Y-%m-%d"), "Open": open_,
                       "High": high, "Low": low, "Close": close, "Volume": rng.integers(1000, 5000, n)})
    df.to_csv(path, index=False)
    return df


@pytest.mark.parametrize("channel_mixing", [False, True])
def test_every_parameter_gets_a_gradient(channel_mixing: bool) -> None:
    model = tiny(channel_mixing=channel_mixing, target_channels=[0, 1, 2], dropout=0.0)
    x = torch.randn(4, 32, 3)
    model(x).pow(2).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"parameters without gradient: {missing}"


def test_channel_independent_head_keeps_channels_apart() -> None:
    model = tiny(channel_mixing=False).eval()
    x = torch.randn(2, 32, 3)
    x2 = x.clone()
    x2[:, :, 1] = torch.randn(2, 32) * 5 + 3  # change channel 1 only
    y, y2 = model(x), model(x2)
    torch.testing.assert_close(y2[..., [0, 2]], y[..., [0, 2]], rtol=0, atol=0)
    assert (y2[..., 1] - y[..., 1]).abs().max() > 1e-3
    # the mixing head, by contrast, lets channel 1 move every forecast
    mixing = tiny(channel_mixing=True, target_channels=[0, 1, 2]).eval()
    assert (mixing(x2)[..., 0] - mixing(x)[..., 0]).abs().max() > 1e-4


def test_revin_maps_a_zero_head_back_to_the_window_mean() -> None:
    """With the head's output zero, the forecast is RevIN's denormalisation of 0: each target
    channel's context mean."""
    model = tiny(target_channels=[2, 0], n_targets=2).eval()
    torch.nn.init.zeros_(model.head.weight)
    torch.nn.init.zeros_(model.head.bias)
    x = torch.randn(3, 32, 3) * 4 + torch.tensor([1.0, -2.0, 10.0])
    expected = x[..., [2, 0]].mean(1, keepdim=True).expand(-1, 6, -1)
    torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)


def test_attention_over_patches() -> None:
    model = tiny().eval()
    x = torch.randn(2, 32, 3)
    maps = model.attention_maps(x)
    N = n_patches(32, 8, 4)
    assert maps.shape == (2, 3, N, N)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 3, N))
    y, weights = model(x, need_weights=True)
    torch.testing.assert_close(y, model(x))  # the explicit-weights path computes the same forecast
    assert len(weights) == 2 and weights[0].shape == (2, 3, 2, N, N)


def test_huber_loss() -> None:
    model = tiny(loss="huber", huber_delta=0.5)
    pred, y = torch.randn(2, 6, 3) * 3, torch.randn(2, 6, 3)
    torch.testing.assert_close(model._loss(pred, y), F.huber_loss(pred, y, delta=0.5))
    assert not torch.allclose(model._loss(pred, y), F.mse_loss(pred, y))


def test_configuration_errors_name_the_values() -> None:
    with pytest.raises(ValueError, match=r"patch_len \(40\) must not exceed context_len \(32\)"):
        tiny(patch_len=40)
    with pytest.raises(ValueError, match=r"target_channels \[0\] must list n_targets \(3\)"):
        tiny(target_channels=[0])
    with pytest.raises(ValueError, match="must index the n_features"):
        tiny(n_targets=1, target_channels=[5])
    with pytest.raises(ValueError, match="target_channels is unknown"):
        tiny(n_targets=1)(torch.randn(1, 32, 3))
    with pytest.raises(ValueError, match="d_model"):
        tiny(d_model=15)


def test_bad_batches_are_refused_where_they_enter() -> None:
    model = tiny()
    with pytest.raises(ValueError, match=r"batch 'x' must be \(B, context_len=32, n_features=3\), got \(2, 30, 3\)"):
        model._shared_step({"x": torch.randn(2, 30, 3), "y": torch.randn(2, 6, 3)}, "train")
    x = torch.randn(2, 32, 3)
    x[1, 4, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite"):
        model._shared_step({"x": x, "y": torch.randn(2, 6, 3)}, "train")


def test_model_and_data_must_agree() -> None:
    dm = SineDataModule(n_features=3, context_len=48, horizon=8)
    with pytest.raises(ValueError, match=r"model context_len \(32\) differs from the data's context_len \(48\)"):
        trainer().fit(tiny(horizon=8), dm)
    with pytest.raises(ValueError, match=r"target_channels \[2, 1, 0\] differ from the data's \[0, 1, 2\]"):
        trainer().fit(tiny(context_len=48, horizon=8, target_channels=[2, 1, 0]), dm)


def test_learns_a_sinusoid_far_below_persistence() -> None:
    """Noisy sinusoids: the model's test MSE is a small fraction of persistence's, and of the mean
    and drift forecasts'; the summary of the same windows says so."""
    L.seed_everything(0)
    dm = SineDataModule(n_features=2, context_len=48, horizon=8, noise=0.1)
    model = KLineForecaster(n_features=2, n_targets=2, context_len=48, horizon=8, **TINY, dropout=0.0,
                            head_dropout=0.0, lr=3e-3, warmup_steps=5)
    t = trainer(max_epochs=8)
    t.fit(model, dm)
    t.test(model, dm, verbose=False)
    s = model.test_summary
    mse = s["model"]["model"]["mse"]
    assert mse < 0.1 * s["persistence"]["model"]["mse"], s
    assert mse < 0.1 * s["mean"]["model"]["mse"] and mse < 0.1 * s["drift"]["model"]["mse"]
    assert s["model"]["model"]["mase"] < 0.3 and s["model"]["model"]["dir_acc"] > 0.85
    # original units are the model scale through the data's affine map: MSE scales by SCALE^2
    assert s["model"]["orig"]["mse"] == pytest.approx(SCALE**2 * mse, rel=1e-4)
    # persistence on the model scale is the last context value, checked by hand on the test windows
    ys, lasts = zip(*((b["y"], b["x"][:, -1:, :]) for b in dm.test_dataloader()), strict=True)
    y, last = torch.cat(ys), torch.cat(lasts)
    assert s["persistence"]["model"]["mse"] == pytest.approx(float(((y - last) ** 2).mean()), rel=1e-5)
    assert s["persistence"]["orig"]["mae"] == pytest.approx(SCALE * float((y - last).abs().mean()), rel=1e-5)
    assert SHIFT  # the shift cancels in every error


def test_kline_fit_test_baselines_and_checkpoint(tmp_path: Path) -> None:
    """On a K-line file: one epoch, then test; the baselines are scored on exactly the test windows
    (checked by hand from the batches) in log-return units and on rebuilt prices; the checkpoint
    loads with weights_only=True and reproduces the forecasts."""
    write_bars(tmp_path / "bars.csv")
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=4, batch_size=32)
    model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=4, **TINY)
    t = L.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                  default_root_dir=tmp_path)
    t.fit(model, dm)
    assert model.hparams.target_channels == [0]  # adopted from the data: log_return is input channel 0
    t.test(model, dm, verbose=False)
    s = model.test_summary
    assert set(s) == {"model", "persistence", "mean", "dlinear"}
    batches = list(dm.test_dataloader())
    y = torch.cat([dm.inverse_targets(b["y"], b["ticker"]) for b in batches]).double()  # (W, F, 1) log returns
    past = torch.cat([b["x_raw_target"] for b in batches]).double()  # (W, L, 1)
    anchor = torch.cat([b["anchor"] for b in batches])
    assert s["persistence"]["orig"]["mse"] == pytest.approx(float((y**2).mean()), rel=1e-4)
    mean_fc = past.mean(1, keepdim=True)
    assert s["mean"]["orig"]["mae"] == pytest.approx(float((y - mean_fc).abs().mean()), rel=1e-4)
    true_close = anchor[:, None] * torch.exp(torch.cumsum(y[..., 0], 1))  # (W, F)
    assert s["persistence"]["price"]["mae"] == pytest.approx(float((true_close - anchor[:, None]).abs().mean()), rel=1e-4)
    assert s["model"]["orig"]["up_share"] == pytest.approx(float((y > 0).sum() / (y != 0).sum()), rel=1e-5)

    ckpt = next(tmp_path.rglob("*.ckpt"))
    state = torch.load(ckpt, weights_only=True, map_location="cpu")
    assert state["hyper_parameters"]["target_channels"] == [0]
    loaded = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu").eval()
    x = batches[0]["x"]
    torch.testing.assert_close(loaded(x), model.eval()(x))


def test_summary_says_plainly_whether_the_model_beats_each_baseline() -> None:
    from lightning_tf.kline.module import summary_text

    row = lambda mse, mae: {"orig": {"mse": mse, "mae": mae}}
    text = summary_text({"model": row(1.0, 1.0), "persistence": row(2.0, 2.0), "mean": row(1.5, 0.5),
                         "dlinear": row(0.9, 0.9)}, "orig")
    assert "model beats persistence: MSE 1 vs 2, MAE 1 vs 2" in text
    assert "model beats mean on MSE only" in text
    assert "model does NOT beat dlinear" in text


@pytest.mark.parametrize(("features", "channel_mixing"), [("M", False), ("MS", True), ("S", False)])
def test_multivariate_csv_end_to_end(tmp_path: Path, features: str, channel_mixing: bool) -> None:
    """A generic CSV under the long-term forecasting protocol: the model scores on the normalised
    scale, and persistence there is the last context value of each target channel."""
    n = 600
    t = np.arange(n)
    rng = np.random.default_rng(0)
    pd.DataFrame({
        "date": pd.date_range("2021-01-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S"),
        "a": np.sin(t / 7) + 0.1 * rng.normal(size=n), "b": np.cos(t / 11) + 0.1 * rng.normal(size=n),
        "OT": 5 + np.sin(t / 5) + 0.1 * rng.normal(size=n),
    }).to_csv(tmp_path / "series.csv", index=False)
    from lightning_tf.kline import MultivariateDataModule

    dm = MultivariateDataModule(str(tmp_path / "series.csv"), context_len=32, horizon=4, features=features, batch_size=64)
    model = KLineForecaster(n_features=dm.n_features, n_targets=dm.n_targets, context_len=32, horizon=4,
                            channel_mixing=channel_mixing, **TINY)
    t_ = trainer(max_epochs=1)
    t_.fit(model, dm)
    t_.test(model, dm, verbose=False)
    s = model.test_summary
    assert model.target_channels == dm.target_channels
    assert set(s) == {"model", "persistence", "mean", "drift", "dlinear"}
    batches = list(dm.test_dataloader())
    y = torch.cat([b["y"] for b in batches])
    last = torch.cat([b["x"][:, -1:, dm.target_channels] for b in batches])
    assert s["persistence"]["model"]["mse"] == pytest.approx(float(((y - last) ** 2).mean()), rel=1e-5)
    raw = torch.cat([b["x_raw_target"][:, -1:, :] for b in batches]).double()
    y_orig = torch.cat([dm.inverse_targets(b["y"], b["ticker"]) for b in batches]).double()
    assert s["persistence"]["orig"]["mae"] == pytest.approx(float((y_orig - raw).abs().mean()), rel=1e-4)


def test_attention_image_is_logged_to_wandb_only_under_a_wandb_logger(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    dm = SineDataModule(n_features=2, context_len=32, horizon=6, n_bars=400)
    model = KLineForecaster(n_features=2, n_targets=2, context_len=32, horizon=6, **TINY)
    logger = WandbLogger(project="test", save_dir=str(tmp_path), offline=True)
    t = L.Trainer(max_epochs=1, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False)
    t.fit(model, dm)
    t.test(model, dm, verbose=False)
    logger.experiment.finish()
    images = list(tmp_path.rglob("media/images/test/attention*.png"))
    assert len(images) == 1 and images[0].stat().st_size > 5_000
    # another logger: the test runs the same and no image is written anywhere
    t2 = L.Trainer(max_epochs=1, logger=CSVLogger(tmp_path / "csv"), enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False)
    t2.test(model, dm, verbose=False)
    assert not list((tmp_path / "csv").rglob("*.png"))


def test_returns_target_follows_the_data_target_kind() -> None:
    """``target_kind`` decides returns vs levels; without it, targets named log_return are returns."""
    from types import SimpleNamespace

    model = tiny(n_features=1, n_targets=1, target_channels=[0])
    model._trainer = SimpleNamespace(datamodule=SimpleNamespace(target_names=["log_return"]))
    assert model.returns_target  # the older inference from the name
    model._trainer.datamodule.target_kind = "level"
    assert not model.returns_target  # the explicit kind wins over the name
    model._trainer.datamodule = SimpleNamespace(target_names=["spread"], target_kind="return")
    assert model.returns_target
    model._trainer.datamodule.target_kind = "price"
    with pytest.raises(ValueError, match=r"target_kind must be 'return' or 'level', got 'price'"):
        _ = model.returns_target


def test_decay_schedule_is_patchtsts_type3(tmp_path: Path) -> None:
    """``scheduler: decay``: the peak for epochs 0-2, then x0.9 per epoch, stepped once per epoch."""
    model = tiny(lr=1e-3, scheduler="decay", baselines=False)
    dm = SineDataModule(n_features=3, context_len=32, horizon=6, n_bars=400)
    lrs: list[float] = []

    class Record(L.Callback):
        def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    trainer(max_epochs=6, limit_train_batches=2, limit_val_batches=1, callbacks=[Record()],
            default_root_dir=tmp_path).fit(model, dm)
    assert lrs == pytest.approx([1e-3, 1e-3, 1e-3, 9e-4, 8.1e-4, 7.29e-4])


def test_batch_norm_encoder_option() -> None:
    from lightning_tf.core import TokenBatchNorm

    model = tiny(norm="batch", norm_first=False)
    assert sum(isinstance(m, TokenBatchNorm) for m in model.modules()) == 2 * model.hparams.n_layers
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.encoder.modules())
