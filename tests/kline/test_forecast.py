"""``KLineForecaster.forecast``: the checkpoint alone (never the training file) forecasts new bars, a
trained ticker with its training statistics, any other series by its own history, in its own units and
under its own name; a DataFrame in another layout; the model's mode restored; errors."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import KLineDataModule, KLineForecaster, PatchTST
from lightning_tf.kline.inference import last_windows
from lightning_tf.kline.settings import Loading, Reading
from tests.helpers.kline import TINY, make_bars


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, pd.DataFrame]:
    """A checkpoint of a tiny model trained on ``msft.csv`` (ticker 'msft'), whose training file is then
    moved away; returns the checkpoint, a folder of new files and the training bars."""
    root = tmp_path_factory.mktemp("forecast")
    bars = make_bars(300, seed=3)
    bars.to_csv(root / "msft.csv", index=False)
    L.seed_everything(0)
    dm = KLineDataModule(str(root / "msft.csv"), context_len=32, horizon=3, loading=Loading(batch_size=64))
    model = KLineForecaster(n_features=6, n_targets=1, context_len=32, horizon=3, revin=False, **TINY)
    t = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_train_batches=2,
    )
    t.fit(model, dm)
    ckpt = root / "model.ckpt"
    t.save_checkpoint(ckpt)
    (root / "msft.csv").rename(root / "moved_away.csv")
    new = root / "new"
    new.mkdir()
    return ckpt, new, bars


def test_a_trained_ticker_is_scaled_with_its_training_statistics(trained: tuple[Path, Path, pd.DataFrame]) -> None:
    ckpt, new, bars = trained
    bars.iloc[:250].to_csv(new / "msft.csv", index=False)  # the same ticker, 50 bars shorter
    model = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu")
    table = model.forecast(new / "msft.csv")
    assert list(table.columns) == ["ticker", "timestamp", "step", "pred_log_return", "close", "scaled_by"]
    assert table["ticker"].unique().tolist() == ["msft"] and table["step"].tolist() == [1, 2, 3]
    assert table["scaled_by"].unique().tolist() == ["training statistics of 'msft'"]
    last = pd.Timestamp(bars["Date"].iloc[249])
    assert table["timestamp"].tolist() == list(pd.bdate_range(last + pd.offsets.BDay(1), periods=3))
    # the same forecast as predict's DataModule path with the checkpoint's statistics
    dm = KLineDataModule(
        str(new / "moved_away_training_file.csv"), context_len=32, horizon=3, predict_path=str(new / "msft.csv")
    )
    dm.setup("predict")
    dm.load_state_dict(torch.load(ckpt, weights_only=True)["KLineDataModule"])
    batch = next(iter(dm.predict_dataloader()))
    with torch.no_grad():
        returns = model.eval()(batch["x"])[0, :, 0].double() * batch["scale_std"][0, 0] + batch["scale_mean"][0, 0]
    np.testing.assert_allclose(table["pred_log_return"].to_numpy(), returns.numpy(), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(
        table["close"].to_numpy(), bars["Close"].iloc[249] * np.exp(np.cumsum(returns.numpy())), rtol=1e-6
    )


def test_a_trained_ticker_in_other_case_is_its_own_series_and_said(trained: tuple[Path, Path, pd.DataFrame]) -> None:
    """'MSFT' is not the trained 'msft' (tickers are names, case kept): scaled by its own history, with a warning
    that names the trained ticker; a file named by name= gets its statistics."""
    ckpt, new, bars = trained
    bars.iloc[:250].to_csv(new / "export.csv", index=False)
    model = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu")
    with pytest.warns(UserWarning, match=r"forecast: 'MSFT' is not a trained ticker, 'msft' is: scaled by its own"):
        table = model.forecast(new / "export.csv", name="MSFT")
    assert table["scaled_by"].iloc[0].startswith("its own history")
    named = model.forecast(new / "export.csv", name="msft")
    assert named["scaled_by"].unique().tolist() == ["training statistics of 'msft'"]


def test_an_unseen_series_in_other_units_keeps_its_units_and_its_name(trained: tuple[Path, Path, pd.DataFrame]) -> None:
    """Prices x1000 under another ticker: scaled by its own history, named after its file, closes in its units."""
    ckpt, new, _ = trained
    other = make_bars(200, seed=8)
    other[["Open", "High", "Low", "Close"]] *= 1000
    other.to_csv(new / "bigco.csv", index=False)
    model = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu")
    model.train()
    table = model.forecast(new / "bigco.csv")
    assert model.training  # the mode is restored
    assert table["ticker"].unique().tolist() == ["bigco"]
    assert table["scaled_by"].unique().tolist() == ["its own history (180 bars)"]
    last_close = other["Close"].iloc[-1]
    np.testing.assert_allclose(
        table["close"].to_numpy(), last_close * np.exp(np.cumsum(table["pred_log_return"].to_numpy())), rtol=1e-6
    )
    assert (table["close"] / last_close).between(0.5, 2.0).all()  # in its own (thousands) units
    # its own history sets the scale: the same series in the original units forecasts the same returns
    other[["Open", "High", "Low", "Close"]] /= 1000
    again = model.forecast(other, name="bigco")
    np.testing.assert_allclose(again["pred_log_return"].to_numpy(), table["pred_log_return"].to_numpy(), rtol=1e-5)
    np.testing.assert_allclose(again["close"].to_numpy() * 1000, table["close"].to_numpy(), rtol=1e-6)


def test_a_dataframe_in_another_layout_and_a_panel(trained: tuple[Path, Path, pd.DataFrame]) -> None:
    ckpt, _, bars = trained
    model = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu")
    chinese = bars.rename(
        columns={"Date": "日期", "Open": "开盘", "High": "最高", "Low": "最低", "Close": "收盘", "Volume": "成交量"}
    )
    one = model.forecast(chinese.set_index("日期"), name="msft")
    assert one["scaled_by"].unique().tolist() == ["training statistics of 'msft'"]
    panel = pd.concat([bars.assign(code="msft"), make_bars(120, seed=4).assign(code="zz")])
    both = model.forecast(panel, reading=Reading(ticker_column="code"))
    assert both.groupby("ticker")["scaled_by"].first().to_dict() == {
        "msft": "training statistics of 'msft'",
        "zz": "its own history (100 bars)",
    }
    np.testing.assert_allclose(
        both[both["ticker"] == "msft"]["pred_log_return"].to_numpy(), one["pred_log_return"].to_numpy(), rtol=1e-6
    )


def test_forecast_errors_name_the_problem(trained: tuple[Path, Path, pd.DataFrame], tmp_path: Path) -> None:
    ckpt, _, _ = trained
    model = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu")
    with pytest.raises(
        ValueError,
        match=r"ticker 'short' has 30 usable bars \(50 bars, 20 warm-up rows for the "
        r"features\); a forecast needs context_len \(32\)",
    ):
        model.forecast(make_bars(50), name="short")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match=r"empty.csv: the file is empty"):
        model.forecast(tmp_path / "empty.csv")
    plain = KLineForecaster(n_features=2, n_targets=2, context_len=32, horizon=3, **TINY)
    with pytest.raises(ValueError, match="forecast\\(\\) needs a model trained on K-line bars"):
        plain.forecast(make_bars(100))


def test_patching_that_would_drop_bars_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"pad_end false with context_len 100, patch_len 16 and stride 16 would ignore "
        r"the newest 4 bars of every window",
    ):
        KLineForecaster(n_features=1, n_targets=1, context_len=100, horizon=2, patch_len=16, stride=16, pad_end=False)
    PatchTST(1, 1, 96, 2, [0], patch_len=16, stride=16, pad_end=False)  # 96 = 16 + 5 * 16: every bar read
    PatchTST(1, 1, 100, 2, [0], patch_len=16, stride=16, pad_end=True)  # end padding reads the last bars


def test_a_model_of_a_cross_sectional_label_forecasts_new_bars(tmp_path: Path) -> None:
    """A model trained on a per-date rank of the returns (``label: cs_rank``) reads new bars' returns as its inputs
    and forecasts the label (no prices: a rank has none), the same numbers as its own forward pass."""
    from lightning_tf.kline.settings import Features, Splits
    from tests.helpers.universe import write_universe

    frame = write_universe(tmp_path / "u.csv", n_tickers=6, n_days=260)
    dm = KLineDataModule(
        str(tmp_path / "u.csv"),
        context_len=16,
        horizon=2,
        features=Features(names=["log_return", "volatility"], label="cs_rank"),
        splits=Splits(val_start="2015-09-01", test_start="2015-11-02"),
        loading=Loading(batch_size=64),
    )
    model = KLineForecaster(n_features=2, n_targets=1, context_len=16, horizon=2, channel_mixing=True, **TINY)
    L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model, dm)
    new = frame[frame["ticker"] == frame["ticker"].iloc[0]].iloc[:120]
    table = model.forecast(new)
    assert list(table.columns[:4]) == ["ticker", "timestamp", "step", "pred_cs_rank_log_return"]
    assert "close" not in table.columns and np.isfinite(table["pred_cs_rank_log_return"]).all()
    (window,) = last_windows(new, scale=model.data_scale, context_len=16, horizon=2)
    with torch.no_grad():
        direct = model.eval()(torch.tensor(window.x[None], dtype=torch.float32))[0, :, 0].double()  # (F,)
    np.testing.assert_allclose(
        table["pred_cs_rank_log_return"].to_numpy(), (direct * window.target_std[0] + window.target_mean[0]).numpy()
    )
