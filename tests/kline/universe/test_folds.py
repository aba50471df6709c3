"""Walk-forward fold arithmetic: strictly after, embargoes, rolling vs expanding, folds that do not fit."""

from __future__ import annotations

import pandas as pd
import pytest

from lightning_tf.kline.universe.folds import folds

DATES = pd.bdate_range("2005-01-03", periods=1000)


def _index(t: pd.Timestamp) -> int:
    return DATES.get_loc(t)


@pytest.mark.parametrize("window", ["expanding", "rolling"])
@pytest.mark.parametrize("embargo", [0, 5])
def test_each_test_span_is_strictly_after_its_training_and_validation(window: str, embargo: int) -> None:
    out = folds(DATES, n_folds=4, test_span=100, val_span=50, embargo=embargo, window=window)
    assert [f.number for f in out] == [1, 2, 3, 4]
    for f in out:
        i = {k: _index(getattr(f, k)) for k in ("train_start", "train_end", "val_start", "val_end")}
        j = {k: _index(getattr(f, k)) for k in ("test_start", "test_end")}
        assert i["train_start"] <= i["train_end"] < i["val_start"] <= i["val_end"] < j["test_start"] <= j["test_end"]
        # exactly `embargo` dates between training and validation and between validation and test
        assert i["val_start"] - i["train_end"] - 1 == embargo
        assert j["test_start"] - i["val_end"] - 1 == embargo
        assert i["val_end"] - i["val_start"] + 1 == 50 and j["test_end"] - j["test_start"] + 1 == 100
    # consecutive test spans ending on the last date
    assert out[-1].test_end == DATES[-1]
    for a, b in zip(out, out[1:], strict=False):
        assert _index(b.test_start) == _index(a.test_end) + 1
        assert b.train_end > a.train_end  # the window moves on


def test_expanding_starts_at_the_first_date_and_rolling_keeps_its_length() -> None:
    grow = folds(DATES, 3, 100, 50, 5, window="expanding")
    roll = folds(DATES, 3, 100, 50, 5, window="rolling")
    fixed = folds(DATES, 3, 100, 50, 5, window="rolling", train_span=200)
    assert all(f.train_start == DATES[0] for f in grow)
    lengths = {_index(f.train_end) - _index(f.train_start) + 1 for f in roll}
    assert lengths == {_index(grow[0].train_end) + 1}  # the first fold's length, kept
    assert roll[0] == grow[0] and roll[1].train_start == DATES[100]
    assert {_index(f.train_end) - _index(f.train_start) + 1 for f in fixed} == {200}
    # validation and test dates do not depend on the training window
    assert [(f.val_start, f.test_start, f.test_end) for f in grow] == [
        (f.val_start, f.test_start, f.test_end) for f in fixed
    ]


def test_dates_are_sorted_and_deduplicated_first() -> None:
    shuffled = list(DATES[::-1]) + list(DATES[:10])
    assert folds(shuffled, 2, 100, 50, 5) == folds(DATES, 2, 100, 50, 5)


def test_data_overrides_name_the_datamodule_arguments() -> None:
    f = folds(DATES, 1, 100, 50, 5)[0]
    assert f.data_overrides(5) == {
        "train_start": "2005-01-03",
        "val_start": DATES[1000 - 100 - 5 - 50].strftime("%Y-%m-%d"),
        "test_start": DATES[900].strftime("%Y-%m-%d"),
        "test_end": DATES[-1].strftime("%Y-%m-%d"),
        "embargo": 5,
    }


def test_folds_that_do_not_fit_say_how_many_dates_they_need() -> None:
    # 4 x 250 + 50 + 2 x 5 + 1 = 1061 > 1000
    with pytest.raises(ValueError, match=r"need 1061 trading dates; the data has 1000 \(2005-01-03 .. "):
        folds(DATES, 4, 250, 50, 5)
    with pytest.raises(ValueError, match="train_span 300 need 1260"):
        folds(DATES, 3, 300, 50, 5, window="rolling", train_span=300)
    assert len(folds(DATES, 3, 300, 50, 5, min_train=40)) == 3  # 900 + 50 + 10 + 40 = 1000 fits
    with pytest.raises(ValueError, match="at least 41 training dates need 1001 trading dates"):
        folds(DATES, 3, 300, 50, 5, min_train=41)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_folds": 0}, "n_folds"),
        ({"test_span": 0}, "test_span"),
        ({"val_span": 0}, "val_span"),
        ({"embargo": -1}, "embargo"),
        ({"window": "sliding"}, "window must be"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict, match: str) -> None:
    settings = {"n_folds": 2, "test_span": 100, "val_span": 50, "embargo": 5, **kwargs}
    with pytest.raises(ValueError, match=match):
        folds(DATES, **settings)
