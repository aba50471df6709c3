"""Validation: every bad case names file, line and column, or is repaired and counted per policy."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.reader.io import read_bars
from lightning_tf.kline.reader.validation import validate_bars

FIXTURES = Path(__file__).parents[1] / "fixtures"
CLOSES = [10.5, 10.2, 10.8, 11.0, 10.9, 10.6]

# (fixture, line, column, message fragment, count key) - lines count the header as line 1.
BAD_CASES = [
    ("bad_date.csv", 4, "timestamp", "cannot parse '2024-13-45' as a date", "1 unparsable dates"),
    ("bad_duplicate.csv", 5, "timestamp", "duplicate timestamp 2024-01-04", "1 duplicate timestamps"),
    ("bad_non_numeric.csv", 6, "close", "'abc' is not a number", "1 non-numeric values"),
    ("bad_high.csv", 4, "high", "high 10.1 < max(open, close) 10.8", "1 high below max(open, close)"),
    ("bad_low.csv", 7, "low", "low 11 > min(open, close) 10.6", "1 low above min(open, close)"),
    ("bad_negative_volume.csv", 3, "volume", "negative volume -5", "1 negative volumes"),
    ("bad_missing.csv", 6, "open", "missing value", "1 missing values"),
    ("bad_zero_price.csv", 5, "open", "price 0 is not positive", "1 non-positive prices"),
    ("bad_inf.csv", 5, "close", "inf is not finite", "1 non-finite values"),
]


@pytest.mark.parametrize(("name", "line", "column", "detail", "count"), BAD_CASES)
def test_error_policy_names_file_line_and_column(name: str, line: int, column: str, detail: str, count: str) -> None:
    with pytest.raises(ValueError) as info:
        read_bars(FIXTURES / name)
    message = str(info.value)
    assert f"{name}: {count}" in message
    assert f"line {line}, column {column!r}: {detail}" in message


@pytest.mark.parametrize(("name", "line", "column", "detail", "count"), BAD_CASES)
def test_drop_policy_removes_the_row_and_logs_the_count(
    name: str, line: int, column: str, detail: str, count: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        frame = read_bars(FIXTURES / name, on_error="drop")
    assert len(frame) == 5  # one of six bars dropped
    assert f"{count}; dropped the rows" in caplog.text
    assert frame["timestamp"].is_monotonic_increasing and frame["timestamp"].is_unique
    assert (frame["high"] >= frame[["open", "close"]].max(axis=1)).all()
    assert (frame["low"] <= frame[["open", "close"]].min(axis=1)).all()
    assert frame["close"].tolist() == CLOSES[: line - 2] + CLOSES[line - 1 :]  # exactly the bad line is gone


def test_ffill_policy_repairs_cells(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        frame = read_bars(FIXTURES / "bad_non_numeric.csv", on_error="ffill")
    assert len(frame) == 6
    # line 6 is the 5th bar: its close 'abc' takes the 4th bar's close 11.0
    assert frame["close"].tolist() == [10.5, 10.2, 10.8, 11.0, 11.0, 10.6]
    assert "1 non-numeric values; forward-filled" in caplog.text
    # A missing open is filled from the previous bar; a negative volume likewise.
    assert read_bars(FIXTURES / "bad_missing.csv", on_error="ffill")["open"].iloc[4] == 10.8
    assert read_bars(FIXTURES / "bad_negative_volume.csv", on_error="ffill")["volume"].iloc[1] == 1000.0
    # An infinite close likewise (line 5 is the 4th bar: it takes the 3rd bar's close).
    assert read_bars(FIXTURES / "bad_inf.csv", on_error="ffill")["close"].iloc[3] == 10.8
    # An inconsistent high is widened to cover open and close.
    high = read_bars(FIXTURES / "bad_high.csv", on_error="ffill")
    assert high["high"].iloc[2] == 10.8
    # Rows that cannot be filled (bad dates, duplicates) are dropped.
    assert len(read_bars(FIXTURES / "bad_date.csv", on_error="ffill")) == 5
    assert len(read_bars(FIXTURES / "bad_duplicate.csv", on_error="ffill")) == 5


def test_leading_row_without_predecessor_is_dropped_under_ffill() -> None:
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(["2024-01-02", "2024-01-03", "2024-01-04"]),
            "open": [np.nan, 2.0, 3.0],
            "high": [1.0, 2.0, 3.0],
            "low": [1.0, 2.0, 3.0],
            "close": [1.0, 2.0, 3.0],
            "volume": [1.0, 1.0, 1.0],
        }
    )
    out = validate_bars(frame, on_error="ffill")
    assert out["open"].tolist() == [2.0, 3.0]


def test_all_problems_reported_together() -> None:
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(["2024-01-02", "2024-01-03", "2024-01-03"]),
            "open": [1.0, 2.0, 3.0],
            "high": [0.5, 2.0, 3.0],
            "low": [1.0, 2.0, 3.0],
            "close": [1.0, 2.0, 3.0],
            "volume": [1.0, -1.0, 1.0],
        }
    )
    with pytest.raises(ValueError) as info:
        validate_bars(frame, source="panel.parquet")
    message = str(info.value)
    assert message.startswith(
        "panel.parquet: 1 negative volumes, 1 duplicate timestamps, 1 high below max(open, close)"
    )
    assert (
        "row 1, column 'high'" in message
        and "row 2, column 'volume'" in message
        and "row 3, column 'timestamp'" in message
    )


def test_newest_first_rows_are_sorted_and_line_numbers_stay_file_lines(tmp_path: Path) -> None:
    lines = (FIXTURES / "bad_high.csv").read_text().splitlines()
    (tmp_path / "rev.csv").write_text("\n".join([lines[0], *lines[:0:-1]]) + "\n")  # newest first
    with pytest.raises(ValueError, match=r"rev.csv: 1 high below max\(open, close\)\n  line 5, column 'high'"):
        read_bars(tmp_path / "rev.csv")
    assert read_bars(tmp_path / "rev.csv", on_error="drop")["timestamp"].is_monotonic_increasing


def test_gaps_raise_only_beyond_max_gap(caplog: pytest.LogCaptureFixture) -> None:
    assert len(read_bars(FIXTURES / "bad_gap.csv")) == 6  # no max_gap: only logged
    with pytest.raises(
        ValueError,
        match=r"bad_gap.csv: 1 gaps longer than max_gap=10 days.*\n  line 6, column 'timestamp': gap of 31 days",
    ):
        read_bars(FIXTURES / "bad_gap.csv", max_gap="10D")
    with caplog.at_level(logging.WARNING):
        assert len(read_bars(FIXTURES / "bad_gap.csv", max_gap="10D", on_error="drop")) == 6
    assert "1 gaps longer than max_gap" in caplog.text
    assert len(read_bars(FIXTURES / "english.csv", max_gap="4D")) == 6  # a weekend is not a gap here


def test_bad_policy_name() -> None:
    with pytest.raises(ValueError, match=r"on_error must be one of \('error', 'drop', 'ffill'\), got 'skip'"):
        read_bars(FIXTURES / "english.csv", on_error="skip")  # type: ignore[arg-type]


def test_clean_file_is_unchanged() -> None:
    assert read_bars(FIXTURES / "english.csv", on_error="drop")["close"].tolist() == CLOSES


def test_non_finite_values_in_any_column(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = (FIXTURES / "english.csv").read_text().splitlines()
    lines[2] = lines[2].replace(",1500", ",-inf")  # volume
    lines[5] = "2024-01-08,11.0,1e999,10.8,10.9,900"  # a high that overflows to inf
    (tmp_path / "inf.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as info:
        read_bars(tmp_path / "inf.csv")
    message = str(info.value)
    assert "inf.csv: 2 non-finite values" in message
    assert "line 3, column 'volume': -inf is not finite" in message
    assert "line 6, column 'high': inf is not finite" in message
    with caplog.at_level(logging.WARNING):
        assert read_bars(tmp_path / "inf.csv", on_error="drop")["close"].tolist() == [10.5, 10.8, 11.0, 10.6]
    assert "2 non-finite values; dropped the rows" in caplog.text
    # A NaN where a value is required is a missing value, named the same way.
    (tmp_path / "nan.csv").write_text((FIXTURES / "english.csv").read_text().replace(",10.2,", ",NaN,", 1))
    with pytest.raises(ValueError, match=r"nan.csv: 1 missing values\n  line 3, column 'close': missing value"):
        read_bars(tmp_path / "nan.csv")
    # In a text column (a '--' keeps it text) the cell is quoted as written; Parquet rows likewise.
    lines[4] = lines[4].replace(",1800", ",--")
    (tmp_path / "text.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 3, column 'volume': '-inf' is not finite"):
        read_bars(tmp_path / "text.csv")
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(["2024-01-02", "2024-01-03"]),
            "open": [1.0, 2.0],
            "high": [1.0, 2.0],
            "low": [1.0, 2.0],
            "close": [1.0, 2.0],
            "volume": [1.0, np.inf],
        }
    )
    with pytest.raises(
        ValueError, match=r"panel.parquet: 1 non-finite values\n  row 2, column 'volume': inf is not finite"
    ):
        validate_bars(frame, source="panel.parquet")
