"""How a bar file is stored: compression, text encoding, the table's place in the text and the way
its numbers are written.

Everything here is decided from the bytes, never from the file name alone:

- **Compression** by magic bytes: gzip (``1f 8b``), zip with one member (``PK``), bz2 (``BZh``) and
  xz (``fd 37 7a 58 5a 00``); Parquet (``PAR1``) inside any of them or bare.
- **Encoding**: UTF-8 (with or without BOM), UTF-16 with a BOM (Excel's "Unicode text"), else GBK
  (GB18030), the encoding of Chinese exports such as TongDaXin's.
- **Table**: the separator (tab, then ``;``, then ``,``) is the one that splits the first lines into
  the same number of fields; lines before the header with fewer fields are title lines
  (TongDaXin's ``003040 楚天龙 日线 不复权``), one-field text lines after the last row are footers
  (``数据来源:通达信``, barchart's ``Downloaded from Barchart.com ...``). A table whose first line
  holds only numbers and dates has no header; its columns are named by position (Binance klines,
  MetaTrader's ``2024.01.02,00:00,...``).
- **Numbers**: the decimal and thousands separators, decided on the lines at both ends of the
  table (see :func:`decide_number_format`); the reader then checks the decision on every cell of the
  columns pandas could not read as numbers under it (:func:`lightning_tf.kline.reader.io.read_table`).
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import lzma
import re
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = [
    "COMPRESSED_SUFFIXES",
    "EmptyTableError",
    "NumberEvidence",
    "TextTable",
    "check_number_options",
    "column_evidence",
    "decide_number_format",
    "decode_text",
    "detect_number_format",
    "find_table",
    "load_bytes",
    "number_evidence",
    "sample_evidence",
    "split_fields",
    "tongdaxin_title",
]

COMPRESSED_SUFFIXES = (".gz", ".zip", ".bz2", ".xz")


class EmptyTableError(ValueError):
    """A file or table without a single row (zero bytes, blank lines, or a header alone)."""


SEPARATORS = ("\t", ";", ",")
DECIMALS = (".", ",")
THOUSANDS = ("", ",", ".", " ", "'")
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"PK\x03\x04", "zip"),
    (b"PK\x05\x06", "zip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
)
_EXCEL_XLS = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Column order of headerless kline files (Binance's public data dumps).
BINANCE_COLUMNS = (
    "open_time",
    "open",
    "high",
    "low",
    "close",
    "volume",
    "close_time",
    "quote_volume",
    "count",
    "taker_buy_volume",
    "taker_buy_quote_volume",
    "ignore",
)
# MetaTrader's headerless history export: date, time, then OHLC and (tick) volume.
METATRADER_COLUMNS = ("date", "time", "open", "high", "low", "close", "volume")
DATE_FIRST_COLUMNS = ("date", "open", "high", "low", "close", "volume")
_CURRENCY = "$¥￥€£"
# A cell that is data, not a name: digits with separators, signs, currency, date/time punctuation.
_DATA_CELL = re.compile(rf"[+\-]?[{_CURRENCY}]?[\d.,:/\-\s]*\d[\d.,:/\-\sTZ+eE]*%?|-*|(?i:nan|inf|-inf|null|none)")
_DATE = re.compile(r"\d{4}[-/.]\d{1,2}[-/.]\d{1,2}.*|\d{1,2}[-/.]\d{1,2}[-/.]\d{4}.*|\d{8}")
_TIME = re.compile(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?")
_NUMBER = re.compile(r"[+\-]?\d+(\.\d*)?([eE][+\-]?\d+)?")
_TONGDAXIN_TITLE = re.compile(
    r"\s*(?P<code>[0-9A-Za-z#.]+)\s+(?P<name>.+?)\s+(?P<period>\S*线)\s*(?P<adjust>\S*复权)?\s*"
)
_SAMPLE_LINES = 100  # lines read from each end of the table to decide the number format
_MAX_TITLE_LINES = 10
_MAX_FOOTER_LINES = 3


def load_bytes(path: Path) -> tuple[bytes, str | None]:
    """The file's bytes, decompressed when they start with a gzip, zip, bz2 or xz signature.

    Returns:
        ``(data, compression)`` with compression ``"gzip"``, ``"zip"``, ``"bz2"``, ``"xz"`` or None.
    """
    data = path.read_bytes()
    kind = next((name for magic, name in _MAGIC if data.startswith(magic)), None)
    if data.startswith(_EXCEL_XLS):
        raise ValueError(f"{path}: an Excel workbook (.xls), not a text table; save the sheet as CSV")
    if kind is None:
        return data, None
    try:
        if kind == "gzip":
            return gzip.decompress(data), kind
        if kind == "bz2":
            return bz2.decompress(data), kind
        if kind == "xz":
            return lzma.decompress(data), kind
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [
                i.filename for i in archive.infolist() if not i.is_dir() and not i.filename.startswith("__MACOSX/")
            ]
            if "[Content_Types].xml" in names and any(n.startswith("xl/") for n in names):
                raise ValueError(f"{path}: an Excel workbook (.xlsx), not a text table; save the sheet as CSV")
            if len(names) != 1:
                raise ValueError(
                    f"{path}: zip archive holds {len(names)} files {names}; expected exactly one bar file "
                    "(extract the one to read, or zip each file on its own)"
                )
            return archive.read(names[0]), kind
    except (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: starts like a {kind} file but cannot be decompressed ({e})") from None


def decode_text(data: bytes, source: str) -> tuple[str, str]:
    """Decode a text table: UTF-8 (BOM or not), UTF-16 with a BOM, else GBK/GB18030.

    Returns:
        ``(text, encoding)``.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16"), "utf-16"
    if b"\x00" in data[:4096]:
        raise ValueError(
            f"{source}: binary content (first bytes {data[:8]!r}) that is not gzip, zip, bz2, xz, Parquet "
            "or text; decompress or convert it to CSV first"
        )
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding), "utf-8" if encoding == "utf-8-sig" else "gbk"
        except UnicodeDecodeError:
            continue
    raise ValueError(f"{source}: text is neither UTF-8, UTF-16 nor GBK; save it as UTF-8")


