"""Flat arrays of prepared corpora: ragged id rows and text lines read back exactly, as views of one
memory mapping, pickled as paths, and a manifest that catches truncated, changed and unfinished files."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from lightning_tf.text.store import Lines, LinesWriter, Ragged, RaggedWriter
from lightning_tf.training import check_manifest, write_manifest


def _rows(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 60_000, rng.integers(0, 30)).tolist() for _ in range(n)]


def _write_ragged(directory: Path, rows: list[list[int]], chunks: int = 3) -> Ragged:
    w = RaggedWriter(directory, "x", np.uint16, np.uint16)
    for part in np.array_split(np.arange(len(rows)), chunks):
        w.append([rows[i] for i in part])
    assert w.close() == len(rows)
    return Ragged(directory, "x", "uint16", "uint16")


def test_ragged_rows_read_back_exactly_as_views_of_one_mapping(tmp_path: Path) -> None:
    rows = _rows(500)
    rows[7] = []  # an empty row
    r = _write_ragged(tmp_path, rows)
    assert len(r) == 500 and [row.tolist() for row in r] == rows
    assert r.lengths.tolist() == [len(x) for x in rows]
    row = r[3]
    assert row.dtype == np.uint16 and np.shares_memory(row, r.values) and not row.flags.writeable
    assert isinstance(r.values, np.memmap)  # nothing is copied on read


def test_readers_pickle_as_their_paths(tmp_path: Path) -> None:
    """A spawned DataLoader worker maps the files again instead of receiving a copy of the data."""
    rows = _rows(20_000)
    r = _write_ragged(tmp_path, rows)
    w = LinesWriter(tmp_path, "t")
    w.append([f"sentence {i}" for i in range(20_000)])
    w.close()
    lines = Lines(tmp_path, "t")
    for reader in (r, lines):
        blob = pickle.dumps(reader)
        assert len(blob) < 1000 < r.values.nbytes // 100
    again = pickle.loads(pickle.dumps(r))
    assert [again[i].tolist() for i in (0, 19_999)] == [rows[0], rows[19_999]]
    assert pickle.loads(pickle.dumps(lines))[12_345] == "sentence 12345"


def test_lines_keep_every_character_and_take_dense_or_sparse(tmp_path: Path) -> None:
    text = ["Hallo Welt!", "", "tab\there", "line\u2028separator", "émoji 🙂", "\r inside", "last"]
    w = LinesWriter(tmp_path, "t")
    w.append(text[:3])
    w.append(text[3:])
    assert w.close() == len(text)
    lines = Lines(tmp_path, "t")
    assert list(lines) == text and [lines[i] for i in range(len(text))] == text
    for index in ([0, 1, 2, 3], [0, 6], [2], [1, 4, 5, 6]):
        assert lines.take(np.array(index)) == [text[i] for i in index]


def test_manifest_catches_truncated_changed_and_unfinished_files(tmp_path: Path) -> None:
    _write_ragged(tmp_path, _rows(100))
    assert check_manifest(tmp_path, 1, "k") == (None, "it has no manifest: its build did not finish")
    write_manifest(tmp_path, {"version": 1, "key": "k"})
    manifest, problem = check_manifest(tmp_path, 1, "k")
    assert problem is None and manifest is not None and set(manifest["files"]) == {"x.ids", "x.len", "x.off"}
    assert check_manifest(tmp_path, 2, "k")[1] == "its manifest is for format 1 key k"
    ids = tmp_path / "x.ids"
    data = ids.read_bytes()
    ids.write_bytes(data[:-2])
    assert check_manifest(tmp_path, 1, "k")[1] == f"x.ids has {len(data) - 2} bytes, the manifest says {len(data)}"
    ids.write_bytes(bytes([data[0] ^ 1]) + data[1:])  # same size, one bit changed
    assert check_manifest(tmp_path, 1, "k")[1] == "x.ids does not match its checksum"
    ids.unlink()
    assert check_manifest(tmp_path, 1, "k")[1] == "x.ids is missing"
