"""The K-line forecaster behind ``POST /predict``: one series of OHLCV bars -> the forecast of its next
``horizon`` bars, one object per future bar with the fields of ``forecast()``'s table.

A request's bars become the series' last window, scaled as :meth:`KLineForecaster.forecast
<lightning_tf.kline.KLineForecaster.forecast>` scales it, with the covariates it reads: past covariates are
columns of the bars, the known-future calendar features those of the forecast bars on the model's calendar, the
static ids those of the request's ticker. Plain bars (:func:`plain_bars`: ISO timestamps in increasing order and
finite numbers that pass the reader's checks, under any names the bar reader gives the columns the model reads, in
any order, beside any keys the reader ignores) are read with numpy, without validating the body field by field (a
body of plain bars is a valid one), into :class:`PlainBars`: the keys of a body's bars are worked out once per set
of keys (:func:`bar_layout`, the reader's own column detection), and later bodies of those keys are decoded from
their bytes by that layout's decoder. The batch's plain bars then become their windows together, in one call of
:func:`~lightning_tf.kline.inference.windows_of_series` (the features of the series of one length at once, the
calendar of all the forecast bars at once), so that reading a request costs about what the model costs per
request in a batch. Any other body is validated and its bars go through the bar reader itself
(:func:`lightning_tf.kline.inference.last_windows`: other layouts, unsorted bars, bad values and their repair,
its error messages). Both end in the same window. A batch is those windows, run once by
:meth:`KLineForecaster.forecast_columns <lightning_tf.kline.KLineForecaster.forecast_columns>` (the columns of the
table ``forecast()`` gives for the same bars) and written as JSON column by column for the whole batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from typing import Any, Literal, Union

import msgspec
import numpy as np
import pandas as pd
import torch
from pydantic import BaseModel, ConfigDict, Field

from .api import Serving, TaskAPI
from .errors import BadRequest, Rejected, one_line

__all__ = [
    "BarLayout",
    "KLineAPI",
    "KLineRequest",
    "KLineResponse",
    "PlainBars",
    "bar_layout",
    "forecast_records",
    "iso_strings",
    "iso_times",
    "model_columns",
    "plain_bars",
]

Cell = Union[float, int, str, None]


class KLineRequest(BaseModel):
    """One series of bars, oldest first or in any order (they are sorted by time)."""

    model_config = ConfigDict(extra="forbid")
    bars: list[dict[str, Cell]] = Field(
        min_length=1,
        description="one object per bar, with the column names the bar reader accepts (date/time, open, high, "
        "low, close, volume; English or Chinese names, in any order), and the model's covariates; other keys are "
        "ignored (amount and adj_close are checked as the reader checks them); at least context_len bars after "
        "the features' warm-up",
        examples=[
            [{"date": "2024-01-02", "open": 370.9, "high": 376.0, "low": 366.5, "close": 370.6, "volume": 25258600}]
        ],
    )
    ticker: str | None = Field(
        None,
        description="the series' name: a ticker the model was trained on is scaled "
        "with its training statistics, any other by its own history (default: series)",
    )


class KLineResponse(BaseModel):
    """One object per future bar: ticker, timestamp, step, pred_<target> (and its quantiles), close (rebuilt
    from predicted returns) and scaled_by."""

    forecast: list[dict[str, Any]]


def one_ticker(tickers: Sequence[Any], given: str | None, column: str | None) -> None:
    """A ValueError unless the bars' ticker column (``tickers``, its distinct values) names one series, the one the
    request's ``ticker`` field names when it gives one."""
    if len(tickers) > 1:
        names = ", ".join(str(t) for t in tickers[:5]) + (", ..." if len(tickers) > 5 else "")
        raise ValueError(f"bars: one series per request, got {len(tickers)} tickers in column {column!r} ({names})")
    if given is not None and len(tickers) and str(tickers[0]).strip() != given:
        raise ValueError(f"bars: the request's ticker is {given!r}, but their column {column!r} says {tickers[0]!r}")


