"""``lightning-tf serve`` under load, beside its limit, in one run: for each task's checkpoint from the tour,
closed-loop clients on the loopback address at several concurrencies against the batched server, the same
server without batching (``--max_batch_size 1``), and the limit (the same model offline, in batches of the
server's ``max_batch_size``, in this process); then 10,000 requests with 10% bad ones mixed in, checking every
status code and every good answer against the offline call, and the server's resident memory from request
1,000 to the last. Writes ``docs/results/serve.md`` (and ``.json``); the page is generated whole, so a rerun
replaces it.

Checkpoints: ``--text``, ``--vision``, ``--kline``; a task without one is trained by ``lightning-tf tour`` into
``--tour-dir`` (reused when it already holds a tour's checkpoints). A K-line request carries the rows of
``data/msft.csv`` as they are, ``OpenInt`` column included (a column no model reads, as real bars carry them);
``kline_plain`` is the same checkpoint sent the same bars without it (``--kline-bars`` bars a request).
``kline_covariates`` is the K-line task with a model that reads every kind of covariate a request can carry (a past
covariate column of the bars, the exchange calendar's features of the forecast days, a ticker embedding):
``--kline_covariates``, or one trained into ``--tour-dir`` (:func:`kline_covariates_checkpoint`).

``--update`` replaces only the tasks run in the page (``--md`` and its JSON) and keeps the other tasks' rows as
they were measured: the page then says which rows came from which run.

The client is an asyncio HTTP/1.1 client over keep-alive connections with pre-encoded requests (one connection
per concurrent client), so that it costs the shared CPUs as little as a Python client can; its CPU time is
printed. Run::

    python benchmarks/serve.py                     # the tour's checkpoints (trained first if needed), every task
    python benchmarks/serve.py --tasks vision --vision runs/.../best.ckpt
    python benchmarks/serve.py --smoke --tasks vision --vision tiny.ckpt --md /tmp/serve.md   # a smoke run
    python benchmarks/serve.py --tasks kline kline_covariates --concurrency 32 --no-docs --md /tmp/kline.md
    python benchmarks/serve.py --tasks kline kline_plain kline_covariates --update   # the K-line rows of the page
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import math
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TASKS = ("text", "vision", "kline", "kline_plain", "kline_covariates")
#: the targets of the page, on a 2-core CPU
TARGETS = {
    "limit": 0.70,
    "unbatched": {"text": 2.0, "vision": 3.0, "kline": 3.0, "kline_plain": 3.0, "kline_covariates": 3.0},
    "p99_p50": 3.0,
    "rss": 0.10,
}


def liquidity(frame: Any) -> Any:
    """``log(1 + close x volume)`` of each bar: the past covariate of :func:`kline_covariates_checkpoint`."""
    import numpy as np

    return np.log1p(frame["Close"] * frame["Volume"])


#: the past covariates a K-line request of the benchmark can carry, computed from each MSFT bar
COVARIATES = {"liquidity": liquidity}


# ------------------------------------------------------------------------------------------ inputs


@dataclass
class Workload:
    """A task's requests: good bodies (JSON bytes) with their offline answers, and bad bodies with the status
    each must get."""

    task: str
    good: list[bytes]
    expected: list[Any]
    bad: list[tuple[bytes, int, str]]
    offline: Any = None  # the offline call on a list of inputs
    inputs: list[Any] = field(default_factory=list)


def text_workload(model: Any, n: int) -> Workload:
    from lightning_tf.text.synthetic import english_german_pairs

    sentences = [en for en, _ in english_german_pairs(n, seed=20251)]
    limit = model.hparams.max_len
    return Workload(
        "text",
        [json.dumps({"text": s}).encode() for s in sentences],
        [],
        bad=[
            (b'{"text": "an unfinished', 400, "malformed JSON"),
            (b'["a list"]', 400, "not an object"),
            (b'{"txt": "a typo"}', 422, "missing field"),
            (b'{"text": 3}', 422, "wrong type"),
            (b'{"text": "   "}', 422, "empty text"),
            (json.dumps({"text": "word " * (limit + 5)}).encode(), 422, "longer than max_len"),
        ],
        offline=lambda xs: model.translate(xs, batch_size=len(xs)),
        inputs=sentences,
    )


def vision_workload(model: Any, n: int) -> Workload:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    files = []
    for i in range(n):
        buf = io.BytesIO()
        pixels = np.rint(digits.images[i % len(digits.images)] * (255 / 16)).astype(np.uint8)  # as the data module
        Image.fromarray(pixels, mode="L").save(buf, format="PNG")
        files.append(buf.getvalue())

    def classify(batch: list[bytes]) -> list[Any]:
        return model.classify([Image.open(io.BytesIO(b)) for b in batch], top_k=5, batch_size=len(batch))

    return Workload(
        "vision",
        [json.dumps({"image": base64.b64encode(f).decode()}).encode() for f in files],
        [],
        bad=[
            (b'{"image": "iVBOR', 400, "malformed JSON"),
            (b"[1, 2]", 400, "not an object"),
            (b'{"img": "x"}', 422, "missing field"),
            (b'{"image": 7}', 422, "wrong type"),
            (b'{"image": "%%% not base64 %%%"}', 422, "not base64"),
            (json.dumps({"image": base64.b64encode(b"plain text, no image").decode()}).encode(), 422, "not an image"),
        ],
        offline=classify,
        inputs=files,
    )


def kline_workload(model: Any, n: int, bars: int | None = None, plain: bool = False) -> Workload:
    """``n`` series of ``bars`` MSFT bars each (default: the context, the features' warm-up and a margin): the file's
    rows as they are (``plain``: without its ``OpenInt`` column), with the past covariates the model reads."""
    import pandas as pd

    frame = msft_bars(plain)
    cov = model.data_scale.covariates
    if cov.get("future"):
        raise SystemExit(f"the K-line model reads known-future columns {cov['future']}, which a request cannot carry")
    for name in cov.get("past", []):
        if name not in COVARIATES:
            raise SystemExit(
                f"the K-line model reads a past covariate {name!r}; the benchmark makes {list(COVARIATES)}"
            )
        frame[name] = COVARIATES[name](frame)
    length = bars or model.hparams.context_len + 40  # the context, the features' warm-up and a margin
    rng = random.Random(0)
    series = []
    for _ in range(n):
        start = rng.randrange(len(frame) // 2, len(frame) - length)
        series.append(frame.iloc[start : start + length].to_dict(orient="records"))
    bad_nan = json.dumps({"bars": series[0]}).replace(f'"Close": {series[0][30]["Close"]}', '"Close": NaN', 1)

    def forecast(batch: list[list[dict[str, Any]]]) -> list[Any]:
        # zero-padded names: the reader sorts a long table by ticker, so the rows come back in batch order
        table = pd.concat([pd.DataFrame(s).assign(ticker=f"s{i:05d}") for i, s in enumerate(batch)], ignore_index=True)
        from lightning_tf.kline.settings import Reading

        out = model.forecast(table, reading=Reading(ticker_column="ticker"))
        horizon = model.hparams.horizon
        return [out.iloc[i * horizon : (i + 1) * horizon]["pred_log_return"].tolist() for i in range(len(batch))]

    return Workload(
        "kline",
        [json.dumps({"bars": s}).encode() for s in series],
        [],
        bad=[
            (b'{"bars": [', 400, "malformed JSON"),
            (b'"bars"', 400, "not an object"),
            (b'{"rows": []}', 422, "missing field"),
            (json.dumps({"bars": series[0][:20]}).encode(), 422, "too few bars"),
            (
                json.dumps({"bars": [{k: v for k, v in b.items() if k != "Close"} for b in series[0]]}).encode(),
                422,
                "missing column",
            ),
            (bad_nan.encode(), 422, "NaN"),
        ],
        offline=forecast,
        inputs=series,
    )


WORKLOADS = {
    "text": text_workload,
    "vision": vision_workload,
    "kline": kline_workload,
    "kline_plain": lambda model, n, bars=None: kline_workload(model, n, bars, plain=True),
    "kline_covariates": kline_workload,
}


def msft_bars(plain: bool = True) -> Any:
    """The MSFT daily bars of ``data/msft.csv``: Date, Open, High, Low, Close, Volume, and unless ``plain`` the
    file's ``OpenInt`` (a column the reader ignores)."""
    import pandas as pd

    frame = pd.read_csv(ROOT / "data" / "msft.csv")
    return frame.drop(columns=["OpenInt"], errors="ignore") if plain else frame


def answer_of(task: str, body: dict[str, Any]) -> Any:
    """What the offline call's output for one input is compared with."""
    if task == "text":
        return body["translation"]
    if task == "vision":
        return [(p["label"], p["probability"]) for p in body["predictions"]]
    return [row["pred_log_return"] for row in body["forecast"]]


def same(task: str, got: Any, want: Any) -> bool:
    if task == "text":
        return got == want
    if task == "vision":
        return [g[0] for g in got] == [w[0] for w in want] and all(
            abs(g[1] - w[1]) <= 1e-6 for g, w in zip(got, want, strict=True)
        )
    return len(got) == len(want) and all(abs(g - w) <= 1e-6 * max(1.0, abs(w)) for g, w in zip(got, want, strict=True))


# ------------------------------------------------------------------------------------------ offline limit


def offline_limit(work: Workload, batch_size: int, n: int) -> tuple[float, list[Any]]:
    """Items per second of the offline call on ``n`` inputs in batches of ``batch_size`` (after a warm-up batch),
    and its answers for the first ``len(work.inputs)`` inputs."""
    import torch

    with torch.inference_mode():
        work.offline(work.inputs[:batch_size])
        answers: list[Any] = []
        for start in range(0, len(work.inputs), batch_size):
            answers += work.offline(work.inputs[start : start + batch_size])
        begin = time.perf_counter()
        done = 0
        while done < n:
            start = done % len(work.inputs)
            batch = (work.inputs * 2)[start : start + batch_size]
            work.offline(batch)
            done += len(batch)
        seconds = time.perf_counter() - begin
    return done / seconds, answers


# ------------------------------------------------------------------------------------------ the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A ``lightning-tf serve`` subprocess on 127.0.0.1 (own process group), healthy on return."""

    def __init__(self, checkpoint: Path, *args: str) -> None:
        self.port = free_port()
        env = {**os.environ, "LIT_SERVER_API_KEY": ""}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lightning_tf", "serve", str(checkpoint), "--port", str(self.port), *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.proc.stderr.read()[-2000:] if self.proc.stderr else ''}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if s.recv(64).startswith(b"HTTP/1.1 200"):
                        return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("the server did not become healthy in 300 s")

    def info(self) -> dict[str, Any]:
        """The server's ``GET /info``."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

    def roles(self) -> dict[int, str]:
        """The server's processes by role: ``command`` (the server process, which watches the others), ``worker``
        (the inference workers), ``queues`` (LitServe's multiprocessing manager: the first process forked; it holds
        the workers' status, while requests and answers go through pipes) and ``http`` (the uvicorn servers, forked
        after it)."""
        rows = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid and b"resource_tracker" not in cmdline:
                rows.append((int(fields[19]), int(entry), b"spawn_main" in cmdline))
        forked = sorted((start, pid) for start, pid, spawned in rows if not spawned)
        roles = {self.proc.pid: "command"}
        for start, pid, spawned in rows:
            roles[pid] = "worker" if spawned else ("queues" if (start, pid) == forked[0] else "http")
        return roles

    def _by_role(self, read: Any) -> dict[str, float]:
        out = {"command": 0.0, "http": 0.0, "queues": 0.0, "worker": 0.0}
        for pid, role in self.roles().items():
            try:
                out[role] += read(pid)
            except OSError:
                pass
        return out

    def cpu_by_role(self) -> dict[str, float]:
        """CPU seconds so far of the server's processes, by role (:meth:`roles`)."""
        tick = os.sysconf("SC_CLK_TCK")

        def cpu(pid: int) -> float:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick

        return self._by_role(cpu)

    def memory_by_role(self) -> dict[str, float]:
        """Resident memory of the server's processes in MB, by role, as unique set sizes (USS: the resident pages no
        other process maps; a leak grows them, while a proportional share of the shared libraries would move with
        whatever else on the machine maps them)."""

        def uss(pid: int) -> float:
            kb = 0
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    kb += int(line.split()[1])
            return kb / 1024

        return self._by_role(uss)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.proc.wait()


# ------------------------------------------------------------------------------------------ the client


def request_bytes(port: int, body: bytes) -> bytes:
    head = (
        f"POST /predict HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes) -> tuple[int, bytes, int]:
    """One request on a keep-alive connection: the status, the body and the ``X-Batch-Size`` (0 when absent)."""
    writer.write(raw)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    size = re.search(rb"(?i)\r\nx-batch-size: *(\d+)", head)
    body = await reader.readexactly(int(length.group(1))) if length else b""
    return status, body, int(size.group(1)) if size else 0


@dataclass
class Load:
    """One closed-loop run: every request's latency and status, and what it took."""

    seconds: float
    latencies: list[float]
    statuses: list[int]
    client_cpu: float
    wrong: int = 0
    lost: int = 0
    rss_at: dict[int, dict[str, float]] = field(default_factory=dict)
    batch_sizes: list[int] = field(default_factory=list)


def closed_loop(
    server: Server, bodies: list[tuple[bytes, int, Any]], concurrency: int, task: str, rss_marks: tuple[int, ...] = ()
) -> Load:
    """``concurrency`` clients send ``bodies`` (body, expected status, expected answer or None) in order, each the
    next one when its previous answer came; statuses and good answers are checked."""
    raws = [request_bytes(server.port, body) for body, _, _ in bodies]
    latencies: list[float] = [math.nan] * len(bodies)
    statuses = [0] * len(bodies)
    sizes: list[int] = []
    counters = {"next": 0, "done": 0, "wrong": 0, "lost": 0}
    rss: dict[int, float] = {}

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            while counters["next"] < len(bodies):
                i = counters["next"]
                counters["next"] += 1
                begin = time.perf_counter()
                try:
                    status, body, size = await exchange(reader, writer, raws[i])
                except (OSError, asyncio.IncompleteReadError):
                    status, body, size = 0, b"", 0
                    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                if size:
                    sizes.append(size)
                latencies[i] = time.perf_counter() - begin
                statuses[i] = status
                _, want_status, want = bodies[i]
                if status != want_status:
                    counters["wrong"] += 1
                    if want_status == 200:
                        counters["lost"] += 1
                elif want is not None and not same(task, answer_of(task, json.loads(body)), want):
                    counters["lost"] += 1
                counters["done"] += 1
                if counters["done"] in rss_marks:
                    rss[counters["done"]] = server.memory_by_role()
        finally:
            writer.close()

    async def run() -> None:
        await asyncio.gather(*(client() for _ in range(concurrency)))

    cpu, begin = time.process_time(), time.perf_counter()
    asyncio.run(run())
    return Load(
        time.perf_counter() - begin,
        latencies,
        statuses,
        time.process_time() - cpu,
        counters["wrong"],
        counters["lost"],
        rss,
        sizes,
    )


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(load: Load) -> dict[str, float]:
    ok = sum(s == 200 for s in load.statuses)
    return {
        "requests": len(load.statuses),
        "ok": ok,
        "errors": len(load.statuses) - ok,
        "mean_batch": sum(load.batch_sizes) / len(load.batch_sizes) if load.batch_sizes else math.nan,
        "throughput": ok / load.seconds,
        "p50_ms": 1e3 * quantile(load.latencies, 0.50),
        "p95_ms": 1e3 * quantile(load.latencies, 0.95),
        "p99_ms": 1e3 * quantile(load.latencies, 0.99),
        "seconds": load.seconds,
        "client_cpu_s": load.client_cpu,
    }


# ------------------------------------------------------------------------------------------ checkpoints


def tour_checkpoints(folder: Path) -> dict[str, Path]:
    """The tour's checkpoints in ``folder`` (``runs/tour_summary.md`` there), training them first if needed."""
    summary_file = folder / "runs" / "tour_summary.md"
    if not summary_file.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        print(
            f"training the tour's checkpoints into {folder} (lightning-tf tour, about 7 minutes on 2 cores)", flush=True
        )
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
        subprocess.run(
            [sys.executable, "-m", "lightning_tf", "tour", "--root", str(ROOT)], cwd=folder, env=env, check=True
        )
    found = dict(re.findall(r"^- (\w+): checkpoint `([^`]+)`", summary_file.read_text(), re.M))
    return {task: (folder / path) for task, path in found.items() if path != "none"}


def kline_covariates_checkpoint(folder: Path) -> Path:
    """A K-line model that reads every kind of covariate a request can carry, trained into
    ``folder/kline_covariates`` unless it is there: ``configs/kline/msft_daily.yaml`` for one epoch (the model's
    size is the tour's; its skill does not matter here) on the MSFT bars with a past covariate ``liquidity``
    (:data:`COVARIATES`), the NYSE calendar's features of the forecast days (known in advance) and a ticker
    embedding, channels mixed so that the past covariate reaches the forecast."""
    out = (folder / "kline_covariates").resolve()  # the fit runs in it: a relative root would nest under it
    checkpoint = out / "checkpoints" / "last.ckpt"
    if checkpoint.is_file():
        return checkpoint
    out.mkdir(parents=True, exist_ok=True)
    frame = msft_bars()
    frame["liquidity"] = COVARIATES["liquidity"](frame)
    frame.to_csv(out / "msft.csv", index=False)
    print(f"training a K-line model with covariates into {out} (one epoch, about a minute on 2 cores)", flush=True)
    command = [
        *(sys.executable, "-m", "lightning_tf", "fit"),
        *("--config", str(ROOT / "configs" / "trainer" / "default.yaml")),
        *("--config", str(ROOT / "configs" / "kline" / "msft_daily.yaml")),
        *("--data.init_args.path", str(out / "msft.csv")),
        *("--data.init_args.covariates.past", "[liquidity]"),
        *("--data.init_args.covariates.calendar", "XNYS"),
        *("--data.init_args.covariates.ticker_embedding", "true"),
        *("--model.init_args.channel_mixing", "true"),
        *("--trainer.max_epochs", "1"),
        *("--trainer.logger", "false"),
        *("--trainer.enable_progress_bar", "false"),
        *("--trainer.default_root_dir", str(out)),
    ]
    subprocess.run(command, cwd=out, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True)
    if not checkpoint.is_file():
        raise SystemExit(f"the K-line model with covariates trained, but {checkpoint} is not there")
    return checkpoint


# ------------------------------------------------------------------------------------------ the run


def machine() -> str:
    import torch
    from core_layers import cpu_model

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpu_model()}, {cores} cores | torch {torch.__version__} | load average at start {load}"


def load_average() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def run_task(task: str, checkpoint: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from lightning_tf.export import load_module
    from lightning_tf.serve.api import worker_threads

    batch = args.max_batch_size
    torch.set_num_threads(worker_threads(None, 1))  # what the server's one CPU worker uses
    model = load_module(checkpoint).eval()
    work = (
        WORKLOADS[task](model, args.pool, args.kline_bars)
        if task.startswith("kline")
        else WORKLOADS[task](model, args.pool)
    )
    print(f"[{task}] offline limit: batches of {batch}, {args.offline_items} items ...", flush=True)
    limit, answers = offline_limit(work, batch, args.offline_items)
    print(f"[{task}] offline limit: {limit:.1f} items/s", flush=True)
    work.expected = answers
    costs = worker_costs(task, model, work, batch)
    print(
        f"[{task}] in a worker: reading a request {costs['decode_ms']:.2f} ms, the model {costs['run_1_ms']:.2f} ms "
        f"per request alone, {costs['run_batch_ms']:.2f} ms per request in a batch of {batch}",
        flush=True,
    )
    del model
    good = [(body, 200, answers[i]) for i, body in enumerate(work.good)]
    result: dict[str, Any] = {
        "task": task,
        "checkpoint": str(checkpoint),
        "max_batch_size": batch,
        "batch_timeout": args.batch_timeout,
        **({"bars_per_request": len(work.inputs[0])} if task.startswith("kline") else {}),
        "limit": limit,
        "worker_costs": costs,
        "loads": {},
    }
    timeout = [] if args.batch_timeout is None else ["--batch_timeout", str(args.batch_timeout)]
    servers: dict[str, Server] = {}
    try:
        # both servers up for the whole task: each sweep runs while the other idles (its worker blocks on its
        # queue), then the paired rounds go to both
        for name, server_args in (
            ("batched", ["--max_batch_size", str(batch), *timeout]),
            ("unbatched", ["--max_batch_size", "1"]),
        ):
            print(f"[{task}] starting the {name} server ...", flush=True)
            servers[name] = Server(checkpoint, *server_args)
        for name, server in servers.items():
            closed_loop(server, good[: 2 * batch], min(8, batch), task)  # warm-up
            if name == "batched":
                result["batch_timeout"] = server.info()["model"]["batching"]["batch_timeout"]
            for c in args.concurrency:
                n = max(args.requests_per_client * c, args.min_requests)
                before = server.cpu_by_role()
                load = closed_loop(server, [good[i % len(good)] for i in range(n)], c, task)
                after = server.cpu_by_role()
                row = summary(load)
                row["lost"] = load.lost
                row["cpu_ms_per_request"] = {
                    role: 1e3 * (after[role] - before[role]) / max(1, row["ok"]) for role in after
                } | {"client": 1e3 * load.client_cpu / max(1, row["ok"])}
                result["loads"][f"{name}/{c}"] = row
                print(
                    f"[{task}] {name:9s} c={c:<3d} {row['ok']:>6,} ok in {row['seconds']:5.1f} s: "
                    f"{row['throughput']:7.1f} req/s, p50 {row['p50_ms']:6.1f} ms, p99 {row['p99_ms']:6.1f} ms, "
                    f"mean batch {row['mean_batch']:.1f}, {row['errors']} errors, client CPU "
                    f"{row['client_cpu_s']:.1f} s",
                    flush=True,
                )
            if name == "batched":
                result["mixed"] = mixed_run(server, work, good, args, task)
        if args.rounds:
            result["rounds"] = paired_rounds(task, servers, good, args)
    finally:
        for name, server in servers.items():
            status = server.stop()
            if status != 0:
                print(f"[{task}] the {name} server exited with {status}", flush=True)
    return result


def paired_rounds(
    task: str, servers: dict[str, Server], good: list[tuple[bytes, int, Any]], args: argparse.Namespace
) -> list[dict[str, float]]:
    """The targets' throughputs, measured in pairs: with the batched and the unbatched server both running (an
    idle worker blocks on its queue, costing nothing), ``args.rounds`` rounds of ``args.round_requests`` requests at
    the target concurrency to each, one right after the other, the order alternating from round to round, so that
    what the machine does meanwhile weighs on both alike. One short run per server moves with the machine's
    state: on a shared 2-core machine one pass of 512 requests put the digits ViT at 4.4x, its rounds at 3.4-4.2x."""
    c = args.target_concurrency
    n = max(args.round_requests, c)
    rounds = []
    for k in range(args.rounds):
        order = ("batched", "unbatched") if k % 2 == 0 else ("unbatched", "batched")
        rates = {}
        for name in order:
            load = closed_loop(servers[name], [good[i % len(good)] for i in range(n)], c, task)
            rates[name] = summary(load)["throughput"]
        rounds.append({**rates, "ratio": rates["batched"] / rates["unbatched"]})
        print(
            f"[{task}] round {k + 1}/{args.rounds} at c={c}: batched {rates['batched']:.1f} req/s, unbatched "
            f"{rates['unbatched']:.1f} req/s: {rounds[-1]['ratio']:.2f}x",
            flush=True,
        )
    return rounds


def worker_costs(task: str, model: Any, work: Workload, batch: int, repeats: int = 3) -> dict[str, float]:
    """What the server's worker spends per request, measured here on its own LitAPI (no server): reading a
    request (``decode_request``: JSON object -> the task's input) and the model's part (``run``: the offline call
    with the answer's conversion) alone and in a full batch, in milliseconds."""
    import torch

    from lightning_tf.serve.api import Serving
    from lightning_tf.serve.server import APIS

    api = APIS[type(model).__name__]("unused.ckpt", Serving(max_batch_size=batch))
    api.model = model
    bodies = [json.loads(body) for body in work.good[:batch]]

    def best(fn: Any) -> float:
        times = []
        for _ in range(repeats):
            begin = time.perf_counter()
            fn()
            times.append(time.perf_counter() - begin)
        return min(times)

    with torch.inference_mode():
        items = [api.decode_request(b) for b in bodies]
        decode = best(lambda: [api.decode_request(b) for b in bodies]) / len(bodies)
        run_batch = best(lambda: api.run(items)) / len(items)
        run_1 = best(lambda: [api.run([x]) for x in items[:8]]) / min(8, len(items))
    return {"decode_ms": 1e3 * decode, "run_1_ms": 1e3 * run_1, "run_batch_ms": 1e3 * run_batch}


def mixed_run(
    server: Server, work: Workload, good: list[tuple[bytes, int, Any]], args: argparse.Namespace, task: str
) -> dict[str, Any]:
    """``args.mixed`` requests, every tenth a bad one, at concurrency ``args.mixed_concurrency``."""
    rng = random.Random(1)
    bodies: list[tuple[bytes, int, Any]] = []
    for i in range(args.mixed):
        if i % 10 == 9:
            body, status, _ = work.bad[rng.randrange(len(work.bad))]
            bodies.append((body, status, None))
        else:
            bodies.append(good[rng.randrange(len(good))])
    first, last = args.rss_from, args.mixed
    print(f"[{task}] {args.mixed:,} requests, 10% bad, at concurrency {args.mixed_concurrency} ...", flush=True)
    load = closed_loop(server, bodies, args.mixed_concurrency, task, rss_marks=(first, last))
    row = summary(load)
    bad = sum(1 for _, s, _ in bodies if s != 200)
    at_first, at_last = load.rss_at.get(first, {}), load.rss_at.get(last, {})
    row.update(
        bad=bad,
        wrong_status=load.wrong,
        good_lost=load.lost,
        rss_first_mb=sum(at_first.values()) or math.nan,
        rss_last_mb=sum(at_last.values()) or math.nan,
        rss_from=first,
        rss_to=last,
        rss_first_by_role=at_first,
        rss_last_by_role=at_last,
    )
    row["rss_growth"] = row["rss_last_mb"] / row["rss_first_mb"] - 1
    growth = ", ".join(f"{role} {at_first[role]:.0f} -> {at_last[role]:.0f}" for role in at_first if role in at_last)
    print(
        f"[{task}] mixed: {row['ok']:,} ok, {bad:,} bad, {load.wrong} wrong status codes, {load.lost} good lost; "
        f"RSS {row['rss_first_mb']:.0f} MB at request {first:,} -> {row['rss_last_mb']:.0f} MB at {last:,} "
        f"({100 * row['rss_growth']:+.1f}%; {growth} MB)",
        flush=True,
    )
    return row


# ------------------------------------------------------------------------------------------ the page


def where_the_time_goes(results: list[dict[str, Any]]) -> list[str]:
    """Per request: the worker's parts (measured on its LitAPI alone) and the CPU of each of the server's processes
    under load, batched and unbatched, at the target concurrency."""
    lines = [
        "## Where the time goes",
        "",
        "Per request, in ms. *read*: the worker turning a JSON object into the task's input (`decode_request`; "
        "K-line: the bars parsed into arrays, the windows of a batch's series being computed together in `run`); "
        "*model alone / in a batch*: the task's call with the answer's conversion (`run`) for one request, and "
        "per request in a full batch (both measured on the LitAPI alone, in the benchmark's process). Then the "
        "CPU each process of the server spent per answered request under load: the worker, the HTTP server "
        "(uvicorn, FastAPI, LitServe's request handling), LitServe's multiprocessing manager (*queues*: the "
        "workers' status; requests and answers go through pipes, whose cost is the sender's and the reader's), the "
        "server process (*command*, which watches the others) and the client. On C cores, C x 1000 / (their sum) "
        "bounds the requests per second.",
        "",
        "| task | read | model alone | model in a batch | server | worker | HTTP | queues | command | client "
        "| sum "
        "| bound (req/s, 2 cores) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        costs = r.get("worker_costs", {})
        for name in ("batched", "unbatched"):
            key = next((k for k in r["loads"] if k.startswith(name + "/") and k.endswith("/32")), None)
            key = key or next((k for k in reversed(list(r["loads"])) if k.startswith(name + "/")), None)
            if key is None or "cpu_ms_per_request" not in r["loads"][key]:
                continue
            cpu = r["loads"][key]["cpu_ms_per_request"]
            total = sum(cpu.values())
            lines.append(
                f"| {r['task']} | {costs.get('decode_ms', math.nan):.2f} | {costs.get('run_1_ms', math.nan):.2f} | "
                f"{costs.get('run_batch_ms', math.nan):.2f} | {key} | {cpu['worker']:.2f} | {cpu['http']:.2f} | "
                f"{cpu['queues']:.2f} | {cpu['command']:.2f} | {cpu['client']:.2f} | {total:.2f} | "
                f"{2000 / total:.0f} |"
            )
    lines += [
        "",
        "Memory of the server's processes in the mixed run (USS, MB), at its first and last mark:",
        "",
        "| task | requests | command | HTTP | queues | worker | all |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        m = r.get("mixed", {})
        first, last = m.get("rss_first_by_role") or {}, m.get("rss_last_by_role") or {}
        if first and last:
            cells = " | ".join(f"{first[k]:.0f} -> {last[k]:.0f}" for k in ("command", "http", "queues", "worker"))
            lines.append(
                f"| {r['task']} | {m['rss_from']:,} -> {m['rss_to']:,} | {cells} | "
                f"{m['rss_first_mb']:.0f} -> {m['rss_last_mb']:.0f} ({100 * m['rss_growth']:+.1f}%) |"
            )
    return lines


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def tables(results: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """The load table (every task, server and concurrency, and the limit) and the targets table."""
    c_main, c_tail = args.target_concurrency, args.tail_concurrency
    lines = [
        "| task | server | concurrency | requests | req/s | x limit | x unbatched | mean batch | p50 ms | p95 ms | "
        "p99 ms | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for key, row in r["loads"].items():
            name, c = key.split("/")
            unbatched = r["loads"].get(f"unbatched/{c}")
            vs_unbatched = row["throughput"] / unbatched["throughput"] if name == "batched" and unbatched else math.nan
            lines.append(
                f"| {r['task']} | {name} | {c} | {row['requests']:,} | {row['throughput']:.1f} | "
                f"{row['throughput'] / r['limit']:.2f} | {'' if math.isnan(vs_unbatched) else f'{vs_unbatched:.2f}'} | "
                f"{row['mean_batch']:.1f} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['p99_ms']:.1f} | "
                f"{row['errors']} |"
            )
        lines.append(
            f"| {r['task']} | limit (offline) | - | {args.offline_items:,} | {r['limit']:.1f} | 1.00 | | "
            f"{r['max_batch_size']} | | | | |"
        )
    rounds = (
        f" The throughput ratios are the medians (and ranges) of {args.rounds} paired rounds of "
        f"{max(args.round_requests, c_main):,} requests to each server, both running, the order alternating "
        "(the rows above are one pass per server)."
        if args.rounds
        else ""
    )
    lines += [
        "",
        f"Targets: at concurrency {c_main} (the tail at {c_tail}; the mixed run at concurrency "
        f"{args.mixed_concurrency}).{rounds}",
        "",
        "| task | batched / limit (>= 0.70) | batched / unbatched | p99 / p50 (<= 3) | wrong status codes "
        "(0) | good requests lost (0) | memory growth (<= 10%) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b = r["loads"].get(f"batched/{c_main}")
        u = r["loads"].get(f"unbatched/{c_main}")
        t = r["loads"].get(f"batched/{c_tail}")
        m = r.get("mixed", {})
        if not (b and u and t and m):
            continue
        want_u = TARGETS["unbatched"][r["task"]]
        x_limit, x_unbatched = b["throughput"] / r["limit"], b["throughput"] / u["throughput"]
        spread_limit = spread_unbatched = ""
        if r.get("rounds"):  # the paired rounds' medians, and their range
            ratios = [x["ratio"] for x in r["rounds"]]
            limits = [x["batched"] / r["limit"] for x in r["rounds"]]
            x_limit, x_unbatched = statistics.median(limits), statistics.median(ratios)
            spread_limit = f" ({min(limits):.2f}-{max(limits):.2f})"
            spread_unbatched = f" ({min(ratios):.2f}-{max(ratios):.2f})"
        tail = t["p99_ms"] / t["p50_ms"]
        lines.append(
            f"| {r['task']} | {x_limit:.2f}{spread_limit} {verdict(x_limit >= TARGETS['limit'])} | "
            f"{x_unbatched:.2f}{spread_unbatched} (>= {want_u:g}) "
            f"{verdict(x_unbatched >= want_u)} | {tail:.2f} {verdict(tail <= TARGETS['p99_p50'])} | "
            f"{m['wrong_status']} of {m['requests']:,} ({m['bad']:,} bad) {verdict(m['wrong_status'] == 0)} | "
            f"{m['good_lost']} {verdict(m['good_lost'] == 0)} | {m['rss_first_mb']:.0f} -> {m['rss_last_mb']:.0f} MB "
            f"({100 * m['rss_growth']:+.1f}%, requests {m['rss_from']:,} -> {m['rss_to']:,}) "
            f"{verdict(m['rss_growth'] <= TARGETS['rss'])} |"
        )
    return lines


def runs(results: list[dict[str, Any]]) -> list[tuple[list[str], dict[str, Any]]]:
    """The runs the rows of ``results`` come from, in order: the tasks of each, and the run (machine, load, time)."""
    out: list[tuple[list[str], dict[str, Any]]] = []
    for r in results:
        same = next((tasks for tasks, run in out if run == r["run"]), None)
        if same is None:
            out.append(([r["task"]], r["run"]))
        else:
            same.append(r["task"])
    return out


def run_line(run: dict[str, Any]) -> str:
    """One run in words: its machine, the load average at its start and end, K-line bars, minutes."""
    parts = [run["machine"]]
    if run.get("load_end"):
        parts[-1] += f", at the end {run['load_end']}"
    if run.get("bars_per_request"):
        parts.append(f"K-line requests of {run['bars_per_request']} bars")
    if run.get("minutes") is not None:
        parts.append(f"{run['minutes']:.1f} minutes in all")
    return "; ".join(parts)


def measured_on(results: list[dict[str, Any]]) -> str:
    """Where the rows were measured: the machine of one run, or each run's tasks and machine."""
    done = runs(results)
    if len(done) == 1:
        return run_line(done[0][1])
    return "; ".join(f"{', '.join(tasks)} in one run ({run_line(run)})" for tasks, run in done)


def page(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    done = runs(results)
    if len(done) == 1:
        where = [f"machine: {run_line(done[0][1])}"]
    else:
        where = ["Each task's rows come from one run (`--update` replaced the rows of the tasks it ran):", ""]
        where += [f"- {', '.join(tasks)}: {run_line(run)}" for tasks, run in done]
    lines = [
        "# `lightning-tf serve` under load",
        "",
        "Generated by `python benchmarks/serve.py` (do not edit: a rerun replaces this page, and the tables in "
        "docs/serve.md and docs/benchmarks.md)"
        f"{'; a SMOKE run (tiny request counts): not a measurement' if args.smoke else ''}.",
        "",
        *where,
        "",
        *method(results, args),
        "",
        *tables(results, args),
        "",
        *where_the_time_goes(results),
    ]
    return "\n".join(lines)


#: what the rows of a page share, whichever run they came from: the measurement's settings (:func:`settings`)
SETTINGS = (
    "concurrency",
    "requests_per_client",
    "min_requests",
    "max_batch_size",
    "batch_timeout",
    "offline_items",
    "pool",
    "mixed",
    "mixed_concurrency",
    "rss_from",
    "rounds",
    "round_requests",
    "smoke",
)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k) for k in SETTINGS}


def earlier_results(json_path: Path, md: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The results of a page (its JSON) for the tasks not run now, each with the run it came from (a page written
    before runs were recorded: its machine line, the minutes its page gives, the default settings); an error
    unless they were measured with this run's settings."""
    if not json_path.is_file():
        return []
    earlier = json.loads(json_path.read_text())
    minutes = re.search(r"([0-9.]+) minutes in all", md.read_text()) if md.is_file() else None
    defaults = settings(build_parser().parse_args([]))
    run = {"machine": earlier["machine"], "minutes": float(minutes.group(1)) if minutes else None} | {
        "settings": {**defaults, "smoke": earlier.get("smoke", False)}
    }
    kept = [{"run": run, **r} for r in earlier["results"] if r["task"] not in args.tasks]
    for r in kept:
        if r["run"]["settings"] != settings(args):
            theirs, ours = r["run"]["settings"], settings(args)
            differ = ", ".join(
                f"{k} {theirs.get(k)} there, {ours[k]} here" for k in SETTINGS if theirs.get(k) != ours[k]
            )
            raise SystemExit(f"--update: the {r['task']} rows of {json_path} were measured otherwise ({differ})")
    return kept


def batch_timeouts(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    if args.batch_timeout is not None:
        return f"`--batch_timeout {args.batch_timeout}`"
    return (
        "the batch timeout of each task's default ("
        + ", ".join(f"{r['task']} {r['batch_timeout']:g} s" for r in results)
        + ")"
    )


def method(results: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    return [
        f"Closed-loop clients on 127.0.0.1 (one keep-alive connection each), {args.requests_per_client} requests per "
        f"client (at least {args.min_requests}) at each concurrency. *batched*: `--max_batch_size "
        f"{args.max_batch_size}` and {batch_timeouts(results, args)}; *unbatched*: `--max_batch_size 1`; both one "
        f"worker with {args.threads} intra-op thread(s) (the default: the CPUs less one). *limit*: the same model "
        "offline in the benchmark's process, the task's own call (`translate`, `classify`, `forecast`) on batches of "
        f"{args.max_batch_size} of the same inputs, with the same threads. Throughput counts answered requests (200) "
        "per second; *mean batch* is the mean `X-Batch-Size` the answers carried. A K-line request is one series of "
        "bars of `data/msft.csv` (the context, the features' warm-up and a margin, unless the run says otherwise), "
        "its rows as the file has them, `OpenInt` included (a column the model does not read); *kline_plain* is the "
        "same checkpoint sent the same bars without it; *kline_covariates* sends the file's rows with the past "
        "covariate the model reads.",
        "",
        "Mixed run: every tenth request is a bad one (malformed JSON, not an object, a missing or wrongly typed "
        "field, and the task's own: an empty or too long text, base64 that is not an image, too few bars, a missing "
        "column, NaN), each of which must get its 400 or 422; every good answer is compared with the offline call "
        "(the same translation; labels and probabilities within 1e-6; forecasts within 1e-6). Memory: the resident "
        "memory of the server's processes, summed as unique set sizes (USS: the pages no other process maps, so that "
        "the number does not move with other programs that map the same libraries).",
    ]


def replace_block(path: Path, text: str) -> None:
    """Put ``text`` between ``<!-- serve-results:begin -->`` and ``<!-- serve-results:end -->`` of ``path``."""
    begin, end = "<!-- serve-results:begin -->", "<!-- serve-results:end -->"
    doc = path.read_text()
    if begin not in doc or end not in doc:
        raise ValueError(f"{path}: no {begin} ... {end} block to write the tables into")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{text}\n{end}{tail}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    for task in TASKS:
        p.add_argument(f"--{task}", type=Path, default=None, help=f"the {task} checkpoint (default: the tour's)")
    p.add_argument(
        "--tour-dir",
        type=Path,
        default=ROOT / "runs" / "serve_bench",
        help="where the tour trains the checkpoints not given (and where they are found next time)",
    )
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--requests-per-client", type=int, default=16)
    p.add_argument("--min-requests", type=int, default=200)
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--batch-timeout", type=float, default=None, help="the batched server's (default: the task's)")
    p.add_argument("--offline-items", type=int, default=2048)
    p.add_argument("--pool", type=int, default=256, help="distinct inputs per task")
    p.add_argument("--mixed", type=int, default=10_000, help="requests of the run with 10%% bad ones")
    p.add_argument("--mixed-concurrency", type=int, default=32)
    p.add_argument("--rss-from", type=int, default=1_000)
    p.add_argument(
        "--rounds", type=int, default=5, help="paired rounds of the batched and unbatched servers for the targets"
    )
    p.add_argument("--round-requests", type=int, default=2048, help="requests to each server per round")
    p.add_argument("--smoke", action="store_true", help="tiny request counts (a smoke test, not a measurement)")
    p.add_argument("--md", type=Path, default=ROOT / "docs" / "results" / "serve.md")
    p.add_argument("--json", type=Path, default=None, help="JSON results (default: beside --md)")
    p.add_argument("--kline-bars", type=int, default=None, help="bars per K-line request (default: context_len + 40)")
    p.add_argument(
        "--update",
        action="store_true",
        help="replace only the tasks run in the page (--md and its JSON), keeping the other tasks' rows",
    )
    p.add_argument(
        "--no-docs",
        dest="docs",
        action="store_false",
        help="leave the tables of docs/serve.md and docs/benchmarks.md as they are (a smoke run does)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    p = build_parser()
    args = p.parse_args(argv)
    if args.smoke and args.update:
        p.error("--update keeps measured rows beside this run's: not with --smoke")
    if args.smoke:
        args.docs = False
    if args.smoke:
        args.concurrency, args.requests_per_client, args.min_requests = [1, 8], 3, 16
        args.offline_items, args.pool, args.mixed, args.rss_from, args.mixed_concurrency = 64, 16, 200, 50, 8
        args.rounds, args.round_requests = 2, 16
        args.max_batch_size = min(args.max_batch_size, 8)
    args.target_concurrency = 32 if 32 in args.concurrency else max(args.concurrency)
    args.tail_concurrency = 8 if 8 in args.concurrency else min(args.concurrency)
    from lightning_tf.serve.api import worker_threads

    args.threads = worker_threads(None, 1)
    begin = time.perf_counter()
    machine_line = machine()
    print(f"machine: {machine_line}", flush=True)
    checkpoints = {t: getattr(args, t) for t in args.tasks if getattr(args, t) is not None}
    if "kline_plain" in args.tasks and "kline_plain" not in checkpoints and args.kline is not None:
        checkpoints["kline_plain"] = args.kline  # the same model, sent plain bars
    if "kline_covariates" in args.tasks and "kline_covariates" not in checkpoints:
        checkpoints["kline_covariates"] = kline_covariates_checkpoint(args.tour_dir)
    missing = [t for t in args.tasks if t not in checkpoints]
    if missing:
        tour = tour_checkpoints(args.tour_dir)
        checkpoints |= {t: tour["kline" if t == "kline_plain" else t] for t in missing}
    results = [run_task(task, Path(checkpoints[task]), args) for task in args.tasks]
    bars = {r["bars_per_request"] for r in results if "bars_per_request" in r}
    run = {
        "machine": machine_line,
        "load_end": load_average(),
        "minutes": (time.perf_counter() - begin) / 60,
        "settings": settings(args),
        **({"bars_per_request": bars.pop()} if len(bars) == 1 else {}),
    }
    for r in results:
        r["run"] = run
    json_path = args.json or args.md.with_suffix(".json")
    if args.update:
        results += earlier_results(json_path, args.md, args)
        results.sort(key=lambda r: TASKS.index(r["task"]))
    text = page(results, args)
    args.md.parent.mkdir(parents=True, exist_ok=True)
    args.md.write_text(text)
    if args.docs:
        block = [
            f"Measured by `benchmarks/serve.py` on {measured_on(results)} ([all of it](results/serve.md)):",
            "",
            *tables(results, args),
        ]
        for doc in (ROOT / "docs" / "serve.md", ROOT / "docs" / "benchmarks.md"):
            replace_block(doc, "\n".join(block))
    json_path.write_text(json.dumps({"machine": machine_line, "smoke": args.smoke, "results": results}, indent=1))
    print(text)
    print(f"written to {args.md} and {json_path}", flush=True)


if __name__ == "__main__":
    main()
