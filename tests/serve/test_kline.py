"""KLineAPI without a server: a request's bars get the rows ``forecast()`` gives for the same bars (a trained
ticker scaled by its training statistics, any other by its own history), alone or in a batch, and every bad
request gets its 4xx and one line."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("litserve")

from lightning_tf.serve.api import Serving
from lightning_tf.serve.errors import Rejected
from lightning_tf.serve.kline import KLineAPI, PlainBars, iso_strings, iso_times, model_columns, plain_bars
from tests.helpers.serve import bars_records, tiny_kline, tiny_kline_covariates

BARS = bars_records(80, seed=0)


@pytest.fixture(scope="module")
def api() -> KLineAPI:
    a = KLineAPI("unused.ckpt", Serving(max_batch_size=8))
    a.model = tiny_kline()
    return a


def served(api: KLineAPI, bodies: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    outputs = api.unbatch(api.predict(api.batch([api.decode_request(b) for b in bodies])))
    return [(r.status_code, json.loads(r.body)) for r in map(api.encode_response, outputs)]


def offline(api: KLineAPI, records: list[dict[str, Any]], ticker: str | None = None) -> list[dict[str, Any]]:
    table = api.model.forecast(pd.DataFrame.from_records(records), name=ticker)
    table["timestamp"] = [t.isoformat() for t in table["timestamp"]]
    return table.to_dict(orient="records")


def same_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> bool:
    assert [set(g) for g in got] == [set(w) for w in want]
    return all(
        (abs(g[k] - w[k]) <= 1e-6 * max(1.0, abs(w[k]))) if isinstance(w[k], float) else g[k] == w[k]
        for g, w in zip(got, want, strict=True)
        for k in w
    )


def plain_window(api: KLineAPI, body: dict[str, Any]) -> Any:
    """The window of a body of plain bars, read alone."""
    plain = api.parse(body)
    assert isinstance(plain, PlainBars)
    (window,) = api._windows([plain])
    return window


def test_a_batch_gets_the_rows_forecast_gives_each_series(api: KLineAPI) -> None:
    series = [bars_records(80, seed=s) for s in range(3)]
    bodies = [{"bars": series[0]}, {"bars": series[1], "ticker": "TRAINED"}, {"bars": series[2], "ticker": "XYZ"}]
    results = served(api, bodies)
    expected = [offline(api, series[0]), offline(api, series[1], "TRAINED"), offline(api, series[2], "XYZ")]
    for (status, body), rows in zip(results, expected, strict=True):
        assert status == 200
        assert len(body["forecast"]) == 4 and [r["step"] for r in body["forecast"]] == [1, 2, 3, 4]
        assert same_rows(body["forecast"], rows)
    assert results[1][1]["forecast"][0]["scaled_by"] == "training statistics of 'TRAINED'"
    assert results[2][1]["forecast"][0]["scaled_by"].startswith("its own history")
    assert results[0][1]["forecast"][0]["ticker"] == "series"
    assert results[0][1]["forecast"] != results[1][1]["forecast"]
    ((status, body),) = served(api, [{"bars": series[2], "ticker": "XYZ"}])  # alone: the same rows
    assert status == 200 and same_rows(body["forecast"], expected[2])


def test_bars_in_another_order_and_with_other_column_names_read_the_same(api: KLineAPI) -> None:
    chinese = [
        {
            "日期": b["Date"],
            "开盘": b["Open"],
            "最高": b["High"],
            "最低": b["Low"],
            "收盘": b["Close"],
            "成交量": b["Volume"],
        }
        for b in reversed(BARS)
    ]
    (s1, a), (s2, b) = served(api, [{"bars": BARS}, {"bars": chinese}])
    assert s1 == s2 == 200 and same_rows(b["forecast"], a["forecast"])


def with_cell(row: int, column: str, value: Any) -> list[dict[str, Any]]:
    return [dict(b, **{column: value}) if i == row else b for i, b in enumerate(BARS)]


def without(column: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in b.items() if k != column} for b in BARS]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "bars: field required"),
        ({"bars": []}, "bars: list should have at least 1 item after validation, not 0"),
        ({"bars": "x"}, "bars: input should be a valid list"),
        ({"bars": [1, 2]}, "bars.0: input should be a valid dictionary"),
        ({"bars": BARS, "ticker": 5}, "ticker: input should be a valid string"),
        ({"bars": BARS, "horizon": 3}, "horizon: unknown field"),
        (
            {"bars": BARS[:40]},
            "bars: ticker 'series' has 20 usable bars (40 bars, 20 warm-up rows for the features); "
            "a forecast needs context_len (32)",
        ),
        (
            {"bars": without("Close")},
            "bars: column(s) ['close'] not found; columns are ['Date', 'Open', 'High', 'Low', 'Volume']",
        ),
        (
            {"bars": without("Date")},
            "bars: no date/time column found; columns are ['Open', 'High', 'Low', 'Close', 'Volume']",
        ),
        (
            {"bars": without("Volume")},
            "bars: no volume column, and this model reads volume (log_volume_change); "
            "the columns are ['Date', 'Open', 'High', 'Low', 'Close']",
        ),
        (
            {"bars": with_cell(50, "Close", float("nan"))},
            "bars: 1 missing values: row 51, column 'close': missing "
            "value. Send finite, positive values, or start the server "
            "with --on_error drop or ffill",
        ),
        (
            {"bars": with_cell(50, "High", float("inf"))},
            "bars: 1 non-finite values: row 51, column 'high': inf is not finite. Send finite",
        ),
        ({"bars": with_cell(3, "Close", None)}, "bars: 1 missing values: row 4, column 'close'"),
        ({"bars": with_cell(3, "Volume", 10**400)}, "bars: 1 non-finite values: row 4, column 'volume': 1000"),
        (
            {"bars": with_cell(3, "Close", "abc")},
            "bars: 1 non-numeric values: row 4, column 'close': 'abc' is not a number",
        ),
        (
            {"bars": [dict(b, ticker="AB"[i % 2]) for i, b in enumerate(BARS)]},
            "bars: one series per request, got 2 tickers in column 'ticker' (A, B)",
        ),
    ],
)
def test_bad_requests(api: KLineAPI, body: Any, error: str) -> None:
    results = served(api, [body, {"bars": BARS}])
    assert results[0][0] == 422
    assert results[0][1]["error"].startswith(error), results[0][1]["error"]
    assert "\n" not in results[0][1]["error"]
    assert results[1][0] == 200 and same_rows(results[1][1]["forecast"], offline(api, BARS))


def test_on_error_drop_repairs_what_error_refuses() -> None:
    a = KLineAPI("unused.ckpt", Serving(), on_error="drop")
    a.model = tiny_kline()
    bars = with_cell(50, "Close", float("nan"))
    ((status, body),) = served(a, [{"bars": bars}])
    assert status == 200
    rows = offline(a, bars[:50] + bars[51:])
    assert same_rows(body["forecast"], rows)
    with pytest.raises(ValueError, match=r"reading.on_error must be one of \(.error., .drop., .ffill.\), got 'zero'"):
        KLineAPI("unused.ckpt", Serving(), on_error="zero")  # type: ignore[arg-type]


def test_a_forecast_json_cannot_hold_is_refused_alone(api: KLineAPI) -> None:
    # finite bars whose highest price is a hair below the largest float: the rebuilt close overflows
    factor = sys.float_info.max / max(b["High"] for b in BARS) * 0.999999
    huge = [{**b, **{c: b[c] * factor for c in ("Open", "High", "Low", "Close")}} for b in BARS]
    results = served(api, [{"bars": huge}, {"bars": BARS}])
    assert results[0] == (422, {"error": "bars: the forecast's close is inf; these bars are out of the model's range"})
    assert results[1][0] == 200


def test_info(api: KLineAPI) -> None:
    info = api.describe()
    assert (info["context_len"], info["horizon"], info["trained_tickers"]) == (32, 4, ["TRAINED"])
    assert info["targets"] == ["log_return"] and "log_volume_change" in info["features"]
    # a K-line worker runs what is queued when it is free, without waiting for a batch to fill
    assert api.batch_timeout == 0.0 and api.max_batch_size == 8


def test_plain_bars_are_read_with_numpy_into_the_window_the_bar_reader_gives(api: KLineAPI) -> None:
    columns = model_columns(api.model.data_scale)
    assert columns == ("open", "high", "low", "close", "volume")
    for seed, ticker in [(0, None), (1, "TRAINED"), (2, "XYZ")]:
        bars = bars_records(70 + seed, seed=seed)
        assert plain_bars(bars, columns) is not None
        request = api.validate({"bars": bars, **({"ticker": ticker} if ticker else {})})
        fast, read = plain_window(api, request.model_dump(exclude_none=True)), api._read(request)
        assert (fast.name, fast.scaled_by, fast.anchor) == (read.name, read.scaled_by, read.anchor)
        assert np.array_equal(fast.x, read.x) and np.array_equal(fast.raw_target, read.raw_target)
        assert np.array_equal(fast.target_mean, read.target_mean) and np.array_equal(fast.target_std, read.target_std)
        assert api.model.forecast_windows([fast]).equals(api.model.forecast_windows([read]))
    timed = [{**b, "Date": b["Date"] + "T09:30:00"} for b in BARS]  # intraday ISO stamps read alike
    assert np.array_equal(plain_window(api, {"bars": timed}).x, api._read(api.validate({"bars": timed})).x)


@pytest.mark.parametrize("kind", ["plain", "past+calendar+ticker+sector"])
def test_plain_bars_read_together_give_each_series_the_window_it_gets_alone(kind: str, sectors: Path) -> None:
    """A batch's plain bars are read in one call (the series of one length stacked, the calendar of all the
    forecast bars at once): each window is bit for bit the one its bars give alone, a series that cannot be read
    gets its own 422 and leaves the others as they are."""
    api = KLineAPI("unused.ckpt", Serving(max_batch_size=8))
    covariates = kind != "plain"
    api.model = (
        tiny_kline_covariates(calendar="XNYS", ticker_embedding=True, static_file=sectors)
        if covariates
        else tiny_kline()
    )
    lengths = [80, 80, 80, 75, 80, 30]  # four of one length, one of another, one too short to forecast
    tickers = [None, "TRAINED", "XYZ", "TRAINED", None, "XYZ"]
    bodies = [
        {"bars": bars_records(n, seed=k, signal=covariates), **({"ticker": t} if t else {})}
        for k, (n, t) in enumerate(zip(lengths, tickers, strict=True))
    ]
    together = api._windows([api.parse(b) for b in bodies])
    for body, window in zip(bodies[:-1], together[:-1], strict=True):
        alone = plain_window(api, body)
        for key in ("x", "raw_target", "target_mean", "target_std", "x_future", "static"):
            a, b = getattr(window, key), getattr(alone, key)
            assert (
                (a is None and b is None) if not covariates and key in ("x_future", "static") else np.array_equal(a, b)
            )
        assert (window.name, window.scaled_by, window.anchor) == (alone.name, alone.scaled_by, alone.anchor)
        assert window.timestamps.equals(alone.timestamps)
    assert isinstance(together[-1], Rejected) and together[-1].status == 422
    assert together[-1].error.startswith("bars: ticker 'XYZ' has"), together[-1].error
    answers = served(api, bodies)
    assert [status for status, _ in answers] == [200] * 5 + [422]
    for (_, body), b in zip(answers[:-1], bodies[:-1], strict=True):
        assert same_rows(body["forecast"], offline(api, b["bars"], b.get("ticker")))


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda bars: bars[::-1], "not in time order"),
        (lambda bars: [bars[0], *bars], "a duplicate timestamp"),
        (lambda bars: [{**b, "Date": b["Date"].replace("-", "/")} for b in bars], "not ISO"),
        (lambda bars: [{**bars[0], "Close": "12.5"}, *bars[1:]], "a number as a string"),
        (lambda bars: [{**bars[0], "Close": float("nan")}, *bars[1:]], "NaN"),
        (lambda bars: [{**bars[0], "High": bars[0]["Low"] / 2}, *bars[1:]], "high below low"),
        (lambda bars: [{**bars[0], "Volume": -1}, *bars[1:]], "negative volume"),
        (lambda bars: [{k: v for k, v in b.items() if k != "Volume"} for b in bars], "no volume"),
        (lambda bars: [{**b, "ticker": "AB"[i % 2]} for i, b in enumerate(bars)], "a ticker column of two tickers"),
        (lambda bars: [{**b, "ticker": "A" + " " * (i % 2)} for i, b in enumerate(bars)], "two spellings of a ticker"),
        (lambda bars: [{**b, "code": 600519} for b in bars], "a ticker column of numbers"),
        (lambda bars: [{**b, "close": b["Close"]} for b in bars], "two keys of one name once normalised"),
        (lambda bars: [{**b, "Time": "09:30"} for b in bars], "a date and a time of day, joined by their values"),
        (lambda bars: [{**b, "amount": -1.0 if i == 3 else 1.0} for i, b in enumerate(bars)], "a negative amount"),
        (lambda bars: [{**b, "Adj Close": 0.0 if i == 3 else 1.0} for i, b in enumerate(bars)], "an adj_close of 0"),
        (lambda bars: [{**b, "turnover": "1.5"} for b in bars], "an amount as text"),
        (lambda bars: [{**b, "OpenInt": [1]} for b in bars], "a key the reader ignores holding a list"),
        (lambda bars: [{**b, "OpenInt": True} for b in bars], "a key the reader ignores holding a boolean"),
        (lambda bars: [bars[0], {k: v for k, v in bars[1].items() if k != "Open"}, *bars[2:]], "a bar without open"),
        (
            lambda bars: [bars[0], {**{k: v for k, v in bars[1].items() if k != "Open"}, "Adj": 1.0}, *bars[2:]],
            "a bar with another column instead of open",
        ),
        (lambda bars: [{**bars[0], "Date": bars[0]["Date"] + "\n" + bars[1]["Date"]}, *bars[1:]], "a line break"),
        (lambda bars: [{**bars[0], "Date": "\u0662\u0660" + bars[0]["Date"][2:]}, *bars[1:]], "non-ASCII digits"),
        (lambda bars: [*bars[:3], [1, 2], *bars[3:]], "a bar that is not an object"),
    ],
)
def test_other_bars_go_to_the_bar_reader(change: Any, why: str) -> None:
    assert plain_bars(change(list(BARS)), ("open", "high", "low", "close", "volume")) is None, why


def with_other_keys(bars: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``bars`` as real bars come: with keys the reader ignores or checks, in other orders, under other names."""
    chinese = {"Date": "日期", "Open": "开盘", "High": "最高", "Low": "最低", "Close": "收盘", "Volume": "成交量"}
    return {
        "OpenInt": [{**b, "OpenInt": 0} for b in bars],
        "adj_close, amount, a turnover rate, factors, text, null": [
            {
                **b,
                "Adj Close": b["Close"] * 0.9,
                "amount": b["Close"] * b["Volume"],
                "换手率": 1.5,
                "alpha_7": float(i),
                "note": "x",
                "flag": None,
            }
            for i, b in enumerate(bars)
        ],
        "each bar its own key order": [
            dict(reversed([*b.items(), ("OpenInt", 0)])) if i % 2 else {"OpenInt": 0, **b} for i, b in enumerate(bars)
        ],
        "Chinese names with 成交额 and 振幅": [
            {**{chinese[k]: v for k, v in b.items()}, "成交额": b["Volume"] * 2.0, "振幅": "--"} for b in bars
        ],
        "a last beside the close": [{**{k.lower(): v for k, v in b.items()}, "last": b["Close"] * 2} for b in bars],
        "a ticker column of the trained ticker": [{**b, "symbol": "TRAINED"} for b in bars],
        "a ticker column padded": [{"code": " XYZ ", **b} for b in bars],
    }


