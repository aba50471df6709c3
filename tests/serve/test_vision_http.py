"""A real ``lightning-tf serve`` of a tiny ViT checkpoint on 127.0.0.1: health and info, the API key (401),
JSON and multipart requests equal to ``classify``, concurrent requests batched and still equal, bad requests
beside good ones, 504 for a request that waited too long, and SIGTERM answering the requests in flight."""

from __future__ import annotations

import concurrent.futures
import io
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

pytest.importorskip("litserve")

from PIL import Image

from lightning_tf.export import load_module
from tests.helpers.serve import Restartable, b64, in_flight_through_sigterm, png_bytes, save_checkpoint, tiny_vit

# a real server per test module (a subprocess): the integration tier
pytestmark = pytest.mark.integration

KEY = "test-key"
IMAGES = [png_bytes(seed, (16 + 3 * seed, 20), "RGB" if seed % 2 else "L") for seed in range(24)]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(tiny_vit(), tmp_path_factory.mktemp("vision") / "vision.ckpt")


@pytest.fixture(scope="module")
def servers(ckpt: Path) -> Iterator[Restartable]:
    holder = Restartable(
        ckpt, "--max_batch_size", "8", "--batch_timeout", "0.05", "--timeout", "3", "--top_k", "2", key=KEY
    )
    try:
        yield holder
    finally:
        holder.stop()


@pytest.fixture(scope="module")
def offline(ckpt: Path) -> Any:
    return load_module(ckpt)


def expected(model: Any, image: bytes, top_k: int = 2) -> list[tuple[str, float]]:
    return model.classify([Image.open(io.BytesIO(image))], top_k=top_k)[0]


def assert_equal(response: requests.Response, pairs: list[tuple[str, float]]) -> None:
    assert response.status_code == 200, response.text
    got = response.json()["predictions"]
    assert [p["label"] for p in got] == [label for label, _ in pairs]
    assert all(abs(p["probability"] - q) <= 1e-6 for p, (_, q) in zip(got, pairs, strict=True))


def test_health_info_and_the_key(servers: Restartable, ckpt: Path) -> None:
    server = servers.get()
    assert requests.get(server.url + "/health", timeout=10).status_code == 200  # no key needed
    for headers in ({}, {"X-API-Key": "wrong"}):
        for response in (
            requests.get(server.url + "/info", headers=headers, timeout=10),
            requests.post(server.url + "/predict", json={"image": b64(IMAGES[0])}, headers=headers, timeout=10),
        ):
            assert (response.status_code, response.json()) == (
                401,
                {"error": "missing or wrong API key: send it in the X-API-Key header"},
            )
    info = server.get("/info").json()["model"]
    assert (info["task"], info["checkpoint"], info["class"]) == ("vision", str(ckpt.resolve()), "ViTClassifier")
    assert info["class_names"] == ["cat", "dog", "bird"] and info["image_size"] == 16 and info["top_k"] == 2
    assert server.get("/docs").status_code == 200
    doc = server.get("/openapi.json").json()
    assert doc["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/VisionRequest"
    }


def test_json_and_multipart_equal_classify(servers: Restartable, offline: Any) -> None:
    server = servers.get()
    assert_equal(server.post({"image": b64(IMAGES[1]), "top_k": 3}), expected(offline, IMAGES[1], 3))
    assert_equal(
        server.post(files={"image": ("a.png", IMAGES[2], "image/png")}, data={"top_k": "1"}),
        expected(offline, IMAGES[2], 1),
    )
    assert_equal(server.post({"image": b64(IMAGES[3])}), expected(offline, IMAGES[3]))  # the server's --top_k


def test_concurrent_requests_are_batched_and_equal_classify(servers: Restartable, offline: Any) -> None:
    server = servers.get()
    bodies = [{"image": b64(image)} for image in IMAGES]
    bad = {
        5: ({"image": "%%%"}, "image: not base64"),
        11: ({"image": b64(b"text")}, "image: not an image file"),
        17: ({"image": b64(IMAGES[0]), "top_k": 0}, "top_k: input should be greater than or equal to 1"),
    }
    for i, (body, _) in bad.items():
        bodies[i] = body
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        responses = list(pool.map(server.post, bodies))
    sizes = []
    for i, response in enumerate(responses):
        if i in bad:
            assert response.status_code == 422 and response.json()["error"].startswith(bad[i][1]), response.text
        else:
            assert_equal(response, expected(offline, IMAGES[i]))
            sizes.append(int(response.headers["X-Batch-Size"]))
    assert max(sizes) > 1, sizes  # some requests shared a batch
    assert max(sizes) <= 8


@pytest.mark.parametrize(
    ("kwargs", "status", "error"),
    [
        (
            {"data": '{"image": ', "headers": {"Content-Type": "application/json"}},
            400,
            "the body is not valid JSON: Expecting value: line 1 column 11 (char 10)",
        ),
        ({"data": "", "headers": {"Content-Type": "application/json"}}, 400, "the body is not valid JSON"),
        ({"json": [1, 2]}, 400, "the body must be a JSON object, got list"),
        (
            {"data": '{"image": "x"}', "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
            400,
            "the body looks like JSON sent as a form",
        ),  # curl -d without -H 'Content-Type: application/json'
        (
            {"data": "--x\r\nbroken", "headers": {"Content-Type": "multipart/form-data"}},
            400,
            "the form does not parse: Missing boundary in multipart.",
        ),
        ({"json": {"img": "x"}}, 422, "image: field required; img: unknown field"),
        ({"json": {"image": b64(b"\x89PNG\r\n\x1a\n broken")}}, 422, "image: "),
    ],
)
def test_bad_requests_get_4xx_and_one_line(
    servers: Restartable, kwargs: dict[str, Any], status: int, error: str
) -> None:
    response = servers.get().post(**kwargs)
    assert response.status_code == status, response.text
    assert response.json()["error"].startswith(error) and "\n" not in response.json()["error"]


def test_a_request_that_waited_too_long_gets_504_and_holds_up_nobody(servers: Restartable, offline: Any) -> None:
    server = servers.get()
    workers = server.workers()
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)  # the worker is busy elsewhere: the request waits in the queue
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            late = pool.submit(server.post, {"image": b64(IMAGES[4])})
            time.sleep(4.0)  # longer than --timeout 3
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
            response = late.result(timeout=60)
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
    assert (response.status_code, response.json()) == (504, {"error": "Request timed out"})
    assert_equal(server.post({"image": b64(IMAGES[4])}), expected(offline, IMAGES[4]))


def test_sigterm_answers_the_requests_in_flight_then_exits_0(servers: Restartable, offline: Any) -> None:
    server = servers.get()
    responses, status, output = in_flight_through_sigterm(server, [{"image": b64(image)} for image in IMAGES[:6]])
    for response, image in zip(responses, IMAGES[:6], strict=True):
        assert_equal(response, expected(offline, image))
    assert status == 0, output[-3000:]
    assert "SIGTERM: answering the requests in flight, then stopping" in output and "stopped" in output
    assert "Traceback" not in output and "leaked" not in output, output[-3000:]  # its queues released too
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "/health", timeout=5)
