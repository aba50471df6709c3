"""The standard library's private names that ``lightning_tf/training/private/python.py`` relies on still exist
and still mean what it assumes: the descriptor is the pipe a ``multiprocessing.Queue`` puts its items into, and
resizing it resizes what the queue's reader sees."""

from __future__ import annotations

import multiprocessing
import os
import sys

import pytest

from lightning_tf.training.private.python import OVERRIDES, queue_pipe


def test_queue_pipe_is_the_pipe_the_queue_writes_to() -> None:
    queue = multiprocessing.get_context("spawn").Queue()
    try:
        os.write(queue_pipe(queue), b"")  # a write end (the read end refuses a write)
        queue.put({"x": 1})
        assert queue.get(timeout=10) == {"x": 1}
        if sys.platform == "linux":
            import fcntl

            fcntl.fcntl(queue_pipe(queue), fcntl.F_SETPIPE_SZ, 2**18)
            assert fcntl.fcntl(queue._reader.fileno(), fcntl.F_GETPIPE_SZ) == 2**18  # the one pipe
    finally:
        queue.close()
        queue.join_thread()
    with pytest.raises(OSError):
        queue_pipe(queue)  # closed with the queue
    assert OVERRIDES == {}
