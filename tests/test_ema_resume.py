"""Exact resume with the EMA of the weights on (configs/trainer/ema.yaml): ``lightning-tf fit`` subprocesses
stopped with real signals (SIGKILL inside an epoch, SIGTERM), resumed, and compared bit for bit with a run
never stopped: the averaged weights (the checkpoint's state_dict), the raw weights, the average's counter,
the optimizer state and the LR schedule. The helpers are those of tests/test_preemption.py."""

from __future__ import annotations

import re
import shlex
import signal
from pathlib import Path

import pytest
import torch

from tests.helpers.preemption import finish, fit_args, log_of, same_training, start, stop, wait_for

pytestmark = pytest.mark.integration

EPOCH = 5  # steps per epoch (limit_train_batches)
EMA = ("--config", "configs/trainer/ema.yaml")


def last(root: Path) -> Path:
    return root / "checkpoints" / "last.ckpt"


def run(args: list[str], log: str = "run.log") -> Path:
    root = Path(args[args.index("--trainer.default_root_dir") + 1])
    proc = start(args, log=root / log)
    assert finish(proc) == 0, (root / log).read_text()[-4000:]
    return root


def same_average(a: Path, b: Path) -> list[str]:
    """What differs in the EMA sections of two checkpoints: the raw weights and the average's state."""
    x, y = (torch.load(p, map_location="cpu", weights_only=True) for p in (a, b))
    out = []
    for section in ("current_model_state", "averaging_state"):
        if section not in x or section not in y:
            out.append(f"{section} missing")
            continue
        for key in sorted(set(x[section]) | set(y[section])):
            u, v = x[section].get(key), y[section].get(key)
            if u is None or v is None or not torch.equal(u, v):
                out.append(f"{section}.{key}")
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The final checkpoint of one uninterrupted vision run with EMA."""
    return last(run(fit_args("vision", tmp_path_factory.mktemp("reference_ema"), extra=EMA)))


def test_the_reference_holds_the_average(reference: Path) -> None:
    state = torch.load(reference, map_location="cpu", weights_only=True)
    assert int(state["averaging_state"]["n_averaged"]) == 2 * EPOCH
    raw, ema = state["current_model_state"], state["state_dict"]
    assert not torch.equal(raw["net.head.weight"], ema["net.head.weight"])  # the average is not the last weights


def test_a_run_with_ema_killed_inside_an_epoch_resumes_bitwise(reference: Path, tmp_path: Path) -> None:
    proc = start(fit_args("vision", tmp_path, extra=EMA))
    wait_for(tmp_path / "checkpoints" / "step=6.ckpt", proc)
    stop(proc, signal.SIGKILL)
    assert finish(proc) == -signal.SIGKILL
    ckpt = tmp_path / "checkpoints" / "step=6.ckpt"
    assert torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"] % EPOCH  # inside an epoch
    run(fit_args("vision", tmp_path, extra=(*EMA, "--ckpt_path", str(ckpt))), log="resumed.log")
    assert same_training(reference, last(tmp_path)) == []
    assert same_average(reference, last(tmp_path)) == []


def test_a_run_with_ema_stopped_by_sigterm_resumes_bitwise(reference: Path, tmp_path: Path) -> None:
    proc = start(fit_args("vision", tmp_path, extra=EMA))
    wait_for(tmp_path / "checkpoints" / "step=3.ckpt", proc)
    stop(proc, signal.SIGTERM)
    assert finish(proc) == 143
    log = log_of(tmp_path)
    assert "Traceback" not in log
    command = shlex.split(re.search(r"^resume: (.*)$", log, re.M)[1])
    assert command[-2:] == ["--ckpt_path", str(last(tmp_path))]
    run([*command[1:]], log="resumed.log")
    assert same_training(reference, last(tmp_path)) == []
    assert same_average(reference, last(tmp_path)) == []
