"""DataScale: plain values in and out (checkpoint and JSON), original units and prices from the
training statistics, errors naming the value."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.preprocessing import StandardScaler

from lightning_tf.kline import DataScale, rebuild_prices
from lightning_tf.kline.scale import standard_scaler_fit


def two_tickers(**kw) -> DataScale:
    args = dict(
        feature_names=["log_return", "body"],
        target_names=["log_return"],
        target_kind=None,
        ticker_names=["A", "B"],
        feature_mean=[[0.1, 0.2], [0.3, 0.4]],
        feature_std=[[1.0, 2.0], [3.0, 4.0]],
        target_mean=[[0.5], [-1.0]],
        target_std=[[2.0], [10.0]],
        has_prices=True,
    )
    return DataScale(**{**args, **kw})


def test_round_trip_through_a_weights_only_checkpoint_and_json(tmp_path: Path) -> None:
    scale = two_tickers()
    torch.save({"data_scale": scale.to_dict()}, tmp_path / "c.pt")
    loaded = torch.load(tmp_path / "c.pt", weights_only=True)["data_scale"]
    assert DataScale.from_dict(loaded) == scale
    assert DataScale.from_dict(json.loads(json.dumps(scale.to_dict()))) == scale
    assert scale.target_kind == "return"  # inferred: every target is named log_return
    assert two_tickers(target_names=["close"]).target_kind == "level"
    # tensors and nested lists describe the same statistics
    assert two_tickers(target_std=torch.tensor([[2.0], [10.0]], dtype=torch.float64)) == scale


def test_original_units_are_per_ticker() -> None:
    scale = two_tickers()
    y = torch.ones(2, 3, 1)  # (B, F, K)
    orig = scale.inverse_targets(y, torch.tensor([0, 1]))
    assert orig[0, :, 0].tolist() == [2.5] * 3 and orig[1, :, 0].tolist() == [9.0] * 3
    torch.testing.assert_close(scale.scale_targets(orig, torch.tensor([0, 1])), y)
    assert scale.inverse_targets(y)[:, 0, 0].tolist() == [2.5, 2.5]  # no ticker: ticker 0
    assert scale.inverse_targets(y.double()).dtype == torch.float64


def test_prices_from_returns_or_levels() -> None:
    returns = torch.log(torch.tensor([[1.1, 1.0, 0.5]], dtype=torch.float64))  # (B=1, F=3)
    anchor = torch.tensor([100.0], dtype=torch.float64)
    expected = torch.tensor([[110.0, 110.0, 55.0]], dtype=torch.float64)
    torch.testing.assert_close(rebuild_prices(returns, anchor), expected)
    torch.testing.assert_close(two_tickers().to_prices(returns[..., None], anchor), rebuild_prices(returns, anchor))
    levels = torch.tensor([[[5.0], [6.0]]])  # (B=1, F=2, K=1)
    assert two_tickers(target_names=["close"]).to_prices(levels, anchor).tolist() == [[5.0, 6.0]]


def test_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"target_kind must be 'return' or 'level', got 'price'"):
        two_tickers(target_kind="price")
    with pytest.raises(ValueError, match=r"target_std must be \(n_tickers=2, 1\) values, got shape \(1, 1\)"):
        two_tickers(target_std=[[1.0]])
    with pytest.raises(ValueError, match=r"feature_mean must be \(n_tickers=2, 2\) values"):
        two_tickers(feature_mean=[[0.0], [0.0]])
    with pytest.raises(ValueError, match=r"data scale lacks \['target_std'\]"):
        DataScale.from_dict({k: v for k, v in two_tickers().to_dict().items() if k != "target_std"})


@pytest.mark.parametrize("seed", range(4))
def test_standard_scaler_fit_is_scikit_learns_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, c = int(rng.integers(2, 3000)), int(rng.integers(1, 7))
    values = rng.normal(rng.normal(0, 100), rng.uniform(1e-6, 10), (n, c))
    values[:, 0] = 3.3  # constant: scale 1
    for layout in (values, np.asfortranarray(values), values[:, -1:]):
        reference = StandardScaler().fit(layout)
        mean, scale = standard_scaler_fit(layout)
        assert np.array_equal(mean, reference.mean_) and np.array_equal(scale, reference.scale_)
    assert standard_scaler_fit(values)[1][0] == 1.0
