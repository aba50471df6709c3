"""Reading parallel text: UTF-8 lines (plain or gzip), tab-separated pair files and line-aligned file pairs.

The readers stream: a file is decoded in blocks of a few megabytes and its pairs come one at a time
(:func:`iter_pairs`), so a WMT-size corpus never sits in memory as a whole; ``read_*`` collect them into
lists for small files. Every reader names the file and line of what it cannot read (bad UTF-8, a missing
column, aligned files of different lengths), refuses a file that is empty or holds only blank lines,
naming it, and counts what it drops (pairs with an empty side) in a :class:`ReadStats`.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import BinaryIO, Literal

__all__ = [
    "FileFormat",
    "Pair",
    "ReadStats",
    "iter_lines",
    "iter_pairs",
    "pair_files",
    "read_aligned",
    "read_lines",
    "read_pairs",
    "read_sentences",
    "read_tsv",
]

#: A (source sentence, target sentence) pair.
Pair = tuple[str, str]
#: How :func:`read_pairs` reads a path: a TSV file, the prefix of aligned files, or decided by what exists.
FileFormat = Literal["auto", "tsv", "aligned"]

_BLOCK = 1 << 22  # bytes decoded at a time
_BOM = b"\xef\xbb\xbf"


def _open(path: Path) -> BinaryIO:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")  # type: ignore[return-value]


def _bad_utf8(path: Path, block: bytes, first_line: int, e: UnicodeDecodeError) -> ValueError:
    line = first_line + block.count(b"\n", 0, e.start)
    column = e.start - (block.rfind(b"\n", 0, e.start) + 1) + 1
    return ValueError(f"{path}:{line}: not valid UTF-8 ({e.reason}, byte {block[e.start]:#04x} at column {column})")


def iter_lines(path: str | Path) -> Iterator[str]:
    """Lines of a UTF-8 text file (``.gz`` decompressed), without line ends, read in blocks.

    Only ``\\n`` (and a ``\\r`` before it) ends a line: ``str.splitlines`` would also split on
    characters such as U+2028 and silently shift one of two aligned files. A UTF-8 byte-order mark
    at the start is dropped.

    Raises:
        FileNotFoundError: naming the file.
        ValueError: on bytes that are not UTF-8, naming the file, line and column; a gzip file that
            cannot be decompressed.
    """
    path = Path(path)
    with _open(path) as f:
        rest, line_no, first = b"", 1, True
        while True:
            try:
                data = f.read(_BLOCK)
            except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError; a cut-off file an EOFError
                raise ValueError(f"{path}: cannot decompress ({e})") from None
            block = rest + data
            if not block:
                return
            cut = len(block) if not data else block.rfind(b"\n") + 1
            if cut <= 0:  # no line end in this block yet: read on
                rest = block
                continue
            chunk, rest = block[:cut], block[cut:]
            if first:  # the first line is whole here, and with it any byte-order mark
                chunk, first = (chunk[3:] if chunk.startswith(_BOM) else chunk), False
                if not chunk:  # a file holding only the mark
                    return
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError as e:
                raise _bad_utf8(path, chunk, line_no, e) from None
            lines = text.split("\n")
            if text.endswith("\n"):
                lines.pop()
            line_no += len(lines)
            for line in lines:
                yield line[:-1] if line.endswith("\r") else line
            if not data:
                return


def read_lines(path: str | Path) -> list[str]:
    """:func:`iter_lines` as a list."""
    return list(iter_lines(path))


def _require_text(path: Path, lines: int, nonblank: int, below: str = "") -> None:
    """Refuse a file without a single non-blank line: it cannot hold a sentence."""
    if not lines:
        raise ValueError(f"{path}: the file is empty{below}")
    if not nonblank:
        raise ValueError(f"{path}: holds no sentences{below}, only {lines} blank line{'s' if lines > 1 else ''}")


def read_sentences(path: str | Path) -> list[str]:
    """Source sentences to translate, one per line, stripped of surrounding whitespace; a blank line
    stays (as ``""``), so outputs can keep the input's line numbers.

    Raises:
        ValueError: when the file is empty or holds only blank lines (naming it); bad UTF-8.
    """
    path = Path(path)
    lines = [line.strip() for line in iter_lines(path)]
    _require_text(path, len(lines), sum(map(bool, lines)))
    return lines


@dataclass
class ReadStats:
    """What a reader kept and dropped."""

    lines: int = 0
    empty: int = 0  # pairs with an empty (or whitespace-only) side, dropped

    def merge(self, other: ReadStats) -> ReadStats:
        return ReadStats(self.lines + other.lines, self.empty + other.empty)


def _column_index(name: str, columns: Sequence[str], path: Path) -> int:
    if name in columns:
        return list(columns).index(name)
    if name.isdigit():
        return int(name)
    raise ValueError(f"{path}: language {name!r} is not one of the columns {list(columns)} (or a 0-based index)")


def iter_tsv(
    path: str | Path,
    src: str,
    tgt: str,
    columns: Sequence[str] = ("en", "de"),
    header: bool = False,
    stats: ReadStats | None = None,
) -> Iterator[Pair]:
    """Sentence pairs from a tab-separated file, one at a time (see :func:`read_tsv`); ``stats`` counts the
    lines read and the pairs dropped for an empty side as they go. Whole-file errors (an empty file, one
    holding only blank lines) are raised once the file has been read."""
    path = Path(path)
    stats = ReadStats() if stats is None else stats
    lines = iter_lines(path)
    first = 1
    if header:
        head = next(lines, None)
        if head is None:
            raise ValueError(f"{path}: the file is empty, expected a header line")
        columns, first = head.split("\t"), 2
    i, j = _column_index(src, columns, path), _column_index(tgt, columns, path)
    need = max(i, j) + 1
    nonblank = 0
    for n, line in enumerate(lines, start=first):
        stats.lines += 1
        if not line.strip():
            stats.empty += 1
            continue
        nonblank += 1
        fields = line.split("\t")
        if len(fields) < need:
            raise ValueError(
                f"{path}:{n}: expected at least {need} tab-separated columns (source {src!r} is column {i}, "
                f"target {tgt!r} is column {j}), found {len(fields)}: {line[:60]!r}"
            )
        s, t = fields[i].strip(), fields[j].strip()
        if not s or not t:
            stats.empty += 1
            continue
        yield s, t
    _require_text(path, stats.lines, nonblank, " below its header line" if header else "")


def read_tsv(
    path: str | Path, src: str, tgt: str, columns: Sequence[str] = ("en", "de"), header: bool = False
) -> tuple[list[Pair], ReadStats]:
    """Sentence pairs from a tab-separated file, e.g. the manythings.org / Tatoeba export
    ``english<TAB>other[<TAB>attribution]``. Extra columns are ignored.

    Args:
        path: the file (``.gz`` allowed).
        src: source column: a name from ``columns`` (or the header) or a 0-based index as a string.
        tgt: target column, likewise.
        columns: names of the leading columns in file order.
        header: the first line names the columns (then ``columns`` is not used).

    Raises:
        ValueError: a line with too few columns (naming file and line), an unknown column, bad UTF-8, a file
            that is empty or holds only blank lines.
    """
    stats = ReadStats()
    return list(iter_tsv(path, src, tgt, columns, header, stats)), stats


def _aligned_path(prefix: Path, lang: str) -> Path:
    for p in (Path(f"{prefix}.{lang}"), Path(f"{prefix}.{lang}.gz")):
        if p.is_file():
            return p
    if prefix.suffix.lower() in (".tsv", ".txt", ".csv", ".gz"):  # a file's name, not a prefix: that file is missing
        raise FileNotFoundError(f"{prefix}: no such file (nor aligned files {prefix}.{lang}, {prefix}.{lang}.gz)")
    hint = f"; {prefix} is a folder, give the file prefix such as {prefix / 'train'}" if prefix.is_dir() else ""
    raise FileNotFoundError(f"neither {prefix}.{lang} nor {prefix}.{lang}.gz exists{hint}")


def iter_aligned(prefix: str | Path, src: str, tgt: str, stats: ReadStats | None = None) -> Iterator[Pair]:
    """Sentence pairs from two line-aligned files, one at a time (see :func:`read_aligned`); whole-file
    errors (an empty or blank file, different line counts) are raised once both files have been read."""
    src_path, tgt_path = _aligned_path(Path(prefix), src), _aligned_path(Path(prefix), tgt)
    stats = ReadStats() if stats is None else stats
    counts, nonblank = [0, 0], [0, 0]
    for s, t in zip_longest(iter_lines(src_path), iter_lines(tgt_path)):
        for k, line in enumerate((s, t)):
            if line is not None:
                counts[k] += 1
                nonblank[k] += bool(line.strip())
        if s is None or t is None:
            continue
        stats.lines += 1
        s, t = s.strip(), t.strip()
        if not s or not t:
            stats.empty += 1
            continue
        yield s, t
    _require_text(src_path, counts[0], nonblank[0])
    _require_text(tgt_path, counts[1], nonblank[1])
    if counts[0] != counts[1]:
        longer, shorter = (src_path, tgt_path) if counts[0] > counts[1] else (tgt_path, src_path)
        raise ValueError(
            f"{src_path} has {counts[0]} lines but {tgt_path} has {counts[1]}: aligned files need one sentence "
            f"per line; {longer}:{min(counts) + 1} has no partner line in {shorter}"
        )


def read_aligned(prefix: str | Path, src: str, tgt: str) -> tuple[list[Pair], ReadStats]:
    """Sentence pairs from two line-aligned files ``{prefix}.{src}`` and ``{prefix}.{tgt}`` (each may end in
    ``.gz``), the Multi30k / IWSLT layout: ``train.de`` + ``train.en``.

    Raises:
        ValueError: when the files have different line counts, naming both files and the first line that
            only one of them has; bad UTF-8; a file that is empty or holds only blank lines.
    """
    stats = ReadStats()
    return list(iter_aligned(prefix, src, tgt, stats)), stats


def _is_tsv(path: str | Path, file_format: FileFormat) -> bool:
    if file_format == "tsv" or (file_format == "auto" and Path(path).is_file()):
        return True
    if file_format == "auto" and not Path(path).parent.is_dir():
        raise FileNotFoundError(f"{path}: no such file, and no folder {Path(path).parent} for aligned files")
    return False


def pair_files(path: str | Path, src: str, tgt: str, file_format: FileFormat = "auto") -> list[Path]:
    """The files :func:`iter_pairs` reads for ``path``: the TSV file, or the two aligned files."""
    if _is_tsv(path, file_format):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such file")
        return [Path(path)]
    return [_aligned_path(Path(path), src), _aligned_path(Path(path), tgt)]


def iter_pairs(
    path: str | Path,
    src: str,
    tgt: str,
    file_format: FileFormat = "auto",
    columns: Sequence[str] = ("en", "de"),
    header: bool = False,
    stats: ReadStats | None = None,
) -> Iterator[Pair]:
    """Stream ``path`` as a TSV file, or as the prefix of two aligned files. ``auto``: a file that exists is
    a TSV, otherwise ``path`` is a prefix."""
    if _is_tsv(path, file_format):
        return iter_tsv(path, src, tgt, columns, header, stats)
    return iter_aligned(path, src, tgt, stats)


def read_pairs(
    path: str | Path,
    src: str,
    tgt: str,
    file_format: FileFormat = "auto",
    columns: Sequence[str] = ("en", "de"),
    header: bool = False,
) -> tuple[list[Pair], ReadStats]:
    """:func:`iter_pairs` as a list, with its :class:`ReadStats`."""
    stats = ReadStats()
    return list(iter_pairs(path, src, tgt, file_format, columns, header, stats)), stats
