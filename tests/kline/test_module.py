"""KLineForecaster: data agreement and the one hand-over, a learnable series beaten well below
persistence, baselines on the same windows, the linear fits kept in checkpoints, schedules."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from lightning_tf.kline import DataScale, KLineDataModule, KLineForecaster, MultivariateDataModule
from lightning_tf.kline.settings import Features, Loading
from tests.helpers.kline import SCALE, SHIFT, TINY, SineDataModule, write_bars
from tests.helpers.kline import quiet_trainer as trainer


def tiny(**kw) -> KLineForecaster:
    args = dict(n_features=3, n_targets=3, context_len=32, horizon=6, **TINY)
    args.update(kw)
    return KLineForecaster(**args)


def test_network_is_built_in_one_place() -> None:
    model = tiny(channel_mixing=True, target_channels=[0, 1, 2]).eval()
    assert [name for name, _ in model.named_children()] == [
        "net",
        "metrics",
        "val_loss",
        "selection",
        "linear_baseline",
    ]
    assert {n.split(".")[0] for n, _ in model.named_parameters()} == {"net"}
    x = torch.randn(2, 32, 3)
    torch.testing.assert_close(model(x), model.net(x))
    assert model.example_input_array.shape == (1, 32, 3)
    assert (model.onnx_input_names, model.onnx_output_names) == (["context"], ["forecast"])


def test_huber_loss() -> None:
    model = tiny(loss="huber", huber_delta=0.5)
    pred, y = torch.randn(2, 6, 3) * 3, torch.randn(2, 6, 3)
    torch.testing.assert_close(model._loss(pred, y), F.huber_loss(pred, y, delta=0.5))
    assert not torch.allclose(model._loss(pred, y), F.mse_loss(pred, y))


def test_bad_batches_are_refused_where_they_enter() -> None:
    model = tiny()
    with pytest.raises(ValueError, match=r"batch 'x' must be \(B, context_len=32, n_features=3\), got \(2, 30, 3\)"):
        model._shared_step({"x": torch.randn(2, 30, 3), "y": torch.randn(2, 6, 3)}, "train")
    with pytest.raises(ValueError, match=r"batch 'y' must be \(B, horizon=6, n_targets=3\), got \(2, 5, 3\)"):
        model._shared_step({"x": torch.randn(2, 32, 3), "y": torch.randn(2, 5, 3)}, "train")


def test_model_and_data_must_agree() -> None:
    dm = SineDataModule(n_features=3, context_len=48, horizon=8)
    with pytest.raises(ValueError, match=r"model.context_len \(32\) differs from the data's context_len \(48\)"):
        trainer().fit(tiny(horizon=8), dm)
    with pytest.raises(ValueError, match=r"model.target_channels \(\[2, 1, 0\]\) differs from the data's target_chan"):
        trainer().fit(tiny(context_len=48, horizon=8, target_channels=[2, 1, 0]), dm)


def test_targets_that_are_not_inputs_need_the_mixing_head(tmp_path: Path) -> None:
    write_bars(tmp_path / "bars.csv", n=300)
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=3, features=Features(target="close"))
    with pytest.raises(ValueError, match="the channel-independent head cannot forecast them"):
        trainer(max_steps=1).fit(KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=3, **TINY), dm)


def test_learns_a_sinusoid_far_below_persistence() -> None:
    """Noisy sinusoids: the model's test MSE is a small fraction of persistence's, and of the mean
    and drift forecasts'; the summary of the same windows says so."""
    L.seed_everything(0)
    dm = SineDataModule(n_features=2, context_len=48, horizon=8, noise=0.1)
    model = KLineForecaster(
        n_features=2,
        n_targets=2,
        context_len=48,
        horizon=8,
        **TINY,
        dropout=0.0,
        head_dropout=0.0,
        lr=3e-3,
        warmup_steps=5,
    )
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
    loads with weights_only=True and reproduces the forecasts and the data scale."""
    write_bars(tmp_path / "bars.csv")
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=4, loading=Loading(batch_size=32))
    model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=4, **TINY)
    t = L.Trainer(
        max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path
    )
    t.fit(model, dm)
    # adopted from the data (log_return is input channel 0), as a plain attribute: the arguments stay as given
    assert model.target_channels == [0] and model.hparams.target_channels is None
    assert model.data_scale == dm.data_scale
    t.test(model, dm, verbose=False)
    s = model.test_summary
    assert set(s) == {"model", "persistence", "mean", "linear", "about", "backtest"}
    batches = list(dm.test_dataloader())
    y = torch.cat([dm.inverse_targets(b["y"], b["ticker"]) for b in batches]).double()  # (W, F, 1) log returns
    past = torch.cat([b["x_raw_target"] for b in batches]).double()  # (W, L, 1)
    anchor = torch.cat([b["anchor"] for b in batches])
    assert s["persistence"]["orig"]["mse"] == pytest.approx(float((y**2).mean()), rel=1e-4)
    mean_fc = past.mean(1, keepdim=True)
    assert s["mean"]["orig"]["mae"] == pytest.approx(float((y - mean_fc).abs().mean()), rel=1e-4)
    true_close = anchor[:, None] * torch.exp(torch.cumsum(y[..., 0], 1))  # (W, F)
    persistence_mae = float((true_close - anchor[:, None]).abs().mean())
    assert s["persistence"]["price"]["mae"] == pytest.approx(persistence_mae, rel=1e-4)
    assert s["model"]["orig"]["up_share"] == pytest.approx(float((y > 0).sum() / (y != 0).sum()), rel=1e-5)

    ckpt = next(tmp_path.rglob("*.ckpt"))
    state = torch.load(ckpt, weights_only=True, map_location="cpu")
    assert state["target_channels"] == [0] and state["hyper_parameters"]["target_channels"] is None
    assert DataScale.from_dict(state["data_scale"]) == dm.data_scale
    # one target channel: one map, of the context (33 = 32 + 1) or of its trend and remainder (65 = 2 * 32 + 1)
    assert state["state_dict"]["linear_baseline.weight"].shape in ((1, 33, 4), (1, 65, 4))
    assert state["state_dict"]["net.linear.weight"].shape == (1, 33, 4) and bool(
        state["state_dict"]["net.linear.fitted"]
    )
    loaded = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu").eval()
    assert loaded.target_channels == [0] and loaded.data_scale == dm.data_scale
    x = batches[0]["x"]
    torch.testing.assert_close(loaded(x), model.eval()(x))
    torch.testing.assert_close(loaded.linear_baseline(x), model.linear_baseline(x), rtol=0, atol=0)


def test_linear_fits_happen_when_training_starts_and_are_kept_by_the_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Trained here: the linear baseline is scored. Tested from the checkpoint by a fresh model (``test
    --ckpt_path``): the same numbers, no refit. A run resumed from the checkpoint keeps the linear path and
    the baseline (no refit). Never trained: the baseline is skipped, saying so once."""
    write_bars(tmp_path / "bars.csv")
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=4, loading=Loading(batch_size=32))
    kw = dict(n_features=6, n_targets=1, context_len=32, horizon=4, **TINY)
    model = KLineForecaster(**kw)
    assert not model.linear_baseline.fitted and not model.net.linear.fitted
    t = trainer(max_steps=3, limit_val_batches=2, default_root_dir=tmp_path)
    t.fit(model, dm)
    assert model.linear_baseline.fitted and model.linear_baseline.ridge is not None and model.net.linear.fitted
    path = tmp_path / "fit.ckpt"
    t.save_checkpoint(path)
    t.test(model, dm, verbose=False)
    fresh = KLineForecaster(**kw)
    trainer().test(fresh, dm, ckpt_path=str(path), verbose=False)
    assert fresh.test_summary["linear"] == model.test_summary["linear"]
    # resuming from the checkpoint keeps its fits: changed weights survive the next training start
    with torch.no_grad():
        fresh.linear_baseline.weight.add_(1.0)
        fresh.net.linear.weight.add_(1.0)
    expected = fresh.linear_baseline.weight.clone(), fresh.net.linear.weight.clone()
    torch.save({**torch.load(path, weights_only=True), "state_dict": fresh.state_dict()}, tmp_path / "moved.ckpt")
    resumed = KLineForecaster(**kw)
    trainer(max_steps=4, limit_val_batches=1).fit(resumed, dm, ckpt_path=str(tmp_path / "moved.ckpt"))
    torch.testing.assert_close(resumed.linear_baseline.weight, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(resumed.net.linear.weight, expected[1], rtol=0, atol=0)  # frozen, not refit
    with caplog.at_level(logging.INFO, logger="lightning_tf.kline.module"):
        untrained = KLineForecaster(**kw)
        trainer().test(untrained, dm, verbose=False)
    assert "linear" not in untrained.test_summary and {"persistence", "mean"} <= set(untrained.test_summary)
    assert caplog.text.count("linear baseline skipped") == 1


def test_fitting_the_baseline_leaves_training_untouched(tmp_path: Path) -> None:
    """The linear baseline's fit reads every training window when training starts: it must not move the
    random state that shuffles and drops out, so a model trains the same with and without baselines."""
    write_bars(tmp_path / "bars.csv")
    params = []
    for baselines in (True, False):
        L.seed_everything(0)
        dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=4, loading=Loading(batch_size=32))
        model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=4, baselines=baselines, **TINY)
        trainer(max_steps=4, limit_val_batches=1).fit(model, dm)
        params.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*params, strict=True))


