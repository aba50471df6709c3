"""Reading OHLCV bars from CSV/TXT or Parquet files into one canonical frame.

The canonical frame has one row per bar and the columns

====================  ===========================================================
``ticker``            str; file stem for one file per ticker, the ticker column, or the
                      code in a TongDaXin title line
``timestamp``         datetime64[ns], the exchange's local clock, ascending and unique within a ticker
``open high low``     float64
``close volume``      float64
``amount``            float64, only when the file has it (turnover in money)
``adj_close``         float64, only when the file has it
``<extra>``           float64, each column named in ``extra_columns`` (covariates), under the name asked for
====================  ===========================================================

Column names are recognised without configuration (English names in any case and order, the
Chinese names akshare, tushare and TongDaXin write, QMT's ``stime``, an unnamed datetime index
column, MetaTrader's and Binance's headerless layouts); an explicit ``columns`` mapping (canonical
name -> file column) overrides the detection. How the file is stored (compression, encoding,
separator, title and footer lines, decimal commas) is recognised from its content
(:mod:`lightning_tf.kline.reader.formats`); how cells are parsed is in :mod:`lightning_tf.kline.reader.parsing`.
``docs/kline_formats.md`` lists the layouts. Every file passes through
:func:`lightning_tf.kline.reader.validation.validate_bars`.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from lightning_tf.training import release_freed_memory

from .columns import CANONICAL_COLUMNS, NUMERIC_COLUMNS, TEXT_NAMES, detect_columns, normalise
from .formats import (
    COMPRESSED_SUFFIXES,
    EmptyTableError,
    TextTable,
    check_number_options,
    column_evidence,
    decide_number_format,
    decode_text,
    find_table,
    load_bytes,
    sample_evidence,
    split_fields,
    tongdaxin_title,
)
from .parsing import check_timezone, parse_numbers, parse_timestamps, parse_timestamps_described, time_of_day
from .pool import map_in_order, pool_workers
from .validation import PER_FILE, OnError, check_on_error, clean_order, validate_bars, validate_columns

__all__ = [
    "BAD_FILES_CHOICES",
    "CANONICAL_COLUMNS",
    "SUPPORTED_SUFFIXES",
    "BadFiles",
    "detect_columns",
    "list_bar_files",
    "parse_numbers",
    "parse_timestamps",
    "read_bars",
    "read_table",
]

log = logging.getLogger(__name__)

_TEXT_SUFFIXES = (".csv", ".txt", ".tsv")
_PARQUET_SUFFIXES = (".parquet", ".pq")
# A bar file: a text or Parquet file, a compressed text file, or a bare archive (Binance's .zip dumps).
SUPPORTED_SUFFIXES = (
    *_TEXT_SUFFIXES,
    *_PARQUET_SUFFIXES,
    *(t + c for t in _TEXT_SUFFIXES for c in COMPRESSED_SUFFIXES),
    *COMPRESSED_SUFFIXES,
)


BadFiles = Literal["error", "skip"]
BAD_FILES_CHOICES = ("error", "skip")
# Why a file (or a long table's ticker) is left out of the frame.
EMPTY = "empty"
UNREADABLE = "unreadable"
NO_COLUMNS = "without recognisable columns"
INVALID = "refused by validation"
AFTER_CUT = "with no bar before the cut"
_NAMED = 3  # names said per reason in the summary line
_HANDFUL = 5  # files whose warnings of one kind are said one by one; more are counted in one line


def _split_name(path: Path) -> tuple[str, str]:
    """``(stem, suffix)``: ``600977.csv.gz`` -> ``("600977", ".csv.gz")``; ``A.SH.csv`` -> ``("A.SH", ".csv")``."""
    name = path.name
    lower = name.lower()
    for suffix in sorted(SUPPORTED_SUFFIXES, key=len, reverse=True):
        if lower.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix
    return path.stem, path.suffix.lower()


def list_bar_files(path: str | Path) -> list[Path]:
    """The bar files under ``path``: the file itself, or the supported files of a folder and of its subfolders
    (a corpus kept as ``Stocks/`` and ``ETFs/``), sorted by path. Hidden files and folders (a name that starts
    with ``.``: notebook checkpoints, macOS ``._`` copies, ``.git``) are passed over; a linked folder is not
    entered (a linked file is read)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if path.is_file():
        if _split_name(path)[1] not in SUPPORTED_SUFFIXES:
            raise ValueError(f"{path}: unsupported file type; expected one of {list(SUPPORTED_SUFFIXES)}")
        return [path]
    files = []
    for root, folders, names in os.walk(path):
        folders[:] = [f for f in folders if not f.startswith(".")]
        for name in names:
            file = Path(root) / name
            if not name.startswith(".") and _split_name(file)[1] in SUPPORTED_SUFFIXES and file.is_file():
                files.append(file)
    if not files:
        raise ValueError(f"{path}: folder holds no {'/'.join(SUPPORTED_SUFFIXES)} files, nor do its subfolders")
    return sorted(files)


