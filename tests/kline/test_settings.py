"""The K-line data settings (:mod:`lightning_tf.kline.settings`): each group checks its own values and names them,
and everything written when they were flat arguments of the DataModule still works: configs, run configs, command
lines, checkpoints."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from lightning_tf.__main__ import main
from lightning_tf.cli.flat_data import nest_flat_config, nest_flat_flags
from lightning_tf.kline import KLineDataModule
from lightning_tf.kline.settings import (
    FLAT_NAMES,
    GROUPS,
    Covariates,
    Features,
    Loading,
    Reading,
    Splits,
    build_groups,
    nest_flat_arguments,
)
from tests.helpers.cli import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "checkpoints_before_layout" / "kline.ckpt"
#: every flat argument the DataModule took before its settings were grouped, with a value other than its default
OLD_FLAT = {
    "columns": {"close": "Close"},
    "ticker_column": "code",
    "on_error": "drop",
    "max_gap": "10D",
    "decimal": ",",
    "thousands": ".",
    "timezone": "Asia/Shanghai",
    "read_workers": 0,
    "features": ["log_return", "volatility"],
    "target": "close",
    "label": "cs_rank",
    "volatility_window": 10,
    "volume_window": 30,
    "train_fraction": 0.6,
    "val_fraction": 0.2,
    "val_start": "2010-01-01",
    "test_start": "2011-01-01",
    "train_start": "2005-01-01",
    "test_end": "2011-06-30",
    "embargo": 5,
    "covariates": ["turnover"],
    "future_covariates": ["event"],
    "covariate_missing": "ffill",
    "ffill_limit": 3,
    "calendar": "business",
    "static_file": "sectors.csv",
    "static_columns": ["sector"],
    "ticker_embedding": True,
    "batch_size": 512,
    "num_workers": 2,
    "seed": 7,
    "batch_by_date": True,
}


def test_every_old_flat_argument_has_its_place_and_every_field_its_old_name() -> None:
    assert set(OLD_FLAT) == set(FLAT_NAMES)
    fields = {(group, f.name) for group, kind in GROUPS.items() for f in dataclasses.fields(kind)}
    assert set(FLAT_NAMES.values()) <= fields
    # the fields that never were flat arguments are the reader's new ones, each named here
    assert fields - set(FLAT_NAMES.values()) == {("reading", "cut"), ("reading", "bad_files")}


def test_flat_arguments_build_the_same_settings_as_the_groups() -> None:
    nested = build_groups({"path": "x.csv", "context_len": 8, **OLD_FLAT})
    assert nested["reading"] == Reading(
        columns={"close": "Close"},
        ticker_column="code",
        on_error="drop",
        max_gap="10D",
        decimal=",",
        thousands=".",
        timezone="Asia/Shanghai",
        read_workers=0,
    )
    assert nested["features"] == Features(
        names=["log_return", "volatility"], target="close", label="cs_rank", volatility_window=10, volume_window=30
    )
    assert nested["splits"] == Splits(0.6, 0.2, "2010-01-01", "2011-01-01", "2005-01-01", "2011-06-30", 5)
    assert nested["covariates"] == Covariates(
        ["turnover"], ["event"], "ffill", 3, "business", "sectors.csv", ["sector"], True
    )
    assert nested["loading"] == Loading(512, 2, 7, True)
    assert (nested["path"], nested["context_len"]) == ("x.csv", 8)


def test_a_flat_name_and_its_group_agree_or_one_line_names_both() -> None:
    both = {"val_start": "2010-01-01", "splits": {"val_start": "2010-01-01", "test_start": "2011-01-01"}}
    assert nest_flat_arguments(both)["splits"] == {"val_start": "2010-01-01", "test_start": "2011-01-01"}
    with pytest.raises(ValueError, match=r"data splits.val_start is given twice: '2010-01-01', and '2009-01-01'"):
        nest_flat_arguments({**both, "val_start": "2009-01-01"})
    with pytest.raises(ValueError, match=r"data loading has no field\(s\) \['batchsize'\]"):
        build_groups({"loading": {"batchsize": 3}})


def test_features_and_covariates_keep_their_old_list_meaning() -> None:
    """``features`` and ``covariates`` name both an old list argument and a new group: a list is the old one."""
    out = build_groups({"features": ["log_return"], "covariates": ["x"]})
    assert out["features"].names == ["log_return"] and out["covariates"].past == ["x"]
    out = build_groups({"features": {"names": ["log_return"]}, "covariates": {"past": ["x"]}})
    assert out["features"].names == ["log_return"] and out["covariates"].past == ["x"]


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Reading(on_error="skip"), r"reading.on_error must be one of"),  # type: ignore[arg-type]
        (lambda: Reading(max_gap="ten days"), r"reading.max_gap 'ten days' is not a duration"),
        (lambda: Reading(read_workers=-1), r"read_workers \(-1\) must be >= 0"),
        (lambda: Reading(decimal=";"), r"decimal must be one of"),
        (lambda: Reading(timezone="Mars/Olympus"), r"Mars/Olympus"),
        (lambda: Features(names=["rsi"]), r"unknown feature\(s\) \['rsi'\]"),
        (lambda: Features(target="open"), r"features.target must be 'log_return' or 'close'"),  # type: ignore[arg-type]
        (lambda: Features(label="zscore"), r"features.label must be one of"),  # type: ignore[arg-type]
        (lambda: Splits(embargo=-1), r"splits.embargo \(-1\) must be >= 0"),
        (lambda: Splits(train_start="2001-01-01"), r"splits.train_start .* need the date split"),
        (lambda: Covariates(missing="zero"), r"covariates.missing must be one of"),  # type: ignore[arg-type]
        (lambda: Covariates(ffill_limit=0), r"covariates.ffill_limit \(0\) must be >= 1"),
        (lambda: Loading(batch_size=0), r"loading.batch_size \(0\) must be >= 1"),
        (lambda: Loading(num_workers=-1), r"loading.num_workers \(-1\) must be >= 0"),
        (lambda: KLineDataModule(splits={"val_start": "2001"}), r"splits must be a lightning_tf.kline.Splits"),
        (lambda: KLineDataModule(covariates=Covariates(past=["volatility"])), r"built-in or calendar feature"),
    ],
)
def test_each_group_refuses_a_bad_value_naming_it(build: object, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        build()  # type: ignore[operator]


def test_the_hyperparameters_are_plain_data() -> None:
    """A checkpoint's DataModule arguments load with ``weights_only=True``: the groups are saved as dicts."""
    dm = KLineDataModule(splits=Splits(val_start="2010-01-01", test_start="2011-01-01"), loading=Loading(batch_size=8))
    assert dm.hparams["splits"]["val_start"] == "2010-01-01" and dm.hparams["loading"]["batch_size"] == 8
    assert all(isinstance(dm.hparams[g], dict) for g in GROUPS)
    again = KLineDataModule.from_arguments(dict(dm.hparams))
    assert (again.splits, again.loading) == (dm.splits, dm.loading)


