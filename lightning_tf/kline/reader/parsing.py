"""Parsing the cells of a bar file: timestamps, times of day and numbers.

Timestamps are the exchange's local clock. Strings are kept as written (a session's 09:30 stays
09:30, also when the string carries a UTC offset); numbers are ``YYYYMMDD``,
``YYYYMMDDhhmm(ss)`` or Unix epochs, and only epochs (and offset strings, when a time zone is asked
for) are converted: from UTC to ``timezone``, or left in UTC when none is given.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "MISSING",
    "check_timezone",
    "iso_stamps",
    "looks_like_time_of_day",
    "parse_numbers",
    "parse_timestamps",
    "parse_timestamps_described",
    "stamps_are_epochs",
    "time_of_day",
]

# Placeholders that mean "no value" rather than "not a number" ('--' is common in Chinese exports).
MISSING = {"", "-", "--", "nan", "none", "null", "na", "n/a"}
_CURRENCY = r"[$¥￥€£]"
_TIME_OF_DAY = re.compile(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?")
_COMPACT_TIME = re.compile(r"\d{3,6}")  # TongDaXin's 0935, QMT's 093000
_PLAIN = re.compile(r"-?\d+(\.\d*)?([eE][+-]?\d+)?", re.ASCII)  # a plain number (ASCII digits, as pyarrow's)
# Tried in order on string timestamps; the format that parses the most values wins (ties: the first).
_DATE_FORMATS = (
    "ISO8601",
    "%m/%d/%Y",
    "%m/%d/%Y %H:%M",
    "%m/%d/%Y %H:%M:%S",
    "%d/%m/%Y",  # after the US forms: a column both read (no day above 12) is read month first
    "%d/%m/%Y %H:%M",
    "%d/%m/%Y %H:%M:%S",
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
    "%d.%m.%Y %H:%M:%S",
)
_SWAPPED = {f"%m/%d/%Y{t}": f"%d/%m/%Y{t}" for t in ("", " %H:%M", " %H:%M:%S")}  # month first <-> day first
_SWAPPED |= {day: month for month, day in _SWAPPED.items()}
# Integer stamps written as the digits of the local clock (ranges far from any plausible epoch).
_COMPACT_STAMPS = (
    (1900_01_01, 2100_12_31, "%Y%m%d", "YYYYMMDD"),
    (1900_01_01_0000, 2100_12_31_2359, "%Y%m%d%H%M", "YYYYMMDDhhmm"),
    (1900_01_01_000000, 2100_12_31_235959, "%Y%m%d%H%M%S", "YYYYMMDDhhmmss"),
)


def check_timezone(timezone: str | None) -> None:
    """Raise unless ``timezone`` is None or a time zone pandas knows (``"Asia/Shanghai"``, ``"UTC"``)."""
    if timezone is None:
        return
    try:
        pd.Timestamp(0, tz="UTC").tz_convert(timezone)
    except (LookupError, ValueError, TypeError):  # ZoneInfoNotFoundError is a KeyError
        raise ValueError(
            f"timezone {timezone!r} is not a known time zone (e.g. 'Asia/Shanghai', 'America/New_York', 'UTC')"
        ) from None


def parse_timestamps(values: pd.Series, timezone: str | None = None) -> pd.Series:
    """Parse a column of timestamps to naive ``datetime64[ns]``; what cannot be parsed becomes NaT.

    Numbers are ``YYYYMMDD``, ``YYYYMMDDhhmm`` or ``YYYYMMDDhhmmss`` local stamps when every value
    looks like one, else Unix epoch seconds, milliseconds, microseconds or nanoseconds by magnitude.
    Strings take the date format that parses most of the values (ISO first, then US ``M/D/YYYY``, then
    ``D/M/YYYY``: a column that both read, no day above 12, is read month first).

    Args:
        values: the column as read.
        timezone: the clock epochs (and strings with a UTC offset) are shown in; None: epochs in
            UTC, offset strings at their own local wall time.
    """
    return parse_timestamps_described(values, timezone)[0]


def parse_timestamps_described(values: pd.Series, timezone: str | None = None) -> tuple[pd.Series, str]:
    """:func:`parse_timestamps`, and a few words on how the stamps were read (for the log)."""
    return _read_stamps(values, timezone)


def stamps_are_epochs(values: pd.Series) -> bool:
    """Whether :func:`parse_timestamps` reads ``values`` as Unix epochs (decided without parsing dates)."""
    if values.dtype.kind in "OU" or pd.api.types.is_string_dtype(values):
        # Text that is not mostly plain numbers holds no epochs; Python's strip removes at least the
        # whitespace pandas' does, so a cell that is not a number here is none there either.
        cells = [c.strip() for c in values.head(500).to_numpy(object).tolist() if isinstance(c, str)]
        if not _mostly_plain([c for c in cells if c.lower() not in MISSING]):
            return False
    return _read_stamps(values, None, strings=False)[1].startswith("Unix epoch")


def _read_stamps(values: pd.Series, timezone: str | None, strings: bool = True) -> tuple[pd.Series | None, str]:
    """:func:`parse_timestamps_described`; with ``strings`` False, date strings are left unparsed (None)."""
    zone = "UTC" if timezone is None else timezone
    if isinstance(values.dtype, pd.DatetimeTZDtype):
        if timezone is not None:
            values = values.dt.tz_convert(timezone)
        return values.dt.tz_localize(None).astype("datetime64[ns]"), f"time-zone-aware datetimes, shown in {zone}"
    if pd.api.types.is_datetime64_any_dtype(values):
        return values.astype("datetime64[ns]"), "datetimes as stored (local clock)"
    if strings and not pd.api.types.is_numeric_dtype(values):
        stamps = iso_stamps(values)
        if stamps is not None:  # what the steps below give such a column, computed from its digits
            return pd.Series(stamps, index=values.index), "ISO 8601 strings (local clock as written)"
    text = values.astype(str).str.strip() if not pd.api.types.is_numeric_dtype(values) else None
    present = values.notna() if text is None else _present(text)
    # Decide on a sample whether the column holds plain numbers before converting all of it.
    head = None if text is None else (text if present.all() else text[present]).head(500)
    plain = head is None or _mostly_plain(head.to_numpy(object).tolist())
    numbers = pd.to_numeric(values if text is None else text, errors="coerce") if plain else None
    if numbers is not None and present.any() and numbers[present].notna().mean() >= 0.9:
        finite = numbers.dropna()
        integral = bool((finite % 1 == 0).all())
        for low, high, fmt, name in _COMPACT_STAMPS:
            if integral and len(finite) and finite.between(low, high).all():
                parsed = pd.to_datetime(numbers.astype("Int64").astype(str), format=fmt, errors="coerce")
                return parsed.astype("datetime64[ns]"), f"{name} numbers (local clock as written)"
        magnitude = finite.abs().median() if len(finite) else 0.0
        unit = "s" if magnitude < 1e11 else "ms" if magnitude < 1e14 else "us" if magnitude < 1e17 else "ns"
        stamps = pd.to_datetime(numbers, unit=unit, errors="coerce", utc=True)
        if timezone is not None:
            stamps = stamps.dt.tz_convert(timezone)
        words = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[unit]
        how = f"Unix epoch {words}, converted from UTC to {timezone}" if timezone else f"Unix epoch {words} in UTC"
        return stamps.dt.tz_localize(None).astype("datetime64[ns]"), how
    if text is None:  # a numeric column without a single value
        return pd.Series(pd.NaT, index=values.index, dtype="datetime64[ns]"), "no values"
    if not strings:
        return None, "strings"
    every = bool(present.all())
    # The format that parses the most of the first 500 stamps wins, ISO 8601 on a tie: when ISO parses
    # all of them, the whole column parsed as ISO is the answer and no other format needs a try.
    best, parsed = _DATE_FORMATS[0], None
    parsed, aware = _to_datetime(text if every else text.where(present), best, timezone)
    if not (parsed if every else parsed[present]).head(500).notna().all():
        sample = text[present].head(500)
        best_count = -1
        for fmt in _DATE_FORMATS:
            count = int(_to_datetime(sample, fmt, None)[0].notna().sum())
            if count > best_count:
                best, best_count = fmt, count
            if count == len(sample):
                break
        if best != _DATE_FORMATS[0]:
            parsed, aware = _to_datetime(text.where(present), best, timezone)
        if best in _SWAPPED and parsed[present].isna().any():
            # the sample's days were all 12 or less: the whole column decides between month and day first
            other, other_aware = _to_datetime(text.where(present), _SWAPPED[best], timezone)
            if other[present].isna().sum() < parsed[present].isna().sum():
                best, parsed, aware = _SWAPPED[best], other, other_aware
    form = "ISO 8601" if best == "ISO8601" else best
    if not aware:
        return parsed, f"{form} strings (local clock as written)"
    return parsed, f"{form} strings with UTC offsets, " + (
        f"converted to {timezone}" if timezone else "local wall time kept"
    )


_ISO_LAYOUTS = {  # cell length -> (positions of the digits, of the punctuation, the punctuation)
    10: ([0, 1, 2, 3, 5, 6, 8, 9], [4, 7], "--"),  # 2024-01-02
    16: ([0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15], [4, 7, 13], "--:"),  # 2024-01-02 09:30
    19: ([0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18], [4, 7, 13, 16], "--::"),  # 2024-01-02 09:30:00
}
_DAYS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def iso_stamps(values: pd.Series) -> np.ndarray | None:
    """``datetime64[ns]`` of a text column whose every cell is a valid ``YYYY-MM-DD``, ``YYYY-MM-DD hh:mm``
    or ``YYYY-MM-DD hh:mm:ss`` stamp (one layout, ``T`` or a space before the time, years 1678 to 2261),
    read from the digits in a few array operations; None for any other column (one cell that is not such
    a stamp, or not a valid date, is enough), which :func:`parse_timestamps` then reads as usual."""
    try:
        cells = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError):
        return None
    if isinstance(cells, pa.ChunkedArray):
        cells = cells.combine_chunks()
    text = pa.types.is_string(cells.type) or pa.types.is_large_string(cells.type)
    if len(cells) == 0 or cells.null_count or not text:
        return None
    width = np.int64 if pa.types.is_large_string(cells.type) else np.int32
    offsets = np.frombuffer(cells.buffers()[1], dtype=width)[cells.offset : cells.offset + len(cells) + 1]
    size = int(offsets[1] - offsets[0])
    if size not in _ISO_LAYOUTS or int(offsets[-1] - offsets[0]) != size * len(cells):  # all of one length
        return None
    chars = np.frombuffer(cells.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]].reshape(-1, size)
    digit_at, punct_at, punct = _ISO_LAYOUTS[size]
    if not (chars[:, punct_at] == np.frombuffer(punct.encode(), np.uint8)).all():
        return None
    if size > 10 and not np.isin(chars[:, 10], (ord(" "), ord("T"))).all():
        return None
    digits = chars[:, digit_at].astype(np.int64) - ord("0")
    if ((digits < 0) | (digits > 9)).any():
        return None
    year = digits[:, 0] * 1000 + digits[:, 1] * 100 + digits[:, 2] * 10 + digits[:, 3]
    month, day = digits[:, 4] * 10 + digits[:, 5], digits[:, 6] * 10 + digits[:, 7]
    hour, minute, second = (digits[:, i] * 10 + digits[:, i + 1] if digits.shape[1] > i else 0 for i in (8, 10, 12))
    if not (((year >= 1678) & (year <= 2261)).all() and ((month >= 1) & (month <= 12)).all()):
        return None  # outside datetime64[ns] (pandas says so) or no month
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    if not (((day >= 1) & (day <= _DAYS[month - 1] + (leap & (month == 2)))).all()):
        return None
    if not (np.all(hour <= 23) and np.all(minute <= 59) and np.all(second <= 59)):
        return None
    months = ((year - 1970) * 12 + month - 1).astype("datetime64[M]")
    stamps = months.astype("datetime64[D]") + (day - 1).astype("timedelta64[D]")
    return stamps.astype("datetime64[ns]") + np.asarray(hour * 3600 + minute * 60 + second, "timedelta64[s]")


def _present(text: pd.Series) -> pd.Series:
    """Whether each cell holds something (is not one of the ``MISSING`` placeholders)."""
    shortest = _shortest(text)
    if shortest is None or shortest > max(map(len, MISSING)):  # no cell short enough to be a placeholder
        return pd.Series(True, index=text.index)
    return ~text.str.lower().isin(MISSING)


def _shortest(text: pd.Series) -> int | None:
    """The length of the shortest cell of a text column (None: no cell), in one pass over its strings."""
    try:
        return pc.min(pc.utf8_length(pa.array(text))).as_py()
    except (pa.ArrowException, TypeError):  # not all strings (an object column of mixed values)
        return text.str.len().min()


def _mostly_plain(cells: list) -> bool:
    """Whether at least 90% of the text ``cells`` are plain numbers (missing cells not counted), as
    ``Series.str.fullmatch(...).mean() >= 0.9`` says, stopping as soon as the answer is known."""
    cells = [c for c in cells if isinstance(c, str)]
    hopeless = 0.1 * len(cells) + 1  # more misses than this leave less than 90%
    misses = 0
    for cell in cells:
        if _PLAIN.fullmatch(cell) is None:
            misses += 1
            if misses > hopeless:
                return False
    return bool(cells) and (len(cells) - misses) / len(cells) >= 0.9


def _to_datetime(text: pd.Series, fmt: str, timezone: str | None) -> tuple[pd.Series, bool]:
    """``text`` parsed with ``fmt`` to naive ``datetime64[ns]`` (NaT where it does not parse), and
    whether the stamps carried UTC offsets: those keep their local wall time (a session's 09:30
    stays 09:30) unless ``timezone`` asks for another clock."""
    try:
        parsed = pd.to_datetime(text, format=fmt, errors="coerce")
    except (ValueError, TypeError):  # e.g. mixed UTC offsets: parse each stamp on its own
        stamps = [_one_stamp(t, fmt, timezone) for t in text]
        return pd.Series([s for s, _ in stamps], index=text.index, dtype="datetime64[ns]"), any(a for _, a in stamps)
    aware = isinstance(parsed.dtype, pd.DatetimeTZDtype)
    if aware:
        parsed = (parsed.dt.tz_convert(timezone) if timezone else parsed).dt.tz_localize(None)
    return parsed.astype("datetime64[ns]"), aware


def _one_stamp(text: object, fmt: str, timezone: str | None) -> tuple[pd.Timestamp, bool]:
    stamp = pd.to_datetime(text, format=fmt, errors="coerce")
    if pd.isna(stamp) or stamp.tzinfo is None:
        return stamp, False
    return (stamp.tz_convert(timezone) if timezone else stamp).tz_localize(None), True


def _time_text(values: pd.Series) -> pd.Series:
    if pd.api.types.is_numeric_dtype(values):  # 935 read as a number from 0935
        return values.map(lambda v: "" if pd.isna(v) else str(int(v)) if float(v).is_integer() else str(v))
    return values.fillna("").astype(str).str.strip()


def looks_like_time_of_day(values: pd.Series) -> bool:
    """Whether a column holds times of day (``09:35``, ``09:35:00``, ``0935``, ``093500``)."""
    text = _time_text(values.dropna()).head(200)
    text = text[~text.str.lower().isin(MISSING)]
    return bool(len(text)) and time_of_day(text).notna().all()


def time_of_day(values: pd.Series) -> pd.Series:
    """Times of day as ``HH:MM:SS`` text; NaN where a cell is not one. Compact ``HHMM`` (``0935``,
    also read as the number 935) and ``HHMMSS`` forms are expanded; the width is the column's."""
    text = _time_text(values)
    colon = text.str.fullmatch(_TIME_OF_DAY.pattern)
    out = pd.Series(np.nan, index=values.index, dtype=object)
    padded = text.where(~text.str.match(r"^\d:"), "0" + text)
    out[colon] = padded[colon].where(padded[colon].str.len() > 5, padded[colon] + ":00")
    compact = text.str.fullmatch(_COMPACT_TIME.pattern) & ~colon
    if compact.any():
        width = 4 if text[compact].str.len().max() <= 4 else 6
        digits = text[compact].str.zfill(width)
        hh, mm = digits.str[:2].astype(int), digits.str[2:4].astype(int)
        ss = digits.str[4:6].astype(int) if width == 6 else pd.Series(0, index=digits.index)
        valid = (hh < 24) & (mm < 60) & (ss < 60) & (digits.str.len() == width)
        out[valid[valid].index] = (
            digits[valid].str[:2]
            + ":"
            + digits[valid].str[2:4]
            + ":"
            + (digits[valid].str[4:6] if width == 6 else "00")
        )
    return out


