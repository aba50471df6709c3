"""Tiny models of the three tasks for the serving tests (built in a fraction of a second, untrained but
complete: tokenizer and direction, class names and normalisation, data scale), their checkpoints, and a
real ``lightning-tf serve`` process on 127.0.0.1 and a free port."""

from __future__ import annotations

import base64
import io
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import lightning
import numpy as np
import pandas as pd
import requests
import torch
from lightning.pytorch import LightningModule
from PIL import Image

from lightning_tf.kline import DataScale, KLineForecaster
from lightning_tf.kline.features import DEFAULT_FEATURES
from lightning_tf.text import BPETokenizer, Seq2SeqTransformer
from lightning_tf.vision import ViTClassifier
from tests.helpers.kline import TINY, make_bars
from tests.helpers.text import word_sentences

__all__ = [
    "ServerProcess",
    "bars_records",
    "free_port",
    "png_bomb",
    "png_bytes",
    "save_checkpoint",
    "tiny_kline",
    "tiny_kline_covariates",
    "tiny_text",
    "tiny_vit",
]

KLINE_CONTEXT, KLINE_HORIZON = 32, 4


def tiny_text(max_len: int = 24) -> Seq2SeqTransformer:
    """A 2+2-layer translation model of width 32 with a BPE tokenizer trained on generated sentences."""
    torch.manual_seed(0)
    sentences = word_sentences(64, 0)
    tokenizer = BPETokenizer.train(sentences, sentences, 64)
    model = Seq2SeqTransformer(
        vocab_size=64,
        d_model=32,
        n_heads=4,
        n_layers=2,
        d_ff=64,
        dropout=0.0,
        beam_size=2,
        extra_len=4,
        max_len=max_len,
        warmup_steps=1,
        pad_id=tokenizer.pad_id,
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
    )
    model.tokenizer, model.src_lang, model.tgt_lang = tokenizer, "en", "de"
    return model.eval()


def tiny_vit() -> ViTClassifier:
    """A 16x16 RGB ViT of three classes, with the class names and normalisation setup() would take."""
    torch.manual_seed(0)
    model = ViTClassifier(
        num_classes=3, in_chans=3, preset=None, image_size=16, patch_size=4, d_model=32, n_heads=2, n_layers=2, d_ff=64
    )
    model.class_names, model.mean, model.std = ["cat", "dog", "bird"], [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    return model.eval()


def _trained_ticker_scale(names: list[str], covariates: dict[str, Any] | None = None) -> DataScale:
    """The data scale of one trained ticker, ``TRAINED``, with input channels ``names`` (log_return the target)."""
    C = len(names)
    return DataScale(
        feature_names=tuple(names),
        target_names=("log_return",),
        target_kind=None,
        ticker_names=("TRAINED",),
        feature_mean=[[0.001 * i for i in range(C)]],
        feature_std=[[0.5 + 0.1 * i for i in range(C)]],
        target_mean=[[0.0002]],
        target_std=[[0.02]],
        has_prices=True,
        covariates=covariates or {},
    )


def tiny_kline() -> KLineForecaster:
    """A patch forecaster (context 32, horizon 4) with the data scale of one trained ticker, ``TRAINED``."""
    torch.manual_seed(0)
    model = KLineForecaster(
        n_features=len(DEFAULT_FEATURES),
        n_targets=1,
        context_len=KLINE_CONTEXT,
        horizon=KLINE_HORIZON,
        target_channels=[0],
        **TINY,
    )
    model.data_scale = _trained_ticker_scale(list(DEFAULT_FEATURES))
    return model.eval()


def tiny_kline_covariates(
    *,
    calendar: str | None = "XNYS",
    ticker_embedding: bool = True,
    static_file: Path | None = None,
    future: list[str] | None = None,
) -> KLineForecaster:
    """:func:`tiny_kline` with covariates: a past covariate ``signal`` (a column of the bars, the last input
    channel), the known-future features of the exchange ``calendar`` (and the user's ``future`` columns), a
    ticker embedding and, with a ``static_file`` (``ticker,sector``, sectors ``a`` and ``b``), the ticker's
    sector; every channel reaches the forecast and the covariates' head has non-zero weights, so that each
    covariate moves it."""
    from lightning_tf.kline.covariates import CALENDAR_FEATURES

    torch.manual_seed(0)
    names = [*DEFAULT_FEATURES, "signal"]
    user = list(future or [])
    future_names = [*(CALENDAR_FEATURES if calendar else ()), *user]
    vocab = {"sector": ["a", "b"]} if static_file is not None else {}
    # the ticker embedding's ids: the trained ticker and the unknown slot; then each category's
    static_sizes = [2] * ticker_embedding + [len(v) + 1 for v in vocab.values()]
    model = KLineForecaster(
        n_features=len(names),
        n_targets=1,
        context_len=KLINE_CONTEXT,
        horizon=KLINE_HORIZON,
        target_channels=[0],
        channel_mixing=True,
        **TINY,
    )
    model.net.set_covariates(len(future_names), static_sizes)
    if model.net.covariates is not None:
        with torch.no_grad():
            model.net.covariates.future_weight.normal_(0.0, 0.1)
            for table in model.net.covariates.static:
                table.weight.normal_(0.0, 0.1)
    Cf = len(future_names)
    model.data_scale = _trained_ticker_scale(
        names,
        covariates={
            "past": ["signal"],
            "future": user,
            "future_names": future_names,
            "horizon": KLINE_HORIZON,
            "calendar": calendar,
            "missing": "error",
            "ffill_limit": None,
            "ticker_embedding": ticker_embedding,
            "static_file": None if static_file is None else str(static_file),
            "static_vocab": vocab,
            "static_sizes": static_sizes,
            "future_mean": [[0.01 * j for j in range(Cf)]],
            "future_std": [[0.3 + 0.1 * j for j in range(Cf)]],
        },
    )
    return model.eval()


def save_checkpoint(model: LightningModule, path: Path) -> Path:
    """``model`` as a Lightning checkpoint (weights, hyperparameters and its ``on_save_checkpoint`` extras),
    as a Trainer writes it, without training."""
    ckpt: dict[str, Any] = {
        "state_dict": model.state_dict(),
        "hyper_parameters": dict(model.hparams),
        "pytorch-lightning_version": lightning.__version__,
        "epoch": 0,
        "global_step": 0,
    }
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return path


def png_bytes(seed: int, size: tuple[int, int] = (20, 24), mode: str = "RGB") -> bytes:
    """A random image as PNG file bytes."""
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=mode).save(buf, format="PNG")
    return buf.getvalue()


