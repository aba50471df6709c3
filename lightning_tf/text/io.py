"""Reading parallel text: UTF-8 lines (plain or gzip), tab-separated pair files and line-aligned file pairs.

Every reader names the file and line of what it cannot read (bad UTF-8, a missing column, aligned files
of different lengths), refuses a file that is empty or holds only blank lines, naming it, and counts what
it drops (pairs with an empty side) in a :class:`ReadStats`.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["FileFormat", "Pair", "ReadStats", "read_aligned", "read_lines", "read_pairs", "read_sentences", "read_tsv"]

#: A (source sentence, target sentence) pair.
Pair = tuple[str, str]
#: How :func:`read_pairs` reads a path: a TSV file, the prefix of aligned files, or decided by what exists.
FileFormat = Literal["auto", "tsv", "aligned"]


def _open_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError; a cut-off file an EOFError
        raise ValueError(f"{path}: cannot decompress ({e})") from None
    return data[3:] if data.startswith(b"\xef\xbb\xbf") else data  # drop a UTF-8 byte-order mark


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file (``.gz`` decompressed), without line ends.

    Only ``\\n`` (and a ``\\r`` before it) ends a line: ``str.splitlines`` would also split on
    characters such as U+2028 and silently shift one of two aligned files.

    Raises:
        ValueError: on bytes that are not UTF-8, naming the file, line and column.
    """
    path = Path(path)
    data = _open_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ValueError(
            f"{path}:{line}: not valid UTF-8 ({e.reason}, byte {data[e.start]:#04x} at column {column})"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _require_text(path: Path, lines: list[str], below: str = "") -> None:
    """Refuse a file without a single non-blank line: it cannot hold a sentence."""
    if not lines:
        raise ValueError(f"{path}: the file is empty{below}")
    if not any(line.strip() for line in lines):
        n = len(lines)
        raise ValueError(f"{path}: holds no sentences{below}, only {n} blank line{'s' if n > 1 else ''}")


def read_sentences(path: str | Path) -> list[str]:
    """Source sentences to translate, one per line, stripped of surrounding whitespace; a blank line
    stays (as ``""``), so outputs can keep the input's line numbers.

    Raises:
        ValueError: when the file is empty or holds only blank lines (naming it); bad UTF-8.
    """
    path = Path(path)
    lines = read_lines(path)
    _require_text(path, lines)
    return [line.strip() for line in lines]


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
    path = Path(path)
    lines = read_lines(path)
    first = 1
    if header:
        if not lines:
            raise ValueError(f"{path}: the file is empty, expected a header line")
        columns, lines, first = lines[0].split("\t"), lines[1:], 2
    _require_text(path, lines, " below its header line" if header else "")
    i, j = _column_index(src, columns, path), _column_index(tgt, columns, path)
    need = max(i, j) + 1
    pairs: list[Pair] = []
    stats = ReadStats(lines=len(lines))
    for n, line in enumerate(lines, start=first):
        if not line.strip():
            stats.empty += 1
            continue
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
        pairs.append((s, t))
    return pairs, stats


def _aligned_path(prefix: Path, lang: str) -> Path:
    for p in (Path(f"{prefix}.{lang}"), Path(f"{prefix}.{lang}.gz")):
        if p.is_file():
            return p
    hint = f"; {prefix} is a folder, give the file prefix such as {prefix / 'train'}" if prefix.is_dir() else ""
    raise FileNotFoundError(f"neither {prefix}.{lang} nor {prefix}.{lang}.gz exists{hint}")


def read_aligned(prefix: str | Path, src: str, tgt: str) -> tuple[list[Pair], ReadStats]:
    """Sentence pairs from two line-aligned files ``{prefix}.{src}`` and ``{prefix}.{tgt}`` (each may end in
    ``.gz``), the Multi30k / IWSLT layout: ``train.de`` + ``train.en``.

    Raises:
        ValueError: when the files have different line counts, naming both files and the first line that
            only one of them has; bad UTF-8; a file that is empty or holds only blank lines.
    """
    src_path, tgt_path = _aligned_path(Path(prefix), src), _aligned_path(Path(prefix), tgt)
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    _require_text(src_path, src_lines)
    _require_text(tgt_path, tgt_lines)
    if len(src_lines) != len(tgt_lines):
        longer, shorter = (src_path, tgt_path) if len(src_lines) > len(tgt_lines) else (tgt_path, src_path)
        first_extra = min(len(src_lines), len(tgt_lines)) + 1
        raise ValueError(
            f"{src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}: "
            f"aligned files need one sentence per line; {longer}:{first_extra} has no partner line in {shorter}"
        )
    pairs: list[Pair] = []
    stats = ReadStats(lines=len(src_lines))
    for s, t in zip(src_lines, tgt_lines, strict=True):
        s, t = s.strip(), t.strip()
        if not s or not t:
            stats.empty += 1
            continue
        pairs.append((s, t))
    return pairs, stats


def read_pairs(
    path: str | Path,
    src: str,
    tgt: str,
    file_format: FileFormat = "auto",
    columns: Sequence[str] = ("en", "de"),
    header: bool = False,
) -> tuple[list[Pair], ReadStats]:
    """Read ``path`` as a TSV file, or as the prefix of two aligned files. ``auto``: a file that exists is a
    TSV, otherwise ``path`` is a prefix."""
    if file_format == "tsv" or (file_format == "auto" and Path(path).is_file()):
        return read_tsv(path, src, tgt, columns, header)
    if file_format == "auto" and not Path(path).parent.is_dir():
        raise FileNotFoundError(f"{path}: no such file, and no folder {Path(path).parent} for aligned files")
    return read_aligned(path, src, tgt)