@pytest.mark.parametrize("kind", list(with_other_keys(BARS)))
def test_bars_with_other_keys_are_plain_and_read_as_the_bar_reader_reads_them(api: KLineAPI, kind: str) -> None:
    """Keys the reader ignores (``OpenInt``, a factor, text, null), keys it checks (``adj_close``, ``amount``), any
    key order and any name the reader gives a column: read with numpy into the window the bar reader gives, from
    the body's JSON object and from its bytes alike, and answered with the rows ``forecast()`` gives."""
    bars = with_other_keys(BARS)[kind]
    assert plain_bars(bars, ("open", "high", "low", "close", "volume")) is not None
    for ticker in (None, "TRAINED" if "trained" in kind else "XYZ"):
        body = {"bars": bars, **({"ticker": ticker} if ticker else {})}
        fast, read = plain_window(api, body), api._read(api.validate(body))
        assert isinstance(fast.bars, dict) and isinstance(read.bars, pd.DataFrame)  # numpy, then the bar reader
        assert (fast.name, fast.scaled_by, fast.anchor) == (read.name, read.scaled_by, read.anchor)
        for key in ("x", "raw_target", "target_mean", "target_std"):
            assert np.array_equal(getattr(fast, key), getattr(read, key)), key
        raw = json.dumps(body).encode()
        api.parse(body)  # learns the layout
        assert same_input(api.parse_bytes(raw), api.parse(body))
        ((status, answer),) = served(api, [raw])
        assert status == 200 and same_rows(answer["forecast"], offline(api, bars, ticker))
    if "ticker column" in kind:
        assert fast.name == ("TRAINED" if "trained" in kind else "XYZ")
        assert fast.scaled_by.startswith("training statistics" if "trained" in kind else "its own history")
        # a ticker field the bars' column contradicts is refused, from the body and from its bytes
        other = {"bars": bars, "ticker": "OTHER"}
        for body in (other, json.dumps(other).encode()):
            ((status, answer),) = served(api, [body])
            assert status == 422 and answer["error"].startswith("bars: the request's ticker is 'OTHER', but"), answer


