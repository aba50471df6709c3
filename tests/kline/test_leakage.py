"""No leakage: split borders, train-only scalers, inputs that never see their targets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import KLineDataModule, MultivariateDataModule
from lightning_tf.kline.features import FEATURES
from lightning_tf.kline.settings import Features, Splits
from tests.helpers.kline import make_bars

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ETTH1 = SHARED / "ett" / "ETTh1.csv"
ALL_FEATURES = [f for f in FEATURES if f != "time_of_day"]


def _panel(tmp_path: Path) -> Path:
    """Two tickers of different lengths in one long table."""
    a, b = make_bars(400, seed=3), make_bars(250, seed=4, start="2000-06-01")
    table = pd.concat([a.assign(Ticker="A"), b.assign(Ticker="B")])
    table.to_csv(tmp_path / "panel.csv", index=False)
    return tmp_path / "panel.csv"


def _module(path: Path, **kwargs) -> KLineDataModule:
    dm = KLineDataModule(
        str(path), context_len=20, horizon=5, features=Features(names=ALL_FEATURES), splits=Splits(**kwargs)
    )
    dm.setup("fit")
    return dm


@pytest.mark.parametrize("dates", [False, True])
def test_no_window_crosses_a_split_border(tmp_path: Path, dates: bool) -> None:
    kwargs = {"val_start": "2000-11-01", "test_start": "2001-01-02"} if dates else {}
    dm = _module(_panel(tmp_path), **kwargs)
    time, ticker = dm._rows["time"], dm._rows["ticker"]
    for split in ("train", "val", "test"):
        ds = dm.datasets[split]
        assert len(ds) > 0
        targets, context = ds.target_rows(), ds.context_rows()  # (W, F), (W, L)
        for k, name in enumerate(dm.ticker_names):
            mine = ticker[ds.ends] == k
            b = dm.borders[name]
            t_first = time[targets[mine, 0]]  # earliest target of each window
            t_last = time[targets[mine, -1]]  # latest target of each window
            val_start, test_start = b["val_start"].value, b["test_start"].value
            if split == "train":
                assert (t_last < val_start).all()
            elif split == "val":
                assert (t_first >= val_start).all() and (t_last < test_start).all()
            else:
                assert (t_first >= test_start).all()
            # A window never mixes tickers.
            assert (ticker[context[mine]] == k).all() and (ticker[targets[mine]] == k).all()
        # Validation and test windows take their context from before the border: the first one
        # ends on the last bar of the previous split.
        if split != "train":
            first_target_rows = targets[:, 0]
            assert (first_target_rows - ds.ends == 1).all()


def test_no_target_is_in_its_own_input_window(tmp_path: Path) -> None:
    dm = _module(_panel(tmp_path))
    for split in ("train", "val", "test"):
        ds = dm.datasets[split]
        targets, context = ds.target_rows(), ds.context_rows()
        assert (targets.min(1).values > context.max(1).values).all()
        # By value too: the random walk's returns are distinct, so a target return seen in the
        # window's raw context would be a leak.
        batch = ds.__getitems__(list(range(len(ds))))
        y = dm.inverse_targets(batch["y"].double(), batch["ticker"])[..., 0]  # (W, F)
        seen = batch["x_raw_target"][..., 0].double()  # (W, L)
        close = torch.isclose(y[:, :, None], seen[:, None, :], rtol=0, atol=1e-7)  # (W, F, L)
        assert not close.any()


def test_inputs_do_not_change_when_the_future_changes(tmp_path: Path) -> None:
    bars = make_bars(300, seed=5)
    bars.to_csv(tmp_path / "a.csv", index=False)
    r = 250  # a test bar
    shocked = bars.copy()
    shocked.loc[r, ["Open", "High", "Low", "Close"]] *= 3.0
    shocked.loc[r, "Volume"] *= 50
    shocked.to_csv(tmp_path / "b.csv", index=False)
    a, b = _module(tmp_path / "a.csv"), _module(tmp_path / "b.csv")
    ends = a.datasets["test"].ends
    before = ends < r  # windows whose context ends before the shocked bar
    xa = a.datasets["test"].__getitems__(torch.nonzero(before)[:, 0].tolist())["x"]
    xb = b.datasets["test"].__getitems__(torch.nonzero(before)[:, 0].tolist())["x"]
    assert torch.equal(xa, xb)
    # ...while the windows that forecast it see it in y, and later ones in x.
    sees = (ends < r) & (ends >= r - 5)
    ya = a.datasets["test"].__getitems__(torch.nonzero(sees)[:, 0].tolist())["y"]
    yb = b.datasets["test"].__getitems__(torch.nonzero(sees)[:, 0].tolist())["y"]
    assert not torch.equal(ya, yb)


def test_scalers_ignore_validation_and_test_rows(tmp_path: Path) -> None:
    bars = make_bars(400, seed=6)
    bars.to_csv(tmp_path / "a.csv", index=False)
    base = _module(tmp_path / "a.csv")
    train_end = base.borders["a"]["train_end"]
    altered = bars.copy()
    altered.loc[train_end:, ["Open", "High", "Low", "Close"]] *= np.linspace(1, 5, len(bars) - train_end)[:, None]
    altered.loc[train_end:, "Volume"] *= 10
    altered.to_csv(tmp_path / "a.csv", index=False)
    after = _module(tmp_path / "a.csv")
    for name in ("feature_mean", "feature_std", "target_mean", "target_std"):
        assert torch.equal(getattr(base, name), getattr(after, name)), name
    train_a = base.datasets["train"].__getitems__(list(range(len(base.datasets["train"]))))
    train_b = after.datasets["train"].__getitems__(list(range(len(after.datasets["train"]))))
    assert torch.equal(train_a["x"], train_b["x"]) and torch.equal(train_a["y"], train_b["y"])
    # The check can fail: altering one training row moves the statistics.
    bars.loc[train_end - 10, "Close"] *= 1.2
    bars.loc[train_end - 10, "High"] *= 1.2
    bars.to_csv(tmp_path / "a.csv", index=False)
    moved = _module(tmp_path / "a.csv")
    assert not torch.equal(base.feature_mean, moved.feature_mean)


def test_panel_scalers_are_per_ticker(tmp_path: Path) -> None:
    dm = _module(_panel(tmp_path))
    assert not torch.equal(dm.feature_mean[0], dm.feature_mean[1])
    for k, name in enumerate(dm.ticker_names):
        b = dm.borders[name]
        rows = torch.nonzero(dm._rows["ticker"] == k)[:, 0][b["first"] : b["train_end"]]
        x = dm._rows["x"][rows].double()  # scaled training rows: mean 0, population std 1
        torch.testing.assert_close(x.mean(0), torch.zeros(len(ALL_FEATURES), dtype=torch.float64), atol=1e-5, rtol=0)
        torch.testing.assert_close(
            x.std(0, unbiased=False), torch.ones(len(ALL_FEATURES), dtype=torch.float64), atol=1e-5, rtol=0
        )


@pytest.mark.skipif(not ETTH1.exists(), reason="shared ETTh1.csv not present")
def test_etth1_scaler_fits_training_rows_only(tmp_path: Path) -> None:
    df = pd.read_csv(ETTH1)
    base = MultivariateDataModule(str(ETTH1), context_len=96, horizon=24)
    base.setup("fit")
    df.iloc[8640:, 1:] = df.iloc[8640:, 1:] * 3 + 7
    df.to_csv(tmp_path / "ETTh1.csv", index=False)
    after = MultivariateDataModule(str(tmp_path / "ETTh1.csv"), context_len=96, horizon=24)
    after.setup("fit")
    assert torch.equal(base.feature_mean, after.feature_mean) and torch.equal(base.feature_std, after.feature_std)
    df.iloc[8639, 1:] += 100.0  # the last training row does count
    df.to_csv(tmp_path / "ETTh1.csv", index=False)
    moved = MultivariateDataModule(str(tmp_path / "ETTh1.csv"), context_len=96, horizon=24)
    moved.setup("fit")
    assert not torch.equal(base.feature_mean, moved.feature_mean)


@pytest.mark.parametrize("embargo", [0, 5, 12])
def test_embargo_and_date_range_keep_every_target_inside_its_split(tmp_path: Path, embargo: int) -> None:
    """A walk-forward fold's data: training from train_start, test until test_end, and ``embargo`` bars between
    the last target of one split and the first target of the next, for every ticker of a panel."""
    kwargs = {
        "train_start": "2000-03-01",
        "val_start": "2000-11-01",
        "test_start": "2001-01-02",
        "test_end": "2001-03-30",
        "embargo": embargo,
    }
    dm = _module(_panel(tmp_path), **kwargs)
    time, ticker = dm._rows["time"], dm._rows["ticker"]
    stamp = {k: pd.Timestamp(v).value for k, v in kwargs.items() if k != "embargo"}
    rows = {}
    for split in ("train", "val", "test"):
        ds = dm.datasets[split]
        assert len(ds) > 0
        targets, context = ds.target_rows(), ds.context_rows()  # (W, F), (W, L)
        rows[split] = targets
        if split == "train":  # context and targets from train_start on, every target before val_start
            assert (time[context] >= stamp["train_start"]).all() and (time[targets] < stamp["val_start"]).all()
        elif split == "val":
            assert (time[targets] >= stamp["val_start"]).all() and (time[targets] < stamp["test_start"]).all()
        else:
            assert (time[targets] >= stamp["test_start"]).all() and (time[targets] <= stamp["test_end"]).all()
    for k, name in enumerate(dm.ticker_names):
        b = dm.borders[name]
        offset = torch.nonzero(ticker == k)[0, 0].item()  # the ticker's first row in the panel
        for before, after, border in (("train", "val", b["train_end"]), ("val", "test", b["val_end"])):
            last = rows[before][ticker[dm.datasets[before].ends] == k].max().item()
            first = rows[after][ticker[dm.datasets[after].ends] == k].min().item()
            assert first == offset + border  # the next split's first target is its border bar
            assert first - last - 1 == embargo  # exactly `embargo` bars in between hold no target
        # the last test target is the last bar on or before test_end
        last_test = rows["test"][ticker[dm.datasets["test"].ends] == k].max().item()
        assert time[last_test] <= stamp["test_end"] < time[last_test + 1]
    # the test split's bars end at test_end too
    assert pd.Timestamp(dm.split_frame("test")["timestamp"].max()) <= pd.Timestamp(kwargs["test_end"])


def test_train_start_moves_the_scaler_statistics(tmp_path: Path) -> None:
    path = _panel(tmp_path)
    dates = {"val_start": "2000-11-01", "test_start": "2001-01-02"}
    full = _module(path, **dates)
    late = _module(path, train_start="2000-06-01", **dates)
    assert not torch.equal(full.feature_mean, late.feature_mean)
    k = late.ticker_names.index("A")
    b = late.borders["A"]
    rows = torch.nonzero(late._rows["ticker"] == k)[:, 0][b["first"] : b["train_end"]]
    assert pd.Timestamp(late._rows["time"][rows[0]].item()) >= pd.Timestamp("2000-06-01")
    x = late._rows["x"][rows].double()
    torch.testing.assert_close(x.mean(0), torch.zeros(len(ALL_FEATURES), dtype=torch.float64), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"train_start": "2000-03-01"}, "need the date split"),
        (
            {"val_start": "2000-11-01", "test_start": "2001-01-02", "train_start": "2000-12-01"},
            "before splits.val_start",
        ),
        ({"val_start": "2000-11-01", "test_start": "2001-01-02", "test_end": "2000-12-01"}, "must not come before"),
        ({"embargo": -1}, "embargo"),
    ],
)
def test_bad_date_ranges_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        KLineDataModule("x.csv", splits=Splits(**kwargs))


def test_an_embargo_longer_than_the_validation_split_is_refused_naming_it(tmp_path: Path) -> None:
    dates = {"val_start": "2000-11-01", "test_start": "2000-11-20"}  # 13 validation bars
    with pytest.raises(ValueError, match=r"validation split has 13 usable bars.*horizon \+ embargo = 5 \+ 10 = 15"):
        _module(_panel(tmp_path), embargo=10, **dates)