def png_bomb(width: int = 30_000, height: int = 30_000) -> bytes:
    """A PNG whose header says ``width`` x ``height`` pixels, with one row of data (a few hundred bytes)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * (width + 1)))
        + chunk(b"IEND", b"")
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def bars_records(n: int = 80, seed: int = 0, signal: bool = False) -> list[dict[str, Any]]:
    """``n`` random-walk daily bars as JSON objects (``Date`` as ``YYYY-MM-DD``), with a random ``signal``
    column (the past covariate of :func:`tiny_kline_covariates`) when ``signal``."""
    frame = make_bars(n, seed)
    frame["Date"] = frame["Date"].dt.strftime("%Y-%m-%d")
    if signal:
        frame["signal"] = np.random.default_rng(seed + 1000).normal(0.0, 1.0, n)
    return frame.to_dict(orient="records")


def bars_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame.from_records(records)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (LitServe refuses port 0)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if 1024 <= port <= 65535:
            return port
    raise RuntimeError("no free port")


class ServerProcess:
    """``lightning-tf serve CKPT ARGS`` in its own process group on 127.0.0.1 and a free port, started and
    waited for (``/health``); :meth:`stop` ends it (SIGTERM, then SIGKILL of the group) and returns the exit
    status. Use it in a fixture with ``finally: stop()``."""

    def __init__(self, checkpoint: Path, *args: str, key: str | None = None, startup: float = 240.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = key
        self.log = checkpoint.with_suffix(f".{self.port}.log")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "LIT_SERVER_API_KEY": ""}
        command = [sys.executable, "-m", "lightning_tf", "serve", str(checkpoint), "--port", str(self.port), *args]
        if key is not None:
            command += ["--api_key", key]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + startup
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.output()[-3000:]}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the server did not become healthy in {startup:.0f} s: {self.output()[-3000:]}")

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.key is None else {"X-API-Key": self.key}

    def post(self, body: Any = None, **kwargs: Any) -> requests.Response:
        headers = {**self.headers, **kwargs.pop("headers", {})}
        if body is not None:
            kwargs["json"] = body
        return requests.post(self.url + "/predict", headers=headers, timeout=60, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return requests.get(
            self.url + path, headers={**self.headers, **kwargs.pop("headers", {})}, timeout=30, **kwargs
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def workers(self) -> list[int]:
        """The pids of the inference workers (the server's spawned children)."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.proc.pid and b"spawn_main" in cmdline:
                found.append(int(entry))
        return found

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL the whole process group; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever is left of its group (workers, manager)
        except ProcessLookupError:
            pass
        return self.proc.wait()


class Restartable:
    """A test module's server: started on first use, started again after a test stopped it (the SIGTERM tests),
    stopped by the fixture that owns it."""

    def __init__(self, checkpoint: Path, *args: str, key: str | None = None) -> None:
        self.checkpoint, self.args, self.key = checkpoint, args, key
        self.server: ServerProcess | None = None

    def get(self) -> ServerProcess:
        if self.server is None or not self.server.alive():
            self.server = ServerProcess(self.checkpoint, *self.args, key=self.key)
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def in_flight_through_sigterm(server: ServerProcess, bodies: list[Any]) -> tuple[list[requests.Response], int, str]:
    """Send ``bodies`` at once while the worker is stopped (SIGSTOP), so that all are in flight, SIGTERM the server,
    let the worker go on (SIGCONT): the responses, the server's exit status and its output."""
    import concurrent.futures

    workers = server.workers()
    assert workers, "no inference worker found"
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    try:
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            futures = [pool.submit(server.post, body) for body in bodies]
            time.sleep(1.0)  # every request reached the server and waits for the worker
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
            responses = [f.result(timeout=120) for f in futures]
    finally:
        for pid in workers:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    status = server.proc.wait(120)
    return responses, status, server.output()
