"""The batched worker loop: LitServe's, with a batch collected the way ``--batch_timeout`` says.

LitServe 0.2's batched loop (``litserve.loops.base.collate_requests``) starts the batch timeout when the
worker starts waiting, not when the first request arrives, and polls its request queue every millisecond in
the meantime. Its request queue is a multiprocessing manager's, so each poll is a round trip to the manager
process: an idle worker keeps two processes busy, and under a closed loop of clients a batch is cut while
its requests are still on their way (the answers of the last batch are being written), so it runs half full.

:class:`FirstRequestBatchLoop` (passed to LitServe as the LitAPI's ``loop``, its documented extension point)
keeps LitServe's loop and changes only the collection: it blocks until a first request is there (no polling),
then takes requests until the batch holds ``max_batch_size`` or ``batch_timeout`` has passed since that first
request, and then still takes, without waiting, those already queued (up to ``max_batch_size``). A request that
waited longer than ``--timeout`` gets 504, as in LitServe's loop; the stop value ends the loop.
"""

from __future__ import annotations

import time
from queue import Empty, Queue
from typing import Any

from litserve import LitAPI
from litserve.loops.base import _SENTINEL_VALUE, _StopLoopError
from litserve.loops.simple_loops import BatchedLoop
from litserve.transport.base import MessageTransport
from litserve.utils import LitAPIStatus, LoopResponseType

__all__ = ["FirstRequestBatchLoop", "collect_batch"]

#: seconds a worker blocks on an empty queue before it looks again (LitServe's single loop waits as long)
IDLE_WAIT = 1.0


def collect_batch(
    request_queue: Queue,
    max_batch_size: int,
    batch_timeout: float,
    request_timeout: float | None,
    started: Any = None,
) -> tuple[list[tuple[Any, str, Any]], list[tuple[Any, str]]]:
    """One batch from ``request_queue``: ``(payloads, timed_out)``, each payload ``(response_queue_id, uid,
    request)``, each timed-out request ``(response_queue_id, uid)``; both empty when no request came within
    :data:`IDLE_WAIT` seconds. ``started(response_queue_id, uid)`` is called for each request taken. Raises
    ``_StopLoopError`` on LitServe's stop value."""
    payloads: list[tuple[Any, str, Any]] = []
    timed_out: list[tuple[Any, str]] = []
    try:
        item = request_queue.get(timeout=IDLE_WAIT)
    except Empty:
        return payloads, timed_out
    deadline = time.monotonic() + batch_timeout
    apply_timeout = request_timeout not in (None, -1, False)
    while True:
        if item == _SENTINEL_VALUE:
            raise _StopLoopError()
        response_queue_id, uid, timestamp, request = item
        if started is not None:
            started(response_queue_id, uid)
        if apply_timeout and time.monotonic() - timestamp > request_timeout:  # type: ignore[operator]
            timed_out.append((response_queue_id, uid))
        else:
            payloads.append((response_queue_id, uid, request))
        if len(payloads) >= max_batch_size:
            return payloads, timed_out
        remaining = deadline - time.monotonic()
        try:  # within the timeout wait for the next request; after it take only those already queued
            item = request_queue.get(timeout=remaining) if remaining > 0 else request_queue.get_nowait()
        except Empty:
            return payloads, timed_out


class FirstRequestBatchLoop(BatchedLoop):
    """LitServe's batched loop with :func:`collect_batch` as its batch collection (see the module)."""

    def get_batch_requests(
        self, lit_api: LitAPI, request_queue: Queue, transport: MessageTransport
    ) -> tuple[list[tuple[Any, str, Any]], list[tuple[Any, str]]]:
        def started(response_queue_id: Any, uid: str) -> None:
            # what LitServe's collection sends for each request it takes (nothing unless workers restart)
            self.put_response(transport, response_queue_id, uid, (), LitAPIStatus.START, LoopResponseType.REGULAR)

        return collect_batch(
            request_queue, lit_api.max_batch_size, lit_api.batch_timeout, lit_api.request_timeout, started
        )
