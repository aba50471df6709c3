"""The plumbing between the HTTP servers and the workers: ``POST /predict``, the worker loop with a batch
collected the way ``--batch_timeout`` says, and the queues between them as pipes. It relies on how LitServe works
inside (listed below; ``tests/serve/test_loop.py`` checks each point, so a LitServe release that changes one fails
there, not in production); the private names among them are in LitServe's register,
:mod:`lightning_tf.training.private.litserve`.

The endpoint. LitServe's own ``/predict`` parses a JSON body in the HTTP server (``await request.json()``), names
the request with a ``uuid4`` and pickles the parsed value for the worker: work done in the one process every
request crosses. :class:`PredictEndpoint` is a ``LitSpec`` (LitServe's way for an API to bring its own endpoint,
registered with the API's authorisation) that queues the body as it came (bytes; a form as its fields) under a
counter: the worker parses it (:meth:`TaskAPI.decode_request <lightning_tf.serve.api.TaskAPI.decode_request>`), in
the batch's process. Its :meth:`~PredictEndpoint.exchange` (queue a body, wait for the answer) is also what
:class:`~lightning_tf.serve.http.DirectPredict` calls, which answers a JSON body before FastAPI's routing.

The loop. LitServe's batched loop starts the batch timeout when the worker starts waiting, not when the first
request arrives, and polls its request queue meanwhile: an idle worker keeps the queue's process busy, and under a
closed loop of clients a batch is cut while its requests are still on their way, so it runs part full. Its public
API (``LitAPI(max_batch_size=, batch_timeout=)``) has no way to say "from the first request"; its documented
extension point is a loop (``LitAPI(loop=...)``). :class:`FirstRequestBatchLoop` is the public
``litserve.loops.BatchedLoop`` with its batches collected by :func:`collect_batch`: block until a first request is
there (no polling), take requests until the batch holds ``max_batch_size`` or ``batch_timeout`` has passed since
that first request arrived (was queued by the HTTP server), then still take, without waiting, those already queued
(up to ``max_batch_size``). So no request waits longer than ``batch_timeout`` for its batch to fill, and a worker
that finds requests queued while it ran the previous batch runs them at once, instead of idling while more come. A
request that waited longer than ``--timeout`` is answered 504. Its cycle is LitServe's (``decode_request`` per
request, ``batch``, ``predict``, ``unbatch``, ``encode_response`` per request; an exception answers the whole
batch) without the ``inspect.signature`` LitServe's loop takes of each hook at each call, and the answers of a
batch go to each HTTP server as one message. It serves unbatched servers too (``max_batch_size`` 1), so that every
worker reads the same stop value, :data:`STOP`.

The pipes. LitServe's request queue (HTTP server -> workers) and answer queues (worker -> each HTTP server) are a
multiprocessing manager's, whatever ``fast_queue`` says (Lightning-AI/LitServe#751): every put and get is a round
trip to the manager, a third process that does work of its own for each request. :class:`PipeQueueServer` keeps
LitServe's manager (the workers' status, the shutdown event) and gives the request queue as a
``multiprocessing.Queue`` (a pipe between the processes, written by a thread of the sender) and the answers to a
:class:`PipeTransport` (LitServe's ``MessageTransport`` interface, one such pipe per HTTP server, read by a thread
of the HTTP server that wakes its event loop once for all the answers already there). Each pipe holds up to
:data:`PIPE_BYTES` where the system allows it (Linux: ``F_SETPIPE_SZ``): a pipe of the default 64 KiB holds a few
K-line requests, so a worker would take batches of a few while the rest waited in the HTTP server's writing
thread.

What it relies on beyond LitServe's public names (``litserve.loops.BatchedLoop``, ``LitLoop.put_response``,
``litserve.specs.LitSpec``, ``litserve.utils.LitAPIStatus``, ``LoopResponseType`` and ``ResponseBufferItem``):

* a request-queue item is ``(response_queue_id, uid, time.monotonic() when queued, request)`` (the item of
  LitServe's own loop example, ``litserve.loops.base._BaseLoop``), stamped in the HTTP server's process on the
  clock the worker reads (``time.monotonic()`` is system-wide on Linux and macOS; LitServe's request timeout
  compares the two clocks as well); an answer is ``(uid, (data, status, response_type, worker_id))``;
* ``BatchedLoop.__call__`` runs ``self.run_batched_loop(lit_api, request_queue, transport, callback_runner)``;
* a ``LitSpec``'s ``setup(server)`` gives it the request queue and the answer buffer (``response_buffer``: uid
  -> ``ResponseBufferItem``, whose ``event`` the HTTP server sets once ``response`` holds ``(data, status)``)
  before the workers are spawned, and ``response_queue_id`` is set on it before each HTTP server is forked;
* ``LitServer._init_manager(num_api_servers)`` makes the manager, the request queue of each API in
  ``litapi_request_queues`` and the answer transport, before the workers are spawned (each gets its request queue
  and the transport as arguments) and the HTTP servers forked (they read both from the server); an HTTP server
  reads its answers with ``await transport.areceive(consumer_id)`` in one task for as long as it runs, and skips
  a None;
* a ``LitServer`` that runs holds its workers' processes in ``inference_workers`` and the request queue of each
  API in ``litapi_request_queues`` (:func:`stop_workers`, for the shutdown that answers the requests in flight).

A worker leaves its loop on :data:`STOP` (ours: no LitServe loop reads it) by ``SystemExit(0)``: the process
ends as it does when LitServe's own loop returns.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing as mp
import multiprocessing.queues
import pickle
import sys
import threading
import time
from queue import Empty, Queue
from typing import Any

from fastapi import HTTPException, Request
from litserve import LitAPI, LitServer
from litserve.loops import BatchedLoop
from litserve.specs.base import LitSpec
from litserve.transport.base import MessageTransport
from litserve.utils import LitAPIStatus, LoopResponseType, PickleableHTTPException, ResponseBufferItem
from starlette.exceptions import HTTPException as StarletteHTTPException

from lightning_tf.training.private import litserve as private
from lightning_tf.training.private.python import queue_pipe

__all__ = [
    "PIPE_BYTES",
    "STOP",
    "FirstRequestBatchLoop",
    "PipeQueueServer",
    "PipeTransport",
    "PredictEndpoint",
    "collect_batch",
    "is_form",
    "pipe_queue",
    "stop_workers",
]

log = logging.getLogger(__name__)

#: seconds a worker blocks on an empty queue before it looks again (LitServe's single loop waits as long)
IDLE_WAIT = 1.0

#: the stop value a worker leaves its loop on (put on its request queue by :func:`stop_workers`)
STOP = "lightning-tf: stop"

#: the bytes each pipe holds where the system lets a process say (Linux's default limit for a user: 1 MiB), so that a
#: batch's worth of requests fits in it
PIPE_BYTES = 2**20

#: an answer on its way to an HTTP server: (response_queue_id, uid, data, status)
Answer = tuple[Any, Any, Any, LitAPIStatus]


def collect_batch(
    request_queue: Queue,
    max_batch_size: int,
    batch_timeout: float,
    request_timeout: float | None,
    started: Any = None,
) -> tuple[list[tuple[Any, str, Any]], list[tuple[Any, str]]]:
    """One batch from ``request_queue``: ``(payloads, timed_out)``, each payload ``(response_queue_id, uid,
    request)``, each timed-out request ``(response_queue_id, uid)``; both empty when no request came within
    :data:`IDLE_WAIT` seconds. The batch fills until ``max_batch_size`` requests or ``batch_timeout`` seconds after
    its first request was queued (its time stamp), then takes those already queued without waiting.
    ``started(response_queue_id, uid)`` is called for each request taken. Raises
    ``SystemExit(0)`` on :data:`STOP`; a batch that has requests when it comes is returned, and the stop value
    is queued again for the next collection."""
    payloads: list[tuple[Any, str, Any]] = []
    timed_out: list[tuple[Any, str]] = []
    try:
        item = request_queue.get(timeout=IDLE_WAIT)
    except Empty:
        return payloads, timed_out
    deadline: float | None = None
    apply_timeout = request_timeout not in (None, -1, False)
    while True:
        if isinstance(item, str) and item == STOP:
            if payloads or timed_out:  # this batch is answered first; the next collection stops
                request_queue.put(item)
                return payloads, timed_out
            raise SystemExit(0)
        response_queue_id, uid, timestamp, request = item
        if deadline is None:  # the batch waits to fill until batch_timeout after its first request arrived
            deadline = timestamp + batch_timeout
        if started is not None:
            started(response_queue_id, uid)
        if apply_timeout and time.monotonic() - timestamp > request_timeout:  # type: ignore[operator]
            timed_out.append((response_queue_id, uid))
        else:
            payloads.append((response_queue_id, uid, request))
        if len(payloads) >= max_batch_size:
            return payloads, timed_out
        remaining = (deadline or 0.0) - time.monotonic()
        try:  # within the timeout wait for the next request; after it take only those already queued
            item = request_queue.get(timeout=remaining) if remaining > 0 else request_queue.get_nowait()
        except Empty:
            return payloads, timed_out


class FirstRequestBatchLoop(BatchedLoop):
    """LitServe's batched loop with its batches collected by :func:`collect_batch` and its cycle run by
    :meth:`run_batch` (see the module); the answers of a batch to each HTTP server go as one message over a
    :class:`PipeTransport` (one by one over another transport)."""

    def get_batch_requests(
        self, lit_api: LitAPI, request_queue: Queue, transport: Any
    ) -> tuple[list[tuple[Any, str, Any]], list[tuple[Any, str]]]:
        def started(response_queue_id: Any, uid: str) -> None:
            # what LitServe's collection sends for each request it takes (nothing unless workers restart)
            self.put_response(transport, response_queue_id, uid, (), LitAPIStatus.START, LoopResponseType.REGULAR)

        return collect_batch(
            request_queue, lit_api.max_batch_size, lit_api.batch_timeout, lit_api.request_timeout, started
        )

    def run_batched_loop(
        self,
        lit_api: LitAPI,
        request_queue: Queue,
        transport: MessageTransport,
        callback_runner: Any = None,
        lit_spec: Any = None,
    ) -> None:
        """Collect a batch, run it, send its answers and those of the requests that waited too long, until
        :data:`STOP`. (LitServe's callbacks are not called: the project's servers have none.)"""
        while True:
            payloads, timed_out = self.get_batch_requests(lit_api, request_queue, transport)
            answers: list[Answer] = []
            if timed_out:
                log.warning(
                    "%d request(s) waited longer than the timeout (%s s) for a worker: answered 504",
                    len(timed_out),
                    lit_api.request_timeout,
                )
                late = HTTPException(504, "Request timed out")
                answers += [(response_queue_id, uid, late, LitAPIStatus.ERROR) for response_queue_id, uid in timed_out]
            if payloads:
                answers += self.run_batch(lit_api, payloads)
            self.send(transport, answers)

    @staticmethod
    def run_batch(lit_api: LitAPI, payloads: list[tuple[Any, Any, Any]]) -> list[Answer]:
        """The answers of one batch: each request's encoded output, or, when a hook raises, its error for every
        request of the batch (an HTTPException as it is, another one pickled), as LitServe's loop answers."""
        ids = [(response_queue_id, uid) for response_queue_id, uid, _ in payloads]
        try:
            inputs = [lit_api.decode_request(request) for _, _, request in payloads]
            outputs = lit_api.unbatch(lit_api.predict(lit_api.batch(inputs)))
            if len(outputs) != len(inputs):
                raise HTTPException(500, f"the API answered {len(outputs)} outputs for {len(inputs)} requests")
            return [
                (response_queue_id, uid, lit_api.encode_response(output), LitAPIStatus.OK)
                for (response_queue_id, uid), output in zip(ids, outputs, strict=True)
            ]
        except HTTPException as err:
            error: Any = PickleableHTTPException.from_exception(err)
        except Exception as err:
            log.exception("a batch of %d request(s) failed", len(ids))
            error = pickle.dumps(err)
        return [(response_queue_id, uid, error, LitAPIStatus.ERROR) for response_queue_id, uid in ids]

    def send(self, transport: MessageTransport, answers: list[Answer]) -> None:
        """Send ``answers`` in LitServe's answer format; over a :class:`PipeTransport` those to each HTTP server as
        one message."""
        by_server: dict[Any, list[Any]] = {}
        for response_queue_id, uid, data, status in answers:
            item = (uid, (data, status, LoopResponseType.REGULAR, self.worker_id))
            by_server.setdefault(response_queue_id, []).append(item)
        for response_queue_id, items in by_server.items():
            if isinstance(transport, PipeTransport):
                transport.send_all(items, response_queue_id)
            else:
                for item in items:
                    transport.send(item, consumer_id=response_queue_id)