def read_table(
    path: str | Path, text_columns: tuple[str, ...] = (), decimal: str | None = None, thousands: str | None = None
) -> pd.DataFrame:
    """One text table (``,`` ``;`` or tab separated; UTF-8, UTF-16 or GBK; plain, gzip, zip, bz2
    or xz) or Parquet file, as stored, recognised by content (see :mod:`lightning_tf.kline.reader.formats`).

    Number columns are typed by pandas' fast parser with the detected decimal separator; a column
    with text in it (``$1.00``, ``1.234,5``, ``--``) stays text and is parsed later. Ticker-like
    and time-of-day columns (and ``text_columns``) are always read as text, so that codes such as
    ``000001`` and times such as ``0935`` keep their leading zeros. Title, footer and blank lines
    are dropped so that the index + ``attrs["header_lines"]`` + 1 is the file line number. A
    Parquet file's index becomes a column.

    Args:
        path: the file.
        text_columns: more columns to read as text.
        decimal: decimal separator (``"."`` or ``","``); None: detected.
        thousands: thousands separator (``""`` for none); None: detected.

    Returns:
        The table; ``attrs`` say how it was stored (``kind``, ``header_lines``, ``sep``,
        ``decimal``, ``thousands``, ``encoding``, ``compression``, ``skipped``, ``ticker``, ``layout``).
    """
    path = Path(path)
    source = str(path)
    check_number_options(decimal, thousands)
    data, compression = load_bytes(path)
    if data.startswith(b"PAR1"):
        df = pd.read_parquet(io.BytesIO(data))
        if isinstance(df.index, pd.DatetimeIndex) or not isinstance(df.index, pd.RangeIndex):
            df = df.reset_index()
        df.attrs.update(kind="parquet", compression=compression, header_lines=0)
        return df
    text, encoding = decode_text(data, source)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    table = find_table(lines, source)
    header_lines = table.first + (0 if table.header is None else 1)
    # Decide on the lines at both ends, then check the decision on every cell: pandas reads a cell as a
    # number only in the decided format, and each cell it leaves as text is classified as the sample
    # was. Where those cells change the decision (a decimal comma first seen on line 12,000), the table
    # is read again under the new one, or refused naming the line.
    evidence, complete = sample_evidence(lines, table)
    dec, thou, note = decide_number_format(evidence, table.sep, source, decimal, thousands)
    body = "\n".join(lines[table.first : table.stop])
    raw_names = table.names or split_fields(lines[table.first], table.sep)
    while True:  # ends: evidence only grows, and a reading that adds none keeps the decision
        df = _parse_text(body, table, raw_names, dec, text_columns, source)
        if complete:
            break
        evidence = evidence.merged(column_evidence(df, header_lines + 1))
        decision = decide_number_format(evidence, table.sep, source, decimal, thousands)
        again = decision[0] != dec
        dec, thou, note = decision
        if not again:
            break
    if note:
        log.warning(note)
    stripped = [str(c).strip() for c in df.columns]
    if stripped != list(df.columns) and len(set(stripped)) == len(stripped):  # TongDaXin pads its header names
        df.columns = stripped
    blank = _blank_rows(df)
    out = df[~blank] if blank.any() else df
    title = tongdaxin_title(table.skipped[0][1]) if table.skipped and table.skipped[0][0] <= table.first else None
    out.attrs = {
        "kind": "csv",
        "header_lines": header_lines,
        "sep": table.sep,
        "decimal": dec,
        "thousands": thou,
        "encoding": encoding,
        "compression": compression,
        "skipped": table.skipped,
        "layout": "tongdaxin" if title else table.layout,
        "title": title,
        "ticker": title["code"] if title else None,
    }
    return out