def test_bars_with_a_bad_value_under_a_key_the_reader_checks_get_its_error(api: KLineAPI) -> None:
    amount = [{**b, "amount": -5.0 if i == 3 else 1.0} for i, b in enumerate(BARS)]
    adjusted = [{**b, "adj_close": 0.0 if i == 4 else b["Close"]} for i, b in enumerate(BARS)]
    listed = [{**b, "OpenInt": [1] if i == 2 else 0} for i, b in enumerate(BARS)]
    answers = served(api, [json.dumps({"bars": bars}).encode() for bars in (amount, adjusted, listed)])
    assert answers == [
        (
            422,
            {
                "error": "bars: 1 negative amounts: row 4, column 'amount': negative amount -5. Send finite, positive "
                "values, or start the server with --on_error drop or ffill"
            },
        ),
        (
            422,
            {
                "error": "bars: 1 non-positive prices: row 5, column 'adj_close': price 0 is not positive. Send "
                "finite, positive values, or start the server with --on_error drop or ffill"
            },
        ),
        (
            422,
            {
                "error": "bars.2.OpenInt.float: input should be a valid number; bars.2.OpenInt.int: input should be "
                "a valid integer; bars.2.OpenInt.str: input should be a valid string"
            },
        ),
    ]


def test_parse_bytes_keeps_the_layouts_of_a_few_clients() -> None:
    """Bodies of several layouts, one after another, are each read from their bytes once each layout was read;
    the layouts of more clients than a worker keeps leave the oldest to ``parse``."""
    a = KLineAPI("unused.ckpt", Serving(max_batch_size=8))
    a.model = tiny_kline()
    by_keys = {frozenset(bars[0]): bars for bars in with_other_keys(BARS).values()}  # one body per layout
    bodies = [json.dumps({"bars": bars}).encode() for bars in by_keys.values()]
    for raw in bodies:
        assert a.parse_bytes(raw) is None and isinstance(a.decode_request(raw), PlainBars)  # learnt by parse
    for raw in bodies + bodies[::-1]:
        assert isinstance(a.parse_bytes(raw), PlainBars)
    for i in range(8):  # eight more layouts
        assert isinstance(
            a.decode_request(json.dumps({"bars": [{**b, f"f{i}": 1.0} for b in BARS]}).encode()), PlainBars
        )
    assert all(a.parse_bytes(raw) is None for raw in bodies)


