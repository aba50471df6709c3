"""MultivariateDataModule: the long-term forecasting protocol's borders, modes and scaler, the data
scale, predict, and the errors of a malformed CSV."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.preprocessing import StandardScaler

from lightning_tf.kline import KLineDataModule, MultivariateDataModule
from lightning_tf.kline.settings import Features
from lightning_tf.kline.windows import ett_borders

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ETTH1 = SHARED / "ett" / "ETTh1.csv"


def _csv(tmp_path: Path, n: int, cols: int = 3) -> Path:
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(n, cols)).cumsum(0), columns=[f"c{i}" for i in range(cols - 1)] + ["OT"])
    df.insert(0, "date", pd.date_range("2020-01-01", periods=n, freq="h"))
    df.to_csv(tmp_path / "custom.csv", index=False)
    return tmp_path / "custom.csv"


def test_multivariate_fraction_borders_match_dataset_custom(tmp_path: Path) -> None:
    path = _csv(tmp_path, 1000)
    dm = MultivariateDataModule(str(path), context_len=24, horizon=12, features="MS", target="c0", batch_size=50)
    assert (dm.n_features, dm.n_targets, dm.target_channels) == (3, 1, [2])
    assert dm.feature_names == ["c1", "OT", "c0"]  # target moved last, as Dataset_Custom does
    dm.setup("fit")
    # Dataset_Custom: n_train = int(0.7 n), n_test = int(0.2 n), border1s = [0, n_train - L, n - n_test - L]
    n_train, n_test, L, F = 700, 200, 24, 12
    border1s, border2s = [0, n_train - L, 1000 - n_test - L], [n_train, 1000 - n_test, 1000]
    for split, b1, b2 in zip(("train", "val", "test"), border1s, border2s, strict=True):
        assert len(dm.datasets[split]) == (b2 - b1) - L - F + 1
    first = next(iter(dm.test_dataloader()))
    values = pd.read_csv(path)[["c1", "OT", "c0"]].to_numpy()
    scaled = StandardScaler().fit(values[:n_train]).transform(values)
    np.testing.assert_allclose(first["x"][0].numpy(), scaled[800 - L : 800], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first["y"][0, :, 0].numpy(), scaled[800 : 800 + F, 2], rtol=1e-5, atol=1e-5)
    assert sum(len(b["y"]) for b in dm.test_dataloader()) == 200 - F + 1


def test_multivariate_s_mode_and_errors(tmp_path: Path) -> None:
    path = _csv(tmp_path, 200)
    dm = MultivariateDataModule(str(path), context_len=10, horizon=5, features="S")
    assert (dm.n_features, dm.n_targets, dm.target_channels, dm.feature_names) == (1, 1, [0], ["OT"])
    with pytest.raises(
        ValueError, match=r"custom.csv: target 'load' not found; columns are \['date', 'c0', 'c1', 'OT'\]"
    ):
        MultivariateDataModule(str(path), target="load")
    with pytest.raises(ValueError, match=r"custom.csv: 200 rows, but borders='ett_hour' needs 14400"):
        MultivariateDataModule(str(path), borders="ett_hour").setup("fit")
    dm.setup("predict")
    batch = next(iter(dm.predict_dataloader()))
    assert "y" not in batch and batch["x"].shape == (1, 10, 1)
    assert batch["time"][0] == pd.Timestamp("2020-01-01").value + 199 * 3600 * 10**9
    assert dm.future_timestamps(2).tolist() == [pd.Timestamp("2020-01-09 08:00"), pd.Timestamp("2020-01-09 09:00")]
    df = pd.read_csv(path)
    df["c1"] = df["c1"].astype(object)
    df.loc[5, "c1"] = "n/a"
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match=r"bad.csv: line 7, column 'c1': 'n/a' is not a finite number"):
        MultivariateDataModule(str(tmp_path / "bad.csv"), context_len=10, horizon=5).setup("fit")


def test_ett_borders_by_file_name(tmp_path: Path) -> None:
    assert ett_borders("ett_hour") == (8640, 11520, 14400)
    assert ett_borders("ett_minute") == (4 * 8640, 4 * 11520, 4 * 14400)
    path = _csv(tmp_path, 100)
    for name, needs in (("ETTm2.csv", 57600), ("ETTh2.csv", 14400)):
        path.rename(tmp_path / name)
        path = tmp_path / name
        with pytest.raises(ValueError, match=rf"{name}: 100 rows, but borders='ett_\w+' needs {needs}"):
            MultivariateDataModule(str(path), context_len=8, horizon=4).setup("fit")
    dm = MultivariateDataModule(str(path), context_len=8, horizon=4, borders="fraction")
    dm.setup("fit")
    assert dm.borders == {"train_end": 70, "val_end": 80, "test_end": 100}


@pytest.mark.skipif(not ETTH1.exists(), reason="shared ETTh1.csv not present")
@pytest.mark.parametrize(("L", "F"), [(336, 96), (512, 720)])
def test_etth1_window_counts_match_the_published_loader(L: int, F: int) -> None:
    dm = MultivariateDataModule(str(ETTH1), context_len=L, horizon=F)
    dm.setup("fit")
    assert dm.borders == {"train_end": 8640, "val_end": 11520, "test_end": 14400}
    # Dataset_ETT_hour: __len__ = border2 - border1 - seq_len - pred_len + 1
    border1s = [0, 12 * 30 * 24 - L, 12 * 30 * 24 + 4 * 30 * 24 - L]
    border2s = [12 * 30 * 24, 12 * 30 * 24 + 4 * 30 * 24, 12 * 30 * 24 + 8 * 30 * 24]
    for split, b1, b2 in zip(("train", "val", "test"), border1s, border2s, strict=True):
        assert len(dm.datasets[split]) == b2 - b1 - L - F + 1
    assert len(dm.datasets["test"]) == 2880 - F + 1  # every test window scored (2785 at F=96)
    values = pd.read_csv(ETTH1).iloc[:, 1:].to_numpy()
    np.testing.assert_allclose(dm.feature_mean[0].numpy(), values[:8640].mean(0))
    np.testing.assert_allclose(dm.feature_std[0].numpy(), values[:8640].std(0))
    last = dm.datasets["test"][len(dm.datasets["test"]) - 1]
    expected = (values[14400 - F : 14400] - values[:8640].mean(0)) / values[:8640].std(0)
    np.testing.assert_allclose(last["y"].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_target_kind_says_returns_or_levels(tmp_path: Path) -> None:
    assert KLineDataModule().target_kind == "return"
    assert KLineDataModule(features=Features(target="close")).target_kind == "level"
    path = _csv(tmp_path, 50)
    assert MultivariateDataModule(str(path), context_len=8, horizon=2).target_kind == "level"
    assert MultivariateDataModule(str(path), context_len=8, horizon=2, target_kind="return").target_kind == "return"
    with pytest.raises(ValueError, match=r"target_kind must be 'return' or 'level' \(or None\), got 'price'"):
        MultivariateDataModule(str(path), target_kind="price")  # type: ignore[arg-type]
    pd.read_csv(path).rename(columns={"OT": "log_return"}).to_csv(tmp_path / "r.csv", index=False)
    returns = MultivariateDataModule(
        str(tmp_path / "r.csv"), context_len=8, horizon=2, features="S", target="log_return"
    )
    assert returns.target_kind == "return"  # as the model read a target named log_return before target_kind


def test_multivariate_rows_must_be_in_time_order(tmp_path: Path) -> None:
    """A newest-first CSV gives the same windows as the file in time order; shuffled rows raise."""
    path = _csv(tmp_path, 200)
    df = pd.read_csv(path)
    df.iloc[::-1].to_csv(tmp_path / "newest_first.csv", index=False)
    kw = {"context_len": 16, "horizon": 4, "borders": "fraction"}
    a, b = MultivariateDataModule(str(path), **kw), MultivariateDataModule(str(tmp_path / "newest_first.csv"), **kw)
    a.setup("fit"), b.setup("fit")
    torch.testing.assert_close(b.feature_mean, a.feature_mean)
    xa, xb = (next(iter(dm.test_dataloader())) for dm in (a, b))
    torch.testing.assert_close(xb["x"], xa["x"])
    torch.testing.assert_close(xb["y"], xa["y"])
    assert b.future_timestamps(1)[0] == pd.Timestamp(df["date"].iloc[-1]) + pd.Timedelta("1h")
    df.iloc[[0, 2, 1, *range(3, 200)]].to_csv(tmp_path / "shuffled.csv", index=False)
    with pytest.raises(
        ValueError, match=r"shuffled.csv: line 4, column 'date': 2020-01-01 01:00:00 does not come after"
    ):
        MultivariateDataModule(str(tmp_path / "shuffled.csv"), **kw).setup("fit")


def test_multivariate_too_short_for_the_window_is_refused(tmp_path: Path) -> None:
    """Too few rows for one window would otherwise index rows before the start (wrapping around)."""
    with pytest.raises(
        ValueError,
        match=r"custom.csv: the training split has 70 rows, too few: a training window needs "
        r"context_len \+ horizon = 336 \+ 96 = 432 rows",
    ):
        MultivariateDataModule(str(_csv(tmp_path, 100)), context_len=336, horizon=96, borders="fraction").setup("fit")
    with pytest.raises(
        ValueError,
        match=r"custom.csv: the validation split has 10 rows, too few: a validation "
        r"window needs horizon \(12\) rows in the split",
    ):
        MultivariateDataModule(str(_csv(tmp_path, 100)), context_len=8, horizon=12, borders="fraction").setup("fit")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match=r"empty.csv: the file is empty"):
        MultivariateDataModule(str(tmp_path / "empty.csv"))


def test_data_scale_of_a_csv(tmp_path: Path) -> None:
    dm = MultivariateDataModule(
        str(_csv(tmp_path, 200)), context_len=16, horizon=4, features="MS", target="c0", borders="fraction"
    )
    dm.setup("fit")
    scale = dm.data_scale
    assert scale.feature_names == ("c1", "OT", "c0") and scale.target_names == ("c0",)
    assert scale.ticker_names == ("custom",) and scale.target_kind == "level" and not scale.has_prices
    values = pd.read_csv(tmp_path / "custom.csv")[["c1", "OT", "c0"]].to_numpy()[:140]
    np.testing.assert_allclose(np.array(scale.feature_mean[0]), values.mean(0))
    np.testing.assert_allclose(np.array(scale.target_std[0]), values[:, 2:].std(0))
    batch = next(iter(dm.test_dataloader()))
    torch.testing.assert_close(dm.inverse_targets(batch["y"]), scale.inverse_targets(batch["y"], batch["ticker"]))
