"""Portfolio evaluation of forecasts over a universe of tickers: the numbers a quant desk reads.

The input is a **predictions frame** (:mod:`.predictions` declares its columns), one row per (origin date,
ticker, horizon step): ``date`` (the origin, the date of the last bar the forecast saw), ``ticker``, ``step``
(1..F), ``prediction`` (the forecast of that step's log return, or any score whose order across tickers is the
signal), ``realised`` (that step's realised log return, bar ``t+step`` over bar ``t+step-1``) and optionally
``q0.1``, ``q0.5``, ``q0.9``, ... (forecast quantiles of the target, :func:`probabilistic_scores`).

What is computed, on the rows of one step (step 1 by default: the next bar):

* :func:`information_coefficients`: per date, the Pearson correlation across tickers of prediction and
  realised return (IC) and the Spearman one (rank IC, alphalens' ``factor_information_coefficient``);
  :func:`ic_summary`: their mean, standard deviation, ICIR (mean / std) and t-statistic
  (mean / std * sqrt(number of dates)).
* :func:`quantile_returns`: the mean simple return of each prediction decile per date (alphalens'
  ``quantize_factor`` and ``mean_return_by_quantile(demeaned=False)``).
* :func:`topk_dropout_weights`: qlib's ``TopkDropoutStrategy``: hold ``top_k`` names; at each date
  take the ``n_drop + top_k - held`` best-ranked names not held, rank them with the holdings, sell the
  holdings among the ``n_drop`` worst of that combined list and buy as many of the new names, best
  first. A holding is sold only for a better candidate, and at most ``n_drop`` per date. A holding
  without a prediction on a date (the ticker left the universe) is sold first and its place refilled.
* :func:`portfolio_returns`: the long-only top-k portfolio and the long-short one (long the top k,
  short the bottom k chosen by the same rule on the reversed order), equal weights (``1/k`` a name,
  ``-1/k`` short), rebalanced at every date on the step-1 predictions of that date and held for the
  next bar: the weight chosen at origin ``t`` earns the simple return ``expm1(realised)`` of bar
  ``t+1``, so no weight ever uses its own return. Turnover is ``sum |w_t - w_{t-1}|`` over tickers
  (the first date enters from cash: turnover 1 long-only, 2 long-short; weights are the targets, the
  drift of prices between rebalances is not traded); costs are ``cost_bps`` basis points of turnover:
  ``net = gross - cost_bps / 1e4 * turnover``. The benchmark is the equal-weight universe of the date
  (the mean simple return of every ticker with a prediction), free of costs. The two legs follow their
  rules apart: a long holding kept by the dropout rule can fall into the bottom k and be shorted too,
  and then its weights cancel (its turnover is that of the net weight).
* :func:`performance`: empyrical's ``annual_return`` (geometric), ``sharpe_ratio`` (risk-free 0,
  ``ddof=1``), ``max_drawdown`` (given here as a positive share of the peak) and, over the benchmark,
  the annualised return of the active return ``r - b`` and the information ratio
  ``mean(r - b) / std(r - b) * sqrt(periods_per_year)`` (empyrical's ``excess_sharpe``, annualised).
* :func:`evaluate_predictions`: all of it, in a :class:`PortfolioEvaluation`. The long-only book is judged
  against the equal-weight universe. The long-short book is dollar-neutral (as much short as long): its
  return is already an active return, and its benchmark is cash, so its excess return is its own return and
  its information ratio its Sharpe ratio (as qlib's ``risk_analysis`` of a long-short return series).
  Measured against the universe instead, a long-short book would be charged the market's whole return and
  its ratio would mostly rank the market, the same for every forecaster on the same dates.
* :func:`probabilistic_scores`: CRPS from the quantile columns (``2 / |Q| * sum of pinball losses``,
  scoringrules' ``crps_quantile``), the weighted quantile loss, and the coverage and width of the
  outer interval.

Everything is plain NumPy, pandas and SciPy; the tests check the numbers against alphalens,
empyrical, scoringrules and properscoring (the ``quant`` extra).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .predictions import REQUIRED, quantile_level

__all__ = [
    "PORTFOLIOS",
    "PortfolioEvaluation",
    "check_predictions",
    "evaluate_predictions",
    "ic_summary",
    "information_coefficients",
    "max_drawdown",
    "performance",
    "portfolio_returns",
    "probabilistic_scores",
    "quantile_columns",
    "quantile_returns",
    "topk_dropout_holdings",
    "topk_dropout_weights",
]

PORTFOLIOS = ("long_only", "long_short")


# --------------------------------------------------------------------------------------------- the frame


def check_predictions(frame: pd.DataFrame, step: int | None = None, min_tickers: int = 2) -> pd.DataFrame:
    """The rows of ``step`` (all steps when None) of a valid predictions frame, sorted by date and ticker.

    Raises a one-line ``ValueError`` for a missing column, a NaN or infinite prediction or realised
    return, a repeated (date, ticker, step), a step with no rows, or a date with fewer than
    ``min_tickers`` tickers.
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"predictions frame: expected a pandas DataFrame, got {type(frame).__name__}")
    for column in REQUIRED:
        if column not in frame.columns:
            raise ValueError(f"predictions frame has no column {column!r} (needs {', '.join(REQUIRED)})")
    for column in ("prediction", "realised"):
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            row = frame.index[np.argmax(bad)]
            raise ValueError(
                f"predictions frame: column {column!r} has {int(bad.sum())} NaN or non-numeric value(s) "
                f"(first at row {row!r})"
            )
    if step is not None:
        frame = frame[frame["step"] == step]
        if frame.empty:
            raise ValueError(f"predictions frame has no rows with step == {step}")
    repeated = frame.duplicated(["date", "ticker", "step"])
    if repeated.any():
        first = frame[repeated].iloc[0]
        raise ValueError(
            f"predictions frame: (date, ticker, step) = ({first['date']}, {first['ticker']}, {first['step']}) "
            "appears more than once"
        )
    counts = frame.groupby("date", sort=True)["ticker"].nunique()
    thin = counts[counts < min_tickers]
    if len(thin):
        raise ValueError(
            f"predictions frame: date {thin.index[0]} has {int(thin.iloc[0])} ticker(s); "
            f"a cross-section needs at least {min_tickers}"
        )
    out = frame.sort_values(["date", "ticker", "step"], kind="stable").reset_index(drop=True)
    out["prediction"] = out["prediction"].astype(np.float64)
    out["realised"] = out["realised"].astype(np.float64)
    return out


