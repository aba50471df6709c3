"""Starting a forecaster from a pretrained one (``pretrained:``, :mod:`lightning_tf.kline.pretrained`): what loads and
what starts fresh, freezing and layer-wise decay, the masked-patch objective, what a checkpoint records of its data
and the look-ahead it warns of, and the errors of a source that does not fit."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from lightning_tf.kline import BarsPerSecond, KLineDataModule, KLineForecaster
from lightning_tf.kline.settings import Features, Loading, Reading, Splits
from lightning_tf.training import parameter_groups
from tests.helpers.cli import ROOT
from tests.helpers.kline import quiet_trainer
from tests.helpers.universe import reversal_universe

SMALL = {"d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32, "patch_len": 8, "stride": 4, "dropout": 0.0}
# a Transformer alone over patches of every channel, as configs/kline/pretrain.yaml builds it (small)
ALONE = {"n_features": 4, "n_targets": 1, "context_len": 16, "horizon": 2, "residual": "only", "channel_mixing": True}
CORPUS_DATES = Splits(val_start="2016-01-04", test_start="2016-03-01")


def _data(path: Path, horizon: int = 2, splits: Splits = CORPUS_DATES, **kw: object) -> KLineDataModule:
    return KLineDataModule(
        str(path),
        context_len=16,
        horizon=horizon,
        features=Features(names=["log_return", "high_rel", "low_rel", "volatility"]),
        splits=splits,
        loading=Loading(batch_size=64),
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.csv"
    reversal_universe(12, 320, reversal=0.5, seed=1).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def pretrained(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A forecaster trained a few steps on the corpus (a Transformer alone over patches, every channel mixed)."""
    torch.manual_seed(0)
    model = KLineForecaster(
        n_features=4, n_targets=1, context_len=16, horizon=2, residual="only", channel_mixing=True, **SMALL
    )
    trainer = quiet_trainer(max_steps=4, limit_val_batches=2)
    trainer.fit(model, _data(corpus))
    path = tmp_path_factory.mktemp("pretrained") / "pretrained.ckpt"
    trainer.save_checkpoint(path)
    return path


def _tensors(model: KLineForecaster, prefix: str) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.net.state_dict().items() if k.startswith(prefix)}


def test_the_backbone_loads_and_heads_for_another_horizon_start_fresh(pretrained: Path) -> None:
    source = KLineForecaster.load_from_checkpoint(pretrained, map_location="cpu")
    same = KLineForecaster(n_features=4, n_targets=1, context_len=16, horizon=2, pretrained=str(pretrained))
    other = KLineForecaster(n_features=4, n_targets=1, context_len=16, horizon=5, pretrained=str(pretrained))
    for model in (same, other):
        assert model.hparams.d_model == 16 and model.hparams.channel_mixing  # the source's architecture
        for name, tensor in _tensors(source, "backbone.").items():
            assert torch.equal(model.net.state_dict()[name], tensor), name
    # the same horizon and targets: the head is the source's; another horizon: a head of its own, at zero (the
    # residual of the linear path starts there)
    assert torch.equal(same.net.head.weight, source.net.head.weight)
    assert other.net.head.weight.shape[0] == 5 and not other.net.head.weight.any()
    assert same.hparams.pretrained is None  # the checkpoint of the new model holds every weight
    assert same.pretrained_from[0]["path"] == str(pretrained) and same.pretrained_from[0]["tickers"] == 12


def test_a_model_with_covariates_gets_a_fresh_covariate_head(pretrained: Path, tmp_path: Path) -> None:
    model = KLineForecaster(n_features=4, n_targets=1, context_len=16, horizon=2, pretrained=str(pretrained))
    model._set_covariates(n_future=3, static_sizes=[5])
    assert all(not p.any() for p in model.net.covariates.parameters())  # zero: the forecast starts unchanged
    source = KLineForecaster.load_from_checkpoint(pretrained, map_location="cpu")
    for name, tensor in _tensors(source, "backbone.").items():
        assert torch.equal(model.net.state_dict()[name], tensor), name


def test_a_frozen_backbone_does_not_move_and_the_head_trains(pretrained: Path, corpus: Path) -> None:
    model = KLineForecaster(
        n_features=4, n_targets=1, context_len=16, horizon=2, pretrained=str(pretrained), freeze="backbone"
    )
    before, head = _tensors(model, "backbone."), model.net.head.weight.detach().clone()
    quiet_trainer(max_steps=3, limit_val_batches=1).fit(model, _data(corpus))
    assert all(torch.equal(model.net.state_dict()[k], v) for k, v in before.items())
    assert not torch.equal(model.net.head.weight, head)


