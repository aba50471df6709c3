"""Real ``lightning-tf fit`` runs that the tests stop with real signals: the commands, starting and
stopping them (a whole process group: DDP ranks included), waiting for a checkpoint file to appear, and the
comparison of two runs' final checkpoints bit for bit. Also a checkpoint writer made slow on purpose, and a
callback that holds one rank still at a chosen step (to kill it, or the rank waiting for it, at a known point)."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import torch
from lightning.pytorch import Callback

from lightning_tf.training import AtomicCheckpointIO

__all__ = [
    "PauseAt",
    "SignalAt",
    "SlowCheckpointIO",
    "TASK_ARGS",
    "fit_args",
    "free_port",
    "pause_at",
    "same_training",
    "signal_at",
    "start",
    "stop",
    "wait_for",
]

ROOT = Path(__file__).resolve().parents[2]

#: each task's config with a tiny model and dropout, shuffling and (vision) RandAugment + Mixup/CutMix on
TASK_ARGS: dict[str, list[str]] = {
    "text": [
        "--config",
        "configs/text/copy.yaml",
        "--data.n_train",
        "400",
        "--data.n_val",
        "16",
        "--data.n_test",
        "16",
        "--data.max_tokens",
        "256",
        "--model.d_model",
        "16",
        "--model.n_heads",
        "2",
        "--model.n_layers",
        "1",
        "--model.d_ff",
        "32",
        "--model.dropout",
        "0.1",
        "--model.warmup_steps",
        "4",
        "--model.extra_len",
        "4",
        "--model.n_logged_samples",
        "0",
    ],
    "vision": [
        "--config",
        "configs/vision/digits.yaml",
        "--data.batch_size",
        "16",
        "--data.augment",
        "randaugment",
        "--data.mixup_alpha",
        "0.2",
        "--data.cutmix_alpha",
        "1.0",
        "--data.mixup_prob",
        "0.5",
        "--model.d_model",
        "16",
        "--model.n_heads",
        "2",
        "--model.n_layers",
        "1",
        "--model.d_ff",
        "32",
        "--model.dropout",
        "0.1",
        "--model.warmup_steps",
        "4",
        "--model.attention_images",
        "0",
    ],
    "kline": [
        "--config",
        "configs/kline/msft_daily.yaml",
        "--data.loading.batch_size",
        "32",
        "--model.d_model",
        "16",
        "--model.n_heads",
        "2",
        "--model.n_layers",
        "1",
        "--model.d_ff",
        "32",
        "--model.warmup_steps",
        "4",
    ],
}

#: 2 epochs of 5 steps; a checkpoint every 3 steps (step=3, 6, 9) besides last.ckpt and the best one
STEP_CHECKPOINTS = """\
trainer:
  callbacks+:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args:
        filename: "{step}"
        every_n_train_steps: 3
        save_top_k: -1
"""


def fit_args(task: str, root: Path, workers: int = 0, devices: int = 1, extra: tuple[str, ...] = ()) -> list[str]:
    """``fit`` of ``task`` under the default trainer config, writing under ``root`` (no logger)."""
    root.mkdir(parents=True, exist_ok=True)
    steps = root / "step_checkpoints.yaml"
    steps.write_text(STEP_CHECKPOINTS)
    distributed = ["--trainer.strategy", "ddp"] if devices > 1 or "--trainer.num_nodes" in extra else []
    return [
        "fit",
        "--config",
        "configs/trainer/default.yaml",
        *TASK_ARGS[task],
        "--config",
        str(steps),
        "--trainer.logger",
        "false",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--trainer.accelerator",
        "cpu",
        "--trainer.devices",
        str(devices),
        *distributed,
        "--trainer.deterministic",
        "true",
        "--trainer.max_epochs",
        "2",
        "--trainer.limit_train_batches",
        "5",
        "--trainer.limit_val_batches",
        "2",
        "--trainer.num_sanity_val_steps",
        "0",
        "--trainer.default_root_dir",
        str(root),
        "--data.num_workers",
        str(workers),
        *extra,
    ]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    for name in ("LIGHTNING_TF_DEBUG", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)  # an outer launcher's variables would make these runs its children
    return env | (extra or {})


def start(args: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """``lightning-tf <args>`` in a process group of its own (the DDP ranks it launches join it), output to
    ``log`` (default: ``<default_root_dir>/run.log``)."""
    root = Path(args[args.index("--trainer.default_root_dir") + 1])
    log = log or root / "run.log"
    out = open(log, "w")  # noqa: SIM115 (closed with the process: the file outlives this call)
    return subprocess.Popen(
        [sys.executable, "-m", "lightning_tf", *args],
        cwd=ROOT,
        env=_env(env),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> int:
    """Wait for ``proc``; fail with its log's end when it ran over."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{proc.args} ran over {timeout} s") from None
    finally:
        stop(proc, signal.SIGKILL)  # whatever of its group is left (a rank, a loader worker)