def test_a_batch_of_plain_bars_and_bars_for_the_reader_answers_each_as_alone(api: KLineAPI) -> None:
    """In one batch, bars that are not plain (a NaN, high below low, bars out of order, a timestamp that is not
    ISO) are read by the bar reader: its error, or its forecast of the bars sorted, as the request alone gets;
    the plain ones beside them, of two lengths, get theirs."""
    good = [bars_records(80, seed=1), bars_records(70, seed=2), bars_records(80, seed=3)]
    nan = [dict(b) for b in bars_records(80, seed=4)]
    nan[50]["Close"] = float("nan")
    low = [dict(b) for b in bars_records(80, seed=5)]
    low[10]["High"] = low[10]["Low"] / 2
    shuffled = bars_records(80, seed=6)[::-1]
    slashes = [{**b, "Date": b["Date"].replace("-", "/")} for b in bars_records(80, seed=7)]
    bodies = [{"bars": bars} for bars in [good[0], nan, good[1], low, shuffled, slashes, good[2]]]
    together = served(api, bodies)
    for body, answer in zip(bodies, together, strict=True):
        assert answer == served(api, [body])[0]  # as alone
    assert [status for status, _ in together] == [200, 422, 200, 422, 200, 200, 200]
    for k, bars in [(0, good[0]), (2, good[1]), (4, shuffled), (5, slashes), (6, good[2])]:
        assert same_rows(together[k][1]["forecast"], offline(api, bars))
    assert together[1][1]["error"].startswith("bars: 1 missing values: row 51, column 'close'")