@pytest.mark.parametrize(("features", "channel_mixing"), [("M", False), ("MS", True), ("S", False)])
def test_multivariate_csv_end_to_end(tmp_path: Path, features: str, channel_mixing: bool) -> None:
    """A generic CSV under the long-term forecasting protocol: the model scores on the normalised
    scale, and persistence there is the last context value of each target channel."""
    n = 600
    t = np.arange(n)
    rng = np.random.default_rng(0)
    pd.DataFrame(
        {
            "date": pd.date_range("2021-01-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S"),
            "a": np.sin(t / 7) + 0.1 * rng.normal(size=n),
            "b": np.cos(t / 11) + 0.1 * rng.normal(size=n),
            "OT": 5 + np.sin(t / 5) + 0.1 * rng.normal(size=n),
        }
    ).to_csv(tmp_path / "series.csv", index=False)
    dm = MultivariateDataModule(
        str(tmp_path / "series.csv"), context_len=32, horizon=4, features=features, batch_size=64
    )
    model = KLineForecaster(
        n_features=dm.n_features,
        n_targets=dm.n_targets,
        context_len=32,
        horizon=4,
        channel_mixing=channel_mixing,
        **TINY,
    )
    t_ = trainer(max_epochs=1)
    t_.fit(model, dm)
    t_.test(model, dm, verbose=False)
    s = model.test_summary
    assert model.target_channels == dm.target_channels
    assert set(s) == {"model", "persistence", "mean", "drift", "linear", "about"}
    batches = list(dm.test_dataloader())
    y = torch.cat([b["y"] for b in batches])
    last = torch.cat([b["x"][:, -1:, dm.target_channels] for b in batches])
    assert s["persistence"]["model"]["mse"] == pytest.approx(float(((y - last) ** 2).mean()), rel=1e-5)
    raw = torch.cat([b["x_raw_target"][:, -1:, :] for b in batches]).double()
    y_orig = torch.cat([dm.inverse_targets(b["y"], b["ticker"]) for b in batches]).double()
    assert s["persistence"]["orig"]["mae"] == pytest.approx(float((y_orig - raw).abs().mean()), rel=1e-4)


