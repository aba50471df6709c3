"""A forecaster started from a published model (``pretrained:`` a Chronos-Bolt folder, the ``chronos_bolt`` backbone):
its zero-shot forecast equals the reference pipeline's on the target's channel (``chronos-forecasting``'s, same
random weights), the linear path's weighing of it, fine-tuning with ``freeze`` and ``layer_decay``, a checkpoint that
forecasts without the published files, the walk-forward's zero-shot run, and what is refused."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import KLineDataModule, KLineForecaster
from lightning_tf.kline.inference import last_windows
from lightning_tf.kline.published import ChronosBolt, ChronosBoltConfig
from lightning_tf.kline.settings import Features, Loading, Splits
from lightning_tf.training import parameter_groups
from tests.helpers.kline import quiet_trainer
from tests.helpers.published import chronos_reference, random_chronos_bolt
from tests.helpers.universe import reversal_universe

# a window of 20 bars: a patch of 4 is left-padded (Chronos-Bolt's own padding) and the REG token joins 5 patches
ARGS = {"n_features": 4, "n_targets": 1, "context_len": 20, "target_channels": [0]}
FEATURES = Features(names=["log_return", "high_rel", "low_rel", "volatility"])


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference's random Chronos-Bolt (5 quantiles, prediction length 8, patches of 4), saved as the hub holds it."""
    ref = random_chronos_bolt()
    path = tmp_path_factory.mktemp("bolt") / "chronos-bolt-tiny"
    ref.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def universe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("universe") / "universe.csv"
    reversal_universe(6, 320, reversal=0.5, seed=1).to_csv(path, index=False)
    return path


def _data(path: Path, horizon: int = 3, features: Features = FEATURES) -> KLineDataModule:
    splits = Splits(val_start="2016-01-04", test_start="2016-03-01")
    return KLineDataModule(
        str(path), context_len=20, horizon=horizon, features=features, splits=splits, loading=Loading(batch_size=64)
    )


