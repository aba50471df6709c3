"""How a trial tells what ended it: out-of-memory errors recognised in both of torch's forms, and a stop
request (SIGINT) that raises inside a trial's own work but waits while the study's storage is written."""

from __future__ import annotations

import signal

import pytest
import torch

pytest.importorskip("optuna_integration")

from lightning_tf.tune.trial import Interrupts, _is_oom  # noqa: E402


def test_out_of_memory_in_both_forms() -> None:
    assert _is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert _is_oom(RuntimeError("CUDA error: out of memory"))
    assert not _is_oom(RuntimeError("shape mismatch")) and not _is_oom(ValueError("out of memory"))


def test_a_stop_request_raises_in_the_trial_and_waits_for_the_storage() -> None:
    interrupts = Interrupts()
    interrupts.handler(signal.SIGINT, None)  # between trials: only noted
    assert interrupts.requested
    with pytest.raises(KeyboardInterrupt):  # a trial does not start after a request
        with interrupts.raising():
            pass
    interrupts = Interrupts()
    order = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.raising():
            with interrupts.deferred():
                interrupts.handler(signal.SIGINT, None)  # during a storage call: waits
                order.append("storage written")
            order.append("not reached")  # raised when the storage call ended
    assert order == ["storage written"]
    interrupts = Interrupts()
    with pytest.raises(KeyboardInterrupt):
        with interrupts.raising():
            interrupts.handler(signal.SIGINT, None)  # in the trial's own work: at once
            order.append("not reached either")
    assert order == ["storage written"]
    interrupts.handler(signal.SIGINT, None)  # after the trial: noted again, nothing raised
