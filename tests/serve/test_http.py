"""The HTTP side without workers (FastAPI's test client on the LitServer's app): every error is ``{"error": ...}``
with its status, a body over the limit is 413 before it is read, the API key guards /info, the OpenAPI page
describes the task's request and response, LitServe's log keeps out what is not a fault. (A body that does not
parse is the worker's 400: tests/serve/test_api.py, and over HTTP tests/serve/test_hostile.py.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("litserve")

from fastapi import HTTPException, Request
from fastapi.testclient import TestClient
from starlette.responses import JSONResponse

from lightning_tf.serve.api import Serving
from lightning_tf.serve.http import ClientErrorFilter, DirectPredict, error_response
from lightning_tf.serve.server import Deployment, TaskOptions, make_api, make_server
from tests.helpers.serve import save_checkpoint, tiny_vit


@pytest.fixture(scope="module")
def vision_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(tiny_vit(), tmp_path_factory.mktemp("ckpt") / "vision.ckpt")


@pytest.fixture(scope="module")
def client(vision_ckpt: Path) -> TestClient:
    api, info = make_api(str(vision_ckpt), Serving(api_key="k3y"), TaskOptions())
    return TestClient(make_server(api, info, Deployment(accelerator="cpu")).app, raise_server_exceptions=False)


def test_error_response() -> None:
    response = error_response(413, "Payload\n too large")
    assert (response.status_code, json.loads(response.body)) == (413, {"error": "Payload too large"})


def test_info_needs_the_key_and_says_what_is_served(client: TestClient, vision_ckpt: Path) -> None:
    response = client.get("/info")
    assert (response.status_code, response.json()) == (
        401,
        {"error": "missing or wrong API key: send it in the X-API-Key header"},
    )
    info = client.get("/info", headers={"X-API-Key": "k3y"}).json()
    assert info["model"]["task"] == "vision" and info["model"]["checkpoint"] == str(vision_ckpt.resolve())
    assert info["model"]["class_names"] == ["cat", "dog", "bird"]
    assert info["model"]["batching"] == {"max_batch_size": 32, "batch_timeout": 0.0}
    assert info["model"]["max_payload_mb"] == 32.0
    assert info["server"]["devices"] == ["cpu"]


def test_every_error_is_one_line_of_json(client: TestClient) -> None:
    response = client.get("/nothing")
    assert (response.status_code, response.json()) == (404, {"error": "Not Found"})
    response = client.get("/predict", headers={"X-API-Key": "k3y"})
    assert (response.status_code, response.json()) == (405, {"error": "Method Not Allowed"})


def test_the_openapi_page_describes_the_request_and_the_errors(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    post = doc["paths"]["/predict"]["post"]
    content = post["requestBody"]["content"]
    assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/VisionRequest"}
    assert content["multipart/form-data"]["schema"]["properties"]["image"]["format"] == "binary"
    schemas = doc["components"]["schemas"]
    assert set(schemas["VisionRequest"]["properties"]) == {"image", "top_k"}
    assert schemas["VisionRequest"]["required"] == ["image"]
    assert set(schemas["VisionResponse"]["properties"]) == {"predictions"}
    assert set(post["responses"]) == {"200", "400", "401", "413", "422", "504"}
    assert post["responses"]["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"
    }
    assert client.get("/docs").status_code == 200


def test_the_log_keeps_out_what_is_not_a_fault() -> None:
    keep = ClientErrorFilter()

    def record(message: str, exc: BaseException | None) -> logging.LogRecord:
        info = (type(exc), exc, None) if exc is not None else None
        return logging.LogRecord("litserve.server", logging.ERROR, __file__, 1, message, (), info)

    assert not keep.filter(record("LitServer-0 (PID: 1): Already not alive.", None))
    assert not keep.filter(record("Monitoring worker crashed", BrokenPipeError(32, "Broken pipe")))
    assert keep.filter(record("Monitoring worker crashed", RuntimeError("a real problem")))
    assert keep.filter(record("Unhandled exception", RuntimeError("a real problem")))


@pytest.fixture(scope="module")
def small(vision_ckpt: Path) -> TestClient:
    """A server whose body limit is 0.01 MB (10485 bytes)."""
    api, info = make_api(str(vision_ckpt), Serving(), TaskOptions())
    server = make_server(api, info, Deployment(accelerator="cpu", max_payload_mb=0.01))
    return TestClient(server.app, raise_server_exceptions=False)


def test_a_body_over_the_limit_is_413_before_it_is_read(small: TestClient) -> None:
    big = json.dumps({"image": "x" * 20_000}).encode()
    too_large = {"error": "the body is larger than the server's limit of 0.01 MB (--max_payload_mb)"}
    response = small.post("/predict", content=big, headers={"Content-Type": "application/json"})
    assert (response.status_code, response.json()) == (413, too_large)

    def chunks():  # no Content-Length: sent chunked
        for i in range(0, len(big), 1000):
            yield big[i : i + 1000]

    response = small.post("/predict", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in response.request.headers
    assert (response.status_code, response.json()) == (413, too_large)


def test_the_direct_predict_answers_every_request_as_the_route_does(vision_ckpt: Path) -> None:
    """``POST /predict`` with a body that is not a form is answered by :class:`DirectPredict`, without FastAPI's
    route; a server without it answers through the route. The two answer each request alike (status, headers,
    body): the key refused, the worker's answer (a response, or a value), its errors, a form (the route's in
    both), another method. The worker is a stand-in: the endpoint's ``exchange``."""
    clients, payloads, direct = {}, {}, {}
    for name in ("direct", "route"):
        api, info = make_api(str(vision_ckpt), Serving(api_key="k3y"), TaskOptions())
        server = make_server(api, info, Deployment(accelerator="cpu"))
        if name == "route":
            server.app.user_middleware = [m for m in server.app.user_middleware if m.cls is not DirectPredict]
        received, authorized = payloads.setdefault(name, []), direct.setdefault(name, [])

        async def exchange(payload: Any, received: list = received) -> Any:
            received.append(payload if isinstance(payload, bytes) else sorted(payload))
            if payload == b"late":
                raise HTTPException(504, "Request timed out")
            if payload == b"bug":
                raise HTTPException(500, "internal error while answering the request")
            if payload == b"value":
                return {"predictions": [{"label": "cat", "score": 0.5}]}
            if not isinstance(payload, bytes):
                return {"fields": sorted(payload)}
            return JSONResponse({"echo": payload.decode()}, headers={"X-Batch-Size": "3"})

        original = api.authorize  # the route's dependency holds this one: only the direct path calls the spy

        async def spy(request: Request, original: Any = original, authorized: list = authorized) -> None:
            authorized.append(request.headers.get("content-type"))
            await original(request)

        api.spec.exchange, api.authorize = exchange, spy
        clients[name] = TestClient(server.app, raise_server_exceptions=False)
    key = {"X-API-Key": "k3y"}
    as_json = {"Content-Type": "application/json"}
    requests = [
        ("post", {"content": b"{}", "headers": as_json}),  # no key
        ("post", {"content": b"{}", "headers": {**as_json, "X-API-Key": "wrong"}}),
        ("post", {"content": b'{"image": "x"}', "headers": {**as_json, **key}}),
        ("post", {"content": b"late", "headers": {**as_json, **key}}),
        ("post", {"content": b"bug", "headers": {**as_json, **key}}),
        ("post", {"content": b"value", "headers": {**as_json, **key}}),
        ("post", {"content": b"not json at all", "headers": {"Content-Type": "text/plain", **key}}),
        ("post", {"data": {"top_k": "3"}, "headers": key}),  # url-encoded: a form
        ("post", {"files": {"image": ("a.png", b"png")}, "headers": key}),  # multipart: a form
        ("get", {"headers": key}),
    ]

    def answer(client: TestClient, method: str, kwargs: dict) -> tuple:
        response = getattr(client, method)("/predict", **kwargs)
        headers = {k: v for k, v in response.headers.items() if k not in ("date", "server")}
        return response.status_code, headers, response.content

    answers = {name: [answer(c, m, kw) for m, kw in requests] for name, c in clients.items()}
    assert answers["direct"] == answers["route"]
    statuses = [status for status, _, _ in answers["direct"]]
    assert statuses == [401, 401, 200, 504, 500, 200, 200, 200, 200, 405]
    assert answers["direct"][2][1]["x-batch-size"] == "3" and json.loads(answers["direct"][3][2]) == {
        "error": "Request timed out"
    }
    assert payloads["direct"] == payloads["route"] and len(payloads["direct"]) == 7
    # the key and every body that is not a form went the direct way; forms and GET to the route
    assert direct["route"] == [] and len(direct["direct"]) == 7 and "multipart" not in str(direct["direct"])
