"""KLineDataModule and MultivariateDataModule: interface, windows, splits, targets, predict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.preprocessing import StandardScaler

from lightning_tf.kline.data import (
    KLineDataModule,
    MultivariateDataModule,
    chronological_borders,
    ett_borders,
    next_timestamps,
)
from lightning_tf.kline.io import read_bars

from .synthetic_bars import make_bars

FIXTURES = Path(__file__).parent / "fixtures"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ETTH1 = SHARED / "ett" / "ETTh1.csv"
KEYS = {"x", "y", "x_raw_target", "anchor", "ticker", "time"}


@pytest.fixture(scope="module")
def msft() -> KLineDataModule:
    dm = KLineDataModule(context_len=32, horizon=4, batch_size=256)
    dm.setup("fit")
    return dm


@pytest.fixture
def bars_csv(tmp_path: Path) -> Path:
    make_bars(300, seed=1).to_csv(tmp_path / "rw.csv", index=False)
    return tmp_path / "rw.csv"


def test_interface_is_known_before_setup() -> None:
    dm = KLineDataModule(context_len=48, horizon=7, features=["body", "log_return", "volatility"])
    assert (dm.n_features, dm.n_targets, dm.context_len, dm.horizon) == (3, 1, 48, 7)
    assert dm.feature_names == ["body", "log_return", "volatility"] and dm.target_names == ["log_return"]
    assert dm.target_channels == [1]
    assert KLineDataModule(target="close").target_channels is None  # close is not an input by default
    assert KLineDataModule(target="close", features=["log_return", "close"]).target_channels == [1]


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
    dm = KLineDataModule(str(bars_csv), context_len=16, horizon=3, target="close", features=["log_return", "close"])
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
    dm = KLineDataModule(str(bars_csv), context_len=10, horizon=2, val_start="2000-08-01", test_start="2000-10-02")
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
        features=["log_return"],
        train_fraction=0.5,
        val_fraction=0.1,
    )
    dm.setup("fit")
    assert dm.ticker_names == ["AAA", "BBB"]
    train = next(iter(dm.train_dataloader()))
    assert set(train["ticker"].tolist()) == {0, 1}
    # BBB is AAA at twice the price: the same returns, so the same scaled windows, but anchors differ.
    assert torch.equal(dm.feature_mean[0], dm.feature_mean[1])
    anchors = {int(k): a for k, a in zip(train["ticker"], train["anchor"], strict=True)}
    assert anchors[1] == pytest.approx(2 * anchors[0])


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
        str(tmp_path / "p.csv"), context_len=8, horizon=2, val_start="2000-10-02", test_start="2000-11-01"
    )
    dm.setup("fit")
    assert dm.ticker_names == ["OLD"] and "ticker 'IPO' has 0 usable training rows" in caplog.text
    assert (dm._rows["ticker"] == 0).all()
    with pytest.raises(ValueError, match="no ticker has training rows before the validation border"):
        KLineDataModule(str(tmp_path / "p.csv"), val_start="1990-01-01", test_start="1991-01-01").setup("fit")


def test_max_gap_splits_windows(tmp_path: Path) -> None:
    bars = make_bars(120, seed=2)
    bars.loc[60:, "Date"] += pd.Timedelta(days=30)
    bars.to_csv(tmp_path / "gap.csv", index=False)
    dm = KLineDataModule(
        str(tmp_path / "gap.csv"),
        context_len=8,
        horizon=2,
        max_gap="7D",
        on_error="drop",
        train_fraction=0.8,
        val_fraction=0.1,
    )
    dm.setup("fit")
    ds = dm.datasets["train"]
    rows = torch.cat([ds.context_rows(), ds.target_rows()], dim=1)  # (W, L + F)
    crosses = (rows.min(1).values < 60) & (rows.max(1).values >= 60)
    assert not crosses.any()
    without = KLineDataModule(str(tmp_path / "gap.csv"), context_len=8, horizon=2, train_fraction=0.8, val_fraction=0.1)
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


def test_predict_other_file_uses_training_scalers(bars_csv: Path, tmp_path: Path) -> None:
    make_bars(40, seed=9, start="2024-06-18 09:30", freq="5min").to_csv(tmp_path / "new.csv", index=False)
    dm = KLineDataModule(str(bars_csv), context_len=16, horizon=3, predict_path=str(tmp_path / "new.csv"))
    dm.setup("predict")
    batch = next(iter(dm.predict_dataloader()))
    raw = np.diff(np.log(pd.read_csv(tmp_path / "new.csv")["Close"].to_numpy()))[-16:]
    scaled = (raw - dm.feature_mean[0, 0].item()) / dm.feature_std[0, 0].item()
    np.testing.assert_allclose(batch["x"][0, :, 0].numpy(), scaled, rtol=1e-5, atol=1e-6)
    assert dm.future_timestamps(2)[0] == pd.Timestamp("2024-06-18 09:30") + 40 * pd.Timedelta("5min")


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
        KLineDataModule(features=["rsi"])
    with pytest.raises(ValueError, match=r"train_fraction \(0.8\).*val_fraction \(0.3\)"):
        KLineDataModule(train_fraction=0.8, val_fraction=0.3)
    with pytest.raises(ValueError, match=r"give both val_start \('2010-01-01'\) and test_start \(None\)"):
        KLineDataModule(val_start="2010-01-01")
    with pytest.raises(ValueError, match=r"val_start \(2012-01-01\) must come before test_start \(2011-01-01\)"):
        KLineDataModule(val_start="2012-01-01", test_start="2011-01-01")
    with pytest.raises(ValueError, match=r"on_error must be one of"):
        KLineDataModule(on_error="skip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"val_start '2010-13-45' is not a date"):
        KLineDataModule(val_start="2010-13-45", test_start="2012-01-01")
    with pytest.raises(ValueError, match=r"test_start 'soon' is not a date"):
        KLineDataModule(val_start="2010-01-01", test_start="soon")
    with pytest.raises(ValueError, match=r"max_gap 'ten days' is not a duration"):
        KLineDataModule(max_gap="ten days")
    with pytest.raises(ValueError, match=r"volatility_window \(1\) must be at least 2 bars"):
        KLineDataModule(volatility_window=1)
    with pytest.raises(ValueError, match=r"volume_window \(0\) must be at least 2 bars"):
        KLineDataModule(volume_window=0)
    short = KLineDataModule(str(FIXTURES / "english.csv"), context_len=8, horizon=2)
    with pytest.raises(ValueError, match=r"english.csv: ticker 'english' has \d usable training rows"):
        short.setup("fit")
    make_bars(60).to_csv(tmp_path / "s.csv", index=False)
    with pytest.raises(ValueError, match=r"s.csv: no training windows; context_len \+ horizon \(50\)"):
        KLineDataModule(str(tmp_path / "s.csv"), context_len=45, horizon=5).setup("fit")


def test_a_share_intraday_integration() -> None:
    path = SHARED / "kline_a_share" / "XSHG_5min_600977.csv"
    if not path.exists():
        pytest.skip("shared A-share bars not present")
    dm = KLineDataModule(str(path), context_len=48, horizon=6, features=["log_return", "body", "time_of_day"])
    dm.setup("fit")
    assert len(dm.datasets["test"]) == 2500 - (2500 - int(2500 * 0.2)) - 6 + 1
    batch = next(iter(dm.test_dataloader()))
    assert torch.isfinite(batch["x"]).all() and batch["x"][..., 2].std() > 0  # time of day varies


# ---------------------------------------------------------------- multivariate / ETT


def _csv(tmp_path: Path, n: int, cols: int = 3) -> Path:
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(n, cols)).cumsum(0), columns=[f"c{i}" for i in range(cols - 1)] + ["OT"])
    df.insert(0, "date", pd.date_range("2020-01-01", periods=n, freq="h"))
    df.to_csv(tmp_path / "custom.csv", index=False)
    return tmp_path / "custom.csv"


def test_multivariate_fraction_borders_match_dataset_custom(tmp_path: Path) -> None:
    path = _csv(tmp_path, 1000)
    dm = MultivariateDataModule(str(path), context_len=24, horizon=12, features="MS", target="c0", batch_size=50)
    assert (dm.n_features, dm.n_targets, dm.target_channels) == (3, 1, [2])
    assert dm.feature_names == ["c1", "OT", "c0"]  # target moved last, as Dataset_Custom does
    dm.setup("fit")
    # Dataset_Custom: n_train = int(0.7 n), n_test = int(0.2 n), border1s = [0, n_train - L, n - n_test - L]
    n_train, n_test, L, F = 700, 200, 24, 12
    border1s, border2s = [0, n_train - L, 1000 - n_test - L], [n_train, 1000 - n_test, 1000]
    for split, b1, b2 in zip(("train", "val", "test"), border1s, border2s, strict=True):
        assert len(dm.datasets[split]) == (b2 - b1) - L - F + 1
    first = next(iter(dm.test_dataloader()))
    values = pd.read_csv(path)[["c1", "OT", "c0"]].to_numpy()
    scaled = StandardScaler().fit(values[:n_train]).transform(values)
    np.testing.assert_allclose(first["x"][0].numpy(), scaled[800 - L : 800], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first["y"][0, :, 0].numpy(), scaled[800 : 800 + F, 2], rtol=1e-5, atol=1e-5)
    assert sum(len(b["y"]) for b in dm.test_dataloader()) == 200 - F + 1


def test_multivariate_s_mode_and_errors(tmp_path: Path) -> None:
    path = _csv(tmp_path, 200)
    dm = MultivariateDataModule(str(path), context_len=10, horizon=5, features="S")
    assert (dm.n_features, dm.n_targets, dm.target_channels, dm.feature_names) == (1, 1, [0], ["OT"])
    with pytest.raises(
        ValueError, match=r"custom.csv: target 'load' not found; columns are \['date', 'c0', 'c1', 'OT'\]"
    ):
        MultivariateDataModule(str(path), target="load")
    with pytest.raises(ValueError, match=r"custom.csv: 200 rows, but borders='ett_hour' needs 14400"):
        MultivariateDataModule(str(path), borders="ett_hour").setup("fit")
    dm.setup("predict")
    batch = next(iter(dm.predict_dataloader()))
    assert "y" not in batch and batch["x"].shape == (1, 10, 1)
    assert batch["time"][0] == pd.Timestamp("2020-01-01").value + 199 * 3600 * 10**9
    assert dm.future_timestamps(2).tolist() == [pd.Timestamp("2020-01-09 08:00"), pd.Timestamp("2020-01-09 09:00")]
    df = pd.read_csv(path)
    df["c1"] = df["c1"].astype(object)
    df.loc[5, "c1"] = "n/a"
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match=r"bad.csv: line 7, column 'c1': 'n/a' is not a finite number"):
        MultivariateDataModule(str(tmp_path / "bad.csv"), context_len=10, horizon=5).setup("fit")


def test_ett_borders_by_file_name(tmp_path: Path) -> None:
    assert ett_borders("ett_hour") == (8640, 11520, 14400)
    assert ett_borders("ett_minute") == (4 * 8640, 4 * 11520, 4 * 14400)
    path = _csv(tmp_path, 100)
    for name, needs in (("ETTm2.csv", 57600), ("ETTh2.csv", 14400)):
        path.rename(tmp_path / name)
        path = tmp_path / name
        with pytest.raises(ValueError, match=rf"{name}: 100 rows, but borders='ett_\w+' needs {needs}"):
            MultivariateDataModule(str(path), context_len=8, horizon=4).setup("fit")
    dm = MultivariateDataModule(str(path), context_len=8, horizon=4, borders="fraction")
    dm.setup("fit")
    assert dm.borders == {"train_end": 70, "val_end": 80, "test_end": 100}


@pytest.mark.skipif(not ETTH1.exists(), reason="shared ETTh1.csv not present")
@pytest.mark.parametrize(("L", "F"), [(336, 96), (512, 720)])
def test_etth1_window_counts_match_the_published_loader(L: int, F: int) -> None:
    dm = MultivariateDataModule(str(ETTH1), context_len=L, horizon=F)
    dm.setup("fit")
    assert dm.borders == {"train_end": 8640, "val_end": 11520, "test_end": 14400}
    # Dataset_ETT_hour: __len__ = border2 - border1 - seq_len - pred_len + 1
    border1s = [0, 12 * 30 * 24 - L, 12 * 30 * 24 + 4 * 30 * 24 - L]
    border2s = [12 * 30 * 24, 12 * 30 * 24 + 4 * 30 * 24, 12 * 30 * 24 + 8 * 30 * 24]
    for split, b1, b2 in zip(("train", "val", "test"), border1s, border2s, strict=True):
        assert len(dm.datasets[split]) == b2 - b1 - L - F + 1
    assert len(dm.datasets["test"]) == 2880 - F + 1  # every test window scored (2785 at F=96)
    values = pd.read_csv(ETTH1).iloc[:, 1:].to_numpy()
    np.testing.assert_allclose(dm.feature_mean[0].numpy(), values[:8640].mean(0))
    np.testing.assert_allclose(dm.feature_std[0].numpy(), values[:8640].std(0))
    last = dm.datasets["test"][len(dm.datasets["test"]) - 1]
    expected = (values[14400 - F : 14400] - values[:8640].mean(0)) / values[:8640].std(0)
    np.testing.assert_allclose(last["y"].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_target_kind_says_returns_or_levels(tmp_path: Path) -> None:
    assert KLineDataModule().target_kind == "return"
    assert KLineDataModule(target="close").target_kind == "level"
    path = _csv(tmp_path, 50)
    assert MultivariateDataModule(str(path), context_len=8, horizon=2).target_kind == "level"
    assert MultivariateDataModule(str(path), context_len=8, horizon=2, target_kind="return").target_kind == "return"
    with pytest.raises(ValueError, match=r"target_kind must be 'return' or 'level' \(or None\), got 'price'"):
        MultivariateDataModule(str(path), target_kind="price")  # type: ignore[arg-type]
    pd.read_csv(path).rename(columns={"OT": "log_return"}).to_csv(tmp_path / "r.csv", index=False)
    returns = MultivariateDataModule(
        str(tmp_path / "r.csv"), context_len=8, horizon=2, features="S", target="log_return"
    )
    assert returns.target_kind == "return"  # as the model read a target named log_return before target_kind


def test_intraday_forecast_timestamps_follow_the_trading_session() -> None:
    """5-minute bars of an exchange with a lunch break (09:35-11:30, 13:05-15:00, Monday-Friday):
    the forecast continues after the break and on the next business day's open, not at 11:35."""
    day = lambda d: [
        pd.Timestamp(d) + pd.Timedelta(m, "min")
        for m in [*range(9 * 60 + 35, 11 * 60 + 31, 5), *range(13 * 60 + 5, 15 * 60 + 1, 5)]
    ]
    stamps = [t for d in ("2024-08-28", "2024-08-29", "2024-08-30") for t in day(d)]  # Wednesday .. Friday
    morning = pd.DatetimeIndex(stamps[: stamps.index(pd.Timestamp("2024-08-30 11:30")) + 1])
    assert next_timestamps(morning, 3).tolist() == [pd.Timestamp(f"2024-08-30 13:{m}") for m in ("05", "10", "15")]
    closed = pd.DatetimeIndex(stamps)  # ends Friday 15:00: Monday's open comes next
    assert next_timestamps(closed, 2).tolist() == [pd.Timestamp("2024-09-02 09:35"), pd.Timestamp("2024-09-02 09:40")]
    # round-the-clock hourly bars (weekends included) and a single partial day keep the plain spacing
    hourly = pd.date_range("2024-08-30 00:00", periods=60, freq="h")
    assert next_timestamps(hourly, 3).tolist() == list(pd.date_range(hourly[-1], periods=4, freq="h")[1:])
    one_day = pd.DatetimeIndex(stamps[:10])
    assert next_timestamps(one_day, 2)[0] == one_day[-1] + pd.Timedelta("5min")


