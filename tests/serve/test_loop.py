"""The worker loop's collection: the batch timeout runs from the first request, a full batch is cut at once,
requests already queued after the timeout still join, timed-out requests are set apart, and the stop value ends
the loop. Then the guard of what the loop relies on inside LitServe (lightning_tf/serve/loop.py lists it): a
LitServe release that changes one of those points fails here."""

from __future__ import annotations

import inspect
import json
import multiprocessing.queues
import pickle
import sys
import threading
import time
from queue import Queue
from typing import Any

import pytest

pytest.importorskip("litserve")

import litserve as ls  # noqa: E402
from fastapi import HTTPException  # noqa: E402
from litserve.callbacks import CallbackRunner  # noqa: E402
from litserve.loops import LitLoop  # noqa: E402
from litserve.utils import LitAPIStatus, LoopResponseType, PickleableHTTPException  # noqa: E402
from starlette.datastructures import FormData  # noqa: E402
from starlette.requests import Request  # noqa: E402

from lightning_tf.serve import loop as loop_module  # noqa: E402
from lightning_tf.serve.loop import (  # noqa: E402
    PIPE_BYTES,
    STOP,
    FirstRequestBatchLoop,
    PipeQueueServer,
    PipeTransport,
    PredictEndpoint,
    _http_error,
    collect_batch,
    pipe_queue,
    stop_workers,
)
from lightning_tf.training.private import litserve as litserve_private  # noqa: E402


def _item(uid: str, age: float = 0.0) -> tuple[int, str, float, dict]:
    return (0, uid, time.monotonic() - age, {"x": uid})


def test_the_timeout_runs_from_the_first_request_not_from_the_wait() -> None:
    queue: Queue = Queue()

    def late() -> None:  # the first request after the worker has waited longer than the batch timeout
        time.sleep(0.3)
        queue.put(_item("a"))
        time.sleep(0.05)
        queue.put(_item("b"))

    threading.Thread(target=late).start()
    payloads, timed_out = collect_batch(queue, max_batch_size=8, batch_timeout=0.2, request_timeout=None)
    assert [p[1] for p in payloads] == ["a", "b"] and timed_out == []


def test_a_first_request_that_waited_for_the_worker_leaves_no_wait_and_a_fresh_one_waits_its_remainder() -> None:
    """The batch timeout runs from the first request's arrival: one queued longer ago than the timeout (while the
    worker ran the previous batch) is run at once with those queued beside it; one queued 0.1 s ago waits the
    0.2 s left, and a request arriving meanwhile joins it."""
    queue: Queue = Queue()
    queue.put(_item("waited", age=1.0))
    queue.put(_item("beside", age=0.5))

    def later(uid: str) -> None:
        time.sleep(0.15)
        queue.put(_item(uid))

    threading.Thread(target=later, args=("too late",)).start()
    start = time.monotonic()
    payloads, _ = collect_batch(queue, max_batch_size=8, batch_timeout=0.3, request_timeout=None)
    assert [p[1] for p in payloads] == ["waited", "beside"] and time.monotonic() - start < 0.1
    assert [p[1] for p in collect_batch(queue, 8, 0.3, None)[0]] == ["too late"]  # the next batch
    queue.put(_item("fresh", age=0.1))
    threading.Thread(target=later, args=("joins",)).start()
    start = time.monotonic()
    payloads, _ = collect_batch(queue, max_batch_size=8, batch_timeout=0.3, request_timeout=None)
    waited = time.monotonic() - start
    assert [p[1] for p in payloads] == ["fresh", "joins"] and 0.15 <= waited < 0.3, waited


def test_a_full_batch_is_cut_at_once_and_the_rest_waits_for_the_next() -> None:
    queue: Queue = Queue()
    for uid in "abcde":
        queue.put(_item(uid))
    start = time.monotonic()
    payloads, _ = collect_batch(queue, max_batch_size=3, batch_timeout=5.0, request_timeout=None)
    assert [p[1] for p in payloads] == ["a", "b", "c"] and time.monotonic() - start < 1.0
    payloads, _ = collect_batch(queue, max_batch_size=3, batch_timeout=0.05, request_timeout=None)
    assert [p[1] for p in payloads] == ["d", "e"]


