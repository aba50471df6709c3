"""Reading bars: every supported layout gives the same canonical frame."""

from __future__ import annotations

import bz2
import gzip
import io
import logging
import lzma
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.reader.formats import tongdaxin_title
from lightning_tf.kline.reader.io import detect_columns, parse_numbers, parse_timestamps, read_bars
from lightning_tf.kline.reader.parsing import time_of_day

FIXTURES = Path(__file__).parents[1] / "fixtures"
SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"
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
    "metatrader_headerless.csv",
    "barchart.csv",
    "excel_semicolon_decimal_comma.csv",
    "english_gzip.csv.gz",
    "tongdaxin_daily.txt",
]

# Every layout fixture as the canonical frame it must give: extra columns beyond OHLCV, rows, first
# and last timestamp, (row, close) and the first ticker. The 5-minute fixtures hold one A-share
# session (bars labelled 09:35 .. 11:30 and 13:05 .. 15:00).
SIX = (6, "2024-01-02", "2024-01-09", (3, 11.0))  # the six daily bars: rows, first, last, (row, close)
CANONICAL = {
    "english.csv": ((), *SIX, "english"),
    "english_shuffled_case.csv": ((), *SIX, "english_shuffled_case"),
    "yahoo.csv": (("adj_close",), *SIX, "yahoo"),
    "nasdaq_us_dates_newest_first.csv": ((), *SIX, "nasdaq_us_dates_newest_first"),
    "barchart.csv": ((), *SIX, "barchart"),
    "akshare_daily.csv": (("amount",), *SIX, "600977"),
    "akshare_time.csv": (("amount",), *SIX, "akshare_time"),
    "tushare_newest_first.csv": (("amount",), *SIX, "600977.SH"),
    "unnamed_index.csv": ((), *SIX, "unnamed_index"),
    "epoch_seconds.csv": ((), *SIX, "epoch_seconds"),
    "epoch_milliseconds.csv": (("amount",), *SIX, "epoch_milliseconds"),
    "binance_headerless.csv": (("amount",), *SIX, "binance_headerless"),
    "metatrader_tab.csv": ((), *SIX, "metatrader_tab"),
    "metatrader_headerless.csv": ((), *SIX, "metatrader_headerless"),
    "excel_semicolon_decimal_comma.csv": ((), *SIX, "excel_semicolon_decimal_comma"),
    "english_gzip.csv.gz": ((), *SIX, "english_gzip"),
    "tongdaxin_daily.txt": (("amount",), *SIX, "003040"),
    "tongdaxin_5min.txt": (("amount",), 48, "2024-01-02 09:35", "2024-01-02 15:00", (24, 18.61), "003040"),
    "qmt_5min.csv": (("amount",), 48, "2024-01-02 09:35", "2024-01-02 15:00", (24, 18.61), "qmt_5min"),
    "long_two_tickers.csv": ((), 12, "2024-01-02", "2024-01-09", (9, 22.0), "AAA"),
    "semicolon_custom_names.csv": ((), *SIX, "semicolon_custom_names"),
}
# Fixtures that need an option to be read.
CUSTOM = {"timestamp": "day", "open": "o_px", "high": "h_px", "low": "l_px", "close": "c_px", "volume": "qty"}
OPTIONS = {"semicolon_custom_names.csv": {"columns": CUSTOM}}


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_layout_parses_to_the_same_canonical_frame(name: str, expected: pd.DataFrame) -> None:
    frame = read_bars(FIXTURES / name)
    assert list(frame.columns[:7]) == ["ticker", *OHLCV]
    assert frame["timestamp"].dtype == np.dtype("datetime64[ns]")
    assert all(frame[c].dtype == np.float64 for c in OHLCV[1:])
    pd.testing.assert_frame_equal(frame[OHLCV], expected)
    assert frame["ticker"].nunique() == 1


