"""The K-line forecaster behind ``POST /predict``: one series of OHLCV bars -> the forecast of its next
``horizon`` bars, one object per future bar with the fields of ``forecast()``'s table.

A request's bars become the series' last window, scaled as :meth:`KLineForecaster.forecast
<lightning_tf.kline.KLineForecaster.forecast>` scales it, with the covariates it reads: past covariates are
columns of the bars, the known-future calendar features those of the forecast bars on the model's calendar, the
static ids those of the request's ticker. Plain bars (:func:`plain_columns`: named columns the bar reader knows,
one per column the model reads, ISO timestamps in increasing order, finite numbers that pass the reader's checks)
are read with numpy, without validating the body field by field (a body of plain bars is a valid one), into
:class:`PlainBars`; the batch's plain bars then become their windows together, in one call of
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
    "KLineAPI",
    "KLineRequest",
    "KLineResponse",
    "forecast_records",
    "iso_strings",
    "model_columns",
    "plain_columns",
]

Cell = Union[float, int, str, None]


class KLineRequest(BaseModel):
    """One series of bars, oldest first or in any order (they are sorted by time)."""

    model_config = ConfigDict(extra="forbid")
    bars: list[dict[str, Cell]] = Field(
        min_length=1,
        description="one object per bar, with the column names the bar reader accepts (date/time, open, high, "
        "low, close, volume; English or Chinese names); at least context_len bars after the features' warm-up",
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


def _reader_message(message: str, ticker: str | None) -> str:
    """The bar reader's error as a request's, on one line: ``bars: ...``, with the server's way to repair bad
    rows instead of the Python arguments."""
    for source in ("bars: ", "the bars: ", f"{ticker or 'series'}: "):
        message = message.removeprefix(source)
    head, *examples = [line.strip() for line in message.splitlines() if line.strip()]
    hint = "Fix the file, or pass on_error='drop' or on_error='ffill' to repair it."
    repair = hint in examples
    examples = [e for e in examples if e != hint]
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
#: ISO times, one a line
_ISO_LINES = re.compile(rf"(?:{_ISO}\n)*{_ISO}", re.ASCII)


def model_columns(scale: Any) -> tuple[str, ...]:
    """The bar columns a model reads, by their canonical names: the prices and volume its features are computed
    from, and each input feature that is not computed from them (a covariate: a column of that name)."""
    from lightning_tf.kline.features import FEATURES

    return ("open", "high", "low", "close", "volume", *(f for f in scale.feature_names if f not in FEATURES))


@lru_cache(maxsize=64)
def _canonical_names(keys: tuple[str, ...], wanted: tuple[str, ...]) -> tuple[str, ...] | None:
    """The canonical name of each of ``keys`` (the bar reader's aliases), or None unless they name exactly the
    timestamp and ``wanted``, one column each."""
    from lightning_tf.kline.reader.columns import ALIASES, normalise

    alias = {}
    for canonical, names in ALIASES.items():
        for name in names:
            alias.setdefault(normalise(name), canonical)
    for name in wanted:
        alias.setdefault(normalise(name), name)
    names = tuple(alias.get(normalise(k), "") for k in keys)
    return names if sorted(names) == sorted(("timestamp", *wanted)) else None


def plain_columns(bars: list[dict[str, Any]], wanted: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The columns of ``bars`` as arrays, by canonical name (``timestamp`` as datetime64[ns], ``wanted`` as
    float64), when the bars are plain: each bar has the same keys, naming the timestamp and each of ``wanted``
    once (the bar reader's names); the timestamps are ISO 8601 local times in increasing order; the numbers are
    finite, the prices positive, the volume not negative, high and low around open and close. Else None: the bar
    reader reads them (and says what is wrong, or repairs it)."""
    if not bars or set(map(type, bars)) != {dict}:
        return None
    keys = tuple(bars[0])
    if set(map(type, keys)) != {str} or set(map(len, bars)) != {len(keys)}:
        return None
    names = _canonical_names(keys, wanted)
    if names is None:
        return None
    try:  # every bar has each key of the first (and as many keys): the same keys
        columns_of_keys = list(zip(*map(itemgetter(*keys), bars)))  # one tuple of values per key
    except KeyError:
        return None
    t = names.index("timestamp")
    numbers = [c for k, c in enumerate(columns_of_keys) if k != t]
    if set(map(type, columns_of_keys[t])) != {str} or not set(map(type, chain.from_iterable(numbers))) <= {float, int}:
        return None
    return _plain_arrays(names, columns_of_keys)


def _plain_arrays(names: tuple[str, ...], columns_of_keys: list[tuple[Any, ...]]) -> dict[str, np.ndarray] | None:
    """:func:`plain_columns` of columns whose types are checked (the timestamps text, the rest numbers): the
    arrays by canonical name (``names``, in the columns' order), or None unless they pass its checks."""
    t = names.index("timestamp")
    text_stamps = columns_of_keys[t]
    text = "\n".join(text_stamps)  # one match for all: each an ISO time, none holding a line break
    if text.count("\n") != len(text_stamps) - 1 or not _ISO_LINES.fullmatch(text):
        return None
    stamps = np.array(text_stamps, dtype="datetime64[ns]")
    if len(stamps) > 1 and not (stamps[1:] > stamps[:-1]).all():
        return None
    try:
        values = np.array([c for k, c in enumerate(columns_of_keys) if k != t], dtype=np.float64)  # (K, n)
    except OverflowError:  # an integer beyond float64
        return None
    if not np.isfinite(values).all():
        return None
    columns = {"timestamp": stamps, **dict(zip((n for n in names if n != "timestamp"), values, strict=True))}
    o, h, lo, c = (columns[k] for k in ("open", "high", "low", "close"))
    if not ((o > 0).all() and (lo > 0).all() and (h >= np.fmax(o, c)).all() and (lo <= np.fmin(o, c)).all()):
        return None
    if not (columns["volume"] >= 0).all():
        return None
    return columns


@lru_cache(maxsize=16)
def _layout_decoder(keys: tuple[str, ...], timestamp: int) -> msgspec.json.Decoder:
    """A JSON decoder of the bodies whose bars each have exactly ``keys`` (in any order), the ``timestamp``-th
    text and the others numbers (a JSON integer or float, as a float: not a boolean, a string or null), with no
    field but ``bars`` and an optional ``ticker`` (text or null): those :meth:`KLineAPI.parse` reads as plain
    (:func:`plain_columns`), whose bars it reads in C, types checked, without a dictionary per bar."""
    fields = [f"c{i}" for i in range(len(keys))]
    bar = msgspec.defstruct(
        "Bar",
        [(f, str if i == timestamp else float) for i, f in enumerate(fields)],
        rename=dict(zip(fields, keys, strict=True)),
        forbid_unknown_fields=True,
        gc=False,  # floats and text only: no reference cycle to collect
    )
    body = msgspec.defstruct(
        "Body", [("bars", list[bar]), ("ticker", Union[str, None], None)], forbid_unknown_fields=True
    )
    return msgspec.json.Decoder(body)


@dataclass(frozen=True)
class _ModelFacts:
    """What reading plain bars needs of a model: its data scale and the bar columns it reads (:func:`model_columns`)."""

    scale: Any
    columns: tuple[str, ...]


@dataclass(frozen=True)
class PlainBars:
    """A request's plain bars (:func:`plain_columns`), read into their window with the rest of the batch's."""

    ticker: str | None
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
        if on_error not in ("error", "drop", "ffill"):
            raise ValueError(f"on_error must be error, drop or ffill, got {on_error!r}")
        super().__init__(checkpoint, serving)
        self.on_error = on_error
        self._facts: _ModelFacts | None = None  # _of_model
        # the decoder of the layout of the last plain bars read, and their canonical names (parse_bytes)
        self._layout: tuple[msgspec.json.Decoder, tuple[str, ...]] | None = None

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
        columns = None
        # a body of the request's fields whose bars are plain (every cell a number or an ISO time, so that
        # validation would pass it) is read with numpy; any other is validated (its errors) and read by the reader,
        # as are the bars of a model that reads the user's known-future covariates (which a request cannot carry)
        if type(bars) is list and type(ticker) in (str, type(None)) and body.keys() <= _FIELDS:
            if not scale.covariates.get("future"):
                columns = plain_columns(bars, self._of_model().columns)
        if columns is None:
            return self._read(self.validate(body))
        keys = tuple(bars[0])  # the next bodies are tried as bars of these keys (parse_bytes)
        names = _canonical_names(keys, self._of_model().columns)
        self._layout = (_layout_decoder(keys, names.index("timestamp")), names)
        return PlainBars(ticker, columns)

    def parse_bytes(self, body: bytes) -> PlainBars | None:
        """A body of plain bars with the keys of the last plain bars :meth:`parse` read (a client sends its bars
        one way), read by that layout's decoder (:func:`_layout_decoder`): what :meth:`parse` would read, without
        a dictionary per bar or a check of each value's type. None for any other body: :meth:`parse` reads it."""
        self._of_model()  # a model of its own forgets the layout
        if self._layout is None:
            return None
        decoder, names = self._layout
        try:
            request = decoder.decode(body)
        except msgspec.DecodeError:  # not JSON msgspec reads, or not this layout's plain bars: parse decides
            return None
        if not request.bars:
            return None
        columns = _plain_arrays(names, list(zip(*map(msgspec.structs.astuple, request.bars))))
        return None if columns is None else PlainBars(request.ticker, columns)

    def _of_model(self) -> _ModelFacts:
        """What reading plain bars needs of the model served, worked out once per model (not per request)."""
        scale = self.model.data_scale
        facts = self._facts
        if facts is None or facts.scale is not scale:
            facts = self._facts = _ModelFacts(scale, model_columns(scale))
            self._layout = None  # learnt again, from this model's plain bars
        return facts

    def _windows(self, plain: list[PlainBars]) -> list[Any]:
        """The last windows of plain bars (:func:`plain_columns`), with their covariates, as the bar reader's
        would be: read together (:func:`~lightning_tf.kline.inference.windows_of_series`), each bad one as its
        request's answer."""
        from lightning_tf.kline.inference import windows_of_series

        facts = self._of_model()
        scale = facts.scale
        windows = windows_of_series(
            [(p.ticker or "series", p.columns, p.ticker or "the bars") for p in plain],
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
        from lightning_tf.kline.settings import Reading

        frame = pd.DataFrame.from_records(request.bars)
        scale = self.model.data_scale
        try:
            found = detect_columns(frame, source="bars")
            # the reader sets a missing volume to 0; a model that reads volume would forecast from constants
            tickers = frame[found["ticker"]].unique() if "ticker" in found else []
            if len(tickers) > 1:
                names = ", ".join(str(t) for t in tickers[:5]) + (", ..." if len(tickers) > 5 else "")
                raise ValueError(
                    f"bars: one series per request, got {len(tickers)} tickers in column {found['ticker']!r} ({names})"
                )
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
                reading=Reading(on_error=self.on_error),
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
