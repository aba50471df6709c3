"""The prepared panel (``KLineDataModule(cache_dir=...)``): the same rows, windows, statistics and batches as
the panel built in memory; reused without reading a bar file, its build's warnings said again; a changed
file or setting builds a new one; a damaged or unfinished one is built again, and the run says so; the
rows are mapped from the folder's files."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import KLineDataModule
from lightning_tf.kline import data as kline_data
from lightning_tf.kline.panel import PanelSettings, build_panel
from lightning_tf.kline.reader import read_bars
from lightning_tf.kline.settings import Features, Splits
from tests.helpers.kline import make_bars

SETTINGS = dict(context_len=8, horizon=2, val_start="2000-05-01", test_start="2000-06-01", batch_size=16)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Three tickers, one of which lists after the validation border (left out, with a warning)."""
    bars = tmp_path / "bars"
    bars.mkdir()
    for seed, name in enumerate(["C", "A", "B"]):
        make_bars(160, seed=seed).to_csv(bars / f"{name}.csv", index=False)
    make_bars(40, seed=9, start="2000-06-05").to_csv(bars / "IPO.csv", index=False)
    return bars


def _built(path: Path, **kw: object) -> KLineDataModule:
    dm = KLineDataModule.from_arguments({"path": str(path), **SETTINGS, **kw})
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _assert_same(a: KLineDataModule, b: KLineDataModule) -> None:
    assert a.ticker_names == b.ticker_names == ["A", "B", "C"]
    assert a.borders == b.borders
    assert a._rows.keys() == b._rows.keys() and all(torch.equal(a._rows[k], b._rows[k]) for k in a._rows)
    for split in ("train", "val", "test"):
        assert torch.equal(a.datasets[split].ends, b.datasets[split].ends)
    assert a.data_scale.to_dict() == b.data_scale.to_dict()
    for one, two in zip(a.train_dataloader(), b.train_dataloader(), strict=True):  # the same shuffled batches
        assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)


