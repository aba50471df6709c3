"""Serving: a checkpoint of any task behind an HTTP API, with LitServe (the ``serve`` extra).

* :mod:`.command`: ``lightning-tf serve CKPT`` (its arguments parse without torch or LitServe).
* :class:`TaskAPI` (:mod:`.api`): what the LitAPIs share: per-request errors carried through a batch,
  the model loaded once per worker, the API key, the workers' threads and signals.
* One LitAPI per task, each a thin shell around the task's own inference call: :class:`TextAPI`
  (:mod:`.text`, ``translate``), :class:`VisionAPI` (:mod:`.vision`, ``prepare`` + ``top_classes``, as
  ``classify``), :class:`KLineAPI` (:mod:`.kline`, ``windows_of_series`` + ``forecast_columns``, as ``forecast``),
  :class:`KronosAPI` (:mod:`.kronos`, a fine-tuned Kronos's ``forecast``).
* :mod:`.server`: the LitServer of a checkpoint; :mod:`.loop`: the worker's batch collection and the pipes
  between the HTTP servers and the workers; :mod:`.http`: ``{"error": ...}`` answers and the OpenAPI page;
  :mod:`.shutdown`: SIGTERM answers the requests in flight, then exits 0.

The task packages never import this one (nor LitServe). The names below load on first use (PEP 562), so
``lightning-tf serve --help`` answers without LitServe, torch or Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_tf import lazy_exports

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from .api import Serving, TaskAPI
    from .command import serve
    from .errors import BadRequest, Rejected
    from .kline import KLineAPI
    from .kronos import KronosAPI
    from .server import Deployment, TaskOptions, make_api, make_server
    from .text import TextAPI
    from .vision import VisionAPI

_WHERE = {
    "BadRequest": ".errors",
    "Deployment": ".server",
    "KLineAPI": ".kline",
    "KronosAPI": ".kronos",
    "Rejected": ".errors",
    "Serving": ".api",
    "TaskAPI": ".api",
    "TaskOptions": ".server",
    "TextAPI": ".text",
    "VisionAPI": ".vision",
    "make_api": ".server",
    "make_server": ".server",
    "serve": ".command",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