def test_a_checkpoint_written_with_flat_arguments_gives_its_data_module(tmp_path: Path) -> None:
    """The fixture was written when the DataModule's arguments were flat; its DataModule comes back with those
    settings and its training statistics, and predicts the same windows as a new one given them."""
    saved = torch.load(FIXTURE, map_location="cpu", weights_only=True)
    flat = saved["datamodule_hyper_parameters"]
    assert "batch_size" in flat and "loading" not in flat  # written before the groups
    dm = KLineDataModule.load_from_checkpoint(FIXTURE, path=str(ROOT / "data" / "msft.csv"))
    assert dm.loading.batch_size == flat["batch_size"] and dm.features.volatility_window == flat["volatility_window"]
    assert dm._checkpoint_state["ticker_names"] == saved["KLineDataModule"]["ticker_names"]
    dm.setup("predict")
    x = next(iter(dm.predict_dataloader()))["x"]
    fresh = KLineDataModule(str(ROOT / "data" / "msft.csv"), context_len=64, horizon=5)
    fresh.setup("predict")
    fresh.load_state_dict(saved["KLineDataModule"])
    assert torch.equal(x, next(iter(fresh.predict_dataloader()))["x"])


# ------------------------------------------------------------------------------------------ the commands


def _data_section(capsys: pytest.CaptureFixture, args: list[str]) -> dict:
    with pytest.raises(SystemExit):
        main(["fit", *args, "--print_config"])
    return yaml.safe_load(capsys.readouterr().out)["data"]


