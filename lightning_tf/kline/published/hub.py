"""Where a published model's files come from: a local folder, or a Hugging Face hub name.

A folder holds ``config.json`` and the weights (``model.safetensors``, else ``pytorch_model.bin``), the layout
``save_pretrained`` and ``PyTorchModelHubMixin`` write. A hub name (``owner/name``) is fetched through
``huggingface_hub`` into its cache, or read from that cache alone when ``HF_HUB_OFFLINE=1``; either failing is
one line that says how to get the files. huggingface_hub is imported only here, inside the function that
fetches.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["WEIGHT_FILES", "read_config", "read_weights", "resolve_folder"]

#: the weight files a folder may hold, in the order they are looked for
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_folder(source: str | Path, what: str, cache_dir: str | Path | None = None) -> Path:
    """The local folder of ``source``: the folder itself, or the hub snapshot of a hub name.

    Args:
        source: a folder, or a hub name such as ``NeoQuasar/Kronos-small``.
        what: what is being loaded, for the messages (``"Kronos model"``).
        cache_dir: the Hugging Face cache to use; None: the default one.

    Raises:
        FileNotFoundError: a path that names no folder (neither a folder nor a hub name).
        ValueError: a hub name that cannot be fetched (offline and not cached, unknown, no network).
    """
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    text = str(source)
    if path.exists() or not _HUB_NAME.match(text):
        raise FileNotFoundError(f"{what} {text!r}: no such folder (nor a hub name owner/name)")
    from huggingface_hub import snapshot_download

    patterns = ["config.json", *WEIGHT_FILES]
    advice = (
        f"fetch it once where there is a network (huggingface-cli download {text}) or pass a folder holding "
        f"config.json and {WEIGHT_FILES[0]}"
    )
    if _offline():  # answer at once from the cache, without the hub's retries
        try:
            return Path(snapshot_download(text, allow_patterns=patterns, cache_dir=cache_dir, local_files_only=True))
        except Exception:
            raise ValueError(
                f"{what} {text!r}: HF_HUB_OFFLINE=1 and it is not in the Hugging Face cache; {advice}"
            ) from None
    try:
        return Path(snapshot_download(text, allow_patterns=patterns, cache_dir=cache_dir))
    except Exception as e:  # the hub's errors: no network, an unknown or gated repository, ...
        raise ValueError(f"{what} {text!r}: could not be fetched from the hub ({type(e).__name__}); {advice}") from None


def read_config(folder: Path, what: str) -> dict[str, Any]:
    """``folder/config.json`` as a dict.

    Raises:
        FileNotFoundError: no config.json.
        ValueError: a config.json that is not a JSON object.
    """
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{what} folder {folder} has no config.json")
    config = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a JSON object")
    return config


def read_weights(folder: Path, what: str) -> dict[str, Tensor]:
    """The state dict in ``folder`` (:data:`WEIGHT_FILES`, the first found), on the CPU.

    Raises:
        FileNotFoundError: none of the weight files.
    """
    for name in WEIGHT_FILES:
        path = folder / name
        if path.is_file():
            if path.suffix == ".safetensors":
                from safetensors.torch import load_file

                return load_file(str(path))
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict):
                raise ValueError(f"{path} does not hold a state dict")
            return state
    raise FileNotFoundError(f"{what} folder {folder} has none of {list(WEIGHT_FILES)}")
