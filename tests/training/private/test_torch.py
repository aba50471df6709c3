"""The torch private names that ``lightning_tf/training/private/torch.py`` relies on still exist and still mean
what it assumes: ``load_state_dict`` calls ``_load_from_state_dict`` once on every submodule, with the submodule's
prefix and a state dict holding its entries (so keys can be renamed in it before they are read), and the arguments
the overrides pass on."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from lightning_tf.training.private.torch import OVERRIDES

ARGUMENTS = [
    "self",
    "state_dict",
    "prefix",
    "local_metadata",
    "strict",
    "missing_keys",
    "unexpected_keys",
    "error_msgs",
]


class Renamed(nn.Module):
    """Reads a checkpoint that named its weight ``old``, as the K-line networks read older layouts."""

    calls: list[str]

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(2))
        self.calls = []

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append(prefix)
        if f"{prefix}old" in state_dict:
            state_dict[f"{prefix}weight"] = state_dict.pop(f"{prefix}old")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def test_load_state_dict_calls_each_submodule_with_its_prefix_and_its_entries() -> None:
    assert list(inspect.signature(nn.Module._load_from_state_dict).parameters) == ARGUMENTS
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(Renamed()))
    inner = model[1][0]
    state = {**{f"0.{k}": v for k, v in model[0].state_dict().items()}, "1.0.old": torch.tensor([1.0, 2.0])}
    model.load_state_dict(state)
    assert inner.calls == ["1.0."]
    assert torch.equal(inner.weight.detach(), torch.tensor([1.0, 2.0]))
    missing, unexpected = model.load_state_dict({**state, "1.0.old": torch.tensor([3.0, 4.0])}, strict=False)
    assert inner.calls == ["1.0.", "1.0."] and missing == unexpected == []
    assert torch.equal(inner.weight.detach(), torch.tensor([3.0, 4.0]))
    assert set(OVERRIDES) == {"torch.nn.modules.module.Module._load_from_state_dict"}
