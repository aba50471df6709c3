"""Reading OHLCV bars from CSV or Parquet into one canonical frame.

The canonical frame has one row per bar and the columns

====================  ===========================================================
``ticker``            str; file stem for one file per ticker, or the ticker column
``timestamp``         datetime64[ns], ascending and unique within a ticker
``open high low``     float64
``close volume``      float64
``amount``            float64, only when the file has it (turnover in money)
``adj_close``         float64, only when the file has it
====================  ===========================================================

Column names are recognised without configuration (English names in any case and order, the
Chinese names akshare and tushare write, an unnamed datetime index column); timestamps may be
ISO dates, US ``M/D/YYYY`` dates, ``YYYYMMDD`` integers or Unix epoch seconds / milliseconds; rows
may be newest-first. An explicit ``columns`` mapping (canonical name -> file column) overrides the
detection. Every file passes through :func:`lightning_tf.kline.validation.validate_bars`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from .validation import OnError, validate_bars

__all__ = [
    "CANONICAL_COLUMNS",
    "SUPPORTED_SUFFIXES",
    "detect_columns",
    "list_bar_files",
    "parse_numbers",
    "parse_timestamps",
    "read_bars",
    "read_table",
]

log = logging.getLogger(__name__)

CANONICAL_COLUMNS = ("timestamp", "open", "high", "low", "close", "volume", "amount", "adj_close")
REQUIRED_COLUMNS = ("timestamp", "open", "high", "low", "close")
NUMERIC_COLUMNS = ("open", "high", "low", "close", "volume", "amount", "adj_close")
SUPPORTED_SUFFIXES = (".csv", ".csv.gz", ".txt", ".tsv", ".parquet", ".pq")

# Aliases after normalisation (lower case; spaces, '_', '-', '.', '/', brackets removed), in priority
# order: the first alias found in a file wins. English names cover Yahoo, Nasdaq ("Close/Last"),
# MetaTrader ("<DATE>"), Binance ("open_time") and tushare (trade_date, vol, ts_code) exports; the
# Chinese names are akshare's (日期/时间, 开盘, 收盘, 最高, 最低, 成交量, 成交额). Columns not listed
# here (振幅, 涨跌幅, 换手率, OpenInt, ...) are ignored.
_ALIASES: dict[str, tuple[str, ...]] = {
    "timestamp": (
        "timestamp",
        "timestamps",
        "datetime",
        "date",
        "tradedate",
        "time",
        "tradetime",
        "opentime",
        "日期时间",
        "日期",
        "交易日期",
        "时间",
        "交易时间",
    ),
    "open": ("open", "openprice", "o", "开盘", "开盘价", "今开"),
    "high": ("high", "highprice", "h", "最高", "最高价"),
    "low": ("low", "lowprice", "l", "最低", "最低价"),
    "close": ("close", "closeprice", "closelast", "last", "c", "收盘", "收盘价"),
    "volume": ("volume", "vol", "v", "成交量"),
    "amount": ("amount", "turnover", "quotevolume", "quoteassetvolume", "成交额", "成交金额"),
    "adj_close": ("adjclose", "adjustedclose", "adjclosed", "复权收盘价"),
    "ticker": ("ticker", "symbol", "tscode", "code", "股票代码", "证券代码", "代码"),
}
# Column order of headerless kline files (Binance's public data dumps).
_HEADERLESS = (
    "open_time", "open", "high", "low", "close", "volume", "close_time", "quote_volume", "count",
    "taker_buy_volume", "taker_buy_quote_volume", "ignore",
)  # fmt: skip
_TIME_OF_DAY = re.compile(r"^\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?$")
# Placeholders that mean "no value" rather than "not a number" ('--' is common in Chinese exports).
_MISSING = {"", "-", "--", "nan", "none", "null", "na", "n/a"}
# Tried in order on string timestamps; the format that parses the most values wins (ties: the first).
_DATE_FORMATS = (
    "ISO8601",
    "%m/%d/%Y",
    "%m/%d/%Y %H:%M",
    "%m/%d/%Y %H:%M:%S",
    "%Y/%m/%d",
    "%Y/%m/%d %H:%M",
    "%Y/%m/%d %H:%M:%S",
    "%Y%m%d",
    "%Y%m%d %H:%M:%S",
    "%Y.%m.%d",
    "%Y.%m.%d %H:%M",
    "%Y.%m.%d %H:%M:%S",
    "%d.%m.%Y",
    "%d.%m.%Y %H:%M",
)


def _normalise(name: object) -> str:
    return re.sub(r"[\s_\-./()<>\[\]]", "", str(name).strip().lower())


def _suffix(path: Path) -> str:
    name = path.name.lower()
    return ".csv.gz" if name.endswith(".csv.gz") else path.suffix.lower()


def _stem(path: Path) -> str:
    return path.name[: -len(".csv.gz")] if path.name.lower().endswith(".csv.gz") else path.stem


def list_bar_files(path: str | Path) -> list[Path]:
    """The bar files under ``path``: the file itself, or the supported files of a folder, sorted."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if path.is_file():
        if _suffix(path) not in SUPPORTED_SUFFIXES:
            raise ValueError(f"{path}: unsupported file type; expected one of {list(SUPPORTED_SUFFIXES)}")
        return [path]
    files = sorted(p for p in path.iterdir() if p.is_file() and _suffix(p) in SUPPORTED_SUFFIXES)
    if not files:
        raise ValueError(f"{path}: folder holds no {'/'.join(SUPPORTED_SUFFIXES)} files")
    return files


