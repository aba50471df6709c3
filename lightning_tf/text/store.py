"""Flat arrays on disk for prepared corpora: ragged rows of token ids and lines of text, appended in
chunks and memory-mapped when read (their manifest of sizes and checksums: :mod:`lightning_tf.training.prepared`).

A ragged column ``name`` is three files: ``name.ids`` (every row's values back to back), ``name.len``
(each row's length) and ``name.off`` (``n + 1`` int64 offsets, row ``i`` being ``ids[off[i]:off[i + 1]]``),
the layout of fairseq's memory-mapped indexed dataset and of nanoGPT's ``train.bin``. A text column is
``name.txt`` (UTF-8, each line ended by ``\\n``) and ``name.txt.off``. Readers open the files with
``np.memmap``: an item is a view into the mapping, so DataLoader workers and DDP ranks on one machine share
the pages and nothing is copied on read. A reader pickles as its paths (a spawned worker maps the files
again instead of receiving a copy).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Lines", "LinesWriter", "Ragged", "RaggedWriter"]


def _append(path: Path, array: np.ndarray) -> None:
    with path.open("ab") as f:
        f.write(np.ascontiguousarray(array).tobytes())


def _offsets(lengths_path: Path, len_dtype: np.dtype, out: Path) -> int:
    """Write ``n + 1`` int64 offsets for the row lengths in ``lengths_path``; returns ``n``."""
    n = lengths_path.stat().st_size // np.dtype(len_dtype).itemsize
    off = np.memmap(out, dtype=np.int64, mode="w+", shape=(n + 1,))
    off[0] = 0
    if n:
        lengths = np.memmap(lengths_path, dtype=len_dtype, mode="r", shape=(n,))
        np.cumsum(lengths, dtype=np.int64, out=off[1:])
        del lengths
    off.flush()
    del off
    return n


class RaggedWriter:
    """Rows of integers appended in chunks: ``name.ids`` and ``name.len``, ``name.off`` on :meth:`close`.

    Args:
        directory: the folder of the files.
        name: the column's file stem.
        dtype: dtype of the values (``uint16`` while every id fits, else ``int32``).
        len_dtype: dtype of the row lengths.
    """

    def __init__(self, directory: Path, name: str, dtype: np.dtype | type, len_dtype: np.dtype | type) -> None:
        self.base = Path(directory) / name
        self.dtype, self.len_dtype = np.dtype(dtype), np.dtype(len_dtype)
        for suffix in (".ids", ".len", ".off"):
            Path(f"{self.base}{suffix}").unlink(missing_ok=True)
            Path(f"{self.base}{suffix}").touch()
        self.rows = 0
        self.values = 0

    def append(self, rows: Sequence[Sequence[int]]) -> None:
        """Append ``rows`` (lists of ints, e.g. a tokenizer's ``encode`` output)."""
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        flat = np.fromiter(chain.from_iterable(rows), dtype=self.dtype, count=int(lengths.sum()))
        _append(Path(f"{self.base}.ids"), flat)
        _append(Path(f"{self.base}.len"), lengths.astype(self.len_dtype))
        self.rows += len(rows)
        self.values += len(flat)

    def close(self) -> int:
        """Write the offsets; returns the number of rows."""
        return _offsets(Path(f"{self.base}.len"), self.len_dtype, Path(f"{self.base}.off"))


class Ragged:
    """Read side of :class:`RaggedWriter`: ``ragged[i]`` is row ``i`` as a read-only view of the mapping.

    Args:
        directory: the folder of the files.
        name: the column's file stem.
        dtype: dtype of the values.
        len_dtype: dtype of the row lengths.
    """

    def __init__(self, directory: Path, name: str, dtype: str, len_dtype: str) -> None:
        self.directory, self.name, self.dtype, self.len_dtype = Path(directory), name, dtype, len_dtype
        self._map()

    def _map(self) -> None:
        base = self.directory / self.name
        self.offsets = np.memmap(f"{base}.off", dtype=np.int64, mode="r")
        self.lengths = np.memmap(f"{base}.len", dtype=self.len_dtype, mode="r") if len(self) else np.zeros(0, int)
        size = Path(f"{base}.ids").stat().st_size
        # np.memmap cannot map an empty file
        self.values = np.memmap(f"{base}.ids", dtype=self.dtype, mode="r") if size else np.zeros(0, self.dtype)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "name": self.name, "dtype": self.dtype, "len_dtype": self.len_dtype}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._map()


class LinesWriter:
    """Lines of text appended in chunks: ``name.txt`` and, on :meth:`close`, ``name.txt.off``.

    Args:
        directory: the folder of the files.
        name: the column's file stem.
    """

    def __init__(self, directory: Path, name: str) -> None:
        self.path = Path(directory) / f"{name}.txt"
        self.path.unlink(missing_ok=True)
        self._file = self.path.open("wb")
        self._len = Path(f"{self.path}.len")
        self._len.unlink(missing_ok=True)
        self._len.touch()
        self.rows = 0

    def append(self, lines: Iterable[str]) -> None:
        """Append lines (without line ends; they must not contain ``\\n``)."""
        encoded = [s.encode("utf-8") + b"\n" for s in lines]
        self._file.write(b"".join(encoded))
        _append(self._len, np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))
        self.rows += len(encoded)

    def close(self) -> int:
        """Write the offsets; returns the number of lines."""
        self._file.close()
        n = _offsets(self._len, np.dtype(np.int64), Path(f"{self.path}.off"))
        self._len.unlink()
        return n


class Lines:
    """Read side of :class:`LinesWriter`: ``lines[i]`` is line ``i`` as ``str``; :meth:`take` reads many.

    Args:
        directory: the folder of the files.
        name: the column's file stem.
    """

    def __init__(self, directory: Path, name: str) -> None:
        self.directory, self.name = Path(directory), name
        self._map()

    def _map(self) -> None:
        path = self.directory / f"{self.name}.txt"
        self.offsets = np.memmap(f"{path}.off", dtype=np.int64, mode="r")
        self.data = np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        return self.data[self.offsets[i] : self.offsets[i + 1] - 1].tobytes().decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), 65536):
            yield from self.take(np.arange(start, min(len(self), start + 65536)))

    def take(self, index: np.ndarray) -> list[str]:
        """The lines at ``index`` (ascending): one decode of the span when it is dense, else line by line."""
        if len(index) == 0:
            return []
        first, last = int(index[0]), int(index[-1])
        if last - first + 1 > 4 * len(index):
            return [self[int(i)] for i in index]
        block = self.data[self.offsets[first] : self.offsets[last + 1]].tobytes().decode("utf-8")
        lines = block.split("\n")
        return [lines[int(i) - first] for i in index]

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._map()