OLD_CONFIG = """\
data:
  class_path: lightning_tf.kline.KLineDataModule
  init_args:
    path: data/msft.csv
    context_len: 32
    horizon: 5
    features: [log_return, open_rel, volatility]
    label: raw
    val_start: "2010-01-01"
    test_start: "2012-01-01"
    embargo: 5
    max_gap: 10D
    on_error: drop
    batch_size: 128
"""

NEW_CONFIG = """\
data:
  class_path: lightning_tf.kline.KLineDataModule
  init_args:
    path: data/msft.csv
    context_len: 32
    horizon: 5
    features:
      names: [log_return, open_rel, volatility]
      label: raw
    splits: {val_start: "2010-01-01", test_start: "2012-01-01", embargo: 5}
    reading: {max_gap: 10D, on_error: drop}
    loading: {batch_size: 128}
"""


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", ["lightning-tf"])
    return tmp_path


def test_an_old_flat_config_gives_the_config_of_the_groups(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    (in_tmp / "old.yaml").write_text(OLD_CONFIG)
    (in_tmp / "new.yaml").write_text(NEW_CONFIG)
    model = ["--model", "KLineForecaster"]
    old = _data_section(capsys, ["--config", str(in_tmp / "old.yaml"), *model])
    new = _data_section(capsys, ["--config", str(in_tmp / "new.yaml"), *model])
    assert old == new and new["init_args"]["splits"]["embargo"] == 5


def test_old_flat_flags_reach_their_group(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    """``--data.init_args.<old name>`` after a K-line config (and after a second config file without a class path)
    is the group's field; the same flag for another data class is left alone."""
    (in_tmp / "more.yaml").write_text("data:\n  init_args:\n    val_fraction: 0.15\n")
    config = ["--config", str(ROOT / "configs/kline/msft_daily.yaml"), "--config", str(in_tmp / "more.yaml")]
    flags = ["--data.init_args.batch_size", "16", "--data.init_args.features=[log_return]", "--data.seed", "3"]
    data = _data_section(capsys, [*config, *flags])["init_args"]
    assert data["loading"]["batch_size"] == 16 and data["features"]["names"] == ["log_return"]
    assert data["loading"]["seed"] == 3  # jsonargparse's shorthand without init_args
    assert data["splits"]["val_fraction"] == 0.15
    other = ["--data", "TranslationDataModule", "--data.init_args.batch_size", "16"]
    assert nest_flat_flags(other) == other


def test_a_loaded_config_without_a_kline_section_is_left_alone() -> None:
    text = {"data": {"class_path": "TranslationDataModule", "init_args": {"batch_size": 3}}, "seed_everything": 1}
    assert nest_flat_config(text) == text
    assert nest_flat_config(["a"]) == ["a"]


@pytest.mark.integration
def test_the_command_runs_an_old_flat_config_through_fit_and_predict(tmp_path: Path) -> None:
    """The command line as an older release's user typed it, on a saved config of that release."""
    (tmp_path / "old.yaml").write_text(OLD_CONFIG.replace("data/msft.csv", str(ROOT / "data" / "msft.csv")))
    proc = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "lightning-tf"),
            "fit",
            "--config",
            str(tmp_path / "old.yaml"),
            "--model",
            "KLineForecaster",
            "--trainer.fast_dev_run",
            "true",
            "--data.init_args.batch_size",
            "16",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "flat arguments moved into groups" in proc.stderr
