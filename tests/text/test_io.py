"""Readers of parallel text: TSV columns by name or index, aligned files (plain and gzip), line ends and
byte-order marks, and errors that name the file, line and column."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from lightning_tf.text.io import read_aligned, read_lines, read_pairs, read_sentences, read_tsv
from tests.helpers.text import DE, EN, tatoeba_rows, write_tsv

# ---------------------------------------------------------------------------------------- readers


def test_tatoeba_tsv_direction_by_name_and_index(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "deu.txt", tatoeba_rows())
    en_de, _ = read_tsv(path, "en", "de")
    de_en, stats = read_tsv(path, "de", "en")
    assert en_de[3] == ("I won.", "Ich hab gewonnen.") and de_en[3] == ("Ich hab gewonnen.", "I won.")
    assert stats.lines == 20 and stats.empty == 0
    assert read_tsv(path, "1", "0")[0] == de_en  # 0-based column indices
    assert read_tsv(path, "fr", "en", columns=["en", "fr"])[0] == de_en


def test_tsv_header_names_columns(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "x.tsv", ["id\tdeu\teng", "1\tHallo!\tHi.", "2\tLauf!\tRun!"])
    pairs, stats = read_tsv(path, "deu", "eng", header=True)
    assert pairs == [("Hallo!", "Hi."), ("Lauf!", "Run!")] and stats.lines == 2


def test_aligned_files_plain_and_gz(tmp_path: Path) -> None:
    (tmp_path / "train.en").write_text("\n".join(EN) + "\n", encoding="utf-8")
    with gzip.open(tmp_path / "train.de.gz", "wt", encoding="utf-8") as f:
        f.write("\r\n".join(DE) + "\r\n")  # Windows line ends too
    pairs, stats = read_aligned(tmp_path / "train", "de", "en")
    assert pairs == list(zip(DE, EN, strict=True)) and stats.lines == 20


def test_aligned_empty_lines_are_dropped_together_and_a_bom_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "t.en").write_bytes(b"\xef\xbb\xbfHi.\n\nRun!\nGo.\n")
    (tmp_path / "t.de").write_text("Hallo!\nWas?\n \nGeh.\n", encoding="utf-8")
    pairs, stats = read_aligned(tmp_path / "t", "en", "de")
    assert pairs == [("Hi.", "Hallo!"), ("Go.", "Geh.")] and (stats.lines, stats.empty) == (4, 2)


def test_line_separators_inside_a_sentence_do_not_split_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes("one\u2028still one\x0cand\rmore\nsecond\n".encode())
    assert read_lines(path) == ["one\u2028still one\x0cand\rmore", "second"]


# ---------------------------------------------------------------------------------------- bad input


def test_mismatched_line_counts_name_both_files_and_the_line(tmp_path: Path) -> None:
    (tmp_path / "train.en").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("x\ny\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.en has 3 lines but .*train\.de has 2.*train\.en:3 has no partner"):
        read_aligned(tmp_path / "train", "en", "de")


def test_undecodable_bytes_name_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_bytes(b"Hi.\tHallo!\nRun!\tLauf!\nBad\tSch\xf6n\n")  # latin-1 "ö"
    with pytest.raises(ValueError, match=r"bad\.tsv:3: not valid UTF-8 .*byte 0xf6 at column 8"):
        read_tsv(path, "en", "de")


def test_missing_column_names_file_and_line(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "deu.txt", [*tatoeba_rows(5), "Only English here."])
    with pytest.raises(ValueError, match=r"deu\.txt:6: expected at least 2 tab-separated columns .* found 1"):
        read_tsv(path, "de", "en")


def test_unknown_column_and_missing_files(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "deu.txt", tatoeba_rows(5))
    with pytest.raises(ValueError, match=r"language 'fr' is not one of the columns \['en', 'de'\]"):
        read_tsv(path, "fr", "en")
    with pytest.raises(FileNotFoundError, match=r"neither .*train\.fr nor .*train\.fr\.gz exists"):
        read_aligned(tmp_path / "train", "fr", "en")
    with pytest.raises(FileNotFoundError, match=r"is a folder, give the file prefix such as .*train"):
        read_aligned(tmp_path, "de", "en")
    # a TSV that is gone is named as a missing file, not as a prefix of aligned files (file_format auto)
    with pytest.raises(FileNotFoundError, match=r"gone\.tsv: no such file \(nor aligned files .*gone\.tsv\.en, "):
        read_pairs(tmp_path / "gone.tsv", "en", "de")
    (tmp_path / "bad.tsv.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match=r"bad\.tsv\.gz: cannot decompress"):
        read_tsv(tmp_path / "bad.tsv.gz", "en", "de")


def test_empty_lines_are_dropped_and_counted(tmp_path: Path) -> None:
    rows = tatoeba_rows()
    rows[4] = ""  # blank line
    rows[7] = "Stop it.\t   "  # empty target
    path = write_tsv(tmp_path / "deu.txt", rows)
    pairs, stats = read_tsv(path, "en", "de")
    assert len(pairs) == 18 and stats.empty == 2


def test_empty_and_blank_files_say_so_and_name_the_file(tmp_path: Path) -> None:
    empty, blank = tmp_path / "empty.tsv", tmp_path / "blank.tsv"
    empty.write_text("", encoding="utf-8")
    blank.write_text("\n  \n\t\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty\.tsv: the file is empty$"):
        read_tsv(empty, "en", "de")
    with pytest.raises(ValueError, match=r"blank\.tsv: holds no sentences, only 3 blank lines$"):
        read_tsv(blank, "en", "de")
    with pytest.raises(ValueError, match=r"empty\.tsv: the file is empty, expected a header line"):
        read_tsv(empty, "en", "de", header=True)
    with pytest.raises(ValueError, match=r"header\.tsv: the file is empty below its header line"):
        read_tsv(write_tsv(tmp_path / "header.tsv", ["en\tde"]), "en", "de", header=True)
    with pytest.raises(ValueError, match=r"empty\.tsv: the file is empty$"):
        read_sentences(empty)
    with pytest.raises(ValueError, match=r"blank\.tsv: holds no sentences, only 3 blank lines$"):
        read_sentences(blank)
    (tmp_path / "t.en").write_text(" \n", encoding="utf-8")
    (tmp_path / "t.de").write_text("Hallo!\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"t\.en: holds no sentences, only 1 blank line$"):
        read_aligned(tmp_path / "t", "en", "de")


def test_sentences_to_translate_keep_blank_lines_in_place(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("  Hi there. \n\n\tRun!\n", encoding="utf-8")
    assert read_sentences(path) == ["Hi there.", "", "Run!"]


# ---------------------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64])
def test_lines_read_in_blocks_equal_the_whole_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Blocks cut anywhere (inside a multi-byte character, between \\r and \\n, inside the BOM) change
    nothing: the lines, and the line and column of a bad byte, are those of the whole file."""
    from lightning_tf.text import io as text_io

    lines = ["Grüß Gott!", "", "   ", "日本語の文", "tab\tinside", "emoji 🙂 end", "last line"]
    data = b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n"
    (tmp_path / "a.txt").write_bytes(data)
    with gzip.open(tmp_path / "a.txt.gz", "wb") as f:
        f.write(data)
    monkeypatch.setattr(text_io, "_BLOCK", block)
    assert read_lines(tmp_path / "a.txt") == lines == read_lines(tmp_path / "a.txt.gz")
    (tmp_path / "b.txt").write_bytes(b"first\nsecond line\nthe th\xe4rd\n")
    with pytest.raises(ValueError, match=r"b\.txt:3: not valid UTF-8 .*byte 0xe4 at column 7"):
        read_lines(tmp_path / "b.txt")
    (tmp_path / "c.txt").write_bytes(b"no line end at the end")
    assert read_lines(tmp_path / "c.txt") == ["no line end at the end"]
    (tmp_path / "d.txt").write_bytes(b"\xef\xbb\xbf")
    assert read_lines(tmp_path / "d.txt") == []
