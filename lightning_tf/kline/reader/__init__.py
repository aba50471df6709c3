"""The bar-file reader: OHLCV exports (CSV/TXT/TSV, Parquet; plain or compressed; English or Chinese
columns) into one canonical, validated frame. Needs numpy and pandas only: no torch, no Lightning, so
``from lightning_tf.kline.reader import read_bars`` works on its own.

* :mod:`.io`: :func:`read_bars` (a file, a folder with one file per ticker, a long table or a DataFrame;
  optionally cut at a date, unusable files left out and counted) and :func:`read_table` (one table as
  stored);
* :mod:`.formats`: compression, encoding, the table's place in the text, the number format;
* :mod:`.columns`: which file column is which canonical column;
* :mod:`.parsing`: timestamps, times of day and numbers;
* :mod:`.validation`: what a bar must satisfy, and what ``on_error`` does with those that do not;
* :mod:`.pool`: reading many files in worker processes, in file order.
"""

from .columns import CANONICAL_COLUMNS, detect_columns
from .io import BAD_FILES_CHOICES, SUPPORTED_SUFFIXES, BadFiles, list_bar_files, read_bars, read_table
from .parsing import parse_numbers, parse_timestamps
from .validation import OnError, ValidationReport, validate_bars

__all__ = [
    "BAD_FILES_CHOICES",
    "CANONICAL_COLUMNS",
    "SUPPORTED_SUFFIXES",
    "BadFiles",
    "OnError",
    "ValidationReport",
    "detect_columns",
    "list_bar_files",
    "parse_numbers",
    "parse_timestamps",
    "read_bars",
    "read_table",
    "validate_bars",
]
