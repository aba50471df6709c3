"""A real ``lightning-tf serve`` of a tiny K-line checkpoint on 127.0.0.1: health and info, concurrent requests
batched and each equal to ``forecast()`` of the same bars, bad bars beside good ones, and SIGTERM answering the
requests in flight."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import requests

pytest.importorskip("litserve")

from lightning_tf.export import load_module
from tests.helpers.serve import Restartable, bars_records, in_flight_through_sigterm, save_checkpoint, tiny_kline

# a real server per test module (a subprocess): the integration tier
pytestmark = pytest.mark.integration

SERIES = [bars_records(60 + 5 * i, seed=i) for i in range(12)]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(tiny_kline(), tmp_path_factory.mktemp("kline") / "kline.ckpt")


@pytest.fixture(scope="module")
def servers(ckpt: Path) -> Iterator[Restartable]:
    holder = Restartable(ckpt, "--max_batch_size", "8", "--batch_timeout", "0.05")
    try:
        yield holder
    finally:
        holder.stop()


@pytest.fixture(scope="module")
def offline(ckpt: Path) -> list[list[dict[str, Any]]]:
    model = load_module(ckpt)
    out = []
    for i, bars in enumerate(SERIES):
        table = model.forecast(pd.DataFrame.from_records(bars), name="TRAINED" if i % 3 == 0 else None)
        table["timestamp"] = [t.isoformat() for t in table["timestamp"]]
        out.append(table.to_dict(orient="records"))
    return out


def body(i: int) -> dict[str, Any]:
    return {"bars": SERIES[i], **({"ticker": "TRAINED"} if i % 3 == 0 else {})}


def assert_rows(response: requests.Response, rows: list[dict[str, Any]]) -> None:
    assert response.status_code == 200, response.text
    got = response.json()["forecast"]
    assert [set(g) for g in got] == [set(r) for r in rows]
    for g, r in zip(got, rows, strict=True):
        for k, v in r.items():
            assert (abs(g[k] - v) <= 1e-6 * max(1.0, abs(v))) if isinstance(v, float) else g[k] == v, (k, g[k], v)


def test_health_and_info(servers: Restartable, ckpt: Path) -> None:
    server = servers.get()
    assert server.get("/health").status_code == 200
    info = server.get("/info").json()["model"]
    assert (info["task"], info["checkpoint"], info["class"]) == ("kline", str(ckpt.resolve()), "KLineForecaster")
    assert (info["context_len"], info["horizon"], info["trained_tickers"]) == (32, 4, ["TRAINED"])


def test_concurrent_requests_are_batched_and_each_is_its_forecast(
    servers: Restartable, offline: list[list[dict[str, Any]]]
) -> None:
    server = servers.get()
    bodies = [body(i) for i in range(len(SERIES))]
    bodies[2] = {"bars": SERIES[2][:30]}
    bodies[7] = {"bars": [dict(b, Close=float("nan")) if j == 40 else b for j, b in enumerate(SERIES[7])]}
    # keys the reader ignores or checks, in another order: the same forecast
    bodies[5] = {"bars": [{"OpenInt": 0, **dict(reversed(b.items())), "amount": 1.0} for b in SERIES[5]]}
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        responses = list(
            pool.map(lambda b: server.post(data=json.dumps(b), headers={"Content-Type": "application/json"}), bodies)
        )
    sizes = []
    for i, response in enumerate(responses):
        if i == 2:
            assert response.status_code == 422 and "a forecast needs context_len (32)" in response.json()["error"]
        elif i == 7:
            assert response.status_code == 422
            assert response.json()["error"].startswith("bars: 1 missing values: row 41, column 'close'")
        else:
            assert_rows(response, offline[i])
            sizes.append(int(response.headers["X-Batch-Size"]))
    assert max(sizes) > 1, sizes


def test_bad_requests_get_4xx_and_one_line(servers: Restartable) -> None:
    server = servers.get()
    no_volume = [{k: v for k, v in b.items() if k != "Volume"} for b in SERIES[0]]
    infinite = json.dumps({"bars": SERIES[0]}).replace(str(SERIES[0][50]["High"]), "Infinity", 1)
    for kwargs, error in [
        ({"json": {"bars": no_volume}}, "bars: no volume column, and this model reads volume"),
        ({"data": infinite, "headers": {"Content-Type": "application/json"}}, "bars: 1 non-finite values: row 51"),
        ({"json": {"bars": [{"Date": "2020-01-01"}]}}, "bars: column(s) ['open', 'high', 'low', 'close'] not found"),
        ({"json": {"bars": {"Date": "2020-01-01"}}}, "bars: input should be a valid list"),
    ]:
        response = server.post(**kwargs)
        assert response.status_code == 422, response.text
        assert response.json()["error"].startswith(error), response.text


def test_sigterm_answers_the_requests_in_flight_then_exits_0(
    servers: Restartable, offline: list[list[dict[str, Any]]]
) -> None:
    server = servers.get()
    responses, status, output = in_flight_through_sigterm(server, [body(i) for i in range(4)])
    for i, response in enumerate(responses):
        assert_rows(response, offline[i])
    assert status == 0, output[-3000:]
    assert "Traceback" not in output and "leaked" not in output, output[-3000:]  # its queues released too
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "/health", timeout=5)