def stop(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to ``proc``'s whole process group (every rank it launched)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until ``path`` exists (checkpoints are renamed into place whole, so it is complete when it does);
    fail if ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended ({proc.returncode}) before {path.name} appeared")
        if time.monotonic() > deadline:
            stop(proc, signal.SIGKILL)
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.005)


def log_of(root: Path) -> str:
    return (root / "run.log").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tensors(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested checkpoint section, by its path."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _tensors(item, f"{prefix}{key}.").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in _tensors(item, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): value}


def same_training(a: Path, b: Path) -> list[str]:
    """What differs between two final checkpoints: weights, optimizer state, LR schedule, the step, the
    state of every monitoring callback (EarlyStopping's count and best score, the best checkpoint's score
    and file name) and the trainer's last metrics (``CallbackMetrics``). [] when bitwise equal."""
    x, y = (torch.load(p, map_location="cpu", weights_only=True) for p in (a, b))
    out = [f"global_step {x['global_step']} != {y['global_step']}"] if x["global_step"] != y["global_step"] else []
    for section in ("state_dict", "optimizer_states", "lr_schedulers", "callback_metrics"):
        tx, ty = _tensors(x.get(section, {})), _tensors(y.get(section, {}))
        if section == "callback_metrics":  # the metrics' values (a metric's internal sums may differ unused)
            tx, ty = ({k: v for k, v in t.items() if k.split(".", 2)[-1].startswith("metrics.")} for t in (tx, ty))
        for key in sorted(set(tx) | set(ty)):
            u, v = tx.get(key), ty.get(key)
            equal = torch.equal(u, v) if isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor) else u == v
            if not equal:  # scalars with their values, larger tensors by name
                small = all(not isinstance(t, torch.Tensor) or t.numel() == 1 for t in (u, v))
                out.append(f"{section}.{key}" + (f": {u} != {v}" if small else ""))
    for key in sorted(k for k in x["callbacks"] if "'monitor': 'val/loss'" in str(k)):
        mine, theirs = _monitoring(x["callbacks"][key]), _monitoring(y["callbacks"].get(key, {}))
        if mine != theirs:
            out.append(f"{key}: {mine} != {theirs}")
    if not any("'monitor': 'val/loss'" in str(k) for k in x["callbacks"]):
        out.append("no callback monitors val/loss")
    return out


def _file(path: str) -> str:
    """A checkpoint's file name without the version Lightning adds when the name is taken (``-v1``: a resumed
    run writes again the files its first part wrote after the checkpoint it resumes from)."""
    return re.sub(r"-v\d+(?=\.ckpt$)", "", Path(path).name)


def _monitoring(state: dict[str, Any]) -> dict[str, Any]:
    """The decisions of a monitoring callback's state (checkpoint paths by file name: the runs' folders differ)."""
    keep = ("wait_count", "stopped_epoch", "best_score", "best_model_score", "best_model_path", "best_k_models")
    out: dict[str, Any] = {}
    for name in keep:
        if name not in state:
            continue
        value = state[name]
        if isinstance(value, torch.Tensor):
            value = value.tolist()
        elif name == "best_model_path":
            value = _file(value)
        elif name == "best_k_models":
            value = {_file(k): float(v) for k, v in value.items()}
        out[name] = value
    return out


