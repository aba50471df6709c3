"""Runs stopped with real signals continue as if they never stopped: ``lightning-tf fit`` subprocesses
SIGKILLed once a chosen checkpoint file is on disk, or sent SIGTERM, resumed, and compared bit for bit
(weights, optimizer state, LR schedule, best validation loss) with a run never stopped; a kill during a
checkpoint save; DDP and two "nodes" on 127.0.0.1; one rank of a DDP run killed alone (the other stops with
one line and its command resumes); every broken-checkpoint case through the CLI.

Every run trains a tiny model for 2 epochs of 5 steps with a checkpoint every 3 steps (step=3, 6, 9): step 6
is the first batch of epoch 1 and step 9 the fourth, both inside an epoch. One uninterrupted
run per task (and one under DDP) is the reference for every case of that task; with loader workers the
training is bitwise that of ``num_workers=0`` (augmentation is drawn per batch), so workers 0 and 2 share it.

Each property runs for every task. The integration tier (CI) runs each kind of stop and each process layout
for one task, and the other tasks' copies are in the slow tier (``make test-slow``): a SIGKILL inside an epoch
for kline without loader workers and for vision with 2 (the task whose workers draw augmentation), a SIGKILL
during a save (the atomic checkpoint writer, the same for every task) for kline. Each ``lightning-tf`` process
costs CI about 10 s of CPU on two cores before its first step (importing torch and Lightning), so a case of
two runs is about half a minute. Every task is still stopped and resumed bitwise in CI: each is sent SIGTERM
with 2 loader workers, and each is resumed under two processes (kline across two nodes and after one rank of
two died, text sent SIGTERM on rank 0). A rank that dies is one case of three runs: rank 1 killed, then rank 0
in the resumed run, then the resume to the end; it also stands for the whole of a 2-process run killed inside
an epoch (the same resume), whose kline copy is in the slow tier.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from lightning_tf.__main__ import main
from tests.helpers.preemption import (
    ROOT,
    finish,
    fit_args,
    free_port,
    log_of,
    pause_at,
    same_training,
    signal_at,
    start,
    stop,
    wait_for,
)

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

TASKS = ("text", "vision", "kline")
EPOCH = 5  # steps per epoch (limit_train_batches)


def last(root: Path) -> Path:
    return root / "checkpoints" / "last.ckpt"


def newest_step_checkpoint(root: Path) -> Path:
    """The run's last periodic checkpoint (``step=<n>.ckpt``, the highest ``n``)."""
    steps = sorted((root / "checkpoints").glob("step=*.ckpt"), key=lambda p: int(p.stem.split("=")[1]))
    return steps[-1]


