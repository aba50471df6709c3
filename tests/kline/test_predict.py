"""predict: the next F bars after the end of a file, as a CSV in original units with prices rebuilt
from the predicted returns, and a candlestick chart; prices rebuilt from returns match the file."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import KLineDataModule, KLineForecaster

from .test_module import TINY, write_bars


def test_prices_rebuilt_from_target_returns_are_the_file_closes(tmp_path: Path) -> None:
    df = write_bars(tmp_path / "bars.csv", n=200)
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=16, horizon=5, batch_size=50)
    dm.setup("fit")
    ds = dm.datasets["test"]
    batch = next(iter(dm.test_dataloader()))
    returns = dm.inverse_targets(batch["y"], batch["ticker"])[..., 0].double()  # (B, F)
    prices = dm.rebuild_prices(returns, batch["anchor"])  # (B, F)
    closes = torch.tensor(df["Close"].to_numpy())
    rows = ds.target_rows()[: len(prices)]  # (B, F) rows of the file (one ticker, oldest first)
    torch.testing.assert_close(prices, closes[rows], rtol=1e-5, atol=0)
    torch.testing.assert_close(batch["anchor"], closes[rows[:, 0] - 1])


def test_predict_writes_the_forecast_csv_and_chart(tmp_path: Path) -> None:
    df = write_bars(tmp_path / "bars.csv", n=300)
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=4, batch_size=32)
    out = tmp_path / "forecast"
    model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=4, output_dir=str(out), **TINY)
    t = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False)
    t.fit(model, dm)
    (pred,) = t.predict(model, dm)
    table = pd.read_csv(out / "forecast.csv", parse_dates=["timestamp"])
    assert list(table.columns) == ["ticker", "timestamp", "step", "pred_log_return", "close"]
    assert len(table) == 4 and table["step"].tolist() == [1, 2, 3, 4]
    last = pd.Timestamp(df["Date"].iloc[-1])
    assert (table["timestamp"] > last).all() and table["timestamp"].is_monotonic_increasing
    assert table["timestamp"].tolist() == list(pd.bdate_range(last + pd.offsets.BDay(1), periods=4))
    # prices are rebuilt from the predicted returns, starting from the file's last close
    expected = df["Close"].iloc[-1] * np.exp(np.cumsum(table["pred_log_return"].to_numpy()))
    np.testing.assert_allclose(table["close"].to_numpy(), expected, rtol=1e-6)
    # the returned forecast and the CSV agree, and the forecast used the file's last window
    np.testing.assert_allclose(pred["price"][0].numpy(), table["close"].to_numpy(), rtol=1e-6)
    assert int(pred["time"][0]) == pd.Timestamp(last).value
    png = out / f"forecast_{table['ticker'].iloc[0]}.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("target", ["close"])
def test_predict_level_target_writes_prices_directly(tmp_path: Path, target: str) -> None:
    write_bars(tmp_path / "bars.csv", n=300)
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=3, target=target, batch_size=64)
    out = tmp_path / "forecast"
    model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=3, channel_mixing=True,
                            output_dir=str(out), **TINY)
    t = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False)
    t.fit(model, dm)
    t.test(model, dm, verbose=False)
    # close targets are levels: persistence repeats the last close, drift is scored too
    assert {"persistence", "mean", "drift", "dlinear"} <= set(model.test_summary)
    t.predict(model, dm)
    table = pd.read_csv(out / "forecast.csv")
    assert list(table.columns) == ["ticker", "timestamp", "step", "pred_close"] and len(table) == 3
    assert (out / f"forecast_{table['ticker'].iloc[0]}.png").is_file()


def test_predict_through_the_cli_from_a_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lightning-tf fit`` then ``lightning-tf predict --ckpt_path``: a fresh model adopts the data's
    target channel, the CSV and chart land under ``<default_root_dir>/predictions`` (nothing in the
    working directory), and the CSV holds the checkpoint's forecast of the file's last window."""
    from lightning_tf.cli import main

    df = write_bars(tmp_path / "bars.csv", n=300)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr("sys.argv", ["lightning-tf"])  # the CLI reads args=, not pytest's own arguments
    model = ["--model", "KLineForecaster", "--model.n_features", "6", "--model.context_len", "32",
             "--model.horizon", "4", *(f"--model.{k}={v}" for k, v in TINY.items())]
    data = ["--data", "KLineDataModule", "--data.path", str(tmp_path / "bars.csv"), "--data.context_len", "32",
            "--data.horizon", "4"]
    trainer = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
               "--trainer.default_root_dir", str(tmp_path / "run")]
    main(["fit", *model, *data, *trainer, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
          "--trainer.limit_val_batches", "1"])
    ckpt = next((tmp_path / "run").rglob("*.ckpt"))
    main(["predict", *model, *data, *trainer, "--ckpt_path", str(ckpt)])
    assert not any(work.iterdir())
    out = tmp_path / "run" / "predictions"
    table = pd.read_csv(out / "forecast.csv", parse_dates=["timestamp"])
    assert table["timestamp"].tolist() == list(pd.bdate_range(pd.Timestamp(df["Date"].iloc[-1]) + pd.offsets.BDay(1),
                                                              periods=4))
    loaded = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu").eval()
    dm = KLineDataModule(str(tmp_path / "bars.csv"), context_len=32, horizon=4)
    dm.setup("predict")
    batch = next(iter(dm.predict_dataloader()))
    with torch.no_grad():
        returns = dm.inverse_targets(loaded(batch["x"]), batch["ticker"])[0, :, 0].double().numpy()  # (F,)
    np.testing.assert_allclose(table["pred_log_return"].to_numpy(), returns, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(table["close"].to_numpy(), df["Close"].iloc[-1] * np.exp(np.cumsum(returns)), rtol=1e-6)
    assert (out / f"forecast_{table['ticker'].iloc[0]}.png").stat().st_size > 10_000
