"""The batched worker loop's collection: the batch timeout runs from the first request, a full batch is cut at
once, requests already queued after the timeout still join, timed-out requests are set apart, and the stop
value ends the loop."""

from __future__ import annotations

import threading
import time
from queue import Queue

import pytest

pytest.importorskip("litserve")

from litserve.loops.base import _SENTINEL_VALUE, _StopLoopError

from lightning_tf.serve import loop as loop_module
from lightning_tf.serve.loop import collect_batch


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
    queue.put(_SENTINEL_VALUE)
    with pytest.raises(_StopLoopError):
        collect_batch(queue, 8, 1.0, None)