def parse_numbers(values: pd.Series, decimal: str = ".", thousands: str = ",") -> tuple[pd.Series, pd.Series]:
    """Parse a column to float64, tolerating currency signs and grouped thousands.

    A thousands separator is accepted only between groups of three digits (``1.234.567,8``), so a
    misread separator shows up as a bad cell instead of a number a thousand times too large.
    Spaces (also non-breaking) between groups of three are accepted as well. ``inf`` stays infinite
    (the validation reports it).

    Args:
        values: the column as read.
        decimal: the decimal separator, ``"."`` or ``","``.
        thousands: the thousands separator, ``""`` for none.

    Returns:
        ``(numbers, bad)``: NaN where the cell is missing or not a number, and a bool mask of the
        cells that held something that is not a number (as opposed to an empty / ``--`` cell).
    """
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return values.astype("float64"), pd.Series(False, index=values.index)
    if decimal == ".":
        try:  # clean text columns parse at C speed
            return pd.to_numeric(values).astype("float64"), pd.Series(False, index=values.index)
        except (ValueError, TypeError, OverflowError):  # OverflowError: an integer beyond float64 (JSON's)
            pass
    text = values.astype(str).str.strip()
    missing = text.str.lower().isin(MISSING) | values.isna()
    cleaned = text.str.replace(_CURRENCY, "", regex=True).str.strip()
    d = re.escape(decimal)
    groups = [r"\d+", r"\d{1,3}(?:[ \u00a0\u202f]\d{3})+"]
    if thousands:
        groups.append(rf"\d{{1,3}}(?:{re.escape(thousands)}\d{{3}})+")
    pattern = rf"[+-]?\s*(?:(?:{'|'.join(groups)})(?:{d}\d*)?|{d}\d+)(?:[eE][+-]?\d+)?"
    valid = cleaned.str.fullmatch(pattern).fillna(False).astype(bool) & ~missing
    drop = rf"[\s\u00a0\u202f{re.escape(thousands)}]" if thousands else r"[\s\u00a0\u202f]"
    normal = cleaned.str.replace(drop, "", regex=True).str.replace(decimal, ".", regex=False)
    numbers = pd.to_numeric(normal.where(valid), errors="coerce").astype("float64")
    infinite = cleaned.str.fullmatch(r"[+-]?(?i:inf|infinity)").fillna(False).astype(bool) & ~missing
    numbers[infinite] = np.where(cleaned[infinite].str.startswith("-"), -np.inf, np.inf)
    return numbers, numbers.isna() & ~missing
