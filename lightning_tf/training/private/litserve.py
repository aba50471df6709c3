"""LitServe's private names the package relies on, and why; ``tests/training/private/test_litserve.py`` fails as
soon as a LitServe release moves or changes one of them.

:class:`~lightning_tf.serve.loop.PipeQueueServer` carries requests and answers over pipes instead of a
multiprocessing manager's queues. LitServe makes its queues in one private step and keeps the answer transport in
a private attribute:

* :data:`OVERRIDES`: ``LitServer._init_manager(num_api_servers)`` makes the manager, the request queue of each API
  and the answer transport, before the workers are spawned and the HTTP servers forked: the one point where
  other queues can take their place;
* :func:`transport`, :func:`set_transport`: the answer transport (``LitServer._transport``), which each worker
  and HTTP server is given.

What else :mod:`lightning_tf.serve.loop` relies on of LitServe's inner workings (public names whose behaviour
LitServe does not document: the request item, the loop's call, a spec's setup) is listed in that module and
checked by ``tests/serve/test_loop.py``.
"""

from __future__ import annotations

from typing import Any

from litserve import LitServer
from litserve.transport.base import MessageTransport

__all__ = ["OVERRIDES", "set_transport", "transport"]

#: LitServe's private methods that classes of the package override -> those classes
OVERRIDES = {"litserve.server.LitServer._init_manager": ("lightning_tf.serve.loop.PipeQueueServer",)}


def transport(server: LitServer) -> MessageTransport | None:
    """The transport that carries the workers' answers to ``server``'s HTTP servers (None before it is made)."""
    return getattr(server, "_transport", None)


def set_transport(server: LitServer, value: Any) -> None:
    """Put ``value`` in place of ``server``'s answer transport (in ``_init_manager``, before the workers start)."""
    server._transport = value