def run(args: list[str], log: str = "run.log") -> Path:
    root = Path(args[args.index("--trainer.default_root_dir") + 1])
    proc = start(args, log=root / log)
    assert finish(proc) == 0, (root / log).read_text()[-4000:]
    return root


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The final checkpoint of one uninterrupted run per task (single process, no workers), made once."""
    made: dict[str, Path] = {}

    def get(task: str) -> Path:
        if task not in made:
            made[task] = last(run(fit_args(task, tmp_path_factory.mktemp(f"reference_{task}"))))
        return made[task]

    return get


def kill_and_resume(task: str, root: Path, workers: int = 0, devices: int = 1) -> Path:
    """Start a run, SIGKILL its whole process group as soon as step=6.ckpt is on disk, check that it died
    inside an epoch, resume it from its newest periodic checkpoint; return the resumed run's last.ckpt."""
    proc = start(fit_args(task, root, workers, devices))
    wait_for(root / "checkpoints" / "step=6.ckpt", proc)
    stop(proc, signal.SIGKILL)
    assert finish(proc) == -signal.SIGKILL
    ckpt = newest_step_checkpoint(root)
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    step = state["global_step"]
    assert step % EPOCH, f"{ckpt.name} is at an epoch's end"  # the resumed run starts inside an epoch
    loader = state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert (loader["epoch"], loader["batches_done"]) == (step // EPOCH, step % EPOCH)
    run(fit_args(task, root, workers, devices, ("--ckpt_path", str(ckpt))), log="resumed.log")
    return last(root)


def in_slow_tier(*values: object) -> object:
    """A parameter whose case runs in the slow tier only (``--runslow``): another task's copy of a case CI runs."""
    return pytest.param(*values, marks=pytest.mark.slow)


@pytest.mark.parametrize(
    ("task", "workers"),
    [
        ("kline", 0),
        ("vision", 2),
        in_slow_tier("text", 0),
        in_slow_tier("vision", 0),
        in_slow_tier("text", 2),
        in_slow_tier("kline", 2),
    ],
)
def test_a_run_killed_inside_an_epoch_resumes_bitwise(
    task: str, workers: int, reference: Callable[[str], Path], tmp_path: Path
) -> None:
    resumed = kill_and_resume(task, tmp_path, workers)
    assert same_training(reference(task), resumed) == []


#: one random batch strictly inside epoch 1 (after epoch 0's validation), drawn once per session
INSIDE = random.Random().randrange(EPOCH - 1)


def stop_and_resume_as_printed(task: str, root: Path, extra: tuple[str, ...], workers: int = 2) -> tuple[int, str]:
    """Run ``task`` with ``extra`` (a SIGTERM to the whole process group), check the exit status, the one
    stop line and that no traceback was printed, run the printed resume command; return the stopped step
    and the stop line."""
    proc = start(fit_args(task, root, workers, extra=extra))
    assert finish(proc) == 143, log_of(root)[-3000:]
    log = log_of(root)
    assert "Traceback" not in log
    line = re.search(r"^lightning-tf: stopped by SIGTERM after global step (\d+) .*$", log, re.M)
    assert line, log[-3000:]
    step = int(line[1])
    assert torch.load(last(root), map_location="cpu", weights_only=True)["global_step"] == step
    command = shlex.split(re.search(r"^resume: (.*)$", log, re.M)[1])
    assert command[0] == "lightning-tf" and command[-2:] == ["--ckpt_path", str(last(root))]
    run([*command[1:]], log="resumed.log")
    assert "Traceback" not in (root / "resumed.log").read_text()
    return step, line[0]


@pytest.mark.parametrize("task", TASKS)
def test_sigterm_at_a_random_step_inside_an_epoch_resumes_with_the_printed_command_bitwise(
    task: str, reference: Callable[[str], Path], tmp_path: Path
) -> None:
    """Each task's shipped config (tiny sizes) under configs/trainer/default.yaml, 2 loader workers: SIGTERM
    to every process of the run (as a scheduler sends it; the workers ignore it) after a random batch strictly
    inside epoch 1, so after epoch 0's validation and before epoch 1's: the step finishes, last.ckpt is
    written there, exit status 143 and the resume command; that command ends bitwise where the uninterrupted
    run ends, EarlyStopping's and the best checkpoint's decisions and the last metrics included."""
    step, line = stop_and_resume_as_printed(task, tmp_path, signal_at(1, INSIDE))
    assert step == EPOCH + INSIDE + 1, (INSIDE, line)
    assert f"(batch {INSIDE + 1} of epoch 1;" in line
    assert same_training(reference(task), last(tmp_path)) == [], f"SIGTERM after batch {INSIDE} of epoch 1"


@pytest.mark.parametrize("task", [in_slow_tier("text"), in_slow_tier("vision"), "kline"])
def test_a_kill_during_a_checkpoint_save_leaves_the_previous_one_and_last_resumes_from_it(
    task: str, reference: Callable[[str], Path], tmp_path: Path
) -> None:
    """The second write of last.ckpt (end of epoch 1) is slowed half-way; SIGKILL there. last.ckpt is still
    the whole checkpoint of epoch 0, the half-written file is last.ckpt.partial, and ``--ckpt_path last``
    resumes from the former to the uninterrupted run's end."""
    slow = ("--trainer.plugins", "tests.helpers.preemption.SlowCheckpointIO")
    proc = start(fit_args(task, tmp_path, extra=slow))
    wait_for(tmp_path / "checkpoints" / "last.ckpt.partial.half", proc)
    stop(proc, signal.SIGKILL)
    assert finish(proc) == -signal.SIGKILL
    partial = tmp_path / "checkpoints" / "last.ckpt.partial"
    assert 0 < partial.stat().st_size < last(tmp_path).stat().st_size * 0.6
    assert torch.load(last(tmp_path), map_location="cpu", weights_only=True)["global_step"] == EPOCH
    run(fit_args(task, tmp_path, extra=("--ckpt_path", "last")), log="resumed.log")
    assert f"Restoring states from the checkpoint path at {last(tmp_path)}" in (tmp_path / "resumed.log").read_text()
    assert same_training(reference(task), last(tmp_path)) == []


def test_slurm_requeue_signal_saves_at_the_step_and_the_same_command_resumes_bitwise(
    reference: Callable[[str], Path], tmp_path: Path
) -> None:
    """In a SLURM job (its variables set; Lightning then uses SLURMEnvironment(auto_requeue=True)),
    SIGUSR1 stops the run after the step like SIGTERM, links the checkpoint as Lightning's
    hpc_ckpt_1.ckpt and asks scontrol to requeue (absent here: said); the same command, without
    --ckpt_path, resumes from it to the uninterrupted run's end."""
    slurm = {
        "SLURM_NTASKS": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_JOB_NAME": "train",
        "SLURM_JOB_ID": "4242",
        "SLURM_NODELIST": "localhost",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
    }
    proc = start(fit_args("kline", tmp_path), slurm)
    wait_for(tmp_path / "checkpoints" / "step=6.ckpt", proc)
    proc.send_signal(signal.SIGUSR1)
    assert finish(proc) == 143
    log = log_of(tmp_path)
    assert "stopped by the SLURM requeue signal after global step" in log
    assert (
        f"SLURM: job 4242 not requeued (scontrol not found); the same command resumes from {tmp_path}/hpc_ckpt_1.ckpt"
        in log
    )
    assert (tmp_path / "hpc_ckpt_1.ckpt").stat().st_ino == last(tmp_path).stat().st_ino  # a link, not a copy
    proc = start(fit_args("kline", tmp_path), slurm, log=tmp_path / "requeued.log")
    assert finish(proc) == 0
    assert (
        f"Restoring states from the checkpoint path at {tmp_path}/hpc_ckpt_1.ckpt"
        in (tmp_path / "requeued.log").read_text()
    )
    assert same_training(reference("kline"), last(tmp_path)) == []


# ------------------------------------------------------------------------------ several processes


@pytest.fixture(scope="module")
def ddp_reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The final checkpoint of an uninterrupted run of a task in 2 processes (Lightning's launcher, gloo)."""
    made: dict[str, Path] = {}

    def get(task: str) -> Path:
        if task not in made:
            made[task] = last(run(fit_args(task, tmp_path_factory.mktemp(f"reference_ddp_{task}"), devices=2)))
        return made[task]

    return get


# CI kills a single rank of a 2-process run instead (the dead-rank test below): the same resume, inside an epoch
@pytest.mark.parametrize("task", [in_slow_tier("vision"), in_slow_tier("kline")])
def test_ddp_killed_inside_an_epoch_resumes_bitwise(
    task: str, ddp_reference: Callable[[str], Path], tmp_path: Path
) -> None:
    assert same_training(ddp_reference(task), kill_and_resume(task, tmp_path, devices=2)) == []


@pytest.mark.parametrize("task", [in_slow_tier("vision"), "text"])
def test_ddp_sigterm_to_rank_zero_alone_stops_both_ranks_after_the_same_step(
    task: str, ddp_reference: Callable[[str], Path], tmp_path: Path
) -> None:
    """Only the launching process (rank 0) gets SIGTERM: the ranks agree at the step's end, both stop after
    it, one checkpoint is written, and resuming from it ends bitwise where the uninterrupted DDP run ends."""
    proc = start(fit_args(task, tmp_path, devices=2))
    wait_for(tmp_path / "checkpoints" / "step=6.ckpt", proc)
    proc.send_signal(signal.SIGTERM)
    assert finish(proc) == 143
    log = log_of(tmp_path)
    step = int(re.search(r"stopped by SIGTERM after global step (\d+)", log)[1])
    assert torch.load(last(tmp_path), map_location="cpu", weights_only=True)["global_step"] == step
    run(fit_args(task, tmp_path, devices=2, extra=("--ckpt_path", str(last(tmp_path)))), log="resumed.log")
    assert same_training(ddp_reference(task), last(tmp_path)) == []


#: the documented bound on the survivors' stop (rank_watch: interval + SETTLE), with room for a loaded CI machine
SURVIVORS_STOP_WITHIN = 30.0


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting for a parent that is gone counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def lost_rank_line(log: Path, rank: int, seen_by: int, ckpt: str) -> list[str]:
    """Check the one line a dead rank leaves in ``log`` (naming ``rank``, seen by ``seen_by``, resuming from
    ``ckpt``) and that nothing else of it was printed; return its resume command."""
    text = log.read_text()
    assert "Traceback" not in text and "GLHF" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if " died (" in line]
    assert len(lines) == 1, text[-3000:]
    m = re.fullmatch(
        rf"lightning-tf: rank {rank} of 2 died \((.+); seen by rank {seen_by}\); every rank stopped at global step "
        rf"\d+ \(exit status 1\); resume from (\S+) \(global step \d+\): (lightning-tf fit .*)",
        lines[0],
    )
    assert m, lines[0]
    assert m[1] == ("killed by SIGKILL" if seen_by == 0 else "its process ended")
    assert Path(m[2]).name == ckpt, lines[0]
    command = shlex.split(m[3])
    assert command[-2:] == ["--ckpt_path", m[2]]
    return command


def test_a_rank_that_dies_stops_the_others_with_one_line_whose_command_resumes_bitwise(
    ddp_reference: Callable[[str], Path], tmp_path: Path
) -> None:
    """2 processes (gloo), each killed with SIGKILL while the other waits for it in a collective: rank 1 after
    step 7 (inside epoch 1); then, in the run resumed with the printed command, rank 0 (the process the
    command started, the one that writes checkpoints) after step 10. Each time the survivor stops within the
    bound and prints one line, naming the dead rank and the command that resumes from the newest
    checkpoint (step=6.ckpt, then step=9.ckpt), and no traceback; the second printed command ends bitwise
    where an uninterrupted 2-process run ends."""
    proc = start(fit_args("kline", tmp_path, devices=2, extra=pause_at("7:1,10:0")))
    wait_for(tmp_path / "paused-7", proc)
    killed = time.monotonic()
    os.kill(int((tmp_path / "paused-7").read_text()), signal.SIGKILL)  # rank 1
    assert finish(proc) == 1
    assert time.monotonic() - killed < SURVIVORS_STOP_WITHIN
    command = lost_rank_line(tmp_path / "run.log", rank=1, seen_by=0, ckpt="step=6.ckpt")

    proc = start(command[1:], log=tmp_path / "resumed.log")
    wait_for(tmp_path / "paused-10", proc)
    assert int((tmp_path / "paused-10").read_text()) == proc.pid
    rank1 = int((tmp_path / "rank1.pid").read_text())
    killed = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)  # rank 0
    while not gone(rank1):
        assert time.monotonic() - killed < SURVIVORS_STOP_WITHIN, "rank 1 still runs"
        time.sleep(0.05)
    assert finish(proc) == -signal.SIGKILL
    command = lost_rank_line(tmp_path / "resumed.log", rank=0, seen_by=1, ckpt="step=9.ckpt")

    run(command[1:], log="resumed_again.log")
    assert same_training(ddp_reference("kline"), last(tmp_path)) == []