def _parse_text(
    body: str, table: TextTable, raw_names: list[str], dec: str, text_columns: tuple[str, ...], source: str
) -> pd.DataFrame:
    """The table's lines parsed by pandas with decimal separator ``dec``; a column holding a cell that
    is not a number in that format stays text."""
    text_names = {normalise(n) for n in TEXT_NAMES}
    as_text = dec == table.sep  # quoted decimal-comma cells in a ','-separated file: all parsed later
    dtype = {n: str for n in raw_names if as_text or normalise(n) in text_names or n.strip() in text_columns}
    try:
        with warnings.catch_warnings():  # pandas drops the fields beyond the header's with only this warning
            warnings.filterwarnings("error", "Length of header or names", pd.errors.ParserWarning)
            return pd.read_csv(
                io.BytesIO(body.encode("utf-8")),  # what pandas would encode a text buffer to, once
                sep=table.sep,
                dtype=dtype,
                keep_default_na=False,
                skip_blank_lines=False,
                header=None if table.header is None else 0,
                names=table.names,
                decimal="." if as_text else dec,
                index_col=False,
            )
    except pd.errors.ParserWarning:
        width = len(table.names) if table.names else len(next(csv.reader([body.splitlines()[0]], delimiter=table.sep)))
        rows = csv.reader(io.StringIO(body), delimiter=table.sep)
        line = next((i for i, row in enumerate(rows, 1) if len(row) > width), 1) + table.first
        raise ValueError(
            f"{source}: line {line} has more fields than the header's {width} (numbers with thousands separators "
            f"{table.sep!r} not in quotes, or a stray {table.sep!r}?); nothing was read"
        ) from None
    except (pd.errors.ParserError, ValueError) as e:
        message = re.sub(r"line (\d+)", lambda m: f"line {int(m[1]) + table.first}", str(e).strip())
        raise ValueError(f"{source}: cannot read the table ({message})") from None


def _blank_rows(df: pd.DataFrame) -> np.ndarray:
    blank = np.ones(len(df), dtype=bool)
    numeric = [d.kind in "biufc" for d in df.dtypes]
    for i in sorted(range(len(numeric)), key=lambda i: not numeric[i]):  # the cheap checks first
        c = df.iloc[:, i]
        if numeric[i]:
            blank &= np.isnan(c.to_numpy(np.float64))
        else:
            blank &= (c.isna() | (c.astype(str).str.strip() == "")).to_numpy()
        if not blank.any():
            break
    return blank


def _canonical_columns(
    df: pd.DataFrame, found: dict[str, str], timezone: str | None, decimal: str = ".", thousands: str = ","
) -> tuple[dict[str, np.ndarray], pd.DataFrame | None, str]:
    """The canonical columns as arrays (unparsed cells as NaN/NaT), the matching raw cells as text (None
    when every cell was read: no message will quote one), and how the timestamps were read."""
    ts_raw = df[found["timestamp"]]
    ts_text = ts_raw
    if "time" in found:
        date = ts_raw.astype(str).str.strip()
        ts_raw = date + " " + df[found["time"]].astype(str).str.strip()
        ts_text = date + " " + time_of_day(df[found["time"]]).fillna("?")
    stamps, how = parse_timestamps_described(ts_text, timezone)
    out = {"timestamp": stamps.to_numpy()}
    raw = {"timestamp": ts_raw}
    bad = {}
    for col in NUMERIC_COLUMNS:
        if col in found:
            values = df[found[col]]
            if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
                out[col], bad[col] = values.to_numpy(np.float64), None  # what parse_numbers gives, unwrapped
            else:
                numbers, bad[col] = parse_numbers(values, decimal, thousands)
                out[col] = numbers.to_numpy()
            raw[col] = values
    raw_frame = None
    if np.isnat(out["timestamp"]).any() or not all(np.isfinite(v).all() for k, v in out.items() if k != "timestamp"):
        # the cells as written, for the messages (a clean table needs none)
        raw_frame = pd.DataFrame(raw, index=df.index)
        for col, mask in bad.items():
            raw_frame[f"{col}__bad"] = False if mask is None else mask
    columns = f"{found['timestamp']!r}" + (f" + {found['time']!r}" if "time" in found else "")
    if timezone is not None and "local clock" in how:
        how += f"; timezone {timezone!r} applies to epochs only"
    return out, raw_frame, f"timestamps from {columns} as {how}"


def _describe(attrs: dict) -> str:
    """How a file was stored, in one line for the log."""
    if attrs.get("kind") == "frame":
        return "a DataFrame"
    if attrs.get("kind") == "parquet":
        return "Parquet" + (f" ({attrs['compression']})" if attrs.get("compression") else "")
    parts = [attrs["compression"]] if attrs.get("compression") else []
    parts.append(attrs["encoding"])
    parts.append(f"separator {attrs['sep']!r}, decimal {attrs['decimal']!r}")
    if attrs["thousands"]:
        parts[-1] += f", thousands {attrs['thousands']!r}"
    if attrs["layout"] == "tongdaxin":
        parts.append("TongDaXin export")
    elif attrs["layout"] != "header":
        parts.append(f"no header, columns by position ({attrs['layout']})")
    parts += [
        f"{'title' if n <= attrs['header_lines'] else 'footer'} line {n} {text!r} skipped"
        for n, text in attrs["skipped"]
    ]
    return ", ".join(parts)


