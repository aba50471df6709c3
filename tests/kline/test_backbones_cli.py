"""Each backbone through the command: ``lightning-tf fit --config configs/kline/msft_daily.yaml --model.backbone
<name>`` trains, tests and predicts, and its checkpoint alone serves ``forecast()`` (the real command in
subprocesses for the default backbone; the others through the same entry point in this process, each
subprocess costing about 10 s of imports); ``compile: true`` computes what the eager module computes for
each."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from lightning_tf.__main__ import main
from lightning_tf.kline import KLineForecaster
from tests.helpers.cli import ROOT, cli, run_dir_args
from tests.helpers.kline import TINY, make_bars

pytestmark = pytest.mark.integration

DEFAULT = str(ROOT / "configs/trainer/default.yaml")
MSFT = str(ROOT / "configs/kline/msft_daily.yaml")
BACKBONES = ["patches", "variates", "bars"]


@pytest.mark.parametrize("backbone", BACKBONES)
def test_fit_test_predict_and_forecast_from_the_checkpoint(
    backbone: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def command(*args: str, cwd: Path = ROOT) -> str:
        """The command's output: a subprocess for the default backbone, else ``main`` in this process."""
        if backbone == BACKBONES[0]:
            return cli(*args, cwd=cwd).stdout
        monkeypatch.chdir(cwd)
        monkeypatch.setattr("sys.argv", ["lightning-tf"])
        try:
            main(list(args))
        finally:  # the run's offline wandb run ends with it, as with the process of a real command
            import wandb

            wandb.finish()
        return capsys.readouterr().out

    runs = tmp_path / "runs"
    out = command(
        "fit",
        "--config",
        DEFAULT,
        "--config",
        MSFT,
        "--model.backbone",
        backbone,
        "--test_after_fit",
        "true",
        "--data.init_args.context_len",
        "32",
        *[f"--model.init_args.{k}={v}" for k, v in TINY.items()],
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "4",
        "--trainer.limit_val_batches",
        "3",
        "--trainer.limit_test_batches",
        "3",
        "--trainer.enable_progress_bar",
        "false",
        *run_dir_args(runs),
    )
    assert "tested model:" in out and "linear baseline:" in out, out[-2000:]
    config, ckpt = next(runs.rglob("config.yaml")), next(runs.rglob("last.ckpt"))
    assert f"backbone: {backbone}" in config.read_text()
    new = tmp_path / "later.csv"
    make_bars(120, seed=5, start="2019-01-02").to_csv(new, index=False)
    out = command(
        "predict", "--config", str(config), "--ckpt_path", str(ckpt), "--data.predict_path", str(new), cwd=tmp_path
    )
    written = re.search(r"wrote 1 forecasts to (\S+)", out)
    assert written, out[-2000:]
    path = Path(written[1]) if Path(written[1]).is_absolute() else tmp_path / written[1]
    predicted = pd.read_csv(path)
    # the checkpoint alone: no config, no DataModule, no training data
    model = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu")
    assert model.net.backbone_name == backbone
    table = model.forecast(new)
    assert len(table) == 5 and table["pred_log_return"].notna().all()
    pd.testing.assert_series_equal(predicted["pred_log_return"], table["pred_log_return"], rtol=1e-5, check_names=False)


@pytest.fixture(scope="module")
def _can_compile() -> None:
    try:
        torch.compile(lambda x: x * 2 + 1)(torch.ones(3))
    except Exception as err:  # no C++ compiler, unsupported platform, ...
        pytest.skip(f"torch._dynamo cannot compile on this platform: {type(err).__name__}: {err}")


@pytest.mark.usefixtures("_can_compile")
@pytest.mark.parametrize("backbone", BACKBONES)
def test_compiled_equals_eager(backbone: str) -> None:
    kw = dict(
        n_features=3,
        n_targets=3,
        context_len=32,
        horizon=6,
        target_channels=[0, 1, 2],
        backbone=backbone,
        dropout=0.0,
        head_dropout=0.0,
        loss="quantile",
        causal=backbone == "bars",
        **TINY,
    )
    eager = KLineForecaster(**kw)
    with torch.no_grad():  # a residual that is not zero, and a linear path that is not either
        eager.net.head.weight.normal_(0.0, 0.1)
        eager.net.linear.weight.normal_(0.0, 0.1)
    compiled = KLineForecaster(**kw, compile=True)
    compiled.load_state_dict(eager.state_dict())
    compiled.configure_model()
    assert compiled._compiled is not None
    x, y = torch.randn(4, 32, 3), torch.randn(4, 6, 3)
    losses = [m._loss(m.net.combine(m._parts(x), gate=1.0), y) for m in (eager, compiled)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=0)
    eager.eval(), compiled.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled.forward_quantiles(x), eager.forward_quantiles(x), rtol=1e-5, atol=1e-6)
