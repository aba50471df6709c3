"""Covariates of a universe of bars: past-observed columns, known-future calendar and user columns, static
categories, and cross-sectional labels (numpy and pandas only).

* **Past-observed** (``covariates``): numeric columns of the user's bar files beyond OHLCV (factors,
  turnover, fundamentals); the value at row ``t`` is known at the close of ``t``. They become extra input
  channels of ``x``, scaled with each ticker's training rows like the built-in features.
* **Known-future**: calendar features of a bar (:data:`CALENDAR_FEATURES`, from an exchange calendar, see
  :func:`calendar_features`) and user columns declared known in advance (``future_covariates``). A window
  ending at ``t`` reads them for rows ``t+1 .. t+F`` (the batch key ``x_future``).
* **Static**: a ticker id (with an unknown-ticker slot 0) and categories from a ticker -> category table
  (:func:`read_static`), the batch key ``static``.
* **Cross-sectional labels** (:func:`cross_sectional`): the forward return as a per-date z-score or rank
  across the tickers (qlib's ``CSZScoreNorm`` / ``CSRankNorm``), grouped by split and date.

Missing covariate values follow one explicit policy (:func:`apply_missing`): forward-filled up to
``ffill_limit`` rows, the rows dropped, or refused; never a silent NaN.
"""

from __future__ import annotations

import logging
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

__all__ = [
    "CALENDAR_FEATURES",
    "LABELS",
    "MISSING_POLICIES",
    "CovariateMissing",
    "Label",
    "apply_missing",
    "calendar_features",
    "check_calendar",
    "check_covariate_names",
    "cross_sectional",
    "read_static",
    "session_dates",
    "static_ids",
]

log = logging.getLogger(__name__)

CovariateMissing = Literal["ffill", "drop", "error"]
MISSING_POLICIES = ("ffill", "drop", "error")
Label = Literal["raw", "cs_zscore", "cs_rank"]
LABELS = ("raw", "cs_zscore", "cs_rank")

#: known-future calendar features of a bar: day of week and month (centred), calendar days since the previous
#: session, and whether the next (previous) session is later (earlier) than the next (previous) weekday
CALENDAR_FEATURES = ("cal_day_of_week", "cal_month", "cal_gap_days", "cal_pre_holiday", "cal_post_holiday")
#: ``calendar: business``: Monday to Friday, no holidays (no exchange calendar needed)
BUSINESS = "business"


@lru_cache(maxsize=64)  # a server checks the model's calendar for every batch
def check_calendar(name: str | None) -> None:
    """Refuse an unknown calendar name in one line (``business``, or an ``exchange_calendars`` code such as
    ``XNYS``, ``XSHG``, ``XSHE``)."""
    if name is None or name == BUSINESS:
        return
    try:
        import exchange_calendars as xc
    except ImportError:
        raise ValueError(
            f"calendar {name!r} needs the exchange-calendars package: pip install 'lightning-tf[calendar]' "
            "(or calendar: business for Monday-Friday without holidays)"
        ) from None
    if name not in xc.get_calendar_names():
        raise ValueError(f"calendar {name!r} is not an exchange calendar; use e.g. XNYS, XSHG, XSHE, or business")


def _read_sessions(name: str, first_year: int, last_year: int, bounded: bool = True) -> np.ndarray:
    """The calendar's sessions of the years ``first_year`` to ``last_year``; for years outside the calendar's
    bounds, those of its own range (``bounded``) or a ValueError."""
    start, end = pd.Timestamp(first_year, 1, 1), pd.Timestamp(last_year, 12, 31)
    if name == BUSINESS:
        return pd.bdate_range(start, end).to_numpy().astype("datetime64[D]")
    import exchange_calendars as xc

    with warnings.catch_warnings():  # exchange_calendars' own pandas deprecation warnings, not the user's
        warnings.simplefilter("ignore")
        try:
            cal = xc.get_calendar(name, start=start, end=end)
        except ValueError:  # outside the calendar's bounds: its own range
            if not bounded:
                raise
            cal = xc.get_calendar(name)
    start, end = max(start, cal.first_session), min(end, cal.last_session)
    if start > end:
        raise ValueError(f"calendar {name!r} covers {cal.first_session.date()} to {cal.last_session.date()} only")
    return cal.sessions_in_range(start, end).to_numpy().astype("datetime64[D]")


