"""Timestamps read from their digits: the fast reading of ``YYYY-MM-DD[ hh:mm[:ss]]`` columns gives what
pandas' ISO 8601 parser gives, or steps aside."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.reader.parsing import iso_stamps, parse_timestamps_described


def _pandas(cells: list[str]) -> pd.Series:
    """The reading the fast path must equal: pandas' ISO 8601 parser, in nanoseconds."""
    return pd.to_datetime(pd.Series(cells), format="ISO8601", errors="coerce").astype("datetime64[ns]")


@pytest.mark.parametrize("layout", ["%Y-%m-%d", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"])
def test_iso_stamps_equal_pandas(layout: str) -> None:
    rng = np.random.default_rng(0)
    seconds = rng.integers(pd.Timestamp("1678-01-02").value // 10**9, pd.Timestamp("2261-12-30").value // 10**9, 3000)
    cells = pd.to_datetime(seconds, unit="s").strftime(layout).tolist()
    fast = iso_stamps(pd.Series(cells, dtype="str"))
    np.testing.assert_array_equal(fast, _pandas(cells).to_numpy())
    stamps, how = parse_timestamps_described(pd.Series(cells, dtype=object))  # object columns too
    assert how == "ISO 8601 strings (local clock as written)"
    np.testing.assert_array_equal(stamps.to_numpy(), fast)


@pytest.mark.parametrize(
    "odd",
    [
        "2024-02-30",
        "2023-02-29",
        "2024-13-01",
        "2024-00-10",
        "2024-01-00",
        "2024/01/02",
        "2024-01-02 24:00",
        "2024-01-02 10:60",
        "1500-01-01",
        "2262-05-01",
        "2024-1-02 ",
        " 2024-01-02",
        "2024-01-02X09:30",
        "abcd-ef-gh",
        "2024-01-02 09:30:00+08:00",
    ],
)
def test_iso_stamps_step_aside_for_anything_else(odd: str) -> None:
    good = ["2024-01-02", "2024-01-03"] if len(odd.strip()) <= 10 else ["2024-01-02 09:30", "2024-01-02 09:35"]
    assert iso_stamps(pd.Series([*good, odd], dtype="str")) is None
    if odd in ("2024-02-30", "2024-13-01", "2023-02-29"):  # read as before: the bad stamp is NaT, not a shifted date
        stamps = parse_timestamps_described(pd.Series([*good, odd], dtype="str"))[0]
        assert stamps.iloc[-1] is pd.NaT and stamps.iloc[0] == pd.Timestamp(good[0])


def test_iso_stamps_leave_other_columns_alone() -> None:
    assert iso_stamps(pd.Series([], dtype="str")) is None
    assert iso_stamps(pd.Series(["2024-01-02", None], dtype=object)) is None
    assert iso_stamps(pd.Series([20240102, 20240103])) is None
    assert iso_stamps(pd.Series(["2024-01-02", "2024-01-02 09:30"], dtype="str")) is None  # two layouts
    leap = iso_stamps(pd.Series(["2024-02-29", "2000-02-29"], dtype="str"))
    assert list(leap) == [np.datetime64("2024-02-29", "ns"), np.datetime64("2000-02-29", "ns")]