def _reader_message(message: str, ticker: str | None) -> str:
    """The bar reader's error as a request's, on one line: ``bars: ...``, with the server's way to repair bad
    rows instead of the Python arguments."""
    for source in ("bars: ", "the bars: ", f"{ticker or 'series'}: "):
        message = message.removeprefix(source)
    head, *examples = [line.strip() for line in message.splitlines() if line.strip()]
    from lightning_tf.kline.reader.validation import REPAIR_HINT

    repair = REPAIR_HINT in examples
    examples = [e for e in examples if e != REPAIR_HINT]
    head = re.sub(r"\. Name (them|it) with columns=.*$", "", head)
    text = head + (": " + "; ".join(examples) if examples else "")
    return f"bars: {text}" + (
        ". Send finite, positive values, or start the server with --on_error drop or ffill" if repair else ""
    )


def _finite(records: list[dict[str, Any]]) -> list[dict[str, Any]] | Rejected:
    """``records``, or the answer that they hold a value JSON cannot (bars far outside the model's range)."""
    for record in records:
        for name, value in record.items():
            if isinstance(value, float) and not math.isfinite(value):
                return Rejected(422, f"bars: the forecast's {name} is {value}; these bars are out of the model's range")
    return records


def iso_strings(stamps: np.ndarray) -> list[str]:
    """Timestamps (datetime64, no time zone) in ISO 8601, as :meth:`pandas.Timestamp.isoformat` writes them:
    whole seconds with numpy at once, others one by one with pandas."""
    seconds = stamps.astype("datetime64[s]")
    if (seconds == stamps).all():
        return np.datetime_as_string(seconds).tolist()
    return [pd.Timestamp(t).isoformat() for t in stamps]


def forecast_records(columns: Mapping[str, Any], n: int) -> list[list[dict[str, Any]] | Rejected]:
    """The forecast of ``n`` series, the columns of its table (:meth:`KLineForecaster.forecast_columns
    <lightning_tf.kline.KLineForecaster.forecast_columns>`, or the table itself), as JSON objects: one list of
    rows per series, timestamps in ISO 8601, numbers as Python numbers (converted column by column for the whole
    batch); a series whose forecast holds a value JSON cannot gets its answer that says so."""
    names = list(columns)
    values, finite = [], None
    for name in names:
        column = np.asarray(columns[name])
        if column.dtype.kind == "M":
            values.append(iso_strings(column))
            continue
        values.append(column.tolist())
        if column.dtype.kind == "f":
            ok = np.isfinite(column)
            finite = ok if finite is None else finite & ok
    rows = [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]
    horizon = len(rows) // n
    out: list[list[dict[str, Any]] | Rejected] = []
    for i in range(n):
        series = rows[i * horizon : (i + 1) * horizon]
        bad = finite is not None and not finite[i * horizon : (i + 1) * horizon].all()
        out.append(_finite(series) if bad else series)
    return out


#: the fields of a request
_FIELDS = frozenset(KLineRequest.model_fields)
#: an ISO 8601 date or local date and time, as the reader and numpy read them alike (no time zone)
_ISO = r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?"
#: one ISO time, and ISO times one a line
_ISO_ONE, _ISO_LINES = re.compile(_ISO, re.ASCII), re.compile(rf"(?:{_ISO}\n)*{_ISO}", re.ASCII)
#: the types a cell of a bar may have in a request (:data:`Cell`): what a key the reader ignores may hold
_CELL_TYPES = frozenset({float, int, str, type(None)})
#: the canonical columns the reader checks though no model reads them: finite, and adj_close positive, amount not
#: negative
_CHECKED = ("amount", "adj_close")
#: the layouts a worker keeps, the last read first (a client sends its bars one way; a few clients a few ways)
_LAYOUTS_KEPT = 8


def iso_times(stamps: Sequence[str]) -> bool:
    """Whether each of ``stamps`` is an ISO 8601 date or local date and time that the reader and numpy read alike
    (:data:`_ISO`). Stamps of one length are first compared with the first as bytes, all at once: when each has an
    ASCII digit where the first has one and the first's character everywhere else, each is of the first's form;
    else they are matched one a line."""
    first = stamps[0]
    text = "".join(stamps)
    if len(text) == len(first) * len(stamps) and text.isascii() and _ISO_ONE.fullmatch(first):
        chars = np.frombuffer(text.encode("ascii"), dtype=np.uint8).reshape(len(stamps), len(first))  # (n, len)
        digit = (chars[0] >= ord("0")) & (chars[0] <= ord("9"))
        digits = chars[:, digit]
        if ((digits >= ord("0")) & (digits <= ord("9"))).all() and (chars[:, ~digit] == chars[0, ~digit]).all():
            return True
    text = "\n".join(stamps)  # one match for all: each an ISO time, none holding a line break
    return text.count("\n") == len(stamps) - 1 and _ISO_LINES.fullmatch(text) is not None