class SlowCheckpointIO(AtomicCheckpointIO):
    """The package's atomic writer, made slow on purpose: the ``slow_save``-th write of a file called
    ``last.ckpt`` writes half of it, then waits ``pause`` seconds (long enough for a test to kill the run
    there) before the rest.

    Args:
        pause: seconds to wait half-way.
        slow_save: which write of last.ckpt is slow (1 = the first).
    """

    def __init__(self, pause: float = 60.0, slow_save: int = 2) -> None:
        super().__init__()
        self.pause, self.slow_save, self.saves = pause, slow_save, 0

    def _write(self, checkpoint: dict[str, Any], f: IO[bytes]) -> None:
        if not str(f.name).endswith("last.ckpt.partial"):
            return super()._write(checkpoint, f)
        self.saves += 1
        if self.saves != self.slow_save:
            return super()._write(checkpoint, f)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        data = buffer.getvalue()
        f.write(data[: len(data) // 2])
        f.flush()
        Path(f"{f.name}.half").touch()  # the test's cue
        time.sleep(self.pause)
        f.write(data[len(data) // 2 :])


class SignalAt(Callback):
    """Sends ``signum`` to this process's whole process group (a real signal, as a scheduler sends it to
    every process of a job: the loader workers too) at a chosen point of the run: after training batch
    ``batch`` of epoch ``epoch`` (``where="train"``), or during the validation that follows it
    (``where="val"``, after its first batch). Once per process; in a resumed run the point has passed.

    Args:
        epoch: the epoch.
        batch: the batch in the epoch (0-based).
        where: ``train`` or ``val``.
        signum: the signal (15: SIGTERM).
        group: to the whole process group (False: to this process alone, for a run inside the tests' process).
    """

    def __init__(
        self, epoch: int = 1, batch: int = 1, where: str = "train", signum: int = 15, group: bool = True
    ) -> None:
        self.epoch, self.batch, self.where, self.signum, self.group = epoch, batch, where, signum, group
        self._armed, self._sent = False, False

    def _send(self) -> None:
        if not self._sent:
            self._sent = True
            if self.group:
                os.killpg(os.getpgid(0), self.signum)
            else:
                os.kill(os.getpid(), self.signum)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            if self.where == "train":
                self._send()
            else:
                self._armed = True

    def on_validation_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        if self._armed and not trainer.sanity_checking:
            self._send()


class PauseAt(Callback):
    """Holds one rank still after a chosen training step, so that a test can kill it, or the rank that goes
    on and then waits for it in the next collective, at a known point: at the end of global step ``step``
    rank ``rank`` writes its process id into ``<default_root_dir>/paused-<step>`` and sleeps (``pause``
    seconds at most). Several pauses as ``"7:1,10:0"`` (step:rank). A pause whose file exists has been
    taken (by an earlier part of the run) and is skipped, so the command that resumes the run carries the
    same arguments and pauses only where it has not yet. Every rank writes its process id into
    ``rank<r>.pid`` there as training starts.

    Args:
        at: ``step:rank`` pairs, separated by commas.
        pause: the longest sleep, in seconds.
    """

    def __init__(self, at: str = "7:1", pause: float = 120.0) -> None:
        self.at = [tuple(int(x) for x in pair.split(":")) for pair in at.split(",")]
        self.pause = pause

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        (Path(trainer.default_root_dir) / f"rank{trainer.global_rank}.pid").write_text(str(os.getpid()))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        for step, rank in self.at:
            cue = Path(trainer.default_root_dir) / f"paused-{step}"
            if trainer.global_step == step and trainer.global_rank == rank and not cue.exists():
                part = cue.with_suffix(".partial")
                part.write_text(str(os.getpid()))
                part.rename(cue)
                time.sleep(self.pause)


def pause_at(at: str) -> tuple[str, ...]:
    """The ``fit`` arguments that add :class:`PauseAt` to a run."""
    return ("--trainer.callbacks+", "tests.helpers.preemption.PauseAt", "--trainer.callbacks.at", at)


def signal_at(epoch: int, batch: int, where: str = "train") -> tuple[str, ...]:
    """The ``fit`` arguments that add :class:`SignalAt` (SIGTERM) to a run."""
    return (
        "--trainer.callbacks+",
        "tests.helpers.preemption.SignalAt",
        "--trainer.callbacks.epoch",
        str(epoch),
        "--trainer.callbacks.batch",
        str(batch),
        "--trainer.callbacks.where",
        where,
    )
