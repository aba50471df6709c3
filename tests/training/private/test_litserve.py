"""The LitServe private names that ``lightning_tf/training/private/litserve.py`` relies on still exist and still
mean what it assumes: ``LitServer.run`` makes its queues and answer transport in ``_init_manager(num_api_servers)``
before it starts any worker, and each worker is given the request queue and the transport found there then."""

from __future__ import annotations

import multiprocessing
import multiprocessing.managers
import socket
from typing import Any

import pytest

ls = pytest.importorskip("litserve")

from litserve.transport.base import MessageTransport  # noqa: E402

from lightning_tf.training.private import litserve as private  # noqa: E402


class Echo(ls.LitAPI):
    def setup(self, device: str) -> None:
        pass

    def predict(self, x: Any) -> Any:
        return x


class Started(Exception):
    """Raised where LitServer would start its first worker process."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_init_manager_makes_the_queues_and_the_transport_each_worker_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    ours = object()  # what an override puts in place of LitServe's transport

    class Context:
        def Process(self, target: Any, args: tuple[Any, ...], name: str) -> Any:  # noqa: N802 - multiprocessing's name
            seen["worker"] = args
            raise Started

    class Server(ls.LitServer):
        def _init_manager(self, num_api_servers: int) -> Any:
            assert not getattr(self, "inference_workers", None)  # before any worker
            manager = super()._init_manager(num_api_servers)
            seen.update(n=num_api_servers, manager=manager, made=private.transport(self))
            seen["queue"] = self.litapi_request_queues["/predict"]
            private.set_transport(self, ours)
            monkeypatch.setattr(multiprocessing, "get_context", lambda method=None: Context())
            return manager

    server = Server(Echo(), accelerator="cpu")
    assert private.transport(server) is None  # made by _init_manager
    try:
        with pytest.raises(Started):
            server.run(host="127.0.0.1", port=_free_port(), num_api_servers=2, generate_client_file=False)
    finally:
        if "manager" in seen:
            seen["manager"].shutdown()
    assert seen["n"] == 2 and isinstance(seen["manager"], multiprocessing.managers.SyncManager)
    assert isinstance(seen["made"], MessageTransport)
    _, _, worker_id, request_queue, transport, *_ = seen["worker"]
    assert worker_id == 0 and request_queue is seen["queue"] and transport is ours
    assert private.transport(server) is ours
    assert "litserve.server.LitServer._init_manager" in private.OVERRIDES