def read_bars(
    path: str | Path | pd.DataFrame,
    columns: Mapping[str, str] | None = None,
    ticker_column: str | None = None,
    on_error: OnError = "error",
    max_gap: str | None = None,
    decimal: str | None = None,
    thousands: str | None = None,
    timezone: str | None = None,
    name: str | None = None,
    read_workers: int | None = None,
    progress: bool = True,
    extra_columns: tuple[str, ...] | list[str] = (),
    cut: str | None = None,
    bad_files: BadFiles = "error",
) -> pd.DataFrame:
    """Read bars into the canonical frame (see the module docstring), validated.

    Args:
        path: a bar file, or a folder with one file per ticker, subfolders included (the ticker is the file
            stem, or the code in a TongDaXin title line), or a DataFrame in any layout a file may have
            (columns detected the same way; a DatetimeIndex becomes the timestamp column).
        columns: canonical name -> file column, overriding detection (e.g. ``{"close": "Last Price"}``).
        ticker_column: column holding the ticker in a long table (detected by name when None:
            ticker, symbol, ts_code, code, 股票代码).
        on_error: what to do with bad rows: raise (``"error"``), drop them, or forward-fill them.
        max_gap: largest allowed spacing between bars as a pandas Timedelta string (``"7D"``);
            larger gaps raise under ``on_error="error"``. None: gaps are only reported in the log.
        decimal: decimal separator of text files, ``"."`` or ``","``; None: detected per file.
        thousands: thousands separator of text files (``""`` for none, ``","``, ``"."``, ``" "``,
            ``"'"``); None: detected per file.
        timezone: the exchange's time zone (e.g. ``"Asia/Shanghai"``), used only for Unix epoch
            timestamps (and strings with a UTC offset), which are converted from UTC to it. None:
            epochs are kept in UTC. Local time strings are never shifted.
        name: the ticker of a DataFrame or of a single file without a ticker column (default ``series``, the
            file's stem), and the name a DataFrame's errors give it.
        read_workers: processes reading the files of a folder side by side (see
            :func:`lightning_tf.kline.reader.pool.map_in_order`); 0: this process reads them; None: one per idle
            CPU core (by the load average) for folders of 8 MB per worker or more, else 0. The frame,
            the errors and the log lines are the same for any number.
        progress: show a bar of the files read once a folder's reading has taken two seconds.
        extra_columns: more numeric columns to keep (covariates: factors, turnover, fundamentals), by
            their name in the file (exact, else compared as the column detection compares names, so
            ``换手率`` or ``Turnover Rate`` are found), or a canonical column the file has (``amount``).
            Each is kept under the name asked for, as float64; an empty cell is NaN (the covariate's
            missing-value policy applies later). A name no column has, or a column holding text, is
            refused in one line naming the file and the column.
        cut: a date or time on the bars' clock (``"2008-06-24"``): every bar at or after it is dropped as
            its file is read, before validation, so none is checked, kept or returned (a corpus read for
            pretraining never sees an evaluation's validation or test dates, nor fails on a bad bar among
            them). A bar whose date cannot be read goes with the readable dates around it in its file: it is
            dropped when they are at or after the cut. A file with no bar before the cut is left out (and
            counted, under either ``bad_files``); a cut after the data's last bar is said in one warning.
            None: no cut.
        bad_files: what a file that cannot be used does (empty or a header alone, not a readable table, no
            recognisable columns, or refused by validation under ``on_error``): ``"error"`` raises its
            error; ``"skip"`` leaves it out (a ticker of a long table alone), and one warning line counts what
            was left out by reason, with a few names (each one's error is logged at INFO level). A folder
            where nothing is left to read is refused in one line naming it.

    Returns:
        The canonical frame, sorted by ticker then timestamp, with a fresh RangeIndex. Its
        ``attrs["read"]`` counts the ``files`` read, the ``left_out`` ones by reason and the bars the cut
        dropped (``cut_bars``).
    """
    check_number_options(decimal, thousands)
    check_timezone(timezone)
    check_on_error(on_error)
    if bad_files not in BAD_FILES_CHOICES:
        raise ValueError(f"bad_files must be one of {BAD_FILES_CHOICES}, got {bad_files!r}")
    cut_at = _parse_cut(cut)
    extra = tuple(str(c) for c in extra_columns)
    one_file = name if not isinstance(path, pd.DataFrame) and Path(path).is_file() else None
    options = _Options(
        dict(columns or {}),
        ticker_column,
        on_error,
        max_gap,
        decimal,
        thousands,
        timezone,
        extra,
        cut_at,
        bad_files,
        one_file,
    )
    if isinstance(path, pd.DataFrame):
        table = path.reset_index() if not isinstance(path.index, pd.RangeIndex) else path.reset_index(drop=True)
        table.attrs = {"kind": "frame", "header_lines": 0}
        sources: list[tuple[Any, pd.DataFrame | None]] = [(name or "series", table)]
        where = name or "series"
    else:
        sources = [(file, None) for file in list_bar_files(path)]
        where = str(path)
    files = [file for file, given in sources if given is None]
    workers = pool_workers(read_workers, len(sources), sum(file.stat().st_size for file in files))
    origin: dict[str, Any] = {}
    names, parts = [], []
    left_out: list[tuple[str, str]] = []  # (name, reason)
    cut_bars = 0
    read = map_in_order(partial(_read_source, options=options), sources, workers)
    show = progress and len(sources) > 1  # a folder of files
    with (
        _PerFileWarnings(where, path),
        tqdm(
            total=len(sources),
            desc=f"reading {path}" if show else "",
            unit="file",
            delay=2,
            disable=not show,
            leave=False,
        ) as bar,
    ):
        for (file, _), got in zip(sources, read, strict=True):
            bar.update()
            cut_bars += got.cut
            for ticker, reason, message in got.left_out:
                label = _label(file, path) + ("" if ticker is None else f" ({ticker})")
                left_out.append((label, reason))
                log.info("%s; left out (%s)", message.partition("\n")[0], reason)
            for ticker, part in got.tickers:
                if ticker in origin:
                    raise ValueError(f"{file}: ticker {ticker!r} also comes from {origin[ticker]}; one file per ticker")
                origin[ticker] = file
                if isinstance(part, ValueError):
                    raise part from None
                names.append(ticker)
                parts.append(part)
    if not names:
        raise ValueError(_nothing_left(where, len(sources), left_out, cut))
    if left_out:
        log.warning("%s", _left_out_line(where, len(sources), left_out, cut))
    frame = _stack(names, parts, extra)
    del parts
    release_freed_memory()
    if cut_at is not None and cut_bars == 0:
        last = pd.Timestamp(frame["timestamp"].max())
        log.warning("%s: the cut %s is after the data's last bar (%s): no bar was cut", where, cut, last)
    reasons = [reason for _, reason in left_out]
    frame.attrs["read"] = {
        "files": len(sources),
        "left_out": {r: reasons.count(r) for r in dict.fromkeys(reasons)},
        "cut_bars": cut_bars,
    }
    return frame