def model_columns(scale: Any) -> tuple[str, ...]:
    """The bar columns a model reads, by their canonical names: the prices and volume its features are computed
    from, and each input feature that is not computed from them (a covariate: a column of that name)."""
    from lightning_tf.kline.features import FEATURES

    return ("open", "high", "low", "close", "volume", *(f for f in scale.feature_names if f not in FEATURES))


@dataclass(frozen=True, eq=False)  # one per set of keys (bar_layout): equal when the same
class BarLayout:
    """How the bars of one set of keys are read without the bar reader, as the reader reads them.

    Attributes:
        keys: every key of a bar, in the order of the values :meth:`read` takes.
        columns: ``(name, position in keys)`` of the timestamp and of each column the model reads (canonical
            names, and covariates under the model's names), found as the reader finds them.
        checked: ``(name, position)`` of ``amount`` and ``adj_close``, which the reader checks.
        ticker: the position of the bars' ticker column (it names the series), or None.
        decoder: a JSON decoder of the bodies whose bars each have exactly ``keys`` (in any order): the timestamp
            and the ticker text, the columns read and checked numbers (a JSON integer or float, as a float: not a
            boolean, a string or null), any other key a cell (a number, text or null); no field but ``bars`` and
            an optional ``ticker`` (text or null). It reads them in C, types checked, without a dictionary per bar.
    """

    keys: tuple[str, ...]
    columns: tuple[tuple[str, int], ...]
    checked: tuple[tuple[str, int], ...]
    ticker: int | None
    decoder: msgspec.json.Decoder

    def read(self, values: list[tuple[Any, ...]]) -> tuple[dict[str, np.ndarray], str | None] | None:
        """The bars' columns by name (``timestamp`` as datetime64[ns], the rest float64) and the name their ticker
        column gives the series (None without one), from one tuple of values per key, each of its type (text for
        the timestamp and the ticker, numbers for the columns read and checked); or None unless they pass the
        reader's checks as they are: ISO 8601 local times in increasing order, finite numbers, positive prices
        with high and low around open and close, volume and amount not negative, adj_close positive, one ticker."""
        text_stamps = values[self.columns[0][1]]
        if not iso_times(text_stamps):
            return None
        stamps = np.array(text_stamps, dtype="datetime64[ns]")
        if len(stamps) > 1 and not (stamps[1:] > stamps[:-1]).all():
            return None
        numbers = [*self.columns[1:], *self.checked]
        try:
            matrix = np.array([values[k] for _, k in numbers], dtype=np.float64)  # (K, n)
        except OverflowError:  # an integer beyond float64
            return None
        if not np.isfinite(matrix).all():
            return None
        found = dict(zip((name for name, _ in numbers), matrix, strict=True))
        o, h, lo, c = (found[k] for k in ("open", "high", "low", "close"))
        if not ((o > 0).all() and (lo > 0).all() and (h >= np.fmax(o, c)).all() and (lo <= np.fmin(o, c)).all()):
            return None
        if not (found["volume"] >= 0).all():
            return None
        if ("amount" in found and (found["amount"] < 0).any()) or (
            "adj_close" in found and (found["adj_close"] <= 0).any()
        ):
            return None
        name = None
        if self.ticker is not None:
            tickers = set(values[self.ticker])
            if len(tickers) != 1:  # more than one series: the reader says so
                return None
            name = tickers.pop().strip()  # as the reader names it
        columns = {"timestamp": stamps, **{n: found[n] for n, _ in self.columns[1:]}}
        return columns, name


