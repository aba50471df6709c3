"""KLineDataModule: interface, windows, splits, targets, the data scale, predict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import DataScale, KLineDataModule
from lightning_tf.kline.reader.io import read_bars
from lightning_tf.kline.settings import Features, Loading, Reading, Splits
from lightning_tf.kline.windows import chronological_borders
from tests.helpers.kline import make_bars

FIXTURES = Path(__file__).parent / "fixtures"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
KEYS = {"x", "y", "x_raw_target", "anchor", "ticker", "time"}


@pytest.fixture(scope="module")
def msft() -> KLineDataModule:
    dm = KLineDataModule(context_len=32, horizon=4, loading=Loading(batch_size=256))
    dm.setup("fit")
    return dm


@pytest.fixture
def bars_csv(tmp_path: Path) -> Path:
    make_bars(300, seed=1).to_csv(tmp_path / "rw.csv", index=False)
    return tmp_path / "rw.csv"


def test_interface_is_known_before_setup() -> None:
    dm = KLineDataModule(context_len=48, horizon=7, features=Features(names=["body", "log_return", "volatility"]))
    assert (dm.n_features, dm.n_targets, dm.context_len, dm.horizon) == (3, 1, 48, 7)
    assert dm.feature_names == ["body", "log_return", "volatility"] and dm.target_names == ["log_return"]
    assert dm.target_channels == [1]
    assert (
        KLineDataModule(features=Features(target="close")).target_channels is None
    )  # close is not an input by default
    assert KLineDataModule(features=Features(target="close", names=["log_return", "close"])).target_channels == [1]


def test_batches(msft: KLineDataModule) -> None:
    batch = next(iter(msft.train_dataloader()))
    assert set(batch) == KEYS
    B = 256
    assert batch["x"].shape == (B, 32, 6) and batch["x"].dtype == torch.float32
    assert batch["y"].shape == (B, 4, 1) and batch["y"].dtype == torch.float32
    assert batch["x_raw_target"].shape == (B, 32, 1)
    assert batch["anchor"].dtype == torch.float64 and batch["time"].dtype == torch.int64
    assert batch["ticker"].dtype == torch.int64 and (batch["ticker"] == 0).all()
    assert torch.isfinite(batch["x"]).all() and torch.isfinite(batch["y"]).all()
    # Train batches are shuffled: times are not in order; test batches are in order.
    assert not (batch["time"].diff() > 0).all()
    test = next(iter(msft.test_dataloader()))
    assert (test["time"].diff() > 0).all()


def test_window_counts_and_every_evaluation_window_scored(msft: KLineDataModule) -> None:
    b = msft.borders["msft"]
    n, first, L, F = b["n"], b["first"], 32, 4
    assert (b["train_end"], b["val_end"]) == chronological_borders(n, 0.7, 0.1) == (int(n * 0.7), n - int(n * 0.2))
    assert len(msft.datasets["train"]) == b["train_end"] - first - L - F + 1
    assert len(msft.datasets["val"]) == b["val_end"] - b["train_end"] - F + 1
    assert len(msft.datasets["test"]) == n - b["val_end"] - F + 1
    sizes = [len(batch["y"]) for batch in msft.test_dataloader()]
    assert sum(sizes) == len(msft.datasets["test"]) and sizes[-1] < 256  # the short last batch is kept


def test_targets_rebuild_the_real_future_closes(msft: KLineDataModule) -> None:
    frame = read_bars("data/msft.csv")
    closes = torch.tensor(frame["close"].to_numpy())
    times = frame["timestamp"].to_numpy().astype("datetime64[ns]").astype(np.int64)
    batch = next(iter(msft.test_dataloader()))
    t = torch.tensor(np.searchsorted(times, batch["time"].numpy()))  # row of the last context bar
    assert torch.equal(batch["anchor"], closes[t])
    returns = msft.inverse_targets(batch["y"].double(), batch["ticker"])  # (B, F, 1)
    prices = msft.rebuild_prices(returns[..., 0], batch["anchor"])  # (B, F)
    future = closes[t[:, None] + torch.arange(1, 5)]  # (B, F)
    torch.testing.assert_close(prices, future, rtol=1e-5, atol=0)
    torch.testing.assert_close(msft.target_to_prices(returns, batch["anchor"]), prices)
    # x_raw_target holds the context's log returns in original units.
    past = torch.log(closes[t[:, None] + torch.arange(-31, 1)] / closes[t[:, None] + torch.arange(-32, 0)])
    torch.testing.assert_close(batch["x_raw_target"][..., 0].double(), past, rtol=1e-4, atol=1e-6)
    # The target channel among the inputs is on the same scale as y: a window's y is the next windows' x.
    torch.testing.assert_close(msft.scale_targets(returns, batch["ticker"]).float(), batch["y"], rtol=1e-4, atol=1e-5)


def test_close_target(bars_csv: Path) -> None:
    dm = KLineDataModule(
        str(bars_csv), context_len=16, horizon=3, features=Features(target="close", names=["log_return", "close"])
    )
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    closes = torch.tensor(pd.read_csv(bars_csv)["Close"].to_numpy())
    t = dm.borders["rw"]["train_end"] - 1  # the first validation window ends on the last training bar
    y = dm.inverse_targets(batch["y"].double(), batch["ticker"])[0, :, 0]
    torch.testing.assert_close(y, closes[t + 1 : t + 4], rtol=1e-6, atol=0)
    torch.testing.assert_close(dm.target_to_prices(y[None, :, None], batch["anchor"][:1])[0], y)
    x_close = batch["x"][0, :, 1].double() * dm.feature_std[0, 1] + dm.feature_mean[0, 1]
    torch.testing.assert_close(x_close, closes[t - 15 : t + 1], rtol=1e-5, atol=0)


def test_date_splits(bars_csv: Path) -> None:
    dm = KLineDataModule(
        str(bars_csv), context_len=10, horizon=2, splits=Splits(val_start="2000-08-01", test_start="2000-10-02")
    )
    dm.setup("fit")
    b = dm.borders["rw"]
    assert b["val_start"] == pd.Timestamp("2000-08-01") and b["test_start"] == pd.Timestamp("2000-10-02")
    first_test = next(iter(dm.test_dataloader()))
    assert first_test["time"][0] == pd.Timestamp("2000-09-29").value  # last bar before test_start (a Friday)


def test_panel_of_tickers_trains_one_model() -> None:
    dm = KLineDataModule(
        str(FIXTURES / "long_two_tickers.csv"),
        context_len=1,
        horizon=1,
        features=Features(names=["log_return"]),
        splits=Splits(train_fraction=0.5, val_fraction=0.1),
    )
    dm.setup("fit")
    assert dm.ticker_names == ["AAA", "BBB"]
    train = next(iter(dm.train_dataloader()))
    assert set(train["ticker"].tolist()) == {0, 1}
    # BBB is AAA at twice the price: the same returns, so the same scaled windows, but anchors differ.
    assert torch.equal(dm.feature_mean[0], dm.feature_mean[1])
    anchors = {int(k): a for k, a in zip(train["ticker"], train["anchor"], strict=True)}
    assert anchors[1] == pytest.approx(2 * anchors[0])


def test_a_folder_read_by_worker_processes_gives_the_same_windows(tmp_path: Path) -> None:
    for seed, name in enumerate(["C", "A", "B"]):
        make_bars(150, seed=seed).to_csv(tmp_path / f"{name}.csv", index=False)
    built = []
    for workers in (0, 2):
        dm = KLineDataModule(str(tmp_path), context_len=8, horizon=2, reading=Reading(read_workers=workers))
        dm.setup("fit")
        built.append(dm)
    one, two = built
    assert one.ticker_names == two.ticker_names == ["A", "B", "C"]
    assert all(torch.equal(one._rows[k], two._rows[k]) for k in one._rows)
    assert torch.equal(one.feature_std, two.feature_std)
    assert torch.equal(one.datasets["val"].ends, two.datasets["val"].ends)
    assert one._rows["x"].dtype == torch.float32 and one._rows["x"].is_contiguous()


def test_panel_fraction_splits_overlapping_in_time_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Per-ticker fractions over tickers of different years let one ticker train on another's test days."""
    old, late = make_bars(300, seed=1), make_bars(300, seed=2, start="2000-06-01")
    pd.concat([old.assign(ticker="OLD"), late.assign(ticker="NEW")]).to_csv(tmp_path / "p.csv", index=False)
    KLineDataModule(str(tmp_path / "p.csv"), context_len=8, horizon=2).setup("fit")
    assert "ticker 'NEW' trains on bars until" in caplog.text and "the test split of ticker 'OLD' starts" in caplog.text
    caplog.clear()
    aligned = pd.concat([old.assign(ticker="A"), make_bars(300, seed=2).assign(ticker="B")])
    aligned.to_csv(tmp_path / "q.csv", index=False)
    KLineDataModule(str(tmp_path / "q.csv"), context_len=8, horizon=2).setup("fit")
    assert "overlap in time" not in caplog.text


