"""Covariates and cross-sectional labels on generated universes with planted structure (tests/helpers/universe.py).

Each test fits the closed-form linear path (and, for known-future covariates, a few steps of the covariates'
head) on the training windows and scores the out-of-sample rank IC on the test windows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.kline import KLineDataModule, KLineForecaster
from lightning_tf.kline.covariates import calendar_features, cross_sectional
from lightning_tf.kline.inference import last_windows
from lightning_tf.kline.reader.io import read_bars
from lightning_tf.kline.settings import Covariates
from lightning_tf.kline.windows import next_timestamps, xy_pairs
from tests.helpers.universe import make_universe, spearman, write_universe

SMALL = {"n_tickers": 12, "n_days": 320}
DATES = {"val_start": "2015-10-01", "test_start": "2015-12-15"}  # business days from 2015-01-02


def _dm(path: Path, **kw: object) -> KLineDataModule:
    args = {"context_len": 8, "horizon": 1, "batch_size": 512, "features": ["log_return"], **DATES, **kw}
    dm = KLineDataModule.from_arguments({"path": str(path), **args})
    dm.setup("fit")
    return dm


def _linear(dm: KLineDataModule) -> KLineForecaster:
    """The linear path alone, every channel to the target, fit in closed form on the training windows."""
    model = KLineForecaster(
        n_features=dm.n_features,
        context_len=dm.context_len,
        horizon=dm.horizon,
        residual="off",
        linear="tuned",
        channel_mixing=True,
        revin=False,
        baselines=False,
    )
    model.target_channels = dm.target_channels
    model.net.set_covariates(dm.n_future, dm.static_sizes)
    model.net.fit_linear(lambda: xy_pairs(dm.train_dataloader()), lambda: xy_pairs(dm.val_dataloader()))
    return model


def _train_covariates(model: KLineForecaster, dm: KLineDataModule, epochs: int = 4) -> None:
    """A few Adam steps on the covariates' head alone (the linear path stays as fit)."""
    torch.manual_seed(0)
    head = model.net.covariates
    opt = torch.optim.Adam(head.parameters(), lr=0.05)
    for _ in range(epochs):
        for batch in dm.train_dataloader():
            loss = torch.nn.functional.mse_loss(
                model._point(model.net.combine(model._parts(batch["x"], batch))), batch["y"]
            )
            opt.zero_grad()
            loss.backward()
            opt.step()


@torch.no_grad()
def _test_ic(model: KLineForecaster, dm: KLineDataModule) -> float:
    model.eval()
    preds, ys = [], []
    for batch in dm.test_dataloader():
        preds.append(model.net.combine(model._parts(batch["x"], batch))[:, 0, 0])
        ys.append(batch["y"][:, 0, 0])
    return spearman(torch.cat(preds).numpy(), torch.cat(ys).numpy())


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("universe") / "planted.csv"
    write_universe(path, past=1.0, future=1.0, **SMALL)
    return path


def test_a_past_covariate_that_carries_next_returns_is_found_and_without_it_nothing_is(planted: Path) -> None:
    with_it = _test_ic(
        _linear(_dm(planted, covariates=["signal", "noise"])), _dm(planted, covariates=["signal", "noise"])
    )
    without = _test_ic(_linear(_dm(planted, covariates=["noise"])), _dm(planted, covariates=["noise"]))
    assert with_it > 0.3, with_it
    assert abs(without) < 0.1, without


def test_a_known_future_covariate_helps_only_when_declared_known_future(planted: Path) -> None:
    dm = _dm(planted, future_covariates=["event"])
    assert dm.n_future == 1
    model = _linear(dm)
    before = _test_ic(model, dm)  # the head starts at zero: the linear path alone
    _train_covariates(model, dm)
    declared_future = _test_ic(model, dm)
    dm_past = _dm(planted, covariates=["event"])
    declared_past = _test_ic(_linear(dm_past), dm_past)
    assert abs(before) < 0.1, before
    assert declared_future > 0.3, declared_future
    assert abs(declared_past) < 0.1, declared_past


