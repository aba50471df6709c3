"""``lightning-tf serve CKPT``: a checkpoint of any task behind an HTTP API (LitServe), batched.

The arguments are parsed, and ``--help`` answers, before torch, Lightning or LitServe is imported. Errors a
user can fix (a missing or broken checkpoint, an option of another task, a port out of range, the ``serve``
extra not installed) are one line and exit status 2.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
from collections.abc import Sequence

from lightning_tf.console import ArgumentParser

__all__ = ["build_parser", "serve_main"]

DESCRIPTION = """\
Serve a checkpoint (text, vision or kline: read from it) over HTTP with LitServe: POST /predict (JSON; an
image also as a multipart upload), GET /health, GET /info, OpenAPI page at /docs. Concurrent requests are
batched up to --max_batch_size within --batch_timeout. SIGTERM or Ctrl+C answers the requests in flight,
then exits 0. docs/serve.md has the request formats, curl and Python examples and measured numbers."""


def _devices(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--devices must be 'auto' or a number, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--devices must be at least 1, got {n}")
    return n


def build_parser() -> ArgumentParser:
    """The ``lightning-tf serve`` argument parser."""
    p = ArgumentParser(prog="lightning-tf serve", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", metavar="CKPT", help="a Lightning checkpoint (.ckpt) or a safetensors export folder")
    where = p.add_argument_group("address")
    where.add_argument("--host", default="127.0.0.1",
                       help="127.0.0.1 (this machine only), 0.0.0.0 (every interface) or :: (default: %(default)s)")
    where.add_argument("--port", type=int, default=8000, help="TCP port, 1024-65535 (default: %(default)s)")
    batching = p.add_argument_group("batching and workers")
    batching.add_argument("--max_batch_size", type=int, default=32,
                          help="requests run together at most; 1: no batching (default: %(default)s)")
    batching.add_argument("--batch_timeout", type=float, default=None,
                          help="seconds a batch waits to fill once its first request is there (default: the task's: "
                          "0.05 for text, 0.005 for vision and kline)")
    batching.add_argument("--workers_per_device", type=int, default=1,
                          help="inference processes per device, each with its own model (default: %(default)s)")
    batching.add_argument("--accelerator", choices=("auto", "cpu", "cuda", "mps"), default="auto",
                          help="where the model runs (default: %(default)s: CUDA, MPS or the CPU)")
    batching.add_argument("--devices", type=_devices, default="auto",
                          help="GPUs to use, one set of workers on each (default: %(default)s: all)")
    batching.add_argument("--threads", type=int, default=None,
                          help="intra-op threads of each CPU worker "
                          "(default: the CPUs less one, shared among the workers)")
    batching.add_argument("--api_servers", type=int, default=None,
                          help="HTTP server processes (default: one per inference worker)")
    batching.add_argument("--compile", action="store_true",
                          help="compile the model with torch.compile in each worker before serving (vision, kline)")
    limits = p.add_argument_group("limits and access")
    limits.add_argument("--timeout", type=float, default=30.0,
                        help="seconds a request may wait in the queue for a worker before it gets 504 (a run the "
                        "model has started is not cut); -1: no limit (default: %(default)s)")
    limits.add_argument("--max_payload_mb", type=float, default=32.0,
                        help="largest request body in MB; larger ones get 413 (default: %(default)s)")
    limits.add_argument("--api_key", default=os.environ.get("LIT_SERVER_API_KEY"),
                        help="every request but GET /health must send this key in the X-API-Key header, else 401 "
                        "(default: the LIT_SERVER_API_KEY environment variable; none when unset)")
    limits.add_argument("--log_level", choices=("debug", "info", "warning", "error"), default="warning",
                        help="LitServe's and uvicorn's log level; info adds one access line per request "
                        "(default: %(default)s)")
    task = p.add_argument_group("task options")
    task.add_argument("--beam_size", type=int, default=None, help="text: beam width (default: the model's)")
    task.add_argument("--top_k", type=int, default=None,
                      help="vision: classes per answer when a request does not say (default: 5)")
    task.add_argument("--on_error", choices=("error", "drop", "ffill"), default=None,
                      help="kline: bars with NaN, inf or high below low refuse the request (error, the default), "
                      "are dropped or forward-filled")
    return p


def _check(parser: ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("max_batch_size", "workers_per_device", "threads", "api_servers", "beam_size", "top_k"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1, got {value}")
    if args.batch_timeout is not None and args.batch_timeout < 0:
        parser.error(f"--batch_timeout must be 0 or more, got {args.batch_timeout}")
    if args.timeout != -1 and args.timeout <= 0:
        parser.error(f"--timeout must be positive, or -1, got {args.timeout}")
    if not 1024 <= args.port <= 65535:
        parser.error(f"--port must be 1024-65535, got {args.port}")
    if args.max_payload_mb <= 0:
        parser.error(f"--max_payload_mb must be positive, got {args.max_payload_mb}")
    if importlib.util.find_spec("litserve") is None:
        parser.error("lightning-tf serve needs LitServe: pip install 'lightning-tf[serve]'")


def serve_main(argv: Sequence[str]) -> None:
    """``lightning-tf serve CKPT [options]``: serve until SIGTERM or Ctrl+C."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    _check(parser, args)
    if not os.path.exists(args.checkpoint):
        parser.error(f"checkpoint not found: {args.checkpoint}")

    from .api import Serving
    from .server import Deployment, TaskOptions, make_api, make_server
    from .shutdown import exit_now, install_signal_handlers

    serving = Serving(max_batch_size=args.max_batch_size, batch_timeout=args.batch_timeout, api_key=args.api_key,
                      threads=args.threads, workers=args.workers_per_device, compile=args.compile)
    deployment = Deployment(accelerator=args.accelerator, devices=args.devices,
                            workers_per_device=args.workers_per_device, timeout=args.timeout,
                            max_payload_mb=args.max_payload_mb, api_servers=args.api_servers)
    try:
        api, info = make_api(args.checkpoint, serving, TaskOptions(args.beam_size, args.top_k, args.on_error))
        server = make_server(api, info, deployment)
    except (FileNotFoundError, ValueError, TypeError) as err:
        parser.error(" ".join(str(err).split()))  # one line, whatever the message holds
    host = f"[{args.host}]" if ":" in args.host else args.host
    workers = len(server.devices) * args.workers_per_device
    devices = [d if isinstance(d, str) else "+".join(d) for d in server.devices]  # LitServe: "cpu", or a list per GPU
    print(f"lightning-tf serve: {info['task']} ({info['class']}, {args.checkpoint}) on http://{host}:{args.port}: "
          f"POST /predict, GET /health, /info, /docs; {workers} worker(s) on {', '.join(devices)}, "
          f"batches of up to {args.max_batch_size} within {api.batch_timeout:g} s"
          f"{'; API key required' if args.api_key else ''}. SIGTERM or Ctrl+C stops it after the requests in flight.",
          file=sys.stderr, flush=True)
    install_signal_handlers(server)
    # The queues' manager and the HTTP servers are forked from this process, which has loaded the checkpoint:
    # frozen, its objects are never visited by their garbage collector, so the pages holding them stay shared
    # (a first full collection in an HTTP server would touch them all and copy ~140 MB of them for good).
    gc.collect()
    gc.freeze()
    server.run(host=args.host, port=args.port, num_api_servers=args.api_servers, log_level=args.log_level,
               generate_client_file=False)
    print("lightning-tf serve: stopped", file=sys.stderr, flush=True)
    exit_now(0)