def test_first_n_blocks_and_layer_decay(pretrained: Path) -> None:
    model = KLineForecaster(
        n_features=4,
        n_targets=1,
        context_len=16,
        horizon=2,
        pretrained=str(pretrained),
        freeze="first_n_blocks",
        freeze_blocks=1,
        layer_decay=0.5,
        lr=1e-3,
    )
    frozen = {n for n, p in model.net.named_parameters() if not p.requires_grad}
    assert "backbone.patch_embed.weight" in frozen and "backbone.encoder.layers.0.ff.linear1.weight" in frozen
    assert not any(n.startswith("backbone.encoder.layers.1.") for n in frozen) and "head.weight" not in frozen
    assert [model.layer_depth(n) for n in ("net.revin.weight", "net.backbone.encoder.layers.1.ff.linear1.weight")] == [
        0,
        2,
    ]
    groups = parameter_groups(model, 0.05, 0.5, layer_of=model.layer_depth, n_depths=3, lr=1e-3)
    rates = {round(g["lr"], 8) for g in groups}
    assert rates == {1e-3 * 0.5**3, 1e-3 * 0.5, 1e-3}  # RevIN (depth 0), layer 1 (depth 2 of 3), the heads


@pytest.mark.parametrize(
    ("kwargs", "match", "error"),
    [
        ({"pretrained": "no/such.ckpt"}, r"pretrained no/such.ckpt: no such file or folder", FileNotFoundError),
        (
            {"pretrained": str(ROOT / "tests/fixtures/checkpoints_before_layout/vision.ckpt")},
            r"pretrained .*vision.ckpt.*ViTClassifier",
            ValueError,
        ),
        ({"freeze": "head"}, r"freeze must be 'none', 'backbone' or 'first_n_blocks'", ValueError),
        ({"freeze": "first_n_blocks", "freeze_blocks": 3}, r"freeze_blocks \(3\) must be in \[0, 2\]", ValueError),
        ({"layer_decay": 1.5}, r"layer_decay must be in \(0, 1\], got 1.5", ValueError),
        ({"objective": "masked"}, r"objective 'masked' .* needs backbone: patches and residual: only", ValueError),
        ({"objective": "masked", "residual": "only", "mask_ratio": 1.0}, r"mask_ratio must be in \(0, 1\)", ValueError),
    ],
)
def test_bad_settings_are_one_line(kwargs: dict, match: str, error: type) -> None:
    with pytest.raises(error, match=match):
        KLineForecaster(n_features=4, n_targets=1, context_len=16, horizon=2, **{**SMALL, **kwargs})


def test_a_backbone_of_another_shape_is_refused_naming_what_makes_it(pretrained: Path) -> None:
    with pytest.raises(
        ValueError, match=r"its backbone does not fit this model: backbone.encoder.pos.* context_len \(16\)"
    ):
        KLineForecaster(n_features=4, n_targets=1, context_len=32, horizon=2, pretrained=str(pretrained))


def test_the_checkpoint_records_its_data_and_a_look_ahead_is_warned(pretrained: Path, corpus: Path) -> None:
    saved = torch.load(pretrained, map_location="cpu", weights_only=True)
    record = saved["provenance"]
    assert record["tickers"] == 12 and record["data"] == str(corpus) and record["objective"] == "forecast"
    assert record["seen_until"].startswith("2016-02-")  # the last validation target, before the test split
    assert record["val_from"].startswith("2016-01-04") and record["test_from"].startswith("2016-03-01")
    model = KLineForecaster(n_features=4, n_targets=1, context_len=16, horizon=2, pretrained=str(pretrained))
    early = _data(corpus, splits=Splits(val_start="2015-10-01", test_start="2016-01-04"))
    with pytest.warns(UserWarning, match=r"look-ahead: the validation split of .* starts 2015-10-01, but the pre"):
        quiet_trainer(max_steps=1, limit_val_batches=1).fit(model, early)
    late = KLineForecaster(n_features=4, n_targets=1, context_len=16, horizon=2, pretrained=str(pretrained))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        late.adopt(_data(corpus, splits=Splits(val_start="2016-03-01", test_start="2016-04-01")).handover(), "fit")


def test_masked_patch_pretraining_learns_to_reconstruct(corpus: Path) -> None:
    """The reconstruction loss falls, only the masked patches count, and the backbone trained this way loads into a
    forecaster."""
    torch.manual_seed(0)
    model = KLineForecaster(
        **ALONE,
        objective="masked",
        baselines=False,
        lr=3e-3,
        **SMALL,
    )
    x = torch.randn(8, 16, 4)
    torch.manual_seed(1)
    first = float(model.net.masked_patch_loss(x, 0.4))
    quiet_trainer(max_steps=40, limit_val_batches=1).fit(model, _data(corpus))
    torch.manual_seed(1)
    dm = _data(corpus)
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    torch.manual_seed(1)
    trained = float(model.eval().net.masked_patch_loss(batch["x"], 0.4))
    torch.manual_seed(1)
    untrained = float(
        KLineForecaster(
            **ALONE,
            objective="masked",
            **SMALL,
        )
        .eval()
        .net.masked_patch_loss(batch["x"], 0.4)
    )
    assert trained < 0.8 * untrained and first > 0


