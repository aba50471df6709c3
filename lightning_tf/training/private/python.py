"""The standard library's private names the package relies on, and why; ``tests/training/private/test_python.py``
fails on a Python release that changes one of them (Python itself has no upper bound: the tests run on each
Python the package is installed with in CI).

* :func:`queue_pipe`: the pipe under a ``multiprocessing.Queue``, which the serving queues enlarge (Linux's
  ``F_SETPIPE_SZ``) so that a batch of large requests fits in it; the queue keeps its pipe's ends in
  ``_reader`` and ``_writer`` and has no public way to reach or size them.
"""

from __future__ import annotations

import multiprocessing.queues

__all__ = ["OVERRIDES", "queue_pipe"]

#: the standard library's private methods that classes of the package override -> those classes
OVERRIDES: dict[str, tuple[str, ...]] = {}


def queue_pipe(queue: multiprocessing.queues.Queue) -> int:
    """The file descriptor of the end of ``queue``'s pipe that a put writes to."""
    return queue._writer.fileno()  # type: ignore[attr-defined]
