"""Windows, borders and the calendar after the last bar: what both DataModules share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import RandomSampler

from lightning_tf.kline.windows import (
    WindowDataset,
    chronological_borders,
    in_order,
    next_timestamps,
    next_timestamps_of,
    resolve_path,
    split_ends,
    window_loader,
)
from lightning_tf.training import ShuffledBatchSampler


def test_windows_index_their_context_and_targets() -> None:
    x = torch.arange(20, dtype=torch.float32)[:, None]  # (N, C=1): row r holds r
    ds = WindowDataset(
        x,
        ends=torch.tensor([4, 9]),
        context_len=3,
        horizon=2,
        y=x * 10,
        raw_target=x,
        anchor=x[:, 0].double(),
        ticker=torch.zeros(20, dtype=torch.long),
        time=torch.arange(20),
    )
    batch = ds.__getitems__([0, 1])
    assert batch["x"][..., 0].tolist() == [[2, 3, 4], [7, 8, 9]]
    assert batch["y"][..., 0].tolist() == [[50, 60], [100, 110]]
    assert batch["anchor"].tolist() == [4, 9] and batch["time"].tolist() == [4, 9]
    assert all(torch.equal(ds[1][k], v[1]) for k, v in batch.items())
    assert ds.target_rows().tolist() == [[5, 6], [10, 11]] and ds.context_rows().tolist() == [[2, 3, 4], [7, 8, 9]]


def test_split_ends_give_each_window_to_the_split_of_its_targets() -> None:
    ends = split_ends(train_end=50, val_end=70, n=100, first=2, context_len=8, horizon=3)
    assert (ends["train"][0], ends["train"][-1]) == (9, 46)  # first full context; last targets 47..49
    assert (ends["val"][0], ends["val"][-1]) == (49, 66)  # context from the training rows
    assert (ends["test"][0], ends["test"][-1]) == (69, 96)
    assert chronological_borders(1000, 0.7, 0.1) == (700, 800)


def test_training_order_is_random_samplers_under_the_epochs_seed() -> None:
    """The training windows come in RandomSampler's order under a generator seeded from (seed, epoch), as
    before the loaders resumed inside an epoch: trained models are bitwise what they were."""
    n = 5000
    sampler = ShuffledBatchSampler(n, batch_size=64, seed=5)
    sampler.set_epoch(2)
    seed = int(np.random.SeedSequence([5, 2]).generate_state(1)[0])
    reference = RandomSampler(range(n), generator=torch.Generator().manual_seed(seed))
    assert [i for batch in sampler for i in batch] == list(reference)


def test_training_order_depends_on_seed_and_epoch_only() -> None:
    x = torch.zeros(40, 1)
    ds = WindowDataset(
        x, torch.arange(3, 37), 4, 2, x, x, x[:, 0].double(), torch.zeros(40, dtype=torch.long), torch.arange(40)
    )
    orders = []
    for seed, epoch in ((3, 1), (3, 1), (3, 2), (4, 1)):
        loader = window_loader({"train": ds}, "train", batch_size=8, num_workers=0, seed=seed, source="f", horizon=2)
        loader.sampler.set_epoch(epoch)
        orders.append(torch.cat([b["time"] for b in loader]).tolist())
    assert orders[0] == orders[1] != list(range(3, 37)) and sorted(orders[0]) == list(range(3, 37))
    assert orders[2] != orders[0] and orders[3] != orders[0]
    x = torch.zeros(40, 1)
    ds = WindowDataset(
        x, torch.arange(3, 37), 4, 2, x, x, x[:, 0].double(), torch.zeros(40, dtype=torch.long), torch.arange(40)
    )
    loader = window_loader(
        {"train": ds, "test": ds}, "test", batch_size=8, num_workers=0, seed=0, source="f", horizon=2
    )
    assert torch.cat([b["time"] for b in loader]).tolist() == list(range(3, 37))  # evaluation: in order


def test_in_order_reads_date_batched_training_windows_in_big_batches() -> None:
    """The closed-form fits read the training windows in order through ``in_order``; a date-batched loader has
    no batch size, and one window a batch made those fits 100 s of a universe fold's 146 s."""
    x = torch.arange(60, dtype=torch.float32)[:, None]
    ds = WindowDataset(
        x, torch.arange(3, 57), 4, 2, x, x, x[:, 0].double(), torch.zeros(60, dtype=torch.long), torch.arange(60) // 3
    )
    loader = window_loader(
        {"train": ds}, "train", batch_size=8, num_workers=0, seed=0, source="f", horizon=2, by_date=True
    )
    assert {len(b["time"]) for b in loader} <= {1, 2, 3}  # training: a date's windows a batch
    batches = list(in_order(loader, default_batch=20))
    assert [len(b["time"]) for b in batches] == [20, 20, 14]
    assert torch.cat([b["x"][:, -1, 0] for b in batches]).tolist() == list(range(3, 57))