def test_every_fixture_is_in_the_canonical_table() -> None:
    files = {p.name for p in FIXTURES.iterdir() if not p.name.startswith("bad_") and p.suffix != ".md"}
    assert files == set(CANONICAL)


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_canonical_frame_of_every_layout(name: str) -> None:
    extra, rows, first, last, (row, close), ticker = CANONICAL[name]
    frame = read_bars(FIXTURES / name, **OPTIONS.get(name, {}))
    assert list(frame.columns) == ["ticker", *OHLCV, *extra]
    assert frame["timestamp"].dtype == np.dtype("datetime64[ns]")
    assert all(frame[c].dtype == np.float64 for c in [*OHLCV[1:], *extra])
    assert len(frame) == rows
    assert frame["timestamp"].iloc[0] == pd.Timestamp(first) and frame["timestamp"].iloc[-1] == pd.Timestamp(last)
    assert frame["close"].iloc[row] == close
    assert frame["ticker"].iloc[0] == ticker


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
    frame = read_bars(FIXTURES / "semicolon_custom_names.csv", columns=CUSTOM)
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
    # the mapping took the column detection would give open: said, not "not found" beside 'Open'
    with pytest.raises(ValueError, match=r"\['open'\] not found \(open: 'Open' is mapped to 'close' by columns=\)"):
        detect_columns(df, {"close": "Open"}, source="x.csv")
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


def test_name_is_the_ticker_of_a_single_file_without_a_ticker_column(tmp_path: Path) -> None:
    """``name`` names one file's series (a model's trained ticker: its statistics scale the forecast), where the
    stem would otherwise; a long table keeps its own tickers."""
    (tmp_path / "export.csv").write_bytes((FIXTURES / "english.csv").read_bytes())
    assert set(read_bars(tmp_path / "export.csv", name="MSFT")["ticker"]) == {"MSFT"}
    assert set(read_bars(tmp_path / "export.csv")["ticker"]) == {"export"}
    long = pd.read_csv(FIXTURES / "english.csv").assign(Ticker="AAPL")
    long.to_csv(tmp_path / "long.csv", index=False)
    assert set(read_bars(tmp_path / "long.csv", name="MSFT")["ticker"]) == {"AAPL"}


