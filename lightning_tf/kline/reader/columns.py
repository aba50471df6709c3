"""Which column of a bar table is which canonical column (see :mod:`lightning_tf.kline.reader.io`).

Column names are recognised without configuration: English names in any case and order, the Chinese
names akshare, tushare and TongDaXin write, QMT's ``stime``, an unnamed datetime index column,
MetaTrader's and Binance's headerless layouts. An explicit ``columns`` mapping (canonical name -> file
column) overrides the detection.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pandas as pd

from .parsing import looks_like_time_of_day, parse_timestamps, parse_timestamps_described, stamps_are_epochs

__all__ = [
    "ALIASES",
    "CANONICAL_COLUMNS",
    "NUMERIC_COLUMNS",
    "REQUIRED_COLUMNS",
    "TEXT_NAMES",
    "detect_columns",
    "normalise",
]

CANONICAL_COLUMNS = ("timestamp", "open", "high", "low", "close", "volume", "amount", "adj_close")
REQUIRED_COLUMNS = ("timestamp", "open", "high", "low", "close")
NUMERIC_COLUMNS = ("open", "high", "low", "close", "volume", "amount", "adj_close")

# Aliases after normalisation (lower case; spaces, '_', '-', '.', '/', brackets removed), in priority
# order: the first alias found in a file wins. English names cover Yahoo, Nasdaq ("Close/Last"),
# barchart ("Time", "Last"), MetaTrader ("<DATE>"), Binance ("open_time"), QMT ("stime") and
# tushare (trade_date, vol, ts_code) exports; the Chinese names are akshare's and TongDaXin's
# (日期/时间, 开盘, 收盘, 最高, 最低, 成交量, 成交额). Columns not listed here (振幅, 涨跌幅, 换手率,
# OpenInt, ...) are ignored unless read_bars is asked to keep them (extra_columns: covariates).
ALIASES: dict[str, tuple[str, ...]] = {
    "timestamp": (
        "timestamp",
        "timestamps",
        "datetime",
        "date",
        "tradedate",
        "stime",
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
# Columns kept as text: codes keep their leading zeros, times of day theirs (TongDaXin's 0935).
TEXT_NAMES = {*(ALIASES["ticker"]), "time", "stime", "时间"}


def normalise(name: object) -> str:
    return re.sub(r"[\s_\-./()<>\[\]]", "", str(name).strip().lower())


def detect_columns(
    df: pd.DataFrame, columns: Mapping[str, str] | None = None, source: str = "<frame>"
) -> dict[str, str]:
    """Map canonical names (and ``ticker``) to the file's columns.

    Timestamps are the exchange's local clock: when the column found by name holds Unix epochs and
    another date/time column holds local stamps (QMT's ``stime`` beside its epoch ``time``, or an
    unnamed index), the local one is used.

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
        by_norm.setdefault(normalise(col), col)
    taken = set(found.values())

    def by_alias(key: str) -> set[str]:  # the file's columns detection would take for ``key``
        return {by_norm[normalise(a)] for a in ALIASES.get(key, ()) if normalise(a) in by_norm}

    for key, aliases in ALIASES.items():
        if key in found:
            continue
        for alias in aliases:
            col = by_norm.get(normalise(alias))
            if col is not None and col not in taken:
                found[key] = col
                taken.add(col)
                break
    if "timestamp" in found and "timestamp" not in explicit and _is_epoch(df[found["timestamp"]]):
        local = _local_timestamp_column(df, taken)
        if local is not None:
            taken.discard(found["timestamp"])
            found["timestamp"] = local
            taken.add(local)
    # Separate date and time-of-day columns (MetaTrader's <DATE>, <TIME>; TongDaXin's 日期, 时间) are joined.
    if "timestamp" in found and "timestamp" not in explicit and normalise(found["timestamp"]) in ("date", "日期"):
        for alias in ("time", "时间"):
            col = by_norm.get(alias)
            if col is not None and col not in taken and looks_like_time_of_day(df[col]):
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
        # a column the mapping gave another name would have been found: say so, not "not found" beside its name
        claimed = {
            m: next((f"{col!r} is mapped to {key!r}" for key, col in explicit.items() if col in by_alias(m)), "")
            for m in missing
        }
        why = "; ".join(f"{m}: {reason}" for m, reason in claimed.items() if reason)
        raise ValueError(
            f"{source}: column(s) {missing} not found{f' ({why} by columns=)' if why else ''}; columns are "
            f"{list(df.columns)}. Name them with columns={{{', '.join(f'{m!r}: ...' for m in missing)}}}"
        )
    return found


def _is_epoch(values: pd.Series) -> bool:
    return stamps_are_epochs(values.head(200))


def _local_timestamp_column(df: pd.DataFrame, taken: set[str]) -> str | None:
    """A column named like a timestamp, or an unnamed index column, holding local (non-epoch) stamps."""
    names = {normalise(a) for a in ALIASES["timestamp"]}
    for col in df.columns:
        unnamed = str(col).startswith("Unnamed") or normalise(col) in ("", "index")
        if col in taken or not (unnamed or normalise(col) in names):
            continue
        sample = df[col].head(200)
        parsed, how = parse_timestamps_described(sample)
        if not how.startswith("Unix epoch") and len(sample) and (parsed >= pd.Timestamp("1971-01-01")).mean() >= 0.9:
            return col
    return None


def _unnamed_datetime_column(df: pd.DataFrame, taken: set[str]) -> str | None:
    """An index column written without a name (``Unnamed: 0``, ``index``, ``""``) or, failing that,
    the first unclaimed column, if most of its values parse as dates."""
    candidates = [
        c for c in df.columns if str(c).startswith("Unnamed") or normalise(c) in ("", "index", "index_level_0")
    ]
    candidates += [c for c in df.columns[:1] if c not in taken and c not in candidates]
    for col in candidates:
        sample = df[col].head(200)
        parsed = parse_timestamps(sample)
        # Small numbers (prices) would parse as epoch seconds in 1970: not a date column.
        if len(sample) and (parsed >= pd.Timestamp("1971-01-01")).mean() >= 0.9:
            return col
    return None