def test_panel_ticker_without_training_rows_is_left_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    old, late = make_bars(300, seed=1), make_bars(100, seed=2, start="2001-01-01")
    pd.concat([old.assign(ticker="OLD"), late.assign(ticker="IPO")]).to_csv(tmp_path / "p.csv", index=False)
    dm = KLineDataModule(
        str(tmp_path / "p.csv"),
        context_len=8,
        horizon=2,
        splits=Splits(val_start="2000-10-02", test_start="2000-11-01"),
    )
    dm.setup("fit")
    assert dm.ticker_names == ["OLD"] and "ticker 'IPO' has 0 usable training rows" in caplog.text
    assert (dm._rows["ticker"] == 0).all()
    with pytest.raises(ValueError, match="no ticker has training rows before the validation border"):
        KLineDataModule(str(tmp_path / "p.csv"), splits=Splits(val_start="1990-01-01", test_start="1991-01-01")).setup(
            "fit"
        )


def test_max_gap_splits_windows(tmp_path: Path) -> None:
    bars = make_bars(120, seed=2)
    bars.loc[60:, "Date"] += pd.Timedelta(days=30)
    bars.to_csv(tmp_path / "gap.csv", index=False)
    dm = KLineDataModule(
        str(tmp_path / "gap.csv"),
        context_len=8,
        horizon=2,
        reading=Reading(max_gap="7D", on_error="drop"),
        splits=Splits(train_fraction=0.8, val_fraction=0.1),
    )
    dm.setup("fit")
    ds = dm.datasets["train"]
    rows = torch.cat([ds.context_rows(), ds.target_rows()], dim=1)  # (W, L + F)
    crosses = (rows.min(1).values < 60) & (rows.max(1).values >= 60)
    assert not crosses.any()
    without = KLineDataModule(
        str(tmp_path / "gap.csv"), context_len=8, horizon=2, splits=Splits(train_fraction=0.8, val_fraction=0.1)
    )
    without.setup("fit")
    assert len(without.datasets["train"]) - len(ds) == 8 + 2 - 1  # the windows that spanned the gap


