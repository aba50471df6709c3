"""TaskAPI without a server: a bad request keeps its place through a batch and the others get their results, a
batch that fails as a whole is run again one request at a time, responses carry their batch size, the API key,
the form fields, and a body as the endpoint queues it (bytes) read as json.loads reads it, or refused with 400."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("litserve")

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict
from starlette.datastructures import FormData, Headers, UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse

from lightning_tf.serve.api import Batch, Served, Serving, TaskAPI, form_fields, json_body, worker_threads
from lightning_tf.serve.errors import BadRequest, Rejected


class NumberRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    x: int


class Doubler(TaskAPI):
    """A task of integers: 13 breaks the model (a bug), 7 is refused by it, any batch holding 99 fails as a whole."""

    task, model_class, request_model, response_model = "numbers", "Doubler", NumberRequest, NumberRequest
    runs: list[list[int]]

    def parse(self, body: dict[str, Any]) -> int:
        x = self.validate(body).x
        if x < 0:
            raise BadRequest(f"x must be 0 or more, got {x}")
        return x

    def run(self, inputs: list[int]) -> Sequence[int]:
        self.runs.append(list(inputs))
        if 13 in inputs or (99 in inputs and len(inputs) > 1):
            raise RuntimeError("broken")
        if 7 in inputs:
            raise BadRequest("seven is refused by the model", status=422)
        return [2 * x for x in inputs]

    def encode(self, output: int) -> dict[str, Any]:
        return {"y": output}


def api(max_batch_size: int = 8, key: str | None = None) -> Doubler:
    a = Doubler("unused.ckpt", Serving(max_batch_size=max_batch_size, api_key=key))
    a.runs = []
    return a


def answer(a: Doubler, output: Any) -> tuple[int, dict[str, Any], str | None]:
    response = a.encode_response(output)
    assert isinstance(response, JSONResponse)
    return response.status_code, json.loads(response.body), response.headers.get("x-batch-size")


def serve_batch(a: Doubler, bodies: list[Any]) -> list[tuple[int, dict[str, Any], str | None]]:
    """What LitServe's batched loop does: decode each, batch, predict, unbatch, encode each."""
    outputs = a.unbatch(a.predict(a.batch([a.decode_request(b) for b in bodies])))
    assert len(outputs) == len(bodies)
    return [answer(a, o) for o in outputs]


def test_bad_requests_keep_their_place_and_the_others_get_their_results() -> None:
    a = api()
    bodies = [{"x": 1}, {"x": -1}, [3], {"x": "2"}, {"y": 1}, {"x": 5}]
    assert serve_batch(a, bodies) == [
        (200, {"y": 2}, "2"),
        (422, {"error": "x must be 0 or more, got -1"}, None),
        (400, {"error": "the body must be a JSON object, got list"}, None),
        (422, {"error": "x: input should be a valid integer"}, None),
        (422, {"error": "x: field required; y: unknown field"}, None),
        (200, {"y": 10}, "2"),
    ]
    assert a.runs == [[1, 5]]  # the model saw the good requests only, once


def test_a_batch_that_fails_runs_again_one_request_at_a_time() -> None:
    a = api()
    results = serve_batch(a, [{"x": 1}, {"x": 13}, {"x": 7}, {"x": 2}])
    assert results == [
        (200, {"y": 2}, "1"),
        (500, {"error": "internal error while running the model (RuntimeError)"}, None),
        (422, {"error": "seven is refused by the model"}, None),
        (200, {"y": 4}, "1"),
    ]
    assert a.runs == [[1, 13, 7, 2], [1], [13], [7], [2]]
    b = api()  # a batch that fails only together: each request alone succeeds
    assert serve_batch(b, [{"x": 99}, {"x": 3}]) == [(200, {"y": 198}, "1"), (200, {"y": 6}, "1")]
    assert b.runs == [[99, 3], [99], [3]]


def test_the_unbatched_loop_passes_one_decoded_request() -> None:
    a = api(max_batch_size=1)
    assert answer(a, a.predict(a.decode_request({"x": 4}))) == (200, {"y": 8}, "1")
    assert answer(a, a.predict(a.decode_request({"x": -4}))) == (422, {"error": "x must be 0 or more, got -4"}, None)
    assert a.runs == [[4]]


def test_a_decoding_bug_fails_its_request_alone() -> None:
    class Broken(Doubler):
        def parse(self, body: dict[str, Any]) -> int:
            if body.get("x") == 0:
                raise KeyError("bug")
            return super().parse(body)

    a = Broken("unused.ckpt", Serving())
    a.runs = []
    assert serve_batch(a, [{"x": 0}, {"x": 1}]) == [
        (500, {"error": "internal error while reading the request (KeyError)"}, None),
        (200, {"y": 2}, "1"),
    ]


def test_an_encoding_failure_is_a_500_of_that_request_not_an_exception() -> None:
    class BadEncoder(Doubler):
        def encode(self, output: int) -> dict[str, Any]:
            return {"y": float("nan")}  # JSON cannot hold it

    a = BadEncoder("unused.ckpt", Serving())
    assert answer(a, Served(1, 1)) == (500, {"error": "internal error while writing the response (ValueError)"}, None)
    assert answer(a, Rejected(413, "too big")) == (413, {"error": "too big"}, None)


def test_batch_marks_the_inputs_that_run() -> None:
    batch = api().batch([1, Rejected(422, "no"), 3])
    assert batch == Batch([1, Rejected(422, "no"), 3], [0, 2])


def request(path: str, headers: dict[str, str] | None = None) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "POST", "path": path, "headers": raw, "query_string": b""})