@pytest.fixture(scope="module")
def sectors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("static") / "sectors.csv"
    pd.DataFrame({"ticker": ["TRAINED", "XYZ"], "sector": ["b", "a"]}).to_csv(path, index=False)
    return path


#: the static ids of each request's ticker: the ticker embedding's (1: TRAINED, 0: any other), then the sector's
#: in the static file (TRAINED b: 2, XYZ a: 1, a ticker the file lacks: 0)
STATIC_IDS = {None: [0, 0], "TRAINED": [1, 2], "XYZ": [0, 1]}


@pytest.mark.parametrize("kind", ["past", "past+ticker", "past+calendar+ticker", "past+calendar+ticker+sector"])
def test_covariate_bars_are_read_with_numpy_into_the_window_the_bar_reader_gives(kind: str, sectors: Path) -> None:
    api = KLineAPI("unused.ckpt", Serving(max_batch_size=8))
    calendar = "XNYS" if "calendar" in kind else None
    api.model = tiny_kline_covariates(
        calendar=calendar, ticker_embedding="ticker" in kind, static_file=sectors if "sector" in kind else None
    )
    assert model_columns(api.model.data_scale) == ("open", "high", "low", "close", "volume", "signal")
    bodies, rows = [], []
    for seed, ticker in [(0, None), (1, "TRAINED"), (2, "XYZ")]:
        bars = bars_records(70 + seed, seed=seed, signal=True)
        body = {"bars": bars, **({"ticker": ticker} if ticker else {})}
        fast, read = plain_window(api, body), api._read(api.validate(body))
        assert isinstance(fast.bars, dict) and isinstance(read.bars, pd.DataFrame)  # numpy, then the bar reader
        assert (fast.name, fast.scaled_by, fast.anchor) == (read.name, read.scaled_by, read.anchor)
        for key in ("x", "raw_target", "target_mean", "target_std"):
            assert np.array_equal(getattr(fast, key), getattr(read, key)), key
        assert fast.x.shape[1] == 7 and np.array_equal(fast.x[:, -1], read.x[:, -1])  # the past covariate
        if kind == "past":
            assert fast.static is None and read.static is None
        else:
            assert fast.static.tolist() == read.static.tolist() == STATIC_IDS[ticker][: fast.static.shape[0]]
        if calendar is None:
            assert fast.x_future is None and read.x_future is None
        else:
            assert fast.x_future.shape == (4, 5) and np.array_equal(fast.x_future, read.x_future)
        assert fast.timestamps.equals(read.timestamps)
        assert api.model.forecast_windows([fast]).equals(api.model.forecast_windows([read]))
        bodies.append(body)
        rows.append(offline(api, bars, ticker))
    for (status, body), want in zip(served(api, bodies), rows, strict=True):
        assert status == 200 and same_rows(body["forecast"], want)


