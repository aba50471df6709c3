"""``RankWatch`` in process: what a failed collective is, what each view sees (the ranks a process started,
the rank that started it, the rendezvous store), when a death becomes a verdict (at once after a failed
collective, after ``SETTLE`` otherwise, never once the rank stood down), and what a verdict does (one line
from one rank, the store told, the started ranks ended, the exit status). The real thing, with real
signals and processes, is ``tests/test_preemption.py``'s dead-rank test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import torch.distributed as dist
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lightning_tf.training import rank_watch
from lightning_tf.training.rank_watch import STORE_KEY, Lost, RankWatch, lost_connection

GLOO = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:28080. "
    "This is typically caused by a remote worker crashing."
)


def test_a_lost_peer_is_told_from_a_ranks_own_error() -> None:
    assert lost_connection(RuntimeError(GLOO))
    assert lost_connection(dist.DistBackendError("NCCL communicator was aborted"))
    try:
        try:
            raise RuntimeError("Read error [10.0.0.2]:4012: Connection reset by peer")
        except RuntimeError as err:
            raise ValueError("while syncing the metrics") from err
    except ValueError as wrapped:
        assert lost_connection(wrapped)
    assert not lost_connection(ValueError("model.d_model (64) must be divisible by model.n_heads (3)"))
    assert not lost_connection(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match=r"interval \(0\) must be > 0 and handover \(10.0\) >= 0"):
        RankWatch(interval=0)
    with pytest.raises(ValueError, match=r"handover \(-1\) >= 0"):
        RankWatch(handover=-1)


# ------------------------------------------------------------------------------------------ views


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[dist.TCPStore]:
    """A rendezvous store in this process, where a rank's ``MASTER_ADDR:MASTER_PORT`` points."""
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(master.port))
    yield master


def fake_trainer(local_rank: int = 0, node_rank: int = 0, devices: int = 3, nodes: int = 1) -> Any:
    """What the watch reads of a Trainer: ranks, sizes, the cluster environment (Lightning's, reading
    ``MASTER_ADDR`` / ``MASTER_PORT``)."""
    return SimpleNamespace(
        world_size=devices * nodes,
        num_devices=devices,
        num_nodes=nodes,
        node_rank=node_rank,
        local_rank=local_rank,
        global_rank=node_rank * devices + local_rank,
        strategy=SimpleNamespace(cluster_environment=LightningEnvironment()),
    )


def started(watch: RankWatch, trainer: Any) -> RankWatch:
    """``watch`` set up on ``trainer`` with its thread stopped: the test looks and decides in its place (the
    thread would share the store's client and, on a death, end the test process)."""
    watch.setup(trainer, None, "fit")  # type: ignore[arg-type]
    if watch._thread is not None:
        watch._stop.set()
        watch._thread.join()
        watch._stop.clear()
    return watch


def child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.fixture
def ranks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen]]:
    """Two processes standing for local ranks 1 and 2, given to the watch as Lightning's launcher's."""
    procs = [child("import time; time.sleep(60)"), child("import time; time.sleep(60)")]
    monkeypatch.setattr(rank_watch.private, "launched_processes", lambda trainer: procs)
    monkeypatch.setattr(rank_watch.private, "stop_child_observer", lambda: True)
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.fixture
def watch() -> Iterator[RankWatch]:
    w = RankWatch(interval=0.05)
    w.details = False
    yield w
    w._stand_down()