class _PerFileWarnings(logging.Filter):
    """Holds back the reader's warnings about one file (records with a ``PER_FILE`` attribute) while a folder
    is read, then says each kind file by file when a handful of files have it, else in one line that counts
    them, names a few and sums their counts (each file's line is then said at INFO level). Records of the
    reading workers pass: they are held when the parent handles them."""

    def __init__(self, where: str, root: str | Path | pd.DataFrame) -> None:
        super().__init__()
        self.where, self.root, self.pid = where, root, os.getpid()
        self.held: list[logging.LogRecord] = []
        self.loggers = [logging.getLogger(name) for name in (__name__, __name__.rsplit(".", 1)[0] + ".validation")]

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, PER_FILE, None) is None or os.getpid() != self.pid:
            return True
        self.held.append(record)
        return False

    def __enter__(self) -> _PerFileWarnings:
        for logger in self.loggers:
            logger.addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for logger in self.loggers:
            logger.removeFilter(self)
        kinds: dict[str, list[logging.LogRecord]] = {}
        for record in self.held:
            kinds.setdefault(getattr(record, PER_FILE)[0], []).append(record)
        summaries = []
        for record in self.held:
            logger = logging.getLogger(record.name)
            if len(kinds[getattr(record, PER_FILE)[0]]) > _HANDFUL:
                record.levelno, record.levelname = logging.INFO, "INFO"
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
        for kind, records in kinds.items():
            if len(records) > _HANDFUL:
                summaries.append(self._summary(kind, [getattr(r, PER_FILE) for r in records]))
        for line in summaries:
            log.warning("%s", line)

    def _summary(self, kind: str, found: list[tuple[str, str, dict[str, int]]]) -> str:
        totals: dict[str, int] = {}
        for _, _, counts in found:
            for what, n in counts.items():
                totals[what] = totals.get(what, 0) + n
        shown = ", ".join(_label(Path(file), self.root) for _, file, _ in found[:_NAMED])
        shown += f" and {len(found) - _NAMED:,} more"
        summed = ", ".join(f"{n:,} {what}" for what, n in totals.items())
        files = {re.sub(r" \([^()/]*\)$", "", str(file)) for _, file, _ in found}  # "long.csv (AAPL)": its ticker
        series = "files" if len(files) == len(found) else "series"
        return f"{self.where}: {len(found):,} {series} {kind}: {summed + ' in all; ' if summed else ''}{shown}"