@dataclass
class TextTable:
    """Where the table lies in a text file (0-based line indices) and how it is written."""

    sep: str
    header: int | None  # the header line; None for a headerless table
    first: int  # the first line of the table (the header, or the first row when headerless)
    stop: int  # one past the last line of the table (footers excluded)
    names: list[str] | None = None  # column names given by position to a headerless table
    layout: str = "header"  # "header", "binance", "metatrader", "date-first"
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, text): titles, footers


def check_number_options(decimal: str | None, thousands: str | None) -> None:
    """Raise unless ``decimal`` and ``thousands`` are None (detect) or separators that can be read."""
    if decimal is not None and decimal not in DECIMALS:
        raise ValueError(f"decimal must be one of {DECIMALS} or None (detect), got {decimal!r}")
    if thousands is not None and thousands not in THOUSANDS:
        raise ValueError(f"thousands must be one of {THOUSANDS} or None (detect), got {thousands!r}")
    if decimal is not None and decimal == thousands:
        raise ValueError(f"decimal and thousands separators must differ, both are {decimal!r}")


def split_fields(line: str, sep: str) -> list[str]:
    if '"' not in line:  # nothing quoted: what the csv module gives, without it
        return line.split(sep) if line else []
    try:
        return next(csv.reader([line], delimiter=sep))
    except (csv.Error, StopIteration):
        return line.split(sep)


def _is_data(cell: str) -> bool:
    return _DATA_CELL.fullmatch(cell.strip()) is not None


def _nonblank(lines: list[str], order: range, n: int) -> list[int]:
    """The first ``n`` indices in ``order`` of lines that are not blank."""
    found = []
    for i in order:
        if lines[i].strip():
            found.append(i)
            if len(found) == n:
                break
    return found