def test_multivariate_rows_must_be_in_time_order(tmp_path: Path) -> None:
    """A newest-first CSV gives the same windows as the file in time order; shuffled rows raise."""
    path = _csv(tmp_path, 200)
    df = pd.read_csv(path)
    df.iloc[::-1].to_csv(tmp_path / "newest_first.csv", index=False)
    kw = {"context_len": 16, "horizon": 4, "borders": "fraction"}
    a, b = MultivariateDataModule(str(path), **kw), MultivariateDataModule(str(tmp_path / "newest_first.csv"), **kw)
    a.setup("fit"), b.setup("fit")
    torch.testing.assert_close(b.feature_mean, a.feature_mean)
    xa, xb = (next(iter(dm.test_dataloader())) for dm in (a, b))
    torch.testing.assert_close(xb["x"], xa["x"])
    torch.testing.assert_close(xb["y"], xa["y"])
    assert b.future_timestamps(1)[0] == pd.Timestamp(df["date"].iloc[-1]) + pd.Timedelta("1h")
    df.iloc[[0, 2, 1, *range(3, 200)]].to_csv(tmp_path / "shuffled.csv", index=False)
    with pytest.raises(
        ValueError, match=r"shuffled.csv: line 4, column 'date': 2020-01-01 01:00:00 does not come after"
    ):
        MultivariateDataModule(str(tmp_path / "shuffled.csv"), **kw).setup("fit")


def test_multivariate_too_short_for_the_window_is_refused(tmp_path: Path) -> None:
    """Too few rows for one window would otherwise index rows before the start (wrapping around)."""
    with pytest.raises(
        ValueError, match=r"custom.csv: no training windows; context_len \+ horizon \(432\) exceeds the 70"
    ):
        MultivariateDataModule(str(_csv(tmp_path, 100)), context_len=336, horizon=96, borders="fraction").setup("fit")


def test_an_empty_test_split_is_refused_rather_than_scored_as_nothing(bars_csv: Path) -> None:
    dm = KLineDataModule(str(bars_csv), context_len=16, horizon=3, val_start="2000-06-01", test_start="2030-01-01")
    dm.setup("fit")
    assert len(dm.datasets["train"]) > 0 and len(dm.datasets["test"]) == 0
    with pytest.raises(ValueError, match=r"rw.csv: no test windows; the test split has fewer than horizon \(3\)"):
        dm.test_dataloader()