def test_requests_already_queued_join_after_the_timeout() -> None:
    queue: Queue = Queue()
    queue.put(_item("a"))
    for uid in "bcd":
        queue.put(_item(uid))
    payloads, _ = collect_batch(queue, max_batch_size=8, batch_timeout=0.0, request_timeout=None)
    assert [p[1] for p in payloads] == ["a", "b", "c", "d"]


def test_timed_out_requests_are_set_apart_and_each_taken_request_is_announced() -> None:
    queue: Queue = Queue()
    queue.put(_item("old", age=10.0))
    queue.put(_item("new"))
    seen: list[str] = []
    payloads, timed_out = collect_batch(queue, 8, 0.01, request_timeout=1.0, started=lambda q, uid: seen.append(uid))
    assert [p[1] for p in payloads] == ["new"] and timed_out == [(0, "old")] and seen == ["old", "new"]
    queue.put(_item("old", age=10.0))  # no --timeout (-1): nothing times out
    payloads, timed_out = collect_batch(queue, 8, 0.01, request_timeout=-1)
    assert [p[1] for p in payloads] == ["old"] and timed_out == []


def test_an_idle_wait_returns_empty_and_the_stop_value_ends_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_module, "IDLE_WAIT", 0.05)
    queue: Queue = Queue()
    assert collect_batch(queue, 8, 0.01, None) == ([], [])
    queue.put(_item("a"))
    queue.put(STOP)  # behind a request: the request's batch first, then the stop
    payloads, _ = collect_batch(queue, 8, 1.0, None)
    assert [p[1] for p in payloads] == ["a"]
    with pytest.raises(SystemExit) as stop:
        collect_batch(queue, 8, 1.0, None)
    assert stop.value.code == 0


# ---------------------------------------------------------------------------------- the guard of LitServe's inside
class Echo(ls.LitAPI):
    """A LitAPI without a model: a request's ``x`` doubled, batched by the project's loop."""

    def setup(self, device: str) -> None:
        pass

    def decode_request(self, request):  # noqa: ANN001, ANN201 (no annotation: LitServe passes the JSON body)
        return int(request["x"])

    def batch(self, inputs: list[int]) -> list[int]:
        return list(inputs)

    def predict(self, x: list[int]) -> list[int]:
        return [2 * v for v in x]

    def unbatch(self, output: list[int]) -> list[int]:
        return output

    def encode_response(self, output: int) -> dict[str, int]:
        return {"y": output}


class BodyEcho(Echo):
    """Echo behind :class:`PredictEndpoint`: it reads the body's bytes."""

    def decode_request(self, request):  # noqa: ANN001, ANN201
        assert isinstance(request, bytes), type(request)
        return int(json.loads(request)["x"])


