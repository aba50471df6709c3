"""Validation of OHLCV bars: find every bad cell, then raise, drop or repair by one policy.

Checks, each reported with the file, the row (the line number for CSV files) and the column:

- unparsable (or missing) dates;
- duplicate timestamps (the first occurrence in the file is kept);
- non-numeric values and missing values (NaN, empty cells, ``--``);
- non-finite values (``inf``, ``-inf``, ``1e999``) in any price, volume or amount;
- non-positive prices and negative volume;
- ``high < max(open, close)`` and ``low > min(open, close)``;
- gaps between bars longer than ``max_gap`` (only when it is set; the largest gap is always logged).

Policies (``on_error``):

- ``"error"``: one ``ValueError`` listing the count of each problem and the first rows;
- ``"drop"``: rows with any problem are removed;
- ``"ffill"``: bad or missing cells are replaced by the previous bar's value (rows with nothing
  before them are dropped), high / low are widened to cover open and close; rows with a bad date
  and duplicate rows are dropped, as there is nothing to fill them with.

``drop`` and ``ffill`` log a warning with the count of every repair. Gaps longer than ``max_gap``
are not filled: the data module forms no window across them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Literal

import numpy as np
import pandas as pd

__all__ = [
    "PER_FILE",
    "REPAIR_HINT",
    "OnError",
    "ValidationReport",
    "check_on_error",
    "clean_order",
    "validate_bars",
    "validate_columns",
]

log = logging.getLogger(__name__)

OnError = Literal["error", "drop", "ffill"]
ON_ERROR_CHOICES = ("error", "drop", "ffill")
_PRICES = ("open", "high", "low", "close")
_MAX_EXAMPLES = 8
# The attribute of a warning about one file, ``(kind, file, counts)``: a folder's reading counts those of a
# kind in one line when more than a handful of files have it (lightning_tf.kline.reader.io).
PER_FILE = "per_file"
#: the last line of a refusal whose rows ``on_error`` would repair
REPAIR_HINT = (
    "Fix the file, or repair it with on_error 'drop' or 'ffill' (in a config: data.init_args.reading.on_error)."
)


class ValidationReport:
    """Problems found in one file (or one ticker of it): ``(kind, row label, column, detail)``."""

    def __init__(self, source: str, row_label: str) -> None:
        self.source, self.row_label = source, row_label
        self.counts: dict[str, int] = {}
        self.examples: list[tuple[int, str]] = []

    def add(self, kind: str, rows: np.ndarray, column: str, details: list[str]) -> None:
        if len(rows) == 0:
            return
        self.counts[kind] = self.counts.get(kind, 0) + len(rows)
        for r, d in zip(rows[:_MAX_EXAMPLES], details[:_MAX_EXAMPLES], strict=False):
            self.examples.append((int(r), f"{self.row_label} {int(r)}, column {column!r}: {d}"))

    def __bool__(self) -> bool:
        return bool(self.counts)

    def summary(self) -> str:
        return ", ".join(f"{n} {kind}" for kind, n in self.counts.items())

    def message(self) -> str:
        lines = [f"{self.source}: {self.summary()}"]
        lines += [f"  {text}" for _, text in sorted(self.examples)[:_MAX_EXAMPLES]]
        if len(self.examples) > _MAX_EXAMPLES:
            lines.append(f"  ... ({len(self.examples) - _MAX_EXAMPLES} more shown only as counts)")
        lines.append(REPAIR_HINT)
        return "\n".join(lines)


def check_on_error(on_error: str) -> None:
    """Raise unless ``on_error`` names a policy."""
    if on_error not in ON_ERROR_CHOICES:
        raise ValueError(f"on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}")


def _fmt(x: object) -> str:
    return repr(x) if isinstance(x, str) else f"{x:g}" if isinstance(x, float) else str(x)


def validate_bars(
    frame: pd.DataFrame,
    raw: pd.DataFrame | None = None,
    *,
    source: str = "<frame>",
    on_error: OnError = "error",
    max_gap: str | None = None,
    row_label: str = "row",
) -> pd.DataFrame:
    """Check one ticker's bars and apply the ``on_error`` policy.

    Args:
        frame: canonical columns (``timestamp``, ``open`` ... ``volume``, optional ``amount``,
            ``adj_close``), unparsable cells already NaN / NaT, plus ``_row``: the row number to
            report (the file line for CSV). Without ``_row`` the position + 1 is reported.
        raw: the same rows as text, for the messages: ``timestamp``, and ``<column>__bad`` masks of
            cells that held something that is not a number. None: every NaN counts as missing.
        source: file name for the messages.
        on_error: ``"error"``, ``"drop"`` or ``"ffill"`` (see the module docstring).
        max_gap: largest allowed spacing between consecutive bars (pandas Timedelta string).
        row_label: how rows are named in messages (``"line"`` for CSV files).

    Returns:
        The bars sorted by timestamp with unique timestamps, without ``_row``, fresh RangeIndex.
    """
    check_on_error(on_error)
    gap_limit = None if max_gap is None else pd.Timedelta(max_gap)
    rows = frame["_row"].to_numpy() if "_row" in frame.columns else np.arange(1, len(frame) + 1)
    order = clean_order({c: frame[c].to_numpy() for c in frame.columns if c != "_row"}, rows)
    if order is not None:  # nothing to report: the policies have nothing to do
        clean = frame.assign(_row=rows)
        clean = clean if isinstance(order, slice) else clean.take(order)
        _check_gaps(clean, source, row_label, gap_limit, on_error)
        return clean.drop(columns=["_row"]).reset_index(drop=True)
    df = frame.copy()
    if "_row" not in df.columns:
        df["_row"] = np.arange(1, len(df) + 1)
    report = ValidationReport(source, row_label)
    rows = df["_row"].to_numpy()
    numeric = [c for c in ("open", "high", "low", "close", "volume", "amount", "adj_close") if c in df.columns]

    # Dates: rows without a usable timestamp can only be dropped.
    bad_date = df["timestamp"].isna().to_numpy()
    if bad_date.any():
        texts = raw["timestamp"].astype(str).to_numpy() if raw is not None else np.full(len(df), "NaT")
        report.add(
            "unparsable dates", rows[bad_date], "timestamp", [f"cannot parse {t!r} as a date" for t in texts[bad_date]]
        )

    # Cells: non-numeric, missing, non-positive price, negative volume -> marked bad.
    bad_cell = pd.DataFrame(False, index=df.index, columns=numeric)
    for col in numeric:
        values = df[col].to_numpy()
        nan = np.isnan(values)
        not_number = (
            raw[f"{col}__bad"].to_numpy() if raw is not None and f"{col}__bad" in raw else np.zeros(len(df), bool)
        )
        if not_number.any():
            report.add(
                "non-numeric values",
                rows[not_number],
                col,
                [f"{v!r} is not a number" for v in raw[col].to_numpy()[not_number]],
            )
        missing = nan & ~not_number
        if missing.any():
            report.add("missing values", rows[missing], col, ["missing value"] * int(missing.sum()))
        # inf passes every comparison below and would surface only as a non-finite feature later.
        infinite = np.isinf(values)
        if infinite.any():
            texts = raw[col].to_numpy()[infinite] if raw is not None and col in raw else values[infinite]
            report.add("non-finite values", rows[infinite], col, [f"{_fmt(t)} is not finite" for t in texts])
        usable = ~nan & ~infinite
        if col in _PRICES or col == "adj_close":
            bad = usable & (values <= 0)
            kind, what = "non-positive prices", "price {} is not positive"
        elif col == "volume":
            bad = usable & (values < 0)
            kind, what = "negative volumes", "negative volume {}"
        else:
            bad = usable & (values < 0)
            kind, what = "negative amounts", "negative amount {}"
        report.add(kind, rows[bad], col, [what.format(_fmt(v)) for v in values[bad]])
        bad_cell[col] = nan | infinite | bad

    # Duplicates, judged after sorting by time (stable: the first occurrence in the file is kept).
    df = df.assign(_bad_date=bad_date)
    df = df.sort_values(["timestamp", "_row"], kind="stable", na_position="last")
    bad_cell = bad_cell.loc[df.index]
    dup = (df["timestamp"].duplicated(keep="first") & df["timestamp"].notna()).to_numpy()
    if dup.any():
        report.add(
            "duplicate timestamps",
            df["_row"].to_numpy()[dup],
            "timestamp",
            [f"duplicate timestamp {t}" for t in df["timestamp"].to_numpy()[dup]],
        )

    # OHLC consistency, on rows whose four prices are usable.
    o, h, lo, c = (df[k].to_numpy() for k in _PRICES)
    usable = ~bad_cell[list(_PRICES)].any(axis=1).to_numpy()
    top, bottom = np.fmax(o, c), np.fmin(o, c)
    high_bad = usable & (h < top)
    low_bad = usable & (lo > bottom)
    srows = df["_row"].to_numpy()
    report.add(
        "high below max(open, close)",
        srows[high_bad],
        "high",
        [f"high {_fmt(a)} < max(open, close) {_fmt(b)}" for a, b in zip(h[high_bad], top[high_bad], strict=True)],
    )
    report.add(
        "low above min(open, close)",
        srows[low_bad],
        "low",
        [f"low {_fmt(a)} > min(open, close) {_fmt(b)}" for a, b in zip(lo[low_bad], bottom[low_bad], strict=True)],
    )

    if report and on_error == "error":
        raise ValueError(report.message())

    drop = df["_bad_date"].to_numpy() | dup
    if on_error == "drop":
        drop |= bad_cell.any(axis=1).to_numpy() | high_bad | low_bad
        df = df[~drop]
    elif on_error == "ffill":
        df = df[~drop].copy()
        cells = bad_cell[~drop]
        for col in numeric:
            df.loc[cells[col].to_numpy(), col] = np.nan
        df[numeric] = df[numeric].ffill()
        leading = df[numeric].isna().any(axis=1).to_numpy()
        df = df[~leading].copy()
        top, bottom = np.fmax(df["open"], df["close"]), np.fmin(df["open"], df["close"])
        df["high"] = np.fmax(df["high"], top)
        df["low"] = np.fmin(df["low"], bottom)
        if leading.any():
            report.counts["leading rows without a value to fill from"] = int(leading.sum())
    if report:
        action = "dropped the rows" if on_error == "drop" else "forward-filled / widened the cells"
        kind = "had bad rows dropped" if on_error == "drop" else "had bad cells forward-filled"
        log.warning(
            "%s: %s; %s (on_error=%r); %d rows remain",
            source,
            report.summary(),
            action,
            on_error,
            len(df),
            extra={PER_FILE: (f"{kind} (on_error={on_error!r})", source, dict(report.counts))},
        )
    if df.empty:
        raise ValueError(f"{source}: no valid rows left after on_error={on_error!r}")

    _check_gaps(df, report.source, row_label, gap_limit, on_error)
    return df.drop(columns=["_row", "_bad_date"]).reset_index(drop=True)


def clean_order(columns: Mapping[str, np.ndarray], rows: np.ndarray) -> np.ndarray | slice | None:
    """The order that sorts one ticker's bars by time (equal stamps in ``rows`` order) when none of the
    checks would report anything, else None; decided with a few whole-array comparisons.

    Args:
        columns: ``timestamp`` (datetime64[ns]) and the numeric canonical columns present.
        rows: the row number of each bar.
    """
    stamps = columns["timestamp"]
    if stamps.dtype != "datetime64[ns]" or np.isnat(stamps).any():
        return None
    for col in ("open", "high", "low", "close", "volume", "amount", "adj_close"):
        if col not in columns:
            continue
        v = columns[col]
        if v.dtype != np.float64 or not np.isfinite(v).all():  # NaN: missing or not a number; inf
            return None
        if (v <= 0).any() if col in _PRICES or col == "adj_close" else (v < 0).any():
            return None
    o, h, lo, c = (columns[k] for k in _PRICES)
    if (h < np.fmax(o, c)).any() or (lo > np.fmin(o, c)).any():
        return None
    ticks = stamps.view(np.int64)
    if (np.diff(ticks) > 0).all():
        return slice(None)
    order = np.lexsort((rows, ticks))
    return order if (np.diff(ticks[order]) > 0).all() else None  # else: duplicate timestamps


def validate_columns(
    columns: dict[str, np.ndarray],
    rows: np.ndarray,
    *,
    source: str,
    on_error: OnError,
    max_gap: str | None,
    row_label: str,
) -> dict[str, np.ndarray] | None:
    """:func:`validate_bars` of clean bars given as arrays (``columns`` as in :func:`clean_order`): the
    arrays sorted by time, or None when a check finds a problem (:func:`validate_bars` then says which)."""
    check_on_error(on_error)
    order = clean_order(columns, rows)
    if order is None:
        return None
    out = {k: v[order] for k, v in columns.items()}
    if not log.isEnabledFor(logging.INFO) and (max_gap is None or _within(out["timestamp"], max_gap)):
        return out  # nothing to log, and no gap longer than max_gap to warn of or refuse
    if max_gap is not None or log.isEnabledFor(logging.INFO):
        frame = pd.DataFrame({"timestamp": out["timestamp"], "_row": rows[order]})
        _check_gaps(frame, source, row_label, None if max_gap is None else pd.Timedelta(max_gap), on_error)
    return out


def _within(stamps: np.ndarray, max_gap: str) -> bool:
    """Whether no two consecutive ``stamps`` (sorted datetime64[ns]) are more than ``max_gap`` apart, in one
    array comparison (the frame :func:`_check_gaps` builds costs more than the check)."""
    return bool((np.diff(stamps.view(np.int64)) <= pd.Timedelta(max_gap).value).all())


def _check_gaps(df: pd.DataFrame, source: str, row_label: str, limit: pd.Timedelta | None, on_error: OnError) -> None:
    if len(df) < 2:
        return
    if log.isEnabledFor(logging.INFO):
        step = df["timestamp"].diff().iloc[1:]
        where = int(step.to_numpy().argmax()) + 1
        log.info(
            "%s: %d bars, typical spacing %s, largest gap %s before %s %d (%s)",
            source,
            len(df),
            step.median(),
            step.max(),
            row_label,
            df["_row"].iloc[where],
            df["timestamp"].iloc[where],
        )
    if limit is None:
        return
    step = df["timestamp"].diff().iloc[1:]
    over = (step > limit).to_numpy()
    if not over.any():
        return
    at = np.flatnonzero(over) + 1
    details = [
        f"{row_label} {df['_row'].iloc[i]}, column 'timestamp': gap of {step.iloc[i - 1]} after "
        f"{df['timestamp'].iloc[i - 1]}"
        for i in at[:_MAX_EXAMPLES]
    ]
    if on_error == "error":
        raise ValueError(
            f"{source}: {len(at)} gaps longer than max_gap={limit}\n  "
            + "\n  ".join(details)
            + "\nPass on_error='drop' or 'ffill' to split the series at the gaps instead."
        )
    log.warning(
        "%s: %d gaps longer than max_gap=%s; no window will span them",
        source,
        len(at),
        limit,
        extra={PER_FILE: (f"have gaps longer than max_gap={limit} (no window spans them)", source, {"gaps": len(at)})},
    )
