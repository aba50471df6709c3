"""A fine-tuned Kronos behind ``POST /predict``: one series of OHLCV bars -> its next ``horizon`` bars, one object
per future bar (``ticker``, ``timestamp``, ``step``, ``open`` ... ``amount``), what :meth:`KronosTuner.forecast
<lightning_tf.kline.KronosTuner.forecast>` gives for the same bars.

A request's bars are read by the bar reader (any names and layouts it takes; bad bars refused, or repaired with
``--on_error``). A batch is the batch's series forecast together, those of one length in one pass
(:func:`~lightning_tf.kline.kronos_tuning.forecast_series`, without reading them again). The forecast is drawn (the
mean of the checkpoint's ``samples`` draws), as the reference predictor's, each series from its own generator of
the checkpoint's seed: a request gets what ``forecast()`` gives for its bars, whatever else shares its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from .api import Serving, TaskAPI
from .errors import BadRequest, one_line
from .kline import Cell, _reader_message, one_ticker

__all__ = ["KronosAPI", "KronosRequest", "KronosResponse"]


class KronosRequest(BaseModel):
    """One series of bars, oldest first or in any order (they are sorted by time)."""

    model_config = ConfigDict(extra="forbid")
    bars: list[dict[str, Cell]] = Field(
        min_length=1,
        description="one object per bar, with the column names the bar reader accepts (date/time, open, high, "
        "low, close, volume, amount; English or Chinese names, in any order); the last max_context are read",
        examples=[
            [{"date": "2024-01-02", "open": 370.9, "high": 376.0, "low": 366.5, "close": 370.6, "volume": 25258600}]
        ],
    )
    ticker: str | None = Field(None, description="the series' name (default: series)")


class KronosResponse(BaseModel):
    """One object per future bar: ticker, timestamp, step, open, high, low, close, volume, amount."""

    forecast: list[dict[str, Any]]


class KronosAPI(TaskAPI):
    """A :class:`~lightning_tf.kline.KronosTuner` checkpoint behind ``POST /predict``.

    Args:
        checkpoint: the checkpoint to serve.
        serving: batching, key, threads, workers.
        on_error: bad bars refuse the request (``error``), are dropped (``drop``) or forward-filled (``ffill``).
    """

    task = "kline"
    model_class = "KronosTuner"
    # a batch draws token by token for every bar of the horizon: far longer than a short wait for company
    default_batch_timeout = 0.02
    request_model = KronosRequest
    response_model = KronosResponse

    def __init__(
        self, checkpoint: str, serving: Serving, on_error: Literal["error", "drop", "ffill"] = "error"
    ) -> None:
        from lightning_tf.kline.settings import Reading

        self.reading = Reading(on_error=on_error)  # which checks it, as every reading of bars
        if serving.compile:
            raise ValueError("--compile is not for Kronos checkpoints: it draws token by token on a growing cache")
        super().__init__(checkpoint, serving)
        self.on_error = on_error

    def warmup(self) -> None:
        bars = pd.DataFrame(
            {
                "timestamp": pd.bdate_range("2024-01-01", periods=8),
                **{c: [10.0, 10.5, 10.2, 10.8, 10.4, 10.9, 10.6, 11.0] for c in ("open", "close")},
                "high": 11.5,
                "low": 9.5,
                "volume": 1000.0,
            }
        )
        self.model.forecast(bars, horizon=1)

    def parse(self, body: dict[str, Any]) -> pd.DataFrame:
        from lightning_tf.kline.reader.columns import detect_columns
        from lightning_tf.kline.settings import Covariates, read_with_settings

        request = self.validate(body)
        frame = pd.DataFrame.from_records(request.bars)
        try:
            found = detect_columns(frame, source="bars")
            one_ticker(
                frame[found["ticker"]].unique() if "ticker" in found else [], request.ticker, found.get("ticker")
            )
            bars = read_with_settings(frame, self.reading, Covariates(), source="bars", name=request.ticker or "series")
        except ValueError as err:
            raise BadRequest(_reader_message(str(err), request.ticker)) from None
        if len(bars) < 2:  # the next bars' stamps continue the series' spacing
            raise BadRequest(f"bars: {len(bars)} bar read; send two or more, so that the next ones can be dated")
        if request.ticker is not None:
            bars["ticker"] = request.ticker
        return bars

    def run(self, inputs: list[pd.DataFrame]) -> Sequence[list[dict[str, Any]]]:
        out = []
        for table in self.model.forecast_series(inputs):  # the batch's series together, as the reader read them
            table["timestamp"] = [t.isoformat() for t in table["timestamp"]]
            out.append(table.to_dict(orient="records"))
        return out

    def encode(self, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {"forecast": output}

    def describe(self) -> dict[str, Any]:
        hp, kronos = self.model.hparams, self.model.kronos
        return {
            "pretrained": hp.pretrained,
            "max_context": kronos.max_context,
            "horizon": hp.horizon,
            "samples": hp.samples,
            "on_error": self.on_error,
            "request": {
                "bars": [{"date": "...", "open": 0.0, "high": 0.0, "low": 0.0, "close": 0.0, "volume": 0}],
                "ticker": "optional",
            },
            "response": {"forecast": ["one object per future bar: ticker, timestamp, step, open ... amount"]},
        }

    def check_model(self) -> None:
        if not isinstance(self.model.hparams.get("kronos"), dict):
            raise ValueError(one_line(f"{self.checkpoint}: a KronosTuner checkpoint without its model's configs"))