def stop_workers(server: Any, grace: float = 2.0) -> None:
    """Stop the inference workers of a running ``litserve.LitServer`` after the requests already queued: each
    gets :data:`STOP` behind them. A worker still alive ``grace`` seconds after it is killed (what it spends
    that long on is the interpreter's teardown). The server's monitor is told first that it has no workers left,
    so that it does not take their exit for a crash and start new ones."""
    workers, server.inference_workers = list(server.inference_workers), []
    for queue in server.litapi_request_queues.values():
        for _ in workers:
            queue.put(STOP)
    for w in workers:
        w.join(grace)
        if w.is_alive():
            w.kill()
            w.join()


class PipeQueueServer(LitServer):
    """A ``litserve.LitServer`` whose request queue and answer queues are pipes (``multiprocessing.Queue``)
    instead of a manager's queues (see the module): each request crosses from the HTTP server to the worker and
    back without a round trip through the manager process. The queues are closed, and their semaphores released,
    when :meth:`run` returns."""

    def _init_manager(self, num_api_servers: int) -> Any:
        manager = super()._init_manager(num_api_servers)
        for path in self.litapi_request_queues:
            self.litapi_request_queues[path] = pipe_queue()
        private.set_transport(self, PipeTransport([pipe_queue() for _ in range(num_api_servers)]))
        return manager

    def run(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().run(*args, **kwargs)
        finally:
            self.close_queues()

    def close_queues(self) -> None:
        """Close the pipes (no process reads them any more) and release their semaphores now, so that a process
        that ends without the interpreter's teardown leaves none behind."""
        answers = private.transport(self)
        pipes = answers._queues if isinstance(answers, PipeTransport) else []
        _close_pipes([*self.litapi_request_queues.values(), *pipes])
        self.litapi_request_queues.clear()  # in place: the copies of the server LitServe gave the specs share it
        self.litapi_request_queues = {}
        private.set_transport(self, None)
        for lit_api in self.litapi_connector:
            if isinstance(lit_api.spec, PredictEndpoint):  # its hold on the request queue
                lit_api.spec.request_queue = lit_api.spec.data_streamer = None
        gc.collect()  # a queue's semaphores are unlinked when the last reference to it goes


def pipe_queue(size: int = PIPE_BYTES) -> Any:
    """A ``multiprocessing.Queue`` (spawn context: the workers are spawned, the HTTP servers forked, both can hold
    it) whose pipe holds ``size`` bytes where the system lets a process say (Linux; elsewhere, or above the
    system's limit, the pipe keeps its default)."""
    queue = mp.get_context("spawn").Queue()
    if sys.platform == "linux":
        import fcntl

        try:
            fcntl.fcntl(queue_pipe(queue), fcntl.F_SETPIPE_SZ, size)
        except OSError:  # above /proc/sys/fs/pipe-max-size for this user: the default
            log.debug("a pipe keeps its default size (%d bytes refused)", size)
    return queue


def _close_pipes(queues: list[Any]) -> None:
    """Close each ``multiprocessing.Queue`` of ``queues`` and wait for its writing thread, which holds two of its
    semaphores until it ends (this process writes nothing into them but stop values: the thread ends at once)."""
    for queue in queues:
        if isinstance(queue, mp.queues.Queue):
            queue.close()
            queue.join_thread()


class PipeTransport(MessageTransport):
    """The answers of the workers to each HTTP server (its ``consumer_id``), one pipe (``multiprocessing.Queue``)
    each. A worker sends an answer with a ``put``. In an HTTP server a thread of its own reads its pipe and hands
    what it read to the event loop, everything already there at once (a batch's answers in one wake-up of the
    loop): LitServe's ``MPQueueTransport`` sends every ``get`` to a thread of the loop's executor, a thread hop
    per answer."""

    def __init__(self, queues: list[Any]) -> None:
        self._queues = queues
        self._inbox: asyncio.Queue | None = None

    def send(self, item: Any, consumer_id: int) -> None:
        self._queues[consumer_id].put(item)

    def send_all(self, items: list[Any], consumer_id: int) -> None:
        """Send ``items`` in one message (received one by one, in order)."""
        self._queues[consumer_id].put(items)

    async def areceive(self, consumer_id: int, timeout: float | None = None) -> Any:
        if self._inbox is None:  # the first call in this HTTP server: start reading its pipe
            self._inbox = asyncio.Queue()
            loop = asyncio.get_running_loop()
            reader = threading.Thread(
                target=_read_pipe, args=(self._queues[consumer_id], loop, self._inbox), name="lightning-tf-answers"
            )
            reader.daemon = True
            reader.start()
        if timeout is None:
            return await self._inbox.get()
        try:
            return await asyncio.wait_for(self._inbox.get(), timeout)
        except TimeoutError:
            return None

    def close(self, send_sentinel: bool = True) -> None:
        if send_sentinel:  # what LitServe's transports send: a None, which the HTTP servers skip
            for queue in self._queues:
                queue.put(None)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PipeTransport, (self._queues,))