def read_table(path: str | Path, text_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """One CSV/TSV (any of ``,`` ``;`` tab as separator, UTF-8 or GBK) or Parquet file, as stored.

    CSV columns are typed by pandas' fast parser; a column with text in it (``$1.00``, ``--``,
    ``abc``) stays text and is cleaned later. Ticker-like columns (and ``text_columns``) are always
    read as text, so that codes such as ``000001`` keep their leading zeros. A Parquet file's index
    becomes a column. Blank CSV lines are dropped after reading, so that the index + 2 stays the
    file line number.
    """
    path = Path(path)
    if _suffix(path) in (".parquet", ".pq"):
        df = pd.read_parquet(path)
        if isinstance(df.index, pd.DatetimeIndex) or not isinstance(df.index, pd.RangeIndex):
            df = df.reset_index()
        return df
    for encoding in ("utf-8-sig", "gbk"):
        try:
            with open(path, encoding=encoding) as f:
                header = f.readline()
            sep = max((",", ";", "\t"), key=header.count)
            names = [n.strip().strip('"') for n in header.rstrip("\r\n").split(sep)]
            headerless = len(names) >= 6 and all(_is_number(n) for n in names)
            if headerless:  # Binance-style kline dump: open time, OHLCV, then the exchange's extras
                names = [*_HEADERLESS, *(f"column_{i}" for i in range(len(_HEADERLESS), len(names)))][: len(names)]
            ticker_like = {_normalise(a) for a in _ALIASES["ticker"]}
            text = {n: str for n in names if _normalise(n) in ticker_like or n in text_columns}
            df = pd.read_csv(
                path,
                sep=sep,
                encoding=encoding,
                dtype=text,
                keep_default_na=False,
                skip_blank_lines=False,
                header=None if headerless else "infer",
                names=names if headerless else None,
            )
            df.attrs["header_lines"] = 0 if headerless else 1
        except UnicodeDecodeError:
            continue
        blank = np.ones(len(df), dtype=bool)
        for col in df.columns:
            c = df[col]
            if pd.api.types.is_numeric_dtype(c):
                blank &= c.isna().to_numpy()
            else:
                blank &= (c.isna() | (c.astype(str).str.strip() == "")).to_numpy()
            if not blank.any():
                break
        out = df[~blank]
        out.attrs = df.attrs
        return out
    raise ValueError(f"{path}: not UTF-8 or GBK text")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def detect_columns(
    df: pd.DataFrame, columns: Mapping[str, str] | None = None, source: str = "<frame>"
) -> dict[str, str]:
    """Map canonical names (and ``ticker``) to the file's columns.

    Args:
        df: the table as read.
        columns: explicit canonical name -> file column entries; they override detection.
        source: file name used in error messages.

    Returns:
        ``{canonical: file column}`` for every canonical column found. A ``"time"`` entry appears
        beside ``"timestamp"`` when the file has separate date and time-of-day columns.
    """
    found: dict[str, str] = {}
    explicit = dict(columns or {})
    for key, col in explicit.items():
        if key not in (*CANONICAL_COLUMNS, "ticker"):
            raise ValueError(
                f"{source}: columns mapping key {key!r} is not a canonical name; "
                f"keys are {[*CANONICAL_COLUMNS, 'ticker']} and values are file columns"
            )
        if col not in df.columns:
            raise ValueError(f"{source}: columns[{key!r}] = {col!r} not found; columns are {list(df.columns)}")
        found[key] = col
    by_norm: dict[str, str] = {}
    for col in df.columns:
        by_norm.setdefault(_normalise(col), col)
    taken = set(found.values())
    for key, aliases in _ALIASES.items():
        if key in found:
            continue
        for alias in aliases:
            col = by_norm.get(_normalise(alias))
            if col is not None and col not in taken:
                found[key] = col
                taken.add(col)
                break
    # Separate date and time-of-day columns (e.g. MetaTrader's <DATE>, <TIME>) are joined.
    if "timestamp" in found and "timestamp" not in explicit and _normalise(found["timestamp"]) in ("date", "日期"):
        for alias in ("time", "时间"):
            col = by_norm.get(alias)
            if col is not None and col not in taken:
                sample = df[col].dropna().astype(str).str.strip().head(20)
                if len(sample) and sample.str.match(_TIME_OF_DAY).all():
                    found["time"] = col
                    break
    if "timestamp" not in found:
        col = _unnamed_datetime_column(df, taken)
        if col is None:
            raise ValueError(
                f"{source}: no date/time column found; columns are {list(df.columns)}. "
                "Name it with columns={'timestamp': '<column>'}"
            )
        found["timestamp"] = col
    missing = [c for c in REQUIRED_COLUMNS if c not in found]
    if missing:
        raise ValueError(
            f"{source}: column(s) {missing} not found; columns are {list(df.columns)}. "
            f"Name them with columns={{{', '.join(f'{m!r}: ...' for m in missing)}}}"
        )
    return found


def _unnamed_datetime_column(df: pd.DataFrame, taken: set[str]) -> str | None:
    """An index column written without a name (``Unnamed: 0``, ``index``, ``""``) or, failing that,
    the first unclaimed column, if most of its values parse as dates."""
    candidates = [
        c for c in df.columns if str(c).startswith("Unnamed") or _normalise(c) in ("", "index", "index_level_0")
    ]
    candidates += [c for c in df.columns[:1] if c not in taken and c not in candidates]
    for col in candidates:
        sample = df[col].head(200)
        parsed = parse_timestamps(sample)
        # Small numbers (prices) would parse as epoch seconds in 1970: not a date column.
        if len(sample) and (parsed >= pd.Timestamp("1971-01-01")).mean() >= 0.9:
            return col
    return None


def parse_timestamps(values: pd.Series) -> pd.Series:
    """Parse a column of timestamps to ``datetime64[ns]``; what cannot be parsed becomes NaT.

    Numbers are ``YYYYMMDD`` dates when every value looks like one, else Unix epoch seconds,
    milliseconds, microseconds or nanoseconds by magnitude (UTC, returned without time zone).
    Strings take the date format that parses most of the values (ISO first, then US ``M/D/YYYY``);
    time-zone-aware values keep their local wall time.
    """
    if isinstance(values.dtype, pd.DatetimeTZDtype):
        return values.dt.tz_localize(None).astype("datetime64[ns]")
    if pd.api.types.is_datetime64_any_dtype(values):
        return values.astype("datetime64[ns]")
    text = values.astype(str).str.strip() if not pd.api.types.is_numeric_dtype(values) else None
    numbers = pd.to_numeric(values if text is None else text, errors="coerce")
    present = numbers.notna() if text is None else ~text.str.lower().isin(_MISSING)
    plain = text is None or text[present].str.fullmatch(r"-?\d+(\.\d*)?([eE][+-]?\d+)?").mean() >= 0.9
    if present.any() and plain and numbers[present].notna().mean() >= 0.9:
        finite = numbers.dropna()
        is_ymd = ((finite % 1 == 0) & (finite >= 1900_01_01) & (finite <= 2100_12_31)).all()
        if is_ymd:
            return pd.to_datetime(numbers.astype("Int64").astype(str), format="%Y%m%d", errors="coerce").astype(
                "datetime64[ns]"
            )
        magnitude = finite.abs().median() if len(finite) else 0.0
        unit = "s" if magnitude < 1e11 else "ms" if magnitude < 1e14 else "us" if magnitude < 1e17 else "ns"
        return pd.to_datetime(numbers, unit=unit, errors="coerce").astype("datetime64[ns]")
    assert text is not None
    sample = text[present].head(500)
    best, best_count = _DATE_FORMATS[0], -1
    for fmt in _DATE_FORMATS:
        count = int(_to_datetime(sample, fmt).notna().sum())
        if count > best_count:
            best, best_count = fmt, count
        if count == len(sample):
            break
    return _to_datetime(text.where(present), best)


def _to_datetime(text: pd.Series, fmt: str) -> pd.Series:
    """``text`` parsed with ``fmt`` to naive ``datetime64[ns]``, NaT where it does not parse; stamps
    with a UTC offset keep their local wall time (a session's 09:30 stays 09:30)."""
    try:
        parsed = pd.to_datetime(text, format=fmt, errors="coerce")
    except (ValueError, TypeError):  # e.g. mixed UTC offsets: parse each stamp on its own
        parsed = pd.Series([_one_stamp(t, fmt) for t in text], index=text.index, dtype="datetime64[ns]")
    if isinstance(parsed.dtype, pd.DatetimeTZDtype):
        parsed = parsed.dt.tz_localize(None)
    return parsed.astype("datetime64[ns]")


def _one_stamp(text: object, fmt: str) -> pd.Timestamp:
    stamp = pd.to_datetime(text, format=fmt, errors="coerce")
    return pd.NaT if pd.isna(stamp) else stamp.tz_localize(None) if stamp.tzinfo is not None else stamp


def parse_numbers(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Parse a column to float64, tolerating ``$``, ``¥`` and thousands separators.

    Returns:
        ``(numbers, bad)``: NaN where the cell is missing or not a number, and a bool mask of the
        cells that held something that is not a number (as opposed to an empty / ``--`` cell).
    """
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        numbers = values.astype("float64")
        return numbers, pd.Series(False, index=values.index)
    try:  # clean text columns parse at C speed
        return pd.to_numeric(values).astype("float64"), pd.Series(False, index=values.index)
    except (ValueError, TypeError):
        pass
    text = values.astype(str).str.strip()
    missing = text.str.lower().isin(_MISSING) | values.isna()
    cleaned = text.str.replace(r"[$¥￥,\s]", "", regex=True)
    numbers = pd.to_numeric(cleaned.where(~missing), errors="coerce").astype("float64")
    return numbers, numbers.isna() & ~missing


def _canonical_frame(df: pd.DataFrame, found: dict[str, str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The canonical columns (unparsed cells as NaN/NaT) and the matching raw cells as text."""
    ts_raw = df[found["timestamp"]]
    if "time" in found:
        ts_raw = ts_raw.astype(str).str.strip() + " " + df[found["time"]].astype(str).str.strip()
    out = {"timestamp": parse_timestamps(ts_raw)}
    raw = {"timestamp": ts_raw}
    bad = {}
    for col in NUMERIC_COLUMNS:
        if col in found:
            out[col], bad[col] = parse_numbers(df[found[col]])
            raw[col] = df[found[col]]
    frame = pd.DataFrame(out, index=df.index)
    raw_frame = pd.DataFrame(raw, index=df.index)
    for col, mask in bad.items():
        raw_frame[f"{col}__bad"] = mask
    return frame, raw_frame


def read_bars(
    path: str | Path,
    columns: Mapping[str, str] | None = None,
    ticker_column: str | None = None,
    on_error: OnError = "error",
    max_gap: str | None = None,
) -> pd.DataFrame:
    """Read bars into the canonical frame (see the module docstring), validated.

    Args:
        path: a CSV/Parquet file, or a folder with one file per ticker (the ticker is the file stem).
        columns: canonical name -> file column, overriding detection (e.g. ``{"close": "Adj Close"}``).
        ticker_column: column holding the ticker in a long table (detected by name when None:
            ticker, symbol, ts_code, code, 股票代码).
        on_error: what to do with bad rows: raise (``"error"``), drop them, or forward-fill them.
        max_gap: largest allowed spacing between bars as a pandas Timedelta string (``"7D"``);
            larger gaps raise under ``on_error="error"``. None: gaps are only reported in the log.

    Returns:
        The canonical frame, sorted by ticker then timestamp, with a fresh RangeIndex.
    """
    frames = []
    files = list_bar_files(path)
    origin: dict[str, Path] = {}
    for file in files:
        df = read_table(file, text_columns=() if ticker_column is None else (ticker_column,))
        csv = _suffix(file) not in (".parquet", ".pq")
        if df.empty:
            raise ValueError(f"{file}: no rows")
        explicit = dict(columns or {})
        if ticker_column is not None:
            explicit["ticker"] = ticker_column
        found = detect_columns(df, explicit, source=str(file))
        if "volume" not in found:
            log.warning("%s: no volume column; volume is set to 0 (volume features are then constant)", file)
        canonical, raw = _canonical_frame(df, found)
        if "volume" not in found:
            canonical["volume"] = 0.0
        # Report what a user finds in an editor: CSV line numbers, 1-based Parquet rows.
        canonical["_row"] = np.asarray(df.index) + 1 + (df.attrs.get("header_lines", 1) if csv else 0)
        if "ticker" in found:
            tickers = df[found["ticker"]].astype(str).str.strip()
        else:
            tickers = pd.Series(_stem(file), index=df.index)
        for name, idx in tickers.groupby(tickers, sort=True).groups.items():
            name = str(name)
            if name in origin:
                raise ValueError(f"{file}: ticker {name!r} also comes from {origin[name]}; one file per ticker")
            origin[name] = file
            part = validate_bars(
                canonical.loc[idx],
                raw.loc[idx],
                source=str(file),
                on_error=on_error,
                max_gap=max_gap,
                row_label="line" if csv else "row",
            )
            part.insert(0, "ticker", name)
            frames.append(part)
    out = pd.concat(frames, ignore_index=True)
    order = ["ticker", "timestamp", *[c for c in NUMERIC_COLUMNS if c in out.columns]]
    out = out[order].sort_values(["ticker", "timestamp"], kind="stable").reset_index(drop=True)
    out["ticker"] = out["ticker"].astype(object)
    return out