def find_table(lines: list[str], source: str) -> TextTable:
    """Locate the table in ``lines``: separator, title lines, header (or none), footer lines."""
    head = _nonblank(lines, range(len(lines)), 50)
    if not head:
        raise EmptyTableError(f"{source}: the file is empty (no rows)")
    for sep in SEPARATORS:
        counts = [len(split_fields(lines[i], sep)) for i in head]
        widths = Counter(c for c in counts if c > 1)
        if not widths:
            continue
        width = widths.most_common(1)[0][0]
        k = counts.index(width)
        rest = counts[k:]
        if sum(c == width for c in rest) >= 0.8 * len(rest) and k <= _MAX_TITLE_LINES:
            break
    else:
        raise ValueError(f"{source}: no table separated by tabs, ';' or ',' found in the first lines")
    first = head[k]
    cells = split_fields(lines[first], sep)
    headerless = all(_is_data(c) for c in cells)
    if headerless and k > 0 and not all(_is_data(c) for c in split_fields(lines[head[k - 1]], sep)):
        # A header one field short of the rows (rows end with a separator): the names are still a header.
        k, first, headerless = k - 1, head[k - 1], False
    skipped = [(i + 1, lines[i].strip()) for i in head[:k]]
    tail = _nonblank(lines, range(len(lines) - 1, first, -1), _MAX_FOOTER_LINES + 1)
    stop = (tail[0] if tail else first) + 1
    for i in tail[:_MAX_FOOTER_LINES]:
        line_cells = split_fields(lines[i], sep)
        if len(line_cells) != 1 or _is_data(line_cells[0]):
            break
        stop = i
    skipped += [(i + 1, lines[i].strip()) for i in reversed(tail) if i >= stop]
    table = TextTable(sep=sep, header=None if headerless else first, first=first, stop=stop, skipped=skipped)
    if headerless:
        table.names, table.layout = _positional_names(cells, source)
    return table


def _positional_names(cells: list[str], source: str) -> tuple[list[str], str]:
    """Column names for a headerless table, from what its first row holds."""
    cells = [c.strip() for c in cells]
    n = len(cells)
    if n >= 6 and all(_NUMBER.fullmatch(c) for c in cells) and len(cells[0].split(".")[0].lstrip("-")) >= 10:
        base, layout = BINANCE_COLUMNS, "binance"
    elif n >= 6 and _DATE.fullmatch(cells[0]) and _TIME.fullmatch(cells[1]):
        base, layout = METATRADER_COLUMNS, "metatrader"
    elif n >= 5 and _DATE.fullmatch(cells[0]):
        base, layout = DATE_FIRST_COLUMNS, "date-first"
    else:
        raise ValueError(
            f"{source}: the first line {','.join(cells)!r} has no column names, and its first field is neither "
            "an epoch time nor a date; add a header line (date, open, high, low, close, volume)"
        )
    return [*base, *(f"column_{i}" for i in range(len(base), n))][:n], layout


def tongdaxin_title(line: str) -> dict[str, str] | None:
    """``{"code", "name", "period", "adjust"}`` of a TongDaXin title (``003040 楚天龙 日线 不复权``)."""
    m = _TONGDAXIN_TITLE.fullmatch(line)
    return None if m is None else {k: v or "" for k, v in m.groupdict().items()}


def _classify(cell: str) -> tuple[str, str, str | None] | None:
    """What one cell says about the number format: ``("proof", decimal, thousands or None)`` when it
    shows which separator is the decimal one, ``("ambiguous", c, None)`` for ``1,234`` or ``1.234``,
    None when it says nothing (no separator, or not a number: dates such as ``2024.01.02``)."""
    s = re.sub(rf"[\s{_CURRENCY}]", "", cell).lstrip("+-")
    if not s or not s[0].isdigit() or not re.fullmatch(r"[\d.,]+", s):
        return None
    if "," in s and "." in s:  # 1.234,56 or 1,234.56: the last separator is the decimal one
        dec = "," if s.rfind(",") > s.rfind(".") else "."
        thou = "." if dec == "," else ","
        whole, _, frac = s.rpartition(dec)
        grouped = frac.isdigit() and re.fullmatch(rf"\d{{1,3}}(\{thou}\d{{3}})+", whole)
        return ("proof", dec, thou) if grouped else None
    c = "," if "," in s else "." if "." in s else None
    if c is None:
        return None
    other = "." if c == "," else ","
    parts = s.split(c)
    if len(parts) > 2:  # 1,234,567: c groups thousands, so the other one is the decimal separator
        grouped = 1 <= len(parts[0]) <= 3 and all(len(p) == 3 for p in parts[1:])
        return ("proof", other, c) if grouped else None
    whole, frac = parts
    if not whole:
        return None
    if len(frac) != 3 or len(whole) > 3 or whole == "0":
        return "proof", c, None
    return "ambiguous", c, None


