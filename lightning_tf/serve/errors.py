"""A bad request as a value: the item that travels through a batch in its request's place.

LitServe's batched loop decodes every request of a batch, then calls ``batch``, ``predict``, ``unbatch`` and
``encode_response`` inside one ``try``: an exception raised for one request answers every request of the
batch with it. So nothing raises for one request: :meth:`TaskAPI.decode_request
<lightning_tf.serve.api.TaskAPI.decode_request>` turns a :class:`BadRequest` into a :class:`Rejected`
item, the batch runs on the others, and the rejected one is answered with its own status and one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["BadRequest", "Rejected", "one_line", "validation_message"]


class BadRequest(ValueError):
    """What is wrong with one request, in one line, and its HTTP status (400: the body is not what the
    endpoint reads; 413: it is too large; 422: well-formed, but a field is wrong)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(one_line(message))
        self.status = status


@dataclass(frozen=True)
class Rejected:
    """A request that was refused: its answer, carried through the batch in its place."""

    status: int
    error: str


def one_line(message: str, limit: int = 500) -> str:
    """``message`` on one line (whitespace runs become one space), at most ``limit`` characters."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_message(errors: list[dict[str, Any]], shown: int = 3) -> str:
    """pydantic's validation errors as ``field: what is wrong`` (``bars.3.close: ...``), the first ``shown`` of
    them joined by ``; ``, saying how many more there are."""
    parts = []
    for error in errors[:shown]:
        where = ".".join(str(part) for part in error.get("loc", ())) or "the body"
        kind, msg = error.get("type", ""), str(error.get("msg", "is invalid"))
        if kind == "missing":
            parts.append(f"{where}: field required")
        elif kind == "extra_forbidden":
            parts.append(f"{where}: unknown field")
        else:
            parts.append(f"{where}: {msg[:1].lower()}{msg[1:]}")
    more = len(errors) - shown
    return one_line("; ".join(parts) + (f" (and {more} more)" if more > 0 else ""))
