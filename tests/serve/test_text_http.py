"""A real ``lightning-tf serve`` of a tiny translation checkpoint on 127.0.0.1: health and info, concurrent
requests batched and each equal to ``translate([text])`` with the server's beam size, bad requests beside good
ones, and SIGTERM answering the requests in flight."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

pytest.importorskip("litserve")

from lightning_tf.export import load_module
from tests.helpers.serve import Restartable, in_flight_through_sigterm, save_checkpoint, tiny_text
from tests.helpers.text import word_sentences

# a real server per test module (a subprocess): the integration tier
pytestmark = pytest.mark.integration

SENTENCES = word_sentences(20, seed=3)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(tiny_text(max_len=24), tmp_path_factory.mktemp("text") / "text.ckpt")


@pytest.fixture(scope="module")
def servers(ckpt: Path) -> Iterator[Restartable]:
    holder = Restartable(ckpt, "--max_batch_size", "8", "--batch_timeout", "0.05", "--beam_size", "3")
    try:
        yield holder
    finally:
        holder.stop()


@pytest.fixture(scope="module")
def offline(ckpt: Path) -> dict[str, str]:
    model = load_module(ckpt)
    return {s: model.translate([s], beam_size=3)[0] for s in SENTENCES}


def test_health_and_info(servers: Restartable, ckpt: Path) -> None:
    server = servers.get()
    assert server.get("/health").status_code == 200
    info = server.get("/info").json()["model"]
    assert (info["task"], info["checkpoint"], info["class"]) == ("text", str(ckpt.resolve()), "Seq2SeqTransformer")
    assert info["languages"] == {"source": "en", "target": "de"}
    assert (info["max_len"], info["beam_size"]) == (24, 3)


def test_concurrent_requests_are_batched_and_each_is_translate_alone(
    servers: Restartable, offline: dict[str, str]
) -> None:
    server = servers.get()
    bodies: list[Any] = [{"text": s} for s in SENTENCES]
    bodies[4], bodies[9] = {"text": ""}, {"txt": "a cat."}
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        responses = list(pool.map(server.post, bodies))
    sizes = []
    for i, (sentence, response) in enumerate(zip(SENTENCES, responses, strict=True)):
        if i == 4:
            assert (response.status_code, response.json()) == (422, {"error": "text is empty"})
        elif i == 9:
            assert (response.status_code, response.json()) == (
                422,
                {"error": "text: field required; txt: unknown field"},
            )
        else:
            assert (response.status_code, response.json()) == (200, {"translation": offline[sentence]})
            sizes.append(int(response.headers["X-Batch-Size"]))
    assert max(sizes) > 1, sizes
    alone = server.post({"text": SENTENCES[0]})
    assert (alone.json(), alone.headers["X-Batch-Size"]) == ({"translation": offline[SENTENCES[0]]}, "1")


@pytest.mark.parametrize(
    ("kwargs", "status", "error"),
    [
        ({"data": '{"text": "a', "headers": {"Content-Type": "application/json"}}, 400, "the body is not valid JSON"),
        (
            {"data": b'{"text": "\xff"}', "headers": {"Content-Type": "application/json"}},
            400,
            "the body is not UTF-8 text: 'utf-8' codec can't decode byte 0xff in position 10",
        ),
        ({"json": {"text": 3}}, 422, "text: input should be a valid string"),
        ({"json": {"text": "dog " * 40}}, 422, "text has "),
        ({"json": "a cat."}, 400, "the body must be a JSON object, got str"),
    ],
)
def test_bad_requests_get_4xx_and_one_line(
    servers: Restartable, kwargs: dict[str, Any], status: int, error: str
) -> None:
    response = servers.get().post(**kwargs)
    assert response.status_code == status, response.text
    assert response.json()["error"].startswith(error), response.text


def test_sigterm_answers_the_requests_in_flight_then_exits_0(servers: Restartable, offline: dict[str, str]) -> None:
    server = servers.get()
    responses, status, output = in_flight_through_sigterm(server, [{"text": s} for s in SENTENCES[:5]])
    assert [(r.status_code, r.json()) for r in responses] == [(200, {"translation": offline[s]}) for s in SENTENCES[:5]]
    assert status == 0, output[-3000:]
    assert "Traceback" not in output and "leaked" not in output, output[-3000:]  # its queues released too
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "/health", timeout=5)
