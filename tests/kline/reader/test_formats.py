"""Number formats at size: the decision taken on the lines at both ends of a file is checked on every
cell, so a separator first seen deep inside a large file is read right or refused naming its line."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.reader import formats
from lightning_tf.kline.reader.formats import NumberEvidence, number_evidence
from lightning_tf.kline.reader.io import read_bars

OHLCV = ["timestamp", "open", "high", "low", "close", "volume"]
N = 20_000  # rows: far more than the lines sampled at each end
LATE = 10_500  # the data row where the planted cells start (its file line is LATE + 2, after the header)
BAND = range(LATE, LATE + 100)  # the rows holding planted cells, deep inside the file


def _reference(cells: list[str]) -> NumberEvidence:
    """The evidence of classifying every cell in turn (the definition ``number_evidence`` must meet)."""
    evidence = NumberEvidence()
    for cell in cells:
        verdict = formats._classify(cell)
        if verdict is None:
            continue
        kind, c, thou = verdict
        (evidence.proofs if kind == "proof" else evidence.ambiguous).setdefault(c, repr(cell.strip()))
        if thou is not None:
            evidence.grouping.add(thou)
    return evidence


def _random_cell(rng: random.Random) -> str:
    digits = lambda n: "".join(rng.choice("0123456789") for _ in range(n))  # noqa: E731
    forms = [
        lambda: digits(rng.randint(1, 4)) + rng.choice(".,") + digits(rng.randint(0, 5)),
        lambda: digits(rng.randint(1, 3)) + "".join(rng.choice(".,") + digits(3) for _ in range(rng.randint(1, 3))),
        lambda: digits(rng.randint(1, 3)) + "," + digits(3) + "." + digits(rng.randint(1, 3)),
        lambda: digits(rng.randint(1, 3)) + "." + digits(3) + "," + digits(rng.randint(1, 3)),
        lambda: "0" + rng.choice(".,") + digits(3),
        lambda: f"20{digits(2)}{rng.choice('.-/')}{digits(2)}{rng.choice('.-/')}{digits(2)}",
        lambda: rng.choice(["", " ", "--", "abc", "$", "nan"]) + rng.choice(["", digits(2) + ",5", "1.0"]),
        lambda: rng.choice("+- $¥") + digits(rng.randint(1, 4)) + rng.choice(["", ".", ","]) + digits(3),
    ]
    return rng.choice(forms)()


@pytest.mark.parametrize("seed", range(5))
def test_number_evidence_equals_classifying_every_cell(seed: int) -> None:
    rng = random.Random(seed)
    cells = [_random_cell(rng) for _ in range(rng.randint(1, 400))]
    fast, slow = number_evidence(cells), _reference(cells)
    assert fast.proofs == slow.proofs and fast.ambiguous == slow.ambiguous and fast.grouping == slow.grouping
    lines = list(range(7, 7 + len(cells)))
    named = number_evidence(cells, lines)
    for c, example in named.proofs.items():  # the example is the first proving cell, with its line
        i = next(i for i, cell in enumerate(cells) if (formats._classify(cell) or ("", ""))[:2] == ("proof", c))
        assert example == f"{cells[i].strip()!r} on line {lines[i]}"


def _bars(n: int = N) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    close = np.round(50 * np.exp(np.cumsum(rng.normal(0, 0.01, n))), 2)
    return pd.DataFrame(
        {
            "timestamp": pd.date_range("1980-01-01", periods=n, freq="D").astype("datetime64[ns]"),
            "open": close,
            "high": np.round(close * 1.01, 2),
            "low": np.round(close * 0.99, 2),
            "close": close,
            "volume": rng.integers(1_000, 9_000, n).astype(np.float64),
        }
    )


def _write(path: Path, sep: str, rows: list[list[str]]) -> Path:
    lines = [sep.join(["date", "open", "high", "low", "close", "volume"])]
    lines += [sep.join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def _rows(bars: pd.DataFrame, cell) -> list[list[str]]:  # noqa: ANN001
    """Each bar as text cells; ``cell(i, column, value)`` writes one number."""
    dates = bars["timestamp"].dt.strftime("%Y-%m-%d").tolist()
    values = {c: bars[c].tolist() for c in OHLCV[1:]}
    return [[dates[i], *(cell(i, c, values[c][i]) for c in OHLCV[1:])] for i in range(len(bars))]


def test_a_decimal_comma_first_seen_after_line_10000_is_read_exactly(tmp_path: Path) -> None:
    # ";" separated; whole prices (nothing to decide from) but in the BAND rows, whose closes have decimal commas.
    bars = _bars()
    prices = ["open", "high", "low", "close"]
    bars[prices] = bars[prices].round()
    bars.loc[LATE : BAND[-1], "close"] += 0.25  # each planted close has a decimal part: 51,25
    bars.loc[LATE : BAND[-1], "high"] += 1

    def cell(i: int, column: str, value: float) -> str:
        return f"{value:.2f}".replace(".", ",") if i in BAND and column == "close" else f"{value:.0f}"

    frame = read_bars(_write(tmp_path / "late_comma.csv", ";", _rows(bars, cell)))
    pd.testing.assert_frame_equal(frame[OHLCV], bars, check_exact=True)
    assert frame["close"].iloc[LATE] % 1 == 0.25


def test_a_decimal_comma_after_line_10000_among_decimal_points_is_refused_naming_its_line(tmp_path: Path) -> None:
    bars = _bars()

    def cell(i: int, column: str, value: float) -> str:
        if i == LATE and column == "close":
            return '"' + f"{value:.2f}".replace(".", ",") + '"'  # quoted: a ','-separated file
        return f"{value:.2f}" if column != "volume" else f"{value:.0f}"

    path = _write(tmp_path / "mixed.csv", ",", _rows(bars, cell))
    close = f"{bars['close'].iloc[LATE]:.2f}".replace(".", ",")
    with pytest.raises(
        ValueError,
        match=rf"mixed.csv: numbers use both ',' and '.' as the decimal separator \(e.g. '{close}' on line {LATE + 2} "
        r"and '[0-9.]+'\)",
    ):
        read_bars(path)
    # Said how to read it, the reader refuses the one cell that is not a number that way, with its line.
    with pytest.raises(ValueError, match=rf"line {LATE + 2}, column 'close': '{close}' is not a number"):
        read_bars(path, decimal=".")


def test_thousands_first_seen_after_line_10000_are_read_exactly(tmp_path: Path) -> None:
    bars = _bars()
    bars.loc[LATE : BAND[-1], "volume"] += 1_000_000.5

    def cell(i: int, column: str, value: float) -> str:
        if column == "volume":
            return f'"{value:,.1f}"' if i in BAND else f"{value:.0f}"  # "1,004,123.5"
        return f"{value:.2f}"

    frame = read_bars(_write(tmp_path / "late_thousands.csv", ",", _rows(bars, cell)))
    pd.testing.assert_frame_equal(frame[OHLCV], bars, check_exact=True)


def test_a_late_proof_overrules_an_ambiguous_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # ';' separated, volumes '1,234' at both ends (a decimal comma, if nothing else is known); in the
    # middle '2.5' proves the decimal point, so '1,234' is 1234 (as if every cell had been classified).
    bars = _bars()
    bars["volume"] = 1_000.0 + np.arange(N) % 999
    bars.loc[LATE, "volume"] = 2.5

    def cell(i: int, column: str, value: float) -> str:
        if column == "volume":
            return "2.5" if i == LATE else f"{value:,.0f}"
        return f"{value:.0f}" if value == int(value) else f"{value:.2f}"

    bars[["open", "high", "low", "close"]] = bars[["open", "high", "low", "close"]].round()
    path = _write(tmp_path / "late_proof.csv", ";", _rows(bars, cell))
    with caplog.at_level(logging.WARNING):
        frame = read_bars(path)
    pd.testing.assert_frame_equal(frame[OHLCV], bars, check_exact=True)
    assert "read with ','" not in caplog.text
    pd.testing.assert_frame_equal(read_bars(path, decimal=".", thousands=","), frame)


def test_bad_cells_after_line_10000_are_refused_naming_their_line(tmp_path: Path) -> None:
    bars = _bars()

    def cell(i: int, column: str, value: float) -> str:
        return "abc" if (i, column) == (LATE + 7, "close") else f"{value:.2f}"

    path = _write(tmp_path / "abc.csv", ",", _rows(bars, cell))
    with pytest.raises(ValueError, match=rf"abc.csv: 1 non-numeric values\n  line {LATE + 9}, column 'close': 'abc'"):
        read_bars(path)
    # An unquoted decimal comma in a ','-separated file splits the row: refused naming the line.
    rows = _rows(bars, lambda i, c, v: f"{v:.2f}")
    rows[LATE][4] = rows[LATE][4].replace(".", ",")
    with pytest.raises(ValueError, match=rf"Expected 6 fields in line {LATE + 2}, saw 7"):
        read_bars(_write(tmp_path / "split.csv", ",", rows))
