"""Kronos's column of a walk-forward's predictions frame: at each origin the model's own forecast of the ticker's
last bars (equal to ``Kronos.forecast`` on the window built by hand), read from nothing after the origin, as log
returns of its mean close path; origins with a short history, bars without volume, and bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline.published import KRONOS_PRESETS, Kronos, KronosConfig, calendar_stamps
from lightning_tf.kline.universe.forecasts import fold_predictions
from lightning_tf.kline.universe.kronos import KronosColumn, kronos_column
from lightning_tf.kline.universe.predictions import FORECASTERS
from lightning_tf.kline.windows import next_timestamps

F = 3


@pytest.fixture(scope="module")
def kronos() -> Kronos:
    torch.manual_seed(0)
    _, tokenizer, _ = KRONOS_PRESETS["small"]
    config = KronosConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64)
    model = Kronos(config, tokenizer, max_context=16).eval()
    with torch.no_grad():  # calendar tables that move the draws: a wrong stamp changes the tokens
        for table in model.model.time_embed.parameters():
            table.mul_(20.0)
    return model


def _bars(volume: bool = True) -> pd.DataFrame:
    """Two tickers of daily bars (the second starts later), random walks of OHLCV and amount."""
    rng = np.random.default_rng(0)
    parts = []
    for ticker, n in (("AAA", 40), ("BBB", 25)):
        days = pd.bdate_range("2021-01-04", periods=40)[-n:]
        close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, n)))
        open_ = close * np.exp(rng.normal(0, 0.01, n))
        frame = pd.DataFrame(
            {
                "timestamp": days,
                "ticker": ticker,
                "open": open_,
                "high": np.maximum(open_, close) * 1.01,
                "low": np.minimum(open_, close) * 0.99,
                "close": close,
            }
        )
        if volume:
            frame["volume"] = rng.uniform(1e5, 2e5, n)
            frame["amount"] = frame["volume"] * frame["close"]
        parts.append(frame)
    return pd.concat(parts, ignore_index=True)


def _frame(bars: pd.DataFrame, origins: list[tuple[str, int]]) -> pd.DataFrame:
    """A predictions frame's keys: each (ticker, bar index) origin with steps 1..F."""
    rows = []
    for ticker, i in origins:
        day = bars.loc[bars["ticker"] == ticker, "timestamp"].iloc[i]
        rows += [{"date": day, "ticker": ticker, "step": s} for s in range(1, F + 1)]
    return pd.DataFrame(rows)


def _by_hand(
    kronos: Kronos, bars: pd.DataFrame, ticker: str, i: int, context: int, columns: list[str], generator
) -> np.ndarray:
    """The origin's forecast log returns (F,) from Kronos.forecast on the window built here."""
    own = bars[bars["ticker"] == ticker].reset_index(drop=True)
    window = own.iloc[max(0, i - context + 1) : i + 1]
    times = pd.DatetimeIndex(window["timestamp"])
    future = next_timestamps(pd.DatetimeIndex(own["timestamp"].iloc[: i + 1]), F)
    x = torch.as_tensor(window[columns].to_numpy(np.float64).copy())[None]
    draws = kronos.forecast(x, calendar_stamps(times)[None], calendar_stamps(future)[None], generator=generator)
    path = np.concatenate([[window["close"].iloc[-1]], draws.mean(1)[0, :, 3].double().numpy()])
    return np.log(path[1:] / path[:-1])


@pytest.mark.parametrize("volume", [True, False])
def test_each_origin_is_kronos_on_the_tickers_last_bars(kronos: Kronos, volume: bool) -> None:
    bars = _bars(volume)
    columns = ["open", "high", "low", "close", *(["volume", "amount"] if volume else [])]
    origins = [("AAA", 30), ("BBB", 20), ("AAA", 12), ("BBB", 5)]  # BBB at 5: a history shorter than the context
    frame = _frame(bars, origins)
    settings = KronosColumn("unused", context=10, samples=1, batch_size=1)
    torch.manual_seed(123)  # the global generator is not the column's: its own, seeded, draws
    column, notes = kronos_column(frame, bars, kronos, settings)
    assert notes == [] and column.name == "kronos"
    # by hand, each origin from its own generator of the seed
    expected = {k: _by_hand(kronos, bars, *origins[k], 10, columns, torch.Generator().manual_seed(0)) for k in range(4)}
    got = column.to_numpy().reshape(len(origins), F)
    for k in range(len(origins)):
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-7)
    assert np.isfinite(got).all()


