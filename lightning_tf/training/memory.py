"""Handing freed heap memory back to the system.

glibc keeps the pages of freed buffers in its heap rather than returning them: after a data module has
built its arrays from large transient ones (a whole corpus's lengths sorted, a universe of files read),
a process can hold as much memory again as the data itself. Under DDP every rank pays it.
``malloc_trim(0)`` returns those pages; elsewhere (macOS, Windows, musl) nothing happens.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["release_freed_memory"]


def release_freed_memory() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; nothing elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