def _window(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(5, 20, 4, generator=g) * 0.02  # (B, L, C): returns-sized features


@pytest.mark.parametrize("horizon", [3, 8, 12])  # within one pass, exactly one, rolled out past it
@pytest.mark.parametrize("revin", [True, False])
def test_zero_shot_equals_the_reference_pipeline_on_the_targets_channel(
    folder: Path, horizon: int, revin: bool
) -> None:
    model = KLineForecaster(
        **ARGS, horizon=horizon, pretrained=str(folder), residual="only", loss="quantile", quantiles=[0.1, 0.5, 0.9]
    ).eval()
    model.net.revin = model.net.revin if revin else None  # the scale the parts live on must not change the forecast
    x = _window()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipeline = chronos_reference().ChronosBoltPipeline.from_pretrained(folder)
        want = pipeline.predict(x[..., 0], prediction_length=horizon)  # (B, 5, F)
    want = want.sort(dim=1).values[:, [0, 2, 4]].transpose(1, 2)  # (B, F, 3): the levels asked for, never crossing
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = model.forward_quantiles(x)[:, :, 0]  # (B, F, 3)
    error = ((got - want).abs().max() / want.abs().max()).item()
    assert error < 1e-5, error
    assert (got.diff(dim=-1) >= 0).all()  # sorted: the levels never cross


def test_the_linear_path_weighs_the_published_forecast(folder: Path) -> None:
    """Under ``on`` and ``blend`` the published part is its forecast less the linear path's: a weight of 1 is the
    published forecast, 0 the linear path alone, a half the average of both, quantile by quantile."""
    alone = KLineForecaster(**ARGS, horizon=3, pretrained=str(folder), residual="only", loss="quantile").eval()
    for residual in ("on", "blend"):
        model = KLineForecaster(**ARGS, horizon=3, pretrained=str(folder), residual=residual, loss="quantile").eval()
        torch.manual_seed(1)
        for p in model.net.linear.parameters():
            p.data.normal_(0, 0.1)  # a linear path that forecasts something
        x = _window(1)
        with torch.no_grad():
            parts = model.net.parts(x)[0]
            published = alone.forward_quantiles(x)
            linear = model.net.combine(parts, gate=0.0)
            torch.testing.assert_close(model.net.combine(parts, gate=1.0), published, atol=1e-6, rtol=0)
            torch.testing.assert_close(model.net.combine(parts, gate=0.5), (published + linear) / 2, atol=1e-6, rtol=0)
            assert (linear - published).abs().max() > 1e-3


def test_freeze_backbone_trains_the_published_head_only(folder: Path, universe: Path) -> None:
    model = KLineForecaster(
        **ARGS, horizon=3, pretrained=str(folder), residual="only", loss="quantile", freeze="backbone", lr=1e-2
    )
    before = {k: v.clone() for k, v in model.net.backbone.state_dict().items()}
    quiet_trainer(max_steps=3, limit_val_batches=1).fit(model, _data(universe))
    after = model.net.backbone.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(k.startswith(("decoder.", "head.")) for k in moved), sorted(moved)
    assert not any(k.startswith(("encoder.", "patch_embed.")) for k in moved)


def test_first_n_blocks_and_layer_decay_follow_the_published_depths(folder: Path) -> None:
    model = KLineForecaster(
        **ARGS,
        horizon=3,
        pretrained=str(folder),
        residual="only",
        freeze="first_n_blocks",
        freeze_blocks=1,
        layer_decay=0.5,
        lr=1e-3,
    )
    frozen = {n for n, p in model.net.named_parameters() if not p.requires_grad}
    assert "backbone.patch_embed.hidden.weight" in frozen and "backbone.encoder.layers.0.ff.linear1.weight" in frozen
    assert not any(n.startswith(("backbone.encoder.layers.1.", "backbone.decoder.", "backbone.head.")) for n in frozen)
    n = model.hparams.n_layers  # the published encoder's blocks
    assert n == ChronosBolt.from_pretrained(folder).config.n_layers
    depths = [
        model.layer_depth(f"net.backbone.{name}") for name in ("encoder.layers.1.ff.linear1.weight", "head.out.weight")
    ]
    assert depths == [2, n + 1]
    groups = parameter_groups(model, 0.05, 0.5, layer_of=model.layer_depth, n_depths=n + 1, lr=1e-3)
    rates = {round(g["lr"], 10) for g in groups}
    assert rates == {round(1e-3 * 0.5 ** (n + 1 - d), 10) for d in range(2, n + 2)}


def test_a_fine_tuned_checkpoint_forecasts_without_the_published_files(
    folder: Path, universe: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "bolt"
    shutil.copytree(folder, copy)
    model = KLineForecaster(**ARGS, horizon=3, pretrained=str(copy), residual="on", loss="quantile", lr=1e-2)
    trainer = quiet_trainer(max_steps=4, limit_val_batches=2)
    trainer.fit(model, _data(universe))
    ckpt = tmp_path / "tuned.ckpt"
    trainer.save_checkpoint(ckpt)
    shutil.rmtree(copy)  # a checkpoint holds every weight and the published config
    loaded = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu")
    assert loaded.hparams.backbone == "chronos_bolt" and loaded.hparams.pretrained is None
    x = _window(2)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval().forward_quantiles(x), model.eval().forward_quantiles(x))
    bars = reversal_universe(2, 80, reversal=0.5, seed=9)
    forecast = loaded.forecast(bars)
    assert len(forecast) == 2 * 3 and forecast["pred_log_return"].notna().all()
    want = loaded.forecast_windows(last_windows(bars, scale=loaded.data_scale, context_len=20, horizon=3))
    assert forecast["pred_log_return"].tolist() == want["pred_log_return"].tolist()
    _serves_what_forecast_gives(loaded)


def _serves_what_forecast_gives(model: KLineForecaster) -> None:
    """The server's batched path (:class:`~lightning_tf.serve.kline.KLineAPI`, without HTTP) answers a batch of
    requests with the rows ``forecast()`` gives each."""
    pytest.importorskip("litserve")
    from lightning_tf.serve.api import Serving
    from lightning_tf.serve.kline import KLineAPI
    from tests.helpers.serve import bars_records

    api = KLineAPI("unused.ckpt", Serving(max_batch_size=4))
    api.model = model
    bodies = [{"bars": bars_records(80, seed=s)} for s in (0, 1)]
    answers = api.unbatch(api.predict(api.batch([api.decode_request(b) for b in bodies])))
    for body, answer in zip(bodies, answers, strict=True):
        got = [row["pred_log_return"] for row in json.loads(api.encode_response(answer).body)["forecast"]]
        want = model.forecast(pd.DataFrame.from_records(body["bars"]))["pred_log_return"].tolist()
        assert np.allclose(got, want, rtol=0, atol=1e-6), (got, want)  # float32, batched or alone


def test_a_zero_shot_test_runs_on_the_data_without_training(folder: Path, universe: Path) -> None:
    model = KLineForecaster(**ARGS, horizon=3, pretrained=str(folder), residual="only", loss="quantile")
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    quiet_trainer().test(model, _data(universe))
    assert model.test_summary["model"]["orig"]["mse"] > 0
    assert all(torch.equal(before[k], v) for k, v in model.net.state_dict().items())


# ---------------------------------------------------------------------------------------------- refused


def test_what_a_published_backbone_refuses(folder: Path, universe: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"quantiles \[0.05, 0.95\] are not among the published model's levels"):
        KLineForecaster(**ARGS, horizon=3, pretrained=str(folder), loss="quantile", quantiles=[0.05, 0.5, 0.95])
    with pytest.raises(ValueError, match="context_len .* is longer than the published model's context_length"):
        args = {**ARGS, "context_len": 4096}
        KLineForecaster(**args, horizon=3, pretrained=str(folder))
    with pytest.raises(ValueError, match="'chronos_bolt' is a published model: start from it with pretrained"):
        KLineForecaster(**ARGS, horizon=3, backbone="chronos_bolt")
    model = KLineForecaster(**ARGS, horizon=3, pretrained=str(folder), residual="only")
    ranked = _data(universe, features=Features(names=FEATURES.names, label="cs_rank"))
    with pytest.raises(ValueError, match="targets are not input channels"):
        quiet_trainer(max_steps=1).fit(model, ranked)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text('{"architectures": ["T5ForConditionalGeneration"]}')
    with pytest.raises(ValueError, match="not a Chronos-Bolt config"):
        KLineForecaster(**ARGS, horizon=3, pretrained=str(other))


def test_a_kronos_model_is_refused_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("kronos_finance")
    from lightning_tf.kline.published import KRONOS_PRESETS, Kronos

    model, tokenizer, context = KRONOS_PRESETS["mini"]
    out = Kronos(model, tokenizer, max_context=context).to_kronos(tmp_path / "kronos")
    for source in ("NeoQuasar/Kronos-small", out, out / "model", out / "tokenizer"):
        with pytest.raises(ValueError, match=r"a Kronos model, which reads raw bars .*Kronos\.from_pretrained"):
            KLineForecaster(**ARGS, horizon=3, pretrained=str(source))


def test_an_unreachable_hub_name_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE=1 and it is not in the Hugging Face cache"):
        KLineForecaster(**ARGS, horizon=3, pretrained="amazon/chronos-bolt-small")


def test_config_sizes_reach_the_backbone(folder: Path) -> None:
    model = KLineForecaster(**ARGS, horizon=3, pretrained=str(folder))
    config = ChronosBoltConfig(**model.hparams.published["config"])
    assert config == ChronosBolt.from_pretrained(folder).config == model.net.backbone.config


def test_lightnings_model_summary_counts_the_published_forward(folder: Path) -> None:
    """The summary runs the example input under no_grad with a FLOP counter's module hooks: the decoder's start token
    must not be a view of its weight made there (a leaf that needs a gradient, which the hooks refuse)."""
    from lightning.pytorch.utilities.model_summary import ModelSummary

    model = KLineForecaster(**ARGS, horizon=3, pretrained=str(folder), residual="only")
    summary = ModelSummary(model, max_depth=1)
    assert summary.total_flops > 0 and summary.total_parameters == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("residual", ["only", "on", "blend"])
def test_every_trainable_parameter_gets_a_gradient(folder: Path, residual: str) -> None:
    """DDP refuses a parameter no loss reaches: alone, the published model has its own quantiles and no gap offsets."""
    model = KLineForecaster(**ARGS, horizon=3, pretrained=str(folder), residual=residual, loss="quantile")
    model.train()
    y = torch.randn(5, 3, 1) * 0.02
    model._loss(model.forward_quantiles(_window(3)), y).backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, missing
