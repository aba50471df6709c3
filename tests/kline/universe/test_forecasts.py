"""A fold's test windows as a predictions frame: origins, tickers, steps, original units, quantile columns, the
whole residual beside the linear path, the baselines' columns lined up with the model's rows, a target that is not
the step's log return judged on the bars' returns; and the forecaster's own ``window_forecasts``: the forward of
``forecast()`` and predict (its compiled one under ``compile: true``), each column the model at one gate."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import KLineForecaster
from lightning_tf.kline.scale import DataScale
from lightning_tf.kline.universe.forecasts import (
    WindowForecast,
    fold_predictions,
    momentum_column,
    realised_column,
    window_forecasts,
)
from lightning_tf.kline.windows import WindowDataset

L, F = 3, 2


def _dataset_and_scale() -> tuple[WindowDataset, DataScale]:
    """Two tickers of 8 rows each, stored end to end; targets scaled by (mean, std) = (1, 2) and (-1, 3)."""
    n = 16
    ticker = torch.tensor([0] * 8 + [1] * 8)
    time = torch.tensor(pd.bdate_range("2020-01-01", periods=8).as_unit("ns").asi8.tolist() * 2)
    y = torch.arange(n, dtype=torch.float32)[:, None] / 10  # (N, 1) scaled targets
    ends = torch.tensor([2, 3, 4, 5, 10, 11])  # window ends of both tickers; targets stay inside a ticker
    ds = WindowDataset(
        x=torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 2),  # (N, C=2)
        ends=ends,
        context_len=L,
        horizon=F,
        y=y,
        raw_target=y,
        anchor=torch.ones(n, dtype=torch.float64),
        ticker=ticker,
        time=time,
    )
    scale = DataScale(
        feature_names=["a", "b"],
        target_names=["log_return"],
        target_kind="return",
        ticker_names=["AAA", "BBB"],
        feature_mean=torch.zeros(2, 2),
        feature_std=torch.ones(2, 2),
        target_mean=torch.tensor([[1.0], [-1.0]]),
        target_std=torch.tensor([[2.0], [3.0]]),
    )
    return ds, scale


def _forecast(batch: dict[str, torch.Tensor]) -> WindowForecast:
    x = batch["x"]
    last = x[:, -1, 0]  # (B,) the window's last input: identifies it
    point = last[:, None, None] + torch.arange(F, dtype=x.dtype)[None, :, None]  # (B, F, 1)
    quantiles = torch.stack([point - 1, point, point + 1], dim=-1)  # (B, F, 1, 3)
    return WindowForecast(point, quantiles, -point)


@pytest.mark.parametrize("batch_size", [1, 4, 100])
def test_rows_are_windows_by_steps_in_original_units(batch_size: int) -> None:
    ds, scale = _dataset_and_scale()
    frame = window_forecasts(_forecast, ds, scale, [0.1, 0.5, 0.9], batch_size=batch_size)
    assert list(frame.columns) == ["date", "ticker", "step", "prediction", "realised", "linear", "q0.1", "q0.5", "q0.9"]
    assert len(frame) == 6 * F and list(frame["step"]) == [1, 2] * 6
    assert list(frame["ticker"]) == ["AAA"] * 8 + ["BBB"] * 4
    days = pd.bdate_range("2020-01-01", periods=8)
    assert list(frame["date"][::F]) == [days[e % 8] for e in (2, 3, 4, 5, 10, 11)]
    mean = np.where(frame["ticker"] == "AAA", 1.0, -1.0)
    std = np.where(frame["ticker"] == "AAA", 2.0, 3.0)
    end = np.repeat([2, 3, 4, 5, 10, 11], F)
    step = frame["step"].to_numpy()
    np.testing.assert_allclose(frame["prediction"], (end + step - 1) * std + mean, rtol=1e-6)
    np.testing.assert_allclose(frame["linear"], -(end + step - 1) * std + mean, rtol=1e-6)
    np.testing.assert_allclose(frame["q0.1"], (end + step - 2) * std + mean, rtol=1e-6)
    np.testing.assert_allclose(frame["realised"], (end + step) / 10 * std + mean, rtol=1e-6)  # y of row t + step


def test_momentum_lines_up_with_the_rows() -> None:
    days = pd.bdate_range("2020-01-01", periods=30)
    close = {"AAA": np.exp(np.linspace(0, 1, 30)), "BBB": np.exp(np.linspace(0, -2, 30))}
    bars = pd.concat(
        [pd.DataFrame({"timestamp": days, "ticker": t, "close": c}) for t, c in close.items()], ignore_index=True
    )
    frame = pd.DataFrame({"date": [days[25], days[25], days[5]], "ticker": ["BBB", "AAA", "AAA"], "step": [1, 1, 1]})
    column = momentum_column(frame, bars, window=20)
    np.testing.assert_allclose(column.iloc[:2], [np.log(close["BBB"][25] / close["BBB"][5]), 20 / 29], rtol=1e-9)
    assert np.isnan(column.iloc[2])  # 5 bars of history: no 20-bar momentum


def test_realised_returns_come_from_the_bars() -> None:
    days = pd.bdate_range("2020-01-01", periods=10)
    close = np.exp(np.cumsum(np.arange(1, 11) / 100))  # log return of bar i: (i + 1) / 100
    bars = pd.DataFrame({"timestamp": days, "ticker": "AAA", "close": close})
    frame = pd.DataFrame({"date": [days[2], days[2], days[8]], "ticker": "AAA", "step": [1, 2, 2]})
    column = realised_column(frame, bars)
    np.testing.assert_allclose(column.iloc[:2], [0.04, 0.05], rtol=1e-9)
    assert np.isnan(column.iloc[2])  # bar 10 does not exist


def test_the_whole_residual_sits_beside_the_prediction_and_the_residual_alone_is_its_gain_over_the_linear_path():
    ds, scale = _dataset_and_scale()

    def forecast(batch: dict[str, torch.Tensor]) -> WindowForecast:
        point, _, linear, _ = _forecast(batch)
        return WindowForecast(point, None, linear, 3 * point)

    frame = window_forecasts(forecast, ds, scale, None, batch_size=4)
    assert list(frame.columns) == [
        "date",
        "ticker",
        "step",
        "prediction",
        "residual",
        "residual_alone",
        "realised",
        "linear",
    ]
    std = np.where(frame["ticker"] == "AAA", 2.0, 3.0)
    mean = np.where(frame["ticker"] == "AAA", 1.0, -1.0)
    model = (frame["prediction"] - mean) / std  # back on the model scale
    np.testing.assert_allclose(frame["residual"], 3 * model * std + mean, rtol=1e-6)
    np.testing.assert_allclose(frame["residual_alone"], frame["residual"] - frame["linear"], rtol=0, atol=0)


def _bars(days: pd.DatetimeIndex) -> pd.DataFrame:
    """The bars of the two tickers of :func:`_dataset_and_scale`: bar i of AAA has the log return (i + 1) / 100,
    of BBB -(i + 1) / 50."""
    steps = np.arange(1, len(days) + 1)
    return pd.concat(
        [
            pd.DataFrame({"timestamp": days, "ticker": "AAA", "close": np.exp(np.cumsum(steps / 100))}),
            pd.DataFrame({"timestamp": days, "ticker": "BBB", "close": np.exp(np.cumsum(-steps / 50))}),
        ],
        ignore_index=True,
    )


def test_a_target_that_is_not_the_log_return_is_kept_and_the_rows_are_judged_on_the_bars_returns() -> None:
    ds, scale = _dataset_and_scale()
    bars = _bars(pd.bdate_range("2020-01-01", periods=8))
    model = window_forecasts(_forecast, ds, scale, None)
    kept, notes = fold_predictions(model, bars, {"test": ds}, scale, lightgbm=False)
    assert notes == []
    assert list(kept.columns) == ["date", "ticker", "step", "prediction", "realised", "linear", "momentum"]
    pd.testing.assert_frame_equal(kept[model.columns], model)  # a log-return target: the model's rows as they are

    ranked = dataclasses.replace(scale, target_names=["cs_rank_log_return"])
    frame, _ = fold_predictions(model, bars, {"test": ds}, ranked, lightgbm=False)
    assert list(frame.columns) == ["date", "ticker", "step", "prediction", "realised", "target", "linear", "momentum"]
    np.testing.assert_array_equal(frame["target"], model["realised"])
    # the log return of bar t + step of the row's ticker, t its origin (bars 2..5 of AAA, 2..3 of BBB)
    bar = np.repeat([2, 3, 4, 5, 2, 3], F) + frame["step"].to_numpy()
    np.testing.assert_allclose(frame["realised"], np.where(frame["ticker"] == "AAA", (bar + 1) / 100, -(bar + 1) / 50))
    assert frame["momentum"].isna().all()  # 20 bars of history are not there


def test_lightgbm_missing_is_a_note_and_not_a_column(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_tf.kline.universe import forecasts

    def missing(*args: object, **kwargs: object) -> pd.Series:
        raise ImportError("No module named 'lightgbm'")

    monkeypatch.setattr(forecasts, "lightgbm_column", missing)
    ds, scale = _dataset_and_scale()
    bars, splits = _bars(pd.bdate_range("2020-01-01", periods=8)), {"train": ds, "val": ds, "test": ds}
    frame, notes = fold_predictions(window_forecasts(_forecast, ds, scale, None), bars, splits, scale)
    assert notes == ["LightGBM left out: No module named 'lightgbm'"] and "lightgbm" not in frame


# ------------------------------------------------------------------------------ the forecaster's own


C, CONTEXT, HORIZON = 2, 16, 2


def _model_windows() -> tuple[WindowDataset, DataScale]:
    """Two tickers of 40 random rows each; 10 windows of each."""
    g = torch.Generator().manual_seed(0)
    n = 80
    ends = torch.tensor([*range(CONTEXT - 1, CONTEXT + 9), *range(40 + CONTEXT - 1, 40 + CONTEXT + 9)])
    ds = WindowDataset(
        x=torch.randn(n, C, generator=g),
        ends=ends,
        context_len=CONTEXT,
        horizon=HORIZON,
        y=torch.randn(n, 1, generator=g),
        raw_target=torch.randn(n, 1, generator=g),
        anchor=torch.ones(n, dtype=torch.float64),
        ticker=torch.tensor([0] * 40 + [1] * 40),
        time=torch.tensor(pd.bdate_range("2020-01-01", periods=40).as_unit("ns").asi8.tolist() * 2),
    )
    scale = DataScale(
        feature_names=["log_return", "b"],
        target_names=["log_return"],
        target_kind="return",
        ticker_names=["AAA", "BBB"],
        feature_mean=torch.zeros(2, C),
        feature_std=torch.ones(2, C),
        target_mean=torch.tensor([[0.5], [-1.0]]),
        target_std=torch.tensor([[2.0], [3.0]]),
    )
    return ds, scale


def _model(**kw: object) -> KLineForecaster:
    torch.manual_seed(0)
    model = KLineForecaster(
        n_features=C,
        n_targets=1,
        context_len=CONTEXT,
        horizon=HORIZON,
        target_channels=[0],
        **{"patch_len": 8, "stride": 4, "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "revin": False, **kw},
    )
    with torch.no_grad():  # a residual that forecasts something (it starts at zero)
        for p in model.net.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.data_scale = _model_windows()[1]
    return model


def _forward(model: KLineForecaster, ds: WindowDataset, scale: DataScale, gate: float) -> np.ndarray:
    """The model's forward of every window in original units, its residual weighed by ``gate``: (W * F,)."""
    batch = ds.__getitems__(list(range(len(ds))))
    model.net.residual_gate.fill_(gate)
    with torch.no_grad():
        out = model.eval()(batch["x"])  # (W, F, 1)
    return scale.inverse_targets(out.double(), batch["ticker"])[..., 0].reshape(-1).numpy()


