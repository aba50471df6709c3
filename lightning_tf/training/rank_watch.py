"""A rank that dies: the other ranks stop within seconds, and one line names it and the way to go on.

Under data parallelism every rank waits for every other one in each collective. When one process dies
(SIGKILL, the out-of-memory killer, a crash), gloo raises "Connection closed by peer" in the others at
their next collective, without saying which rank is gone, and NCCL waits out its collective timeout
(30 minutes under Lightning's default). :class:`RankWatch` is a thread in every rank that looks, every
``interval`` seconds, at the processes it can know about for certain:

* **the ranks it started.** Under Lightning's own launcher the first process of a node (local rank 0)
  starts the node's other ranks as its child processes, so the operating system tells it, the moment
  one ends, that it ended and how: killed by SIGKILL, exit status 1. Lightning watches them too (every
  5 s) and then kills every process of the node without a word; the watch stops that watcher and does
  the same after saying why (:mod:`.private.lightning`);
* **the rank that started it.** A rank that Lightning's launcher started sees its parent process, the
  node's first rank, end: its parent process id changes;
* **what another node saw.** The rank that names a dead rank writes it into torch's rendezvous store,
  the ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT`` that every rank of every node already reaches, and
  every rank reads it there; a store that stops answering means that rank 0, which holds it, is gone
  (or its node, or the network to it).

Exit statuses and parent processes come from the operating system: a dead rank is named exactly and at
once, whatever it and the others were doing, under gloo as under NCCL. Nothing is inferred from time (a
heartbeat that stops may be a busy process, a paused one or a slow file system, and a heartbeat file
needs a folder that every node shares), nor from the text of the gloo error (it names an address and a
port, not a rank). That text only decides what a failed collective does in a survivor: a lost
connection (:func:`lost_connection`) hands over to the watch and waits for its verdict, up to
``handover`` seconds; any other error makes the watch stand down, and the error is the rank's own.

A verdict ends the run on the node: one rank prints one line, naming the dead rank and the command that
resumes from the newest checkpoint (the ``lightning-tf`` command sets :attr:`RankWatch.report`), writes
the death into the store for the other nodes, ends the ranks it started and exits with status
:data:`EXIT_STATUS`; the others exit without a word. Who prints: the first rank of the node when one of
its ranks died; local rank 1 when the first rank itself died; the first rank of each other node when it
reads the death from the store. A process ends with ``os._exit``: a survivor may be inside a collective
that never returns. ``details`` (``LIGHTNING_TF_DEBUG=1`` under the command) also prints the failed
collective's traceback and where every thread of the process stood.

When. A survivor inside a collective (the usual case: under DDP there is one every step) hands over as
soon as it fails, under gloo at once, and the verdict follows within ``interval``. A survivor that is
not (a validation, a checkpoint save) confirms what it saw for :data:`SETTLE` seconds first: ranks that
end together (the end of fit, an agreed SIGTERM stop, a non-finite loss on every rank) may end a moment
apart, and the last to get there must not call the first dead. So the ranks of the node stop within
``interval + SETTLE`` seconds of the death (3 s by default), plus their exit. Ranks of another node read
the verdict from the store within ``interval`` of its writing; a collective failure that no watch can
explain (a whole node lost at once) ends the rank after ``handover`` seconds with a line that says so, and
under NCCL, where a collective with a lost peer does not fail but waits, the process group's timeout
(``timeout`` of the strategy, ten minutes in ``configs/trainer/ddp.yaml``) is the bound.

A checkpoint save that a verdict interrupts (rank 0 writes alone) leaves the previous file whole: the
writer of ``configs/trainer/default.yaml`` (:class:`~.checkpoints.AtomicCheckpointIO`) renames a
complete file into place.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .private import lightning as private

__all__ = ["EXIT_STATUS", "SETTLE", "STORE_KEY", "Lost", "RankWatch", "lost_connection"]

log = logging.getLogger(__name__)

#: exit status of every rank that a verdict ends (a failure: the run did not finish)
EXIT_STATUS = 1
#: seconds a death seen outside a failed collective is confirmed before the verdict (see the module docstring)
SETTLE = 2.0
#: the rendezvous store's key under which the rank that names a dead rank writes it for the other nodes
STORE_KEY = "lightning_tf/lost_rank"

# what gloo and NCCL say when a peer is gone or a collective waited too long
_LOST = re.compile(r"gloo|NCCL|nccl|Connection (?:closed|reset) by peer|Broken pipe")


def lost_connection(exception: BaseException) -> bool:
    """Whether ``exception`` (or one it was raised from) is a collective that lost a peer: one of
    ``torch.distributed``'s own errors, or a gloo or NCCL error saying so."""
    seen: set[int] = set()
    error: BaseException | None = exception
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, dist.DistError) or (isinstance(error, RuntimeError) and _LOST.search(str(error))):
            return True
        error = error.__cause__ or error.__context__
    return False