def _parse_cut(cut: str | None) -> np.datetime64 | None:
    """``cut`` as a datetime64[ns] on the bars' (naive, local) clock; None for none."""
    if cut is None:
        return None
    try:
        stamp = pd.Timestamp(cut)
    except (ValueError, TypeError):
        stamp = pd.NaT
    if stamp is pd.NaT:
        raise ValueError(f"cut {cut!r} is not a date or time (e.g. '2008-06-24')")
    if stamp.tzinfo is not None:
        raise ValueError(
            f"cut {cut!r} has a UTC offset; bars are stamped on the exchange's local clock: give the cut on it "
            "(e.g. '2008-06-24')"
        )
    return stamp.to_datetime64().astype("datetime64[ns]")


def _when(stamp: np.datetime64) -> str:
    """A timestamp as a user writes it: the date alone at midnight."""
    t = pd.Timestamp(stamp)
    return str(t.date()) if t is not pd.NaT and t == t.normalize() else str(t)


def _before_cut(stamps: np.ndarray, cut: np.datetime64) -> np.ndarray:
    """Which bars lie before ``cut``: those stamped before it, and those without a readable stamp unless the
    readable stamps nearest to them in the file (before and after, where there are) are all at or after it
    (in a file sorted either way such a bar is after the cut too)."""
    keep = stamps < cut  # NaT compares False
    nat = np.isnat(stamps)
    if nat.any():
        column = pd.Series(stamps)
        before, after = column.ffill().to_numpy(), column.bfill().to_numpy()
        late_before, late_after = np.isnat(before) | (before >= cut), np.isnat(after) | (after >= cut)
        known = ~np.isnat(before) | ~np.isnat(after)
        keep |= nat & ~(late_before & late_after & known)
    return keep


