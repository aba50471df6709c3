"""Stopping a server without dropping a request: SIGTERM (or SIGINT) answers the requests in flight, then exits 0.

LitServe's own shutdown closes the response channel and terminates the workers before the HTTP servers have
answered what they hold, and its process does not handle SIGTERM at all (the signal kills it and leaves its
workers behind). Here the server process handles both signals and drains in order:

1. each HTTP server process gets SIGTERM: uvicorn stops accepting connections and waits for the requests it
   holds to be answered (the workers are still running, so they are);
2. each inference worker gets the stop value behind the requests queued for it and leaves its loop
   (:func:`.loop.stop_workers`);
3. a last SIGINT in the server process (its handler raises KeyboardInterrupt in the main thread): LitServe's
   ``LitServer.run`` takes it for Ctrl+C, closes what is left (the queues' manager) and returns; the command
   then exits at once (:func:`exit_now`: the interpreter's teardown of torch would take seconds, and
   nothing is left to release).

The workers ignore SIGTERM and SIGINT while the server process lives (:meth:`TaskAPI.setup
<lightning_tf.serve.api.TaskAPI.setup>`), so a signal sent to the whole process group (Ctrl+C) drains the
same way; a second SIGINT stops at once.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from .loop import stop_workers

__all__ = ["drain", "exit_now", "install_signal_handlers"]

log = logging.getLogger(__name__)


def _say(message: str) -> None:
    print(f"lightning-tf serve: {message}", file=sys.stderr, flush=True)


def drain(server: Any, grace: float = 2.0) -> None:
    """Answer the requests in flight of a running ``litserve.LitServer``, then stop it (see the module). A worker
    still alive ``grace`` seconds after its stop value is killed: the HTTP servers are gone, so nothing it could
    still compute has anyone waiting for it (what it spends that long on is the interpreter's teardown)."""
    http = [p for p in mp.active_children() if p.name.startswith("LitServer-")]
    for p in http:
        if p.pid is not None:
            os.kill(p.pid, signal.SIGTERM)
    for p in http:
        p.join()
    stop_workers(server, grace)
    # LitServer.run waits for its shutdown event in the main thread: a SIGINT sent to that thread interrupts the
    # wait, and the KeyboardInterrupt its handler raises runs LitServe's own shutdown
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def install_signal_handlers(server: Any) -> None:
    """SIGTERM and SIGINT in this (the server's) process start :func:`drain` once, in a thread; a second SIGINT
    raises KeyboardInterrupt (LitServe's immediate shutdown). Processes forked from this one (the queues'
    manager) ignore them: the server process stops them."""
    main = os.getpid()
    started = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != main:
            return
        if started.is_set():
            if signum == signal.SIGINT:  # a second Ctrl+C, or drain() done
                raise KeyboardInterrupt
            return
        started.set()
        _say(f"{signal.Signals(signum).name}: answering the requests in flight, then stopping")
        threading.Thread(target=drain, args=(server,), name="lightning-tf-drain", daemon=True).start()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def exit_now(status: int = 0) -> None:
    """Flush the output and the logs and leave the process with ``status``, skipping the interpreter's teardown."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