class Transport:
    """LitServe's MessageTransport interface, recording what a loop sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, int]] = []

    def send(self, item: Any, consumer_id: int) -> None:
        self.sent.append((item, consumer_id))

    async def areceive(self, consumer_id: int, timeout: float | None = None) -> Any:  # pragma: no cover
        raise NotImplementedError


def test_litserve_runs_the_project_s_loop_which_answers_as_litserve_s_own() -> None:
    """LitServe's worker calls ``BatchedLoop.__call__``, which runs ``self.run_batched_loop(lit_api, request_queue,
    transport, callback_runner)``: the project's, which reads LitServe's queue items, answers each request in
    LitServe's answer format (a time-out 504) and leaves on the stop value (SystemExit(0)); an announcement of a
    taken request goes through ``LitLoop.put_response`` (LitServe sends none unless workers restart)."""
    assert list(inspect.signature(LitLoop.put_response).parameters) == [
        "self",
        "transport",
        "response_queue_id",
        "uid",
        "response_data",
        "status",
        "response_type",
    ]
    api = Echo(max_batch_size=4, batch_timeout=0.01, loop=FirstRequestBatchLoop())
    api.request_timeout = 5.0
    queue: Queue = Queue()
    queue.put((3, "old", time.monotonic() - 10.0, {"x": 0}))
    queue.put((1, "a", time.monotonic(), {"x": 2}))
    queue.put((2, "b", time.monotonic(), {"x": 5}))
    queue.put(STOP)
    transport = Transport()
    with pytest.raises(SystemExit) as stop:  # LitServe's entry point of a worker's loop
        api.loop(api, "cpu", 0, queue, transport, {}, CallbackRunner())
    assert stop.value.code == 0
    answers = {item[0]: (consumer, item[1][:3]) for item, consumer in transport.sent}
    assert answers["a"] == (1, ({"y": 4}, LitAPIStatus.OK, LoopResponseType.REGULAR))
    assert answers["b"] == (2, ({"y": 10}, LitAPIStatus.OK, LoopResponseType.REGULAR))
    consumer, (error, status, kind) = answers["old"]
    assert (consumer, status, kind, error.status_code) == (3, LitAPIStatus.ERROR, LoopResponseType.REGULAR, 504)


class Failing(Echo):
    """Echo whose predict raises what it is given."""

    def __init__(self, error: Exception, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    def predict(self, x: list[int]) -> list[int]:
        raise self.error


class Short(Echo):
    def unbatch(self, output: list[int]) -> list[int]:
        return output[:-1]


def test_a_hook_that_raises_answers_every_request_of_its_batch_as_litserve_does() -> None:
    """An HTTPException reaches each request of the batch as it is (its status); any other exception pickled, a
    500 for the HTTP server; a batch that answers fewer outputs than requests is a 500 for all of them."""
    payloads = [(0, "a", {"x": 1}), (1, "b", {"x": 2})]
    run = FirstRequestBatchLoop.run_batch
    answers = run(Failing(HTTPException(503, "busy"), max_batch_size=4), payloads)
    assert [(q, uid, e.status_code, e.detail, s) for q, uid, e, s in answers] == [
        (0, "a", 503, "busy", LitAPIStatus.ERROR),
        (1, "b", 503, "busy", LitAPIStatus.ERROR),
    ]
    answers = run(Failing(RuntimeError("bug"), max_batch_size=4), payloads)
    assert [(q, uid, s) for q, uid, _, s in answers] == [(0, "a", LitAPIStatus.ERROR), (1, "b", LitAPIStatus.ERROR)]
    assert all(_http_error(e).status_code == 500 for _, _, e, _ in answers)
    assert str(pickle.loads(answers[0][2])) == "bug"
    answers = run(Short(max_batch_size=4), payloads)
    assert {_http_error(e).status_code for _, _, e, _ in answers} == {500}
    assert _http_error(PickleableHTTPException.from_exception(HTTPException(504, "late"))).status_code == 504
    assert _http_error(b"not a pickle").status_code == 500


def test_over_pipes_the_answers_of_a_batch_go_to_each_http_server_in_one_message() -> None:
    """Through a :class:`PipeTransport` the loop sends each HTTP server the answers of a batch (a time-out
    included) as one message, once the batch is done; the HTTP server receives them one by one, in order."""
    import asyncio

    ctx = multiprocessing.get_context("spawn")
    transport = PipeTransport([ctx.Queue() for _ in range(3)])
    api = Echo(max_batch_size=4, batch_timeout=0.01, loop=FirstRequestBatchLoop())
    api.request_timeout = 5.0
    queue: Queue = Queue()
    queue.put((2, "old", time.monotonic() - 10.0, {"x": 0}))
    for consumer, uid, x in [(1, "a", 2), (0, "b", 5), (1, "c", 7)]:
        queue.put((consumer, uid, time.monotonic(), {"x": x}))
    queue.put(STOP)
    try:
        with pytest.raises(SystemExit):
            api.loop.run_batched_loop(api, queue, transport, CallbackRunner())
        messages = [q.get(timeout=10) for q in transport._queues]  # one message each
        assert [[uid for uid, _ in m] for m in messages] == [["b"], ["a", "c"], ["old"]]
        assert all(q.empty() for q in transport._queues)
        assert messages[1][1][1][:2] == ({"y": 14}, LitAPIStatus.OK)
        assert messages[2][0][1][1] == LitAPIStatus.ERROR and messages[2][0][1][0].status_code == 504
        transport._queues[1].put(messages[1])

        async def receive(n: int) -> list:
            return [await transport.areceive(consumer_id=1, timeout=10) for _ in range(n)]

        assert [uid for uid, _ in asyncio.run(receive(2))] == ["a", "c"]
    finally:
        loop_module._close_pipes(transport._queues)


@pytest.mark.integration
def test_a_running_litserver_queues_requests_as_the_loop_reads_them_and_its_workers_stop_on_the_stop_value() -> None:
    """A real LitServer (in this process, its worker spawned): a request reaches the project's loop through the
    project's endpoint, in LitServe's queue format, and is answered; ``inference_workers`` and ``litapi_request_queues`` are what
    :func:`~lightning_tf.serve.loop.stop_workers` stops, each worker leaving with status 0."""
    from fastapi.testclient import TestClient
    from litserve.utils import wrap_litserve_start

    api = BodyEcho(max_batch_size=4, batch_timeout=0.01, loop=FirstRequestBatchLoop(), spec=PredictEndpoint())
    server = PipeQueueServer(api, accelerator="cpu", timeout=10)
    with wrap_litserve_start(server) as running, TestClient(running.app) as client:
        # the request went to the worker as its body's bytes, through LitServe's registration of the endpoint, and
        # its answer came back through the pipes, not the manager's queues
        assert isinstance(running.litapi_request_queues["/predict"], multiprocessing.queues.Queue)
        assert isinstance(litserve_private.transport(running), PipeTransport)
        assert client.post("/predict", json={"x": 21}).json() == {"y": 42}
        workers = list(running.inference_workers)
        assert workers and set(running.litapi_request_queues) == {"/predict"}
        stop_workers(running, grace=30.0)
        assert running.inference_workers == [] and [w.exitcode for w in workers] == [0] * len(workers)
    server.close_queues()
    assert server.litapi_request_queues == {} and litserve_private.transport(server) is None


def test_litserve_makes_its_queues_where_the_pipe_server_replaces_them() -> None:
    """``LitServer._init_manager(num_api_servers)`` returns the manager after setting ``litapi_request_queues`` and
    ``_transport``; the pipe server's replacements carry a request to the workers and the answers back to each
    HTTP server (those already there in one delivery, in order, a None passed on as LitServe's transports do), and
    :meth:`PipeQueueServer.close_queues` closes them."""
    import asyncio

    from litserve.transport.base import MessageTransport

    assert list(inspect.signature(ls.LitServer._init_manager).parameters) == ["self", "num_api_servers"]
    assert list(inspect.signature(MessageTransport.areceive).parameters)[:2] == ["self", "timeout"]
    server = PipeQueueServer(Echo(max_batch_size=2, batch_timeout=0.01), accelerator="cpu", timeout=10)
    manager = server._init_manager(2)
    try:
        request_queue = server.litapi_request_queues["/predict"]
        assert isinstance(request_queue, multiprocessing.queues.Queue)
        request_queue.put((1, "uid", 0.0, {"x": 3}))
        assert request_queue.get(timeout=10) == (1, "uid", 0.0, {"x": 3})
        transport = litserve_private.transport(server)
        assert isinstance(transport, PipeTransport) and isinstance(transport, MessageTransport)
        assert transport.__reduce__() == (PipeTransport, (transport._queues,))  # what a spawned worker receives
        for k in range(5):
            transport.send((f"uid{k}", ({"y": k},)), consumer_id=1)
        transport.send(("other", ()), consumer_id=0)

        async def receive(n: int) -> list:
            return [await transport.areceive(consumer_id=1, timeout=10) for _ in range(n)]

        assert asyncio.run(receive(5)) == [(f"uid{k}", ({"y": k},)) for k in range(5)]
        assert asyncio.run(PipeTransport(transport._queues).areceive(consumer_id=1, timeout=0.2)) is None
        transport.close()
        assert asyncio.run(PipeTransport(transport._queues).areceive(consumer_id=0, timeout=10)) == ("other", ())
        queues = [request_queue, *transport._queues]
        server.close_queues()
        assert all(q._closed for q in queues)
    finally:
        manager.shutdown()


# ---------------------------------------------------------------------------------- the endpoint and the pipes
def _request(body: bytes, content_type: str = "application/json") -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:  # pragma: no cover - the body is read once
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-type", content_type.encode())]
    scope = {"type": "http", "method": "POST", "path": "/predict", "headers": headers, "app": None}  # in an app
    return Request(scope, receive)


def test_the_endpoint_queues_the_body_as_it_came_and_answers_what_the_worker_answers() -> None:
    """``POST /predict`` queues ``(response_queue_id, uid, time, body)`` with the body's bytes unparsed, each request
    under its own uid, and returns the worker's answer once the HTTP server's buffer holds it (LitServe's
    ``ResponseBufferItem``: ``response`` then its ``event``); a worker's error is its HTTP error; nothing is left
    in the buffer."""
    import asyncio

    endpoint = PredictEndpoint()
    assert endpoint.api_path == "/predict" and [(p, m) for p, _, m in endpoint.endpoints] == [("/predict", ["POST"])]
    endpoint.request_queue, endpoint.response_buffer, endpoint.response_queue_id = Queue(), {}, 3

    async def exchange(body: bytes, answer: tuple[Any, LitAPIStatus]) -> tuple[Any, tuple]:
        task = asyncio.ensure_future(endpoint.predict(_request(body)))
        while endpoint.request_queue.empty():
            await asyncio.sleep(0.001)
        item = endpoint.request_queue.get()
        waiting = endpoint.response_buffer[item[1]]
        waiting.response = answer
        waiting.event.set()
        try:
            return await task, item
        except HTTPException as err:
            return err, item

    async def run() -> None:
        before = time.monotonic()
        answer, item = await exchange(b'{"x": 2}', ({"y": 4}, LitAPIStatus.OK))
        assert answer == {"y": 4} and item[0] == 3 and item[3] == b'{"x": 2}' and before <= item[2] <= time.monotonic()
        late = PickleableHTTPException.from_exception(HTTPException(504, "Request timed out"))
        error, second = await exchange(b"{}", (late, LitAPIStatus.ERROR))
        assert isinstance(error, HTTPException) and error.status_code == 504 and second[1] != item[1]
        error, _ = await exchange(b"{}", (pickle.dumps(RuntimeError("bug")), LitAPIStatus.ERROR))
        assert isinstance(error, HTTPException) and error.status_code == 500

    asyncio.run(run())
    assert endpoint.response_buffer == {}


def test_a_form_goes_to_the_worker_as_its_fields_and_one_that_does_not_parse_is_400() -> None:
    import asyncio

    endpoint = PredictEndpoint()
    endpoint.request_queue, endpoint.response_buffer, endpoint.response_queue_id = Queue(), {}, 0

    async def run() -> None:
        with pytest.raises(HTTPException) as refused:
            await endpoint.predict(_request(b"--x\r\n", "multipart/form-data"))
        assert refused.value.status_code == 400 and refused.value.detail.startswith("the form does not parse: ")
        task = asyncio.ensure_future(endpoint.predict(_request(b"top_k=3", "application/x-www-form-urlencoded")))
        while endpoint.request_queue.empty():
            await asyncio.sleep(0.001)
        _, uid, _, form = endpoint.request_queue.get()
        assert isinstance(form, FormData) and dict(form) == {"top_k": "3"}
        endpoint.response_buffer[uid].response = ({"ok": True}, LitAPIStatus.OK)
        endpoint.response_buffer[uid].event.set()
        assert await task == {"ok": True}

    asyncio.run(run())


@pytest.mark.skipif(sys.platform != "linux", reason="pipe sizes are Linux's (F_SETPIPE_SZ)")
def test_a_batch_takes_every_request_queued_however_large() -> None:
    """The request pipe holds :data:`PIPE_BYTES`: sixteen requests of 40 KB queued by another process (its writing
    thread) are one batch. A pipe of the default 64 KiB holds one of them, and the batch would take one or two,
    the rest still in the sender's thread."""
    import fcntl

    queue = pipe_queue()
    try:
        assert fcntl.fcntl(queue._reader.fileno(), fcntl.F_GETPIPE_SZ) == PIPE_BYTES
        sender = multiprocessing.get_context("spawn").Process(target=_send_large, args=(queue, 16, 40_000))
        sender.start()
        sender.join(60)
        assert sender.exitcode == 0, "the sender's writing thread could not put its requests into the pipe"
        payloads, _ = collect_batch(queue, max_batch_size=32, batch_timeout=0.0, request_timeout=None)
        assert [p[1] for p in payloads] == [f"r{k}" for k in range(16)]
    finally:
        loop_module._close_pipes([queue])


def _send_large(queue: Any, n: int, size: int) -> None:
    for k in range(n):
        queue.put((0, f"r{k}", time.monotonic(), b"x" * size))
    queue.close()
    queue.join_thread()  # every request is in the pipe when the process ends
