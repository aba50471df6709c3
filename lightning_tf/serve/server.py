"""A checkpoint's LitServer: the task's LitAPI chosen from the checkpoint, LitServe's batching, workers,
timeout and ``/info``, plus the project's errors, OpenAPI page and shutdown (:mod:`.http`, :mod:`.shutdown`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import litserve as ls

from .api import Serving, TaskAPI
from .http import BodyLimit, DirectPredict, install_error_handlers, install_openapi
from .kline import KLineAPI
from .kronos import KronosAPI
from .loop import PipeQueueServer
from .text import TextAPI
from .vision import VisionAPI

__all__ = ["APIS", "Deployment", "TaskOptions", "make_api", "make_server"]

log = logging.getLogger(__name__)

#: the LightningModule class of a checkpoint -> the LitAPI that serves it
APIS: dict[str, type[TaskAPI]] = {
    "Seq2SeqTransformer": TextAPI,
    "ViTClassifier": VisionAPI,
    "KLineForecaster": KLineAPI,
    "KronosTuner": KronosAPI,
}


@dataclass(frozen=True)
class TaskOptions:
    """The options of one task (None: not given).

    Args:
        beam_size: text: beam width (None: the model's).
        top_k: vision: classes per answer when a request does not say (None: 5).
        on_error: kline: what bad bars do (None: ``error``, the request is refused).
    """

    beam_size: int | None = None
    top_k: int | None = None
    on_error: Literal["error", "drop", "ffill"] | None = None


@dataclass(frozen=True)
class Deployment:
    """Where and how many: LitServe's server arguments.

    Args:
        accelerator: ``auto``, ``cpu``, ``cuda`` or ``mps``.
        devices: devices to use (``auto``: all of the accelerator's); one set of workers per device.
        workers_per_device: inference worker processes per device, each with its own copy of the model.
        timeout: seconds a request may wait for a worker before it gets 504 (-1: no limit).
        max_payload_mb: largest request body, in MB (413 beyond).
        api_servers: HTTP server processes (None: one per inference worker).
    """

    accelerator: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    devices: int | Literal["auto"] = "auto"
    workers_per_device: int = 1
    timeout: float = 30.0
    max_payload_mb: float = 32.0
    api_servers: int | None = None


_TASK_OF_OPTION = {"beam_size": "text", "top_k": "vision", "on_error": "kline"}


def make_api(checkpoint: str, serving: Serving, options: TaskOptions) -> tuple[TaskAPI, dict[str, Any]]:
    """The LitAPI of ``checkpoint``'s task and what ``/info`` says of it. The checkpoint is loaded here once
    (``weights_only=True``), so a broken one or an option of another task fails before any worker starts; the
    workers load it again, each its own copy."""
    from lightning_tf.export import load_module

    model = load_module(checkpoint)
    name = type(model).__name__
    if name not in APIS:
        raise ValueError(f"{checkpoint}: a {name} checkpoint; lightning-tf serve serves {', '.join(APIS)}")
    cls = APIS[name]
    for option, task in _TASK_OF_OPTION.items():
        if getattr(options, option) is not None and task != cls.task:
            raise ValueError(f"--{option} is for {task} checkpoints; {checkpoint} is a {cls.task} one ({name})")
    if cls is TextAPI:
        api: TaskAPI = TextAPI(checkpoint, serving, beam_size=options.beam_size)
    elif cls is VisionAPI:
        api = VisionAPI(checkpoint, serving, top_k=5 if options.top_k is None else options.top_k)
    else:
        api = cls(checkpoint, serving, on_error=options.on_error or "error")
    api.model = model.eval()
    try:
        api.check_model()
        info = api.info()
    finally:
        api.model = None  # each worker loads its own copy; the API travels to the workers without the model
    return api, info


def make_server(api: TaskAPI, info: dict[str, Any], deployment: Deployment) -> ls.LitServer:
    """The LitServer of ``api`` (``/predict``, ``/health``, ``/info`` with ``info``, ``/docs``), its requests and
    answers passed through pipes (:class:`.loop.PipeQueueServer`)."""
    from lightning_tf import __version__

    if deployment.timeout != -1 and deployment.timeout <= api.batch_timeout:
        raise ValueError(
            f"--timeout ({deployment.timeout:g}) must be longer than the batch timeout ({api.batch_timeout:g}), or -1"
        )
    server = PipeQueueServer(
        api,
        accelerator=deployment.accelerator,
        devices=deployment.devices,
        workers_per_device=deployment.workers_per_device,
        timeout=deployment.timeout,
        model_metadata={
            **info,
            "max_payload_mb": deployment.max_payload_mb,
        },  # LitServe's own says None: .http.BodyLimit
        # the last one given runs first: the body's size limit, checked before anything reads it
        # (.http.BodyLimit); then POST /predict answered without FastAPI's routing (.http.DirectPredict)
        middlewares=[(DirectPredict, {"api": api}), (BodyLimit, {"max_size": int(deployment.max_payload_mb * 2**20)})],
    )
    install_error_handlers(server.app)
    install_openapi(server.app, api, f"lightning-tf serve: {info['task']}", __version__)
    return server