def test_a_random_walk_universe_with_covariates_from_its_bars_stays_unpredictable(tmp_path: Path) -> None:
    """Covariates computed from the bars (the bar's own return, turnover), the calendar's features and a ticker
    embedding: a look-ahead anywhere (a covariate read one row late, a calendar feature of the wrong bar)
    would show as out-of-sample IC."""
    path = tmp_path / "walk.csv"
    write_universe(path, **SMALL)
    dm = _dm(path, covariates=["own_return", "turnover"], calendar="business", ticker_embedding=True)
    assert dm.n_future == 5 and dm.static_sizes == [13]
    model = _linear(dm)
    _train_covariates(model, dm, epochs=2)
    assert abs(_test_ic(model, dm)) < 0.1


def test_changing_a_covariate_after_t_changes_no_input_of_a_window_ending_at_t(tmp_path: Path) -> None:
    frame = make_universe(n_tickers=3, n_days=320, seed=3)
    write_universe(tmp_path / "a.csv", frame)
    changed = frame.copy()
    cut = pd.Timestamp("2016-01-05")
    after = (changed["ticker"] == "T01") & (pd.to_datetime(changed["date"]) > cut)
    changed.loc[after, ["signal", "event"]] = 1e3
    write_universe(tmp_path / "b.csv", changed)
    kw = {"covariates": ["signal"], "future_covariates": ["event"], "calendar": "XNYS", "horizon": 3}
    a, b = _dm(tmp_path / "a.csv", **kw), _dm(tmp_path / "b.csv", **kw)
    ta, tb = next(iter(a.test_dataloader())), next(iter(b.test_dataloader()))
    for batch_a, batch_b in zip(a.test_dataloader(), b.test_dataloader(), strict=True):
        stamps = pd.to_datetime(batch_a["time"].numpy())
        through = torch.as_tensor(stamps <= cut)  # windows whose context ends by the cut
        assert torch.equal(batch_a["x"][through], batch_b["x"][through])
        # known-future values of the forecast bars: changed only where a forecast bar lies after the cut
        ok = torch.as_tensor(stamps < cut - pd.offsets.BDay(3))
        assert torch.equal(batch_a["x_future"][ok], batch_b["x_future"][ok])
    assert ta["x_future"].shape[1:] == (3, 6) and tb["x"].shape[-1] == 2


def test_calendar_features_and_exchange_forecast_timestamps() -> None:
    # the Spring Festival of 2024: XSHG closed 9-17 February
    stamps = next_timestamps(pd.DatetimeIndex(pd.bdate_range("2024-01-02", "2024-02-08")), 3, calendar="XSHG")
    assert list(stamps.strftime("%Y-%m-%d")) == ["2024-02-19", "2024-02-20", "2024-02-21"]
    plain = next_timestamps(pd.DatetimeIndex(pd.bdate_range("2024-01-02", "2024-02-08")), 1)
    assert plain[0] == pd.Timestamp("2024-02-09")  # without a calendar, the next business day
    feats = calendar_features(pd.DatetimeIndex(["2024-02-08", "2024-02-19", "2024-02-20"]), "XSHG")
    assert feats[:, 2].tolist() == [1, 11, 1]  # days since the previous session
    assert feats[:, 3].tolist() == [1, 0, 0] and feats[:, 4].tolist() == [0, 1, 0]  # before / after the holiday


