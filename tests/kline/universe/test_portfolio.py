"""Portfolio evaluation of a predictions frame: IC, quantile returns, TopkDropout, costs, probabilistic
scores; the numbers checked by hand and against alphalens, empyrical, scoringrules and properscoring."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from lightning_tf.kline.universe.portfolio import (
    PortfolioEvaluation,
    check_predictions,
    evaluate_predictions,
    ic_summary,
    information_coefficients,
    max_drawdown,
    performance,
    portfolio_returns,
    probabilistic_scores,
    quantile_columns,
    quantile_returns,
    topk_dropout_holdings,
    topk_dropout_weights,
)


def _frame(n_dates=120, n_tickers=30, signal=0.5, seed=0, steps=1):
    """A predictions frame whose prediction is ``signal * realised + noise`` (signal 0: pure noise)."""
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range("2021-01-04", periods=n_dates)
    tickers = [f"T{i:03d}" for i in range(n_tickers)]
    grid = pd.MultiIndex.from_product([dates, tickers, range(1, steps + 1)], names=["date", "ticker", "step"])
    frame = grid.to_frame(index=False)
    frame["realised"] = rng.normal(0.0, 0.02, len(frame))
    frame["prediction"] = signal * frame["realised"] + rng.normal(0.0, 0.02, len(frame))
    return frame


# ------------------------------------------------------------------------------------------- contract


def test_bad_frames_raise_one_line_naming_the_column():
    frame = _frame(5, 6)
    with pytest.raises(ValueError, match="no column 'realised'"):
        information_coefficients(frame.drop(columns="realised"))
    bad = frame.copy()
    bad.loc[3, "prediction"] = np.nan
    with pytest.raises(ValueError, match="column 'prediction' has 1 NaN") as info:
        evaluate_predictions(bad, top_k=2, n_drop=1)
    assert "\n" not in str(info.value)
    bad = frame.copy()
    bad.loc[0, "realised"] = np.inf
    with pytest.raises(ValueError, match="column 'realised'"):
        portfolio_returns(bad, top_k=2, n_drop=1)
    with pytest.raises(ValueError, match="more than once"):
        check_predictions(pd.concat([frame, frame.iloc[:1]]))


def test_a_date_with_one_ticker_is_refused():
    frame = _frame(5, 6)
    lonely = frame[~((frame["date"] == frame["date"].iloc[-1]) & (frame["ticker"] != "T000"))]
    with pytest.raises(ValueError, match=r"date .* has 1 ticker\(s\); a cross-section needs at least 2"):
        information_coefficients(lonely)


def test_k_larger_than_the_universe_and_negative_costs_are_refused():
    frame = _frame(5, 6)
    with pytest.raises(ValueError, match="top_k=4 is larger than the universe"):
        portfolio_returns(frame, top_k=4, n_drop=1)  # long-short needs 8 of 6
    with pytest.raises(ValueError, match="top_k=7 is larger than the universe"):
        topk_dropout_weights(frame.pivot(index="date", columns="ticker", values="prediction"), 7, 1)
    with pytest.raises(ValueError, match="cost_bps must be a number >= 0"):
        portfolio_returns(frame, top_k=2, n_drop=1, cost_bps=-1.0)
    with pytest.raises(ValueError, match="n_drop must be between 0 and top_k"):
        portfolio_returns(frame, top_k=2, n_drop=3)


# --------------------------------------------------------------------------------------------------- IC


def test_ic_of_a_planted_signal_is_high_and_of_noise_is_near_zero():
    n_dates, n_tickers = 120, 30
    planted = ic_summary(information_coefficients(_frame(n_dates, n_tickers, signal=1.0)))
    # corr(r, r + e) with equal variances: 1 / sqrt(2)
    assert planted["ic_mean"] == pytest.approx(1 / math.sqrt(2), abs=0.03)
    assert planted["rank_ic_mean"] > 0.6
    assert planted["ic_t"] > 20
    noise = ic_summary(information_coefficients(_frame(n_dates, n_tickers, signal=0.0, seed=1)))
    # each date's IC has std ~ 1/sqrt(n_tickers - 1); the mean of n_dates of them ~ that / sqrt(n_dates)
    tolerance = 4.0 / math.sqrt((n_tickers - 1) * n_dates)
    assert abs(noise["ic_mean"]) < tolerance
    assert abs(noise["rank_ic_mean"]) < tolerance
    assert abs(noise["ic_t"]) < 4.0


def test_ic_per_date_equals_scipy_and_the_summary_is_its_arithmetic():
    from scipy import stats

    frame = _frame(8, 12, signal=0.3, seed=3)
    ic = information_coefficients(frame)
    for date, rows in frame.groupby("date"):
        assert ic.loc[date, "ic"] == pytest.approx(stats.pearsonr(rows["prediction"], rows["realised"])[0], abs=1e-12)
        assert ic.loc[date, "rank_ic"] == pytest.approx(
            stats.spearmanr(rows["prediction"], rows["realised"])[0], abs=1e-12
        )
        assert ic.loc[date, "n"] == 12
    summary = ic_summary(ic)
    mean, std = ic["ic"].mean(), ic["ic"].std(ddof=1)
    assert summary["ic_mean"] == pytest.approx(mean)
    assert summary["icir"] == pytest.approx(mean / std)
    assert summary["ic_t"] == pytest.approx(mean / std * math.sqrt(8))


def test_ic_uses_only_the_requested_step():
    frame = _frame(10, 8, signal=1.0, steps=2)
    noise = frame["step"] == 2
    frame.loc[noise, "prediction"] = np.random.default_rng(9).normal(size=int(noise.sum()))
    assert information_coefficients(frame, step=1)["ic"].mean() > 0.5
    assert abs(information_coefficients(frame, step=2)["ic"].mean()) < 0.4


def _alphalens_factor_data(frame):
    data = frame[frame["step"] == 1].set_index(["date", "ticker"]).sort_index()
    data.index = data.index.set_names(["date", "asset"])
    return pd.DataFrame({"factor": data["prediction"], "1D": np.expm1(data["realised"])})


def test_rank_ic_and_quantile_returns_equal_alphalens():
    alphalens = pytest.importorskip("alphalens")
    frame = _frame(15, 20, signal=0.5, seed=4)
    factor_data = _alphalens_factor_data(frame)
    theirs = alphalens.performance.factor_information_coefficient(factor_data)["1D"]
    ours = information_coefficients(frame)["rank_ic"]
    np.testing.assert_allclose(ours.to_numpy(), theirs.to_numpy(), atol=1e-12)

    factor_data["factor_quantile"] = alphalens.utils.quantize_factor(factor_data, quantiles=5)
    mean_by_date, _ = alphalens.performance.mean_return_by_quantile(factor_data, by_date=True, demeaned=False)
    theirs = mean_by_date["1D"].unstack("factor_quantile")
    ours = quantile_returns(frame, n_quantiles=5)
    np.testing.assert_allclose(ours.to_numpy(), theirs.to_numpy(), atol=1e-14)
    mean, _ = alphalens.performance.mean_return_by_quantile(factor_data, demeaned=False)
    np.testing.assert_allclose(ours.mean().to_numpy(), mean["1D"].to_numpy(), atol=1e-14)


def test_quantile_returns_are_ordered_for_a_planted_signal():
    means = quantile_returns(_frame(60, 40, signal=1.0), n_quantiles=5).mean()
    assert list(means.index) == [1, 2, 3, 4, 5]
    assert np.all(np.diff(means.to_numpy()) > 0)
    assert quantile_returns(_frame(3, 6), n_quantiles=10).isna().all().all()  # 6 tickers: no deciles


def test_a_date_with_fewer_tickers_than_quantiles_is_left_out_of_the_means():
    """A halt in a small universe: the date's quantile row is NaN and the means are those of the other dates,
    as without it; the IC and the portfolios still use it."""
    frame = _frame(20, 12, signal=1.0)
    day = frame["date"].unique()[5]
    halted = frame[~((frame["date"] == day) & frame["ticker"].isin(frame["ticker"].unique()[:3]))]  # 9 tickers
    table = quantile_returns(halted, n_quantiles=10)
    assert table.loc[day].isna().all() and table.drop(index=day).notna().all().all()
    without = quantile_returns(frame[frame["date"] != day], n_quantiles=10)
    np.testing.assert_allclose(table.mean().to_numpy(), without.mean().to_numpy(), atol=1e-15)
    result = evaluate_predictions(halted, top_k=3, n_drop=1, n_quantiles=10)
    assert result.ic.loc[day, "n"] == 9 and np.isfinite(result.summary["quantile_spread"])


def test_quantile_labels_with_ties_still_fill_every_quantile():
    frame = _frame(3, 10)
    frame["prediction"] = 0.0  # every prediction tied: ordered by ticker
    table = quantile_returns(frame, n_quantiles=5)
    assert table.notna().all().all()
    first = frame[frame["date"] == frame["date"].iloc[0]]
    assert table.iloc[0, 0] == pytest.approx(np.expm1(first["realised"].iloc[:2]).mean())


# ------------------------------------------------------------------------------------------- TopkDropout

# 6 tickers, 5 dates, hold 2, replace at most 1 a date
_SCORES = {
    "A": [6, 4, 1, 1, 4],
    "B": [5, 3, 2, 2, 3],
    "C": [4, 6, 3, 3, 2],
    "D": [3, 5, 6, 6, 6],
    "E": [2, 2, 5, 5, 5],
    "F": [1, 1, 4, 4, 1],
}


def _tiny_frame():
    dates = pd.bdate_range("2022-03-01", periods=5)
    scores = pd.DataFrame(_SCORES, index=dates, dtype=float)
    realised = pd.DataFrame(
        np.log1p(np.arange(30, dtype=float).reshape(5, 6) / 1000.0 - 0.01), index=dates, columns=scores.columns
    )
    frame = scores.stack().rename("prediction").to_frame().join(realised.stack().rename("realised"))
    frame = frame.rename_axis(["date", "ticker"]).reset_index()
    frame["step"] = 1
    return frame, scores, realised


def test_topk_dropout_holdings_by_hand():
    _, scores, _ = _tiny_frame()
    weights = topk_dropout_weights(scores, top_k=2, n_drop=1)
    held = [sorted(weights.columns[weights.iloc[i] > 0]) for i in range(5)]
    # day 1: the best two; day 2: C beats B; day 3: D beats A (E and F beat C too, but only one drop);
    # day 4: E beats C; day 5: the best candidate, A, is worse than both holdings: nothing trades
    assert held == [["A", "B"], ["A", "C"], ["C", "D"], ["D", "E"], ["D", "E"]]
    short = topk_dropout_weights(scores, top_k=2, n_drop=1, short=True)
    held_short = [sorted(short.columns[short.iloc[i] < 0]) for i in range(5)]
    assert held_short == [["E", "F"], ["E", "F"], ["A", "F"], ["A", "B"], ["B", "F"]]
    assert np.allclose(weights.sum(axis=1), 1.0) and np.allclose(short.sum(axis=1), -1.0)


def test_topk_dropout_turnover_and_returns_by_hand():
    frame, _, realised = _tiny_frame()
    returns = portfolio_returns(frame, top_k=2, n_drop=1, cost_bps=0.0)
    # entering from cash costs a full portfolio; each replacement moves 1/2 out and 1/2 in
    np.testing.assert_allclose(returns["turnover_long_only"], [1.0, 1.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(returns["turnover_long_short"], [2.0, 1.0, 2.0, 2.0, 1.0])
    simple = np.expm1(realised)
    expected_long = [simple.iloc[i][list(h)].mean() for i, h in enumerate(["AB", "AC", "CD", "DE", "DE"])]
    np.testing.assert_allclose(returns["long_only_gross"], expected_long)
    expected_short = [simple.iloc[i][list(h)].mean() for i, h in enumerate(["EF", "EF", "AF", "AB", "BF"])]
    np.testing.assert_allclose(returns["long_short_gross"], np.array(expected_long) - np.array(expected_short))
    np.testing.assert_allclose(returns["benchmark"], simple.mean(axis=1))
    np.testing.assert_allclose(returns["long_only_net"], returns["long_only_gross"])


def test_costs_reduce_net_return_by_exactly_cost_times_turnover():
    frame = _frame(40, 20, signal=0.5)
    for cost_bps in (0.0, 10.0, 25.0):
        returns = portfolio_returns(frame, top_k=4, n_drop=1, cost_bps=cost_bps)
        for p in ("long_only", "long_short"):
            np.testing.assert_allclose(
                returns[f"{p}_gross"] - returns[f"{p}_net"], cost_bps / 1e4 * returns[f"turnover_{p}"], atol=1e-15
            )
        assert returns["turnover_long_only"].iloc[0] == 1.0
        assert (returns["turnover_long_only"].iloc[1:] <= 2 * 1 / 4 + 1e-12).all()  # at most n_drop names a date


def test_a_holding_that_leaves_the_universe_is_sold_and_replaced():
    scores = pd.Series({"A": 3.0, "B": 2.0, "C": 1.0, "D": 0.5})
    assert topk_dropout_holdings(scores, ["A", "Z"], top_k=2, n_drop=1) == ["A", "B"]
    assert topk_dropout_holdings(scores, [], top_k=3, n_drop=1) == ["A", "B", "C"]
    assert topk_dropout_holdings(scores, ["C", "D"], top_k=2, n_drop=0) == ["C", "D"]
    assert topk_dropout_holdings(scores, ["C", "D"], top_k=2, n_drop=2) == ["A", "B"]


# ------------------------------------------------------------------------------------------- performance


def test_performance_equals_empyrical():
    empyrical = pytest.importorskip("empyrical")
    rng = np.random.default_rng(5)
    r = rng.normal(0.0005, 0.01, 300)
    b = rng.normal(0.0002, 0.008, 300)
    ours = performance(r, b, periods_per_year=252)
    assert ours["annual_return"] == pytest.approx(empyrical.annual_return(r, annualization=252), rel=1e-12)
    assert ours["sharpe"] == pytest.approx(empyrical.sharpe_ratio(r, annualization=252), rel=1e-12)
    assert ours["max_drawdown"] == pytest.approx(-empyrical.max_drawdown(r), rel=1e-12)
    assert ours["information_ratio"] == pytest.approx(empyrical.excess_sharpe(r, b) * math.sqrt(252), rel=1e-12)
    assert ours["excess_return"] == pytest.approx(empyrical.annual_return(r - b, annualization=252), rel=1e-12)


def test_max_drawdown_by_hand():
    # equity 1 -> 1.1 -> 0.88 -> 0.968: the fall from 1.1 to 0.88 is 20%
    assert max_drawdown(np.array([0.1, -0.2, 0.1])) == pytest.approx(0.2)
    assert max_drawdown(np.array([-0.5])) == pytest.approx(0.5)  # the start counts as a peak
    assert max_drawdown(np.array([0.01, 0.02])) == 0.0


def test_evaluate_predictions_summary_and_table():
    frame = _frame(80, 30, signal=1.0)
    result = evaluate_predictions(frame, top_k=5, n_drop=1, cost_bps=10.0, n_quantiles=5)
    assert isinstance(result, PortfolioEvaluation)
    s = result.summary
    for key in ("ic_mean", "ic_std", "icir", "ic_t", "rank_ic_mean", "rank_ic_std", "rank_icir", "rank_ic_t"):
        assert math.isfinite(s[key]), key
    for p in ("long_only", "long_short"):
        for key in ("annual_return", "excess_return", "information_ratio", "sharpe", "max_drawdown", "turnover"):
            assert math.isfinite(s[f"{p}_{key}"]), (p, key)
        assert s[f"{p}_gross_annual_return"] > s[f"{p}_annual_return"]  # costs cost
        assert s[f"{p}_turnover"] == pytest.approx(result.returns[f"turnover_{p}"].mean())
    # a planted signal: the portfolios beat the equal-weight universe
    assert s["long_only_excess_return"] > 0 and s["long_only_information_ratio"] > 2
    assert s["long_short_sharpe"] > s["benchmark_sharpe"]
    assert s["quantile_spread"] > 0
    assert s["long_only_sharpe"] == pytest.approx(performance(result.returns["long_only_net"])["sharpe"])
    assert s["n_dates"] == 80 and list(result.quantiles.columns) == [1, 2, 3, 4, 5]
    table = result.to_markdown()
    assert "| long_only |" in table and "| long_short |" in table and "| benchmark |" in table
    assert f"{s['ic_mean']:+.4f}" in table
    assert f"5: {result.quantile_means[5] * 1e4:+.1f}" in table
    assert s["quantile_spread"] == pytest.approx(result.quantile_means[5] - result.quantile_means[1])


def test_evaluate_predictions_numbers_equal_empyrical_on_the_same_frame():
    empyrical = pytest.importorskip("empyrical")
    frame = _frame(60, 20, signal=0.3, seed=6)
    result = evaluate_predictions(frame, top_k=3, n_drop=1, periods_per_year=252, n_quantiles=4)
    net, bench = result.returns["long_short_net"].to_numpy(), result.returns["benchmark"].to_numpy()
    s = result.summary
    assert s["long_short_annual_return"] == pytest.approx(empyrical.annual_return(net, annualization=252), rel=1e-12)
    assert s["long_short_sharpe"] == pytest.approx(empyrical.sharpe_ratio(net, annualization=252), rel=1e-12)
    assert s["long_short_max_drawdown"] == pytest.approx(-empyrical.max_drawdown(net), rel=1e-12)
    # the dollar-neutral book against cash: its information ratio is its Sharpe ratio; long-only against the universe
    assert s["long_short_information_ratio"] == pytest.approx(empyrical.sharpe_ratio(net, annualization=252), rel=1e-12)
    assert s["long_short_excess_return"] == s["long_short_annual_return"]
    long_net = result.returns["long_only_net"].to_numpy()
    assert s["long_only_information_ratio"] == pytest.approx(
        empyrical.excess_sharpe(long_net, bench) * math.sqrt(252), rel=1e-12
    )
    assert s["long_only_excess_return"] == pytest.approx(
        empyrical.annual_return(long_net - bench, annualization=252), rel=1e-12
    )


def test_a_market_move_common_to_every_ticker_leaves_the_long_short_book_unchanged():
    """The same simple return added to every ticker on each date (the market's move) changes the benchmark and
    the long-only book's returns, not the weights, and not the dollar-neutral book's returns or its ratio."""
    frame = _frame(90, 24, signal=0.3, seed=11)
    market = pd.Series(np.random.default_rng(12).normal(0.004, 0.02, 90), index=sorted(frame["date"].unique()))
    moved = frame.copy()
    moved["realised"] = np.log1p(np.expm1(frame["realised"]) + frame["date"].map(market).to_numpy())
    base = evaluate_predictions(frame, top_k=4, n_drop=1, n_quantiles=4).summary
    shifted = evaluate_predictions(moved, top_k=4, n_drop=1, n_quantiles=4).summary
    for key in ("annual_return", "excess_return", "information_ratio", "sharpe", "max_drawdown", "turnover"):
        assert shifted[f"long_short_{key}"] == pytest.approx(base[f"long_short_{key}"], rel=1e-9, abs=1e-12), key
    assert shifted["benchmark_annual_return"] != pytest.approx(base["benchmark_annual_return"], rel=1e-3)
    assert shifted["long_only_annual_return"] != pytest.approx(base["long_only_annual_return"], rel=1e-3)


@pytest.mark.integration
def test_portfolio_module_imports_without_torch():
    """The universe's evaluation side needs no torch, by its names and by the old ones."""
    modules = [
        *(f"lightning_tf.kline.universe.{m}" for m in ("portfolio", "baselines", "predictions", "report", "folds")),
        "lightning_tf.kline.evaluation.portfolio",
    ]
    code = f"import sys; import {', '.join(modules)}; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------- probabilistic


def _quantile_frame(levels, mu, sigma, y):
    from scipy import stats

    frame = pd.DataFrame(
        {
            "date": pd.Timestamp("2023-01-02"),
            "ticker": [f"T{i}" for i in range(len(y))],
            "step": 1,
            "prediction": mu,
            "realised": y,
        }
    )
    quantiles = {f"q{level:g}": stats.norm.ppf(level, loc=mu, scale=sigma) for level in levels}
    return pd.concat([frame, pd.DataFrame(quantiles)], axis=1)


def test_crps_of_many_gaussian_quantiles_approaches_properscoring():
    properscoring = pytest.importorskip("properscoring")
    rng = np.random.default_rng(7)
    mu, sigma = rng.normal(0, 0.01, 200), rng.uniform(0.005, 0.03, 200)
    y = mu + sigma * rng.normal(size=200)
    levels = np.round(np.arange(0.01, 1.0, 0.01), 2)
    scores = probabilistic_scores(_quantile_frame(levels, mu, sigma, y))
    exact = float(np.mean(properscoring.crps_gaussian(y, mu=mu, sig=sigma)))
    assert scores["crps"] == pytest.approx(exact, rel=0.02)
    # a sharper and calibrated forecast scores better than a wider one
    wide = probabilistic_scores(_quantile_frame(levels, mu, 3 * sigma, y))
    assert wide["crps"] > scores["crps"]


def test_probabilistic_scores_equal_scoringrules_and_hand_coverage():
    scoringrules = pytest.importorskip("scoringrules")
    rng = np.random.default_rng(8)
    mu, sigma = rng.normal(0, 0.01, 500), np.full(500, 0.02)
    y = mu + sigma * rng.normal(size=500)
    levels = [0.1, 0.5, 0.9]
    frame = _quantile_frame(levels, mu, sigma, y)
    scores = probabilistic_scores(frame)
    q = frame[["q0.1", "q0.5", "q0.9"]].to_numpy()
    theirs = scoringrules.crps_quantile(y, q, np.array(levels), backend="numpy")
    assert scores["crps"] == pytest.approx(float(np.mean(theirs)), rel=1e-12)
    inside = (y >= q[:, 0]) & (y <= q[:, 2])
    assert scores["coverage"] == pytest.approx(inside.mean())
    assert scores["coverage"] == pytest.approx(0.8, abs=0.05)
    assert scores["nominal_coverage"] == pytest.approx(0.8)
    assert scores["interval_width"] == pytest.approx(np.mean(q[:, 2] - q[:, 0]))
    pinball_median = np.mean(np.maximum(0.5 * (y - q[:, 1]), -0.5 * (y - q[:, 1])))
    assert scores["pinball_q0.5"] == pytest.approx(pinball_median)
    assert scores["wql"] == pytest.approx(
        np.mean([2 * scores[f"pinball_q{a:g}"] * len(y) / np.abs(y).sum() for a in levels])
    )


def test_probabilistic_scores_need_quantile_columns():
    frame = _frame(2, 3)
    with pytest.raises(ValueError, match="quantile column"):
        probabilistic_scores(frame)
    frame["q0.1"], frame["q0.9"] = -1.0, np.nan
    with pytest.raises(ValueError, match="column 'q0.9' has"):
        probabilistic_scores(frame)
    assert quantile_columns(frame) == {0.1: "q0.1", 0.9: "q0.9"}