@dataclass(frozen=True)
class Lost:
    """A verdict: which rank is gone and how this rank knows.

    Args:
        rank: the global rank that died (None: a collective failed and no watched process died).
        world_size: the run's number of ranks.
        how: how it ended, in words (``killed by SIGKILL``, ``exit status 1``, ``its process ended``).
        seen_by: the global rank that saw it.
        view: ``children`` (the ranks this one started), ``parent`` (the rank that started this one),
            ``store`` (written there by another node, or the store gone) or ``collective`` (none of those).
    """

    rank: int | None
    world_size: int
    how: str
    seen_by: int
    view: str

    def __str__(self) -> str:
        if self.rank is None:
            return (
                f"rank {self.seen_by} of {self.world_size} lost a collective ({self.how}) and no rank it can see "
                f"died: a rank on another node, or the network"
            )
        return f"rank {self.rank} of {self.world_size} died ({self.how}; seen by rank {self.seen_by})"


def _exit_how(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


class RankWatch(Callback):
    """Under data parallelism, stops every rank within seconds of one rank's death and prints one line
    naming it (see the module docstring); a single process runs without it.

    Args:
        interval: seconds between two looks at the watched processes and the rendezvous store.
        handover: seconds a rank whose collective lost its connection waits for the watch's verdict before
            it ends with a line of its own.
    """

    def __init__(self, interval: float = 1.0, handover: float = 10.0) -> None:
        if interval <= 0 or handover < 0:
            raise ValueError(f"interval ({interval}) must be > 0 and handover ({handover}) >= 0")
        self.interval, self.handover = interval, handover
        #: the line printed for a verdict (None: ``str(lost)``); the ``lightning-tf`` command adds the resume command
        self.report: Callable[[Lost], str] | None = None
        #: also print the failed collective's traceback and every thread's stack
        self.details = True
        self.lost: Lost | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = "off"
        self._exception: BaseException | None = None
        self._ended = False
        self._children: list[subprocess.Popen] = []
        self._parent: int | None = None
        self._store: Any = None
        self._store_lost = False
        self._trainer: Trainer | None = None

    # ---------------------------------------------------------------------------------------- hooks
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if trainer.world_size < 2 or self._state in ("running", "handed over"):
            return
        self._trainer = trainer
        launched = private.launched_processes(trainer)
        self._children = list(launched or [])
        if self._children:
            private.stop_child_observer()
        environment = getattr(trainer.strategy, "cluster_environment", None)
        by_lightning = launched is not None and isinstance(environment, LightningEnvironment)
        self._parent = os.getppid() if by_lightning and trainer.local_rank > 0 else None
        self._store, self._store_lost = (self._connect(environment) if environment is not None else None), False
        self._state, self._exception, self.lost = "running", None, None
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="lightning-tf-rank-watch", daemon=True)
        self._thread.start()

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._stand_down()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self._state == "running":
            stop = isinstance(exception, (SIGTERMException, KeyboardInterrupt))
            if stop or not lost_connection(exception):
                self._stand_down()  # this rank's own error or stop: it is reported as usual
                return
            with self._lock:
                if self._state == "running":
                    self._state, self._exception = "handed over", exception
            self._stop.wait(self.handover)
            if self._state == "handed over":  # no watched process died: a peer this rank cannot see
                text = str(exception).strip()
                how = f"{type(exception).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
                self._end(Lost(None, trainer.world_size, how, trainer.global_rank, "collective"))
        while self._state == "ended":  # the watch is ending the process: nothing more may be printed from here
            time.sleep(0.1)

    # ---------------------------------------------------------------------------------------- the watch
    def _connect(self, environment: Any) -> Any:
        """A client of the rendezvous store the cluster environment names (None when it cannot be reached)."""
        try:
            return dist.TCPStore(
                environment.main_address,
                environment.main_port,
                is_master=False,
                timeout=timedelta(seconds=max(5.0, 2 * self.interval)),
                wait_for_workers=False,
            )
        except Exception as err:  # a launcher without a TCPStore there: the process views still work
            log.debug(
                "rank watch: no rendezvous store at %s:%s (%s)", environment.main_address, environment.main_port, err
            )
            return None

    def _look(self) -> Lost | None:
        """What the watched processes and the store say now (None: every one is alive)."""
        trainer = self._trainer
        assert trainer is not None
        world, me = trainer.world_size, trainer.global_rank
        first = trainer.node_rank * trainer.num_devices  # the global rank of this node's first process
        for local, proc in enumerate(self._children, start=1):
            code = proc.poll()
            if code:  # ended, and not with status 0 (a rank that finished)
                return Lost(first + local, world, _exit_how(code), me, "children")
        if self._parent is not None and os.getppid() != self._parent:
            return Lost(first, world, "its process ended", me, "parent")
        if self._store_lost:
            return Lost(0, world, "the rendezvous store it holds stopped answering", me, "store")
        if self._store is None:
            return None
        try:
            if not self._store.check([STORE_KEY]):
                return None
            rank, how, seen_by = self._store.get(STORE_KEY).decode().split("\n", 2)
            return Lost(int(rank), world, how, int(seen_by), "store")
        except Exception:  # the store is gone with the process that held it: its client does not reconnect
            self._store_lost = True
            return self._look()

    def _watch(self) -> None:
        first_seen: float | None = None
        while not self._stop.wait(self.interval):
            try:
                lost = self._look()
            except Exception:
                log.exception("rank watch: looking at the other ranks failed; watching stops")
                return
            if lost is None:
                first_seen = None
                continue
            first_seen = first_seen if first_seen is not None else time.monotonic()
            with self._lock:
                if self._state not in ("running", "handed over"):
                    return
                decided = self._state == "handed over" or time.monotonic() - first_seen >= SETTLE
            if decided:
                self._end(lost)

    def _stand_down(self) -> None:
        with self._lock:
            if self._state in ("running", "handed over"):
                self._state = "stood down"
        self._stop.set()

    def _prints(self, lost: Lost) -> bool:
        trainer = self._trainer
        assert trainer is not None
        if lost.view == "parent":
            return trainer.local_rank == 1
        return trainer.local_rank == 0

    def _end(self, lost: Lost) -> None:
        """Say it (when this rank is the one that does), tell the other nodes, end the ranks this one
        started, and exit."""
        with self._lock:
            if self._ended or self._state not in ("running", "handed over"):
                return
            self._ended, self._state, self.lost = True, "ended", lost
        self._stop.set()
        try:
            if self.details:
                if self._exception is not None:
                    traceback.print_exception(self._exception, file=sys.stderr)
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            if self._prints(lost):
                line = str(lost)
                if self.report is not None:
                    try:
                        line = self.report(lost)
                    except Exception as err:  # the line must come out whatever the report does
                        line = f"{line} (the resume command could not be made: {err!r})"
                print(line, file=sys.stderr, flush=True)
            # rank 0 holds the store: with rank 0 gone there is no store to write to
            if self._store is not None and not self._store_lost and lost.view != "store" and lost.rank not in (None, 0):
                self._store.set(STORE_KEY, f"{lost.rank}\n{lost.how}\n{lost.seen_by}")
                self._store.check([STORE_KEY])  # a set is not answered: a question after it waits until it is stored
                if self._trainer is not None and self._trainer.global_rank == 0 and self._trainer.num_nodes > 1:
                    time.sleep(2 * self.interval)  # the other nodes read it before the store ends with this process
        except Exception:
            log.exception("rank watch: reporting the lost rank failed")
        finally:
            for proc in self._children:
                if proc.poll() is None:
                    proc.kill()  # it may wait in a collective that never returns: SIGTERM would not end it
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_STATUS)
