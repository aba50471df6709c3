"""Reading a corpus of thousands of files: the date cut (no bar at or after it is ever returned, nor checked),
unusable files left out and counted in one line (``bad_files="skip"``), folders read with their subfolders."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.reader import list_bar_files, read_bars
from tests.helpers.kline import make_bars

FIXTURES = Path(__file__).parents[1] / "fixtures"
CUT = "2000-03-01"
OHLCV = ["timestamp", "open", "high", "low", "close", "volume"]


def _bars(path: Path, n: int = 60, seed: int = 0, start: str = "2000-01-03") -> pd.DataFrame:
    bars = make_bars(n, seed=seed, start=start)
    bars.to_csv(path, index=False)
    return bars


def _with_bad_row(path: Path, row: int, column: str, value: object, seed: int = 0) -> None:
    bars = make_bars(60, seed=seed).astype({column: object})
    bars.loc[row, column] = value
    bars.to_csv(path, index=False)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Two good files, and one of each kind of unusable file."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    _bars(folder / "good_a.csv", seed=1)
    _bars(folder / "good_b.csv", seed=2)
    (folder / "empty.csv").write_bytes(b"")
    (folder / "header_only.csv").write_text("Date,Open,High,Low,Close,Volume\n")
    (folder / "garbage.csv").write_bytes(bytes(range(256)) * 4)
    (folder / "no_columns.csv").write_text("name,colour\nx,red\ny,blue\n")
    _with_bad_row(folder / "bad_before_cut.csv", 5, "High", 0.01)  # high below open and close, before the cut
    _bars(folder / "listed_later.csv", start="2000-04-03")  # every bar after the cut
    _with_bad_row(folder / "bad_after_cut.csv", 50, "Low", -1.0)  # a broken bar after the cut
    return folder


def test_bad_files_error_raises_the_first_unusable_file(corpus: Path) -> None:
    # the folder's order: bad_after_cut, bad_before_cut, empty, garbage, ...
    with pytest.raises(ValueError, match=r"bad_after_cut.csv: 1 non-positive prices"):
        read_bars(corpus)
    (corpus / "bad_after_cut.csv").unlink()
    with pytest.raises(ValueError, match=r"bad_before_cut.csv: 1 high below max\(open, close\)"):
        read_bars(corpus, cut=CUT)
    (corpus / "bad_before_cut.csv").unlink()
    with pytest.raises(ValueError, match=r"empty.csv: the file is empty \(no rows\)"):
        read_bars(corpus, cut=CUT)
    (corpus / "empty.csv").unlink()
    with pytest.raises(ValueError, match=r"garbage.csv: binary content"):
        read_bars(corpus, cut=CUT)
    (corpus / "garbage.csv").unlink()
    with pytest.raises(ValueError, match=r"header_only.csv: the file is empty \(no rows below the header\)"):
        read_bars(corpus, cut=CUT)
    (corpus / "header_only.csv").unlink()
    with pytest.raises(ValueError, match=r"no_columns.csv: no date/time column found"):
        read_bars(corpus, cut=CUT)


def test_skipped_files_are_counted_in_one_line(corpus: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="lightning_tf"):
        frame = read_bars(corpus, cut=CUT, bad_files="skip", read_workers=0)
    assert frame["ticker"].unique().tolist() == ["bad_after_cut", "good_a", "good_b"]
    assert frame.attrs["read"] == {
        "files": 9,
        "left_out": {
            "refused by validation": 1,
            "empty": 2,
            "unreadable": 1,
            "with no bar before the cut": 1,
            "without recognisable columns": 1,
        },
        # 2000-03-01 is the 43rd business day: 18 bars of each 60 are cut (of a file then refused too), and all of one
        "cut_bars": 4 * 18 + 60,
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        f"{corpus}: 9 files; left out: 1 refused by validation (bad_before_cut.csv); 2 empty (empty.csv, "
        "header_only.csv); 1 unreadable (garbage.csv); 1 with no bar before the cut 2000-03-01 (listed_later.csv); "
        "1 without recognisable columns (no_columns.csv)"
    ]
    infos = [r.getMessage() for r in caplog.records if "left out" in r.getMessage() and r.levelno == logging.INFO]
    assert len(infos) == 6 and infos[0].startswith(f"{corpus / 'bad_before_cut.csv'}: 1 high below max(open, close)")
    assert infos[0].endswith("; left out (refused by validation)")


def test_many_skipped_files_are_named_a_few_at_a_time(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _bars(tmp_path / "good.csv")
    for k in range(12):
        (tmp_path / f"empty_{k:02d}.csv").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="lightning_tf"):
        read_bars(tmp_path, bad_files="skip")
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path}: 13 files; left out: 12 empty (empty_00.csv, empty_01.csv, empty_02.csv and 9 more)"
    ]


def test_a_folder_with_no_readable_file_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_bytes(b"")
    (tmp_path / "b.csv").write_text("Date,Open,High,Low,Close,Volume\n")
    (tmp_path / "c.csv").write_bytes(b"\x00\x01\x02")
    with pytest.raises(
        ValueError,
        match=rf"^{tmp_path}: no readable bar file among its 3 files: 2 empty \(a.csv, b.csv\); "
        r"1 unreadable \(c.csv\)$",
    ):
        read_bars(tmp_path, bad_files="skip")


def test_a_cut_before_every_bar_is_one_error_and_a_cut_after_the_data_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for seed in range(2):
        _bars(tmp_path / f"t{seed}.csv", seed=seed)
    # bad_files="error" too: a file that starts after the cut is not a bad file
    with pytest.raises(ValueError, match=rf"^{tmp_path}: no bar before the cut 1999-12-31 in any of its 2 files$"):
        read_bars(tmp_path, cut="1999-12-31")
    with caplog.at_level(logging.WARNING, logger="lightning_tf"):
        cut = read_bars(tmp_path, cut="2030-01-01")
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path}: the cut 2030-01-01 is after the data's last bar (2000-03-24 00:00:00): no bar was cut"
    ]
    pd.testing.assert_frame_equal(cut, read_bars(tmp_path))
    caplog.clear()
    read_bars(tmp_path, cut="2000-03-24")  # the last bar is cut: the cut is within the data
    assert not caplog.records


def test_the_settings_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    _bars(path)
    with pytest.raises(ValueError, match=r"^cut 'soon' is not a date or time \(e.g. '2008-06-24'\)$"):
        read_bars(path, cut="soon")
    with pytest.raises(ValueError, match=r"^cut '' is not a date or time"):
        read_bars(path, cut="")
    with pytest.raises(ValueError, match=r"cut '2000-03-01T00:00\+08:00' has a UTC offset; bars are stamped on"):
        read_bars(path, cut="2000-03-01T00:00+08:00")
    with pytest.raises(ValueError, match=r"^bad_files must be one of \('error', 'skip'\), got 'ignore'$"):
        read_bars(path, bad_files="ignore")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ no leak
def _long_table(path: Path) -> pd.DataFrame:
    parts = [make_bars(60, seed=s).assign(Symbol=name) for s, name in enumerate(["AAA", "BBB"])]
    parts.append(make_bars(20, seed=5, start="2000-04-03").assign(Symbol="LATE"))  # listed after the cut
    table = pd.concat(parts).sample(frac=1.0, random_state=0)  # rows in no order
    table.to_csv(path, index=False)
    return table


def _source(kind: str, tmp_path: Path) -> Path | pd.DataFrame:
    if kind == "file":
        _bars(tmp_path / "one.csv")
        return tmp_path / "one.csv"
    if kind == "long table":
        _long_table(tmp_path / "long.csv")
        return tmp_path / "long.csv"
    if kind == "frame":
        return make_bars(60).set_index("Date")
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    for k in range(12):
        _bars(folder / ("sub" if k % 3 == 0 else "") / f"T{k:02d}.csv", seed=k, start=f"2000-01-{3 + k % 5:02d}")
    shutil.copy(FIXTURES / "nasdaq_us_dates_newest_first.csv", folder / "newest_first.csv")
    shutil.copy(FIXTURES / "qmt_5min.csv", folder / "qmt.csv")  # five-minute bars
    return folder


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["file", "folder", "long table", "frame"])
def test_no_bar_at_or_after_the_cut_is_returned(tmp_path: Path, kind: str, workers: int) -> None:
    """Every reader path gives the bars before the cut, and exactly those: the whole read, filtered."""
    source = _source(kind, tmp_path)
    whole = read_bars(source, read_workers=workers, progress=False)
    cuts = ["2000-03-01", "2000-03-01 10:35"]  # within the generated bars: a day, and a time within it
    if kind == "folder":
        cuts += ["2024-01-05", "2024-01-03 10:00"]  # within the daily (newest first) and five-minute fixtures
    for cut in cuts:
        frame = read_bars(source, cut=cut, read_workers=workers, progress=False)
        assert (frame["timestamp"] < pd.Timestamp(cut)).all()
        before = whole[whole["timestamp"] < pd.Timestamp(cut)].reset_index(drop=True)
        # a ticker whose bars all follow the cut is left out
        assert frame["ticker"].unique().tolist() == before["ticker"].unique().tolist()
        absent = [c for c in before.columns if c not in frame.columns]  # columns only a left-out file had
        assert before[absent].isna().all().all()
        pd.testing.assert_frame_equal(frame, before.drop(columns=absent), check_exact=True)
        assert frame.attrs["read"]["cut_bars"] == len(whole) - len(before) > 0


def test_a_bar_at_the_cut_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    bars = _bars(path)
    stamps = read_bars(path, cut=str(bars["Date"].iloc[42].date()))["timestamp"]
    assert stamps.iloc[-1] == bars["Date"].iloc[41] and len(stamps) == 42


@pytest.mark.parametrize("newest_first", [False, True])
def test_an_unreadable_date_after_the_cut_goes_with_its_neighbours(tmp_path: Path, newest_first: bool) -> None:
    """A bar without a readable date lies where its file puts it: among the bars after the cut it is cut
    (it would otherwise be refused); among those before, validation still refuses it."""
    bars = make_bars(60).astype({"Date": object})
    bars.loc[50, "Date"] = "2000-13-45"
    bars.loc[59, "Date"] = "not a date"  # the last row of the file (or the first, newest first)
    bars = bars.iloc[::-1] if newest_first else bars
    path = tmp_path / "t.csv"
    bars.to_csv(path, index=False)
    frame = read_bars(path, cut=CUT)
    assert len(frame) == 42 and frame["timestamp"].iloc[-1] == pd.Timestamp("2000-02-29")
    # both are before this cut (the last row follows 2000-03-23, a bar before it): kept, and refused
    with pytest.raises(ValueError, match=r"t.csv: 2 unparsable dates"):
        read_bars(path, cut="2000-03-24")
    all_unreadable = pd.DataFrame({**make_bars(3), "Date": ["x", "y", "z"]})
    with pytest.raises(ValueError, match=r"frame: 3 unparsable dates"):  # nothing to place them by: kept, refused
        read_bars(all_unreadable, name="frame", cut=CUT)


def test_a_long_table_leaves_out_the_tickers_it_cannot_use(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table = _long_table(tmp_path / "long.csv")
    table.loc[(table["Symbol"] == "AAA") & (table["Date"] == pd.Timestamp("2000-01-10")), "High"] = 0.5
    table.to_csv(tmp_path / "long.csv", index=False)
    with pytest.raises(ValueError, match=r"long.csv \(AAA\): 1 high below max\(open, close\)"):
        read_bars(tmp_path / "long.csv", cut=CUT)
    with caplog.at_level(logging.WARNING, logger="lightning_tf"):
        frame = read_bars(tmp_path / "long.csv", cut=CUT, bad_files="skip")
    assert frame["ticker"].unique().tolist() == ["BBB"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'long.csv'}: 1 files; left out: 1 with no bar before the cut 2000-03-01 (long.csv (LATE)); "
        "1 refused by validation (long.csv (AAA))"
    ]


def test_workers_leave_out_the_same_files(corpus: Path, caplog: pytest.LogCaptureFixture) -> None:
    said = []
    frames = []
    for workers in (0, 2):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lightning_tf"):
            frames.append(read_bars(corpus, cut=CUT, bad_files="skip", read_workers=workers))
        said.append([(r.name, r.levelno, r.getMessage()) for r in caplog.records])
    pd.testing.assert_frame_equal(frames[0], frames[1], check_exact=True)
    assert said[0] == said[1] and frames[0].attrs == frames[1].attrs


# ------------------------------------------------------------------------------------------------ folders
def test_a_folder_is_read_with_its_subfolders_but_not_hidden_ones(tmp_path: Path) -> None:
    (tmp_path / "Stocks").mkdir()
    (tmp_path / "ETFs" / "more").mkdir(parents=True)
    (tmp_path / ".ipynb_checkpoints").mkdir()
    _bars(tmp_path / "Stocks" / "aapl.us.txt", seed=1)
    _bars(tmp_path / "ETFs" / "spy.us.txt", seed=2)
    _bars(tmp_path / "ETFs" / "more" / "qqq.us.txt", seed=3)
    _bars(tmp_path / ".ipynb_checkpoints" / "aapl.us-checkpoint.txt", seed=4)
    _bars(tmp_path / "Stocks" / "._aapl.us.txt", seed=5)  # a macOS resource-fork twin
    (tmp_path / "Stocks" / "README.md").write_text("not bars")
    files = list_bar_files(tmp_path)
    assert [f.relative_to(tmp_path).as_posix() for f in files] == [
        "ETFs/more/qqq.us.txt",
        "ETFs/spy.us.txt",
        "Stocks/aapl.us.txt",
    ]
    frame = read_bars(tmp_path)
    assert frame["ticker"].unique().tolist() == ["aapl.us", "qqq.us", "spy.us"]
    one = read_bars(tmp_path / "ETFs" / "spy.us.txt")
    pd.testing.assert_frame_equal(frame[frame["ticker"] == "spy.us"].reset_index(drop=True), one)
    _bars(tmp_path / "ETFs" / "aapl.us.txt", seed=6)  # the same ticker in two folders
    with pytest.raises(ValueError, match=r"Stocks/aapl.us.txt: ticker 'aapl.us' also comes from .*ETFs/aapl.us.txt"):
        read_bars(tmp_path)
    empty = tmp_path / "nothing" / "inside"
    empty.mkdir(parents=True)
    with pytest.raises(ValueError, match=r"nothing: folder holds no .csv/.* files, nor do its subfolders$"):
        read_bars(tmp_path / "nothing")


def test_every_bar_file_of_a_folder_counts_once(tmp_path: Path) -> None:
    """The files' bars, the cut ones and the left-out files add up to what the folder holds."""
    rng = np.random.default_rng(0)
    total = 0
    for k in range(8):
        n = int(rng.integers(30, 90))
        _bars(tmp_path / f"T{k}.csv", n=n, seed=k, start=str(pd.Timestamp("2000-01-03") + pd.Timedelta(days=7 * k)))
        total += n
    frame = read_bars(tmp_path, cut=CUT)
    assert len(frame) + frame.attrs["read"]["cut_bars"] == total
    assert frame.attrs["read"]["files"] == 8


