"""Test settings shared by the whole suite: offline services, seeding, the integration, slow and gpu markers."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator

# Never reach a network service from a test: wandb writes offline runs, hubs are not asked.
os.environ["WANDB_MODE"] = "offline"  # never online from a test, whatever the shell says
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Prepared corpora of the suite (and of the CLI runs it starts) go to a folder of its own, removed at exit.
os.environ["LIGHTNING_TF_CACHE"] = tempfile.mkdtemp(prefix="lightning-tf-cache-")
atexit.register(shutil.rmtree, os.environ["LIGHTNING_TF_CACHE"], ignore_errors=True)

import pytest
import torch


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")
    parser.addoption(
        "--integration",
        action="store_true",
        default=False,
        help="also run tests marked integration (CLI subprocesses, DDP, resume, config builds, wandb, benchmarks)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    skip_integration = pytest.mark.skip(reason="integration: run with --integration (make test-integration)")
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "slow" in item.keywords:  # quality runs: --runslow alone decides, whatever other tier they are in
            if not config.getoption("--runslow"):
                item.add_marker(skip_slow)
        elif "integration" in item.keywords and not config.getoption("--integration"):
            item.add_marker(skip_integration)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


# The tests use tiny tensors: a second intra-op thread only adds synchronisation, and on a busy
# 2-core machine it makes each small forward pass many times slower.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _finish_wandb_run() -> Iterator[None]:
    """A WandbLogger that a test leaves open stays the process's active run, and the next
    WandbLogger would silently reuse it (and its directory): close it after every test."""
    yield
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """What a test's in-process run writes into ``os.environ`` stays in that test: wandb leaves
    ``WANDB_SERVICE`` (a later subprocess would attach to this process's wandb service) and
    ``WANDB_MODE=dryrun``, Lightning leaves ``PL_GLOBAL_SEED`` (a later subprocess would be seeded)."""
    saved = dict(os.environ)
    yield
    for key in set(os.environ) - set(saved):
        del os.environ[key]
    os.environ.update(saved)


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT_ENTRIES: set[str] = set()


#: what tests may add to the checkout: pytest's and ruff's caches, setuptools' build/ (a test that installs it)
_ROOT_ALLOWED = {".pytest_cache", ".ruff_cache", "build"}


def pytest_sessionstart(session: pytest.Session) -> None:
    _ROOT_ENTRIES.update(os.listdir(_ROOT))


def _left_in_root() -> list[str]:
    return sorted(set(os.listdir(_ROOT)) - _ROOT_ENTRIES - _ROOT_ALLOWED)


@pytest.fixture(autouse=True)
def _nothing_left_in_the_checkout(request: pytest.FixtureRequest) -> Iterator[None]:
    """Names the test after which something first appeared in the checkout, as a warning in the summary (the
    session fails on it at the end, :func:`pytest_sessionfinish`). Under xdist a file written late (by another
    process the test started) may show after a later test, of this worker or the other."""
    before = _left_in_root()
    yield
    new = sorted(set(_left_in_root()) - set(before))
    if new:
        warnings.warn(f"{', '.join(new)} appeared in {_ROOT} after {request.node.nodeid}", stacklevel=1)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test writes into its own ``tmp_path``: a file it leaves in the checkout (a ``predictions.csv`` from a
    Trainer with no ``default_root_dir``) fails the session, naming it (and the warnings summary the test after
    which it appeared)."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller checks once
        return
    new = _left_in_root()
    if new:
        print(f"\nthe tests left {', '.join(new)} in {_ROOT}: write into tmp_path", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