@lru_cache(maxsize=32)
def _sessions(name: str, first_year: int, last_year: int) -> np.ndarray:
    return _read_sessions(name, first_year, last_year)


#: years of margin on both sides of a calendar's span (:data:`_SPANS`) when it is built
SPAN_MARGIN = 10
#: per calendar, one span of years within its bounds that holds every span asked so far: first and last year,
#: sessions. Building a calendar takes a tenth of a second or more, and each series asks for its own years
_SPANS: dict[str, tuple[int, int, np.ndarray]] = {}


def session_dates(name: str, first: pd.Timestamp, last: pd.Timestamp) -> np.ndarray:
    """The calendar's session dates (``datetime64[D]``, ascending) of the years from ``first`` to ``last``,
    with a year of margin on both sides (cut from the calendar's span, :data:`_SPANS`, which grows to hold them;
    years outside the calendar's bounds are read alone, as its own range allows)."""
    lo, hi = first.year - 1, last.year + 1
    span = _SPANS.get(name)
    if span is None or lo < span[0] or hi > span[1]:
        union = (lo, hi) if span is None else (min(lo, span[0]), max(hi, span[1]))
        tries = [(a - m, b + m) for a, b in (union, (lo, hi)) for m in (SPAN_MARGIN, 0)]
        for a, b in tries:
            try:
                span = _SPANS[name] = (a, b, _read_sessions(name, a, b, bounded=False))
                break
            except ValueError:  # outside the calendar's bounds
                continue
        else:
            return _sessions(name, lo, hi)
    sessions = span[2]
    edges = np.array([f"{lo:04d}-01-01", f"{hi:04d}-12-31"], dtype="datetime64[D]")
    i, j = np.searchsorted(sessions, edges[0], side="left"), np.searchsorted(sessions, edges[1], side="right")
    return sessions[i:j]


def next_sessions(name: str, last: pd.Timestamp, n: int) -> pd.DatetimeIndex:
    """The ``n`` session dates after the day of ``last``, at ``last``'s time of day."""
    if last.tz is None:
        return pd.DatetimeIndex(next_sessions_of(name, np.array([last.to_datetime64()], "datetime64[ns]"), n)[0])
    day = np.datetime64(last.normalize().date(), "D")
    sessions = session_dates(name, last, last + pd.Timedelta(days=3 * n + 30))
    i = int(np.searchsorted(sessions, day, side="right"))
    out = sessions[i : i + n]
    if len(out) < n:
        raise ValueError(f"calendar {name!r} has no {n} sessions after {last.date()}")
    return pd.DatetimeIndex(out.astype("datetime64[ns]")) + (last - last.normalize())


def next_sessions_of(name: str, lasts: np.ndarray, n: int) -> np.ndarray:
    """:func:`next_sessions` of each of ``lasts`` (``(B,)`` datetime64[ns], local times) at once: ``(B, n)``
    datetime64[ns]."""
    lasts = np.asarray(lasts, dtype="datetime64[ns]")
    days = lasts.astype("datetime64[D]")  # (B,)
    offsets = lasts - days.astype("datetime64[ns]")  # (B,) the time of day
    first, last = pd.Timestamp(days.min()), pd.Timestamp(days.max())
    sessions = session_dates(name, first, last + pd.Timedelta(days=3 * n + 30))
    i = np.searchsorted(sessions, days, side="right")[:, None] + np.arange(n)  # (B, n)
    beyond = i[:, -1] >= len(sessions)
    if beyond.any():
        day = pd.Timestamp(days[int(np.argmax(beyond))]).date()
        raise ValueError(f"calendar {name!r} has no {n} sessions after {day}")
    return sessions[i].astype("datetime64[ns]") + offsets[:, None]  # (B, n)