def test_the_api_key_is_needed_everywhere_but_health() -> None:
    asyncio.run(api().authorize(request("/predict")))  # no key configured: nothing needed
    keyed = api(key="s3cret")
    asyncio.run(keyed.authorize(request("/predict", {"X-API-Key": "s3cret"})))
    asyncio.run(keyed.authorize(request("/health")))
    for headers in ({}, {"X-API-Key": "wrong"}, {"X-API-Key": ""}):
        for path in ("/predict", "/info", "/"):
            with pytest.raises(HTTPException, match="missing or wrong API key: send it in the X-API-Key header") as e:
                asyncio.run(keyed.authorize(request(path, headers)))
            assert e.value.status_code == 401


def test_form_fields() -> None:
    upload = UploadFile(file=__import__("io").BytesIO(b"\x89PNG..."), filename="a.png", headers=Headers({}))
    assert form_fields(FormData([("image", upload), ("top_k", "3")])) == {"image": b"\x89PNG...", "top_k": "3"}
    with pytest.raises(BadRequest, match=r"^top_k: given more than once$") as e:
        form_fields(FormData([("top_k", "3"), ("top_k", "4")]))
    assert e.value.status == 400
    with pytest.raises(BadRequest, match=r"looks like JSON sent as a form: send it with Content-Type: application/js"):
        form_fields(FormData([('{"text": "hi"}', "")]))
    # base64 padding cut the JSON at its '=': still JSON sent as a form (not a 422 echoing the body as a field)
    from urllib.parse import parse_qsl

    cut = parse_qsl('{"image": "iVBORw0KGgo="}', keep_blank_values=True)
    assert len(cut) == 1 and cut[0][1] == '"}'
    with pytest.raises(BadRequest, match=r"looks like JSON sent as a form"):
        form_fields(FormData(cut))


def test_worker_threads_share_the_cpus() -> None:
    import os

    cpus = len(os.sched_getaffinity(0))
    assert worker_threads(None, 1) == max(1, cpus - 1)
    assert worker_threads(None, 2) == max(1, (cpus - 1) // 2)
    assert worker_threads(None, cpus * 4) == 1
    assert worker_threads(3, 2) == 3
    with pytest.raises(ValueError, match="threads must be at least 1, got 0"):
        worker_threads(0, 1)


# ------------------------------------------------------------------------------------------ bodies as they come
@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "the body is not a JSON value this server takes: it nests arrays or"),
        (b'{"x": "\xff\xfe\xfa"}', "the body is not UTF-8 text: 'utf-8' codec can't decode byte 0xff in position"),
        (b'{"x": ', "the body is not valid JSON: Expecting value: line 1 column 7 (char 6)"),
        (
            b'{"x": ' + b"9" * 5000 + b"}",
            "the body is not a JSON value this server takes: Exceeds the limit (4300 digits)",
        ),
        (b"", "the body is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
        (b'{"x": 1} {}', "the body is not valid JSON: Extra data: line 1 column 10 (char 9)"),
    ],
)
def test_a_body_that_does_not_parse_is_400_saying_why(body: bytes, error: str) -> None:
    """The worker parses the body the endpoint queued as it came: what json.loads refuses is its request's 400,
    with json.loads' reason, and the rest of the batch is served."""
    with pytest.raises(BadRequest) as refused:
        json_body(body)
    assert refused.value.status == 400 and str(refused.value).startswith(error)
    assert serve_batch(api(), [body, b'{"x": 2}']) == [(400, {"error": str(refused.value)}, None), (200, {"y": 4}, "1")]


def _random_json(rng: random.Random, depth: int = 0) -> str:
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return rng.choice(["true", "false", "null", " null "])
    if kind == 1:  # integers of any size, floats in every notation and range
        return rng.choice(
            [
                str(rng.randrange(-(10**30), 10**30)),
                repr(rng.uniform(-1e9, 1e9)),
                f"{rng.randrange(1, 10**18)}e{rng.randint(-340, 310)}",
                f"0.{'0' * rng.randint(0, 330)}{rng.randrange(1, 10**17)}",
                "-0",
                "-0.0",
            ]
        )
    if kind in (2, 3):  # text: ASCII, accents, astral characters, escaped or not
        chars = [chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x800), rng.randrange(0x10000, 0x10400)]))]
        return json.dumps("".join(chars * rng.randrange(4)), ensure_ascii=rng.random() < 0.5)
    if kind in (4, 5):  # objects, keys repeated
        keys = [rng.choice(["a", "b", "é"]) for _ in range(rng.randrange(4))]
        return "{" + ", ".join(f"{json.dumps(k)}: {_random_json(rng, depth + 1)}" for k in keys) + "}"
    return "[" + ",".join(_random_json(rng, depth + 1) for _ in range(rng.randrange(4))) + "]"


def test_a_body_reads_as_json_loads_reads_it() -> None:
    """Every body gets the value ``json.loads`` gives it, type for type (integers beyond 64 bits stay integers,
    the last of a repeated key wins), including what the fast parser refuses: NaN and Infinity, a number too large
    for a float, a byte-order mark, UTF-16 text, a lone surrogate."""
    rng = random.Random(0)
    bodies = [_random_json(rng).encode() for _ in range(3000)]
    bodies += [
        b'{"x": NaN, "y": -Infinity}',
        b"[1e400]",
        b'\xef\xbb\xbf{"x": 1}',
        '{"x": "\u00e9"}'.encode("utf-16"),
        b'"\\ud800"',
        b"123456789012345678901234567890",
        b'{"x": 1, "x": 2}',
    ]
    for body in bodies:
        expected, got = json.loads(body), json_body(body)
        assert repr(got) == repr(expected) and json.dumps(got) == json.dumps(expected), body
