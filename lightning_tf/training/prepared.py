"""Prepared-data folders: built once by one process, checked against a manifest, memory-mapped by all.

A task describes what its prepared data depends on (settings and the input files' sizes and CRC-32) and
hashes it into a key; :func:`prepare_folder` returns ``<root>/<kind>/<key>``, building it first unless a
finished, intact one is there. A build writes into a temporary folder, ends with ``manifest.json``
(every file's size and CRC-32, written last and atomically) and is renamed into place, under a lock on
the key: a killed build leaves no folder that could be taken for a finished one, and the next run
removes its leftovers and says so. The text corpora (:mod:`lightning_tf.text.corpus`) and the K-line
panels (:mod:`lightning_tf.kline.panel`) are prepared this way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

__all__ = [
    "MANIFEST",
    "check_manifest",
    "crc32",
    "default_cache_root",
    "file_identity",
    "prepare_folder",
    "sha256",
    "write_manifest",
]

MANIFEST = "manifest.json"


def default_cache_root() -> Path:
    """``$LIGHTNING_TF_CACHE``, else ``$XDG_CACHE_HOME/lightning-tf``, else ``~/.cache/lightning-tf``."""
    if os.environ.get("LIGHTNING_TF_CACHE"):
        return Path(os.environ["LIGHTNING_TF_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "lightning-tf"


def sha256(obj: Any) -> str:
    """SHA-256 of ``obj``'s JSON (keys sorted), as hex."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def crc32(path: Path) -> int:
    """CRC-32 of a file's bytes, read in blocks."""
    crc = 0
    with Path(path).open("rb") as f:
        while block := f.read(1 << 24):
            crc = zlib.crc32(block, crc)
    return crc


def file_identity(path: Path) -> dict[str, Any]:
    """A file's name, size and CRC-32: its content, so that a file rewritten within the clock's resolution,
    or copied with its old modification time, still counts as changed (about a second per GB to read)."""
    path = Path(path)
    return {"name": path.name, "bytes": path.stat().st_size, "crc32": crc32(path)}


def write_manifest(directory: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Add the size and CRC-32 of every file in ``directory`` to ``manifest`` and write it as
    ``manifest.json``, last and atomically: a folder without a manifest is an unfinished build."""
    directory = Path(directory)
    files = {
        p.name: {"bytes": p.stat().st_size, "crc32": crc32(p)}
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    manifest = {**manifest, "files": files}
    tmp = directory / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, directory / MANIFEST)
    return manifest


def check_manifest(directory: Path, version: int, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(manifest, None)`` when ``directory`` holds a finished build of ``key`` in format ``version`` whose
    files all have their recorded size and checksum, else ``(None, what is wrong)``."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None, "it has no manifest: its build did not finish"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"its manifest cannot be read ({e})"
    if manifest.get("version") != version or manifest.get("key") != key:
        return None, f"its manifest is for format {manifest.get('version')} key {manifest.get('key')}"
    for name, entry in manifest.get("files", {}).items():
        file = Path(directory) / name
        if not file.is_file():
            return None, f"{name} is missing"
        if file.stat().st_size != entry["bytes"]:
            return None, f"{name} has {file.stat().st_size} bytes, the manifest says {entry['bytes']}"
        if crc32(file) != entry["crc32"]:
            return None, f"{name} does not match its checksum"
    return manifest, None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (released by the system when a process dies)."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): builds stay atomic, a race builds twice
        yield
        return
    with Path(path).open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def prepare_folder(base: Path, key: str, version: int, build: Callable[[Path], dict[str, Any]], what: str) -> Path:
    """The folder ``base / key``, built first by ``build`` unless a finished, intact one is there.

    Args:
        base: the folder of this kind of prepared data (created if missing).
        key: the folder's name, a hash of everything the data depends on.
        version: the layout's version, checked against the manifest.
        build: writes the data into the empty folder it receives and returns the manifest it wrote last
            (:func:`write_manifest`, with ``version``, ``key``, ``seconds`` and ``phase_seconds``).
        what: the data's name in messages (``corpus``, ``panel``).
    """
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    final = base / key
    with locked(base / f"{key}.lock"):
        if final.exists():
            manifest, problem = check_manifest(final, version, key)
            if manifest is not None:
                rank_zero_info(f"reusing the prepared {what} {final}")
                return final
            rank_zero_warn(f"the prepared {what} {final} cannot be used ({problem}); building it again")
            shutil.rmtree(final)
        for stale in base.glob(f"{key}.tmp*"):  # left by a killed build: the lock says nobody builds it now
            rank_zero_warn(f"removing {stale}: an unfinished build of this {what}, left by an interrupted run")
            shutil.rmtree(stale, ignore_errors=True)
        tmp = base / f"{key}.tmp{os.getpid()}"
        tmp.mkdir()
        rank_zero_info(f"preparing the {what} into {final} (once: later runs with the same data and settings reuse it)")
        try:
            manifest = build(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        os.rename(tmp, final)
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in manifest.get("phase_seconds", {}).items())
        rank_zero_info(f"prepared the {what} in {manifest['seconds']:.1f} s ({phases}): {final}")
    return final