def test_predict_window_and_future_timestamps(msft: KLineDataModule) -> None:
    msft.setup("predict")
    batches = list(msft.predict_dataloader())
    assert len(batches) == 1
    batch = batches[0]
    assert "y" not in batch and batch["x"].shape == (1, 32, 6)
    assert batch["time"][0] == pd.Timestamp("2017-11-10").value and batch["anchor"][0] == 83.87
    recent = msft.recent_bars(3)
    assert recent["close"].tolist() == [84.56, 84.09, 83.87] and recent["timestamp"].iloc[-1] == pd.Timestamp(
        "2017-11-10"
    )
    assert len(msft.bars) == 7983 and len(msft.split_frame("test")) == 7983 - msft.borders["msft"]["val_end"]
    future = msft.future_timestamps(4)
    assert list(future) == list(pd.to_datetime(["2017-11-13", "2017-11-14", "2017-11-15", "2017-11-16"]))


def test_predict_reads_only_the_predict_file_and_scales_a_trained_ticker_with_the_checkpoint(
    bars_csv: Path, tmp_path: Path
) -> None:
    """``setup("predict")`` reads the predict file alone (the training file is moved away); the trained
    ticker's statistics come from the checkpoint's DataModule state (``load_state_dict``)."""
    trained = KLineDataModule(str(bars_csv), context_len=16, horizon=3)
    trained.setup("fit")
    state = trained.state_dict()
    later = tmp_path / "later"
    later.mkdir()
    make_bars(80, seed=9, start="2024-06-18 09:30", freq="5min").to_csv(later / "rw.csv", index=False)  # ticker 'rw'
    bars_csv.rename(tmp_path / "moved_away.csv")
    dm = KLineDataModule(str(bars_csv), context_len=16, horizon=3, predict_path=str(later / "rw.csv"))
    dm.setup("predict")
    dm.load_state_dict(state)  # as Lightning does under --ckpt_path, after setup
    batch = next(iter(dm.predict_dataloader()))
    raw = np.diff(np.log(pd.read_csv(later / "rw.csv")["Close"].to_numpy()))[-16:]
    scaled = (raw - trained.feature_mean[0, 0].item()) / trained.feature_std[0, 0].item()
    np.testing.assert_allclose(batch["x"][0, :, 0].numpy(), scaled, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch["scale_std"][0].numpy(), trained.target_std[0].numpy())
    assert dm.predict_ticker_names == ["rw"] and dm.predict_scaling == {"rw": "training statistics of 'rw'"}
    assert dm.future_timestamps(2)[0] == pd.Timestamp("2024-06-18 09:30") + 80 * pd.Timedelta("5min")