def two_nodes(task: str, root: Path, extra: tuple[str, ...] = ()) -> list:
    """Node 0 and node 1 of a 2-node run, one process each, meeting on 127.0.0.1."""
    port = free_port()
    args = fit_args(task, root, extra=("--trainer.num_nodes", "2", *extra))
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    return [start(args, env | {"NODE_RANK": str(n)}, log=root / f"node{n}.log") for n in range(2)]


@pytest.mark.parametrize("task", [in_slow_tier("text"), in_slow_tier("vision"), "kline"])
def test_two_nodes_train_as_two_processes_of_one_node_and_a_kill_resumes_bitwise(
    task: str, ddp_reference: Callable[[str], Path], tmp_path: Path
) -> None:
    """``--trainer.num_nodes 2``, one process per node: both nodes SIGKILLed once step=6.ckpt is on disk and
    restarted from it end bit for bit where 2 processes on one node end uninterrupted (every step runs on the
    two nodes, before the kill or after the resume); node 1 runs as global rank 1 of 2."""
    cut = tmp_path / "cut"
    nodes = two_nodes(task, cut)
    wait_for(cut / "checkpoints" / "step=6.ckpt", nodes[0])
    for p in nodes:
        stop(p, signal.SIGKILL)
    assert [finish(p) for p in nodes] == [-signal.SIGKILL] * 2
    ckpt = newest_step_checkpoint(cut)
    nodes = two_nodes(task, cut, ("--ckpt_path", str(ckpt)))
    assert [finish(p) for p in nodes] == [0, 0], (cut / "node0.log").read_text()[-3000:]
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in (cut / "node1.log").read_text()
    assert same_training(ddp_reference(task), last(cut)) == []


