"""The pruning callback's side of a trial, without training: its reports reach the command as JSON lines, it waits
for each answer, the command's end (its socket closing) stops it, a forked data-loading worker keeps no copy of the
socket, and without a command (a trial's saved config run again by hand) it does nothing."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("optuna_integration")

from lightning_tf.tune.overrides import CHANNEL  # noqa: E402
from lightning_tf.tune.reporter import TrialReporter  # noqa: E402


@pytest.fixture
def command(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """The command's end of the socket pair; the run's end is in the environment, as the command starts a run."""
    ours, theirs = socket.socketpair()
    monkeypatch.setenv(CHANNEL, str(theirs.detach()))  # a descriptor only, as a run inherits it
    with ours:
        yield ours


def reporter(**kwargs: object) -> TrialReporter:
    """A reporter that, when the command's end closes, does not kill this process (as it kills its run)."""
    made = TrialReporter("val/loss", **kwargs)  # type: ignore[arg-type]
    made.gone = lambda: None  # type: ignore[method-assign]
    return made


def test_reports_reach_the_command_and_each_waits_for_its_answer(command: socket.socket) -> None:
    reporter_ = reporter(study="s", trial=3, params={"model.init_args.lr": 0.01})
    assert CHANNEL not in os.environ  # a process the run starts is not the trial
    reporter_.metrics = {"val/loss": 0.5, "val/acc": 0.75}
    lines = command.makefile("rb")
    reporter_.report(0.5, step=0)
    assert json.loads(lines.readline()) == {"step": 0, "value": 0.5, "metrics": {"val/loss": 0.5, "val/acc": 0.75}}
    answer: list[bool] = []
    waiting = threading.Thread(target=lambda: answer.append(reporter_.should_prune()))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive() and answer == []  # no answer yet: the run waits
    command.sendall(b"g")
    waiting.join(10)
    assert answer == [False]
    reporter_.report(0.4, step=1)
    assert json.loads(lines.readline())["step"] == 1
    command.sendall(b"p")
    assert reporter_.should_prune() is True
    reporter_.send({"missing": "--metric val/x is not logged"})
    assert json.loads(lines.readline()) == {"missing": "--metric val/x is not logged"}


def test_the_run_stops_when_the_command_is_gone(command: socket.socket) -> None:
    stopped = threading.Event()
    reporter().gone = stopped.set  # type: ignore[method-assign]  # in a run: SIGKILL to itself
    command.close()
    assert stopped.wait(10)


def _holds(fd: int, inode: int) -> None:
    """Exit 1 when ``fd`` is still the socket ``inode`` (multiprocessing may reuse a closed descriptor for stdin)."""
    try:
        raise SystemExit(int(os.fstat(fd).st_ino == inode))
    except OSError:
        raise SystemExit(0) from None


def test_a_forked_worker_keeps_no_copy_of_the_socket(command: socket.socket) -> None:
    """A data-loading worker forked by the run would hold the socket open after the run died, and the command would
    not see the run end until the worker did."""
    fd = reporter().socket.fileno()  # type: ignore[union-attr]
    inode = os.fstat(fd).st_ino
    worker = multiprocessing.get_context("fork").Process(target=_holds, args=(fd, inode))
    worker.start()
    worker.join(30)
    assert worker.exitcode == 0
    assert os.fstat(fd).st_ino == inode  # this process's own is open


def test_without_a_command_the_callback_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHANNEL, raising=False)
    made = TrialReporter("val/loss", study="s", trial=1)
    assert made.socket is None

    class Trainer:
        sanity_checking = False
        callback_metrics: dict = {}

    made.on_validation_end(Trainer(), None)  # type: ignore[arg-type]  # no report, no error
