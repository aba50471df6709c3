"""Kronos's zero-shot forecasts of a walk-forward fold's test origins, as a column of its predictions frame.

Kronos (:class:`~lightning_tf.kline.published.Kronos`) reads raw bars, not the forecaster's scaled features: at each
origin (a row of the fold's frame: a date and a ticker) :func:`kronos_column` gives it the ticker's last ``context``
bars up to and including that date (open, high, low, close, and volume and amount where the data has them), their
calendar stamps, and the stamps of the next ``F`` bars on the series' own calendar
(:func:`~lightning_tf.kline.windows.next_timestamps`, as ``predict`` continues a series: nothing after the origin is
read). The forecast is the mean of ``samples`` drawn continuations, as the reference predictor's; the column holds
its close path as log returns, step ``h`` being ``log(close_h / close_{h-1})`` from the origin's close.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from ..kronos_tuning import bar_columns
from ..settings import Splits
from ..windows import next_timestamps_of

if TYPE_CHECKING:
    from ..published import Kronos

__all__ = ["KronosColumn", "finetune_kronos", "kronos_column"]


@dataclass(frozen=True)
class KronosColumn:
    """How a walk-forward forecasts with a published Kronos beside its model (``walkforward --kronos``).

    Attributes:
        source: the model: a hub name (``NeoQuasar/Kronos-small``), its folder, or a folder ``to_kronos`` wrote.
        tokenizer: its tokenizer (hub name or folder), where ``source`` does not say which.
        context: bars read before each origin (at most the model's ``max_context``; a ticker with fewer bars
            gives what it has); None: ``max_context`` less the horizon, so that the model keeps its keys and values
            through the whole forecast (a context that fills ``max_context`` recomputes the window at every bar).
        samples: continuations drawn per origin; the forecast is their mean.
        seed: the seed of the draws (each origin's are drawn from it anew: an origin's forecast does not depend on
            the batch or fold it is in).
        batch_size: origins per forward pass.
        finetune_steps: also fine-tune it on each fold's training bars for this many optimizer steps
            (:func:`finetune_kronos`; its forecasts the column ``kronos_tuned``); 0: not.
        finetune_lr: the fine-tuning's peak learning rate.
        finetune_batch: windows a fine-tuning batch (each ``context + 1`` bars; ``max_context + 1`` without one).
    """

    source: str
    tokenizer: str | None = None
    context: int | None = None
    samples: int = 1
    seed: int = 0
    batch_size: int = 64
    finetune_steps: int = 0
    finetune_lr: float = 2e-5
    finetune_batch: int = 16

    def __post_init__(self) -> None:
        for name in ("context", "samples", "batch_size", "finetune_batch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"kronos {name} must be >= 1, got {getattr(self, name)}")
        if self.finetune_steps < 0 or not self.finetune_lr > 0:
            raise ValueError(
                f"kronos finetune_steps ({self.finetune_steps}) must be >= 0 and finetune_lr ({self.finetune_lr}) > 0"
            )

    def load(self) -> Kronos:
        """The model, on the GPU where there is one."""
        from ..published import Kronos

        model = Kronos.from_pretrained(self.source, self.tokenizer)
        if self.context is not None and self.context > model.max_context:
            raise ValueError(
                f"kronos context ({self.context}) is longer than the model's max_context ({model.max_context})"
            )
        return model.to("cuda" if torch.cuda.is_available() else "cpu")


def finetune_kronos(kronos: Kronos, bars: pd.DataFrame, splits: Splits, settings: KronosColumn, folder: Path) -> Kronos:
    """A copy of ``kronos`` fine-tuned on its own objective (:class:`~lightning_tf.kline.kronos_tuning.KronosTuner`)
    on the training windows of ``bars`` under ``splits`` (``settings.context + 1`` bars each, the last of every
    ticker's training split included) for ``settings.finetune_steps`` steps, validated four times on the
    validation bars; the weights of the best validation loss, kept in ``folder``. Torch's random state is left as
    it was."""
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint

    from ..kronos_tuning import KronosBarsDataModule, KronosTuner

    steps = settings.finetune_steps
    window = min(settings.context or kronos.max_context, kronos.max_context) + 1
    data = KronosBarsDataModule(bars, window=window, splits=splits, batch_size=settings.finetune_batch)
    with torch.random.fork_rng(devices=range(torch.cuda.device_count())):  # manual_seed seeds the GPUs' too
        torch.manual_seed(settings.seed)
        tuner = KronosTuner.from_model(
            kronos, settings.source, lr=settings.finetune_lr, warmup_steps=max(1, steps // 10)
        )
        best = ModelCheckpoint(
            dirpath=folder, filename="kronos", monitor="val/loss", save_top_k=1, save_weights_only=True
        )
        trainer = Trainer(
            max_steps=steps,
            val_check_interval=max(1, steps // 4),
            check_val_every_n_epoch=None,
            num_sanity_val_steps=0,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[best],
            default_root_dir=folder,
            devices=1,
        )
        t0 = time.perf_counter()
        data.setup("fit")
        print(
            f"kronos: fine-tuning for {steps} steps on {len(data.datasets['train'])} training windows of {window} bars",
            file=sys.stderr,
            flush=True,
        )
        trainer.fit(tuner, datamodule=data)
        state = torch.load(best.best_model_path, map_location="cpu", weights_only=True)["state_dict"]
        tuner.load_state_dict(state)
        print(
            f"kronos: fine-tuned in {time.perf_counter() - t0:.0f} s, best validation loss "
            f"{float(best.best_model_score):.4f} ({best.best_model_path})",
            file=sys.stderr,
            flush=True,
        )
    return tuner.kronos.eval().to(next(kronos.parameters()).device)


def kronos_column(
    frame: pd.DataFrame,
    bars: pd.DataFrame,
    kronos: Kronos,
    settings: KronosColumn,
    calendar: str | None = None,
    name: str = "kronos",
) -> tuple[pd.Series, list[str]]:
    """Kronos's forecast at each row of ``frame`` (a fold's predictions frame: ``date``, ``ticker``, ``step``), and
    notes on what it left out.

    Args:
        frame: the rows to forecast; every origin (date, ticker) must be one of the ticker's bars.
        bars: the data's canonical bars (``timestamp``, ``ticker``, ``open``, ``high``, ``low``, ``close`` and
            optionally ``volume``, ``amount``).
        kronos: the model.
        settings: the context, draws and batch (:class:`KronosColumn`).
        calendar: the exchange calendar the future bars' stamps follow (None: the series' own spacing).
        name: the column's name.

    Returns:
        The column ``kronos`` (the forecast log return of each row's step, NaN where the mean forecast close is
        not positive) and the notes.

    Raises:
        ValueError: an origin that is not a bar of its ticker, bars without OHLC, a NaN or infinite value in a
            window Kronos reads.
    """
    columns = bar_columns(bars)
    horizon = int(frame["step"].max()) if len(frame) else 0
    context = settings.context if settings.context is not None else max(1, kronos.max_context - horizon)
    origins = frame[["date", "ticker"]].drop_duplicates().reset_index(drop=True)  # (n, 2)
    n = len(origins)
    close = np.full((n, horizon + 1), np.nan)  # the origin's close and the forecast path
    # each origin's row, window of bars, their times, and the times its next stamps continue (the bars of the month
    # up to the origin, whatever the context: the session next_timestamps reads), grouped by length for batching
    windows: dict[int, list[tuple[int, np.ndarray, pd.DatetimeIndex, pd.DatetimeIndex]]] = {}
    by_ticker = dict(tuple(bars.groupby("ticker", sort=False)))  # each ticker's bars, in time order
    for ticker, group in origins.groupby("ticker", sort=False):
        rows = by_ticker.get(ticker, bars.iloc[:0])
        times = pd.DatetimeIndex(rows["timestamp"])
        ends = times.searchsorted(pd.DatetimeIndex(group["date"]))  # (g,)
        ends_ok = ends < len(times)
        found = np.zeros(len(ends), dtype=bool)
        found[ends_ok] = times[ends[ends_ok]] == pd.DatetimeIndex(group["date"])[ends_ok]
        if not found.all():
            day = group["date"].iloc[int(np.argmin(found))]
            raise ValueError(f"kronos: ticker {ticker!r} has no bar at its origin {day}")
        values = rows[columns].to_numpy(np.float64)  # (N, C)
        month = times.searchsorted(times - pd.Timedelta(days=31))  # (N,) each bar's first bar of the month before
        for i, end in zip(group.index.to_numpy(), ends, strict=True):
            length = min(context, int(end) + 1)
            first = end - length + 1
            window = (i, values[first : end + 1], times[first : end + 1], times[min(first, month[end]) : end + 1])
            windows.setdefault(length, []).append(window)
    from ..published import calendar_stamps

    device = next(kronos.parameters()).device
    done, started, shown = 0, time.perf_counter(), 0.0
    for length in sorted(windows):
        group = windows[length]
        for lo in range(0, len(group), settings.batch_size):
            part = group[lo : lo + settings.batch_size]
            x = torch.as_tensor(np.stack([w for _, w, *_ in part]))  # (B, L, C)
            if not torch.isfinite(x).all():
                i = next(i for i, w, *_ in part if not np.isfinite(w).all())
                raise ValueError(
                    f"kronos: the window of ticker {origins.at[i, 'ticker']!r} at {origins.at[i, 'date']} holds NaN "
                    f"or infinite values in {columns}; Kronos reads complete bars"
                )
            stamps = torch.stack([calendar_stamps(t) for _, _, t, _ in part])  # (B, L, 5)
            nxt = next_timestamps_of([seen for *_, seen in part], horizon, calendar=calendar)
            future = torch.stack([calendar_stamps(t) for t in nxt])  # (B, F, 5)
            seeded = [torch.Generator(device).manual_seed(settings.seed) for _ in part]  # each origin its own draws
            draws = kronos.forecast(x, stamps, future, samples=settings.samples, generator=seeded)  # (B, S, F, 6)
            path = draws.mean(1)[..., 3].double().cpu().numpy()  # (B, F): the mean close path
            rows = [i for i, *_ in part]
            close[rows, 0] = x[:, -1, 3].numpy()
            close[rows, 1:] = path
            done += len(part)
            if time.perf_counter() - shown > 30 or done == n:
                shown = time.perf_counter()
                print(f"kronos: {done}/{n} origins forecast ({shown - started:.0f} s)", file=sys.stderr, flush=True)
    positive = close > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        returns = np.where(positive[:, 1:] & positive[:, :-1], np.log(close[:, 1:] / close[:, :-1]), np.nan)  # (n, F)
    notes = []
    bad = int(np.isnan(returns).sum())
    if bad:
        notes.append(f"{name}: {bad} of {returns.size} forecast steps follow a close <= 0 and are left NaN")
    index = frame[["date", "ticker"]].merge(origins.reset_index(), on=["date", "ticker"], how="left")["index"]
    values = returns[index.to_numpy(), frame["step"].to_numpy() - 1]
    return pd.Series(values, index=frame.index, name=name), notes