def calendar_features(stamps: np.ndarray | pd.DatetimeIndex, name: str) -> np.ndarray:
    """:data:`CALENDAR_FEATURES` of every timestamp ``(n, 5)`` float64, from its date and the calendar
    ``name`` alone (so a forecast's future bars get them exactly as training rows did)."""
    if getattr(stamps, "tz", None) is not None:  # the local date and time of day
        stamps = stamps.tz_localize(None)
    # with numpy alone (a server computes them for every request)
    days = np.asarray(stamps, dtype="datetime64[ns]").astype("datetime64[D]")
    out = np.zeros((len(days), len(CALENDAR_FEATURES)))
    if not len(days):
        return out
    sessions = session_dates(name, pd.Timestamp(days.min()), pd.Timestamp(days.max()))
    i = np.searchsorted(sessions, days)  # this day's session, or the next one
    is_session = (i < len(sessions)) & (sessions[np.minimum(i, len(sessions) - 1)] == days)
    prev = sessions[np.clip(i - 1, 0, len(sessions) - 1)]
    nxt = sessions[np.clip(np.where(is_session, i + 1, i), 0, len(sessions) - 1)]
    weekday = (days.astype(np.int64) + 3) % 7  # Monday 0 (1970-01-01 was a Thursday)
    month = days.astype("datetime64[M]").astype(np.int64) % 12 + 1
    next_weekday = days + np.where(weekday >= 4, 7 - weekday, 1).astype("timedelta64[D]")
    prev_weekday = days - np.where(weekday == 0, 3, np.where(weekday == 6, 2, 1)).astype("timedelta64[D]")
    out[:, 0] = np.minimum(weekday, 4) / 4.0 - 0.5
    out[:, 1] = (month - 1) / 11.0 - 0.5
    out[:, 2] = (days - prev).astype(np.int64)
    out[:, 3] = nxt > next_weekday
    out[:, 4] = prev < prev_weekday
    return out


def check_covariate_names(past: list[str], future: list[str], features: list[str]) -> None:
    """Refuse a covariate named twice, or named like a built-in feature or a calendar feature."""
    names = [*past, *future]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"covariate(s) {twice} named more than once in covariates / future_covariates")
    clash = [n for n in names if n in features or n in CALENDAR_FEATURES]
    if clash:
        raise ValueError(f"covariate(s) {clash} have the name of a built-in or calendar feature; rename the column")


def apply_missing(
    frame: pd.DataFrame, names: list[str], policy: CovariateMissing, ffill_limit: int | None, source: str
) -> pd.DataFrame:
    """The canonical bars with the covariates ``names`` completed by ``policy``, per ticker:

    * ``ffill``: each missing value takes the last one before it, at most ``ffill_limit`` rows in a row (None:
      any number); values missing before a ticker's first value stay missing (those rows are warm-up rows,
      never read); a longer run of missing values is refused in one line;
    * ``drop``: rows with a missing covariate are dropped (the bar after them gets the return over the gap);
    * ``error``: any missing value is refused in one line naming the ticker, column and time.
    """
    if not names:
        return frame
    if policy not in MISSING_POLICIES:
        raise ValueError(f"covariate_missing must be one of {MISSING_POLICIES}, got {policy!r}")
    values = frame[names]
    missing = values.isna().to_numpy()
    if not missing.any():
        return frame

    def where(row: int, col: int, why: str) -> ValueError:
        t, stamp = frame["ticker"].iloc[row], frame["timestamp"].iloc[row]
        return ValueError(
            f"{source}: covariate {names[col]!r} of ticker {t!r} is missing at {stamp} "
            f"({int(missing[:, col].sum())} missing values in all); {why}"
        )

    if policy == "error":
        row, col = np.argwhere(missing)[0]
        raise where(row, col, "set covariate_missing: ffill (with ffill_limit) or drop")
    if policy == "drop":
        keep = ~missing.any(axis=1)
        log.warning(
            "%s: %d rows with a missing covariate dropped (covariate_missing: drop)", source, int((~keep).sum())
        )
        return frame[keep].reset_index(drop=True)
    grouped = values.groupby(frame["ticker"].to_numpy(), sort=False)
    filled = grouped.ffill(limit=ffill_limit)
    seen = grouped.transform(lambda c: c.notna().cummax()).to_numpy(bool)  # after the ticker's first value
    still = filled.isna().to_numpy() & seen
    if still.any():
        row, col = np.argwhere(still)[0]
        raise where(row, col, f"more than ffill_limit={ffill_limit} rows in a row; raise ffill_limit or drop them")
    out = frame.copy()
    out[names] = filled.to_numpy()
    return out


