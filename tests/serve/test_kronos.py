"""KronosAPI: a fine-tuned Kronos checkpoint behind ``POST /predict``. In process: a lone request gets the rows
``forecast()`` gives for the same bars, a batch answers each of its series (its bad requests refused alone, each
with its 4xx and one line); and a real ``lightning-tf serve`` of the checkpoint on 127.0.0.1 (integration)."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("litserve")

from lightning_tf.kline import KronosTuner
from lightning_tf.kline.published import KRONOS_PRESETS, Kronos, KronosConfig
from lightning_tf.serve.api import Serving
from lightning_tf.serve.kronos import KronosAPI
from tests.helpers.serve import ServerProcess, bars_records

SERIES = [bars_records(40 + 3 * i, seed=i) for i in range(6)]


def _tuner() -> KronosTuner:
    torch.manual_seed(0)
    _, tokenizer, _ = KRONOS_PRESETS["small"]
    kronos = Kronos(KronosConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64), tokenizer, max_context=32)
    return KronosTuner.from_model(kronos, horizon=3, samples=2).eval()


@pytest.fixture(scope="module")
def api() -> KronosAPI:
    a = KronosAPI("unused.ckpt", Serving(max_batch_size=8))
    a.model = _tuner()
    return a


def served(api: KronosAPI, bodies: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    outputs = api.unbatch(api.predict(api.batch([api.decode_request(b) for b in bodies])))
    return [(r.status_code, json.loads(r.body)) for r in map(api.encode_response, outputs)]


def offline(model: KronosTuner, records: list[dict[str, Any]], ticker: str = "series") -> list[dict[str, Any]]:
    table = model.forecast(pd.DataFrame.from_records(records), name=ticker)
    table["timestamp"] = [t.isoformat() for t in table["timestamp"]]
    return table.to_dict(orient="records")


def same_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert [set(g) for g in got] == [set(w) for w in want]
    for g, w in zip(got, want, strict=True):
        for k, v in w.items():
            assert (abs(g[k] - v) <= 1e-6 * max(1.0, abs(v))) if isinstance(v, float) else g[k] == v, (k, g[k], v)


def test_a_lone_request_gets_the_rows_forecast_gives(api: KronosAPI) -> None:
    for i in (0, 3):
        [(status, body)] = served(api, [{"bars": SERIES[i], "ticker": "ABC"}])
        assert status == 200
        same_rows(body["forecast"], offline(api.model, SERIES[i], "ABC"))
        assert [r["step"] for r in body["forecast"]] == [1, 2, 3]


def test_a_batch_answers_each_series_and_refuses_bad_ones_alone(api: KronosAPI) -> None:
    bad = [dict(b, Close=float("nan")) if j == 10 else b for j, b in enumerate(SERIES[2])]
    bodies = [{"bars": SERIES[0]}, {"bars": bad}, {"bars": SERIES[4], "ticker": "X"}, {"bars": [{"Date": "x"}]}]
    answers = served(api, bodies)
    assert [s for s, _ in answers] == [200, 422, 200, 422]
    assert answers[1][1]["error"].startswith("bars: 1 missing values: row 11, column 'close'")
    assert "not found" in answers[3][1]["error"] and "\n" not in answers[3][1]["error"]
    assert [r["ticker"] for r in answers[2][1]["forecast"]] == ["X"] * 3
    # the batch's series each got its own next bars: timestamps after its own last bar
    for body, (_, answer) in ((bodies[0], answers[0]), (bodies[2], answers[2])):
        last = pd.Timestamp(body["bars"][-1]["Date"])
        assert all(pd.Timestamp(r["timestamp"]) > last for r in answer["forecast"])
        assert all(np.isfinite(r["close"]) for r in answer["forecast"])
    # and what each would get alone: a series' draws do not depend on what shares its batch
    same_rows(answers[0][1]["forecast"], offline(api.model, SERIES[0]))
    same_rows(answers[2][1]["forecast"], offline(api.model, SERIES[4], "X"))


def test_series_with_other_columns_share_a_batch(api: KronosAPI) -> None:
    """One request with an amount column, one without: one batch answers both, each series read with its own
    columns (the amount one reads its amount), each what forecast() gives it alone."""
    with_amount = [dict(b, amount=b["Close"] * b["Volume"]) for b in SERIES[1]]
    answers = served(api, [{"bars": SERIES[3]}, {"bars": with_amount}])
    assert [s for s, _ in answers] == [200, 200]
    same_rows(answers[0][1]["forecast"], offline(api.model, SERIES[3]))
    assert answers[1][1]["forecast"][0]["amount"] != offline(api.model, SERIES[1])[0]["amount"]
    same_rows(answers[1][1]["forecast"], offline(api.model, with_amount))


def test_bad_requests_and_options(api: KronosAPI) -> None:
    two = [dict(b, ticker="A") for b in SERIES[0][:20]] + [dict(b, ticker="B") for b in SERIES[1][:20]]
    for body, error in [
        ({"bars": two}, "bars: one series per request, got 2 tickers"),
        ({"bars": two[:20], "ticker": "B"}, "bars: the request's ticker is 'B', but their column 'ticker' says 'A'"),
        ({"bars": SERIES[0], "extra": 1}, "extra"),
        ({"bars": []}, "bars"),
        ({"bars": SERIES[0][:1]}, "bars: 1 bar read; send two or more, so that the next ones can be dated"),
    ]:
        [(status, answer)] = served(api, [body])
        assert status == 422 and error in answer["error"], answer
    with pytest.raises(ValueError, match=r"reading.on_error must be one of \(.error., .drop., .ffill.\), got 'zero'"):
        KronosAPI("unused.ckpt", Serving(), on_error="zero")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="--compile is not for Kronos checkpoints"):
        KronosAPI("unused.ckpt", Serving(compile=True))


def test_info(api: KronosAPI) -> None:
    info = api.info()
    assert (info["task"], info["class"], info["horizon"], info["samples"], info["max_context"]) == (
        "kline",
        "KronosTuner",
        3,
        2,
        32,
    )


@pytest.mark.integration
def test_lightning_tf_serve_answers_over_http(tmp_path: Path) -> None:
    from lightning.pytorch import Trainer

    model = _tuner()
    trainer = Trainer(max_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.strategy.connect(model)
    ckpt = tmp_path / "kronos.ckpt"
    trainer.save_checkpoint(ckpt)
    server = ServerProcess(ckpt, "--max_batch_size", "4", "--batch_timeout", "0.05")
    try:
        assert server.get("/info").json()["model"]["class"] == "KronosTuner"
        alone = server.post({"bars": SERIES[1], "ticker": "ONE"})
        assert alone.status_code == 200, alone.text
        same_rows(alone.json()["forecast"], offline(model, SERIES[1], "ONE"))
        bodies = [{"bars": s} for s in SERIES] + [{"bars": [{"Date": "2020-01-01"}]}]
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            responses = list(pool.map(server.post, bodies))
        assert [r.status_code for r in responses] == [200] * len(SERIES) + [422]
        assert max(int(r.headers["X-Batch-Size"]) for r in responses[:-1]) > 1
    finally:
        assert server.stop() == 0