def _pretrain(path: Path, steps: int, cut: str | None = None, seed: int = 0) -> KLineForecaster:
    """A Transformer alone pretrained ``steps`` steps on the corpus at ``path`` (each batch one date's universe,
    the cross-sectional rank of the returns, as configs/kline/pretrain.yaml), validated on the half-year before
    2016-03-01 (the cut, when given)."""
    torch.manual_seed(seed)
    dm = KLineDataModule(
        str(path),
        context_len=16,
        horizon=2,
        features=Features(names=["log_return", "high_rel", "low_rel", "volatility"], label="cs_rank"),
        reading=Reading(cut=cut),
        splits=Splits(val_start="2016-01-04", test_start="2016-03-01"),
        loading=Loading(batch_size=256, batch_by_date=True),
    )
    model = KLineForecaster(
        **ALONE,
        ic_weight=1.0,
        baselines=False,
        lr=3e-3,
        warmup_steps=5,
        **SMALL,
    )
    quiet_trainer(max_steps=steps, limit_val_batches=1, deterministic=True).fit(model, dm)
    return model


def test_bars_after_the_cut_change_nothing_the_model_learns(tmp_path: Path) -> None:
    """Two corpora equal before the cut, one with a strong pattern planted after it: pretraining with the cut gives
    bitwise the same weights (the reader never yields a bar at or after the cut); without the cut they differ (the
    planted bars reach the test split's rows, and the panel's cross-sectional labels of the shared dates change)."""
    calm = reversal_universe(10, 330, reversal=0.0, seed=4)
    planted = reversal_universe(10, 330, reversal=0.9, seed=4)
    after = pd.to_datetime(calm["date"]) >= "2016-03-01"
    mixed = calm.copy()
    mixed.loc[after, ["open", "high", "low", "close"]] = planted.loc[after, ["open", "high", "low", "close"]].to_numpy()
    calm.to_csv(tmp_path / "calm.csv", index=False)
    mixed.to_csv(tmp_path / "mixed.csv", index=False)
    a = _pretrain(tmp_path / "calm.csv", 6, cut="2016-03-01")
    b = _pretrain(tmp_path / "mixed.csv", 6, cut="2016-03-01")
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert a.provenance["cut"] == "2016-03-01" and a.provenance["seen_until"] < "2016-03-01"
    with pytest.raises(ValueError, match=r"reading.cut 'soon' is not a date"):
        Reading(cut="soon")


def _rank_ic(model: KLineForecaster, path: Path) -> float:
    """The mean over the test dates of the rank correlation across tickers of the model's forecast of the next
    bar and that bar's return."""
    dm = KLineDataModule(
        str(path),
        context_len=16,
        horizon=2,
        features=Features(names=["log_return", "high_rel", "low_rel", "volatility"], label="cs_rank"),
        splits=Splits(val_start="2015-10-01", test_start="2015-12-01"),
        loading=Loading(batch_size=4096),
    )
    dm.setup("test")
    batch = next(iter(dm.test_dataloader()))
    with torch.no_grad():
        pred = model.eval()(batch["x"])[:, 0, 0].numpy()  # (B,)
    frame = pd.DataFrame({"time": batch["time"].numpy(), "pred": pred, "y": batch["y"][:, 0, 0].numpy()})
    return float(frame.groupby("time").apply(lambda d: d["pred"].rank().corr(d["y"].rank())).mean())