def test_return_targets_of_a_generic_csv_have_no_prices(tmp_path: Path) -> None:
    """A CSV's return column has no closes to rebuild (its anchors are zeros): no price scale is scored."""
    n = 400
    rng = np.random.default_rng(1)
    pd.DataFrame(
        {
            "date": pd.date_range("2021-01-01", periods=n, freq="D"),
            "volume": rng.normal(size=n),
            "log_return": 0.01 * rng.normal(size=n),
        }
    ).to_csv(tmp_path / "r.csv", index=False)
    dm = MultivariateDataModule(
        str(tmp_path / "r.csv"), context_len=16, horizon=2, features="MS", target="log_return", borders="fraction"
    )
    model = KLineForecaster(n_features=2, n_targets=1, context_len=16, horizon=2, **{**TINY, "patch_len": 4})
    t = trainer(max_steps=2, limit_val_batches=1)
    t.fit(model, dm)
    t.test(model, dm, verbose=False)
    assert model.returns_target and {"model", "orig"} == set(model.test_summary["model"])


def test_attention_image_is_logged_to_wandb_only_under_a_wandb_logger(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    dm = SineDataModule(n_features=2, context_len=32, horizon=6, n_bars=400)
    model = KLineForecaster(n_features=2, n_targets=2, context_len=32, horizon=6, **TINY)
    logger = WandbLogger(project="test", save_dir=str(tmp_path), offline=True)
    t = L.Trainer(
        max_epochs=1, logger=logger, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    t.fit(model, dm)
    t.test(model, dm, verbose=False)
    logger.experiment.finish()
    images = list(tmp_path.rglob("media/images/test/attention*.png"))
    assert len(images) == 1 and images[0].stat().st_size > 5_000
    # another logger: the test runs the same and no image is written anywhere
    t2 = L.Trainer(
        max_epochs=1,
        logger=CSVLogger(tmp_path / "csv"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    t2.test(model, dm, verbose=False)
    assert not list((tmp_path / "csv").rglob("*.png"))


def test_returns_target_follows_the_data_target_kind() -> None:
    """``target_kind`` decides returns vs levels; without it, targets named log_return are returns; without
    a data scale at all, targets that are not input channels are returns."""

    def scale(names: list[str], kind: str | None) -> DataScale:
        one = [[0.0]], [[1.0]]
        return DataScale(
            feature_names=["a"],
            target_names=names,
            target_kind=kind,  # type: ignore[arg-type]
            ticker_names=["t"],
            feature_mean=one[0],
            feature_std=one[1],
            target_mean=one[0],
            target_std=one[1],
        )

    model = tiny(n_features=1, n_targets=1, target_channels=[0])
    assert not model.returns_target
    model.data_scale = scale(["log_return"], None)
    assert model.returns_target  # the inference from the name
    model.data_scale = scale(["log_return"], "level")
    assert not model.returns_target  # the explicit kind wins over the name
    model.data_scale = scale(["spread"], "return")
    assert model.returns_target
    with pytest.raises(ValueError, match=r"target_kind must be 'return' or 'level', got 'price'"):
        scale(["spread"], "price")


def test_decay_schedule_is_patchtsts_type3(tmp_path: Path) -> None:
    """``scheduler: decay``: the peak for epochs 0-2, then x0.9 per epoch, stepped once per epoch."""
    model = tiny(lr=1e-3, scheduler="decay", baselines=False)
    dm = SineDataModule(n_features=3, context_len=32, horizon=6, n_bars=400)
    lrs: list[float] = []

    class Record(L.Callback):
        def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    trainer(
        max_epochs=6, limit_train_batches=2, limit_val_batches=1, callbacks=[Record()], default_root_dir=tmp_path
    ).fit(model, dm)
    assert lrs == pytest.approx([1e-3, 1e-3, 1e-3, 9e-4, 8.1e-4, 7.29e-4])


def test_constant_schedule_warms_up_then_stays_at_the_peak() -> None:
    """``scheduler: constant`` follows the one warmup rule of every task; ``warmup_steps: 0`` starts at the peak."""
    dm = SineDataModule(n_features=3, context_len=32, horizon=6, n_bars=400)
    for warmup, expected in ((4, [2.5e-4, 5e-4, 7.5e-4] + [1e-3] * 7), (0, [1e-3] * 10)):
        lrs: list[float] = []

        class Record(L.Callback):
            def on_train_batch_start(self, trainer: L.Trainer, *args: object) -> None:
                lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

        model = tiny(lr=1e-3, scheduler="constant", warmup_steps=warmup, baselines=False)
        trainer(max_epochs=5, max_steps=10, limit_val_batches=0, callbacks=[Record()]).fit(model, dm)
        assert lrs == pytest.approx(expected)


def test_weight_decay_on_matrices_only_and_the_betas() -> None:
    model = tiny(weight_decay=0.1, betas=(0.8, 0.95), linear="tuned")
    model.trainer = L.Trainer(max_steps=10, logger=False, enable_progress_bar=False)
    optimizer = model.configure_optimizers()["optimizer"]
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    linear = model.net.linear.weight  # ridge-regularised in closed form: never decayed
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 or p is linear for p in no_decay["params"])
    assert any(p is linear for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    frozen = tiny(weight_decay=0.1)  # the default: the linear path is frozen, so not in the optimizer
    frozen.trainer = model.trainer
    groups = frozen.configure_optimizers()["optimizer"].param_groups
    assert not any(p is frozen.net.linear.weight for g in groups for p in g["params"])
    assert decay["betas"] == (0.8, 0.95)