def test_a_covariate_under_another_spelling_beside_other_keys_is_read_as_the_reader_reads_it() -> None:
    api = KLineAPI("unused.ckpt", Serving(max_batch_size=8))
    api.model = tiny_kline_covariates(calendar=None, ticker_embedding=False)
    bars = [
        {"Signal": b.pop("signal"), "OpenInt": 0, "amount": 1.0, **b} for b in bars_records(70, seed=3, signal=True)
    ]
    body = {"bars": bars}
    fast, read = plain_window(api, body), api._read(api.validate(body))
    assert np.array_equal(fast.x, read.x) and np.array_equal(fast.x[:, -1], read.x[:, -1])  # the covariate's channel
    ((status, answer),) = served(api, [json.dumps(body).encode()])
    assert status == 200 and same_rows(answer["forecast"], offline(api, bars))


def test_a_model_that_reads_the_users_known_future_covariates_refuses_bars_alone() -> None:
    api = KLineAPI("unused.ckpt", Serving(max_batch_size=8))
    api.model = tiny_kline_covariates(calendar=None, future=["event"])
    bars = [{**b, "event": 1.0} for b in bars_records(80, signal=True)]  # a request has no forecast bars' values
    ((status, body),) = served(api, [{"bars": bars}])
    assert status == 422
    assert body["error"].startswith("bars: the model reads known-future covariate(s) ['event'] of the forecast bars")