def test_session_dates_cut_from_one_span_are_those_of_each_span_read_alone() -> None:
    """A calendar is built once for a span of years that grows to hold every request (building one takes a tenth
    of a second); each request's sessions are those a calendar built for its own years gives, and years outside
    the calendar's bounds are refused as before."""
    from lightning_tf.kline import covariates

    covariates._SPANS.clear()
    asked = {
        "XNYS": [(2001, 2003), (1987, 1990), (1987, 2016)],
        "business": [(2001, 2003), (1970, 1971)],
        "XSHG": [(2005, 2007), (1995, 1996)],
    }
    for name, years in asked.items():
        for first, last in years:
            got = covariates.session_dates(name, pd.Timestamp(first, 6, 1), pd.Timestamp(last, 6, 1))
            assert np.array_equal(got, covariates._read_sessions(name, first - 1, last + 1)), (name, first, last)
    assert covariates._SPANS["XNYS"][:2] == (1976, 2024)  # the first request's years and 10 of margin, then grown
    with pytest.raises(ValueError, match=r"calendar 'XSHG' covers \d{4}-\d{2}-\d{2} to .* only"):
        covariates.session_dates("XSHG", pd.Timestamp(1985, 6, 1), pd.Timestamp(1986, 6, 1))


def test_cross_sectional_labels_per_date_and_split() -> None:
    values = np.array([1.0, 2.0, 3.0, 10.0, np.nan, 5.0])
    dates = np.array([0, 0, 0, 1, 1, 1])
    split = np.array([0, 0, 0, 0, 0, 1])  # the last row's date is another split's for its ticker
    z = cross_sectional(values, dates, split, "cs_zscore")
    np.testing.assert_allclose(z[:3], [-np.sqrt(1.5), 0.0, np.sqrt(1.5)])
    assert z[3] == 0.0 and np.isnan(z[4]) and z[5] == 0.0  # one ticker per (split, date): 0
    r = cross_sectional(values, dates, split, "cs_rank")
    np.testing.assert_allclose(r[:3], (np.array([0.5, 1.5, 2.5]) / 3 - 0.5) * np.sqrt(12))


def test_cs_label_data_and_date_batches(planted: Path) -> None:
    dm = _dm(planted, label="cs_zscore", batch_by_date=True, features=["log_return", "volatility"])
    assert dm.target_names == ["cs_zscore_log_return"] and dm.target_channels is None
    assert dm.data_scale is not None and not dm.data_scale.rebuilds_prices
    batches = list(dm.train_dataloader())
    assert len(batches) == len(torch.unique(dm.datasets["train"].time[dm.datasets["train"].ends]))
    for batch in batches[:5]:
        assert (batch["time"] == batch["time"][0]).all() and len(batch["time"]) == 12  # one date's universe
        y = batch["y"][:, 0, 0].double()
        assert abs(float(y.mean())) < 1e-5 and abs(float(y.std(unbiased=False)) - 1) < 1e-4


def test_bad_covariate_inputs_get_one_line(tmp_path: Path, planted: Path) -> None:
    with pytest.raises(ValueError, match=r"covariate column 'pe_ratio' not found"):
        _dm(planted, covariates=["pe_ratio"])
    frame = make_universe(n_tickers=2, n_days=120)
    frame["sector_name"] = "tech"
    write_universe(tmp_path / "text.csv", frame)
    with pytest.raises(ValueError, match=r"text\.csv: covariate column 'sector_name' holds text \('tech' at line 2\)"):
        read_bars(tmp_path / "text.csv", extra_columns=["sector_name"])
    pd.DataFrame({"ticker": ["T00", "T01"], "sector": ["a", "b"]}).to_csv(tmp_path / "sectors.csv", index=False)
    with pytest.raises(ValueError, match=r"sectors\.csv: no row for ticker\(s\) 'T02', 'T03'"):
        _dm(planted, static_file=str(tmp_path / "sectors.csv"))
    gaps = make_universe(n_tickers=2, n_days=320)
    gaps.loc[[100, 101, 102], "signal"] = np.nan
    write_universe(tmp_path / "gaps.csv", gaps)
    with pytest.raises(ValueError, match=r"covariate 'signal' of ticker 'T00' is missing at 2015-05-22"):
        _dm(tmp_path / "gaps.csv", covariates=["signal"])
    with pytest.raises(ValueError, match=r"more than ffill_limit=2 rows in a row"):
        _dm(tmp_path / "gaps.csv", covariates=["signal"], covariate_missing="ffill", ffill_limit=2)
    filled = _dm(tmp_path / "gaps.csv", covariates=["signal"], covariate_missing="ffill", ffill_limit=3)
    dropped = _dm(tmp_path / "gaps.csv", covariates=["signal"], covariate_missing="drop")
    assert len(filled.bars) == 640 and len(dropped.bars) == 637
    with pytest.raises(ValueError, match=r"calendar 'XXXX' is not an exchange calendar"):
        KLineDataModule(covariates=Covariates(calendar="XXXX"))
    with pytest.raises(ValueError, match=r"have the name of a built-in or calendar feature"):
        KLineDataModule(covariates=Covariates(past=["volatility"]))


