"""Reading a folder in worker processes gives what one process gives: the same frame, the same first
error (one line naming the file) and the same log lines, in the same order."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lightning_tf.kline.reader import pool
from lightning_tf.kline.reader.io import read_bars

FIXTURES = Path(__file__).parents[1] / "fixtures"
# Files whose ticker is their name (no code inside), in several layouts.
LAYOUTS = [
    "english.csv",
    "yahoo.csv",
    "nasdaq_us_dates_newest_first.csv",
    "metatrader_tab.csv",
    "excel_semicolon_decimal_comma.csv",
    "epoch_seconds.csv",
    "english_gzip.csv.gz",
    "barchart.csv",
]


def _folder(tmp_path: Path, copies: int, extra: tuple[str, ...] = ()) -> Path:
    folder = tmp_path / "bars"
    folder.mkdir()
    for i in range(copies):
        for name in LAYOUTS:
            shutil.copy(FIXTURES / name, folder / f"t{i:02d}_{name}")
    for name in extra:
        shutil.copy(FIXTURES / name, folder / f"t01_z_{name}")  # in the middle of the folder's order
    return folder


def _read(folder: Path, workers: int, caplog: pytest.LogCaptureFixture, **options: object) -> tuple[object, list]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lightning_tf"):
        try:
            result: object = read_bars(folder, read_workers=workers, **options)
        except ValueError as e:
            result = str(e)
    return result, [(r.name, r.levelno, r.getMessage()) for r in caplog.records]


def test_workers_read_the_same_frame_and_log_the_same_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = _folder(tmp_path, 2, extra=("bad_high.csv", "long_two_tickers.csv"))
    one, one_log = _read(folder, 0, caplog, on_error="drop")
    two, two_log = _read(folder, 2, caplog, on_error="drop")
    assert isinstance(one, pd.DataFrame) and len(one) == 6 * (2 * len(LAYOUTS) + 1) + 12 - 1
    pd.testing.assert_frame_equal(two, one, check_exact=True)
    assert two_log == one_log
    assert any("bad_high.csv" in m and "dropped" in m for _, level, m in one_log if level == logging.WARNING)


def test_a_worker_raises_the_first_error_in_file_order(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = _folder(tmp_path, 2, extra=("bad_date.csv", "bad_high.csv"))
    one, one_log = _read(folder, 0, caplog)
    two, two_log = _read(folder, 2, caplog)
    assert isinstance(one, str) and one.startswith(f"{folder / 't01_z_bad_date.csv'}: 1 unparsable dates")
    assert two == one and two_log == one_log
    # An error raised while reading a file (not in its validation) travels the same way.
    (folder / "t00_zz.csv").write_text("date,open\n2024-01-02,1\n")
    one, _ = _read(folder, 0, caplog)
    two, _ = _read(folder, 2, caplog)
    assert two == one and "t00_zz.csv: column(s) ['high', 'low', 'close'] not found" in one


def test_read_workers_are_checked_and_chosen_by_folder_size_and_idle_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"read_workers \(-1\) must be >= 0 \(0: read in this process\) or None"):
        pool.pool_workers(-1, 10, 0)
    assert pool.pool_workers(3, 1, 0) == 3
    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(pool.os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # this process alone on 8 cores
    many = 10**4 * pool.MIN_BYTES_PER_WORKER
    assert pool.pool_workers(None, 10**4, many) == 8
    assert pool.pool_workers(None, 10**4, 3 * pool.MIN_BYTES_PER_WORKER) == 3  # a worker's worth of bytes each
    assert pool.pool_workers(None, 10**4, 2 * pool.MIN_BYTES_PER_WORKER - 1) == 0  # one worker's worth: read here
    assert pool.pool_workers(None, 1, many) == 0  # one file
    monkeypatch.setattr(pool.os, "getloadavg", lambda: (6.5, 6.0, 6.0))  # six busy cores: 2.5 idle with ours
    assert pool.pool_workers(None, 10**4, many) == 2
    monkeypatch.setattr(pool.os, "getloadavg", lambda: (9.0, 9.0, 9.0))  # all busy: read here
    assert pool.pool_workers(None, 10**4, many) == 0
