"""Hostile requests against a real ``lightning-tf serve`` of each task (one server per task serves all of its
cases): every case gets the status class it should and an ``{"error": ...}`` line (or its answer), the server is
healthy afterwards, and its memory (PSS of all its processes) has not grown beyond a bound.

The corpus: malformed and deeply nested JSON, wrong content types, invalid UTF-8, lone surrogates, bodies over
the size limit with and without ``Content-Length``, numbers JSON cannot hold, and each task's own: 100k-character
texts, image bombs (a 30000x30000 PNG), NaN/inf/1e308/negative prices, 200k bars, numbers sent as strings, absurd
``top_k``, unknown fields."""

from __future__ import annotations

import base64
import io
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

pytest.importorskip("litserve")

from PIL import Image

from tests.helpers.serve import (
    ServerProcess,
    bars_records,
    png_bomb,
    png_bytes,
    save_checkpoint,
    tiny_kline,
    tiny_text,
    tiny_vit,
)

pytestmark = pytest.mark.integration

#: the servers' body limit (the default)
LIMIT_MB = 32
#: how much the server's processes may grow over the corpus (PSS, MB): what the allocators keep after the largest
#: request (200k bars: an 18 MB body parsed by the HTTP server, queued, validated by the worker) left about 140 MB
#: (1194 -> 1334 MB); text and vision about 20-40 MB
GROWTH_MB = 250

Case = tuple[str, Callable[[ServerProcess], requests.Response | tuple[int, dict[str, Any]]], int]


