"""The package as users install it: a wheel carries the configs and the embedded MSFT bars, and its
defaults (``KLineDataModule()``, ``lightning-tf tour``) work from an empty folder with only the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lightning_tf import resources
from tests.helpers.cli import ROOT


def test_find_prefers_the_working_directory_then_the_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resources.repository_root() == ROOT
    assert resources.find("data/msft.csv") == ROOT / "data" / "msft.csv"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "msft.csv").write_text("mine")
    assert resources.find("data/msft.csv") == Path("data/msft.csv")  # the user's own file wins
    assert resources.find("configs/nothing.yaml") is None
    assert resources.find(tmp_path / "absent.csv") is None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (path,) = out.glob("lightning_tf-*.whl")
    return path


@pytest.mark.integration
def test_the_wheel_holds_every_config_and_the_msft_bars(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    configs = {f"lightning_tf/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / "configs").rglob("*.yaml")}
    assert len(configs) > 10 and configs <= names, sorted(configs - names)
    assert "lightning_tf/data/msft.csv" in names
    assert not any(n.startswith(("tests/", "benchmarks/", "docs/")) for n in names)
    # every module of the package, sub-packages included (each must be listed in pyproject.toml)
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "lightning_tf").rglob("*.py")}
    assert modules <= names, sorted(modules - names)


@pytest.mark.integration
def test_the_installed_defaults_work_from_an_empty_folder(wheel: Path, tmp_path: Path) -> None:
    site, work = tmp_path / "site", tmp_path / "empty"
    zipfile.ZipFile(wheel).extractall(site)  # what pip installs for a pure-Python wheel
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    code = (
        "import lightning_tf, lightning_tf.training.resources as r\n"
        "from lightning_tf.kline import KLineDataModule\n"
        "dm = KLineDataModule(); dm.setup('fit')\n"
        "print(lightning_tf.__file__, r.repository_root(), len(dm.datasets['train']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, root, n_train = proc.stdout.split()[-3:]
    assert where.startswith(str(site)) and root == "None" and int(n_train) > 1000
    short = [
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "2",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.limit_test_batches",
        "1",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_tf", "tour", "--tasks", "vision", "--", *short],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert (work / "runs" / "tour_summary.md").is_file()
    assert list((work / "runs").rglob("*.ckpt")), "the tour left no checkpoint in the empty folder"
    # the shipped configs by their repository paths, from the empty folder
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_tf",
            "fit",
            "--config",
            "configs/trainer/default.yaml",
            "--config=configs/kline/msft_daily.yaml",
            "--print_config",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "class_path: lightning_tf.kline.KLineForecaster" in proc.stdout


def test_shipped_configs_are_found_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--config configs/...`` names the package's own config from a folder that has none; a file of
    the working directory wins, a path that exists nowhere is left for the parser to report."""
    from lightning_tf.training.resources import bundled_configs

    monkeypatch.chdir(tmp_path)
    args = [
        "fit",
        "--config",
        "configs/trainer/default.yaml",
        "--config=configs/kline/msft_daily.yaml",
        "--config",
        "configs/nowhere.yaml",
        "--model.lr",
        "0.1",
    ]
    out = bundled_configs(args)
    assert Path(out[2]).is_file() and Path(out[2]).samefile(ROOT / "configs" / "trainer" / "default.yaml")
    assert out[3].startswith("--config=") and Path(out[3].split("=", 1)[1]).samefile(
        ROOT / "configs" / "kline" / "msft_daily.yaml"
    )
    assert out[4:] == ["--config", "configs/nowhere.yaml", "--model.lr", "0.1"]
    (tmp_path / "configs" / "trainer").mkdir(parents=True)
    (tmp_path / "configs" / "trainer" / "default.yaml").write_text("trainer: {}\n")
    assert bundled_configs(["--config", "configs/trainer/default.yaml"]) == ["--config", "configs/trainer/default.yaml"]


def test_every_package_of_the_source_tree_is_listed_for_the_wheel() -> None:
    """pyproject.toml names its packages one by one: a new subpackage left off the list would be missing from the
    installed package (an import error only a user would meet)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "lightning_tf").rglob("__init__.py")}
    assert found - listed == set(), f"packages missing from pyproject.toml: {sorted(found - listed)}"
