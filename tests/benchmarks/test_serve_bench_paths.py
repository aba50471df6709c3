"""Where the serving benchmark looks for the K-line model with covariates it trains: the fit runs in the model's
folder, so a relative ``--tour-dir`` (``runs/serve_bench``, as docs/serve.md runs it) must reach the fit as an
absolute root, or the checkpoint lands in a folder nested under it and the benchmark fails after measuring the
other tasks. The fit is replaced by one that writes where a Lightning run writes: ``default_root_dir`` taken
relative to the process's working folder."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _benchmark(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("serve_benchmark_under_test", ROOT / "benchmarks" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
def test_the_covariates_checkpoint_is_found_where_its_fit_wrote_it(
    relative: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _benchmark(monkeypatch)
    written: list[Path] = []

    def fit(command: list[str], cwd: Path, **_: object) -> subprocess.CompletedProcess:
        root = Path(cwd) / command[command.index("--trainer.default_root_dir") + 1]  # as Lightning resolves it
        (root / "checkpoints").mkdir(parents=True)
        (root / "checkpoints" / "last.ckpt").write_bytes(b"weights")
        written.append(root / "checkpoints" / "last.ckpt")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(bench.subprocess, "run", fit)
    monkeypatch.chdir(tmp_path)
    folder = Path("runs/serve_bench") if relative else tmp_path / "runs/serve_bench"
    checkpoint = bench.kline_covariates_checkpoint(folder)
    assert checkpoint.is_absolute() and checkpoint == written[0].resolve()
    assert checkpoint == (tmp_path / "runs/serve_bench/kline_covariates/checkpoints/last.ckpt")
    assert bench.kline_covariates_checkpoint(folder) == checkpoint and len(written) == 1  # trained once


def test_a_fit_that_leaves_no_checkpoint_stops_with_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _benchmark(monkeypatch)
    monkeypatch.setattr(bench.subprocess, "run", lambda command, **_: subprocess.CompletedProcess(command, 0))
    with pytest.raises(SystemExit) as stopped:
        bench.kline_covariates_checkpoint(tmp_path)
    expected = tmp_path.resolve() / "kline_covariates/checkpoints/last.ckpt"
    assert str(stopped.value) == f"the K-line model with covariates trained, but {expected} is not there"