# ------------------------------------------------------------------------------ broken checkpoints


def test_every_broken_checkpoint_is_one_line_naming_the_file(
    reference: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the command's entry point: truncated (fit), corrupted (validate), another task's (test), too
    new (predict), missing (export): exit status 2 and one line naming the file and the cause, and the
    newest complete checkpoint in its folder where there is one."""
    good = reference("text")
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    data = good.read_bytes()
    truncated, corrupted, newer = folder / "truncated.ckpt", folder / "corrupted.ckpt", folder / "newer.ckpt"
    truncated.write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    corrupted.write_bytes(bytes(flipped))
    state = torch.load(good, map_location="cpu", weights_only=True)
    state["lightning_tf"] = {"version": "9.0.0", "format": 99}
    torch.save(state, newer)
    complete = folder / "complete.ckpt"
    complete.write_bytes(data)
    monkeypatch.chdir(ROOT)  # the configs' relative paths
    text = fit_args("text", tmp_path / "run")[1:-2]  # the text config without fit and --data.num_workers
    cases = [
        (["fit", *text, "--ckpt_path", str(truncated)], f"{truncated}: not a complete checkpoint, truncated"),
        (["validate", *text, "--ckpt_path", str(corrupted)], f"{corrupted}: corrupted, the record .* fails its CRC-32"),
        (
            ["test", *fit_args("vision", tmp_path / "v")[1:-2], "--ckpt_path", str(complete)],
            f"{complete}: a checkpoint of Seq2SeqTransformer \\(text\\), not of ViTClassifier",
        ),
        (
            ["predict", *text, "--ckpt_path", str(newer)],
            f"{newer}: written by lightning-tf 9.0.0 in checkpoint format 99; this lightning-tf .* reads formats up to",
        ),
        (["export", "--ckpt_path", str(folder / "gone.ckpt")], f"{folder / 'gone.ckpt'}: no such checkpoint file"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit) as stopped:
            main(args)
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert stopped.value.code == 2 and len(lines) == 1, (args[0], err[-3000:])
        assert re.match(rf"lightning-tf( export)?: error: {message}", lines[0]), lines[0]
        if args[0] != "test":  # the newest other complete file of the folder is named
            assert "the newest complete checkpoint in" in lines[0] and "complete.ckpt (epoch 1, step 10)" in lines[0]


def test_a_resume_that_cannot_go_on_is_one_line_naming_the_checkpoint(
    reference: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A complete checkpoint that cannot resume a run (here: weights only, as ``save_weights_only`` writes):
    exit status 2 and one line naming the checkpoint and the cause; LIGHTNING_TF_DEBUG=1 keeps the traceback."""
    state = torch.load(reference("text"), map_location="cpu", weights_only=True)
    del state["optimizer_states"], state["lr_schedulers"]
    weights = tmp_path / "weights.ckpt"
    torch.save(state, weights)
    monkeypatch.chdir(ROOT)
    args = ["fit", *fit_args("text", tmp_path / "run")[1:], "--trainer.max_epochs", "3", "--ckpt_path", str(weights)]
    with pytest.raises(SystemExit) as stopped:
        main(args)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stopped.value.code == 2 and len(lines) == 1, lines[-20:]
    assert re.match(
        rf"lightning-tf: error: {weights}: the run resumed from this checkpoint cannot go on \(at global step \d+, "
        r"epoch \d+\): KeyError: .*contains only the model",
        lines[0],
    ), lines[0]
    monkeypatch.setenv("LIGHTNING_TF_DEBUG", "1")
    with pytest.raises(KeyError, match="contains only the model"):
        main(args)
