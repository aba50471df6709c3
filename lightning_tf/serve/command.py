"""``lightning-tf serve CKPT``: a checkpoint of any task behind an HTTP API (LitServe), batched.

The arguments are parsed, and ``--help`` answers, before torch, Lightning or LitServe is imported. Errors a
user can fix (a missing or broken checkpoint, an option of another task, a port out of range, the ``serve``
extra not installed) are one line and exit status 2.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
from typing import Literal

__all__ = ["serve"]


def _devices(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"--devices must be 'auto' or a number, got {value!r}") from None
    if n < 1:
        raise ValueError(f"--devices must be at least 1, got {n}")
    return n


def serve(
    checkpoint: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_batch_size: int = 32,
    batch_timeout: float | None = None,
    workers_per_device: int = 1,
    accelerator: Literal["auto", "cpu", "cuda", "mps"] = "auto",
    devices: str = "auto",
    threads: int | None = None,
    api_servers: int | None = None,
    compile: bool = False,
    timeout: float = 30.0,
    max_payload_mb: float = 32.0,
    api_key: str | None = None,
    log_level: Literal["debug", "info", "warning", "error"] = "warning",
    beam_size: int | None = None,
    top_k: int | None = None,
    on_error: Literal["error", "drop", "ffill"] | None = None,
) -> None:
    """Serve a checkpoint (text, vision or kline: read from it) over HTTP with LitServe: POST /predict (JSON; an
    image also as a multipart upload), GET /health, GET /info, OpenAPI page at /docs. Concurrent requests are
    batched up to --max_batch_size within --batch_timeout. SIGTERM or Ctrl+C answers the requests in flight,
    then exits 0. docs/serve.md has the request formats, curl and Python examples and measured numbers.

    Args:
        checkpoint: a Lightning checkpoint (.ckpt) or a safetensors export folder
        host: 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or ::
        port: TCP port, 1024-65535
        max_batch_size: requests run together at most; 1: no batching
        batch_timeout: seconds a batch may wait to fill after its first request arrived (default: the task's:
            0.05 for text, 0 for vision and kline)
        workers_per_device: inference processes per device, each with its own model
        accelerator: where the model runs (auto: CUDA, MPS or the CPU)
        devices: GPUs to use, one set of workers on each (auto: all)
        threads: intra-op threads of each CPU worker (default: the CPUs less one, shared among the workers)
        api_servers: HTTP server processes (default: one per inference worker)
        compile: compile the model with torch.compile in each worker before serving (vision, kline)
        timeout: seconds a request may wait in the queue for a worker before it gets 504 (a run the model has
            started is not cut); -1: no limit
        max_payload_mb: largest request body in MB; larger ones get 413
        api_key: every request but GET /health must send this key in the X-API-Key header, else 401 (default:
            the LIT_SERVER_API_KEY environment variable; none when unset)
        log_level: LitServe's and uvicorn's log level; info adds one access line per request
        beam_size: text: beam width (default: the model's)
        top_k: vision: classes per answer when a request does not say (default: 5)
        on_error: kline: bars with NaN, inf or high below low refuse the request (error, the default), are
            dropped or forward-filled
    """
    for name, value in (
        ("max_batch_size", max_batch_size),
        ("workers_per_device", workers_per_device),
        ("threads", threads),
        ("api_servers", api_servers),
        ("beam_size", beam_size),
        ("top_k", top_k),
    ):
        if value is not None and value < 1:
            raise ValueError(f"--{name} must be at least 1, got {value}")
    if batch_timeout is not None and batch_timeout < 0:
        raise ValueError(f"--batch_timeout must be 0 or more, got {batch_timeout}")
    if timeout != -1 and timeout <= 0:
        raise ValueError(f"--timeout must be positive, or -1, got {timeout}")
    if not 1024 <= port <= 65535:
        raise ValueError(f"--port must be 1024-65535, got {port}")
    if max_payload_mb <= 0:
        raise ValueError(f"--max_payload_mb must be positive, got {max_payload_mb}")
    n_devices = _devices(devices)
    if importlib.util.find_spec("litserve") is None:
        raise ValueError("lightning-tf serve needs LitServe: pip install 'lightning-tf[serve]'")
    if not os.path.exists(checkpoint):
        raise FileNotFoundError(f"checkpoint not found: {checkpoint}")
    _check_port(host, port)  # before the checkpoint loads: a port in use is one line, not uvicorn's after the banner
    api_key = api_key if api_key is not None else os.environ.get("LIT_SERVER_API_KEY")
    from .api import Serving
    from .server import Deployment, TaskOptions, make_api, make_server
    from .shutdown import exit_now, install_signal_handlers

    serving = Serving(
        max_batch_size=max_batch_size,
        batch_timeout=batch_timeout,
        api_key=api_key,
        threads=threads,
        workers=workers_per_device,
        compile=compile,
    )
    deployment = Deployment(
        accelerator=accelerator,
        devices=n_devices,
        workers_per_device=workers_per_device,
        timeout=timeout,
        max_payload_mb=max_payload_mb,
        api_servers=api_servers,
    )
    try:
        api, info = make_api(checkpoint, serving, TaskOptions(beam_size, top_k, on_error))
        server = make_server(api, info, deployment)
    except (FileNotFoundError, ValueError, TypeError) as err:
        raise ValueError(" ".join(str(err).split())) from None  # one line, whatever the message holds
    shown_host = f"[{host}]" if ":" in host else host
    workers = len(server.devices) * workers_per_device
    devices = [d if isinstance(d, str) else "+".join(d) for d in server.devices]  # LitServe: "cpu", or a list per GPU
    wait = f"within {api.batch_timeout:g} s" if api.batch_timeout > 0 else "of what is queued when a worker is free"
    print(
        f"lightning-tf serve: {info['task']} ({info['class']}, {checkpoint}) on http://{shown_host}:{port}: "
        f"POST /predict, GET /health, /info, /docs; {workers} worker(s) on {', '.join(devices)}, "
        f"batches of up to {max_batch_size} {wait}"
        f"{'; API key required' if api_key else ''}. SIGTERM or Ctrl+C stops it after the requests in flight.",
        file=sys.stderr,
        flush=True,
    )
    install_signal_handlers(server)
    # The queues' manager and the HTTP servers are forked from this process, which has loaded the checkpoint:
    # frozen, its objects are never visited by their garbage collector, so the pages holding them stay shared
    # (a first full collection in an HTTP server would touch them all and copy those pages for good).
    gc.collect()
    gc.freeze()
    server.run(
        host=host,
        port=port,
        num_api_servers=api_servers,
        log_level=log_level,
        generate_client_file=False,
    )
    print("lightning-tf serve: stopped", file=sys.stderr, flush=True)
    exit_now(0)


def _check_port(host: str, port: int) -> None:
    """A ValueError when ``host:port`` cannot be bound (another server listens there, or the address is not this
    machine's), bound as the HTTP server will bind it."""
    import errno
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:  # in use: another port; any other reason (no such address): the host
            in_use = err.errno == errno.EADDRINUSE
            fix = (
                "--port: cannot listen on {}; choose another port"
                if in_use
                else "--host: cannot listen on {}; check it"
            )
            raise ValueError(fix.format(f"{host}:{port} ({err.strerror})")) from None