def _wide(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """``column`` of one step's rows as a (dates, tickers) table, NaN where a ticker has no row."""
    return frame.pivot(index="date", columns="ticker", values=column).sort_index()


# ------------------------------------------------------------------------------------ information coefficient


def information_coefficients(frame: pd.DataFrame, step: int = 1) -> pd.DataFrame:
    """Per date: ``ic`` (Pearson across tickers), ``rank_ic`` (Spearman) and ``n`` (tickers).

    A date whose predictions (or realised returns) are all equal has no correlation: NaN there,
    left out of :func:`ic_summary`'s mean (which reports how many dates it used).
    """
    rows = check_predictions(frame, step=step)
    pred = _wide(rows, "prediction")
    real = _wide(rows, "realised")
    valid = pred.notna().to_numpy()
    n = valid.sum(axis=1)
    return pd.DataFrame(
        {
            "ic": _row_correlation(pred.to_numpy(), real.to_numpy(), valid),
            "rank_ic": _row_correlation(
                pred.rank(axis=1).to_numpy(), real.where(pred.notna()).rank(axis=1).to_numpy(), valid
            ),
            "n": n.astype(np.int64),
        },
        index=pred.index,
    )


def _row_correlation(a: np.ndarray, b: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row's valid entries of ``a`` and ``b`` (NaN for a constant row)."""
    a = np.where(valid, a, 0.0)
    b = np.where(valid, b, 0.0)
    n = valid.sum(axis=1)
    da = np.where(valid, a - a.sum(axis=1, keepdims=True) / n[:, None], 0.0)
    db = np.where(valid, b - b.sum(axis=1, keepdims=True) / n[:, None], 0.0)
    denominator = np.sqrt((da * da).sum(axis=1) * (db * db).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (da * db).sum(axis=1) / denominator
    return np.where(denominator > 0, np.clip(r, -1.0, 1.0), np.nan)


def ic_summary(ic: pd.DataFrame) -> dict[str, float]:
    """Mean, std (``ddof=1``), ICIR (mean / std) and t-statistic (mean / std * sqrt(dates)) of ``ic``
    and ``rank_ic`` (keys ``ic_mean``, ``ic_std``, ``icir``, ``ic_t``, ``rank_ic_mean``, ...), and
    ``ic_dates``: the dates with a defined IC."""
    out: dict[str, float] = {}
    for column, prefix, ir in (("ic", "ic", "icir"), ("rank_ic", "rank_ic", "rank_icir")):
        values = ic[column].to_numpy(dtype=np.float64)
        values = values[np.isfinite(values)]
        n = len(values)
        mean = float(values.mean()) if n else math.nan
        std = float(values.std(ddof=1)) if n > 1 else math.nan
        ratio = mean / std if n > 1 and std > 0 else math.nan
        out[f"{prefix}_mean"] = mean
        out[f"{prefix}_std"] = std
        out[ir] = ratio
        out[f"{prefix}_t"] = ratio * math.sqrt(n) if n > 1 else math.nan
    out["ic_dates"] = float(np.isfinite(ic["ic"].to_numpy(dtype=np.float64)).sum())
    return out


# ----------------------------------------------------------------------------------------- quantile returns


def _quantile_labels(values: np.ndarray, n_quantiles: int) -> np.ndarray:
    """1..n_quantiles by the order of ``values`` (one date's), equal-count bins: ``pandas.qcut`` as
    alphalens' ``quantize_factor`` calls it (edges at the linearly interpolated quantiles, bins closed on
    the right, the first one on both sides); repeated edges (ties) fall back to the order of appearance."""
    edges = np.quantile(values, np.linspace(0.0, 1.0, n_quantiles + 1))
    if len(np.unique(edges)) < len(edges):
        ranks = np.empty(len(values))
        ranks[np.argsort(values, kind="stable")] = np.arange(1, len(values) + 1)
        return _quantile_labels(ranks, n_quantiles)
    return np.maximum(np.searchsorted(edges, values, side="left"), 1)


def quantile_returns(frame: pd.DataFrame, n_quantiles: int = 10, step: int = 1) -> pd.DataFrame:
    """Mean simple return ``expm1(realised)`` of each prediction quantile, per date.

    Returns a (dates, quantiles) frame, columns ``1..n_quantiles`` (1: the lowest predictions); its
    ``.mean()`` is the average over dates (alphalens' ``mean_return_by_quantile``, not demeaned).
    A date with fewer than ``n_quantiles`` tickers (a halt in a small universe) has no quantiles: a row of
    NaN, left out of the mean.
    """
    if n_quantiles < 2:
        raise ValueError(f"n_quantiles must be at least 2, got {n_quantiles}")
    rows = check_predictions(frame, step=step)
    pred = _wide(rows, "prediction")
    simple = np.expm1(_wide(rows, "realised").to_numpy())
    table = np.full((len(pred), n_quantiles), np.nan)
    for i, row in enumerate(pred.to_numpy()):
        valid = np.isfinite(row)
        if valid.sum() < n_quantiles:
            continue
        labels = _quantile_labels(row[valid], n_quantiles)
        sums = np.bincount(labels, weights=simple[i, valid], minlength=n_quantiles + 1)[1:]
        counts = np.bincount(labels, minlength=n_quantiles + 1)[1:]
        with np.errstate(invalid="ignore"):
            table[i] = sums / counts  # a quantile without a ticker (heavy ties): NaN, left out of the mean
    out = pd.DataFrame(table, index=pred.index, columns=pd.Index(range(1, n_quantiles + 1), name="quantile"))
    return out


# ------------------------------------------------------------------------------------------ TopkDropout


def _topk_dropout_step(score: np.ndarray, held: np.ndarray, top_k: int, n_drop: int) -> np.ndarray:
    """One rebalance on arrays: ``score`` (tickers,), NaN where a ticker has no prediction; ``held`` the
    boolean holdings; returns the new boolean holdings. Ties keep the tickers' order."""
    valid = np.flatnonzero(np.isfinite(score))
    order = valid[np.argsort(-score[valid], kind="stable")]  # best first
    rank = np.empty(len(score), dtype=np.int64)
    rank[order] = np.arange(len(order))
    last = order[held[order]]  # holdings that still have a score, best first (the others are sold)
    candidates = order[~held[order]]
    today = candidates[: max(n_drop + top_k - len(last), 0)]
    combined = np.concatenate([last, today])
    combined = combined[np.argsort(rank[combined], kind="stable")]
    worst = combined[len(combined) - n_drop :] if n_drop > 0 else combined[:0]
    sold = np.isin(last, worst)
    buy = today[: int(sold.sum()) + top_k - len(last)]
    new = np.zeros(len(score), dtype=bool)
    new[last[~sold]] = True
    new[buy] = True
    return new


def topk_dropout_holdings(scores: pd.Series, held: list, top_k: int, n_drop: int) -> list:
    """One rebalance of qlib's ``TopkDropoutStrategy``: the names to hold after this date, best first.

    ``scores``: this date's prediction per ticker (higher = better); ``held``: the current holdings.
    Holdings without a score are sold first (they left the universe), then qlib's rule: rank the
    holdings with the ``n_drop + top_k - len(held)`` best names not held, sell the holdings among the
    ``n_drop`` worst of that list, buy the best new names until ``top_k`` are held.
    """
    scores = scores.dropna()
    new = _topk_dropout_step(scores.to_numpy(dtype=np.float64), scores.index.isin(held), top_k, n_drop)
    return list(scores[new].sort_values(ascending=False, kind="stable").index)


def topk_dropout_weights(scores: pd.DataFrame, top_k: int, n_drop: int, short: bool = False) -> pd.DataFrame:
    """Weights of the TopkDropout portfolio per date from ``scores`` (dates, tickers; NaN: no prediction).

    ``1 / top_k`` for every held name (``-1 / top_k`` with ``short``: the bottom names, the same rule on
    the reversed order), 0 elsewhere.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if not 0 <= n_drop <= top_k:
        raise ValueError(f"n_drop must be between 0 and top_k={top_k}, got {n_drop}")
    smallest = int(scores.notna().sum(axis=1).min())
    if top_k > smallest:
        raise ValueError(f"top_k={top_k} is larger than the universe: a date has only {smallest} tickers")
    sign = -1.0 if short else 1.0
    values = sign * scores.to_numpy(dtype=np.float64)
    weights = np.zeros(values.shape)
    held = np.zeros(values.shape[1], dtype=bool)
    for i, row in enumerate(values):
        held = _topk_dropout_step(row, held, top_k, n_drop)
        weights[i, held] = sign / top_k
    return pd.DataFrame(weights, index=scores.index, columns=scores.columns)


def _turnover(weights: pd.DataFrame) -> pd.Series:
    """``sum |w_t - w_{t-1}|`` per date, from cash before the first date."""
    w = weights.to_numpy()
    previous = np.vstack([np.zeros((1, w.shape[1])), w[:-1]])
    return pd.Series(np.abs(w - previous).sum(axis=1), index=weights.index)


def portfolio_returns(
    frame: pd.DataFrame, top_k: int = 50, n_drop: int = 5, cost_bps: float = 10.0, step: int = 1
) -> pd.DataFrame:
    """Per-date returns of the TopkDropout portfolios and the equal-weight benchmark.

    Columns: ``long_only_gross``, ``long_only_net``, ``long_short_gross``, ``long_short_net``,
    ``benchmark``, ``turnover_long_only``, ``turnover_long_short``; indexed by the origin date (the
    return is that of the next bar). The long-short portfolio needs ``2 * top_k`` tickers a date.
    """
    if not (isinstance(cost_bps, (int, float)) and math.isfinite(cost_bps) and cost_bps >= 0):
        raise ValueError(f"cost_bps must be a number >= 0, got {cost_bps!r}")
    rows = check_predictions(frame, step=step)
    scores = _wide(rows, "prediction")
    simple = np.expm1(_wide(rows, "realised"))
    smallest = int(scores.notna().sum(axis=1).min())
    if 2 * top_k > smallest:
        raise ValueError(
            f"top_k={top_k} is larger than the universe allows: the long-short portfolio needs 2 * top_k "
            f"tickers a date, a date has only {smallest}"
        )
    cost = cost_bps / 1e4
    out = pd.DataFrame(index=scores.index)
    long_w = topk_dropout_weights(scores, top_k, n_drop)
    short_w = topk_dropout_weights(scores, top_k, n_drop, short=True)
    filled = simple.fillna(0.0)  # weights are 0 wherever a ticker has no row
    for name, weights in (("long_only", long_w), ("long_short", long_w + short_w)):
        gross = (weights * filled).sum(axis=1)
        turnover = _turnover(weights)
        out[f"{name}_gross"] = gross
        out[f"{name}_net"] = gross - cost * turnover
        out[f"turnover_{name}"] = turnover
    out["benchmark"] = simple.mean(axis=1)
    order = [f"{p}_{k}" for p in PORTFOLIOS for k in ("gross", "net")]
    return out[order + ["benchmark"] + [f"turnover_{p}" for p in PORTFOLIOS]]


# ---------------------------------------------------------------------------------------- performance


def max_drawdown(returns: np.ndarray) -> float:
    """Largest fall of the compounded equity from its running peak (the start, 1, counts), as a positive
    share (empyrical's ``max_drawdown`` with the sign flipped)."""
    equity = np.concatenate(([1.0], np.cumprod(1.0 + np.asarray(returns, dtype=np.float64))))
    peak = np.maximum.accumulate(equity)
    return float(np.max(1.0 - equity / peak))


def _annual_return(returns: np.ndarray, periods_per_year: float) -> float:
    if len(returns) == 0:
        return math.nan
    growth = float(np.prod(1.0 + returns))
    return growth ** (periods_per_year / len(returns)) - 1.0 if growth > 0 else -1.0


def _ratio(returns: np.ndarray, periods_per_year: float) -> float:
    if len(returns) < 2:
        return math.nan
    std = float(np.std(returns, ddof=1))
    return float(np.mean(returns)) / std * math.sqrt(periods_per_year) if std > 0 else math.nan


def performance(
    returns: pd.Series | np.ndarray,
    benchmark: pd.Series | np.ndarray | None = None,
    periods_per_year: float = 252.0,
) -> dict[str, float]:
    """``annual_return``, ``sharpe``, ``max_drawdown`` of per-period simple ``returns`` and, with a
    ``benchmark``, ``excess_return`` (annualised return of ``returns - benchmark``) and
    ``information_ratio`` (``mean / std`` of that active return times ``sqrt(periods_per_year)``)."""
    r = np.asarray(returns, dtype=np.float64)
    out = {
        "annual_return": _annual_return(r, periods_per_year),
        "sharpe": _ratio(r, periods_per_year),
        "max_drawdown": max_drawdown(r) if len(r) else math.nan,
    }
    if benchmark is not None:
        active = r - np.asarray(benchmark, dtype=np.float64)
        out["excess_return"] = _annual_return(active, periods_per_year)
        out["information_ratio"] = _ratio(active, periods_per_year)
    return out


# --------------------------------------------------------------------------------------- the evaluation


@dataclass
class PortfolioEvaluation:
    """What :func:`evaluate_predictions` returns.

    Attributes:
        ic: per date ``ic``, ``rank_ic``, ``n`` (:func:`information_coefficients`).
        returns: per date the portfolios' gross and net returns, the benchmark and the turnovers
            (:func:`portfolio_returns`).
        quantiles: per date the mean simple return of each prediction quantile (:func:`quantile_returns`).
        summary: one flat dict: the IC statistics (:func:`ic_summary`), and per portfolio
            ``<p>_annual_return`` (net), ``<p>_gross_annual_return``, ``<p>_excess_return``,
            ``<p>_information_ratio``, ``<p>_sharpe``, ``<p>_max_drawdown``, ``<p>_turnover`` (mean per
            date) for ``long_only`` and ``long_short`` (the excess return and information ratio of
            ``long_only`` over the equal-weight universe, those of the dollar-neutral ``long_short`` over
            cash: its own annual return and Sharpe ratio); ``benchmark_annual_return``,
            ``benchmark_sharpe``, ``benchmark_max_drawdown``; ``quantile_spread`` (mean return of the top
            quantile less the bottom one, per period); ``n_dates``, ``top_k``, ``n_drop``, ``cost_bps``.
        settings: the arguments the evaluation ran with.
    """

    ic: pd.DataFrame
    returns: pd.DataFrame
    quantiles: pd.DataFrame
    summary: dict[str, float]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def quantile_means(self) -> pd.Series:
        """The mean simple return of each prediction quantile over the dates (1: the lowest predictions)."""
        return self.quantiles.mean()

    def to_markdown(self) -> str:
        """A compact Markdown table: IC, one row per portfolio, then the quantiles' mean returns."""
        s = self.summary
        lines = [
            f"IC {s['ic_mean']:+.4f} (ICIR {s['icir']:+.3f}, t {s['ic_t']:+.2f}) · rank IC "
            f"{s['rank_ic_mean']:+.4f} (ICIR {s['rank_icir']:+.3f}, t {s['rank_ic_t']:+.2f}) · "
            f"{int(s['n_dates'])} dates · top {int(s['top_k'])}, drop {int(s['n_drop'])}, "
            f"{s['cost_bps']:g} bps",
            "",
            "| portfolio | annual return | gross | excess | IR | Sharpe | max DD | turnover |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in PORTFOLIOS:
            lines.append(
                f"| {p} | {s[f'{p}_annual_return']:+.2%} | {s[f'{p}_gross_annual_return']:+.2%} | "
                f"{s[f'{p}_excess_return']:+.2%} | {s[f'{p}_information_ratio']:.2f} | {s[f'{p}_sharpe']:.2f} | "
                f"{s[f'{p}_max_drawdown']:.2%} | {s[f'{p}_turnover']:.3f} |"
            )
        lines.append(
            f"| benchmark | {s['benchmark_annual_return']:+.2%} | | | | {s['benchmark_sharpe']:.2f} | "
            f"{s['benchmark_max_drawdown']:.2%} | |"
        )
        means = " · ".join(f"{q}: {value * 1e4:+.1f}" for q, value in self.quantile_means.items())
        lines += ["", f"mean return per prediction quantile, bp a period (1 = lowest): {means}"]
        return "\n".join(lines)


def evaluate_predictions(
    frame: pd.DataFrame,
    *,
    top_k: int = 50,
    n_drop: int = 5,
    cost_bps: float = 10.0,
    periods_per_year: float = 252.0,
    n_quantiles: int = 10,
    step: int = 1,
) -> PortfolioEvaluation:
    """IC, quantile returns and the TopkDropout portfolios of a predictions frame (module docstring).

    Args:
        frame: the predictions frame (``date``, ``ticker``, ``step``, ``prediction``, ``realised``).
        top_k: names held long (and short); qlib's benchmark setting is 50 of CSI 300.
        n_drop: at most this many holdings replaced a date (qlib: 5).
        cost_bps: cost in basis points of turnover (one side).
        periods_per_year: dates per year, to annualise (252 for daily origins).
        n_quantiles: prediction quantiles for the quantile returns.
        step: the horizon step evaluated (1: the next bar, the one the portfolios trade).
    """
    ic = information_coefficients(frame, step=step)
    returns = portfolio_returns(frame, top_k=top_k, n_drop=n_drop, cost_bps=cost_bps, step=step)
    quantiles = quantile_returns(frame, n_quantiles=n_quantiles, step=step)
    summary: dict[str, float] = dict(ic_summary(ic))
    benchmark = returns["benchmark"].to_numpy()
    # the dollar-neutral long-short book is measured against cash, the long-only one against the universe
    against = {"long_only": benchmark, "long_short": np.zeros_like(benchmark)}
    for p in PORTFOLIOS:
        net = performance(returns[f"{p}_net"], against[p], periods_per_year)
        for key, value in net.items():
            summary[f"{p}_{key}"] = value
        summary[f"{p}_gross_annual_return"] = _annual_return(returns[f"{p}_gross"].to_numpy(), periods_per_year)
        summary[f"{p}_turnover"] = float(returns[f"turnover_{p}"].mean())
    for key, value in performance(benchmark, None, periods_per_year).items():
        summary[f"benchmark_{key}"] = value
    means = quantiles.mean()
    summary["quantile_spread"] = float(means.iloc[-1] - means.iloc[0])
    summary.update(n_dates=float(len(returns)), top_k=float(top_k), n_drop=float(n_drop), cost_bps=float(cost_bps))
    settings = dict(
        top_k=top_k,
        n_drop=n_drop,
        cost_bps=cost_bps,
        periods_per_year=periods_per_year,
        n_quantiles=n_quantiles,
        step=step,
    )
    return PortfolioEvaluation(ic=ic, returns=returns, quantiles=quantiles, summary=summary, settings=settings)


# -------------------------------------------------------------------------------- probabilistic scores


def quantile_columns(frame: pd.DataFrame) -> dict[float, str]:
    """The quantile columns of a predictions frame (``q0.1``, ``q.5``, ...) by level, sorted."""
    found = {}
    for column in frame.columns:
        level = quantile_level(column)
        if level is not None:
            if not 0.0 < level < 1.0:
                raise ValueError(f"predictions frame: quantile column {column!r} is not a level in (0, 1)")
            found[level] = str(column)
    return dict(sorted(found.items()))


def probabilistic_scores(frame: pd.DataFrame, step: int | None = None) -> dict[str, float]:
    """Scores of the forecast quantiles (columns ``q<level>``) against ``realised``, over all rows (or
    one ``step``).

    * ``crps``: the quantile approximation of the CRPS, ``2 / |Q| * sum_q pinball_q``, averaged over rows;
    * ``wql``: the weighted quantile loss, ``mean_q 2 * sum_rows pinball_q / sum_rows |realised|``;
    * ``pinball_q<level>``: the mean pinball loss of each level;
    * ``coverage``: the share of realised values inside the outer interval [lowest, highest quantile];
      ``nominal_coverage``: that interval's level (0.8 for q0.1..q0.9); ``interval_width``: its mean width.
    """
    levels = quantile_columns(frame)
    if len(levels) < 2:
        raise ValueError(
            f"predictions frame has {len(levels)} quantile column(s) (q0.1, q0.5, q0.9, ...); scores need at least 2"
        )
    rows = check_predictions(frame, step=step, min_tickers=1)
    q = rows[list(levels.values())].to_numpy(dtype=np.float64)  # (N, Q)
    bad = ~np.isfinite(q)
    if bad.any():
        column = list(levels.values())[int(np.argmax(bad.any(axis=0)))]
        raise ValueError(f"predictions frame: column {column!r} has {int(bad.sum())} NaN value(s)")
    alpha = np.asarray(list(levels), dtype=np.float64)  # (Q,)
    y = rows["realised"].to_numpy()[:, None]  # (N, 1)
    diff = y - q  # (N, Q)
    pinball = np.maximum(alpha * diff, (alpha - 1.0) * diff)  # (N, Q)
    scale = float(np.abs(y).sum())
    out: dict[str, float] = {
        "crps": float((2.0 / len(alpha) * pinball.sum(axis=1)).mean()),
        "wql": float(np.mean(2.0 * pinball.sum(axis=0) / scale)) if scale > 0 else math.nan,
    }
    for level, column in levels.items():
        out[f"pinball_{column}"] = float(pinball[:, list(levels).index(level)].mean())
    low, high = q[:, 0], q[:, -1]
    out["coverage"] = float(np.mean((y[:, 0] >= low) & (y[:, 0] <= high)))
    out["nominal_coverage"] = float(alpha[-1] - alpha[0])
    out["interval_width"] = float(np.mean(high - low))
    return out