def test_a_prepared_panel_equals_the_panel_built_in_memory_and_is_reused_without_reading_bars(
    folder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = _built(folder)
    with caplog.at_level(logging.INFO):
        prepared = _built(folder, cache_dir=str(tmp_path / "cache"))
    assert "preparing the panel into" in caplog.text and prepared._frame is None
    _assert_same(memory, prepared)
    assert len(list((tmp_path / "cache" / "kline").glob("bars-*[!k]"))) == 1  # one folder (and its lock)

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("a reused panel read the bars")

    monkeypatch.setattr(kline_data, "read_with_settings", no_reading)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        reused = _built(folder, cache_dir=str(tmp_path / "cache"))
    assert "reusing the prepared panel" in caplog.text
    # what the build said is said again, marked as such: nothing is lost on reuse
    assert "ticker 'IPO' has 0 usable training rows" in caplog.text and "(when the panel was prepared)" in caplog.text
    _assert_same(memory, reused)
    monkeypatch.undo()
    # the canonical bars are still there for reports, read when asked for
    pd.testing.assert_frame_equal(reused.split_frame("test"), memory.split_frame("test"))


def test_a_changed_bar_file_or_setting_builds_a_new_panel(folder: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _built(folder, cache_dir=str(cache))
    panels = lambda: sorted(p.name for p in (cache / "kline").iterdir() if p.is_dir())  # noqa: E731
    assert len(panels()) == 1
    _built(folder, cache_dir=str(cache), horizon=3)  # a setting
    assert len(panels()) == 2
    _built(folder, cache_dir=str(cache), on_error="drop")  # a reader option
    assert len(panels()) == 3
    bars = pd.read_csv(folder / "B.csv")
    bars.loc[100, "Volume"] += 1  # one volume of one file
    bars.to_csv(folder / "B.csv", index=False)
    changed = _built(folder, cache_dir=str(cache))
    assert len(panels()) == 4
    assert not torch.equal(changed._rows["x"], first._rows["x"])
    _assert_same(changed, _built(folder))


def test_a_damaged_or_unfinished_panel_is_built_again_and_said(folder: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    expected = _built(folder)
    _built(folder, cache_dir=str(cache))
    (panel,) = [p for p in (cache / "kline").iterdir() if p.is_dir()]
    with (panel / "x.npy").open("r+b") as f:
        f.truncate((panel / "x.npy").stat().st_size - 4)
    with pytest.warns(UserWarning, match=r"cannot be used \(x\.npy has \d+ bytes, the manifest says \d+\); building"):
        again = _built(folder, cache_dir=str(cache))
    _assert_same(expected, again)
    data = bytearray((panel / "y.npy").read_bytes())  # same size, one byte changed
    data[-1] ^= 0xFF
    (panel / "y.npy").write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"y\.npy does not match its checksum"):
        _assert_same(expected, _built(folder, cache_dir=str(cache)))
    # a build killed half way leaves a temporary folder and no panel: removed, said, built
    panel.rename(panel.with_name(panel.name + ".tmp4242"))
    with pytest.warns(UserWarning, match=r"removing .*\.tmp4242: an unfinished build of this panel"):
        _assert_same(expected, _built(folder, cache_dir=str(cache)))
    assert not list((cache / "kline").glob("*.tmp*"))


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
def test_the_rows_are_mapped_from_the_panel_files(folder: Path, tmp_path: Path) -> None:
    dm = _built(folder, cache_dir=str(tmp_path / "cache"))
    maps = [line.split() for line in Path("/proc/self/maps").read_text().splitlines()]
    for key in ("x", "y", "anchor", "time"):
        address = dm._rows[key].data_ptr()
        (path,) = [
            m[5] for m in maps if len(m) > 5 and int(m[0].split("-")[0], 16) <= address < int(m[0].split("-")[1], 16)
        ]
        assert path.endswith(f"/{key}.npy"), path
    # copy-on-write: a write into a batch's source would stay in this process, never reach the file
    file_x = np.load(Path(path).with_name("x.npy"))
    assert np.array_equal(file_x, dm._rows["x"].numpy())


def test_prediction_prepares_nothing(folder: Path, tmp_path: Path) -> None:
    from types import SimpleNamespace

    dm = KLineDataModule.from_arguments({"path": str(folder), "cache_dir": str(tmp_path / "cache"), **SETTINGS})
    dm.trainer = SimpleNamespace(state=SimpleNamespace(fn="predict"))  # as Lightning's predict sets it
    dm.prepare_data()
    assert not (tmp_path / "cache").exists()


@pytest.mark.integration
def test_the_command_prepares_once_reuses_and_predicts_without_the_panel(folder: Path, tmp_path: Path) -> None:
    import re
    import shutil

    from tests.helpers.cli import ROOT, cli, run_dir_args
    from tests.helpers.kline import TINY

    cache = tmp_path / "cache"
    args = [
        "fit",
        "--config",
        str(ROOT / "configs/trainer/default.yaml"),
        "--config",
        str(ROOT / "configs/kline/msft_daily.yaml"),
        "--data.init_args.path",
        str(folder),
        "--data.init_args.cache_dir",
        str(cache),
        "--data.init_args.context_len",
        "16",
        "--data.init_args.horizon",
        "2",
        "--data.init_args.val_start",
        SETTINGS["val_start"],
        "--data.init_args.test_start",
        SETTINGS["test_start"],
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "3",
        "--trainer.enable_progress_bar",
        "false",
        "--test_after_fit",
        "true",
        *[f"--model.init_args.{k}={v}" for k, v in TINY.items()],
    ]
    first = cli(*args, *run_dir_args(tmp_path / "runs1"))
    second = cli(*args, *run_dir_args(tmp_path / "runs2"))
    assert "preparing the panel into" in first.stderr + first.stdout
    assert "reusing the prepared panel" in second.stderr + second.stdout
    tested = [re.findall(r"^model .* MSE .*$", p.stdout, re.MULTILINE) for p in (first, second)]
    assert tested[0] and tested[0] == tested[1]  # the same test numbers from the reused panel
    # predict from the run's own config (which names the cache) with the panel and the bars gone
    shutil.rmtree(cache)
    new = tmp_path / "new.csv"
    make_bars(60, seed=5, start="2001-01-01").to_csv(new, index=False)
    shutil.move(folder, tmp_path / "archive")
    config, ckpt = next((tmp_path / "runs2").rglob("config.yaml")), next((tmp_path / "runs2").rglob("last.ckpt"))
    proc = cli(
        "predict", "--config", str(config), "--ckpt_path", str(ckpt), "--data.predict_path", str(new), cwd=tmp_path
    )
    assert re.search(r"wrote 1 forecasts to ", proc.stdout) and not cache.exists()


def _settings(path: Path) -> PanelSettings:
    return PanelSettings(
        path=str(path),
        context_len=8,
        horizon=2,
        features=Features(names=["log_return", "high_rel", "log_volume_change"], volatility_window=5, volume_window=5),
        splits=Splits(0.7, 0.15, SETTINGS["val_start"], SETTINGS["test_start"]),
    )


@pytest.mark.parametrize("late", [5, 9])
def test_tickers_left_out_are_said_one_by_one_or_counted_in_one_line(
    tmp_path: Path, late: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A handful of tickers left out (listed after val_start) or without windows of a split are said one by one;
    a corpus's thousands are counted in one line each, naming a few."""
    for seed, name in enumerate(["A", "B", "C"]):
        make_bars(160, seed=seed).to_csv(tmp_path / f"{name}.csv", index=False)
    for k in range(late):
        make_bars(40, seed=10 + k, start="2000-06-05").to_csv(tmp_path / f"IPO{k}.csv", index=False)
    for k in range(late):  # listed in time for training and validation, delisted before the test split
        make_bars(100, seed=30 + k).to_csv(tmp_path / f"GONE{k}.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="lightning_tf"):
        panel = build_panel(read_bars(tmp_path), _settings(tmp_path))
    assert panel.ticker_names == ["A", "B", "C", *(f"GONE{k}" for k in range(late))]
    said = [r.getMessage() for r in caplog.records]
    if late <= 5:  # in ticker order, as the panel is built
        assert said == [
            *(f"{tmp_path}: ticker 'GONE{k}' has no test windows (100 bars)" for k in range(late)),
            *(
                f"{tmp_path}: ticker 'IPO{k}' has 0 usable training rows (of 40 bars, 1 warm-up); it is left out of "
                "the panel"
                for k in range(late)
            ),
        ]
    else:
        assert said == [
            f"{tmp_path}: 9 tickers have no test windows: 'GONE0', 'GONE1', 'GONE2', 'GONE3', 'GONE4' and 4 more",
            f"{tmp_path}: 9 tickers have fewer than 2 usable training rows and are left out of the panel: 'IPO0', "
            "'IPO1', 'IPO2', 'IPO3', 'IPO4' and 4 more",
        ]