@lru_cache(maxsize=64)
def bar_layout(keys: frozenset[str], wanted: tuple[str, ...]) -> BarLayout | None:
    """The layout of bars with the keys ``keys`` for a model that reads the columns ``wanted``
    (:func:`model_columns`), found by the bar reader's own column detection on the names alone; None where the
    names do not decide it (two keys of one name once normalised: the first column wins; a date and a time of
    day: joined by their values), or do not name the timestamp and each of ``wanted``: the bar reader reads
    such bars (or says what is missing)."""
    from lightning_tf.kline.reader.columns import detect_columns, normalise

    names = tuple(sorted(keys))
    normal = [normalise(k) for k in names]
    if len(set(normal)) != len(names):
        return None
    try:
        found = detect_columns(pd.DataFrame(columns=list(names)), source="bars")
    except ValueError:
        return None
    taken = set(found.values())
    if normalise(found["timestamp"]) in ("date", "日期") and any(
        n in ("time", "时间") and k not in taken for k, n in zip(names, normal, strict=True)
    ):
        return None
    by_norm = dict(zip(normal, names, strict=True))
    columns = [("timestamp", found["timestamp"])]
    for name in wanted:
        if name in ("open", "high", "low", "close", "volume"):
            key = found.get(name)
        else:  # a covariate, found as read_bars finds its extra columns
            key = name if name in keys else by_norm.get(normalise(name)) or found.get(name)
        if key is None:
            return None
        columns.append((name, key))
    checked = [(name, found[name]) for name in _CHECKED if name in found]
    kinds: dict[str, Any] = {}
    for key, kind in [(columns[0][1], str), *((k, float) for _, k in columns[1:] + checked)]:
        if kinds.setdefault(key, kind) is not kind:  # one key as text and as a number
            return None
    if "ticker" in found and kinds.setdefault(found["ticker"], str) is not str:
        return None
    fields = [f"c{i}" for i in range(len(names))]
    bar = msgspec.defstruct(
        "Bar",
        [(f, kinds.get(k, Union[float, str, None])) for f, k in zip(fields, names, strict=True)],
        rename=dict(zip(fields, names, strict=True)),
        forbid_unknown_fields=True,
        gc=False,  # floats, text and None only: no reference cycle to collect
    )
    body = msgspec.defstruct(
        "Body", [("bars", list[bar]), ("ticker", Union[str, None], None)], forbid_unknown_fields=True
    )
    position = {k: i for i, k in enumerate(names)}
    return BarLayout(
        keys=names,
        columns=tuple((name, position[k]) for name, k in columns),
        checked=tuple((name, position[k]) for name, k in checked),
        ticker=position[found["ticker"]] if "ticker" in found else None,
        decoder=msgspec.json.Decoder(body),
    )


def plain_bars(
    bars: list[dict[str, Any]], wanted: tuple[str, ...]
) -> tuple[BarLayout, dict[str, np.ndarray], str | None] | None:
    """The layout of ``bars`` (:func:`bar_layout`), their columns by name and the name their ticker column gives
    the series, when the bars are plain: each bar has the same keys, which name the timestamp and each of
    ``wanted`` as the bar reader names them (any others it ignores, or checks); the values are of the types the
    layout reads (:class:`BarLayout`) and any other key's a request's cell; they pass the reader's checks as
    they are (:meth:`BarLayout.read`). Else None: the bar reader reads them (and says what is wrong, or repairs
    it)."""
    if not bars or set(map(type, bars)) != {dict}:
        return None
    first = bars[0]
    if set(map(type, first)) != {str} or set(map(len, bars)) != {len(first)}:
        return None
    layout = bar_layout(frozenset(first), wanted)
    if layout is None:
        return None
    try:  # every bar has each key (and as many keys): the same keys
        values = list(zip(*map(itemgetter(*layout.keys), bars)))  # one tuple of values per key
    except KeyError:
        return None
    text = [layout.columns[0][1], *([] if layout.ticker is None else [layout.ticker])]
    numbers = {k for _, k in layout.columns[1:] + layout.checked}
    if any(set(map(type, values[k])) != {str} for k in text):
        return None
    if not set(map(type, chain.from_iterable(values[k] for k in numbers))) <= {float, int}:
        return None
    others = (v for k, v in enumerate(values) if k not in numbers and k not in text)
    if not set(map(type, chain.from_iterable(others))) <= _CELL_TYPES:
        return None
    read = layout.read(values)
    return None if read is None else (layout, *read)


@dataclass(frozen=True)
class _ModelFacts:
    """What reading plain bars needs of a model: its data scale and the bar columns it reads (:func:`model_columns`)."""

    scale: Any
    columns: tuple[str, ...]


@dataclass(frozen=True)
class PlainBars:
    """A request's plain bars (:func:`plain_bars`), read into their window with the rest of the batch's.

    Attributes:
        ticker: the request's ``ticker``.
        name: the series' name: the bars' ticker column's, else ``ticker``, else ``series``.
        columns: the bars' columns by name.
    """

    ticker: str | None
    name: str
    columns: dict[str, np.ndarray]