def test_resolve_path_finds_repository_files_from_anywhere(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_path("data/msft.csv").is_file()
    assert resolve_path("nothing/here.csv") == Path("nothing/here.csv")


def test_intraday_forecast_timestamps_follow_the_trading_session() -> None:
    """5-minute bars of an exchange with a lunch break (09:35-11:30, 13:05-15:00, Monday-Friday):
    the forecast continues after the break and on the next business day's open, not at 11:35."""

    def day(d):
        return [
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


def test_next_business_days_of_daily_bars_are_pandas_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The numpy path of daily bars gives what the pandas path gives (values and unit), on bars with gaps, a
    time of day and any unit; other series (weekend bars) are left to the pandas path."""
    import lightning_tf.kline.windows as module

    rng = np.random.default_rng(0)
    cases = []
    for i in range(60):
        start = pd.Timestamp("1995-01-02") + pd.Timedelta(days=int(rng.integers(0, 9000)))
        ts = pd.bdate_range(start, periods=int(rng.integers(12, 120))) + pd.Timedelta(hours=16 * (i % 2))
        ts = ts.delete(rng.integers(1, len(ts) - 1, size=i % 3))
        cases.append(pd.DatetimeIndex(ts).as_unit(("s", "ms", "us", "ns")[i % 4]))
    fast = [module._next_business_days(ts, 7) for ts in cases]
    assert all(f is not None for f in fast)
    assert module._next_business_days(pd.date_range("2024-01-01", periods=30, freq="D"), 3) is None
    monkeypatch.setattr(module, "_next_business_days", lambda ts, n: None)
    for ts, got in zip(cases, fast, strict=True):
        want = next_timestamps(ts, 7)
        assert got.equals(want) and got.dtype == want.dtype, (ts, got, want)


@pytest.mark.parametrize("calendar", [None, "XNYS"])
def test_next_timestamps_of_many_series_are_each_series_own(calendar: str | None) -> None:
    """Series read together (a server's batch: those of one length and unit at once) get the timestamps each gets
    alone, values and unit: daily bars with gaps and a time of day in every unit, as an index, a column or an
    array; weekend, intraday, one-bar and time-zone series among them."""
    if calendar is not None:
        pytest.importorskip("exchange_calendars")
    rng = np.random.default_rng(1)
    series: list = []
    for i in range(40):
        start = pd.Timestamp("1998-01-05") + pd.Timedelta(days=int(rng.integers(0, 7000)))
        ts = pd.bdate_range(start, periods=(30, 31)[i % 2]) + pd.Timedelta(hours=16 * (i % 3 == 0))
        ts = pd.DatetimeIndex(ts.delete(rng.integers(1, len(ts) - 1, size=i % 3))).as_unit(
            ("s", "ms", "us", "ns")[i % 4]
        )
        series.append((ts, pd.Series(ts), ts.to_numpy())[i % 3])
    series += [
        pd.date_range("2024-01-01", periods=30, freq="D"),  # weekend bars
        pd.date_range("2024-08-30 09:30", periods=30, freq="5min"),  # intraday
        pd.bdate_range("2024-01-02", periods=30, tz="America/New_York"),  # a time zone
    ]
    if calendar is not None:
        series.append(pd.DatetimeIndex(["2024-03-01"]))  # one bar: the calendar dates what follows
    together = next_timestamps_of(series, 6, calendar)
    for t, got in zip(series, together, strict=True):
        want = next_timestamps(pd.DatetimeIndex(t), 6, calendar=calendar)
        assert got.equals(want) and got.dtype == want.dtype, (t, got, want)


def test_one_bar_without_a_calendar_is_refused_in_one_line() -> None:
    """A single bar has no spacing: its next timestamps would be NaT (and a forecast stamped with them garbage)."""
    one = pd.DatetimeIndex(["2024-03-01"])
    with pytest.raises(ValueError, match=r"^one bar \(2024-03-01 00:00:00\) has no spacing to continue its timestamps"):
        next_timestamps(one, 3)
    with pytest.raises(ValueError, match="^one bar"):
        next_timestamps_of([pd.bdate_range("2024-01-02", periods=5), one], 3)


def test_a_friday_and_a_monday_are_daily_bars() -> None:
    """Two daily bars across a weekend step one business day: the next bars are the following business days, not
    three calendar days apart (a Thursday, a Sunday, ...)."""
    two = pd.DatetimeIndex(["2024-03-01 16:00", "2024-03-04 16:00"])  # Friday, Monday
    expected = pd.DatetimeIndex(["2024-03-05 16:00", "2024-03-06 16:00", "2024-03-07 16:00"])
    assert list(next_timestamps(two, 3)) == list(expected)
    assert list(next_timestamps_of([two, two.as_unit("s")], 3)[1]) == list(expected)
    weekly = pd.DatetimeIndex(["2024-03-01", "2024-03-08", "2024-03-15"])  # five business days apart: weekly
    assert list(next_timestamps(weekly, 2)) == list(pd.DatetimeIndex(["2024-03-22", "2024-03-29"]))