def test_a_mistyped_date_in_an_ordered_file_is_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One date typed 2030 for 2016 in an oldest-first file (or a newest-first one): sorted as any order is, but
    said, naming the line; a file in order, or one in no order at all (a shuffled table), is read in silence."""
    from tests.helpers.kline import make_bars

    frame = make_bars(60, start="2016-01-04")
    frame["Date"] = pd.to_datetime(frame["Date"]).dt.strftime("%Y-%m-%d")
    typo = frame.copy()
    typo.loc[5, "Date"] = "2030" + str(typo.loc[5, "Date"])[4:]
    typo.to_csv(tmp_path / "typo.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="lightning_tf"):
        bars = read_bars(tmp_path / "typo.csv")
    assert bars["timestamp"].iloc[-1].year == 2030  # sorted: the user has to know
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"{tmp_path / 'typo.csv'}: 1 bar(s) out of time order, the first at line 8 (")
    assert "after 2030-" in message and message.endswith("sorted by time: check for a mistyped date")
    caplog.clear()
    typo.iloc[::-1].to_csv(tmp_path / "newest_first.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="lightning_tf"):
        read_bars(tmp_path / "newest_first.csv")
    assert len(caplog.records) == 1 and "out of time order" in caplog.records[0].getMessage()
    caplog.clear()
    frame.sample(frac=1.0, random_state=0).to_csv(tmp_path / "shuffled.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="lightning_tf"):
        read_bars(tmp_path / "shuffled.csv")
        frame.to_csv(tmp_path / "ordered.csv", index=False)
        read_bars(tmp_path / "ordered.csv")
    assert caplog.records == []


def test_unquoted_thousands_separators_are_refused_not_cut(tmp_path: Path) -> None:
    """A volume written 15,346,276 without quotes in a comma-separated file splits into three fields: pandas would
    keep the header's first fields (volume 15) with a warning; the reader refuses the file, naming the line."""
    lines = ["Date,Open,High,Low,Close,Volume"]
    lines += [f"2016-09-{6 + k:02d},56.42,57.0,56.1,56.25,15,346,{276 + k}" for k in range(3)]
    (tmp_path / "cut.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"cut.csv: line 2 has more fields than the header's 6 \(numbers with "):
        read_bars(tmp_path / "cut.csv")
    good = [f'2016-08-{10 + k},56.42,57.0,56.1,56.25,"15,346,276"' for k in range(10)]  # quoted: one field
    (tmp_path / "one.csv").write_text("\n".join([lines[0], *good, lines[2]]) + "\n")  # one unquoted line among them
    with pytest.raises(ValueError, match=r"one.csv: cannot read the table \(.*Expected 6 fields in line 12, saw 8\)"):
        read_bars(tmp_path / "one.csv")


def test_day_first_dates_are_read_day_first(tmp_path: Path) -> None:
    """DD/MM/YYYY exports (Europe, India, Australia): read day first, every row, in time order; never month first
    where the day is 12 or less (which would scramble the series), even when the first 500 rows are all such."""
    days = pd.bdate_range("2012-01-02", periods=1500)
    early = days[days.day <= 12][:520]  # the first 520 rows hold no day above 12
    stamps = early.append(days[days > early[-1]][:100])
    assert len(stamps) == 620 and (stamps[520:].day > 12).any()
    close = np.linspace(50, 80, len(stamps))
    frame = pd.DataFrame({"Date": stamps.strftime("%d/%m/%Y"), "Open": close, "High": close + 1, "Low": close - 1})
    frame.assign(Close=close, Volume=1000).to_csv(tmp_path / "eu.csv", index=False)
    bars = read_bars(tmp_path / "eu.csv")
    assert list(bars["timestamp"]) == list(stamps) and np.allclose(bars["close"], close)
    assert parse_timestamps(pd.Series(["06/09/2016 09:30", "13/09/2016 16:00"])).tolist() == [
        pd.Timestamp("2016-09-06 09:30"),
        pd.Timestamp("2016-09-13 16:00"),
    ]


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


# ---------------------------------------------------------------- numbers: decimal commas
# Bars with two to four decimals and thousands, so that every separator matters.
BIG = pd.DataFrame(
    {
        "timestamp": pd.to_datetime(
            ["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-08", "2024-01-09"]
        ).astype("datetime64[ns]"),
        "open": [1234.5, 1240.25, 1236.0, 1251.125, 1260.75, 1255.5],
        "high": [1245.75, 1248.0, 1252.5, 1262.0, 1268.25, 1261.0],
        "low": [1230.0, 1233.5, 1231.25, 1249.0, 1252.5, 1244.75],
        "close": [1240.25, 1236.0, 1251.125, 1260.75, 1255.5, 1247.0],
        "volume": [1234567.0, 987654.0, 1500000.0, 2345678.0, 876543.0, 1100000.0],
    }
)


def _number(x: float, decimal: str, thousands: str, fixed: bool) -> str:
    text = f"{x:.4f}" if fixed else repr(x).removesuffix(".0")
    whole, _, frac = text.partition(".")
    if thousands:
        whole = f"{int(whole):,}".replace(",", thousands)
    return whole + (decimal + frac if frac else "")


def _write(path: Path, sep: str, decimal: str, thousands: str, fixed: bool) -> Path:
    quote = '"' if sep in (decimal, thousands) else ""
    lines = [sep.join(["Date", "Open", "High", "Low", "Close", "Volume"])]
    for _, bar in BIG.iterrows():
        cells = [quote + _number(bar[c], decimal, thousands, fixed) + quote for c in OHLCV[1:]]
        lines.append(sep.join([f"{bar['timestamp']:%Y-%m-%d}", *cells]))
    path.write_text("\n".join(lines) + "\n")
    return path


NUMBER_FORMATS = [  # (separator, decimal, thousands, fixed four decimals)
    (",", ".", "", False),
    (";", ",", "", True),
    (";", ",", "", False),
    (";", ",", ".", False),
    (";", ",", ".", True),
    ("\t", ",", "", False),
    ("\t", ",", " ", True),
    (",", ",", ".", False),  # quoted decimal-comma cells in a ','-separated file
    (",", ".", ",", True),  # quoted "1,234.5000"
    (";", ".", ",", False),
]


@pytest.mark.parametrize(("sep", "decimal", "thousands", "fixed"), NUMBER_FORMATS)
def test_decimal_commas_and_thousands_give_the_same_frame(
    tmp_path: Path, sep: str, decimal: str, thousands: str, fixed: bool
) -> None:
    frame = read_bars(_write(tmp_path / "bars.csv", sep, decimal, thousands, fixed))
    pd.testing.assert_frame_equal(frame[OHLCV], BIG, check_exact=True)
    # The explicit options read the file the same way.
    again = read_bars(tmp_path / "bars.csv", decimal=decimal, thousands=thousands)
    pd.testing.assert_frame_equal(again[OHLCV], BIG, check_exact=True)


def test_excel_decimal_comma_export_keeps_its_magnitude() -> None:
    frame = read_bars(FIXTURES / "excel_semicolon_decimal_comma.csv")
    assert frame["open"].iloc[0] == 10.0 and frame["volume"].iloc[0] == 1000.0  # '10,0000' and '1.000'
    # Forcing the decimal point refuses the cells instead of reading '10,0000' as 100000.
    with pytest.raises(ValueError, match=r"line 2, column 'open': '10,0000' is not a number"):
        read_bars(FIXTURES / "excel_semicolon_decimal_comma.csv", decimal=".")


def _table(path: Path, sep: str, closes: list[str], volumes: list[str]) -> Path:
    lines = [sep.join(["date", "open", "high", "low", "close", "volume"])]
    for i, (c, v) in enumerate(zip(closes, volumes, strict=True)):
        lines.append(sep.join([f"2024-01-0{i + 2}", c, c, c, c, v]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ambiguous_numbers_are_refused_or_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # ',' separated, '1,234' quoted: thousands or decimal comma? Refused, naming file, separator and option.
    path = _table(tmp_path / "amb.csv", ",", ["10", "11"], ['"1,234"', '"2,345"'])
    with pytest.raises(
        ValueError,
        match=r"amb.csv: numbers such as '1,234' in this ','-separated file could use ',' as the decimal or "
        r"the thousands separator; pass decimal='.' or decimal=','",
    ):
        read_bars(path)
    assert read_bars(path, thousands=",")["volume"].tolist() == [1234.0, 2345.0]
    assert read_bars(path, decimal=",")["volume"].tolist() == [1.234, 2.345]
    # ';' separated (Excel in a decimal-comma locale): a decimal comma, with a warning saying so.
    path = _table(tmp_path / "semi.csv", ";", ["1,250", "1,262"], ["100", "200"])
    with caplog.at_level(logging.WARNING):
        assert read_bars(path)["close"].tolist() == [1.25, 1.262]
    assert "numbers such as '1,250' read with ',' as the decimal separator (';'-separated file)" in caplog.text
    # Proofs of both decimal separators, or two ambiguous ones: refused.
    path = _table(tmp_path / "both.csv", ";", ["10,5", "10.25"], ["100", "200"])
    with pytest.raises(ValueError, match=r"both.csv: numbers use both ',' and '.' as the decimal separator"):
        read_bars(path)
    path = _table(tmp_path / "two.csv", ";", ["1,250", "1.262"], ["100", "200"])
    with pytest.raises(ValueError, match=r"two.csv: numbers such as '1,250' and '1.262' could use either"):
        read_bars(path)


def test_number_options_are_checked() -> None:
    with pytest.raises(ValueError, match=r"decimal must be one of \('.', ','\) or None \(detect\), got ';'"):
        read_bars(FIXTURES / "english.csv", decimal=";")
    with pytest.raises(ValueError, match=r"thousands must be one of .* got '_'"):
        read_bars(FIXTURES / "english.csv", thousands="_")
    with pytest.raises(ValueError, match=r"decimal and thousands separators must differ, both are ','"):
        read_bars(FIXTURES / "english.csv", decimal=",", thousands=",")


def test_parse_numbers_accepts_thousands_only_in_groups_of_three() -> None:
    values = pd.Series(["1.234,5", "1.23,4", "12,5", "1 234,5", "-inf", "--"])
    numbers, bad = parse_numbers(values, decimal=",", thousands=".")
    assert numbers.tolist()[:5:2] == [1234.5, 12.5, -np.inf] and numbers.iloc[3] == 1234.5
    assert bad.tolist() == [False, True, False, False, False, False]


# ---------------------------------------------------------------- compression
def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "pack"),
    [
        ("bars.csv.gz", gzip.compress),
        ("bars.csv.bz2", bz2.compress),
        ("bars.csv.xz", lzma.compress),
        ("bars.zip", lambda data: _zip({"bars.csv": data})),
        ("bars.csv", gzip.compress),  # misleading suffixes: the content decides
        ("bars.gz", bz2.compress),
        ("bars.txt", lambda data: _zip({"inner/bars.csv": data})),
    ],
)
def test_compressed_files_read_like_their_plain_twin(tmp_path: Path, expected: pd.DataFrame, name: str, pack) -> None:
    (tmp_path / name).write_bytes(pack((FIXTURES / "yahoo.csv").read_bytes()))
    frame = read_bars(tmp_path / name)
    pd.testing.assert_frame_equal(
        frame.drop(columns="ticker"), read_bars(FIXTURES / "yahoo.csv").drop(columns="ticker")
    )
    assert frame["ticker"].iloc[0] == "bars"  # compression and table suffixes leave the stem


def test_compressed_files_in_a_folder(tmp_path: Path) -> None:
    text = (FIXTURES / "english.csv").read_bytes()
    (tmp_path / "AAA.csv.gz").write_bytes(gzip.compress(text))
    (tmp_path / "BBB.zip").write_bytes(_zip({"BBB.csv": text}))
    (tmp_path / "CCC.SH.csv").write_bytes(text)
    assert read_bars(tmp_path)["ticker"].unique().tolist() == ["AAA", "BBB", "CCC.SH"]


def test_unreadable_archives_name_the_problem(tmp_path: Path) -> None:
    (tmp_path / "two.zip").write_bytes(_zip({"a.csv": b"x", "b.csv": b"y"}))
    with pytest.raises(
        ValueError, match=r"two.zip: zip archive holds 2 files \['a.csv', 'b.csv'\]; expected exactly one"
    ):
        read_bars(tmp_path / "two.zip")
    (tmp_path / "book.csv").write_bytes(_zip({"[Content_Types].xml": b"", "xl/workbook.xml": b""}))
    with pytest.raises(ValueError, match=r"book.csv: an Excel workbook \(.xlsx\), not a text table"):
        read_bars(tmp_path / "book.csv")
    (tmp_path / "old.csv").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 64)
    with pytest.raises(ValueError, match=r"old.csv: an Excel workbook \(.xls\)"):
        read_bars(tmp_path / "old.csv")
    (tmp_path / "broken.csv.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(ValueError, match=r"broken.csv.gz: starts like a gzip file but cannot be decompressed"):
        read_bars(tmp_path / "broken.csv.gz")
    (tmp_path / "blob.csv").write_bytes(b"\x28\xb5\x2f\xfd\x00\x00\x01\x02")
    with pytest.raises(
        ValueError, match=r"blob.csv: binary content .* that is not gzip, zip, bz2, xz, Parquet or text"
    ):
        read_bars(tmp_path / "blob.csv")


def test_text_that_is_no_known_encoding(tmp_path: Path) -> None:
    (tmp_path / "latin.csv").write_bytes(b"date,open\n\x80\x80,1\n")
    with pytest.raises(ValueError, match=r"latin.csv: text is neither UTF-8, UTF-16 nor GBK; save it as UTF-8"):
        read_bars(tmp_path / "latin.csv")


def test_utf16_tab_separated_excel_text(tmp_path: Path, expected: pd.DataFrame) -> None:
    text = (FIXTURES / "english.csv").read_text().replace(",", "\t")
    (tmp_path / "unicode.txt").write_bytes(text.encode("utf-16"))
    pd.testing.assert_frame_equal(read_bars(tmp_path / "unicode.txt")[OHLCV], expected)


# ---------------------------------------------------------------- table layout
def test_tongdaxin_title_footer_and_line_numbers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        minute = read_bars(FIXTURES / "tongdaxin_5min.txt")
    assert "TongDaXin export" in caplog.text and "footer line 51 '数据来源:通达信' skipped" in caplog.text
    qmt = read_bars(FIXTURES / "qmt_5min.csv")
    pd.testing.assert_frame_equal(minute.drop(columns="ticker"), qmt.drop(columns="ticker"))  # same bars
    lines = (FIXTURES / "tongdaxin_daily.txt").read_bytes().decode("gbk").splitlines()
    lines[4] = lines[4].replace("\t10.90\t", "\t10.10\t", 1)  # third bar (line 5 after title and header)
    (tmp_path / "SZ#003040.txt").write_bytes("\r\n".join(lines).encode("gbk"))
    with pytest.raises(ValueError, match=r"line 5, column 'high': high 10.1 < max\(open, close\) 10.8"):
        read_bars(tmp_path / "SZ#003040.txt")


def test_a_truncated_last_row_is_not_a_footer(tmp_path: Path) -> None:
    (tmp_path / "cut.csv").write_text((FIXTURES / "english.csv").read_text() + "2024-01-10\n")
    with pytest.raises(ValueError, match=r"cut.csv: 5 missing values\n  line 8, column 'close': missing value"):
        read_bars(tmp_path / "cut.csv")


def test_table_errors_name_file_and_line(tmp_path: Path) -> None:
    lines = (FIXTURES / "english.csv").read_text().splitlines()
    lines[3] += ",7"
    (tmp_path / "extra.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"extra.csv: cannot read the table \(.*Expected 6 fields in line 4, saw 7"):
        read_bars(tmp_path / "extra.csv")
    (tmp_path / "prose.csv").write_text("just\nsome words\n")
    with pytest.raises(ValueError, match=r"prose.csv: no table separated by tabs, ';' or ',' found"):
        read_bars(tmp_path / "prose.csv")
    (tmp_path / "nohead.csv").write_text("1.5,2,3,4,5,6\n1.6,2,3,4,5,6\n")
    with pytest.raises(ValueError, match=r"nohead.csv: the first line '1.5,2,3,4,5,6' has no column names"):
        read_bars(tmp_path / "nohead.csv")
    (tmp_path / "empty.csv").write_text("\n\n")
    with pytest.raises(ValueError, match=r"empty.csv: the file is empty \(no rows\)"):
        read_bars(tmp_path / "empty.csv")


# ---------------------------------------------------------------- clocks
def test_qmt_local_string_wins_over_the_epoch_column(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        frame = read_bars(FIXTURES / "qmt_5min.csv")
    assert "timestamps from 'stime' as YYYYMMDDhhmmss numbers (local clock as written)" in caplog.text
    times = frame["timestamp"].dt.time
    assert times.min() == pd.Timestamp("09:35").time() and times.max() == pd.Timestamp("15:00").time()
    # The same file with stime as an unnamed index (xtquant's DataFrame.to_csv), or as ISO strings.
    text = (FIXTURES / "qmt_5min.csv").read_text()
    (tmp_path / "index.csv").write_text(text.replace("stime,", ",", 1))
    pd.testing.assert_frame_equal(
        read_bars(tmp_path / "index.csv").drop(columns="ticker"), frame.drop(columns="ticker")
    )
    df = pd.read_csv(FIXTURES / "qmt_5min.csv", dtype={"stime": str})
    df["stime"] = pd.to_datetime(df["stime"], format="%Y%m%d%H%M%S").dt.strftime("%Y-%m-%d %H:%M:%S")
    df.to_csv(tmp_path / "iso.csv", index=False)
    pd.testing.assert_frame_equal(read_bars(tmp_path / "iso.csv").drop(columns="ticker"), frame.drop(columns="ticker"))
    # Naming the epoch column explicitly gives UTC unless the exchange's zone is given.
    utc = read_bars(FIXTURES / "qmt_5min.csv", columns={"timestamp": "time"})
    assert utc["timestamp"].iloc[0] == pd.Timestamp("2024-01-02 01:35")
    local = read_bars(FIXTURES / "qmt_5min.csv", columns={"timestamp": "time"}, timezone="Asia/Shanghai")
    pd.testing.assert_series_equal(local["timestamp"], frame["timestamp"])


def test_epoch_only_files_take_the_timezone(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        utc = read_bars(FIXTURES / "epoch_milliseconds.csv")
    assert "timestamps from 'open_time' as Unix epoch milliseconds in UTC" in caplog.text
    assert utc["timestamp"].iloc[0] == pd.Timestamp("2024-01-02 00:00")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        local = read_bars(FIXTURES / "binance_headerless.csv", timezone="Asia/Shanghai")
    assert "Unix epoch milliseconds, converted from UTC to Asia/Shanghai" in caplog.text
    assert (local["timestamp"] - utc["timestamp"] == pd.Timedelta(hours=8)).all()
    # Local strings are never shifted by the timezone option, and the log says so.
    caplog.clear()
    with caplog.at_level(logging.INFO):
        read_bars(FIXTURES / "tongdaxin_5min.txt", timezone="Asia/Shanghai")
    assert "(local clock as written); timezone 'Asia/Shanghai' applies to epochs only" in caplog.text
    pd.testing.assert_frame_equal(
        read_bars(FIXTURES / "english.csv", timezone="Asia/Shanghai"), read_bars(FIXTURES / "english.csv")
    )
    with pytest.raises(ValueError, match=r"timezone 'Mars/Olympus' is not a known time zone"):
        read_bars(FIXTURES / "english.csv", timezone="Mars/Olympus")


def test_compact_local_stamps_and_offsets() -> None:
    assert parse_timestamps(pd.Series([20210930094000])).iloc[0] == pd.Timestamp("2021-09-30 09:40")
    assert parse_timestamps(pd.Series(["202109300940"])).iloc[0] == pd.Timestamp("2021-09-30 09:40")
    aware = pd.Series(["2024-01-02T09:30:00+08:00"])
    assert parse_timestamps(aware, timezone="UTC").iloc[0] == pd.Timestamp("2024-01-02 01:30")
    mixed = pd.Series(["2024-03-08T09:30:00-05:00", "2024-03-11T09:30:00-04:00"])
    assert parse_timestamps(mixed, timezone="UTC").dt.hour.tolist() == [14, 13]


def test_file_listing_errors(tmp_path: Path) -> None:
    (tmp_path / "bars.xlsx").write_bytes(b"")
    with pytest.raises(ValueError, match=r"bars.xlsx: unsupported file type; expected one of \['.csv'"):
        read_bars(tmp_path / "bars.xlsx")
    with pytest.raises(ValueError, match=r"folder holds no .csv/.txt/.tsv/.parquet/.pq"):
        read_bars(tmp_path)


def test_tongdaxin_titles_and_times_of_day() -> None:
    title = tongdaxin_title("600001 *ST 某某 1分钟线 前复权")
    assert title == {"code": "600001", "name": "*ST 某某", "period": "1分钟线", "adjust": "前复权"}
    assert tongdaxin_title("Date,Open,High") is None
    times = time_of_day(pd.Series(["0935", "1500", "9:35", "09:35:30", "2460", "x"]))
    assert times.tolist()[:4] == ["09:35:00", "15:00:00", "09:35:00", "09:35:30"]
    assert times.iloc[4:].isna().all()  # minute 60 and text are not times of day
    assert time_of_day(pd.Series([935, 1500])).tolist() == ["09:35:00", "15:00:00"]  # 0935 read as a number
    assert time_of_day(pd.Series(["093500", "150000"])).tolist() == ["09:35:00", "15:00:00"]


def test_a_folder_read_shows_its_progress_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lightning_tf.kline.reader import io as reader_io
    from tests.helpers.kline import make_bars

    for seed, name in enumerate(["A", "B", "C"]):
        make_bars(30, seed=seed).to_csv(tmp_path / f"{name}.csv", index=False)
    bar = reader_io.tqdm
    monkeypatch.setattr(reader_io, "tqdm", lambda *a, **kw: bar(*a, **{**kw, "delay": 0, "mininterval": 0}))
    shown = read_bars(tmp_path, read_workers=0)
    err = capsys.readouterr().err
    assert f"reading {tmp_path}" in err and "3/3" in err
    quiet = read_bars(tmp_path, read_workers=0, progress=False)
    assert "reading" not in capsys.readouterr().err
    pd.testing.assert_frame_equal(shown, quiet)
    read_bars(tmp_path / "A.csv", read_workers=0)  # one file: no bar
    assert "reading" not in capsys.readouterr().err