def _read_pipe(queue: Any, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue) -> None:
    """Move the answers of ``queue`` into ``inbox`` on ``loop``, each time all those already there, until the pipe
    or the loop closes."""
    while True:
        try:
            items = [queue.get()]
            while True:
                try:
                    items.append(queue.get_nowait())
                except Empty:
                    break
        except (EOFError, OSError):  # the pipe is closed: the server is stopping
            return
        try:
            loop.call_soon_threadsafe(_deliver, inbox, items)
        except RuntimeError:  # the loop is closed: the HTTP server is stopping
            return


def _deliver(inbox: asyncio.Queue, messages: list[Any]) -> None:
    for message in messages:
        if isinstance(message, list):  # several answers in one message (PipeTransport.send_all)
            for item in message:
                inbox.put_nowait(item)
        else:
            inbox.put_nowait(message)


class PredictEndpoint(LitSpec):
    """``POST /predict`` of an HTTP server: the request's body goes to a worker as it came (bytes; a form as its
    fields), named by a counter, and the worker's answer is the response (see the module). (LitServe's request
    callbacks are not called: the project's servers have none.)"""

    def __init__(self, path: str = "/predict") -> None:
        super().__init__()
        self.api_path = path
        self._uids = 0
        self.add_endpoint(path, self.predict, ["POST"])

    async def predict(self, request: Request) -> Any:
        """Queue the request for a worker and answer what it answers (a worker's error as its HTTP error)."""
        if is_form(request.headers.get("content-type", "")):
            try:
                payload: Any = await request.form()
            except StarletteHTTPException as err:  # starlette's 400 for a form that does not parse
                raise HTTPException(err.status_code, f"the form does not parse: {err.detail}") from None
        else:
            payload = await request.body()
        return await self.exchange(payload)

    async def exchange(self, payload: Any) -> Any:
        """Queue ``payload`` (a body's bytes, a form's fields) for a worker and return its answer; a worker's error
        is raised as its HTTP error (an ``HTTPException``)."""
        self._uids += 1  # one event loop per HTTP server: its requests' names never meet
        uid = self._uids
        waiting = ResponseBufferItem(event=asyncio.Event())
        self.response_buffer[uid] = waiting
        try:
            self.request_queue.put((self.response_queue_id, uid, time.monotonic(), payload))
            await waiting.event.wait()
        finally:
            self.response_buffer.pop(uid, None)
        data, status = waiting.response
        if status == LitAPIStatus.ERROR:
            raise _http_error(data)
        return data


def is_form(content_type: str) -> bool:
    """Whether a request of ``content_type`` holds a form (multipart or url-encoded): its fields go to the worker,
    parsed in the HTTP server; any other body goes as its bytes."""
    return content_type == "application/x-www-form-urlencoded" or content_type.startswith("multipart/form-data")


def _http_error(data: Any) -> HTTPException:
    """The HTTP error of a worker's error answer: its HTTPException (a time-out's 504; pickled or not), else 500."""
    if isinstance(data, bytes):
        try:
            data = pickle.loads(data)
        except Exception:  # noqa: BLE001 - an exception this process cannot rebuild: a 500 all the same
            data = None
    if isinstance(data, HTTPException):
        return HTTPException(data.status_code, data.detail)
    return HTTPException(500, "internal error while answering the request")