@pytest.mark.integration
@pytest.mark.parametrize("reversal", [0.6, 0.0])
def test_pretraining_on_a_corpus_with_a_pattern_helps_a_small_universe(reversal: float, tmp_path: Path) -> None:
    """A corpus of 40 tickers sharing one pattern (a large move partly reversed the next day), and a small universe
    of 20 others with the same pattern: fine-tuned from the pretrained model for the same few steps, the forecaster
    ranks the universe's test dates better than one trained from scratch on the small universe alone. On a
    random-walk corpus and universe, pretraining gives no gain."""
    reversal_universe(40, 330, reversal=reversal, seed=5).to_csv(tmp_path / "corpus.csv", index=False)
    reversal_universe(20, 260, reversal=reversal, seed=6).to_csv(tmp_path / "small.csv", index=False)
    source = _pretrain(tmp_path / "corpus.csv", 100)
    trainer = quiet_trainer(max_steps=1)
    trainer.strategy.connect(source)
    trainer.save_checkpoint(tmp_path / "pretrained.ckpt")
    scores = {}
    for name, pretrained in (("scratch", None), ("finetuned", str(tmp_path / "pretrained.ckpt"))):
        torch.manual_seed(1)
        model = KLineForecaster(
            **ALONE,
            baselines=False,
            lr=1e-3,
            warmup_steps=2,
            pretrained=pretrained,
            **SMALL,
        )
        dm = KLineDataModule(
            str(tmp_path / "small.csv"),
            context_len=16,
            horizon=2,
            features=Features(names=["log_return", "high_rel", "low_rel", "volatility"], label="cs_rank"),
            splits=Splits(val_start="2015-10-01", test_start="2015-12-01"),
            loading=Loading(batch_size=32),
        )
        quiet_trainer(max_steps=10, limit_val_batches=1, deterministic=True).fit(model, dm)
        scores[name] = _rank_ic(model, tmp_path / "small.csv")
    if reversal:
        assert scores["finetuned"] > scores["scratch"] + 0.05, scores
        assert scores["finetuned"] > 0.1, scores
    else:
        assert abs(scores["finetuned"]) < 0.08 and abs(scores["finetuned"] - scores["scratch"]) < 0.08, scores


def test_bars_per_second_counts_each_windows_context(corpus: Path) -> None:
    """``train/bars_per_s`` is the windows' bars: exactly ``context_len`` times ``train/windows_per_s``."""
    model = KLineForecaster(n_features=4, n_targets=1, context_len=16, horizon=2, channel_mixing=True, **SMALL)
    trainer = quiet_trainer(max_steps=4, limit_val_batches=1, callbacks=[BarsPerSecond(every_n_steps=2)])
    trainer.fit(model, _data(corpus))
    metrics = trainer.callback_metrics
    assert float(metrics["train/windows_per_s"]) > 0
    assert float(metrics["train/bars_per_s"]) == pytest.approx(16 * float(metrics["train/windows_per_s"]), rel=1e-6)
    with pytest.raises(ValueError, match=r"every_n_steps must be >= 1, got 0"):
        BarsPerSecond(every_n_steps=0)


def test_a_zero_shot_forecast_of_bars_the_model_has_seen_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frame = reversal_universe(6, 330, reversal=0.3, seed=9)
    frame.to_csv(tmp_path / "corpus.csv", index=False)
    model = _pretrain(tmp_path / "corpus.csv", 3, cut="2016-03-01")
    one = frame[frame["ticker"] == frame["ticker"].iloc[0]]
    with caplog.at_level("WARNING"):
        model.forecast(one[pd.to_datetime(one["date"]) < "2016-01-15"])
    assert "look-ahead: a forecast's context (its last bar) starts 2016-01-14" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        table = model.forecast(one)  # after the cut: nothing to say
    assert "look-ahead" not in caplog.text and len(table) == 2


def test_the_provenance_spans_every_tickers_dates(tmp_path: Path) -> None:
    """The first bar read and the last bar seen are the earliest and latest over all tickers (the rows are stored
    ticker by ticker: the first row is not the earliest bar)."""
    late = reversal_universe(3, 200, reversal=0.0, seed=1, start="2015-06-01")
    early = reversal_universe(3, 330, reversal=0.0, seed=2).assign(ticker=lambda f: "Z" + f["ticker"])
    pd.concat([late, early]).to_csv(tmp_path / "u.csv", index=False)
    dm = _data(tmp_path / "u.csv")
    dm.setup("fit")
    record = dm.provenance()
    assert record["first"].startswith("2015-01-") and record["tickers"] == 6  # the Z tickers, stored last
    assert "2016-02-01" < record["seen_until"] < "2016-03-01"


def test_a_corpus_cut_at_its_test_border_does_not_warn_of_missing_test_windows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bars cut where the test split starts leave every ticker without test windows, as pretraining wants: said
    nowhere. The same split without the cut, on bars that end there, still says so."""
    frame = reversal_universe(3, 330, reversal=0.0, seed=3)
    frame.to_csv(tmp_path / "u.csv", index=False)
    with caplog.at_level("WARNING"):
        _data(tmp_path / "u.csv", reading=Reading(cut="2016-03-01")).setup("fit")
    assert "no test windows" not in caplog.text
    frame[pd.to_datetime(frame["date"]) < "2016-03-01"].to_csv(tmp_path / "ended.csv", index=False)
    with caplog.at_level("WARNING"):
        _data(tmp_path / "ended.csv").setup("fit")
    assert "has no test windows" in caplog.text
