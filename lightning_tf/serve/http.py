"""The HTTP side of a served checkpoint, added to LitServe's FastAPI app: every error as ``{"error": "<one
line>"}`` with its status, a body's size limit, and an OpenAPI page (``/docs``) that describes the task's requests
and responses.

:class:`BodyLimit` (a middleware, LitServe's public ``middlewares`` argument) reads every body first: one over
the size limit is a 413 as soon as its ``Content-Length`` or its bytes so far say so (chunked uploads too).
:class:`DirectPredict` (another) answers ``POST /predict`` with a JSON body without FastAPI's routing. The
worker parses the body (:func:`lightning_tf.serve.api.json_body`) and answers one that does not parse with a 400
saying why, whatever the reason (syntax, encoding, nesting depth, a number too long). Statuses: 400 (not JSON, not
an object, a broken form), 401 (no or a wrong ``X-API-Key``), 413 (too large), 422 (a field is wrong), 504 (the
request waited longer than ``--timeout`` for a worker).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from .api import TaskAPI
from .errors import one_line, validation_message
from .loop import is_form

__all__ = [
    "BodyLimit",
    "ClientErrorFilter",
    "DirectPredict",
    "ErrorResponse",
    "error_response",
    "install_error_handlers",
    "install_openapi",
    "openapi_schema",
]

log = logging.getLogger(__name__)

#: what each status means on POST /predict, for the OpenAPI page
STATUSES = {
    "400": "the body is not JSON, not a JSON object, or a broken form",
    "401": "the server has an API key and the request did not send it in X-API-Key",
    "413": "the body or the image is too large",
    "422": "a field is missing, of the wrong type or value (empty text, not an image, too few bars, NaN...)",
    "504": "the request waited longer than the server's --timeout for a worker",
}


class BodyLimit:
    """An ASGI middleware that reads each request's body before the app: over ``max_size`` bytes it is a 413,
    from ``Content-Length`` before reading, else (chunked uploads) as soon as the bytes received pass it. The app
    then gets the body as it came."""

    def __init__(self, app: Any, max_size: int) -> None:
        self.app, self.max_size = app, max_size

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        too_large = f"the body is larger than the server's limit of {self.max_size / 2**20:.3g} MB (--max_payload_mb)"
        length = headers.get("content-length", "")
        if length.strip().isdigit() and int(length) > self.max_size:
            await JSONResponse({"error": too_large}, status_code=413)(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_size:
                await JSONResponse({"error": too_large}, status_code=413)(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:  # the body was read: what comes next is the client leaving
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class DirectPredict:
    """An ASGI middleware that answers ``POST /predict`` itself when the body is not a form: the API key checked by
    the API's own :meth:`~.api.TaskAPI.authorize`, the body handed to a worker by the endpoint's own
    :meth:`~.loop.PredictEndpoint.exchange`, and the worker's answer sent, or its error as
    :func:`error_response` (what the app's error handlers answer). The same exchange as the route, without
    FastAPI's routing, dependency solving and exception middleware, work the HTTP server (the one process every
    request crosses) would do for each request (docs/serve.md measures it). A form, and every other method and
    path, goes on to the app."""

    def __init__(self, app: Any, api: TaskAPI) -> None:
        self.app, self.api = app, api

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        endpoint = self.api.spec
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != endpoint.api_path:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if is_form(request.headers.get("content-type", "")):
            await self.app(scope, receive, send)
            return
        try:
            await self.api.authorize(request)
            answer = await endpoint.exchange(await request.body())
            response = answer if isinstance(answer, Response) else JSONResponse(jsonable_encoder(answer))
        except StarletteHTTPException as err:
            response = error_response(err.status_code, err.detail)
        await response(scope, receive, send)


class ErrorResponse(BaseModel):
    """A request that was not served."""

    error: str = Field(description="what is wrong, in one line", examples=["text: field required"])


def error_response(status: int, detail: Any) -> JSONResponse:
    """``{"error": detail}`` (on one line) with ``status``."""
    return JSONResponse({"error": one_line(str(detail))}, status_code=status)


class ClientErrorFilter(logging.Filter):
    """Keeps LitServe's log free of what is not a fault: its warning that an HTTP server it stops has already
    stopped (:mod:`.shutdown` stops them first), and its worker monitor's broken pipe when it wakes after the
    shutdown."""

    def filter(self, record: logging.LogRecord) -> bool:
        cause = record.exc_info[1] if record.exc_info else None
        message = record.getMessage()
        if "Monitoring worker crashed" in message and isinstance(cause, (OSError, EOFError)):
            return False  # its manager was shut down while it slept: the server is stopping
        return "Already not alive" not in message


def install_error_handlers(app: FastAPI) -> None:
    """Answer every HTTP error of ``app`` (LitServe's, FastAPI's, a route that does not exist) as
    ``{"error": ...}``."""

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(exc.status_code, exc.detail)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"error": validation_message(list(exc.errors()))}, status_code=422)

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    litserve_log = logging.getLogger("litserve.server")
    if not any(isinstance(f, ClientErrorFilter) for f in litserve_log.filters):
        litserve_log.addFilter(ClientErrorFilter())


def _schemas(*models: type[BaseModel]) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return schemas


def openapi_schema(app: FastAPI, api: TaskAPI, title: str, version: str) -> dict[str, Any]:
    """The OpenAPI document of ``app`` with ``POST /predict`` described: the task's request body (JSON, and a
    multipart upload for images), its response and every error status."""
    doc = get_openapi(
        title=title,
        version=version,
        routes=app.routes,
        description=f"A {api.task} checkpoint ({api.model_class}) served with LitServe.",
    )
    doc.setdefault("components", {}).setdefault("schemas", {}).update(
        _schemas(api.request_model, api.response_model, ErrorResponse)
    )
    ref = "#/components/schemas/{}".format
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": ref(api.request_model.__name__)}}}
    if api.task == "vision":
        content["multipart/form-data"] = {
            "schema": {
                "type": "object",
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "format": "binary", "description": "the image file"},
                    "top_k": {"type": "integer", "minimum": 1},
                },
            }
        }
    error = {"application/json": {"schema": {"$ref": ref("ErrorResponse")}}}
    post = doc["paths"]["/predict"]["post"]
    post.update(
        summary=f"{api.task}: {api.request_model.__doc__}",
        requestBody={"required": True, "content": content},
        responses={
            "200": {
                "description": api.response_model.__doc__ or "the result",
                "content": {"application/json": {"schema": {"$ref": ref(api.response_model.__name__)}}},
            },
            **{code: {"description": what, "content": error} for code, what in STATUSES.items()},
        },
    )
    return doc


def install_openapi(app: FastAPI, api: TaskAPI, title: str, version: str) -> None:
    """Serve :func:`openapi_schema` at ``/openapi.json`` (and so on ``/docs``), built once."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_schema(app, api, title, version)
        return app.openapi_schema

    app.openapi = build  # type: ignore[method-assign]