def test_the_next_stamps_follow_the_tickers_session_whatever_the_context(
    kronos: Kronos, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30-minute bars, a context of 4 bars ending at a day's last bar: the forecast bars are stamped with the next
    day's first bars (the session the ticker's bars before the origin show), not 30 minutes on from the window."""
    rng = np.random.default_rng(1)
    days = pd.bdate_range("2021-03-01", periods=10)
    times = [d + pd.Timedelta(minutes=570 + 30 * k) for d in days for k in range(13)]  # 09:30 ... 15:30
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.005, len(times))))
    bars = pd.DataFrame({"timestamp": times, "ticker": "AAA", "open": close, "close": close})
    bars["high"], bars["low"] = close * 1.002, close * 0.998
    i = 8 * 13 - 1  # the eighth day's 15:30 bar
    seen = []
    forecast = kronos.forecast
    monkeypatch.setattr(
        kronos, "forecast", lambda x, s, future, **kw: seen.append(future) or forecast(x, s, future, **kw)
    )
    got = kronos_column(_frame(bars, [("AAA", i)]), bars, kronos, KronosColumn("unused", context=4))[0].to_numpy()
    following = pd.DatetimeIndex([days[8] + pd.Timedelta(minutes=570 + 30 * k) for k in range(F)])  # 09:30 ...
    torch.testing.assert_close(seen[0], calendar_stamps(following)[None], rtol=0, atol=0)
    monkeypatch.undo()
    expected = _by_hand(kronos, bars, "AAA", i, 4, ["open", "high", "low", "close"], torch.Generator().manual_seed(0))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_nothing_after_the_origin_is_read(kronos: Kronos) -> None:
    bars = _bars()
    frame = _frame(bars, [("AAA", 20), ("BBB", 10)])
    settings = KronosColumn("unused", context=8, samples=2, batch_size=4)
    before, _ = kronos_column(frame, bars, kronos, settings)
    changed = bars.copy()
    later = changed["timestamp"] > frame["date"].max()
    changed.loc[later, ["open", "high", "low", "close", "volume", "amount"]] *= 3.0
    after, _ = kronos_column(frame, changed, kronos, settings)
    np.testing.assert_array_equal(before.to_numpy(), after.to_numpy())
    # and the bars before the window do change it: the test can fail
    changed.loc[changed["timestamp"] == frame["date"].min(), "close"] *= 1.5
    moved, _ = kronos_column(frame, changed, kronos, settings)
    assert not np.allclose(before.to_numpy(), moved.to_numpy())


def test_an_origins_forecast_does_not_depend_on_its_batch(kronos: Kronos) -> None:
    """Each origin draws from its own generator: the column is the same whatever the batch size, and an origin
    forecast among others equals it forecast alone."""
    bars = _bars()
    origins = [("AAA", 25), ("BBB", 15), ("AAA", 30), ("BBB", 20)]
    settings = {"context": 8, "samples": 3, "seed": 4}
    frame = _frame(bars, origins)
    together = kronos_column(frame, bars, kronos, KronosColumn("unused", batch_size=4, **settings))[0].to_numpy()
    single = kronos_column(frame, bars, kronos, KronosColumn("unused", batch_size=1, **settings))[0].to_numpy()
    alone = kronos_column(_frame(bars, origins[2:3]), bars, kronos, KronosColumn("unused", **settings))[0].to_numpy()
    np.testing.assert_allclose(together, single, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(together[2 * F : 3 * F], alone, rtol=1e-5, atol=1e-7)
    assert not np.allclose(together[:F], together[2 * F : 3 * F])  # different origins: different forecasts


def test_the_same_seed_draws_the_same_forecasts_and_samples_average(kronos: Kronos) -> None:
    bars = _bars()
    frame = _frame(bars, [("AAA", 25), ("BBB", 15)])
    one = kronos_column(frame, bars, kronos, KronosColumn("unused", context=8, samples=4, seed=1))[0]
    two = kronos_column(frame, bars, kronos, KronosColumn("unused", context=8, samples=4, seed=1))[0]
    other = kronos_column(frame, bars, kronos, KronosColumn("unused", context=8, samples=4, seed=2))[0]
    np.testing.assert_array_equal(one.to_numpy(), two.to_numpy())
    assert not np.array_equal(one.to_numpy(), other.to_numpy())


def test_fold_predictions_puts_kronos_beside_the_baselines(kronos: Kronos) -> None:
    bars = _bars()
    frame = _frame(bars, [("AAA", 25), ("BBB", 15)])
    frame["prediction"] = 0.0
    frame["realised"] = 0.0
    from lightning_tf.kline.scale import DataScale

    scale = DataScale(
        feature_names=["a"],
        target_names=["log_return"],
        target_kind="return",
        ticker_names=["AAA", "BBB"],
        feature_mean=torch.zeros(2, 1),
        feature_std=torch.ones(2, 1),
        target_mean=torch.zeros(2, 1),
        target_std=torch.ones(2, 1),
    )
    settings = KronosColumn("unused", context=8)
    out, notes = fold_predictions(frame, bars, {}, scale, lightgbm=False, kronos=(kronos, settings))
    expected, _ = kronos_column(frame, bars, kronos, settings)
    np.testing.assert_array_equal(out["kronos"].to_numpy(), expected.to_numpy())
    assert FORECASTERS["kronos"] == "Kronos zero-shot"
    assert list(out.columns).index("kronos") > list(out.columns).index("momentum")


def test_bad_input_is_one_line(kronos: Kronos) -> None:
    bars = _bars()
    frame = _frame(bars, [("AAA", 25)])
    settings = KronosColumn("unused", context=8)
    with pytest.raises(ValueError, match=r"the bars have no \['high'\]"):
        kronos_column(frame, bars.drop(columns="high"), kronos, settings)
    holed = bars.copy()
    holed.loc[20, "volume"] = np.nan
    with pytest.raises(ValueError, match="ticker 'AAA' at .* holds NaN or infinite values"):
        kronos_column(frame, holed, kronos, settings)
    stray = frame.assign(date=pd.Timestamp("2021-01-09"))  # a Saturday: no bar
    with pytest.raises(ValueError, match="ticker 'AAA' has no bar at its origin 2021-01-09"):
        kronos_column(stray, bars, kronos, settings)
    for field in ("context", "samples", "batch_size"):
        with pytest.raises(ValueError, match=f"kronos {field} must be >= 1"):
            KronosColumn("unused", **{field: 0})


def test_a_context_longer_than_the_models_is_refused_when_loaded(tmp_path, kronos: Kronos) -> None:
    pytest.importorskip("safetensors")
    folder = kronos.to_kronos(tmp_path / "kronos")
    assert KronosColumn(str(folder), context=16).load().max_context == 16
    with pytest.raises(ValueError, match=r"kronos context \(17\) is longer than the model's max_context \(16\)"):
        KronosColumn(str(folder), context=17).load()


def test_the_default_context_leaves_room_for_the_horizon(kronos: Kronos) -> None:
    """Without a context, Kronos reads its max_context (16) less the horizon (3) bars: the window never slides."""
    bars = _bars()
    frame = _frame(bars, [("AAA", 30), ("BBB", 20)])
    default, _ = kronos_column(frame, bars, kronos, KronosColumn("unused"))
    given, _ = kronos_column(frame, bars, kronos, KronosColumn("unused", context=13))
    other, _ = kronos_column(frame, bars, kronos, KronosColumn("unused", context=16))
    np.testing.assert_array_equal(default.to_numpy(), given.to_numpy())
    assert not np.array_equal(default.to_numpy(), other.to_numpy())
