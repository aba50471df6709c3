"""predict: the next F bars after the end of a file, written by ForecastWriter as a CSV in original units
with prices rebuilt from the predicted returns, and a candlestick chart; prices rebuilt from returns
match the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import ForecastWriter, KLineDataModule, KLineForecaster
from lightning_tf.kline.settings import Features, Loading
from tests.helpers.kline import TINY, write_bars
from tests.helpers.kline import quiet_trainer as trainer


def test_prices_rebuilt_from_target_returns_are_the_file_closes(tmp_path: Path) -> None:
    df = write_bars(tmp_path / "bars.csv", n=200)
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=16, horizon=5, loading=Loading(batch_size=50))
    dm.setup("fit")
    ds = dm.datasets["test"]
    batch = next(iter(dm.test_dataloader()))
    returns = dm.data_scale.inverse_targets(batch["y"], batch["ticker"])[..., 0].double()  # (B, F)
    prices = dm.rebuild_prices(returns, batch["anchor"])  # (B, F)
    closes = torch.tensor(df["Close"].to_numpy())
    rows = ds.target_rows()[: len(prices)]  # (B, F) rows of the file (one ticker, oldest first)
    torch.testing.assert_close(prices, closes[rows], rtol=1e-5, atol=0)
    torch.testing.assert_close(batch["anchor"], closes[rows[:, 0] - 1])


def test_predict_writes_the_forecast_csv_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    df = write_bars(tmp_path / "bars.csv", n=300)
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=4, loading=Loading(batch_size=32))
    out = tmp_path / "forecast" / "next.csv"
    model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=4, **TINY)
    trainer().fit(model, dm)
    (pred,) = trainer(callbacks=[ForecastWriter(output_file=str(out))]).predict(model, dm)
    assert f"wrote 1 forecasts to {out}" in capsys.readouterr().out
    table = pd.read_csv(out, parse_dates=["timestamp"])
    assert list(table.columns) == ["ticker", "timestamp", "step", "pred_log_return", "close", "scaled_by"]
    assert table["scaled_by"].unique().tolist() == ["training statistics of 'bars'"]
    assert len(table) == 4 and table["step"].tolist() == [1, 2, 3, 4]
    last = pd.Timestamp(df["Date"].iloc[-1])
    assert (table["timestamp"] > last).all() and table["timestamp"].is_monotonic_increasing
    assert table["timestamp"].tolist() == list(pd.bdate_range(last + pd.offsets.BDay(1), periods=4))
    # prices are rebuilt from the predicted returns, starting from the file's last close
    expected = df["Close"].iloc[-1] * np.exp(np.cumsum(table["pred_log_return"].to_numpy()))
    np.testing.assert_allclose(table["close"].to_numpy(), expected, rtol=1e-6)
    # the returned forecast and the CSV agree, and the forecast used the file's last window
    np.testing.assert_allclose(pred["price"][0].numpy(), table["close"].to_numpy(), rtol=1e-6)
    assert int(pred["time"][0]) == pd.Timestamp(last).value and float(pred["anchor"][0]) == df["Close"].iloc[-1]
    png = out.with_name(f"next_{table['ticker'].iloc[0]}.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_level_target_writes_prices_directly(tmp_path: Path) -> None:
    write_bars(tmp_path / "bars.csv", n=300)
    dm = KLineDataModule(
        str(tmp_path / "bars.csv"),
        context_len=32,
        horizon=3,
        features=Features(target="close"),
        loading=Loading(batch_size=64),
    )
    model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=3, channel_mixing=True, **TINY)
    t = trainer(default_root_dir=tmp_path)
    t.fit(model, dm)
    t.test(model, dm, verbose=False)
    # close targets are levels: persistence repeats the last close, drift is scored too
    assert {"persistence", "mean", "drift", "linear"} <= set(model.test_summary)
    t.predict(model, dm)
    table = pd.read_csv(tmp_path / "forecast.csv")  # the default writer: the run folder
    assert list(table.columns) == ["ticker", "timestamp", "step", "pred_close", "scaled_by"] and len(table) == 3
    assert (tmp_path / f"forecast_{table['ticker'].iloc[0]}.png").is_file()


def test_the_default_writer_numbers_its_files_and_a_given_writer_wins(tmp_path: Path) -> None:
    write_bars(tmp_path / "bars.csv", n=300)
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=2)
    model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=2, **TINY)
    t = trainer(default_root_dir=tmp_path / "run")
    t.fit(model, dm)
    t.predict(model, dm)
    t.predict(model, dm)  # a second predict keeps the first file
    assert sorted(p.name for p in (tmp_path / "run").glob("forecast*")) == [
        "forecast-1.csv",
        "forecast-1_bars.png",
        "forecast.csv",
        "forecast_bars.png",
    ]
    mine = ForecastWriter(output_file=str(tmp_path / "mine.csv"), plot_bars=20)
    t2 = trainer(default_root_dir=tmp_path / "run", callbacks=[mine])
    t2.predict(model, dm)
    assert [c for c in t2.callbacks if isinstance(c, ForecastWriter)] == [mine]
    assert (tmp_path / "mine.csv").is_file() and not (tmp_path / "run" / "forecast-2.csv").exists()
    with pytest.raises(ValueError, match=r"plot_bars must be at least 1, got 0"):
        ForecastWriter(plot_bars=0)


@pytest.mark.integration
def test_predict_through_the_cli_from_a_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lightning-tf fit`` then ``lightning-tf predict --ckpt_path``: a fresh model adopts the data's
    target channel, the CSV and chart land in the run folder (nothing in the working directory), and
    the CSV holds the checkpoint's forecast of the file's last window."""
    from lightning_tf.cli.lightning_cli import make_cli

    df = write_bars(tmp_path / "bars.csv", n=300)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr("sys.argv", ["lightning-tf"])  # the CLI reads args=, not pytest's own arguments
    model = [
        "--model",
        "KLineForecaster",
        "--model.n_features",
        "6",
        "--model.context_len",
        "32",
        "--model.horizon",
        "4",
        *(f"--model.{k}={v}" for k, v in TINY.items()),
    ]
    data = [
        "--data",
        "KLineDataModule",
        "--data.path",
        str(tmp_path / "bars.csv"),
        "--data.context_len",
        "32",
        "--data.horizon",
        "4",
    ]
    trainer = [
        "--trainer.logger",
        "false",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.default_root_dir",
        str(tmp_path / "run"),
    ]
    make_cli(
        [
            "fit",
            *model,
            *data,
            *trainer,
            "--trainer.max_epochs",
            "1",
            "--trainer.limit_train_batches",
            "2",
            "--trainer.limit_val_batches",
            "1",
        ]
    )
    ckpt = next((tmp_path / "run").rglob("*.ckpt"))
    make_cli(["predict", *model, *data, *trainer, "--ckpt_path", str(ckpt)])
    assert not any(work.iterdir())
    out = tmp_path / "run"
    table = pd.read_csv(out / "forecast.csv", parse_dates=["timestamp"])
    assert table["timestamp"].tolist() == list(
        pd.bdate_range(pd.Timestamp(df["Date"].iloc[-1]) + pd.offsets.BDay(1), periods=4)
    )
    assert table["scaled_by"].unique().tolist() == ["training statistics of 'bars'"]  # from the checkpoint
    loaded = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu").eval()
    # the checkpoint alone scales the window and maps the forecast to original units
    returns = loaded.forecast(tmp_path / "bars.csv")["pred_log_return"].to_numpy()
    np.testing.assert_allclose(table["pred_log_return"].to_numpy(), returns, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(table["close"].to_numpy(), df["Close"].iloc[-1] * np.exp(np.cumsum(returns)), rtol=1e-6)
    assert (out / f"forecast_{table['ticker'].iloc[0]}.png").stat().st_size > 10_000