class KLineAPI(TaskAPI):
    """A :class:`~lightning_tf.kline.KLineForecaster` checkpoint behind ``POST /predict``.

    Args:
        checkpoint: the checkpoint to serve.
        serving: batching, key, threads, workers, compilation.
        on_error: bad bars (NaN, inf, high below low, ...) refuse the request (``error``), are dropped
            (``drop``) or forward-filled (``ffill``), as the bar reader does.
    """

    task = "kline"
    model_class = "KLineForecaster"
    # a worker runs at once what is queued when it is free: a request costs this small model less than a wait for
    # company would, so waiting for a batch to fill idles the worker more than it saves, and a lone request waits
    # for nothing (docs/serve.md)
    default_batch_timeout = 0.0
    request_model = KLineRequest
    response_model = KLineResponse

    def __init__(
        self, checkpoint: str, serving: Serving, on_error: Literal["error", "drop", "ffill"] = "error"
    ) -> None:
        from lightning_tf.kline.settings import Reading

        self.reading = Reading(on_error=on_error)  # which checks it, as every reading of bars
        super().__init__(checkpoint, serving)
        self.on_error = on_error
        self._facts: _ModelFacts | None = None  # _of_model
        # the layouts of the plain bars read last, the last first (parse_bytes tries their decoders in turn)
        self._layouts: list[BarLayout] = []

    def check_model(self) -> None:
        scale = self.model.data_scale
        if scale is None or not scale.has_prices:
            raise ValueError(
                f"{self.checkpoint}: the model holds no bar data scale (it was not trained on K-line bars)"
            )

    def compile_model(self) -> None:
        net = self.model.net
        net.parts = torch.compile(net.parts)

    def warmup(self) -> None:
        example = self.model.example_input_array  # x (1, L, C), or (x, x_future, static) with covariates
        inputs = example if isinstance(example, tuple) else (example,)
        device = self.model.device
        for n in sorted({1, self.max_batch_size}):
            x, *covariates = (None if t is None else t.expand(n, *t.shape[1:]).to(device) for t in inputs)
            x_future, static = (covariates + [None, None])[:2]
            self.model.net.parts(x, x_future=x_future, static=static)  # x (n, L, C)

    def parse(self, body: dict[str, Any]) -> Any:
        bars, ticker = body.get("bars"), body.get("ticker")
        scale = self.model.data_scale
        plain = None
        # a body of the request's fields whose bars are plain (every cell read a number or an ISO time, so that
        # validation would pass it) is read with numpy; any other is validated (its errors) and read by the reader,
        # as are the bars of a model that reads the user's known-future covariates (which a request cannot carry)
        if type(bars) is list and type(ticker) in (str, type(None)) and body.keys() <= _FIELDS:
            if not scale.covariates.get("future"):
                plain = plain_bars(bars, self._of_model().columns)
        if plain is None or (ticker is not None and plain[2] is not None and plain[2] != ticker):
            return self._read(self.validate(body))  # which refuses a ticker field its column contradicts
        layout, columns, name = plain
        self._learn(layout)  # the next bodies of these keys are read from their bytes (parse_bytes)
        return PlainBars(ticker, (ticker or "series") if name is None else name, columns)

    def parse_bytes(self, body: bytes) -> PlainBars | None:
        """A body of plain bars with the keys of plain bars :meth:`parse` read lately (a client sends its bars one
        way), read by that layout's decoder (:class:`BarLayout`): what :meth:`parse` would read, without a
        dictionary per bar or a check of each value's type. None for any other body: :meth:`parse` reads it."""
        self._of_model()  # a model of its own forgets the layouts
        for k, layout in enumerate(self._layouts):
            try:
                request = layout.decoder.decode(body)
            except msgspec.DecodeError:  # not JSON msgspec reads, or not this layout's plain bars
                continue
            if k:
                self._learn(layout)
            if not request.bars:
                return None
            read = layout.read(list(zip(*map(msgspec.structs.astuple, request.bars))))
            if read is None:  # the bars of this layout, with a value the reader refuses or repairs
                return None
            columns, name = read
            if request.ticker is not None and name is not None and name != request.ticker:
                return None  # parse refuses it
            return PlainBars(request.ticker, (request.ticker or "series") if name is None else name, columns)
        return None

    def _learn(self, layout: BarLayout) -> None:
        """Try ``layout`` first on the next bodies (:meth:`parse_bytes`), keeping the few last read."""
        if not self._layouts or self._layouts[0] is not layout:
            self._layouts = [layout, *(x for x in self._layouts if x is not layout)][:_LAYOUTS_KEPT]

    def _of_model(self) -> _ModelFacts:
        """What reading plain bars needs of the model served, worked out once per model (not per request)."""
        scale = self.model.data_scale
        facts = self._facts
        if facts is None or facts.scale is not scale:
            facts = self._facts = _ModelFacts(scale, model_columns(scale))
            self._layouts = []  # learnt again, from this model's plain bars
        return facts

    def _windows(self, plain: list[PlainBars]) -> list[Any]:
        """The last windows of plain bars (:func:`plain_bars`), with their covariates, as the bar reader's
        would be: read together (:func:`~lightning_tf.kline.inference.windows_of_series`), each bad one as its
        request's answer."""
        from lightning_tf.kline.inference import windows_of_series

        facts = self._of_model()
        scale = facts.scale
        windows = windows_of_series(
            [(p.name, p.columns, p.ticker or "the bars") for p in plain],
            scale=scale,
            context_len=self.model.hparams.context_len,
            horizon=self.model.hparams.horizon,
        )
        return [
            Rejected(422, one_line(_reader_message(str(w), p.ticker))) if isinstance(w, ValueError) else w
            for p, w in zip(plain, windows, strict=True)
        ]

    def _read(self, request: KLineRequest) -> Any:
        """The last window of any bars, read by the bar reader."""
        from lightning_tf.kline.inference import last_windows
        from lightning_tf.kline.reader.columns import detect_columns

        frame = pd.DataFrame.from_records(request.bars)
        scale = self.model.data_scale
        try:
            found = detect_columns(frame, source="bars")
            # the reader sets a missing volume to 0; a model that reads volume would forecast from constants
            tickers = frame[found["ticker"]].unique() if "ticker" in found else []
            one_ticker(tickers, request.ticker, found.get("ticker"))
            needs_volume = [f for f in scale.feature_names if "volume" in f]
            if needs_volume and "volume" not in found:
                raise ValueError(
                    f"bars: no volume column, and this model reads volume ({', '.join(needs_volume)}); "
                    f"the columns are {list(frame.columns)}"
                )
            windows = last_windows(
                frame,
                scale=scale,
                context_len=self.model.hparams.context_len,
                reading=self.reading,
                name=request.ticker,
            )
        except ValueError as err:
            raise BadRequest(_reader_message(str(err), request.ticker)) from None
        assert len(windows) == 1, "one ticker, one window"
        return windows[0]

    def run(self, inputs: list[Any]) -> Sequence[list[dict[str, Any]] | Rejected]:
        plain = [i for i, x in enumerate(inputs) if isinstance(x, PlainBars)]
        items = list(inputs)
        for i, window in zip(plain, self._windows([inputs[i] for i in plain]), strict=True):
            items[i] = window
        good = [i for i, x in enumerate(items) if not isinstance(x, Rejected)]
        answers: list[list[dict[str, Any]] | Rejected] = list(items)
        if good:
            records = forecast_records(self.model.forecast_columns([items[i] for i in good]), len(good))
            for i, answer in zip(good, records, strict=True):
                answers[i] = answer
        return answers

    def encode(self, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {"forecast": output}

    def describe(self) -> dict[str, Any]:
        scale, hp = self.model.data_scale, self.model.hparams
        return {
            "context_len": hp.context_len,
            "horizon": hp.horizon,
            "features": list(scale.feature_names),
            "targets": list(scale.target_names),
            "quantiles": self.model.quantiles,
            "trained_tickers": list(scale.ticker_names),
            "warm_up": {"volatility_window": scale.volatility_window, "volume_window": scale.volume_window},
            "on_error": self.on_error,
            "request": {
                "bars": [{"date": "...", "open": 0.0, "high": 0.0, "low": 0.0, "close": 0.0, "volume": 0}],
                "ticker": "optional",
            },
            "response": {
                "forecast": ["one object per future bar: ticker, timestamp, step, pred_<target>, close, scaled_by"]
            },
        }