@dataclass
class NumberEvidence:
    """What some cells say about the number format: for each decimal separator a cell proving it
    (``proofs``) and a cell that could be read either way (``ambiguous``, ``1,234``), and the
    thousands separators seen grouping digits in proving cells. Examples are written as the
    messages quote them: ``'12,5'``, or ``'12,5' on line 11002`` for cells found beyond the sample."""

    proofs: dict[str, str] = field(default_factory=dict)
    ambiguous: dict[str, str] = field(default_factory=dict)
    grouping: set[str] = field(default_factory=set)

    def merged(self, other: NumberEvidence) -> NumberEvidence:
        """The evidence of both, this one's examples first."""
        return NumberEvidence(
            {**other.proofs, **self.proofs}, {**other.ambiguous, **self.ambiguous}, self.grouping | other.grouping
        )

    def key(self) -> tuple:
        return tuple(sorted(self.proofs)), tuple(sorted(self.ambiguous)), tuple(sorted(self.grouping))


# What a cell says about the number format depends on its separators, the lengths of its digit runs and
# whether its whole part is "0" (see _classify): mapping the digits 1-9 to "1" keeps all of that, so the
# cells of a file collapse to a few dozen shapes, each classified once.
_SHAPES = str.maketrans("123456789", "111111111")


def number_evidence(cells: list[str], lines: list[int] | None = None) -> NumberEvidence:
    """The evidence of ``cells`` (see :class:`NumberEvidence`), exactly what classifying each cell in
    turn gives, at the cost of a few string operations over all of them.

    Args:
        cells: the cells, in file order.
        lines: the 1-based file line of each cell, to name in the examples; None: not named.
    """
    text = "\n".join(cells)
    if text.count("\n") != len(cells) - 1:  # a quoted cell holding a line break
        return _evidence([c.translate(_SHAPES) for c in cells], cells.__getitem__, lines)
    return _text_evidence(text, lines)


def _text_evidence(text: str, lines: list[int] | None = None) -> NumberEvidence:
    """The evidence of the cells of ``text``, one per line."""
    shapes = text.translate(_SHAPES).split("\n")

    def cell(i: int) -> str:  # the shapes have the cells' lengths: the i-th cell starts after i breaks
        start = sum(map(len, shapes[:i])) + i
        return text[start : start + len(shapes[i])]

    return _evidence(shapes, cell, lines)


def _evidence(shapes: list[str], cell: Callable[[int], str], lines: list[int] | None) -> NumberEvidence:
    """The evidence of cells given by their shapes, each shape classified once; ``cell(i)`` is the i-th
    cell as written, for the examples."""
    evidence = NumberEvidence()
    first: dict[tuple[str, str], str] = {}  # (kind, separator) -> the shape of its first cell
    for shape in dict.fromkeys(shapes):  # in order of first appearance
        if "." not in shape and "," not in shape:
            continue
        verdict = _classify(shape)
        if verdict is None:
            continue
        kind, c, thou = verdict
        first.setdefault((kind, c), shape)
        if thou is not None:
            evidence.grouping.add(thou)
    for (kind, c), shape in first.items():
        i = shapes.index(shape)
        example = repr(cell(i).strip()) + ("" if lines is None else f" on line {lines[i]}")
        (evidence.proofs if kind == "proof" else evidence.ambiguous)[c] = example
    return evidence


def detect_number_format(
    rows: list[list[str]], sep: str, source: str, decimal: str | None = None, thousands: str | None = None
) -> tuple[str, str, str | None]:
    """Decide the decimal and thousands separators from the cells of some rows (see
    :func:`decide_number_format`)."""
    cells = [cell for row in rows for cell in row]
    return decide_number_format(number_evidence(cells), sep, source, decimal, thousands)