def test_iso_strings_are_what_pandas_writes() -> None:
    stamps = np.array(
        [
            "2024-01-02",
            "2024-01-02T09:30",
            "1969-12-31T23:59:59",
            "2024-01-02T09:30:00.5",
            "2024-01-02T09:30:00.000001",
        ],
        dtype="datetime64[ns]",
    )
    for values in (stamps[:3], stamps):  # whole seconds (numpy), and with fractions (pandas)
        assert iso_strings(values) == [pd.Timestamp(t).isoformat() for t in values]


def test_iso_times_are_the_stamps_each_of_which_the_iso_pattern_matches() -> None:
    """Stamps of one length are checked as bytes against the first, others one by one: both say what matching each
    stamp alone says, on stamps of one form and of mixed forms with one character changed to a digit, a letter, a
    separator, a line break or a non-ASCII digit, in one stamp or in all."""
    one = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?", re.ASCII)
    rng = np.random.default_rng(0)
    forms = ["2024-01-02", "2024-01-02T09:30", "2024-01-02 09:30:15", "2024-01-02T09:30:15.123456"]
    checked = {True: 0, False: 0}
    for _ in range(400):
        form = forms[int(rng.integers(len(forms)))]
        stamps = [form] * 5 if rng.random() < 0.7 else [forms[int(rng.integers(len(forms)))] for _ in range(5)]
        if rng.random() < 0.8:
            i, j = int(rng.integers(5)), int(rng.integers(len(stamps[0])))
            row = stamps[i] if j < len(stamps[i]) else stamps[i] + "0"
            stamps[i] = row[:j] + str(rng.choice(list("07x-T :/.\n\u0662"))) + row[j + 1 :]
            if rng.random() < 0.3:  # every stamp of that one's form
                stamps = [stamps[i]] * 5
        want = all(one.fullmatch(s) for s in stamps)
        assert iso_times(stamps) == want, stamps
        checked[want] += 1
    assert min(checked.values()) > 50


def same_input(a: Any, b: Any) -> bool:
    """Two decoded requests are the same: the same plain bars (ticker, each column by name bit for bit), or equal
    otherwise."""
    if isinstance(a, PlainBars) or isinstance(b, PlainBars):
        return (
            isinstance(a, PlainBars)
            and isinstance(b, PlainBars)
            and (a.ticker, a.name) == (b.ticker, b.name)
            and set(a.columns) == set(b.columns)
            and all(
                a.columns[k].dtype == b.columns[k].dtype and np.array_equal(a.columns[k], b.columns[k])
                for k in a.columns
            )
        )
    if isinstance(a, Rejected) or isinstance(b, Rejected):
        return a == b
    return type(a) is type(b) and np.array_equal(a.x, b.x)  # two windows of the bar reader


