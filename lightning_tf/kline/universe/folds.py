"""Walk-forward folds on a panel's trading dates: train, embargo, validate, embargo, test, roll.

Each fold tests on ``test_span`` dates that follow its training and validation dates, with ``embargo``
dates between the last training date and the first validation date and again before the first test
date (purged and embargoed cross-validation, de Prado, *Advances in Financial Machine Learning*, 2018,
ch. 7: with an embargo of at least the forecast horizon no target of one split lies in the next). The
folds' test spans are consecutive and end on the last date; the training window either grows from the
first date (``expanding``) or keeps ``train_span`` dates (``rolling``). The dates are what
:class:`~lightning_tf.kline.KLineDataModule` takes as ``train_start``, ``val_start``, ``test_start`` and
``test_end`` (with its own ``embargo``, counted in each ticker's bars), so a fold is an ordinary run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import pandas as pd

__all__ = ["Fold", "folds"]

Window = Literal["expanding", "rolling"]


@dataclass(frozen=True)
class Fold:
    """One walk-forward fold; every date is a trading date and every span includes both of its ends.

    Attributes:
        number: the fold's number, from 1.
        train_start, train_end: the training dates.
        val_start, val_end: the validation dates.
        test_start, test_end: the test dates.
    """

    number: int
    train_start: pd.Timestamp
    train_end: pd.Timestamp
    val_start: pd.Timestamp
    val_end: pd.Timestamp
    test_start: pd.Timestamp
    test_end: pd.Timestamp

    def data_overrides(self, embargo: int) -> dict[str, str | int]:
        """The fold as the fields of the :class:`~lightning_tf.kline.KLineDataModule`'s ``splits``."""
        day = lambda t: t.isoformat() if t != t.normalize() else t.strftime("%Y-%m-%d")  # noqa: E731
        return {
            "train_start": day(self.train_start),
            "val_start": day(self.val_start),
            "test_start": day(self.test_start),
            "test_end": day(self.test_end),
            "embargo": embargo,
        }

    def row(self) -> dict[str, object]:
        """The fold as one row of ``folds.csv``: its number and dates (``YYYY-MM-DD`` for daily dates)."""
        return {k: (v.strftime("%Y-%m-%d") if isinstance(v, pd.Timestamp) else v) for k, v in asdict(self).items()}


def folds(
    dates: Sequence[pd.Timestamp] | pd.DatetimeIndex | np.ndarray,
    n_folds: int,
    test_span: int,
    val_span: int,
    embargo: int,
    window: Window = "expanding",
    train_span: int | None = None,
    min_train: int = 1,
) -> list[Fold]:
    """The walk-forward folds of ``dates`` (a panel's trading dates; sorted and deduplicated here).

    Args:
        dates: the trading dates.
        n_folds: folds, the last one testing on the last ``test_span`` dates.
        test_span: test dates per fold (252: a year of daily bars).
        val_span: validation dates per fold, just before its test dates (less the embargo).
        embargo: dates left out between training and validation and between validation and test; at least
            the forecast horizon, so no training target reaches a validation date (nor a validation target a
            test date).
        window: ``expanding`` (every fold trains from the first date) or ``rolling`` (the last ``train_span``
            dates before the validation's embargo).
        train_span: training dates of a rolling window; None: as many as the first fold has.
        min_train: the fewest training dates a fold may have (the first context and target, the warm-up).

    Returns:
        The folds, oldest first; test spans consecutive, each after its fold's validation and training.
    """
    for name, value, low in (
        ("n_folds", n_folds, 1),
        ("test_span", test_span, 1),
        ("val_span", val_span, 1),
        ("embargo", embargo, 0),
        ("min_train", min_train, 1),
    ):
        if value < low:
            raise ValueError(f"{name} ({value}) must be >= {low}")
    if window not in ("expanding", "rolling"):
        raise ValueError(f"window must be 'expanding' or 'rolling', got {window!r}")
    if train_span is not None and train_span < min_train:
        raise ValueError(f"train_span ({train_span}) must be >= min_train ({min_train})")
    days = pd.DatetimeIndex(np.unique(pd.DatetimeIndex(dates)))
    n = len(days)
    # dates behind the first fold's training: its validation, two embargoes and every fold's test
    behind = n_folds * test_span + val_span + 2 * embargo
    need = behind + max(min_train, train_span or 0)
    if n < need:
        span = f"train_span {train_span}" if train_span else f"at least {min_train} training dates"
        raise ValueError(
            f"{n_folds} folds of test_span {test_span} with val_span {val_span}, embargo {embargo} and {span} "
            f"need {need} trading dates; the data has {n}" + (f" ({days[0].date()} .. {days[-1].date()})" if n else "")
        )
    span = train_span if train_span is not None else (n - behind if window == "rolling" else None)
    out = []
    for k in range(n_folds):
        test_lo = n - (n_folds - k) * test_span  # first test date's index
        val_lo = test_lo - embargo - val_span
        train_hi = val_lo - embargo  # one past the last training date
        train_lo = 0 if span is None else train_hi - span
        out.append(
            Fold(
                number=k + 1,
                train_start=days[train_lo],
                train_end=days[train_hi - 1],
                val_start=days[val_lo],
                val_end=days[test_lo - embargo - 1],
                test_start=days[test_lo],
                test_end=days[test_lo + test_span - 1],
            )
        )
    return out