# ------------------------------------------------------------------------------------------ bodies
def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def minute_bars(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` plain one-minute bars."""
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 1e-3, n)))
    stamps = np.datetime64("2024-01-02T09:30") + np.arange(n).astype("timedelta64[m]")
    return [
        {"timestamp": str(t), "open": c, "high": c * 1.001, "low": c * 0.999, "close": c, "volume": 1000 + i % 7}
        for i, (t, c) in enumerate(zip(stamps, close.tolist(), strict=True))
    ]


# ------------------------------------------------------------------------------------------ sending
def post(raw: bytes, content_type: str | None = "application/json") -> Callable[[ServerProcess], requests.Response]:
    def send(server: ServerProcess) -> requests.Response:
        headers = {"Content-Type": content_type} if content_type else {}
        return requests.post(server.url + "/predict", data=raw, headers=headers, timeout=120)

    return send


def post_json(body: Any) -> Callable[[ServerProcess], requests.Response]:
    return post(json.dumps(body).encode())


def over_the_limit(chunked: bool) -> Callable[[ServerProcess], tuple[int, dict[str, Any]]]:
    """A body larger than the limit on a raw socket: announced by Content-Length (only its start is sent: the
    server must answer from the header), or sent in chunks without a length until past the limit."""

    def send(server: ServerProcess) -> tuple[int, dict[str, Any]]:
        size = LIMIT_MB * 2**20 + 1024
        with socket.create_connection(("127.0.0.1", server.port), timeout=120) as s:
            head = "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            if not chunked:
                s.sendall(f"{head}Content-Length: {size}\r\n\r\n".encode() + b'{"x": "' + b"a" * 1000)
            else:
                s.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
                block = b"a" * 2**20
                try:
                    for _ in range(size // len(block) + 1):
                        s.sendall(b"%x\r\n" % len(block) + block + b"\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server answered and closed as soon as the limit was passed
            reply = b""
            while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < _length(reply):
                data = s.recv(65536)
                if not data:
                    break
                reply += data
        head_text, _, body = reply.partition(b"\r\n\r\n")
        return int(head_text.split()[1]), json.loads(body[: _length(reply)])

    return send


def _length(reply: bytes) -> int:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 1 << 30


def common_cases(key: str) -> list[Case]:
    """What every task's server gets; ``key`` is the task's main field."""
    return [
        ("malformed JSON", post(b'{"' + key.encode() + b'": '), 400),
        ("JSON nested 100,000 levels deep", post(nested(100_000)), 400),
        ("an object nested 100,000 levels deep", post(b'{"a":' * 100_000 + b"1" + b"}" * 100_000), 400),
        ("JSON nested 990 levels deep", post(nested(990)), 400),
        ("a number of 5,000 digits", post(b'{"' + key.encode() + b'": ' + b"9" * 5000 + b"}"), 400),
        ("invalid UTF-8", post(b'{"' + key.encode() + b'": "\xff\xfe\xc3\x28"}'), 400),
        ("UTF-16 with a bad surrogate", post(b'\xff\xfe{\x00"\x00\x00\xd8'), 400),
        ("a JSON array", post(b"[1, 2, 3]"), 400),
        ("a JSON string", post(b'"hello"'), 400),
        ("an empty body", post(b""), 400),
        ("text/plain", post(b"hello there", "text/plain"), 400),
        ("XML", post(b"<request><x>1</x></request>", "application/xml"), 400),
        ("no content type, not JSON", post(b"key=value", None), 400),
        ("multipart without a boundary", post(b"--x\r\n", "multipart/form-data"), 400),
        ("a form of JSON", post(json.dumps({key: "x"}).encode(), "application/x-www-form-urlencoded"), 400),
        ("an unknown field", post_json({key: "x", "admin": True}), 422),
        ("the field missing", post_json({"other": 1}), 422),
        ("a field of the wrong type", post_json({key: {"$gt": ""}}), 422),
        ("over the limit, with Content-Length", over_the_limit(chunked=False), 413),
        ("over the limit, chunked", over_the_limit(chunked=True), 413),
    ]


def text_cases() -> list[Case]:
    return [
        *common_cases("text"),
        ("a 100k-character text", post_json({"text": "word " * 20_000}), 422),
        ("a 100k-character word", post_json({"text": "x" * 100_000}), 422),
        ("an empty text", post_json({"text": "   "}), 422),
        ("a number for the text", post_json({"text": 12}), 422),
        ("a lone surrogate", post(b'{"text": "the dog \\ud800"}'), 422),
        ("NUL characters", post_json({"text": "the \u0000 dog"}), 2),
        ("a good text after all that", post_json({"text": "the dog"}), 2),
    ]


def vision_cases() -> list[Case]:
    b64 = base64.b64encode

    def upload(data: bytes, **fields: str) -> Callable[[ServerProcess], requests.Response]:
        def send(server: ServerProcess) -> requests.Response:
            return requests.post(server.url + "/predict", files={"image": ("x.png", data)}, data=fields, timeout=60)

        return send

    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="GIF")
    return [
        *common_cases("image"),
        ("a 30000x30000 PNG", post_json({"image": b64(png_bomb()).decode()}), 413),
        ("a 30000x30000 PNG uploaded", upload(png_bomb()), 413),
        ("a 1x1000000 PNG (a million pixels: served)", post_json({"image": b64(png_bomb(1, 1_000_000)).decode()}), 2),
        (
            "a 8000x8000 PNG (more than the server's limit)",
            post_json({"image": b64(png_bomb(8000, 8000)).decode()}),
            413,
        ),
        ("a truncated PNG", post_json({"image": b64(png_bytes(0)[:60]).decode()}), 422),
        ("not base64", post_json({"image": "%%% not base64 %%%"}), 422),
        ("base64 of text", post_json({"image": b64(b"plain text").decode()}), 422),
        ("top_k of 10^12", post_json({"image": b64(png_bytes(1)).decode(), "top_k": 10**12}), 2),
        ("top_k of 0", post_json({"image": b64(png_bytes(1)).decode(), "top_k": 0}), 422),
        ("top_k of -5", post_json({"image": b64(png_bytes(1)).decode(), "top_k": -5}), 422),
        ("top_k as a string", post_json({"image": b64(png_bytes(1)).decode(), "top_k": "3"}), 422),
        ("top_k of 3.5", post_json({"image": b64(png_bytes(1)).decode(), "top_k": 3.5}), 422),
        ("top_k in a form, not a number", upload(png_bytes(1), top_k="many"), 422),
        ("an image field twice", upload(png_bytes(1), image="again"), 400),
        ("a good image after all that", post_json({"image": b64(png_bytes(2)).decode()}), 2),
    ]


def kline_cases() -> list[Case]:
    bars = bars_records(80, seed=0)
    flat = dict.fromkeys(("Open", "High", "Low", "Close"), 1e308)

    def with_close(value: Any, raw: bytes | None = None) -> Callable[[ServerProcess], requests.Response]:
        changed = [dict(b) for b in bars]
        changed[40]["Close"] = value
        text = json.dumps({"bars": changed}).encode()
        return post(text.replace(b'"MARK"', raw) if raw else text)

    return [
        *common_cases("bars"),
        ("a NaN close", with_close("MARK", b"NaN"), 422),
        ("an infinite close", with_close("MARK", b"Infinity"), 422),
        ("a close of 1e999", with_close("MARK", b"1e999"), 422),
        ("a close of 1e308", with_close(1e308), 422),
        ("every price 1e308 (a flat series)", post_json({"bars": [{**b, **flat} for b in bars]}), 2),
        ("a negative close", with_close(-12.5), 422),
        ("a close of 0", with_close(0), 422),
        ("a close as a string", with_close(str(bars[40]["Close"])), 2),
        ("a close as a string out of range", with_close("12.5"), 422),
        ("a close as a word", with_close("twelve"), 422),
        ("a close as an object", with_close({"$ne": 1}), 422),
        ("no bars", post_json({"bars": []}), 422),
        ("bars that are numbers", post_json({"bars": [1, 2, 3]}), 422),
        ("one bar", post_json({"bars": bars[:1]}), 422),
        ("dates that are not dates", post_json({"bars": [{**b, "Date": "yesterday"} for b in bars]}), 422),
        ("an unknown field", post_json({"bars": bars, "horizon": 10_000}), 422),
        ("a 100k-character ticker", post_json({"bars": bars, "ticker": "T" * 100_000}), 2),
        ("200k bars", post_json({"bars": minute_bars(200_000)}), 2),
        (
            "two series in one request",
            post_json({"bars": [{**b, "ticker": f"T{i % 2}"} for i, b in enumerate(bars)]}),
            422,
        ),
        (
            "bars with keys the reader ignores (a number, text, null) and one it checks, in any order",
            post_json(
                {"bars": [{"note": "x", "flag": None, **b, "OpenInt": i, "amount": 1.0} for i, b in enumerate(bars)]}
            ),
            2,
        ),
        (
            "a key the reader ignores holding an object",
            post_json({"bars": [{**b, "OpenInt": {"$ne": 1}} for b in bars]}),
            422,
        ),
        (
            "a key the reader ignores holding 1e999",
            post(json.dumps({"bars": [{**b, "OpenInt": "MARK"} for b in bars]}).encode().replace(b'"MARK"', b"1e999")),
            2,
        ),
        ("a negative amount", post_json({"bars": [{**b, "amount": -1.0} for b in bars]}), 422),
        ("good bars after all that", post_json({"bars": bars}), 2),
    ]


# ------------------------------------------------------------------------------------------ the run
def pss_mb(pid: int) -> float:
    """PSS of ``pid`` and its descendants, MB."""
    pids, total = [pid], 0.0
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    while pids:
        p = pids.pop()
        pids.extend(children.get(p, []))
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def run_corpus(server: ServerProcess, cases: list[Case], warm: Callable[[ServerProcess], Any]) -> list[str]:
    """Each case once; what went wrong, one line each. Memory is compared after a first and a last good request."""
    warm(server)
    before = pss_mb(server.proc.pid)
    wrong = []
    for name, send, want in cases:
        try:
            result = send(server)
        except requests.RequestException as err:
            wrong.append(f"{name}: no answer ({type(err).__name__}: {err})")
            continue
        status, body = (result.status_code, _json(result)) if isinstance(result, requests.Response) else result
        # want: an exact status, or its first digit (2: any success, 4: any client error)
        ok = status == want if want >= 100 else status // 100 == want
        if want >= 400 or want == 4:
            ok = ok and isinstance(body, dict) and set(body) == {"error"} and bool(body["error"])
            ok = ok and "\n" not in body["error"] and "internal" not in body["error"].lower()
        if not ok:
            wrong.append(f"{name}: {status} {str(body)[:300]} (wanted {want})")
    warm(server)
    health = requests.get(server.url + "/health", timeout=10)
    if health.status_code != 200:
        wrong.append(f"/health afterwards: {health.status_code}")
    after = pss_mb(server.proc.pid)
    if after - before > GROWTH_MB:
        wrong.append(f"the server's processes grew from {before:.0f} to {after:.0f} MB PSS")
    print(f"PSS {before:.0f} -> {after:.0f} MB over {len(cases)} cases")
    if "Traceback" in server.output():
        wrong.append("the log holds a traceback: " + server.output().split("Traceback", 1)[1][:1500])
    return wrong


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Callable[[Any], ServerProcess]]:
    started: list[ServerProcess] = []

    def start(model: Any) -> ServerProcess:
        server = ServerProcess(save_checkpoint(model, tmp_path / "model.ckpt"), "--max_batch_size", "4")
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


def test_text_server(served: Callable[[Any], ServerProcess]) -> None:
    server = served(tiny_text())
    wrong = run_corpus(server, text_cases(), lambda s: s.post({"text": "the dog"}).raise_for_status())
    assert not wrong, "\n".join(wrong)


def test_vision_server(served: Callable[[Any], ServerProcess]) -> None:
    server = served(tiny_vit())
    image = base64.b64encode(png_bytes(3)).decode()
    wrong = run_corpus(server, vision_cases(), lambda s: s.post({"image": image}).raise_for_status())
    assert not wrong, "\n".join(wrong)


def test_kline_server(served: Callable[[Any], ServerProcess]) -> None:
    server = served(tiny_kline())
    bars = bars_records(80, seed=1)
    wrong = run_corpus(server, kline_cases(), lambda s: s.post({"bars": bars}).raise_for_status())
    assert not wrong, "\n".join(wrong)