def body_variants(rng: np.random.Generator) -> list[tuple[bytes, bool]]:
    """JSON bodies around plain bars, each with whether msgspec reads it once its layout is known if ``parse``
    reads it as plain: plain ones (key orders, a ticker or null or none, keys the reader ignores or checks), and
    bodies that differ from them in one place (a value's type, a big or huge integer, a key missing, added, renamed
    or given twice, another field, bars that are not plain, JSON msgspec does not read)."""
    bars = bars_records(60, seed=int(rng.integers(1000)))
    keys = list(bars[0])
    other = [{"OpenInt": 0, **b, "note": "x", "amount": 1.5} for b in bars]  # an ignored number and text, a checked
    shuffled = [dict(np.array(list(b.items()), dtype=object)[rng.permutation(len(b))].tolist()) for b in other]
    out = [
        json.dumps({"bars": bars}),
        json.dumps({"bars": bars, "ticker": "TRAINED"}),
        json.dumps({"ticker": None, "bars": [dict(reversed(list(b.items()))) for b in bars]}),
        json.dumps({"bars": other, "ticker": "XYZ"}),
        json.dumps({"bars": shuffled}),
    ]
    row, key = int(rng.integers(len(bars))), keys[1 + int(rng.integers(len(keys) - 1))]
    for value in [True, "12.5", None, [1.0], 10**30, 10**400, 7, -0.0, 1e308 * 10]:
        out.append(json.dumps({"bars": [dict(b, **{key: value}) if i == row else b for i, b in enumerate(bars)]}))
    unread = []  # plain, with a value in a key the reader ignores that msgspec does not read as a number
    for name, values in [
        ("OpenInt", [True, "12.5", None, [1.0], {"a": 1}, 10**30, 10**400, -1]),
        ("amount", [-1.0, "1.5", None, 0]),
    ]:
        for value in values:
            text = json.dumps({"bars": [dict(b, **{name: value}) if i == row else b for i, b in enumerate(other)]})
            (unread if name == "OpenInt" and value == 10**400 else out).append(text)
    unread.append(json.dumps({"bars": [dict(b, OpenInt=float("nan")) if i == row else b for i, b in enumerate(other)]}))
    unread.append(json.dumps({"bars": other}).replace('"note": ', '"note": [1], "note": ', 1))  # the last one counts
    out += [
        json.dumps({"bars": [{k: v for k, v in b.items() if k != key or i != row} for i, b in enumerate(bars)]}),
        json.dumps({"bars": [dict(b, extra=1.0) if i == row else b for i, b in enumerate(bars)]}),
        json.dumps({"bars": [{k.lower(): v for k, v in b.items()} for b in bars]}),  # another layout, plain
        json.dumps({"bars": bars, "ticker": 5}),
        json.dumps({"bars": bars, "horizon": 3}),
        json.dumps({"bars": []}),
        json.dumps({"bars": bars[::-1]}),
        json.dumps({"bars": [dict(b, Date=b["Date"].replace("-", "/")) for b in bars]}),
        json.dumps({"bars": bars}).replace(f'"{key}": ', f'"{key}": 1.0, "{key}": ', 1),  # a key twice
        json.dumps({"bars": bars, "ticker": "X"}).replace('"ticker": "X"', '"ticker": "X", "bars": []'),
        json.dumps({"bars": bars}).replace(f'"{key}": ', f'"{key}": NaN, "{key}": ', 1)[:-30],  # cut short
    ]
    return [(text.encode(), True) for text in out] + [
        (("\ufeff" + json.dumps({"bars": bars})).encode(), False),
        *((text.encode(), False) for text in unread),
    ]


def test_a_body_of_plain_bars_is_read_from_its_bytes_as_parse_reads_it(api: KLineAPI) -> None:
    """``parse_bytes`` (a decoder per layout of bars) gives for every body what ``parse`` of its JSON gives, or
    leaves the body to it; it reads the plain bodies of the layouts ``parse`` read, and only those."""
    rng = np.random.default_rng(0)
    fast_reads = 0
    for _ in range(6):
        for raw, readable in body_variants(rng):
            fast = api.parse_bytes(raw)
            try:
                value = json.loads(raw)
            except ValueError:
                assert fast is None
                continue
            slow = api.decode_request(value)  # learns the layout of plain bars
            if fast is not None:
                fast_reads += 1
                assert same_input(fast, slow), raw[:200]
            assert same_input(api.decode_request(raw), slow), raw[:200]
            again = api.parse_bytes(raw)  # the layout is learnt: plain bars msgspec reads are read fast
            assert (again is not None) == (isinstance(slow, PlainBars) and readable), raw[:200]
    assert fast_reads >= 6 * 4  # at least four of the five plain bodies of each round (the layouts change)


def test_a_model_change_forgets_the_layout_of_plain_bars() -> None:
    a = KLineAPI("unused.ckpt", Serving(max_batch_size=8))
    a.model = tiny_kline()
    raw = json.dumps({"bars": BARS}).encode()
    assert a.parse_bytes(raw) is None  # nothing read yet
    assert isinstance(a.decode_request(raw), PlainBars) and isinstance(a.parse_bytes(raw), PlainBars)
    a.model = tiny_kline()
    assert a.parse_bytes(raw) is None