def decide_number_format(
    evidence: NumberEvidence, sep: str, source: str, decimal: str | None = None, thousands: str | None = None
) -> tuple[str, str, str | None]:
    """Decide the decimal and thousands separators from what the cells say.

    A cell such as ``12,5``, ``100,0000`` or ``1.234,56`` proves the decimal comma; ``12.5``,
    ``1,234.56`` or ``1,234,567`` the decimal point. ``1,234`` alone could be either: in a ``;`` or
    tab separated file (Excel in a decimal-comma locale) it is read with a decimal comma and a
    warning, in a ``,`` separated file it is refused. Cells proving both separators are refused.

    Args:
        evidence: what the cells say (:func:`number_evidence`).
        sep: the field separator.
        source: file name for the messages.
        decimal: ``"."`` or ``","``; overrides the detection.
        thousands: ``""`` (none), ``","``, ``"."``, ``" "`` or ``"'"``; overrides the detection.

    Returns:
        ``(decimal, thousands, note)``: ``thousands`` is ``""`` when numbers have none; ``note`` is a
        warning to log when the decision rests on the separator alone, else None.
    """
    check_number_options(decimal, thousands)
    proofs, ambiguous, grouping = evidence.proofs, evidence.ambiguous, evidence.grouping
    note = None
    if decimal is None and thousands in (",", "."):
        decimal = "." if thousands == "," else ","
    if decimal is None:
        option = "pass decimal='.' or decimal=',' (and thousands=...) to say how to read them"
        if len(proofs) == 2:
            raise ValueError(
                f"{source}: numbers use both ',' and '.' as the decimal separator (e.g. {proofs[',']} and "
                f"{proofs['.']}); {option}"
            )
        if proofs:
            decimal = next(iter(proofs))
        elif len(ambiguous) == 2:
            raise ValueError(
                f"{source}: numbers such as {ambiguous[',']} and {ambiguous['.']} could use either ',' or "
                f"'.' as the decimal separator; {option}"
            )
        elif "," in ambiguous and sep == ",":
            raise ValueError(
                f"{source}: numbers such as {ambiguous[',']} in this ','-separated file could use ',' as the "
                f"decimal or the thousands separator; {option}"
            )
        elif ambiguous and sep in ("\t", ";"):
            decimal = "," if "," in ambiguous else "."
            thou = "." if decimal == "," else ","
            note = (
                f"{source}: numbers such as {ambiguous[decimal]} read with {decimal!r} as the decimal separator "
                f"({sep!r}-separated file); pass decimal={thou!r}, thousands={decimal!r} if {decimal!r} separates "
                "thousands"
            )
        else:
            decimal = "."
    if thousands is None:
        other = "." if decimal == "," else ","
        thousands = other if other in grouping or other in ambiguous else ""
    return decimal, thousands, note


def sample_evidence(lines: list[str], table: TextTable) -> tuple[NumberEvidence, bool]:
    """The evidence of up to ``_SAMPLE_LINES`` rows from each end of the table, and whether that is
    every row (else the reader checks the rest of each column against the decision, see
    :func:`lightning_tf.kline.reader.io.read_table`)."""
    start = table.first + (0 if table.header is None else 1)
    stop = table.stop
    complete = stop - start <= 2 * _SAMPLE_LINES
    n = _SAMPLE_LINES
    picked = lines[start:stop] if complete else [*lines[start : start + n], *lines[stop - n : stop]]
    text = "\n".join(picked)
    if '"' not in text:  # no quoting: the csv module would split at every separator
        return _text_evidence(text.replace(table.sep, "\n")), complete
    cells = [cell for line in picked if line.strip() for cell in split_fields(line, table.sep)]
    return number_evidence(cells), complete


def _holds_separators(text: pd.Series) -> bool:
    """Whether a cell of a text column may hold a ``.`` or a ``,`` (False: none does)."""
    try:
        cells = pa.array(text)
    except (pa.ArrowException, TypeError):  # not all strings
        cells = None
    chunks = getattr(cells, "chunks", [cells])
    if cells is None or not all(pa.types.is_string(c.type) or pa.types.is_large_string(c.type) for c in chunks):
        joined = "".join(map(str, text.tolist()))
        return "." in joined or "," in joined
    for chunk in chunks:  # the bytes of all the strings, one after another (a slice: some more)
        data = chunk.buffers()[2]
        if data is not None and (b"." in (raw := data.to_pybytes()) or b"," in raw):
            return True
    return False


def column_evidence(df: pd.DataFrame, first_line: int) -> NumberEvidence:
    """The evidence of every cell with a ``.`` or ``,`` in the text columns of ``df`` (a table as
    pandas read it, row ``i`` on file line ``first_line + i``): the cells pandas could not read as
    numbers in the decided format, and columns of names, codes and dates.

    Args:
        df: the table, with its RangeIndex from the reading.
        first_line: the 1-based file line of row 0.
    """
    evidence = NumberEvidence()
    for col, dtype in df.dtypes.items():
        if dtype.kind in "biufcmM":  # numbers, booleans, datetimes
            continue
        if not _holds_separators(df[col]):  # dates such as 2024-01-02, codes, names
            continue
        text = df[col].astype(str)
        marked = (text.str.contains(".", regex=False) | text.str.contains(",", regex=False)).to_numpy(bool)
        if marked.any():
            lines = (np.flatnonzero(marked) + first_line).tolist()
            evidence = evidence.merged(number_evidence(text[marked].tolist(), lines))
    return evidence