@pytest.mark.parametrize("workers", [0, 2])
def test_warnings_about_many_files_are_counted_in_one_line(
    tmp_path: Path, workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A handful of files with a repaired row are said one by one, as for a single file; a kind of warning that
    more files have (gaps in a corpus of thousands of tickers) is one line counting them, each file at INFO."""
    for k in range(7):
        bars = make_bars(60, seed=k)
        bars.drop(index=range(20 + k, 30 + k)).to_csv(tmp_path / f"gap{k}.csv", index=False)  # a 2-week gap
    for k in range(2):
        _with_bad_row(tmp_path / f"bad{k}.csv", 10 + k, "Low", -1.0, seed=10 + k)
    with caplog.at_level(logging.INFO, logger="lightning_tf"):
        frame = read_bars(tmp_path, on_error="drop", max_gap="7D", read_workers=workers)
    assert len(frame) == 7 * 50 + 2 * 59
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"{tmp_path / 'bad0.csv'}: 1 non-positive prices; dropped the rows (on_error='drop'); 59 rows remain",
        f"{tmp_path / 'bad1.csv'}: 1 non-positive prices; dropped the rows (on_error='drop'); 59 rows remain",
        f"{tmp_path}: 7 files have gaps longer than max_gap=7 days 00:00:00 (no window spans them): 7 gaps in all; "
        "gap0.csv, gap1.csv, gap2.csv and 4 more",
    ]
    gaps = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "gaps longer" in r.getMessage()]
    assert gaps == [
        f"{tmp_path / f'gap{k}.csv'}: 1 gaps longer than max_gap=7 days 00:00:00; no window will span them"
        for k in range(7)
    ]


def test_the_frame_and_the_warnings_do_not_depend_on_the_info_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Clean files are checked for gaps in one array comparison when nothing is logged at INFO, and through the
    frame that also logs the largest gap when it is: the same frame and warnings either way."""
    for k in range(4):
        bars = make_bars(60, seed=k)
        bars = bars.drop(index=range(20, 30)) if k % 2 else bars  # a two-week gap in every other file
        bars.to_csv(tmp_path / f"t{k}.csv", index=False)
    read = []
    for level in (logging.WARNING, logging.INFO):
        caplog.clear()
        with caplog.at_level(level, logger="lightning_tf"):
            frame = read_bars(tmp_path, on_error="drop", max_gap="7D", read_workers=0)
        read.append((frame, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]))
    pd.testing.assert_frame_equal(read[0][0], read[1][0], check_exact=True)
    assert (
        read[0][1]
        == read[1][1]
        == [
            f"{tmp_path / f't{k}.csv'}: 1 gaps longer than max_gap=7 days 00:00:00; no window will span them"
            for k in (1, 3)
        ]
    )
    with pytest.raises(ValueError, match=r"t1.csv: 1 gaps longer than max_gap=7 days"):
        read_bars(tmp_path, max_gap="7D", read_workers=0)  # on_error="error", nothing logged at INFO


def test_a_long_tables_warnings_name_its_tickers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Seven tickers of one long table with a bad row each: the summary counts seven series of that file and names
    them by ticker, not the same file seven times."""
    parts = [make_bars(40, seed=k).assign(Symbol=f"T{k}") for k in range(7)]
    for part in parts:
        part.loc[part.index[10], "Low"] = -1.0
    pd.concat(parts).to_csv(tmp_path / "long.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="lightning_tf"):
        frame = read_bars(tmp_path / "long.csv", on_error="drop")
    assert len(frame) == 7 * 39
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'long.csv'}: 7 series had bad rows dropped (on_error='drop'): "
        "7 non-positive prices in all; long.csv (T0), long.csv (T1), long.csv (T2) and 4 more"
    ]