def _warn_order_breaks(stamps: np.ndarray, rows: np.ndarray, source: str, label: str) -> None:
    """Say so when one series' bars are in time order (either way) but for a few (a mistyped date: 2030 for 2017,
    which sorting would move to the end as the series' last bar). Any order is sorted; a shuffled table is not
    noted."""
    stamps = np.asarray(stamps, dtype="datetime64[ns]")
    valid = ~np.isnat(stamps)
    ticks, rows = stamps[valid].view(np.int64), np.asarray(rows)[valid]
    steps = np.diff(ticks)
    up, down = int((steps > 0).sum()), int((steps < 0).sum())
    breaks = min(up, down)
    if not 0 < breaks <= max(2, len(steps) // 100):
        return
    i = int(np.flatnonzero(steps < 0 if up >= down else steps > 0)[0])
    before, after = (str(pd.Timestamp(t)).removesuffix(" 00:00:00") for t in stamps[valid][i : i + 2])
    log.warning(
        "%s: %d bar(s) out of time order, the first at %s %d (%s after %s); sorted by time: check for a mistyped date",
        source,
        breaks,
        label,
        rows[i + 1],
        after,
        before,
        extra={PER_FILE: ("have bars out of time order (sorted by time)", source, {"bars out of order": breaks})},
    )


def _label(file: Any, root: str | Path | pd.DataFrame) -> str:
    """A file's name in the summary: its path inside the folder read, else its name."""
    if isinstance(file, Path) and isinstance(root, str | Path) and Path(root).is_dir():
        return str(file.relative_to(root))
    return file.name if isinstance(file, Path) else str(file)


def _by_reason(left_out: list[tuple[str, str]], cut: str | None) -> str:
    """``32 empty (a, b, c and 29 more); 2 refused by validation (d, e)``."""
    groups: dict[str, list[str]] = {}
    for name, reason in left_out:
        groups.setdefault(reason, []).append(name)
    parts = []
    for reason, found in groups.items():
        shown = ", ".join(found[:_NAMED]) + (f" and {len(found) - _NAMED:,} more" if len(found) > _NAMED else "")
        said = f"{reason} {cut}" if reason == AFTER_CUT else reason
        parts.append(f"{len(found):,} {said} ({shown})")
    return "; ".join(parts)


def _left_out_line(where: str, n_files: int, left_out: list[tuple[str, str]], cut: str | None) -> str:
    return f"{where}: {n_files:,} files; left out: {_by_reason(left_out, cut)}"


def _nothing_left(where: str, n_files: int, left_out: list[tuple[str, str]], cut: str | None) -> str:
    if all(reason == AFTER_CUT for _, reason in left_out):
        return f"{where}: no bar before the cut {cut} in any of its {n_files:,} files"
    return f"{where}: no readable bar file among its {n_files:,} files: {_by_reason(left_out, cut)}"


@dataclass(frozen=True)
class _Options:
    """How :func:`read_bars` reads each source (what a worker process needs to know)."""

    columns: dict[str, str]
    ticker_column: str | None
    on_error: OnError
    max_gap: str | None
    decimal: str | None
    thousands: str | None
    timezone: str | None
    extra_columns: tuple[str, ...] = ()
    cut: np.datetime64 | None = None
    bad_files: BadFiles = "error"
    name: str | None = None  # the ticker of a single file without a ticker column (else its stem)


def _extra_columns(
    df: pd.DataFrame,
    found: dict[str, str],
    names: tuple[str, ...],
    number_format: tuple[str, str],
    source: str,
    where: tuple[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """The ``extra_columns`` of :func:`read_bars` as float64 arrays (NaN where a cell is empty), or a
    ValueError naming the file and the column (not found, or holding text)."""
    out: dict[str, np.ndarray] = {}
    by_norm: dict[str, str] = {}
    for col in df.columns:
        by_norm.setdefault(normalise(col), str(col))
    for name in names:
        col = name if name in df.columns else by_norm.get(normalise(name)) or found.get(name)
        if col is None or col not in df.columns:
            raise ValueError(f"{source}: covariate column {name!r} not found; columns are {list(map(str, df.columns))}")
        values = df[col]
        numbers, bad = parse_numbers(values, *number_format)
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            raise ValueError(
                f"{source}: covariate column {name!r} holds text ({str(values.iloc[i])!r} at {where[0]} {where[1][i]}); "
                "covariates must be numeric"
            )
        out[name] = numbers.to_numpy(np.float64)
    return out


@dataclass
class _SourceBars:
    """What one file (or DataFrame) gave :func:`read_bars`: ``(ticker, bars)`` in ticker order, with the
    ValueError of a ticker that failed validation in place of its bars (raised by the caller in turn, after
    the tickers before it were checked against the other files); what was left out, as ``(ticker or None
    for the whole file, reason, error)``; and how many bars the cut dropped."""

    tickers: list[tuple[str, Any]]
    left_out: list[tuple[str | None, str, str]]
    cut: int = 0


class _LeftOut(Exception):  # noqa: N818  # not an error: a file left out, turned into a value at once
    def __init__(self, reason: str, message: str, cut: int = 0) -> None:
        super().__init__(message)
        self.reason, self.cut = reason, cut


@contextmanager
def _left_out_as(reason: str, skip: bool) -> Iterator[None]:
    """Under ``bad_files="skip"``, the block's error leaves its file out for ``reason`` (``EMPTY`` for an
    empty table); otherwise it is raised as it is."""
    if not skip:
        yield
        return
    try:
        yield
    except EmptyTableError as e:
        raise _LeftOut(EMPTY, str(e)) from None
    except (ValueError, OSError, OverflowError) as e:
        raise _LeftOut(reason, str(e)) from None


def _read_source(source: tuple[Any, pd.DataFrame | None], options: _Options) -> _SourceBars:
    """One file's (or DataFrame's) bars, validated ticker by ticker, or what left it out."""
    try:
        return _read_bars_of(source, options)
    except _LeftOut as e:
        return _SourceBars([], [(None, e.reason, str(e))], e.cut)


def _read_bars_of(source: tuple[Any, pd.DataFrame | None], options: _Options) -> _SourceBars:
    file, given = source
    o = options
    skip = o.bad_files == "skip"
    with _left_out_as(UNREADABLE, skip):
        if given is None:
            df = read_table(file, () if o.ticker_column is None else (o.ticker_column,), o.decimal, o.thousands)
        else:
            df = given
        # pandas deep-copies attrs into every frame and column derived from this one: keep them aside.
        attrs, df.attrs = df.attrs, {}
        if df.empty:
            raise EmptyTableError(
                f"{file}: the file is empty (no rows below the header)"
                if given is None
                else f"{file}: the table is empty (no rows)"
            )
    csv = attrs.get("kind") == "csv"
    explicit = dict(o.columns)
    if o.ticker_column is not None:
        explicit["ticker"] = o.ticker_column
    with _left_out_as(NO_COLUMNS, skip):
        found = detect_columns(df, explicit, source=str(file))
    number_format = attrs.get("decimal", "."), attrs.get("thousands", ",")
    with _left_out_as(INVALID, skip):
        canonical, raw, how = _canonical_columns(df, found, o.timezone, *number_format)
    cut, left_out = 0, []
    if o.cut is not None:
        keep = _before_cut(canonical["timestamp"], o.cut)
        cut = len(keep) - int(keep.sum())
        if cut == len(keep):
            first = _when(np.min(canonical["timestamp"]))  # NaT only when no date could be read
            raise _LeftOut(AFTER_CUT, f"{file}: no bar before the cut {_when(o.cut)} (the first is {first})", cut)
        if cut:
            if "ticker" in found:  # a long table's tickers with no bar before the cut are left out by name
                tickers = df[found["ticker"]].astype(str).str.strip()
                late = sorted(set(tickers[~keep]) - set(tickers[keep]))
                left_out += [(t, AFTER_CUT, f"{file}: ticker {t!r} has no bar before the cut") for t in late]
            canonical = {k: v[keep] for k, v in canonical.items()}
            raw = None if raw is None else raw[keep]
            df = df[keep]
    if "volume" not in found:
        log.warning(
            "%s: no volume column; volume is set to 0 (volume features are then constant)",
            file,
            extra={PER_FILE: ("have no volume column (volume is set to 0)", str(file), {})},
        )
    log.info("%s: %s; %s", file, _describe(attrs), how)
    if "volume" not in found:
        canonical["volume"] = np.zeros(len(df))
    # Report what a user finds in an editor: file line numbers of text files, 1-based Parquet rows.
    rows = np.asarray(df.index) + 1 + (attrs["header_lines"] if csv else 0)
    with _left_out_as(NO_COLUMNS, skip):
        extra = _extra_columns(df, found, o.extra_columns, number_format, str(file), ("line" if csv else "row", rows))
    checks = {"source": str(file), "on_error": o.on_error, "max_gap": o.max_gap, "row_label": "line" if csv else "row"}
    if "ticker" not in found:
        _warn_order_breaks(canonical["timestamp"], rows, str(file), checks["row_label"])
        default = file if given is not None else _split_name(file)[0]
        ticker = str(o.name or attrs.get("ticker") or default)
        # A clean file is checked on its arrays; a file with a problem goes through validate_bars, which names it.
        with _left_out_as(INVALID, skip):
            part = None if raw is not None else validate_columns(canonical, rows, **checks)
        if part is not None:
            if extra:  # sorted as the bars were (validate_columns checked the canonical columns only)
                order = clean_order(canonical, rows)
                part.update({k: v[order] for k, v in extra.items()})
            return _SourceBars([(ticker, part)], left_out, cut)
        groups = [(ticker, None)]
    else:
        tickers = df[found["ticker"]].astype(str).str.strip()
        groups = [(str(n), idx) for n, idx in tickers.groupby(tickers, sort=True).groups.items()]
    frame = pd.DataFrame({**canonical, **{f"_extra_{k}": v for k, v in extra.items()}, "_row": rows}, index=df.index)
    out: list[tuple[str, Any]] = []
    for ticker, idx in groups:
        try:
            named = checks if idx is None else {**checks, "source": f"{file} ({ticker})"}  # a long table's ticker
            part_of = frame if idx is None else frame.loc[idx]
            _warn_order_breaks(
                part_of["timestamp"].to_numpy(), part_of["_row"].to_numpy(), named["source"], checks["row_label"]
            )
            bars = validate_bars(part_of, raw if idx is None or raw is None else raw.loc[idx], **named)
        except ValueError as e:
            if not skip:
                out.append((ticker, e))
                break  # nothing after it is read: the caller raises it
            if idx is None:
                raise _LeftOut(INVALID, str(e), cut) from None
            left_out.append((ticker, INVALID, str(e)))
            continue
        part = {c: bars[c].to_numpy() for c in bars.columns}
        for k in extra:
            part[k] = part.pop(f"_extra_{k}")
        out.append((ticker, part))
    return _SourceBars(out, left_out, cut)


def _stack(names: list[str], parts: list[dict[str, np.ndarray]], extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """The tickers' bars one after another in ticker order, with a ``ticker`` column, copied part by
    part into columns allocated once (each part is released once copied, so the panel is held about
    once, not twice)."""
    order = sorted(range(len(names)), key=names.__getitem__)
    present = {c for p in parts for c in p}
    numeric = [c for c in NUMERIC_COLUMNS if c in present] + [c for c in extra if c not in NUMERIC_COLUMNS]
    lengths = np.array([len(p["timestamp"]) for p in parts], dtype=np.int64)
    n = int(lengths.sum())
    stamps = np.empty(n, dtype="datetime64[ns]")
    values = {c: np.empty(n, dtype=np.float64) for c in numeric}
    start = 0
    for i in order:
        part, stop = parts[i], start + int(lengths[i])
        stamps[start:stop] = part["timestamp"]
        for c in numeric:
            values[c][start:stop] = part[c] if c in part else np.nan
        parts[i] = None  # type: ignore[call-overload]  # this part is copied: let it go
        start = stop
    # One str object per ticker, referenced from each of its rows (a str column would hold one per row).
    ticker = pd.Series(np.repeat(np.array([names[i] for i in order], dtype=object), lengths[order]), dtype=object)
    return pd.DataFrame({"ticker": ticker, "timestamp": stamps, **values}, copy=False)
