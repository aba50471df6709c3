"""Writes the forecasts of ``predict``: one CSV row per window and future bar (original units, rebuilt
closes) and a candlestick chart per series with the forecast drawn after its last bars."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.loggers import WandbLogger
from torch import Tensor

from lightning_tf.training import gather_predictions, interleave, predict_size, prediction_path

from .scale import DataScale

__all__ = ["ForecastWriter"]

log = logging.getLogger(__name__)


class ForecastWriter(BasePredictionWriter):
    """Collect the batches of :meth:`KLineForecaster.predict_step
    <lightning_tf.kline.KLineForecaster.predict_step>`, gather every process's share and write, once on
    global rank 0 and in input order:

    * the CSV: ``ticker, timestamp, step, pred_<target>...``, the quantile columns
      ``pred_<target>_q<level>`` of a quantile model, ``close`` (the closes rebuilt from predicted returns)
      and ``scaled_by`` (how the series was scaled: a trained ticker's statistics, or its own history for
      a series the model was not trained on); values in the series' own units;
    * next to it, ``<csv stem>_<ticker>.png``: the last ``plot_bars`` bars of each series as
      candlesticks with the forecast closes after them (when the DataModule has the bars), also
      logged to wandb under a WandbLogger.

    The future timestamps and the recent bars come from the DataModule (``future_timestamps(n,
    ticker)``, ``recent_bars(n, ticker)``); a DataModule without them leaves the timestamps empty and
    draws no chart. :class:`~lightning_tf.kline.KLineForecaster` adds one with the defaults; give your
    own to choose the file (it takes the place of the default one), also with ``--ckpt_path``::

        lightning-tf predict --config configs/kline/msft_daily.yaml --ckpt_path last.ckpt \\
            --trainer.callbacks+=lightning_tf.kline.ForecastWriter --trainer.callbacks.output_file out/forecast.csv

    Args:
        output_file: the CSV to write (relative to the working directory; parent folders are created);
            default: ``forecast.csv`` in the run directory (``forecast-1.csv``, ... when an earlier
            predict left that name).
        plot_bars: bars of history drawn before the forecast in each chart.
    """

    def __init__(self, output_file: str | None = None, plot_bars: int = 90) -> None:
        super().__init__(write_interval="epoch")
        if plot_bars < 1:
            raise ValueError(f"plot_bars must be at least 1, got {plot_bars}")
        self.output_file = output_file
        self.plot_bars = plot_bars

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        parts = gather_predictions(predictions, to_cpu=True)  # every process's batches, in rank order
        if not trainer.is_global_zero:
            return
        merged = _merge_windows(parts, predict_size(trainer))
        if not merged:
            log.warning("no forecasts collected: the predict loader gave no window; nothing written")
            return
        path = prediction_path(trainer, self.output_file, "forecast.csv")
        scale, quantiles = getattr(pl_module, "data_scale", None), getattr(pl_module, "quantiles", None)
        n = self.write(trainer, merged[0], path, scale, quantiles)
        print(f"wrote {n} forecasts to {path}")

    def write(
        self,
        trainer: Trainer,
        forecast: dict[str, Tensor],
        path: Path,
        scale: DataScale | None,
        quantiles: list[float] | None,
    ) -> int:
        """Write the CSV and the charts of one merged batch of forecasts (the model's data ``scale`` and
        ``quantiles`` name its columns); returns the window count."""
        from .evaluation.plots import candlestick_figure

        dm = getattr(trainer, "datamodule", None)
        W, Fh, K = forecast["pred"].shape
        target_names = list(scale.target_names) if scale is not None else [f"target{k}" for k in range(K)]
        # predict batches index the predict data's own series; otherwise the model's trained tickers
        ticker_names = list(getattr(dm, "predict_ticker_names", None) or [])
        if not ticker_names:
            trained = scale.ticker_names if scale is not None else getattr(dm, "ticker_names", None)
            ticker_names = list(trained or [])
        scaling = dict(getattr(dm, "predict_scaling", None) or {})
        values = forecast.get("pred_orig", forecast["pred"]).double().numpy()  # (W, F, K)
        q_values = forecast["quantiles_orig"].double().numpy() if "quantiles_orig" in forecast else None  # (W, F, K, Q)
        path.parent.mkdir(parents=True, exist_ok=True)
        frames, figures = [], []
        for w in range(W):
            ticker_id = int(forecast["ticker"][w]) if "ticker" in forecast else 0
            ticker = ticker_names[ticker_id] if 0 <= ticker_id < len(ticker_names) else str(ticker_id)
            stamps = _future_timestamps(dm, Fh, ticker_id)
            frame = pd.DataFrame({"ticker": ticker, "timestamp": stamps, "step": np.arange(1, Fh + 1)})
            for k, name in enumerate(target_names):
                frame[f"pred_{name}"] = values[w, :, k]
                if q_values is not None and quantiles is not None:
                    for j, level in enumerate(quantiles):
                        frame[f"pred_{name}_q{level:g}"] = q_values[w, :, k, j]
            if "price" in forecast:
                frame["close"] = forecast["price"][w].numpy()
            if scaling:
                frame["scaled_by"] = scaling.get(ticker, "")
            frames.append(frame)
            recent = getattr(dm, "recent_bars", None)
            closes = frame["close"] if "close" in frame else frame.get("pred_close")
            band = None
            if "price_quantiles" in forecast and quantiles is not None:
                from .evaluation.metrics import central_intervals

                pairs = central_intervals(quantiles)
                if pairs:
                    band = (
                        forecast["price_quantiles"][w, :, pairs[0][0]].numpy(),
                        forecast["price_quantiles"][w, :, pairs[0][1]].numpy(),
                    )
            if recent is not None and closes is not None:
                fig = candlestick_figure(
                    recent(self.plot_bars, ticker_id),
                    stamps,
                    closes.to_numpy(),
                    title=f"{ticker}: next {Fh} bars",
                    forecast_band=band,
                )
                fig.savefig(path.with_name(f"{path.stem}_{_safe(ticker)}.png"))
                figures.append((ticker, fig))
        pd.concat(frames, ignore_index=True).to_csv(path, index=False)
        if isinstance(trainer.logger, WandbLogger) and figures:
            trainer.logger.log_image(
                key="predict/forecast", images=[f for _, f in figures], caption=[t for t, _ in figures]
            )
        return W


def _merge_windows(parts: list[list[dict[str, Tensor]]], n: int | None = None) -> list[dict[str, Tensor]]:
    """Every process's prediction batches (``parts[rank]``) as one batch of the ``n`` windows in input
    order: process r forecast windows r, r + R, ... (the strided, unrepeated prediction sampler)."""
    shares = [
        [{k: v[b] for k, v in batch.items()} for batch in batches for b in range(len(batch["pred"]))]
        for batches in parts
    ]
    windows = interleave(shares, n)
    if not windows:
        return []
    return [{k: torch.stack([w[k] for w in windows]) for k in windows[0]}]  # (W, ...) per key


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "series"


def _future_timestamps(dm: Any, n: int, ticker_id: int) -> pd.DatetimeIndex:
    fn = getattr(dm, "future_timestamps", None)
    if fn is not None:
        return pd.DatetimeIndex(fn(n, ticker_id))
    # the data cannot say when its next bars fall: leave the timestamps empty rather than guess
    log.warning("the DataModule has no future_timestamps(n, ticker); forecast timestamps are left empty")
    return pd.DatetimeIndex([pd.NaT] * n)
