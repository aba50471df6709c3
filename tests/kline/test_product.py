"""The after-training contract for K-line, through the real command: train, move the training file away,
then both ``KLineForecaster.load_from_checkpoint(ckpt).forecast(...)`` and ``lightning-tf predict --config
<run>/config.yaml --ckpt_path <ckpt> --data.predict_path <new>`` forecast from an empty folder; clear
one-line errors; ``compile: true`` computes what the eager module computes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from lightning_tf.kline import KLineForecaster
from tests.helpers.cli import ROOT, cli, run_dir_args
from tests.helpers.kline import TINY, make_bars

pytestmark = pytest.mark.integration

DEFAULT = str(ROOT / "configs/trainer/default.yaml")
MSFT = str(ROOT / "configs/kline/msft_daily.yaml")
SMALL = [f"--model.init_args.{k}={v}" for k, v in TINY.items()]


def test_train_move_the_data_away_then_forecast_from_an_empty_folder(tmp_path: Path) -> None:
    train = tmp_path / "train"
    train.mkdir()
    bars = make_bars(400, seed=11)
    bars.to_csv(train / "acme.csv", index=False)
    runs = tmp_path / "runs"
    cli(
        "fit",
        "--config",
        DEFAULT,
        "--config",
        MSFT,
        "--data.init_args.path",
        str(train / "acme.csv"),
        "--data.init_args.context_len",
        "32",
        "--data.init_args.horizon",
        "3",
        *SMALL,
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "3",
        "--trainer.enable_progress_bar",
        "false",
        *run_dir_args(runs),
    )
    config = next(runs.rglob("config.yaml"))
    ckpt = next(runs.rglob("last.ckpt"))
    shutil.move(train, tmp_path / "archive")  # the training data is gone
    later = tmp_path / "later"
    later.mkdir()
    make_bars(120, seed=12, start="2010-01-04").to_csv(later / "acme.csv", index=False)  # new bars, same ticker
    empty = tmp_path / "empty"
    empty.mkdir()

    table = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu").forecast(later / "acme.csv")
    assert len(table) == 3 and table["scaled_by"].unique().tolist() == ["training statistics of 'acme'"]

    proc = cli(
        "predict",
        "--config",
        str(config),
        "--ckpt_path",
        str(ckpt),
        "--data.predict_path",
        str(later / "acme.csv"),
        cwd=empty,
    )
    match = re.search(r"wrote 1 forecasts to (\S+)", proc.stdout)
    assert match, proc.stdout[-2000:]
    written = Path(match[1]) if Path(match[1]).is_absolute() else empty / match[1]
    assert written.is_file() and runs in written.parents  # its own run's folder, under the runs
    assert not list(empty.iterdir())
    out = pd.read_csv(written)
    pd.testing.assert_series_equal(out["pred_log_return"], table["pred_log_return"], rtol=1e-5, check_names=False)
    assert out["scaled_by"].unique().tolist() == ["training statistics of 'acme'"]
    again = cli(
        "predict",
        "--config",
        str(config),
        "--ckpt_path",
        str(ckpt),
        "--data.predict_path",
        str(later / "acme.csv"),
        cwd=empty,
    )
    second = re.search(r"wrote 1 forecasts to (\S+)", again.stdout)[1]
    assert second != match[1] and written.is_file()  # never over an earlier forecast


def test_errors_are_one_line_naming_the_problem(tmp_path: Path) -> None:
    proc = cli(
        "fit",
        "--config",
        MSFT,
        "--data.init_args.horizon",
        "2000",
        "--trainer.logger",
        "false",
        "--trainer.default_root_dir",
        str(tmp_path),
        check=False,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("lightning-tf: error:")]
    assert len(lines) == 1 and "the validation split has" in lines[0] and "horizon (2000)" in lines[0], proc.stderr[
        -2000:
    ]
    (tmp_path / "empty.csv").write_text("")
    proc = cli(
        "fit",
        "--config",
        MSFT,
        "--data.init_args.path",
        str(tmp_path / "empty.csv"),
        "--trainer.logger",
        "false",
        "--trainer.default_root_dir",
        str(tmp_path),
        check=False,
    )
    assert proc.returncode == 2 and f"{tmp_path / 'empty.csv'}: the file is empty" in proc.stderr


@pytest.fixture(scope="module")
def _can_compile() -> None:
    try:
        torch.compile(lambda x: x * 2 + 1)(torch.ones(3))
    except Exception as err:  # no C++ compiler, unsupported platform, ...
        pytest.skip(f"torch._dynamo cannot compile on this platform: {type(err).__name__}: {err}")


@pytest.mark.usefixtures("_can_compile")
def test_compiled_loss_and_eval_outputs_equal_eager() -> None:
    kw = dict(
        n_features=3,
        n_targets=3,
        context_len=32,
        horizon=6,
        target_channels=[0, 1, 2],
        dropout=0.0,
        head_dropout=0.0,
        loss="quantile",
        **TINY,
    )
    eager = KLineForecaster(**kw)
    with torch.no_grad():  # a residual that is not zero, and a linear path that is not either
        eager.net.head.weight.normal_(0.0, 0.1)
        eager.net.linear.weight.normal_(0.0, 0.1)
    compiled = KLineForecaster(**kw, compile=True)
    compiled.load_state_dict(eager.state_dict())
    compiled.configure_model()
    compiled.configure_model()  # Lightning calls it in every stage: compiled once
    assert compiled._compiled is not None and eager._compiled is None
    assert list(compiled.state_dict()) == list(eager.state_dict()), "no _orig_mod. in the keys"
    x, y = torch.randn(4, 32, 3), torch.randn(4, 6, 3)
    losses = [m._loss(m.net.combine(m._parts(x), gate=1.0), y) for m in (eager, compiled)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=0)
    eager.eval(), compiled.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled.forward_quantiles(x), eager.forward_quantiles(x), rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # 50 s of compiling; the integration tier keeps the compiled forward's parity tests
@pytest.mark.usefixtures("_can_compile")
def test_cli_fit_with_compile(tmp_path: Path) -> None:
    cli(
        "fit",
        "--config",
        DEFAULT,
        "--config",
        MSFT,
        "--model.compile",
        "true",
        "--trainer.fast_dev_run",
        "1",
        "--data.init_args.context_len",
        "32",
        *SMALL,
        *run_dir_args(tmp_path),
    )
