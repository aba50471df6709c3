"""TaskAPI: what the three tasks' LitAPIs share, so that each of them is a thin shell around its task's own
inference call.

LitServe runs ``setup`` once per worker process, then, for every batch of requests, ``decode_request`` per
request, ``batch``, ``predict``, ``unbatch`` and ``encode_response`` per request. A task says only how a
request becomes its input (``parse``), how a batch of inputs runs (``run``: the task's own ``translate``,
``top_classes`` or ``forecast_columns``) and how one output becomes JSON (``encode``). The rest is here:

* a request that cannot be served becomes a :class:`~.errors.Rejected` item in ``decode_request`` and keeps
  its place through the batch, so the other requests of the batch get their results (LitServe would answer
  the whole batch with one request's exception); a batch that fails as a whole is run again one request at
  a time, so only the request that fails gets the error;
* the model is loaded once per worker with ``weights_only=True`` (:func:`lightning_tf.export.load_module`),
  moved to the worker's device, put in eval mode and run under ``torch.inference_mode()``;
* ``POST /predict`` (:class:`~.loop.PredictEndpoint`), which hands the body to the worker unparsed: the JSON is
  parsed here, in the worker (:func:`json_body`);
* the API key (``X-API-Key``), checked by LitServe through :meth:`TaskAPI.authorize`;
* the worker's share of the CPU threads, and its signals: a worker leaves SIGTERM and SIGINT to the
  server process, which stops it once the requests in flight are answered (:mod:`.shutdown`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, ClassVar

import litserve as ls
import msgspec
import torch
from fastapi import HTTPException, Request
from pydantic import BaseModel, ValidationError
from starlette.datastructures import FormData
from starlette.responses import JSONResponse

from .errors import BadRequest, Rejected, one_line, validation_message
from .loop import FirstRequestBatchLoop, PredictEndpoint

__all__ = ["Batch", "Served", "Serving", "TaskAPI", "form_fields", "json_body", "worker_threads"]

log = logging.getLogger(__name__)

#: hyperparameters /info shows when the model has them
MAIN_HPARAMS = (
    "preset",
    "d_model",
    "n_heads",
    "n_layers",
    "n_decoder_layers",
    "d_ff",
    "dropout",
    "norm_first",
    "pos_encoding",
    "max_len",
    "vocab_size",
    "beam_size",
    "alpha",
    "image_size",
    "patch_size",
    "in_chans",
    "num_classes",
    "pool",
    "backbone",
    "context_len",
    "horizon",
    "n_features",
    "n_targets",
    "patch_len",
    "stride",
    "residual",
    "loss",
)


@dataclass(frozen=True)
class Serving:
    """How a checkpoint is served, whatever its task.

    Args:
        max_batch_size: requests run together at most.
        batch_timeout: seconds a batch may wait to fill after its first request arrived (None: the task's
            :attr:`TaskAPI.default_batch_timeout`).
        api_key: the key every request must carry in ``X-API-Key`` (None: no key; ``/health`` never needs one).
        threads: intra-op threads of each CPU worker (None: the CPUs less one, shared among the workers).
        workers: worker processes per device (for the threads' share).
        compile: compile the model's forward with torch.compile in each worker (warmed up before serving).
    """

    max_batch_size: int = 32
    batch_timeout: float | None = None
    api_key: str | None = None
    threads: int | None = None
    workers: int = 1
    compile: bool = False


@dataclass(frozen=True)
class Served:
    """One request's output and the number of requests its batch ran together (the ``X-Batch-Size`` header)."""

    output: Any
    batch_size: int


@dataclass
class Batch:
    """The requests of one batch: every decoded item in request order (:class:`~.errors.Rejected` ones
    included) and the positions of those that run."""

    items: list[Any]
    good: list[int]


def worker_threads(threads: int | None, workers: int) -> int:
    """Intra-op threads of one CPU worker: ``threads``, or the CPUs this process may use less one (the HTTP
    servers, the queues and the clients need a core too; intra-op threads that wait for a busy core are far
    slower than fewer threads), shared among ``workers`` workers, at least one each."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        return threads
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, (cpus - 1) // max(1, workers))


class TaskAPI(ls.LitAPI):
    """A checkpoint behind ``POST /predict``, batched by LitServe.

    Args:
        checkpoint: the Lightning checkpoint (or safetensors export folder) to serve.
        serving: batching, key, threads, workers, compilation.
    """

    #: the task's name, as /info gives it
    task: ClassVar[str] = ""
    #: the LightningModule class the task serves
    model_class: ClassVar[str] = ""
    #: seconds a batch waits to fill by default: a small fraction of what a batch takes to run, so that a batch
    #: fills under load (a closed loop of clients sends its next requests while the last batch's answers travel)
    #: while a lone request hardly waits
    default_batch_timeout: ClassVar[float] = 0.005
    #: the JSON body of a request, for validation and the OpenAPI page
    request_model: ClassVar[type[BaseModel]]
    #: the JSON body of a response, for the OpenAPI page
    response_model: ClassVar[type[BaseModel]]

    def __init__(self, checkpoint: str, serving: Serving) -> None:
        with warnings.catch_warnings():
            # batch/unbatch with max_batch_size 1: intended (an unbatched server runs batches of one)
            warnings.filterwarnings("ignore", message="The LitServer has both batch and unbatch methods")
            timeout = self.default_batch_timeout if serving.batch_timeout is None else serving.batch_timeout
            # LitServe's batched loop collecting from the first request on (.loop), batched or not
            loop = FirstRequestBatchLoop()
            super().__init__(
                max_batch_size=serving.max_batch_size, batch_timeout=timeout, loop=loop, spec=PredictEndpoint()
            )
        self.checkpoint = str(checkpoint)
        self.serving = serving
        self.model: Any = None

    # ------------------------------------------------------------------------------ loading
    def load(self, device: str = "cpu") -> None:
        """Load the checkpoint (``weights_only=True``) onto ``device`` in eval mode; a checkpoint of another
        task is an error naming both."""
        from lightning_tf.export import load_module

        model = load_module(self.checkpoint)
        if type(model).__name__ != self.model_class:
            raise ValueError(f"{self.checkpoint}: a {type(model).__name__} checkpoint, not a {self.model_class} one")
        self.model = model.to(device).eval()
        self.check_model()

    def check_model(self) -> None:
        """Refuse a model that cannot serve (called once it is loaded); a task may override it."""

    def compile_model(self) -> None:
        """Compile the model's forward (``--compile``); a task that cannot refuses ``compile`` when it is built."""

    def warmup(self) -> None:
        """Run one request's worth of input once before serving (compiles, first-call allocations)."""

    def setup(self, device: str) -> None:
        """Once per worker process: its threads, its signals, the model on ``device``, a warm-up."""
        if str(device).startswith("cpu"):
            torch.set_num_threads(worker_threads(self.serving.threads, self.serving.workers))
        parent = os.getppid()

        def leave_to_the_server(signum: int, frame: FrameType | None) -> None:
            if os.getppid() != parent:  # the server process is gone: nobody will stop this worker
                raise SystemExit(0)

        signal.signal(signal.SIGTERM, leave_to_the_server)
        signal.signal(signal.SIGINT, leave_to_the_server)
        self.load(str(device))
        if self.serving.compile:
            self.compile_model()
        with torch.inference_mode():
            self.warmup()
        log.info("worker %d serves %s on %s", os.getpid(), self.checkpoint, device)

    # ------------------------------------------------------------------------------ the task's part
    def parse(self, body: dict[str, Any]) -> Any:
        """One request's JSON object (or form fields) -> the task's input; raises :class:`~.errors.BadRequest`."""
        raise NotImplementedError

    def parse_bytes(self, body: bytes) -> Any | None:
        """A task's own faster way to read a JSON body: the input :meth:`parse` would give for it, or None for
        :meth:`parse` to read it (the default, always). It must never answer a body differently from :meth:`parse`."""
        return None

    def run(self, inputs: list[Any]) -> Sequence[Any]:
        """The task's inference call on a batch of inputs: one output per input, in order."""
        raise NotImplementedError

    def encode(self, output: Any) -> dict[str, Any]:
        """One output -> the response's JSON object."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What /info says of the model beyond its task, class and hyperparameters (names, sizes)."""
        return {}

    def validate(self, body: dict[str, Any]) -> Any:
        """``body`` checked against :attr:`request_model` (strict types, no unknown fields)."""
        try:
            return self.request_model.model_validate(body, strict=True)
        except ValidationError as err:
            raise BadRequest(validation_message(err.errors())) from None

    # ------------------------------------------------------------------------------ LitServe's hooks
    def decode_request(self, request: Any) -> Any:
        """A request's body -> the task's input, or a :class:`~.errors.Rejected` item saying what is wrong.
        ``request`` is what :class:`~.loop.PredictEndpoint` queues: the body's bytes (JSON: read by the task's
        :meth:`parse_bytes`, or parsed here, :func:`json_body`) or the form of a multipart or url-encoded
        request; or a JSON value (a caller's own)."""
        try:
            if isinstance(request, bytes):
                fast = self.parse_bytes(request)
                if fast is not None:
                    return fast
                body = json_body(request)
            else:
                body = form_fields(request) if isinstance(request, FormData) else request
            if not isinstance(body, dict):
                raise BadRequest(f"the body must be a JSON object, got {type(body).__name__}", status=400)
            return self.parse(body)
        except BadRequest as err:
            return Rejected(err.status, str(err))
        except Exception as err:  # a bug of ours: this request fails alone, with the reason in the log
            log.exception("decoding a request failed")
            return Rejected(500, one_line(f"internal error while reading the request ({type(err).__name__})"))

    def batch(self, inputs: list[Any]) -> "Batch":
        return Batch(list(inputs), [i for i, x in enumerate(inputs) if not isinstance(x, Rejected)])

    def predict(self, x: Any) -> Any:
        """A :class:`Batch` (what the worker loop passes, batched or not) or one decoded request (a caller of its own)."""
        single = not isinstance(x, Batch)
        batch = self.batch([x]) if single else x
        outputs = list(batch.items)
        if batch.good:
            with torch.inference_mode():
                results = self._run_isolated([batch.items[i] for i in batch.good])
            for i, result in zip(batch.good, results, strict=True):
                outputs[i] = result
        return outputs[0] if single else outputs

    def _run_isolated(self, inputs: list[Any]) -> list[Served | Rejected]:
        """:meth:`run` on the batch; if it fails, on each input alone, so only the failing ones fail."""
        try:
            return [r if isinstance(r, Rejected) else Served(r, len(inputs)) for r in self.run(inputs)]
        except Exception as err:
            if len(inputs) == 1:
                if isinstance(err, BadRequest):
                    return [Rejected(err.status, str(err))]
                log.exception("running a request failed")
                return [Rejected(500, f"internal error while running the model ({type(err).__name__})")]
        log.warning("a batch of %d requests failed; running them one at a time", len(inputs))
        return [result for x in inputs for result in self._run_isolated([x])]

    def unbatch(self, output: list[Any]) -> list[Any]:
        return output

    def encode_response(self, output: Any):  # noqa: ANN201 (no annotation: FastAPI sends a dict as it is)
        """The JSON response of one output, with the ``X-Batch-Size`` it ran in; a rejected request's own status and
        ``{"error": ...}``. Never raises: LitServe would answer the whole batch with the exception."""
        if isinstance(output, Served):
            try:
                return JSONResponse(self.encode(output.output), headers={"X-Batch-Size": str(output.batch_size)})
            except Exception as err:
                log.exception("encoding a response failed")
                output = Rejected(500, f"internal error while writing the response ({type(err).__name__})")
        if not isinstance(output, Rejected):  # pragma: no cover - predict wraps every output
            output = Rejected(500, "internal error: an output without its request")
        return JSONResponse({"error": output.error}, status_code=output.status)

    async def authorize(self, request: Request) -> None:
        """LitServe's authorisation hook: with an API key, every endpoint but ``/health`` needs it in ``X-API-Key``.
        (A coroutine: FastAPI would run a plain function in a thread of its pool for every request, a thread hop
        per request, and each of up to 40 threads would grow its own heap.)"""
        key = self.serving.api_key
        if not key or request.url.path == "/health":
            return
        given = request.headers.get("x-api-key")
        if given is None or not secrets.compare_digest(given.encode(), key.encode()):
            raise HTTPException(status_code=401, detail="missing or wrong API key: send it in the X-API-Key header")

    # ------------------------------------------------------------------------------ /info
    def info(self) -> dict[str, Any]:
        """The task, the checkpoint, the model's class, main hyperparameters and parameter count, and what
        :meth:`describe` adds (the loaded model's)."""
        hparams = {k: v for k, v in dict(self.model.hparams).items() if k in MAIN_HPARAMS and v is not None}
        return {
            "task": self.task,
            "checkpoint": os.path.abspath(self.checkpoint),
            "class": type(self.model).__name__,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "hyperparameters": _plain(hparams),
            **_plain(self.describe()),
            "batching": {"max_batch_size": self.max_batch_size, "batch_timeout": self.batch_timeout},
        }


#: msgspec's JSON parser: the value ``json.loads`` gives for every body it reads (numbers of any size included),
#: several times faster (docs/serve.md)
_JSON = msgspec.json.Decoder()


def json_body(body: bytes) -> Any:
    """The JSON value of a request's body, as ``json.loads`` reads it: by msgspec's parser, or by ``json.loads``
    itself for what msgspec refuses (NaN and Infinity, a byte-order mark, UTF-16 text, lone surrogates, a
    malformed body: its error message). A body that is not JSON is a :class:`~.errors.BadRequest` (400) saying
    why."""
    try:
        return _JSON.decode(body)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        return json.loads(body)
    except UnicodeDecodeError as err:
        raise BadRequest(f"the body is not UTF-8 text: {err}", status=400) from None
    except json.JSONDecodeError as err:
        raise BadRequest(f"the body is not valid JSON: {err}", status=400) from None
    except RecursionError:
        problem = "it nests arrays or objects too deeply"
        raise BadRequest(f"the body is not a JSON value this server takes: {problem}", status=400) from None
    except ValueError as err:  # json's own limit: an integer of more than 4300 digits
        raise BadRequest(f"the body is not a JSON value this server takes: {err}", status=400) from None


def form_fields(form: FormData) -> dict[str, Any]:
    """A multipart or url-encoded form as a body: a file field becomes its bytes, a text field its string; a
    field given twice is an error."""
    body: dict[str, Any] = {}
    for key, value in form.multi_items():
        if key in body:
            raise BadRequest(f"{key}: given more than once", status=400)
        body[key] = value.file.read() if hasattr(value, "file") else value
    if any(str(key).lstrip().startswith("{") for key in body):  # no field is named so: JSON, cut at any '=' it holds
        raise BadRequest(
            "the body looks like JSON sent as a form: send it with Content-Type: application/json "
            "(curl: -H 'Content-Type: application/json')",
            status=400,
        )
    return body


def _plain(value: Any) -> Any:
    """``value`` as JSON types: tuples become lists, tensors and numpy values their Python values."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
