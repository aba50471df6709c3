"""Configs written when :class:`~lightning_tf.kline.KLineDataModule` took flat arguments still run.

The DataModule's settings now come in groups (:mod:`lightning_tf.kline.settings`: ``reading``, ``features``,
``splits``, ``covariates``, ``loading``). A config file, a run's saved ``config.yaml`` or a command line written
before names them flat (``val_start: 2011-01-01``, ``--data.init_args.batch_size 512``). The commands read every
config through :data:`PARSER_MODE`, a YAML loader that moves the flat names of a K-line ``data`` section into
their groups, and :func:`nest_flat_flags` does the same for ``--data.init_args.<name>`` flags when the command's
data class is the K-line one. Each old name is said once, in one warning, with its new place.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

import yaml
from jsonargparse import set_loader

from lightning_tf.kline.settings import FLAT_NAMES, is_flat, nest_flat_arguments

__all__ = ["PARSER_MODE", "nest_flat_flags", "nest_flat_config", "names_kline_data"]

log = logging.getLogger("lightning_tf.kline.settings")

#: the jsonargparse parser mode the commands read configs with (YAML, and the flat K-line names moved)
PARSER_MODE = "lightning_tf"

_KLINE = ("KLineDataModule", "lightning_tf.kline.KLineDataModule", "lightning_tf.kline.data.KLineDataModule")
_state = {"kline": False}  # whether the command being parsed uses the K-line data (set by nest_flat_flags)


def _is_kline(class_path: Any) -> bool:
    return isinstance(class_path, str) and class_path in _KLINE


def _nest_data(section: dict[str, Any], kline: bool, source: str) -> dict[str, Any]:
    """A ``data`` section (``class_path`` and ``init_args``) with its K-line init_args nested."""
    init = section.get("init_args")
    if isinstance(init, dict) and (_is_kline(section.get("class_path")) or ("class_path" not in section and kline)):
        return {**section, "init_args": nest_flat_arguments(init, source)}
    return section


def nest_flat_config(value: Any, source: str = "a config") -> Any:
    """A loaded config with the flat arguments of its K-line ``data`` section moved into their groups (any other
    config as it is)."""
    if not isinstance(value, dict):
        return value
    kline = _state["kline"]
    if "class_path" in value and _is_kline(value.get("class_path")):  # a data section alone (--data file.yaml)
        return _nest_data(value, kline, source)
    out = dict(value)
    if isinstance(out.get("data"), dict):
        out["data"] = _nest_data(out["data"], kline, source)
    for sub in ("fit", "validate", "test", "predict"):  # a config of the whole command
        if isinstance(out.get(sub), dict):
            out[sub] = nest_flat_config(out[sub], source)
    return out


def _load(text: str) -> Any:
    value = yaml.safe_load(text)
    return nest_flat_config(value)


set_loader(PARSER_MODE, _load, exceptions=(yaml.YAMLError,))


def _data_class(args: list[str]) -> str | None:
    """The data class a command's arguments name, the last one winning: ``--data NAME``,
    ``--data.class_path NAME`` or a ``--config`` file's ``data.class_path``."""
    found = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if name in ("--data", "--data.class_path") and not value.lstrip().startswith(("{", "[")):
            if not value.endswith((".yaml", ".yml", ".json")):
                found = value
                continue
        if name in ("--config", "--data") and os.path.isfile(value):
            try:
                with open(value, encoding="utf-8") as f:
                    loaded = yaml.safe_load(f)
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(loaded, dict):
                section = loaded if name == "--data" else loaded.get("data")
                if isinstance(section, dict) and section.get("class_path"):
                    found = str(section["class_path"])
    return found


def _value(text: str) -> Any:
    """A flag's value as YAML reads it (the text itself when it is not YAML)."""
    try:
        return yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return text


def names_kline_data(args: Iterable[str]) -> bool:
    """Whether the command's arguments make the K-line DataModule its data."""
    return _is_kline(_data_class(list(args)))


def nest_flat_flags(args: list[str]) -> list[str]:
    """A command's arguments with each ``--data.init_args.<flat name>`` of the K-line DataModule as
    ``--data.init_args.<group>.<name>`` (arguments of other data classes as they are); records for the YAML loader
    whether the command's data is the K-line one (a config file with ``data.init_args`` but no class path)."""
    kline = _state["kline"] = names_kline_data(args)
    if not kline:
        return list(args)
    out, moved = [], []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        # --data.init_args.<name>, or jsonargparse's shorthand --data.<name>
        prefix = next((p for p in ("--data.init_args.", "--data.") if name.startswith(p)), "")
        field = name[len(prefix) :] if prefix else ""
        if field in FLAT_NAMES and "." not in field:
            following = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if is_flat(field, _value(following)):
                group, key = FLAT_NAMES[field]
                moved.append(f"{field} -> {group}.{key}")
                arg = f"{prefix}{group}.{key}{eq}{value}"
        out.append(arg)
    if moved:
        log.warning(
            "command line: KLineDataModule's flat arguments moved into groups (%s); the old names still work",
            ", ".join(moved),
        )
    return out