def test_predict_scales_an_unseen_series_by_its_own_history(bars_csv: Path, tmp_path: Path) -> None:
    """A series whose ticker was not trained on is never scaled or named as the trained ticker."""
    trained = KLineDataModule(str(bars_csv), context_len=16, horizon=3)
    trained.setup("fit")
    frame = make_bars(120, seed=5)
    frame[["Open", "High", "Low", "Close"]] *= 1000
    frame.to_csv(tmp_path / "other.csv", index=False)
    dm = KLineDataModule(str(bars_csv), context_len=16, horizon=3, predict_path=str(tmp_path / "other.csv"))
    dm.setup("predict")
    dm.load_state_dict(trained.state_dict())
    batch = next(iter(dm.predict_dataloader()))
    ret = np.diff(np.log(frame["Close"].to_numpy()))  # the first bar has no return: the warm-up
    feats = dm.feature_names.index("log_return")
    own = (ret[-16:] - ret[19:].mean()) / ret[19:].std()  # 20 warm-up rows (the 20-bar volatility)
    np.testing.assert_allclose(batch["x"][0, :, feats].numpy(), own, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(batch["scale_mean"][0, 0].item(), ret[19:].mean(), rtol=1e-6)
    assert dm.predict_ticker_names == ["other"] and dm.predict_scaling == {"other": "its own history (100 bars)"}
    assert batch["anchor"][0].item() == pytest.approx(frame["Close"].iloc[-1])


def test_state_dict_flags_a_changed_training_file(bars_csv: Path, caplog: pytest.LogCaptureFixture) -> None:
    dm = KLineDataModule(str(bars_csv), context_len=16, horizon=3)
    dm.setup("fit")
    state = dm.state_dict()
    path = bars_csv.parent / "state.pt"
    torch.save(state, path)
    state = torch.load(path, weights_only=True)
    again = KLineDataModule(str(bars_csv), context_len=16, horizon=3)
    again.setup("fit")
    again.load_state_dict(state)
    assert "differ from the checkpoint" not in caplog.text
    state["feature_mean"] = state["feature_mean"] + 1
    again.load_state_dict(state)
    assert "differ from the checkpoint" in caplog.text


def test_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown feature\(s\) \['rsi'\]"):
        KLineDataModule(features=Features(names=["rsi"]))
    with pytest.raises(ValueError, match=r"splits.train_fraction \(0.8\).*splits.val_fraction \(0.3\)"):
        KLineDataModule(splits=Splits(train_fraction=0.8, val_fraction=0.3))
    with pytest.raises(ValueError, match=r"give both splits.val_start \('2010-01-01'\) and splits.test_start \(None\)"):
        KLineDataModule(splits=Splits(val_start="2010-01-01"))
    with pytest.raises(
        ValueError, match=r"splits.val_start \(2012-01-01\) must come before splits.test_start \(2011-01-01\)"
    ):
        KLineDataModule(splits=Splits(val_start="2012-01-01", test_start="2011-01-01"))
    with pytest.raises(ValueError, match=r"reading.on_error must be one of"):
        KLineDataModule(reading=Reading(on_error="skip"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"splits.val_start '2010-13-45' is not a date"):
        KLineDataModule(splits=Splits(val_start="2010-13-45", test_start="2012-01-01"))
    with pytest.raises(ValueError, match=r"splits.test_start 'soon' is not a date"):
        KLineDataModule(splits=Splits(val_start="2010-01-01", test_start="soon"))
    with pytest.raises(ValueError, match=r"reading.max_gap 'ten days' is not a duration"):
        KLineDataModule(reading=Reading(max_gap="ten days"))
    with pytest.raises(ValueError, match=r"features.volatility_window \(1\) must be at least 2 bars"):
        KLineDataModule(features=Features(volatility_window=1))
    with pytest.raises(ValueError, match=r"features.volume_window \(0\) must be at least 2 bars"):
        KLineDataModule(features=Features(volume_window=0))
    with pytest.raises(ValueError, match=r"read_workers \(-2\) must be >= 0 \(0: read in this process\)"):
        KLineDataModule(reading=Reading(read_workers=-2))
    short = KLineDataModule(str(FIXTURES / "english.csv"), context_len=8, horizon=2)
    with pytest.raises(ValueError, match=r"english.csv: ticker 'english' has \d usable training rows"):
        short.setup("fit")
    make_bars(60).to_csv(tmp_path / "s.csv", index=False)
    with pytest.raises(
        ValueError,
        match=r"s.csv: the training split has 22 usable bars \(after the warm-up\), too "
        r"few: a training window needs context_len \+ horizon = 45 \+ 5 = 50 bars",
    ):
        KLineDataModule(str(tmp_path / "s.csv"), context_len=45, horizon=5).setup("fit")
    with pytest.raises(
        ValueError,
        match=r"s.csv: the validation split has 6 usable bars, too few: a validation "
        r"window needs horizon \(8\) bars in the split",
    ):
        KLineDataModule(str(tmp_path / "s.csv"), context_len=4, horizon=8).setup("fit")
    (tmp_path / "empty.csv").write_text("  \n")
    with pytest.raises(ValueError, match=r"empty.csv: the file is empty"):
        KLineDataModule(str(tmp_path / "empty.csv")).setup("fit")


def test_reader_options_reach_the_reader(bars_csv: Path, tmp_path: Path) -> None:
    """decimal / thousands / timezone are DataModule arguments: the same bars written with decimal
    commas and ';' give the same windows as the plain file."""
    frame = pd.read_csv(bars_csv)
    frame.to_csv(tmp_path / "comma.csv", sep=";", decimal=",", index=False)
    plain = KLineDataModule(str(bars_csv), context_len=16, horizon=2)
    comma = KLineDataModule(
        str(tmp_path / "comma.csv"), context_len=16, horizon=2, reading=Reading(decimal=",", thousands="")
    )
    plain.setup("fit"), comma.setup("fit")
    assert torch.equal(plain.datasets["train"][3]["x"], comma.datasets["train"][3]["x"])
    assert plain.data_scale == dataclasses.replace(comma.data_scale, ticker_names=plain.data_scale.ticker_names)
    with pytest.raises(ValueError, match=r"decimal must be one of"):
        KLineDataModule(reading=Reading(decimal=";"))
    with pytest.raises(ValueError, match=r"timezone 'Mars/Olympus' is not a known time zone"):
        KLineDataModule(reading=Reading(timezone="Mars/Olympus"))


def test_a_share_intraday_integration() -> None:
    path = SHARED / "kline_a_share" / "XSHG_5min_600977.csv"
    if not path.exists():
        pytest.skip("shared A-share bars not present")
    dm = KLineDataModule(
        str(path), context_len=48, horizon=6, features=Features(names=["log_return", "body", "time_of_day"])
    )
    dm.setup("fit")
    assert len(dm.datasets["test"]) == 2500 - (2500 - int(2500 * 0.2)) - 6 + 1
    batch = next(iter(dm.test_dataloader()))
    assert torch.isfinite(batch["x"]).all() and batch["x"][..., 2].std() > 0  # time of day varies


def test_an_empty_test_split_is_refused_rather_than_scored_as_nothing(bars_csv: Path) -> None:
    dm = KLineDataModule(
        str(bars_csv), context_len=16, horizon=3, splits=Splits(val_start="2000-06-01", test_start="2030-01-01")
    )
    dm.setup("fit")
    assert len(dm.datasets["train"]) > 0 and len(dm.datasets["test"]) == 0
    with pytest.raises(ValueError, match=r"rw.csv: no test windows; the test split has fewer than horizon \(3\)"):
        dm.test_dataloader()


def test_data_scale_holds_the_training_statistics(bars_csv: Path) -> None:
    dm = KLineDataModule(str(bars_csv), context_len=16, horizon=3, features=Features(names=["body", "log_return"]))
    assert dm.data_scale is None
    with pytest.raises(RuntimeError, match=r"call setup\(\) first"):
        dm.inverse_targets(torch.zeros(1, 3, 1))
    dm.setup("fit")
    scale = dm.data_scale
    assert isinstance(scale, DataScale)
    assert scale.feature_names == ("body", "log_return") and scale.target_names == ("log_return",)
    assert scale.ticker_names == ("rw",)
    assert scale.target_kind == "return" and scale.has_prices
    for name in ("feature_mean", "feature_std", "target_mean", "target_std"):
        assert torch.equal(torch.tensor(getattr(scale, name), dtype=torch.float64), getattr(dm, name)), name
    y = torch.randn(4, 3, 1)
    torch.testing.assert_close(scale.inverse_targets(y), y * dm.target_std[0, 0].float() + dm.target_mean[0, 0].float())