@pytest.mark.parametrize(("kill", "how"), [(True, "killed by SIGKILL"), (False, "exit status 3")])
def test_the_first_rank_of_a_node_sees_the_ranks_it_started_end(
    kill: bool, how: str, store: Any, watch: RankWatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Local rank 1 finished (status 0: not dead); then local rank 2 is killed, or fails with status 3."""
    waiting = "import sys; sys.stdin.readline(); raise SystemExit(3)"
    procs = [child("raise SystemExit(0)"), subprocess.Popen([sys.executable, "-c", waiting], stdin=subprocess.PIPE)]
    monkeypatch.setattr(rank_watch.private, "launched_processes", lambda trainer: procs)
    monkeypatch.setattr(rank_watch.private, "stop_child_observer", lambda: True)
    try:
        started(watch, fake_trainer(node_rank=1, nodes=2))
        procs[0].wait()
        assert watch._look() is None
        if kill:
            procs[1].kill()
        procs[1].communicate(b"go\n")
        assert watch._look() == Lost(5, 6, how, 3, "children")  # node 1's local rank 2, seen by its rank 0 (3)
    finally:
        procs[1].kill()


def test_a_rank_started_by_lightning_sees_the_rank_that_started_it_end(
    store: Any, watch: RankWatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rank_watch.private, "launched_processes", lambda trainer: [])  # a rank Lightning started
    started(watch, fake_trainer(local_rank=2, node_rank=1, nodes=2))
    assert watch._parent == os.getppid() and watch._look() is None
    watch._parent += 1  # as when the parent has ended and the process was handed to another
    assert watch._look() == Lost(3, 6, "its process ended", 5, "parent")


def test_a_death_seen_on_another_node_is_read_from_the_store_and_a_store_gone_is_rank_0_gone(
    store: Any, watch: RankWatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rank_watch.private, "launched_processes", lambda trainer: None)  # torchrun, srun: no views
    started(watch, fake_trainer(local_rank=1))
    assert watch._parent is None and watch._look() is None
    store.set(STORE_KEY, "11\nkilled by SIGKILL\n9")
    assert store.check([STORE_KEY])  # stored (a set is not answered)
    assert watch._look() == Lost(11, 3, "killed by SIGKILL", 9, "store")


def test_a_store_that_stops_answering_is_rank_0_gone(watch: RankWatch, monkeypatch: pytest.MonkeyPatch) -> None:
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(master.port))
    monkeypatch.setattr(rank_watch.private, "launched_processes", lambda trainer: None)
    started(watch, fake_trainer(local_rank=0, node_rank=1, nodes=2))
    assert watch._look() is None
    del master
    lost = Lost(0, 6, "the rendezvous store it holds stopped answering", 3, "store")
    assert watch._look() == lost
    assert watch._look() == lost  # once gone, gone: its client does not reconnect


# -------------------------------------------------------------------------------------- verdicts


class Ended(Exception):
    """What ``os._exit`` raises here instead of ending the test process."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@pytest.fixture
def no_exit(monkeypatch: pytest.MonkeyPatch) -> list[Lost]:
    """``os._exit`` raises :class:`Ended`; the verdicts the watch reached, in order."""

    def _exit(code: int) -> None:
        raise Ended(code)

    monkeypatch.setattr(rank_watch.os, "_exit", _exit)
    return []


def watching(watch: RankWatch, seen: list[Lost], sees: Lost | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start ``watch`` on a process that sees nothing of its own, with ``_look`` answering ``sees`` and
    ``_end`` recording the verdict."""
    monkeypatch.setattr(rank_watch.private, "launched_processes", lambda trainer: None)
    monkeypatch.setattr(watch, "_connect", lambda environment: None)
    watch.setup(fake_trainer(), None, "fit")  # type: ignore[arg-type]
    monkeypatch.setattr(watch, "_look", lambda: sees)

    def end(lost: Lost) -> None:  # as the real one, less the exit
        seen.append(lost)
        watch._state = "ended"
        watch._stop.set()

    monkeypatch.setattr(watch, "_end", end)


DEAD = Lost(1, 3, "killed by SIGKILL", 0, "children")


def test_a_death_seen_outside_a_collective_is_a_verdict_after_settle(
    watch: RankWatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rank_watch, "SETTLE", 0.5)
    seen: list[Lost] = []
    start = time.monotonic()
    watching(watch, seen, DEAD, monkeypatch)
    while not seen and time.monotonic() - start < 10:
        time.sleep(0.01)
    assert seen[:1] == [DEAD] and time.monotonic() - start >= 0.5


def test_a_rank_that_stands_down_within_settle_reaches_no_verdict(
    watch: RankWatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of fit, an agreed SIGTERM stop, a rank's own error: another rank may end a moment earlier."""
    monkeypatch.setattr(rank_watch, "SETTLE", 0.5)
    seen: list[Lost] = []
    watching(watch, seen, DEAD, monkeypatch)
    time.sleep(0.2)
    watch.on_exception(None, None, SIGTERMException())  # type: ignore[arg-type]
    time.sleep(0.6)
    assert seen == [] and watch._state == "stood down"
    assert not watch._thread.is_alive()  # type: ignore[union-attr]


@pytest.mark.parametrize("error", [ValueError("a bad batch"), RuntimeError("CUDA out of memory"), KeyboardInterrupt()])
def test_a_ranks_own_error_stands_the_watch_down_at_once(
    error: BaseException, watch: RankWatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Lost] = []
    watching(watch, seen, None, monkeypatch)
    start = time.monotonic()
    watch.on_exception(None, None, error)  # type: ignore[arg-type]
    assert watch._state == "stood down" and time.monotonic() - start < 1


def test_a_failed_collective_hands_over_and_the_verdict_follows_the_next_look(
    watch: RankWatch, monkeypatch: pytest.MonkeyPatch, no_exit: list[Lost]
) -> None:
    monkeypatch.setattr(rank_watch, "SETTLE", 60.0)  # were it not handed over, nothing for a minute
    seen: list[Lost] = []
    watching(watch, seen, DEAD, monkeypatch)

    def on_exception() -> None:
        watch.on_exception(fake_trainer(), None, RuntimeError(GLOO))  # type: ignore[arg-type]

    main = threading.Thread(target=on_exception, daemon=True)  # it waits for the process to end
    start = time.monotonic()
    main.start()
    while not seen and time.monotonic() - start < 10:
        time.sleep(0.01)
    assert seen == [DEAD] and time.monotonic() - start < 5 and isinstance(watch._exception, RuntimeError)
    time.sleep(0.2)
    assert main.is_alive()  # the rank waits for the exit, printing nothing more
    watch._state = "off"
    main.join(5)


@pytest.mark.parametrize("error", [RuntimeError(GLOO), ValueError("a bad batch")])
def test_an_error_that_comes_while_the_watch_ends_the_process_prints_nothing_more(
    error: BaseException, watch: RankWatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict came first: Lightning would go on to its teardown and Python to the traceback."""
    watching(watch, [], None, monkeypatch)
    watch._state = "ended"
    main = threading.Thread(target=watch.on_exception, args=(None, None, error), daemon=True)
    main.start()
    time.sleep(0.3)
    assert main.is_alive()
    watch._state = "off"
    main.join(5)
    assert not main.is_alive()


def test_a_failed_collective_no_watch_explains_ends_the_rank_after_handover(
    watch: RankWatch, monkeypatch: pytest.MonkeyPatch, no_exit: list[Lost], capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(rank_watch.private, "launched_processes", lambda trainer: None)
    monkeypatch.setattr(watch, "_connect", lambda environment: None)
    watch.handover = 0.3
    watch.setup(fake_trainer(), None, "fit")  # type: ignore[arg-type]
    start = time.monotonic()
    with pytest.raises(Ended) as ended:
        watch.on_exception(fake_trainer(), None, RuntimeError(GLOO))  # type: ignore[arg-type]
    assert ended.value.code == 1 and time.monotonic() - start >= 0.3
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "rank 0 of 3 lost a collective (RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] "
        "Connection closed by peer [127.0.0.1]:28080. This is typically caused by a remote worker crashing.) and "
        "no rank it can see died: a rank on another node, or the network"
    ]


@pytest.mark.parametrize(
    ("local_rank", "view", "prints"),
    [(0, "children", True), (1, "children", False), (1, "parent", True), (2, "parent", False), (0, "store", True)],
)
def test_a_verdict_prints_one_line_on_one_rank_tells_the_store_ends_the_started_ranks_and_exits_1(
    local_rank: int,
    view: str,
    prints: bool,
    store: Any,
    ranks: list[subprocess.Popen],
    watch: RankWatch,
    no_exit: list[Lost],
    capsys: pytest.CaptureFixture[str],
) -> None:
    started(watch, fake_trainer(local_rank=local_rank))
    watch.report = lambda lost: f"the line: {lost}"
    lost = Lost(2, 3, "killed by SIGKILL", 0, view)
    with pytest.raises(Ended) as ended:
        watch._end(lost)
    assert ended.value.code == rank_watch.EXIT_STATUS == 1 and watch.lost == lost
    out = capsys.readouterr()
    assert out.out == "" and out.err == (
        "the line: rank 2 of 3 died (killed by SIGKILL; seen by rank 0)\n" if prints else ""
    )
    told = store.check([STORE_KEY])
    assert told == (view != "store")  # what was read from the store is not written back
    if told:
        assert store.get(STORE_KEY) == b"2\nkilled by SIGKILL\n0"
    if local_rank == 0:  # the node's first rank ended the ranks it started
        assert [p.wait(5) for p in ranks] == [-signal.SIGKILL] * 2
    watch._end(lost)  # once only: a second verdict (the other thread's) does nothing


def test_details_show_the_failed_collective_and_every_threads_stack(
    watch: RankWatch, monkeypatch: pytest.MonkeyPatch, no_exit: list[Lost], capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(rank_watch.private, "launched_processes", lambda trainer: None)
    monkeypatch.setattr(watch, "_connect", lambda environment: None)
    started(watch, fake_trainer())
    watch.details = True
    watch._exception = RuntimeError(GLOO)
    with pytest.raises(Ended):
        watch._end(DEAD)
    err = capfd.readouterr().err
    assert f"RuntimeError: {GLOO}" in err and "most recent call first" in err and "in _end" in err
    assert err.rstrip().endswith("rank 1 of 3 died (killed by SIGKILL; seen by rank 0)")


def test_a_report_that_fails_still_leaves_the_line(
    watch: RankWatch, monkeypatch: pytest.MonkeyPatch, no_exit: list[Lost], capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(rank_watch.private, "launched_processes", lambda trainer: None)
    monkeypatch.setattr(watch, "_connect", lambda environment: None)
    started(watch, fake_trainer())
    watch.report = lambda lost: 1 / 0  # type: ignore[assignment,return-value]
    with pytest.raises(Ended):
        watch._end(DEAD)
    assert capsys.readouterr().err == (
        "rank 1 of 3 died (killed by SIGKILL; seen by rank 0) (the resume command could not be made: "
        "ZeroDivisionError('division by zero'))\n"
    )


def test_a_single_process_runs_without_a_watch(watch: RankWatch) -> None:
    watch.setup(fake_trainer(devices=1), None, "fit")  # type: ignore[arg-type]
    assert watch._thread is None and watch._state == "off"