def test_static_table_and_unknown_ticker_slot(tmp_path: Path, planted: Path) -> None:
    tickers = [f"T{k:02d}" for k in range(12)]
    table = pd.DataFrame({"ticker": tickers, "sector": ["a", "b", "c"] * 4, "board": ["main"] * 12})
    table.to_csv(tmp_path / "sectors.csv", index=False)
    dm = _dm(planted, static_file=str(tmp_path / "sectors.csv"), ticker_embedding=True)
    assert dm.static_sizes == [13, 4, 2] and dm.static_vocab == {"sector": ["a", "b", "c"], "board": ["main"]}
    batch = next(iter(dm.test_dataloader()))
    ids = batch["static"]
    assert ids.dtype == torch.int64 and ids.shape[1] == 3
    np.testing.assert_array_equal(ids[:, 0].numpy(), batch["ticker"].numpy() + 1)


@pytest.fixture(scope="module")
def universe_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, pd.DataFrame]:
    """A tiny model with every kind of covariate trained for a few steps, its checkpoint, its data's folder."""
    import lightning as L

    root = tmp_path_factory.mktemp("covariate_ckpt")
    frame = write_universe(root / "u.csv", n_tickers=4, n_days=320, past=1.0, future=1.0)
    tickers = [f"T{k:02d}" for k in range(4)]
    pd.DataFrame({"ticker": tickers, "sector": ["a", "b", "a", "b"]}).to_csv(root / "sectors.csv", index=False)
    kw = {
        "covariates": ["signal"],
        "future_covariates": ["event"],
        "calendar": "XNYS",
        "ticker_embedding": True,
        "static_file": str(root / "sectors.csv"),
        "horizon": 2,
    }
    dm = KLineDataModule.from_arguments(
        {"path": str(root / "u.csv"), "context_len": 16, "batch_size": 64, "features": ["log_return"], **DATES, **kw}
    )
    L.seed_everything(0)
    model = KLineForecaster(
        n_features=2, context_len=16, horizon=2, channel_mixing=True, revin=False, d_model=8, n_heads=2, n_layers=1
    )
    t = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_train_batches=3,
        limit_val_batches=2,
    )
    t.fit(model, dm)
    assert model.net.covariate_sizes == (6, [5, 3])
    t.save_checkpoint(root / "model.ckpt")
    return root / "model.ckpt", root, frame