@pytest.mark.parametrize("residual", ["on", "blend"])
def test_each_column_is_the_model_at_one_gate(residual: str) -> None:
    """``prediction`` is the model as selected, ``linear`` its linear path alone (the gate at 0), ``residual`` the
    whole residual added (at 1) whatever validation chose, ``residual_alone`` their difference."""
    ds, scale = _model_windows()
    model = _model(residual=residual)
    model.net.residual_gate.fill_(0.0)  # validation dropped the residual
    frame = model.window_forecasts(ds, batch_size=7)
    assert model.training  # the mode is restored
    assert list(frame.columns) == [
        "date",
        "ticker",
        "step",
        "prediction",
        "residual",
        "residual_alone",
        "realised",
        "linear",
    ]
    np.testing.assert_allclose(frame["prediction"], frame["linear"], rtol=1e-6)
    np.testing.assert_allclose(frame["linear"], _forward(model, ds, scale, 0.0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(frame["residual"], _forward(model, ds, scale, 1.0), rtol=1e-5, atol=1e-6)
    assert np.abs(frame["residual_alone"]).min() > 1e-4  # the residual forecasts something
    np.testing.assert_array_equal(frame["residual_alone"], frame["residual"] - frame["linear"])
    model.net.residual_gate.fill_(0.3)
    np.testing.assert_allclose(
        model.window_forecasts(ds)["prediction"], _forward(model, ds, scale, 0.3), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize(("residual", "linear"), [("off", True), ("only", False)])
def test_without_a_residual_to_weigh_the_columns_are_the_models_alone(residual: str, linear: bool) -> None:
    ds, scale = _model_windows()
    model = _model(residual=residual, linear="tuned")
    frame = model.window_forecasts(ds)
    assert "residual" not in frame and "residual_alone" not in frame
    np.testing.assert_allclose(frame["prediction"], _forward(model, ds, scale, 1.0), rtol=1e-5, atol=1e-6)
    if linear:
        np.testing.assert_allclose(frame["linear"], frame["prediction"], rtol=1e-6)
    else:
        assert frame["linear"].isna().all()


def test_a_quantile_model_gives_its_quantiles_around_its_median() -> None:
    ds, scale = _model_windows()
    model = _model(loss="quantile")
    frame = model.window_forecasts(ds)
    assert [c for c in frame if c.startswith("q")] == ["q0.1", "q0.5", "q0.9"]
    np.testing.assert_allclose(frame["q0.5"], frame["prediction"], rtol=1e-6)
    assert (frame["q0.1"] < frame["q0.5"]).all() and (frame["q0.5"] < frame["q0.9"]).all()
    batch = ds.__getitems__(list(range(len(ds))))
    with torch.no_grad():
        q = model.eval().forward_quantiles(batch["x"])  # (W, F, 1, 3)
    expected = scale.inverse_targets(q[..., 2].double(), batch["ticker"])[..., 0].reshape(-1).numpy()
    np.testing.assert_allclose(frame["q0.9"], expected, rtol=1e-5, atol=1e-6)


def test_the_compiled_forward_is_the_one_used() -> None:
    """Under ``compile: true`` the forecast's parts come from the compiled function, as in ``forecast()`` and predict:
    here a stand-in for it that counts its calls and shifts the linear path, so its numbers show."""
    ds, _ = _model_windows()
    model = _model()
    eager = model.window_forecasts(ds, batch_size=8)
    calls = []

    def compiled(x: torch.Tensor, **covariates: torch.Tensor | None) -> tuple:
        calls.append(len(x))
        parts, weights = model.net.parts(x, **covariates)
        return parts._replace(linear=parts.linear + 1.0), weights

    model._compiled = compiled
    frame = model.window_forecasts(ds, batch_size=8)
    assert calls == [8, 8, 4]  # one forward a batch, for every column
    std = np.where(frame["ticker"] == "AAA", 2.0, 3.0)
    np.testing.assert_allclose(frame["linear"] - eager["linear"], std, rtol=1e-5)
    np.testing.assert_allclose(frame["residual"] - eager["residual"], std, rtol=1e-5)


def test_windows_of_other_data_are_mapped_back_with_that_datas_scaling() -> None:
    """A model tested zero-shot keeps the scaling of the data it was trained on; the windows' own data gives the
    tickers and the target statistics of its rows."""
    ds, own = _model_windows()
    model = _model()
    theirs = dataclasses.replace(
        own,
        ticker_names=["XXX", "YYY"],
        target_mean=torch.tensor([[3.0], [0.0]]),
        target_std=torch.tensor([[1.0], [5.0]]),
    )
    a, b = model.window_forecasts(ds), model.window_forecasts(ds, theirs)
    assert set(a["ticker"]) == {"AAA", "BBB"} and list(b["ticker"]) == list(
        a["ticker"].map({"AAA": "XXX", "BBB": "YYY"})
    )
    for column in ("prediction", "residual", "realised", "linear"):
        mean_a, std_a = np.where(a["ticker"] == "AAA", 0.5, -1.0), np.where(a["ticker"] == "AAA", 2.0, 3.0)
        mean_b, std_b = np.where(b["ticker"] == "XXX", 3.0, 0.0), np.where(b["ticker"] == "XXX", 1.0, 5.0)
        np.testing.assert_allclose((b[column] - mean_b) / std_b, (a[column] - mean_a) / std_a, rtol=1e-6, atol=1e-9)


def test_a_model_without_the_datas_scaling_says_so() -> None:
    model = _model()
    model.data_scale = None
    ds, scale = _model_windows()
    with pytest.raises(ValueError, match="window_forecasts needs the data's scaling: give scale"):
        model.window_forecasts(ds)
    assert len(model.window_forecasts(ds, scale)) == len(ds) * HORIZON
