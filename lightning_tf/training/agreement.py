"""The one message for a model argument that differs from its data's value (a DataModule states what the model
must agree with: vocabulary size, classes, features; the model checks it once)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_agreement"]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def check_agreement(name: str, ours: Any, theirs: Any) -> None:
    """Raise the one ValueError for a model argument that differs from the data's value of the same
    name (``None`` on the data's side: the data does not say, nothing to check)."""
    if theirs is None or _plain(ours) == _plain(theirs):
        return
    raise ValueError(
        f"model.{name} ({ours}) differs from the data's {name} ({theirs}); the model takes it from the data: "
        f"drop model.{name} from the config (the data decides it)"
    )