def test_the_checkpoint_carries_the_covariates_and_forecast_requires_their_columns(
    universe_checkpoint: tuple[Path, Path, pd.DataFrame],
) -> None:
    ckpt, root, frame = universe_checkpoint
    model = KLineForecaster.load_from_checkpoint(ckpt, map_location="cpu")
    assert model.required_columns == ["open", "high", "low", "close", "volume", "signal", "event"]
    cov = model.data_scale.covariates
    assert cov["calendar"] == "XNYS" and cov["static_vocab"] == {"sector": ["a", "b"]}
    assert cov["future_names"][-1] == "event" and len(cov["future_mean"]) == 4
    bars = frame[frame["ticker"] == "T01"].iloc[:200]
    last = pd.Timestamp(bars["date"].iloc[-1])
    stamps = next_timestamps(pd.DatetimeIndex([last - pd.Timedelta(days=1), last]), 2, calendar="XNYS")
    future = pd.DataFrame({"ticker": "T01", "timestamp": stamps, "event": [2.0, -2.0]})
    table = model.forecast(bars, future=future)
    assert table["timestamp"].tolist() == list(stamps) and table["ticker"].unique().tolist() == ["T01"]
    # the static ids: the ticker's (T01: 2) and its sector's from the static file (b: 2)
    (window,) = last_windows(bars, scale=model.data_scale, context_len=16, horizon=2, future=future)
    assert window.static.tolist() == [2, 2] and model.data_scale.ticker_names[1] == "T01"
    # the known-future values reach the forecast: another event, another forecast
    other = model.forecast(bars, future=future.assign(event=[-2.0, 2.0]))
    assert not np.allclose(table["pred_log_return"], other["pred_log_return"])
    with pytest.raises(ValueError, match=r"the model reads known-future covariate\(s\) \['event'\]"):
        model.forecast(bars)
    # predict through the DataModule: the same forecast, the known-future values from predict_future_path
    bars.to_csv(root / "new.csv", index=False)
    future.to_csv(root / "future.csv", index=False)
    kw = {"covariates": ["signal"], "future_covariates": ["event"], "calendar": "XNYS", "ticker_embedding": True}
    pdm = KLineDataModule.from_arguments(
        {
            "path": str(root / "gone.csv"),
            "context_len": 16,
            "horizon": 2,
            "features": ["log_return"],
            "static_file": str(root / "sectors.csv"),
            "predict_path": str(root / "new.csv"),
            "predict_future_path": str(root / "future.csv"),
            **DATES,
            **kw,
        }
    )
    pdm.setup("predict")
    pdm.load_state_dict(torch.load(ckpt, weights_only=True)["KLineDataModule"])
    batch = next(iter(pdm.predict_dataloader()))
    with torch.no_grad():
        pred = model.eval().predict_step(batch, 0)["pred_orig"][0, :, 0].numpy()
    np.testing.assert_allclose(table["pred_log_return"].to_numpy(), pred, rtol=1e-5, atol=1e-9)
    with pytest.raises(ValueError, match=r"covariate column 'signal' not found"):
        model.forecast(bars.drop(columns=["signal"]), future=future)
    with pytest.raises(ValueError, match=r"covariate column 'signal' holds text"):
        model.forecast(bars.assign(signal="high"), future=future)
    # a ticker never seen in training still forecasts (the unknown ticker slot)
    unseen = model.forecast(bars.assign(ticker="NEW"), future=future.assign(ticker="NEW"))
    assert np.isfinite(unseen["pred_log_return"]).all() and unseen["scaled_by"].iloc[0].startswith("its own history")


