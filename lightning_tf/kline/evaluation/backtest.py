"""A cost-aware backtest of the sign of a forecast: does it trade better than buying and holding?

At the close of bar t, a forecast made from bars up to t gives the next bar's return; the strategy
holds ``+1`` (long) when that forecast is positive and ``0`` (flat), or ``-1`` (short, with
``short=True``), otherwise, from the close of t to the close of t+1. Positions change only at bar
closes and use nothing after bar t, so there is no look-ahead: the realised return of bar t+1 is
only ever multiplied by a position chosen before it. Every change of position pays ``cost_bps``
basis points per side on the traded size (long to short is two sides); every strategy starts flat,
so entering costs once, and the final position is marked to market (no exit cost).

Per period (bar) ``net_t = position_t * (exp(r_{t+1}) - 1) - cost * |position_t - position_{t-1}|``,
the equity is ``prod(1 + net)``. Reported:

* ``cum_return``: final equity - 1;
* ``sharpe``: ``mean(net) / std(net) * sqrt(periods_per_year)`` (risk-free rate 0; NaN for a strategy
  that never holds a position);
* ``max_drawdown``: the largest fall of the equity from its running peak, as a share of the peak;
* ``turnover``: mean ``|position_t - position_{t-1}|`` per bar (1 = a full position traded every bar);
* ``hit_rate``: the share of bars in a position whose return had the position's sign;
* ``exposure``: the share of bars in a position.

A panel of tickers trades each on its own and holds them in equal weight, every bar (the portfolio's
period return is the mean of the tickers' net returns of that bar). Everything here is plain NumPy and
pandas: the module calls it on the test windows' forecasts (:class:`~.module.KLineForecaster`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = [
    "STATS",
    "format_stat",
    "backtest",
    "beats_line",
    "equity_curve",
    "max_drawdown",
    "periods_per_year",
    "positions",
    "strategy_returns",
]

STATS = ("cum_return", "sharpe", "max_drawdown", "turnover", "hit_rate", "exposure")


def format_stat(name: str, value: float) -> str:
    """A backtest statistic as it reads best: returns and shares in percent, the rest to 3 digits."""
    if name == "cum_return":
        return f"{value:+.1%}"
    if name in ("max_drawdown", "hit_rate", "exposure"):
        return f"{value:.1%}"
    return f"{value:.3g}"


def positions(signal: np.ndarray, short: bool = False) -> np.ndarray:
    """``+1`` where ``signal > 0``; ``-1`` where ``signal < 0`` with ``short``; else ``0``."""
    signal = np.asarray(signal, dtype=np.float64)
    pos = (signal > 0).astype(np.float64)
    if short:
        pos -= (signal < 0).astype(np.float64)
    return pos


def strategy_returns(position: np.ndarray, next_log_return: np.ndarray, cost_bps: float) -> np.ndarray:
    """Net simple returns per bar ``(n,)`` of holding ``position[t]`` over the bar whose log return is
    ``next_log_return[t]``, after ``cost_bps`` per side on every change of position (starting flat)."""
    position = np.asarray(position, dtype=np.float64)
    traded = np.abs(np.diff(position, prepend=0.0))  # (n,)
    gross = position * np.expm1(np.asarray(next_log_return, dtype=np.float64))  # (n,)
    return gross - cost_bps * 1e-4 * traded


def equity_curve(net: np.ndarray) -> np.ndarray:
    """Equity ``(n,)`` after each bar, starting from 1."""
    return np.cumprod(1.0 + np.asarray(net, dtype=np.float64))


def max_drawdown(net: np.ndarray) -> float:
    """Largest fall of the equity from its running peak (the start, 1, counts as a peak), as a share."""
    equity = np.concatenate(([1.0], equity_curve(net)))
    peak = np.maximum.accumulate(equity)
    return float(np.max(1.0 - equity / peak))


def periods_per_year(times: pd.DatetimeIndex | np.ndarray, default: float = 252.0) -> float:
    """Bars per year, measured from the distinct bar times: ``(n - 1) / years spanned`` (252 for
    business-day bars); ``default`` when the times span no time."""
    t = pd.DatetimeIndex(pd.unique(pd.DatetimeIndex(times))).sort_values()
    if len(t) < 2:
        return default
    years = (t[-1] - t[0]) / pd.Timedelta(days=365.25)
    return (len(t) - 1) / years if years > 0 else default


def _stats(net: np.ndarray, position: np.ndarray, realised: np.ndarray, ppy: float) -> dict[str, float]:
    """The statistics of one ticker's (or the portfolio's) bars."""
    sd = float(np.std(net, ddof=1)) if len(net) > 1 else 0.0
    held = position != 0
    return {
        "cum_return": float(equity_curve(net)[-1] - 1.0) if len(net) else 0.0,
        "sharpe": float(np.mean(net) / sd * math.sqrt(ppy)) if sd > 0 and held.any() else float("nan"),
        "max_drawdown": max_drawdown(net),
        "turnover": float(np.mean(np.abs(np.diff(position, prepend=0.0)))) if len(position) else 0.0,
        "hit_rate": float(np.mean(np.sign(position[held]) == np.sign(realised[held]))) if held.any() else float("nan"),
        "exposure": float(np.mean(held)) if len(held) else 0.0,
    }


def backtest(
    frame: pd.DataFrame,
    signals: list[str],
    *,
    cost_bps: float = 5.0,
    short: bool = False,
    ppy: float | None = None,
) -> tuple[dict[str, dict[str, float]], pd.DataFrame]:
    """Backtest every signal column of ``frame`` on its ``realised`` next-bar log returns.

    Args:
        frame: one row per ticker and bar: ``time`` (the close the position is taken at), ``ticker``,
            ``realised`` (the log return of the next bar) and the forecast columns named in ``signals``
            (the forecast of the next bar's return; only the sign is used). ``buy_and_hold`` needs no
            column: it is always long.
        signals: the strategies, by column name; ``buy_and_hold`` adds the always-long strategy.
        cost_bps: cost per side, in basis points of the traded size.
        short: go short on a negative forecast instead of flat.
        ppy: bars per year for the Sharpe ratio; None: measured from ``time``.

    Returns:
        The statistics of each strategy (equal-weight portfolio over the tickers), and the equity curve
        of each (indexed by ``time``).
    """
    frame = frame.sort_values(["ticker", "time"], kind="stable")
    ppy = periods_per_year(pd.DatetimeIndex(frame["time"])) if ppy is None else ppy
    stats: dict[str, dict[str, float]] = {}
    curves = {}
    for name in signals:
        per_ticker = []
        for _, g in frame.groupby("ticker", sort=True):
            signal = np.ones(len(g)) if name == "buy_and_hold" else g[name].to_numpy()
            pos = positions(signal, short=short and name != "buy_and_hold")
            realised = g["realised"].to_numpy(np.float64)
            net = strategy_returns(pos, realised, cost_bps)
            per_ticker.append(
                pd.DataFrame({"time": g["time"].to_numpy(), "net": net, "position": pos, "realised": realised})
            )
        bars = pd.concat(per_ticker, ignore_index=True)
        book = bars.groupby("time", sort=True)[["net"]].mean()  # equal weight over the tickers of each bar
        s = _stats(book["net"].to_numpy(), bars["position"].to_numpy(), bars["realised"].to_numpy(), ppy)
        s["turnover"] = float(
            np.mean(np.abs(np.concatenate([np.diff(p["position"].to_numpy(), prepend=0.0) for p in per_ticker])))
        )
        stats[name] = s
        curves[name] = equity_curve(book["net"].to_numpy())
    index = pd.DatetimeIndex(sorted(pd.unique(frame["time"])), name="time")
    return stats, pd.DataFrame(curves, index=index)


def beats_line(stats: dict[str, dict[str, float]], cost_bps: float, short: bool, name: str = "model") -> str:
    """One plain line: does strategy ``name`` beat buy-and-hold after costs (higher Sharpe and higher
    cumulative return), on one of the two, or on neither?"""
    ours, hold = stats[name], stats["buy_and_hold"]
    wins = []
    if ours["sharpe"] > hold["sharpe"]:  # NaN (never in the market) never wins
        wins.append("Sharpe")
    if ours["cum_return"] > hold["cum_return"]:
        wins.append("cumulative return")
    kind = "long/short" if short else "long/flat"
    verdict = "beats" if len(wins) == 2 else f"beats on {wins[0]} only," if wins else "does NOT beat"
    return (
        f"after {cost_bps:g} bp per side, the {name}'s {kind} strategy {verdict} buy-and-hold: "
        f"Sharpe {ours['sharpe']:.2f} vs {hold['sharpe']:.2f}, "
        f"cumulative return {ours['cum_return']:+.1%} vs {hold['cum_return']:+.1%}"
    )
