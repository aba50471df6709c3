"""Fine-tuning Kronos on raw bars: the windows lie in their splits (no bar of a later split, validation scored on
its own bars alone), the loss is the reference's token loss on windows standardised as the reference's fine-tuning
data, training lowers it, ``freeze`` and ``layer_decay`` act by the model's depths, a checkpoint rebuilds the model
without the published files, the walk-forward's per-fold fine-tuning leaves the caller's model and random state
alone, and bad input is one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch import Trainer

from lightning_tf.kline import KronosBarsDataModule, KronosTuner, Splits
from lightning_tf.kline.kronos_tuning import scored_token_loss
from lightning_tf.kline.published import KRONOS_PRESETS, Kronos, KronosConfig, token_loss
from lightning_tf.kline.universe.kronos import KronosColumn, finetune_kronos

W = 12
BARS = ["open", "high", "low", "close", "volume", "amount"]


def _bars(n_tickers: int = 3, n: int = 120, volume: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    parts = []
    for k in range(n_tickers):
        days = pd.bdate_range("2020-01-01", periods=n)[k * 5 :]  # tickers start on different days
        m = len(days)
        close = 20 * np.exp(np.cumsum(rng.normal(0, 0.02, m)))
        open_ = close * np.exp(rng.normal(0, 0.01, m))
        frame = pd.DataFrame(
            {
                "timestamp": days,
                "ticker": f"T{k}",
                "open": open_,
                "high": np.maximum(open_, close) * 1.01,
                "low": np.minimum(open_, close) * 0.99,
                "close": close,
            }
        )
        if volume:
            frame["volume"] = rng.uniform(1e4, 2e4, m).round()
        parts.append(frame)
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def kronos() -> Kronos:
    torch.manual_seed(0)
    _, tokenizer, _ = KRONOS_PRESETS["small"]
    return Kronos(KronosConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64), tokenizer, max_context=32).eval()


@pytest.fixture(scope="module")
def folder(kronos: Kronos, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kronos.to_kronos(tmp_path_factory.mktemp("kronos") / "kronos")


SPLITS = Splits(val_start="2020-04-01", test_start="2020-05-15", embargo=2)


def _data(bars: pd.DataFrame | None = None, **kwargs) -> KronosBarsDataModule:
    dm = KronosBarsDataModule(_bars() if bars is None else bars, **{"window": W, "splits": SPLITS, **kwargs})
    dm.setup("fit")
    return dm


# ------------------------------------------------------------------------------------------ the windows


def test_windows_lie_in_their_splits_and_validation_scores_its_own_bars() -> None:
    bars = _bars()
    dm = _data(bars, stride=5)
    times = bars["timestamp"].to_numpy()
    tickers = bars["ticker"].to_numpy()
    val, test = np.datetime64(SPLITS.val_start), np.datetime64(SPLITS.test_start)
    for split in ("train", "val"):
        ds = dm.datasets[split]
        rows = (ds.starts[:, None] + torch.arange(W)).numpy()  # (n, W)
        assert (tickers[rows] == tickers[rows[:, :1]]).all()  # one ticker a window
        batch = ds.__getitems__(list(range(len(ds))))
        np.testing.assert_array_equal(batch["bars"].numpy(), bars[dm.columns].to_numpy(np.float32)[rows])
        last = times[rows[:, -1]]
        if split == "train":
            assert batch["scored"].all()
            for t in bars["ticker"].unique():  # the embargo: two bars of each ticker before val_start left out
                own = times[tickers == t]
                assert last[tickers[rows[:, 0]] == t].max() == own[own < val][-3]
        else:
            assert (last >= val).all() and (last < test).all()
            np.testing.assert_array_equal(batch["scored"].numpy(), times[rows[:, 1:]] >= val)
            assert not batch["scored"].all() and batch["scored"].any(dim=1).all()
        # each ticker's last window ends on its last bar of the split
        ends = {t: times[rows[tickers[rows[:, 0]] == t, -1]].max() for t in bars["ticker"].unique()}
        border = val if split == "train" else test
        for t, end in ends.items():
            own = times[tickers == t]
            assert end == own[own < border][-(SPLITS.embargo + 1)]
    assert len(_data(bars, stride=1).datasets["train"]) > len(dm.datasets["train"])


def test_fraction_splits_cut_each_tickers_bars() -> None:
    bars = _bars()
    dm = _data(bars, splits=Splits(train_fraction=0.5, val_fraction=0.25))
    tickers = bars["ticker"].to_numpy()
    for t in bars["ticker"].unique():
        rows = np.flatnonzero(tickers == t)
        ends = dm.datasets["train"].starts.numpy() + W - 1
        own = ends[(ends >= rows[0]) & (ends <= rows[-1])]
        assert own.max() == rows[0] + int(len(rows) * 0.5) - 1


# ------------------------------------------------------------------------------------------ the objective


def test_the_loss_is_the_token_loss_of_windows_standardised_as_the_reference_does(kronos: Kronos) -> None:
    dm = _data()
    batch = dm.datasets["train"].__getitems__([0, 3, 7])
    tuner = KronosTuner.from_model(kronos)
    # the reference's fine-tuning data: each window by its own mean and (population) std, clipped; amount made
    # from volume and the mean price, as the reference's predictor completes it
    x = batch["bars"].double().numpy()
    x = np.concatenate([x, x[..., 4:5] * x[..., :4].mean(-1, keepdims=True)], axis=-1)
    x = (x - x.mean(1, keepdims=True)) / (x.std(1, keepdims=True) + 1e-5)
    x = torch.as_tensor(np.clip(x, -5, 5), dtype=torch.float32)
    with torch.no_grad():
        s1, s2 = kronos.tokenizer.encode(x)
        torch.manual_seed(3)
        tuner.train()
        got = tuner.training_step(batch, 0)
        torch.manual_seed(3)
        tuner.kronos.model.train()
        l1, l2 = tuner.kronos.model(s1[:, :-1], s2[:, :-1], batch["stamps"][:, :-1])
        expected = token_loss(l1, l2, s1[:, 1:], s2[:, 1:])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_validation_scores_only_the_marked_positions_causally(kronos: Kronos) -> None:
    dm = _data()
    batch = dm.datasets["val"].__getitems__([0, 1])
    tuner = KronosTuner.from_model(kronos).eval()
    with torch.no_grad():
        got = tuner.validation_step(batch, 0)
        s1, s2 = tuner._tokens(batch)
        h = tuner.kronos.model.hidden(s1[:, :-1], s2[:, :-1], batch["stamps"][:, :-1])
        l1 = tuner.kronos.model.s1_logits(h)
        l2 = tuner.kronos.model.s2_logits(h, s1[:, 1:], causal=True)
        m = batch["scored"]
        ce = torch.nn.functional.cross_entropy
        expected = (ce(l1[m], s1[:, 1:][m]) + ce(l2[m], s2[:, 1:][m])) / 2
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # the scored positions matter: all of them give another loss
    assert not torch.isclose(scored_token_loss(l1, l2, s1[:, 1:], s2[:, 1:], torch.ones_like(m)), got)


def test_training_lowers_the_loss_and_the_tokenizer_never_moves(kronos: Kronos) -> None:
    dm = _data(batch_size=8)
    tuner = KronosTuner.from_model(kronos, lr=3e-3, warmup_steps=1, scheduler="constant")
    tokenizer = {k: v.clone() for k, v in tuner.kronos.tokenizer.state_dict().items()}
    trainer = Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)

    def val_loss() -> float:
        return float(trainer.validate(tuner, datamodule=dm, verbose=False)[0]["val/loss"])

    before = val_loss()
    Trainer(
        max_steps=40, logger=False, enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0
    ).fit(tuner, datamodule=dm)
    assert val_loss() < before - 0.1
    for k, v in tuner.kronos.tokenizer.state_dict().items():
        torch.testing.assert_close(v, tokenizer[k], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("freeze", "blocks", "moving"),
    [
        ("backbone", 0, ("norm.", "dep_layer.", "head.")),
        ("first_n_blocks", 1, ("blocks.1.", "norm.", "dep_layer.", "head.")),
    ],
)
def test_freeze_moves_only_what_it_leaves(kronos: Kronos, freeze: str, blocks: int, moving: tuple[str, ...]) -> None:
    tuner = KronosTuner.from_model(kronos, freeze=freeze, freeze_blocks=blocks, lr=1e-2, warmup_steps=1)
    before = {k: v.clone() for k, v in tuner.kronos.model.state_dict().items()}
    Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(
        tuner, datamodule=_data(batch_size=8)
    )
    for name, p in tuner.kronos.model.named_parameters():
        moved = not torch.equal(p, before[name])
        assert moved == name.startswith(moving), name


def test_layer_decay_scales_each_depth(kronos: Kronos) -> None:
    tuner = KronosTuner.from_model(kronos, layer_decay=0.5, lr=1e-3)
    trainer = Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(tuner, datamodule=_data(batch_size=8))
    scale = {id(p): g["lr_scale"] for g in trainer.optimizers[0].param_groups for p in g["params"]}
    model = tuner.kronos.model
    for name, p in model.named_parameters():
        assert scale[id(p)] == pytest.approx(0.5 ** (model.n_depths - model.layer_depth(name))), name
    assert not any(id(p) in scale for p in tuner.kronos.tokenizer.parameters())


# ------------------------------------------------------------------------------------------ checkpoints, walk-forward


def test_a_checkpoint_rebuilds_the_model_without_the_published_files(folder: Path, tmp_path: Path) -> None:
    import shutil

    copy = shutil.copytree(folder, tmp_path / "published")
    tuner = KronosTuner(str(copy))
    trainer = Trainer(max_steps=2, logger=False, default_root_dir=tmp_path, enable_progress_bar=False)
    trainer.fit(tuner, datamodule=_data(batch_size=8))
    ckpt = tmp_path / "tuned.ckpt"
    trainer.save_checkpoint(ckpt)
    shutil.rmtree(copy)
    loaded = KronosTuner.load_from_checkpoint(ckpt, weights_only=True)
    for k, v in tuner.kronos.state_dict().items():
        torch.testing.assert_close(loaded.kronos.state_dict()[k], v, rtol=0, atol=0)
    bars = torch.as_tensor(_bars()[["open", "high", "low", "close", "volume"]].to_numpy()[:20])
    from lightning_tf.kline.published import calendar_stamps

    days = pd.bdate_range("2020-01-01", periods=23)
    stamps, future = calendar_stamps(days[:20])[None], calendar_stamps(days[20:])[None]
    one = tuner.kronos.eval().forecast(bars, stamps, future, generator=torch.Generator().manual_seed(0))
    two = loaded.kronos.eval().forecast(bars, stamps, future, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(one, two, rtol=0, atol=0)


def test_finetune_kronos_trains_a_copy_and_leaves_the_random_state(kronos: Kronos, tmp_path: Path) -> None:
    before = {k: v.clone() for k, v in kronos.state_dict().items()}
    settings = KronosColumn("unused", context=W - 1, finetune_steps=8, finetune_lr=1e-3, finetune_batch=8)
    torch.manual_seed(11)
    state = torch.random.get_rng_state()
    tuned = finetune_kronos(kronos, _bars(), SPLITS, settings, tmp_path / "fold")
    assert torch.equal(torch.random.get_rng_state(), state)
    assert (tmp_path / "fold" / "kronos.ckpt").exists()
    for k, v in kronos.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert any(not torch.equal(tuned.state_dict()[k], before[k]) for k in before if k.startswith("model."))
    assert not tuned.training
    again = finetune_kronos(kronos, _bars(), SPLITS, settings, tmp_path / "again")
    for k, v in tuned.state_dict().items():
        torch.testing.assert_close(again.state_dict()[k], v, rtol=0, atol=0)  # the same seed, the same weights


def test_forecast_is_kronos_on_each_series_last_bars(kronos: Kronos) -> None:
    from lightning_tf.kline.published import calendar_stamps
    from lightning_tf.kline.windows import next_timestamps

    bars = _bars(n=40)  # T0 40 bars, T1 35, T2 30
    tuner = KronosTuner.from_model(kronos, horizon=3, samples=2)
    got = tuner.forecast(bars, context=32, seed=5)
    assert list(got.columns) == ["ticker", "timestamp", "step", "open", "high", "low", "close", "volume", "amount"]
    assert list(got["ticker"]) == ["T0"] * 3 + ["T1"] * 3 + ["T2"] * 3 and list(got["step"]) == [1, 2, 3] * 3
    # by hand: T2 (30 bars), then T0 and T1 (32 bars each) in one batch, each series from its own generator
    for batch in (["T2"], ["T0", "T1"]):
        generator = [torch.Generator().manual_seed(5) for _ in batch]
        own = [bars[bars["ticker"] == t] for t in batch]
        times = [pd.DatetimeIndex(o["timestamp"]) for o in own]
        futures = [next_timestamps(t, 3) for t in times]
        x = torch.as_tensor(np.stack([o.tail(32)[["open", "high", "low", "close", "volume"]].to_numpy() for o in own]))
        stamps = torch.stack([calendar_stamps(t[-x.shape[1] :]) for t in times])
        future = torch.stack([calendar_stamps(f) for f in futures])
        draws = kronos.forecast(x, stamps, future, samples=2, generator=generator).mean(1)  # (B, F, 6)
        for ticker, f, expected in zip(batch, futures, draws, strict=True):
            rows = got[got["ticker"] == ticker]
            assert list(rows["timestamp"]) == list(f)
            np.testing.assert_allclose(rows[["open", "high", "low", "close", "volume", "amount"]], expected, rtol=1e-6)
    np.testing.assert_array_equal(tuner.forecast(bars, context=32, seed=5)["close"], got["close"])
    # a series forecast alone draws what it draws beside others (a served request does not depend on its batch)
    alone = tuner.forecast(bars[bars["ticker"] == "T1"], context=32, seed=5)
    np.testing.assert_allclose(alone[BARS], got[got["ticker"] == "T1"][BARS], rtol=1e-6)
    assert not np.allclose(got[got["ticker"] == "T0"][BARS], got[got["ticker"] == "T1"][BARS])
    with pytest.raises(ValueError, match=r"^one bar \(2020-01-01 00:00:00\) has no spacing"):  # not NaT stamps
        tuner.forecast(bars[bars["ticker"] == "T0"].head(1))
    with pytest.raises(ValueError, match=r"context \(40\) in \[1, 32\]"):
        tuner.forecast(bars, context=40)
    with pytest.raises(ValueError, match=r"horizon \(0\) must be in \[1, 32\]"):
        KronosTuner.from_model(kronos, horizon=0)


# ------------------------------------------------------------------------------------------ bad input


def test_bad_input_is_one_line(kronos: Kronos) -> None:
    with pytest.raises(ValueError, match=r"window \(1\) must be >= 2 bars"):
        KronosBarsDataModule(_bars(), window=1)
    with pytest.raises(ValueError, match=r"column\(s\) \['low'\] not found"):  # the reader's line
        _data(_bars().drop(columns="low"))
    holed = _bars()
    holed.loc[30, "volume"] = np.inf
    with pytest.raises(ValueError, match="1 non-finite values"):  # the reader's
        _data(holed)
    with pytest.raises(ValueError, match="no ticker has a 200-bar window in the train split"):
        _data(window=200)
    with pytest.raises(ValueError, match="freeze must be 'none', 'backbone' or 'first_n_blocks'"):
        KronosTuner.from_model(kronos, freeze="encoder")
    with pytest.raises(ValueError, match=r"freeze_blocks \(3\) must be in \[0, 2\]"):
        KronosTuner.from_model(kronos, freeze="first_n_blocks", freeze_blocks=3)
    long = KronosBarsDataModule(_bars(), window=40, splits=SPLITS)
    with pytest.raises(ValueError, match=r"data window \(40\) .* window <= 33"):
        Trainer(max_steps=1, logger=False, enable_progress_bar=False).fit(KronosTuner.from_model(kronos), long)
    with pytest.raises(ValueError, match=r"stride \(0\) and batch_size \(32\) must be >= 1"):
        KronosBarsDataModule(_bars(), stride=0)
    with pytest.raises(ValueError, match="predict needs the bars to forecast: set data.init_args.predict_path"):
        KronosBarsDataModule(_bars()).setup("predict")
    with pytest.raises(ValueError, match="kronos finetune_steps"):
        KronosColumn("unused", finetune_steps=-1)


def test_bars_without_volume_are_tokenized_as_the_reference_reads_them(kronos: Kronos) -> None:
    """The reader sets a missing volume to 0; Kronos then reads volume and amount 0, as the reference does without
    a volume column."""
    dm = _data(_bars(volume=False))
    batch = dm.datasets["train"].__getitems__([0, 1])
    assert dm.columns[4:] == ["volume"] and not batch["bars"][..., 4].any()
    tuner = KronosTuner.from_model(kronos)
    four = {**batch, "bars": batch["bars"][..., :4]}
    for got, expected in zip(tuner._tokens(batch), tuner._tokens(four), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.integration
def test_the_cli_fits_then_predicts_from_the_checkpoint_alone(folder: Path, tmp_path: Path) -> None:
    """``lightning-tf fit`` of configs/kline/kronos_finetune.yaml on bars, then ``predict`` from its checkpoint with
    the published folder gone and the training bars deleted: the CSV holds each new series' next bars, what
    ``forecast()`` of the loaded checkpoint gives."""
    import shutil

    from tests.helpers.cli import cli

    bars, new = tmp_path / "bars.csv", tmp_path / "new.csv"
    _bars(n=120).to_csv(bars, index=False)
    _bars(n=60).assign(ticker=lambda f: "N" + f["ticker"]).to_csv(new, index=False)
    published = shutil.copytree(folder, tmp_path / "published")
    root = Path(__file__).resolve().parents[2]
    common = ["--config", str(root / "configs/trainer/default.yaml"), "--config"]
    common += [str(root / "configs/kline/kronos_finetune.yaml"), f"--trainer.default_root_dir={tmp_path / 'run'}"]
    overrides = [
        f"--data.init_args.path={bars}",
        "--data.init_args.window=16",
        "--data.init_args.splits.val_start=2020-04-01",
        "--data.init_args.splits.test_start=2020-05-15",
        "--trainer.max_steps=4",
        "--trainer.val_check_interval=2",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--model.init_args.horizon=3",
    ]
    cli("fit", *common, *overrides, f"--model.init_args.pretrained={published}", timeout=600)
    ckpt = sorted((tmp_path / "run").rglob("*.ckpt"))[0]
    shutil.rmtree(published)
    bars.unlink()
    out = tmp_path / "forecast.csv"
    proc = cli(
        "predict",
        *common,
        *overrides,
        f"--ckpt_path={ckpt}",
        f"--data.init_args.predict_path={new}",
        "--trainer.callbacks+=lightning_tf.kline.kronos_tuning.KronosWriter",
        f"--trainer.callbacks.output_file={out}",
        timeout=600,
    )
    assert f"to {out}" in proc.stdout
    got = pd.read_csv(out, parse_dates=["timestamp"])
    assert list(got["ticker"].unique()) == ["NT0", "NT1", "NT2"] and list(got["step"]) == [1, 2, 3] * 3
    expected = KronosTuner.load_from_checkpoint(ckpt, weights_only=True).forecast(pd.read_csv(new))
    np.testing.assert_allclose(got[["open", "close", "volume"]], expected[["open", "close", "volume"]], rtol=1e-5)
