"""Reading bars: every supported layout gives the same canonical frame."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.io import detect_columns, parse_numbers, parse_timestamps, read_bars

FIXTURES = Path(__file__).parent / "fixtures"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
OHLCV = ["timestamp", "open", "high", "low", "close", "volume"]


@pytest.fixture(scope="module")
def expected() -> pd.DataFrame:
    """The six hand-written bars every layout fixture encodes."""
    return pd.DataFrame(
        {
            "timestamp": pd.to_datetime(
                ["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-08", "2024-01-09"]
            ).astype("datetime64[ns]"),
            "open": [10.0, 10.5, 10.2, 10.8, 11.0, 10.9],
            "high": [10.6, 10.7, 10.9, 11.2, 11.3, 11.1],
            "low": [9.9, 10.1, 10.0, 10.6, 10.8, 10.5],
            "close": [10.5, 10.2, 10.8, 11.0, 10.9, 10.6],
            "volume": [1000.0, 1500.0, 1200.0, 1800.0, 900.0, 1100.0],
        }
    )


LAYOUTS = [
    "english.csv",
    "english_shuffled_case.csv",
    "yahoo.csv",
    "nasdaq_us_dates_newest_first.csv",
    "akshare_daily.csv",
    "akshare_time.csv",
    "tushare_newest_first.csv",
    "unnamed_index.csv",
    "epoch_seconds.csv",
    "epoch_milliseconds.csv",
    "metatrader_tab.csv",
    "binance_headerless.csv",
]


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_layout_parses_to_the_same_canonical_frame(name: str, expected: pd.DataFrame) -> None:
    frame = read_bars(FIXTURES / name)
    assert list(frame.columns[:7]) == ["ticker", *OHLCV]
    assert frame["timestamp"].dtype == np.dtype("datetime64[ns]")
    assert all(frame[c].dtype == np.float64 for c in OHLCV[1:])
    pd.testing.assert_frame_equal(frame[OHLCV], expected)
    assert frame["ticker"].nunique() == 1


def test_optional_columns_and_tickers() -> None:
    yahoo = read_bars(FIXTURES / "yahoo.csv")
    assert yahoo["adj_close"].round(4).tolist() == [round(c * 0.9, 4) for c in yahoo["close"]]
    assert yahoo["ticker"].iloc[0] == "yahoo"  # file stem
    akshare = read_bars(FIXTURES / "akshare_daily.csv")
    assert akshare["amount"].iloc[0] == 10400.0
    assert akshare["ticker"].iloc[0] == "600977"  # 股票代码 column
    assert "振幅" not in akshare.columns and "amount" in akshare.columns
    tushare = read_bars(FIXTURES / "tushare_newest_first.csv")
    assert tushare["ticker"].iloc[0] == "600977.SH"
    assert tushare["amount"].iloc[0] == 10400.0  # oldest bar first after sorting
    binance = read_bars(FIXTURES / "epoch_milliseconds.csv")
    assert binance["amount"].iloc[-1] == 11770.0  # quote_volume
    assert read_bars(FIXTURES / "binance_headerless.csv")["amount"].iloc[-1] == 11770.0


def test_headerless_line_numbers(tmp_path: Path) -> None:
    lines = (FIXTURES / "binance_headerless.csv").read_text().splitlines()
    lines[2] = lines[2].replace(",10.9,", ",10.1,", 1)  # third bar: high 10.1 below its close 10.8
    (tmp_path / "b.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 3, column 'high': high 10.1 < max\(open, close\) 10.8"):
        read_bars(tmp_path / "b.csv")


def test_parquet_with_datetime_index_and_gbk_csv(tmp_path: Path, expected: pd.DataFrame) -> None:
    expected.set_index("timestamp").to_parquet(tmp_path / "bars.parquet")
    pd.testing.assert_frame_equal(read_bars(tmp_path / "bars.parquet")[OHLCV], expected)
    text = (FIXTURES / "akshare_daily.csv").read_text(encoding="utf-8")
    (tmp_path / "gbk.csv").write_bytes(text.encode("gbk"))
    pd.testing.assert_frame_equal(read_bars(tmp_path / "gbk.csv")[OHLCV], expected)


def test_folder_one_file_per_ticker(tmp_path: Path, expected: pd.DataFrame) -> None:
    folder = tmp_path / "bars"
    folder.mkdir()
    for name in ("english.csv", "epoch_seconds.csv"):
        (folder / name).write_text((FIXTURES / name).read_text())
    (folder / "notes.md").write_text("ignored")
    frame = read_bars(folder)
    assert frame["ticker"].unique().tolist() == ["english", "epoch_seconds"]
    for _, part in frame.groupby("ticker"):
        pd.testing.assert_frame_equal(part[OHLCV].reset_index(drop=True), expected)


def test_long_table_with_ticker_column(expected: pd.DataFrame) -> None:
    frame = read_bars(FIXTURES / "long_two_tickers.csv")
    assert frame["ticker"].unique().tolist() == ["AAA", "BBB"]
    bbb = frame[frame["ticker"] == "BBB"].reset_index(drop=True)
    np.testing.assert_allclose(bbb["close"], expected["close"] * 2.0)
    # An explicit ticker_column works the same way.
    again = read_bars(FIXTURES / "long_two_tickers.csv", ticker_column="symbol")
    pd.testing.assert_frame_equal(frame, again)


def test_explicit_mapping_overrides_detection(tmp_path: Path, expected: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match=r"semicolon_custom_names.csv: column\(s\) \['open', 'high', 'low', 'close'\]"):
        read_bars(FIXTURES / "semicolon_custom_names.csv")
    columns = {"timestamp": "day", "open": "o_px", "high": "h_px", "low": "l_px", "close": "c_px", "volume": "qty"}
    frame = read_bars(FIXTURES / "semicolon_custom_names.csv", columns=columns)
    pd.testing.assert_frame_equal(frame[OHLCV], expected)
    # Both "Close" and "Last" exist: detection takes Close, the mapping takes Last.
    df = pd.read_csv(FIXTURES / "english.csv")
    df["Last"] = df["Close"] + 0.05
    df.to_csv(tmp_path / "two.csv", index=False)
    assert read_bars(tmp_path / "two.csv")["close"].tolist() == expected["close"].tolist()
    np.testing.assert_allclose(
        read_bars(tmp_path / "two.csv", columns={"close": "Last"})["close"], expected["close"] + 0.05
    )


def test_mapping_errors_name_the_problem() -> None:
    df = pd.DataFrame({"Date": ["2024-01-02"], "Open": [1.0], "High": [1.0], "Low": [1.0], "Close": [1.0]})
    with pytest.raises(ValueError, match=r"x.csv: columns\['close'\] = 'Adj' not found; columns are"):
        detect_columns(df, {"close": "Adj"}, source="x.csv")
    with pytest.raises(ValueError, match=r"columns mapping key 'Close' is not a canonical name"):
        detect_columns(df, {"Close": "Close"}, source="x.csv")
    with pytest.raises(ValueError, match=r"no date/time column found"):
        detect_columns(pd.DataFrame({"a": [1.0], "open": [1.0]}), source="x.csv")
    with pytest.raises(FileNotFoundError, match="nowhere.csv"):
        read_bars("nowhere.csv")


def test_missing_volume_is_zero_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pd.read_csv(FIXTURES / "english.csv").drop(columns="Volume").to_csv(tmp_path / "fx.csv", index=False)
    frame = read_bars(tmp_path / "fx.csv")
    assert (frame["volume"] == 0).all()
    assert "no volume column" in caplog.text


def test_timestamp_parsing_rules() -> None:
    s = parse_timestamps(pd.Series(["3/4/2024", "12/31/2024", "garbage"]))
    assert s.tolist()[:2] == [pd.Timestamp("2024-03-04"), pd.Timestamp("2024-12-31")]  # US month first
    assert pd.isna(s.iloc[2])
    assert parse_timestamps(pd.Series([20240102, 20240103])).iloc[1] == pd.Timestamp("2024-01-03")
    seconds = parse_timestamps(pd.Series([1704153600, 1704240000]))
    millis = parse_timestamps(pd.Series([1704153600000, 1704240000000]))
    assert seconds.equals(millis) and seconds.iloc[0] == pd.Timestamp("2024-01-02")
    aware = parse_timestamps(pd.Series(["2024-01-02T09:30:00+08:00"]))
    assert aware.iloc[0] == pd.Timestamp("2024-01-02 09:30")  # local wall time kept
    dst = parse_timestamps(pd.Series(["2024-03-08T09:30:00-05:00", "2024-03-11T09:30:00-04:00"]))  # mixed offsets
    assert dst.dt.hour.tolist() == [9, 9] and dst.dt.minute.tolist() == [30, 30]
    numbers, bad = parse_numbers(pd.Series(["$1,234.5", "--", "", "abc", "7"]))
    assert numbers.iloc[0] == 1234.5 and numbers.iloc[4] == 7.0
    assert bad.tolist() == [False, False, False, True, False]


@pytest.mark.skipif(not (SHARED / "kline_a_share").exists(), reason="shared A-share bars not present")
def test_a_share_five_minute_bars() -> None:
    frame = read_bars(SHARED / "kline_a_share" / "XSHG_5min_600977.csv")
    assert len(frame) == 2500 and frame["timestamp"].is_monotonic_increasing
    assert {"amount"} <= set(frame.columns)
    step = frame["timestamp"].diff().median()
    assert step == pd.Timedelta(minutes=5)
    times = frame["timestamp"].dt.time
    assert times.min() >= pd.Timestamp("09:30").time() and times.max() <= pd.Timestamp("15:00").time()
    assert (frame["high"] >= frame[["open", "close"]].max(axis=1)).all()


def test_ticker_codes_keep_leading_zeros(tmp_path: Path) -> None:
    df = pd.read_csv(FIXTURES / "english.csv")
    long = pd.concat([df.assign(ts_code="000001.SZ"), df.assign(ts_code="600000.SH")])
    long.to_csv(tmp_path / "a.csv", index=False)
    assert read_bars(tmp_path / "a.csv")["ticker"].unique().tolist() == ["000001.SZ", "600000.SH"]
    long.assign(ts_code=long["ts_code"].str[:6]).rename(columns={"ts_code": "sec"}).to_csv(
        tmp_path / "b.csv", index=False
    )
    assert read_bars(tmp_path / "b.csv", ticker_column="sec")["ticker"].unique().tolist() == ["000001", "600000"]