def read_static(path: str | Path, tickers: list[str] | None, columns: list[str] | None = None) -> pd.DataFrame:
    """The ticker -> category table ``path`` (CSV or Parquet: a ticker column and one column per static
    category, e.g. sector, industry, board), as text indexed by ticker, with the rows of ``tickers`` (None: every
    row); a table without a row for some of them is refused in one line naming them."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: static_file not found")
    table = pd.read_parquet(path) if path.suffix in (".parquet", ".pq") else pd.read_csv(path, dtype=str)
    table = table.astype(str)
    from .reader.columns import ALIASES, normalise

    aliases = {normalise(a) for a in ALIASES["ticker"]}
    key = next((c for c in table.columns if normalise(c) in aliases), table.columns[0])
    table[key] = table[key].str.strip()
    if table[key].duplicated().any():
        raise ValueError(f"{path}: ticker(s) {sorted(set(table[key][table[key].duplicated()]))[:10]} listed twice")
    table = table.set_index(key)
    names = [c for c in table.columns] if columns is None else list(columns)
    unknown = [c for c in names if c not in table.columns]
    if unknown:
        raise ValueError(f"{path}: static column(s) {unknown} not found; columns are {list(table.columns)}")
    if not names:
        raise ValueError(f"{path}: no category column beside the ticker column {key!r}")
    if tickers is None:
        return table[names]
    absent = [t for t in tickers if t not in table.index]
    if absent:
        shown = ", ".join(map(repr, absent[:20])) + (f" and {len(absent) - 20} more" if len(absent) > 20 else "")
        raise ValueError(f"{path}: no row for ticker(s) {shown} ({len(absent)} of {len(tickers)}); add them")
    return table.loc[list(tickers), names]


def static_ids(
    tickers: list[str], trained: list[str], table: pd.DataFrame | None, vocab: dict[str, list[str]], ticker: bool
) -> np.ndarray:
    """Static ids ``(len(tickers), S)`` int64: the ticker's id among ``trained`` + 1 (0: a ticker never seen in
    training) when ``ticker``, then each category's id in ``vocab`` + 1 (0: a category not seen in training,
    or a ticker the table lacks)."""
    cols = []
    if ticker:
        index = {t: k + 1 for k, t in enumerate(trained)}
        cols.append([index.get(t, 0) for t in tickers])
    for name, values in vocab.items():
        index = {v: k + 1 for k, v in enumerate(values)}
        present = table is not None and name in table.columns
        cols.append([index.get(table[name].get(t, ""), 0) if present else 0 for t in tickers])  # type: ignore[index]
    if not cols:
        return np.zeros((len(tickers), 0), dtype=np.int64)
    return np.asarray(cols, dtype=np.int64).T


def cross_sectional(values: np.ndarray, dates: np.ndarray, groups: np.ndarray, label: Label) -> np.ndarray:
    """``values`` (n,) as a per-(group, date) z-score (``cs_zscore``) or centred rank scaled to unit variance
    (``cs_rank``: ``((rank - 0.5) / m - 0.5) * sqrt(12)`` among ``m`` tickers) across the rows of that date;
    NaN stays NaN; a date with one ticker gets 0. ``groups`` (the split of each row) keeps the splits apart."""
    if label == "raw":
        return values
    frame = pd.DataFrame({"v": values, "d": dates, "g": groups})
    by = frame.groupby(["g", "d"], sort=False)["v"]
    if label == "cs_zscore":
        mean, std = by.transform("mean"), by.transform("std", ddof=0)
        out = ((frame["v"] - mean) / std.where(std > 0)).fillna(0.0)
    elif label == "cs_rank":
        rank, count = by.rank(method="average"), by.transform("count")
        out = ((rank - 0.5) / count - 0.5) * np.sqrt(12.0)
    else:
        raise ValueError(f"label must be one of {LABELS}, got {label!r}")
    out = out.to_numpy(np.float64, copy=True)
    out[np.isnan(values)] = np.nan
    return out
