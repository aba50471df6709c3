"""Reading many files side by side: a process pool that returns its results, raises its errors and logs
its log lines in the order of the files, exactly as one process reading them in turn would.

A folder of thousands of bar files is read file by file in Python and pandas; the files are independent,
so worker processes share them out. Each worker sends back what it read, the exception of the first file
that failed (raised again here as the same one-line error, naming the file) and the records its
``lightning_tf`` loggers emitted, which are logged here in file order. Workers are forked where the
platform allows it (Linux: no import time, nothing to pickle but the results), else spawned.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import Any, TypeVar

__all__ = ["MIN_BYTES_PER_WORKER", "RecordKeeper", "map_in_order", "pool_workers"]

T = TypeVar("T")
R = TypeVar("R")
MIN_BYTES_PER_WORKER = 8 * 2**20  # less data than this per worker: starting the pool costs more than it saves
_LOGGER = "lightning_tf"


def pool_workers(workers: int | None, n_items: int, n_bytes: int) -> int:
    """The number of worker processes for ``n_items`` files of ``n_bytes`` in all: ``workers`` as given
    (0: none, read here); None: one per idle CPU core (the usable cores less the load average, this
    process's own core included), as long as each gets ``MIN_BYTES_PER_WORKER``, else 0. On a machine
    whose cores are busy, workers only take turns with the process that would read alone.

    Raises:
        ValueError: for a negative ``workers``.
    """
    if workers is not None:
        if workers < 0:
            raise ValueError(f"read_workers ({workers}) must be >= 0 (0: read in this process) or None (automatic)")
        return workers
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    idle = cores - os.getloadavg()[0] + 1 if hasattr(os, "getloadavg") else cores
    workers = min(cores, int(idle), n_items, n_bytes // MIN_BYTES_PER_WORKER)
    return workers if workers > 1 else 0


def map_in_order(function: Callable[[T], R], items: Iterable[T], workers: int) -> Iterator[R]:
    """``function(item)`` for every item, in order: in this process when ``workers`` is 0, else in that
    many worker processes. A worker's exception is raised here (the first in item order, and nothing
    after it is returned), and the log records its ``lightning_tf`` loggers emitted are handled here,
    item by item, before that item's result.

    Args:
        function: a picklable function (module level, or a ``functools.partial`` of one).
        items: its arguments.
        workers: worker processes; 0: none.
    """
    if workers == 0:
        yield from map(function, items)
        return
    items = list(items)
    level = logging.getLogger(_LOGGER).getEffectiveLevel()
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    chunk = max(1, min(16, len(items) // (4 * workers)))  # small chunks keep the workers evenly busy
    executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method))
    try:
        for ok, value, records in executor.map(partial(_run, function, level), items, chunksize=chunk):
            for record in records:
                logger = logging.getLogger(record.name)
                if logger.isEnabledFor(record.levelno):
                    logger.handle(record)
            if not ok:
                raise value from None
            yield value
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


class RecordKeeper(logging.Handler):
    """Collects the records of ``level`` and above, formatted so that they can travel between processes (or be
    stored and said again)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args, record.exc_info, record.exc_text = record.getMessage(), None, None, None
        self.records.append(record)


def _run(function: Callable[[Any], Any], level: int, item: Any) -> tuple[bool, Any, list[logging.LogRecord]]:
    """In a worker: ``(True, result, records)`` or ``(False, exception, records)``."""
    logger = logging.getLogger(_LOGGER)
    keep = RecordKeeper()
    saved = logger.handlers, logger.propagate, logger.level
    # The records go back to the parent only: a forked worker would otherwise also write them itself.
    logger.handlers, logger.propagate = [keep], False
    logger.setLevel(level)
    try:
        return True, function(item), keep.records
    except Exception as e:  # noqa: BLE001  # raised again in the parent, in order
        return False, e, keep.records
    finally:
        logger.handlers, logger.propagate = saved[0], saved[1]
        logger.setLevel(saved[2])