def test_predict_through_the_data_module_matches_forecast(tmp_path: Path) -> None:
    """The DataModule's predict windows (context rows, then the forecast rows' calendar features) give
    forecast()'s numbers, with the checkpoint's statistics, vocabulary and calendar alone."""
    import lightning as L

    frame = write_universe(tmp_path / "u.csv", n_tickers=3, n_days=320)
    kw = {"covariates": ["signal"], "calendar": "XSHG", "ticker_embedding": True, "horizon": 3}
    dm = KLineDataModule.from_arguments(
        {
            "path": str(tmp_path / "u.csv"),
            "context_len": 16,
            "batch_size": 64,
            "features": ["log_return"],
            **DATES,
            **kw,
        }
    )
    model = KLineForecaster(
        n_features=2, context_len=16, horizon=3, channel_mixing=True, residual="off", linear="tuned"
    )
    t = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_train_batches=3,
        limit_val_batches=2,
    )
    t.fit(model, dm)
    with torch.no_grad():  # a visible static effect: the head's weights as trained are tiny
        model.net.covariates.static[0].weight.normal_()
    t.save_checkpoint(tmp_path / "model.ckpt")
    new = frame[frame["ticker"] == "T02"].iloc[:250]
    new.to_csv(tmp_path / "new.csv", index=False)
    loaded = KLineForecaster.load_from_checkpoint(tmp_path / "model.ckpt", map_location="cpu").eval()
    table = loaded.forecast(tmp_path / "new.csv")
    pdm = KLineDataModule.from_arguments(
        {
            "path": str(tmp_path / "gone.csv"),
            "context_len": 16,
            "predict_path": str(tmp_path / "new.csv"),
            "features": ["log_return"],
            **DATES,
            **kw,
        }
    )
    pdm.setup("predict")
    pdm.load_state_dict(torch.load(tmp_path / "model.ckpt", weights_only=True)["KLineDataModule"])
    batch = next(iter(pdm.predict_dataloader()))
    assert batch["x_future"].shape == (1, 3, 5) and batch["static"].tolist() == [[3]]
    with torch.no_grad():
        pred = loaded.predict_step(batch, 0)["pred_orig"][0, :, 0].numpy()
    np.testing.assert_allclose(table["pred_log_return"].to_numpy(), pred, rtol=1e-5, atol=1e-9)
    assert list(pdm.future_timestamps(3, 0)) == list(table["timestamp"])


@pytest.mark.parametrize("backbone", ["patches", "variates", "bars"])
def test_every_backbone_takes_the_covariates_and_starts_from_its_forecast_without_them(backbone: str) -> None:
    """The covariates' head starts at exactly zero (bit for bit the forecast without it), then its inputs move
    the forecast of every backbone; a network without covariates has no head and no new parameters."""
    torch.manual_seed(0)
    kw = {
        "backbone": backbone,
        "channel_mixing": True,
        "d_model": 8,
        "n_heads": 2,
        "n_layers": 1,
        "patch_len": 4,
        "stride": 4,
    }
    model = KLineForecaster(n_features=3, context_len=16, horizon=4, **kw).eval()
    names = {n for n, _ in model.named_parameters()}
    x = torch.randn(5, 16, 3)
    plain = model(x)
    model.net.set_covariates(2, [4, 3])
    assert {n for n, _ in model.named_parameters()} - names == {
        "net.covariates.future_weight",
        "net.covariates.static.0.weight",
        "net.covariates.static.1.weight",
    }
    future, static = torch.randn(5, 4, 2), torch.tensor([[1, 2], [0, 0], [3, 1], [2, 2], [1, 0]])
    assert torch.equal(model(x, future, static), plain)
    with torch.no_grad():
        model.net.covariates.future_weight.fill_(0.5)
        model.net.covariates.static[0].weight.normal_()
    moved = model(x, future, static)
    expected = (
        plain + 0.5 * future.sum(-1, keepdim=True) + model.net.covariates.static[0].weight[static[:, 0]].view(5, 4, 1)
    )
    torch.testing.assert_close(moved, expected)
    with pytest.raises(ValueError, match=r"batch 'x_future' must be \(B, horizon=4, n_future=2\), got None"):
        model(x, None, static)


def test_a_prepared_panel_serves_the_same_covariate_batches(tmp_path: Path, planted: Path) -> None:
    kw = {"covariates": ["signal"], "future_covariates": ["event"], "calendar": "business", "label": "cs_rank"}
    memory = _dm(planted, **kw)
    cached = _dm(planted, cache_dir=str(tmp_path / "cache"), **kw)
    again = _dm(planted, cache_dir=str(tmp_path / "cache"), **kw)  # mapped from the folder
    for dm in (cached, again):
        for a, b in zip(memory.test_dataloader(), dm.test_dataloader(), strict=True):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert cached.data_scale == memory.data_scale
