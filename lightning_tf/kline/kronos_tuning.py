"""Fine-tuning a published Kronos on your bars with its own objective (Shi et al. 2025; the reference's
``finetune/train_predictor.py``): :class:`KronosBarsDataModule` cuts each ticker's raw bars into windows of the
training and validation splits, and :class:`KronosTuner` trains the model to predict each bar's token pair from the
bars before it, the tokenizer fixed.

Each window is standardised by its own mean and standard deviation and clipped, as the reference's fine-tuning
data is (so the statistics include the bars the model learns to predict, where :meth:`Kronos.forecast
<lightning_tf.kline.published.Kronos.forecast>` standardises by the context alone), then tokenized; the model reads
the first ``window - 1`` token pairs with their calendar stamps and is scored on the next ones (the mean of the
coarse and the fine cross-entropies, :func:`~lightning_tf.kline.published.token_loss`). In training the fine head
is conditioned on a coarse token drawn from the coarse head, as the reference trains; validation conditions it on
the true one through the causal dependency layer, so its loss is deterministic. ``freeze`` and
``layer_decay`` work by the model's depths (:meth:`~lightning_tf.kline.published.KronosModel.layer_depth`).

From the command line: ``lightning-tf fit --config configs/trainer/default.yaml --config
configs/kline/kronos_finetune.yaml``; the checkpoint holds the configs and every weight, so
:meth:`KronosTuner.load_from_checkpoint` rebuilds the model without the published files, and
``tuner.kronos.to_kronos(DIR)`` writes it in the reference's layout. ``lightning-tf walkforward --kronos NAME
--kronos_finetune_steps N`` fine-tunes it on every fold's training bars (:mod:`.universe.kronos`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import BasePredictionWriter
from torch import Tensor
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from lightning_tf.core import evaluating
from lightning_tf.training.optim import configure_adamw
from lightning_tf.training.private.lightning import attached_trainer

from .published import Kronos, KronosConfig, KronosTokenizerConfig, calendar_stamps
from .settings import Covariates, Reading, Splits, read_with_settings

__all__ = [
    "KronosBarsDataModule",
    "KronosTuner",
    "KronosWriter",
    "bar_columns",
    "forecast_bars",
    "forecast_series",
    "scored_token_loss",
]

#: the bar columns Kronos reads, in its order; volume and amount are optional (the reference completes them)
BARS = ("open", "high", "low", "close", "volume", "amount")


def bar_columns(bars: pd.DataFrame, source: str = "the bars") -> list[str]:
    """The columns of ``bars`` Kronos reads: OHLC, then volume and amount where present (amount only with volume,
    as the reference reads them); a ValueError naming ``source`` without OHLC."""
    present = [c for c in BARS if c in bars.columns]
    missing = [c for c in BARS[:4] if c not in present]
    if missing:
        raise ValueError(f"Kronos reads open, high, low and close: {source} have no {missing}")
    return present if "volume" in present else present[:4]


def forecast_bars(
    kronos: Kronos,
    bars: pd.DataFrame | str | Path,
    horizon: int,
    *,
    context: int | None = None,
    samples: int = 1,
    seed: int = 0,
    calendar: str | None = None,
    reading: Reading | None = None,
    name: str | None = None,
) -> pd.DataFrame:
    """Kronos's forecast of the next ``horizon`` bars of every series of ``bars``, from its last ``context`` bars.

    Args:
        kronos: the model.
        bars: a file, a folder or a frame of bars, as the K-line data module reads them (one series or a long table
            of tickers).
        horizon: bars to forecast (at most the model's ``max_context``).
        context: bars read of each series (default and at most: the model's ``max_context``; a shorter series
            gives what it has).
        samples: continuations drawn per series; the forecast is their mean, as the reference predictor's.
        seed: the seed of the draws (the same seed, the same forecast).
        calendar: the exchange calendar of the future bars' stamps (None: the series' own spacing).
        reading: how the bars are read.
        name: the ticker of bars without a ticker column.

    Returns:
        One row per series and future bar: ``ticker``, ``timestamp``, ``step`` and the forecast ``open``, ``high``,
        ``low``, ``close``, ``volume``, ``amount``.
    """
    from .windows import resolve_path

    source = name or (str(bars) if not isinstance(bars, pd.DataFrame) else "the bars")
    data = bars if isinstance(bars, pd.DataFrame) else resolve_path(str(bars))
    frame = read_with_settings(data, reading or Reading(), Covariates(), source=source, name=name)
    bar_columns(frame, source)
    series = [part for _, part in frame.groupby("ticker", sort=False)]
    kwargs = {"context": context, "samples": samples, "seed": seed, "calendar": calendar}
    return pd.concat(forecast_series(kronos, series, horizon, **kwargs), ignore_index=True)


def forecast_series(
    kronos: Kronos,
    series: Sequence[pd.DataFrame],
    horizon: int,
    *,
    context: int | None = None,
    samples: int = 1,
    seed: int = 0,
    calendar: str | None = None,
) -> list[pd.DataFrame]:
    """:func:`forecast_bars` of series the bar reader has read (canonical frames, one ticker each): one table per
    series, in their order. Series of one length and the same columns are forecast in one batch, each drawn from
    its own generator seeded by ``seed``: a series' forecast does not depend on the others (and series draw from
    the same uniform numbers, common random numbers whose noise cancels where series are compared)."""
    from .windows import next_timestamps_of

    context = kronos.max_context if context is None else context
    if horizon < 1 or not 1 <= context <= kronos.max_context or samples < 1:
        raise ValueError(
            f"horizon ({horizon}) and samples ({samples}) must be >= 1 and context ({context}) in [1, "
            f"{kronos.max_context}] (the model's max_context)"
        )
    groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for i, part in enumerate(series):
        groups.setdefault((min(len(part), context), tuple(bar_columns(part))), []).append(i)
    device = next(kronos.parameters()).device
    out: dict[int, pd.DataFrame] = {}
    for (length, columns), members in sorted(groups.items()):  # by length, then columns
        times = [pd.DatetimeIndex(series[i]["timestamp"]) for i in members]
        x = torch.as_tensor(np.stack([series[i][list(columns)].to_numpy(np.float64)[-length:] for i in members]))
        stamps = torch.stack([calendar_stamps(t[-length:]) for t in times])  # (B, L, 5)
        nxt = next_timestamps_of(times, horizon, calendar=calendar)
        future = torch.stack([calendar_stamps(t) for t in nxt])  # (B, F, 5)
        # each series its own generator, seeded alike: its forecast is the same alone or in any batch
        generators = [torch.Generator(device).manual_seed(seed) for _ in members]
        draws = kronos.forecast(x, stamps, future, samples=samples, generator=generators)  # (B, S, F, 6)
        mean = draws.mean(1).double().cpu().numpy()  # (B, F, 6)
        for i, stamps_i, values in zip(members, nxt, mean, strict=True):
            rows = pd.DataFrame(values, columns=list(BARS))
            rows.insert(0, "step", np.arange(1, horizon + 1))
            rows.insert(0, "timestamp", stamps_i)
            rows.insert(0, "ticker", str(series[i]["ticker"].iloc[0]))
            out[i] = rows
    return [out[i] for i in range(len(series))]


class _Windows(Dataset):
    """Windows of ``window`` consecutive rows of ``values`` (N, C) and ``stamps`` (N, 5) starting at ``starts``;
    each scores the bars from its row ``scored`` on (the validation windows read earlier bars, unscored)."""

    def __init__(self, values: Tensor, stamps: Tensor, starts: Tensor, scored: Tensor, window: int) -> None:
        self.values, self.stamps, self.starts, self.scored = values, stamps, starts, scored
        self.offsets = torch.arange(window)  # (W,)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitems__(self, indices: list[int]) -> dict[str, Tensor]:
        i = torch.as_tensor(indices, dtype=torch.long)
        rows = self.starts[i][:, None] + self.offsets  # (B, W)
        return {
            "bars": self.values[rows],  # (B, W, C)
            "stamps": self.stamps[rows],  # (B, W, 5)
            "scored": rows[:, 1:] >= self.scored[i][:, None],  # (B, W-1): which predicted bars count
        }

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}


def _collate(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    return batch  # __getitems__ already stacked the batch


def scored_token_loss(logits1: Tensor, logits2: Tensor, s1: Tensor, s2: Tensor, scored: Tensor) -> Tensor:
    """The reference's token loss (the mean of the coarse and the fine cross-entropies, logits ``(B, T, V)``
    against the next tokens ``(B, T)``) over the positions ``scored`` ``(B, T)`` marks."""
    ce1 = F.cross_entropy(logits1.transpose(1, 2), s1, reduction="none")  # (B, T)
    ce2 = F.cross_entropy(logits2.transpose(1, 2), s2, reduction="none")  # (B, T)
    w = scored.to(ce1.dtype)
    return ((ce1 + ce2) * w).sum() / (2 * w.sum().clamp(min=1))


class KronosBarsDataModule(LightningDataModule):
    """Each ticker's raw bars cut into windows for fine-tuning Kronos.

    Args:
        path: the bars: a file, a folder of files or a frame, read as the K-line data module reads them
            (:class:`~.settings.Reading`); they need open, high, low and close, and Kronos reads volume and amount
            where they are present.
        window: bars a window holds (the model reads ``window - 1`` of them; at most its ``max_context + 1``).
        stride: bars between the ends of consecutive windows of a ticker (default: ``window // 4``); a ticker's
            last window ends on its last bar of the split.
        reading: how the bars are read.
        splits: the chronological splits (:class:`~.settings.Splits`): dates common to the panel or fractions of
            each ticker's bars; ``embargo`` bars before each border are left out of the split before it. Training
            windows lie wholly in the training split; a validation window ends in the validation split and reads
            the bars before it, scored on its validation bars alone. The test split is not read.
        batch_size: windows a batch (series a batch in ``predict``).
        num_workers: data-loading worker processes.
        seed: the seed of the training windows' order.
        predict_path: the bars ``predict`` forecasts (a file, a folder or a frame, read as ``path``): the next bars
            of each of its series; ``predict`` reads nothing else.
    """

    def __init__(
        self,
        path: str | Path | pd.DataFrame,
        window: int = 128,
        stride: int | None = None,
        reading: Reading = Reading(),
        splits: Splits = Splits(),
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
        predict_path: str | Path | pd.DataFrame | None = None,
    ) -> None:
        super().__init__()
        if window < 2:
            raise ValueError(f"window ({window}) must be >= 2 bars: one read, one to predict")
        if stride is not None and stride < 1 or batch_size < 1 or num_workers < 0:
            raise ValueError(
                f"stride ({stride}) and batch_size ({batch_size}) must be >= 1, num_workers ({num_workers}) >= 0"
            )
        self.path, self.window, self.stride = path, window, stride or max(1, window // 4)
        self.reading, self.splits = reading, splits
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.predict_path = predict_path
        self.datasets: dict[str, _Windows] = {}
        self.columns: list[str] = []
        #: the series of ``predict_path``, one canonical frame each, in their order (``setup("predict")``)
        self.predict_series: list[pd.DataFrame] = []
        if not isinstance(path, pd.DataFrame) and not isinstance(predict_path, pd.DataFrame):
            self.save_hyperparameters()

    def _source(self) -> str:
        return "the bars" if isinstance(self.path, pd.DataFrame) else str(self.path)

    def _rows(self, times: pd.DatetimeIndex) -> tuple[int, int, int, int]:
        """One ticker's borders at ``times`` (ascending): the training rows ``[lo, train_end)`` and the validation
        rows ``[val, val_end)``, each without the ``embargo`` bars before the next split."""
        s, n = self.splits, len(times)
        if s.by_date:
            lo = 0 if s.train_start is None else int(times.searchsorted(pd.Timestamp(s.train_start)))
            val = int(times.searchsorted(pd.Timestamp(s.val_start)))
            test = int(times.searchsorted(pd.Timestamp(s.test_start)))
        else:
            lo, val = 0, int(n * s.train_fraction)
            test = val + int(n * s.val_fraction)
        return lo, max(lo, val - s.embargo), val, max(val, test - s.embargo)

    def _starts(self, lo: int, hi: int) -> np.ndarray:
        """Starts of the windows that end in rows ``[lo, hi)`` (one every ``stride`` bars, the last on ``hi - 1``)."""
        ends = np.arange(hi - 1, lo - 1, -self.stride)[::-1]
        return ends - self.window + 1

    def setup(self, stage: str | None = None) -> None:
        if stage == "predict":
            self._setup_predict()
            return
        if self.datasets:
            return
        source = self._source()
        bars = read_with_settings(self.path, self.reading, Covariates(), source=source)
        self.columns = bar_columns(bars, source)
        values = bars[self.columns].to_numpy(np.float64)  # finite: the reader refuses (or repairs) the others
        times = pd.DatetimeIndex(bars["timestamp"])
        found: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {"train": ([], []), "val": ([], [])}
        tickers = bars["ticker"].to_numpy()
        edges = np.flatnonzero(np.r_[True, tickers[1:] != tickers[:-1], True])  # each ticker's rows, end to end
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            lo, train_end, val, val_end = self._rows(times[a:b])
            # training windows lie wholly in the training rows; validation windows end in the validation rows and
            # read the bars before them, scored on the validation bars alone
            train = self._starts(lo + self.window - 1, train_end)
            valid = self._starts(val, val_end)
            for split, starts, scored in (("train", train, lo), ("val", valid[valid >= 0], val)):
                if len(starts):
                    found[split][0].append(a + starts)
                    found[split][1].append(np.full(len(starts), a + scored))
        for split in ("train", "val"):
            if not found[split][0]:
                raise ValueError(
                    f"{source}: no ticker has a {self.window}-bar window in the {split} split ({self.splits}); a "
                    "shorter window or other splits"
                )
        v = torch.as_tensor(values, dtype=torch.float32)  # (N, C)
        stamps = calendar_stamps(times)  # (N, 5)
        for split, (starts, scored) in found.items():
            self.datasets[split] = _Windows(
                v, stamps, torch.as_tensor(np.concatenate(starts)), torch.as_tensor(np.concatenate(scored)), self.window
            )

    def _setup_predict(self) -> None:
        from .windows import resolve_path

        if self.predict_path is None:
            raise ValueError("predict needs the bars to forecast: set data.init_args.predict_path")
        if self.predict_series:
            return
        data = self.predict_path
        source = "the predict bars" if isinstance(data, pd.DataFrame) else str(data)
        data = data if isinstance(data, pd.DataFrame) else resolve_path(str(data))
        frame = read_with_settings(data, self.reading, Covariates(), source=source)
        bar_columns(frame, source)
        self.predict_series = [part for _, part in frame.groupby("ticker", sort=False)]

    def predict_dataloader(self) -> DataLoader:
        # a batch is the indices of its series (predict_step reads them from predict_series)
        return DataLoader(range(len(self.predict_series)), batch_size=self.batch_size, collate_fn=list)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        generator = torch.Generator().manual_seed(self.seed) if shuffle else None
        return DataLoader(
            self.datasets[split],
            batch_size=self.batch_size,
            shuffle=shuffle,
            generator=generator,
            num_workers=self.num_workers,
            collate_fn=_collate,
            drop_last=shuffle and len(self.datasets[split]) > self.batch_size,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)


FreezeName = Literal["none", "backbone", "first_n_blocks"]


class KronosTuner(LightningModule):
    """A published Kronos trained on its own objective (see the module's description).

    Args:
        pretrained: the model: a hub name (``NeoQuasar/Kronos-small``), its folder, or a folder ``to_kronos`` wrote.
        tokenizer: its tokenizer (hub name or folder), where ``pretrained`` does not say which.
        lr: the head's peak learning rate (AdamW).
        weight_decay: AdamW's weight decay of the matrices.
        betas: AdamW's betas.
        scheduler: the schedule (:func:`~lightning_tf.training.optim.build_scheduler`).
        warmup_steps: linear warmup steps.
        min_lr: the schedule's floor.
        layer_decay: layer-wise learning-rate decay by the model's depths (embeddings 0, block ``i`` at ``i + 1``,
            the norm, the dependency layer and the heads on top); None: one rate.
        freeze: ``none``; ``backbone`` (the embeddings and blocks fixed: the final norm, the dependency layer and
            the heads train); ``first_n_blocks`` (the embeddings and the first ``freeze_blocks`` blocks).
        freeze_blocks: blocks frozen by ``freeze: first_n_blocks``.
        horizon: bars :meth:`forecast`, ``predict`` and ``serve`` forecast.
        samples: continuations they draw per series (their mean is the forecast).
        kronos: the model's and the tokenizer's configs, ``max_context`` and ``clip``: set from ``pretrained`` when
            it is read; a checkpoint keeps them, so it rebuilds the model without the published files.
    """

    def __init__(
        self,
        pretrained: str,
        tokenizer: str | None = None,
        lr: float = 2e-5,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        scheduler: Literal["cosine", "constant", "noam", "onecycle"] = "cosine",
        warmup_steps: int = 50,
        min_lr: float = 0.0,
        layer_decay: float | None = None,
        freeze: FreezeName = "none",
        freeze_blocks: int = 0,
        horizon: int = 10,
        samples: int = 1,
        kronos: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if freeze not in ("none", "backbone", "first_n_blocks"):
            raise ValueError(f"freeze must be 'none', 'backbone' or 'first_n_blocks', got {freeze!r}")
        if kronos is None:  # read the published files once; the checkpoint keeps what rebuilds the model
            model = Kronos.from_pretrained(pretrained, tokenizer)
            kronos = {
                "model": asdict(model.model.config),
                "tokenizer": asdict(model.tokenizer.config),
                "max_context": model.max_context,
                "clip": model.clip,
            }
        else:
            model = Kronos(
                KronosConfig(**kronos["model"]),
                KronosTokenizerConfig(**kronos["tokenizer"]),
                max_context=int(kronos["max_context"]),
                clip=float(kronos["clip"]),
            )
        self.save_hyperparameters(ignore=["kronos"])
        self.hparams["kronos"] = kronos
        self.kronos = model.train()  # a published model loads in eval mode; Lightning keeps each module's mode
        if not 1 <= horizon <= model.max_context or samples < 1:
            raise ValueError(
                f"horizon ({horizon}) must be in [1, {model.max_context}] (the model's max_context) and samples "
                f"({samples}) >= 1"
            )
        n_layers = len(model.model.blocks)
        if freeze == "first_n_blocks" and not 0 <= freeze_blocks <= n_layers:
            raise ValueError(f"freeze_blocks ({freeze_blocks}) must be in [0, {n_layers}] (the model's blocks)")
        self.kronos.tokenizer.requires_grad_(False)  # it makes the inputs and the targets
        for name, p in self.kronos.model.named_parameters():
            if freeze == "backbone":
                p.requires_grad_(name.startswith(("norm.", "dep_layer.", "head.")))  # what sits above the blocks
            elif freeze == "first_n_blocks":
                p.requires_grad_(model.model.layer_depth(name) > freeze_blocks)

    @classmethod
    def from_model(cls, kronos: Kronos, source: str = "", **kwargs: Any) -> KronosTuner:
        """A tuner of a copy of the loaded ``kronos`` (``source`` names where it came from)."""
        config = {
            "model": asdict(kronos.model.config),
            "tokenizer": asdict(kronos.tokenizer.config),
            "max_context": kronos.max_context,
            "clip": kronos.clip,
        }
        tuner = cls(source, kronos=config, **kwargs)
        tuner.kronos.load_state_dict(kronos.state_dict())
        return tuner

    def forecast(self, bars: pd.DataFrame | str | Path, **kwargs: Any) -> pd.DataFrame:
        """The forecast of the next ``horizon`` bars (the model's, unless given) of every series of ``bars`` by the
        tuned model, ``samples`` draws averaged: :func:`forecast_bars`, whose keyword arguments it takes."""
        kwargs = {"horizon": self.hparams.horizon, "samples": self.hparams.samples, **kwargs}
        with evaluating(self):
            return forecast_bars(self.kronos, bars, **kwargs)

    def forecast_series(self, series: Sequence[pd.DataFrame], **kwargs: Any) -> list[pd.DataFrame]:
        """:meth:`forecast` of series the bar reader has read (:func:`forecast_series`): one table each."""
        kwargs = {"horizon": self.hparams.horizon, "samples": self.hparams.samples, **kwargs}
        with evaluating(self):
            return forecast_series(self.kronos, series, **kwargs)

    def predict_step(self, batch: list[int], batch_idx: int) -> pd.DataFrame:
        """The forecast (:meth:`forecast`) of the predict bars' series ``batch`` (indices into the data module's
        ``predict_series``): each series what :meth:`forecast` gives it, whatever batch it is in."""
        series = self.trainer.datamodule.predict_series
        return pd.concat(self.forecast_series([series[i] for i in batch]), ignore_index=True)

    def configure_callbacks(self) -> list[Any]:
        """A :class:`KronosWriter` for ``predict``, unless the trainer already has a prediction writer."""
        from lightning.pytorch.callbacks import BasePredictionWriter

        trainer = attached_trainer(self)
        callbacks = trainer.callbacks if trainer is not None else []
        return [] if any(isinstance(cb, BasePredictionWriter) for cb in callbacks) else [KronosWriter()]

    def setup(self, stage: str) -> None:
        window = getattr(getattr(self.trainer, "datamodule", None), "window", None)
        if window is not None and window - 1 > self.kronos.max_context:
            raise ValueError(
                f"data window ({window}) reads {window - 1} bars a window; the model reads at most max_context "
                f"({self.kronos.max_context}): window <= {self.kronos.max_context + 1}"
            )

    def _tokens(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The windows' token pairs ``(B, W)`` each, standardised and clipped as :meth:`Kronos.forecast` does."""
        x = self.kronos.complete_bars(batch["bars"])  # (B, W, 6)
        mean = x.double().mean(1, keepdim=True).float()  # (B, 1, 6)
        std = x.double().std(1, unbiased=False, keepdim=True).float()  # (B, 1, 6)
        x = ((x - mean) / (std + 1e-5)).clamp(-self.kronos.clip, self.kronos.clip)
        with torch.no_grad(), evaluating(self.kronos.tokenizer):  # fixed: no dropout in what it encodes
            return self.kronos.tokenizer.encode(x)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        s1, s2 = self._tokens(batch)  # (B, W) each
        logits1, logits2 = self.kronos.model(s1[:, :-1], s2[:, :-1], batch["stamps"][:, :-1])  # coarse drawn
        loss = scored_token_loss(logits1, logits2, s1[:, 1:], s2[:, 1:], batch["scored"])
        self.log("train/loss", loss, prog_bar=True, batch_size=s1.shape[0])
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        s1, s2 = self._tokens(batch)  # (B, W) each
        model = self.kronos.model
        h = model.hidden(s1[:, :-1], s2[:, :-1], batch["stamps"][:, :-1])  # (B, W-1, D)
        logits2 = model.s2_logits(h, s1[:, 1:], causal=True)  # the true coarse token, nothing after it
        loss = scored_token_loss(model.s1_logits(h), logits2, s1[:, 1:], s2[:, 1:], batch["scored"])
        self.log("val/loss", loss, prog_bar=True, batch_size=s1.shape[0], sync_dist=True)
        return loss

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW over the model's trainable parameters (the tokenizer is fixed) and the ``scheduler``."""
        model = self.kronos.model
        return configure_adamw(
            model,
            self.hparams,
            self.trainer.estimated_stepping_batches,
            layer_of=model.layer_depth,
            n_depths=model.n_depths,
        )


class KronosWriter(BasePredictionWriter):
    """Writes the forecasts of :meth:`KronosTuner.predict_step`: every process's gathered, in the predict bars'
    order, once on global rank 0, as one CSV (``ticker, timestamp, step, open, high, low, close, volume,
    amount``).

    Args:
        output_file: the CSV (parent folders are created); default: ``forecast.csv`` in the run directory
            (``forecast-1.csv``, ... when an earlier predict left that name).
    """

    def __init__(self, output_file: str | None = None) -> None:
        super().__init__(write_interval="epoch")
        self.output_file = output_file

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
        from lightning_tf.training import gather_predictions, prediction_path

        parts = gather_predictions(predictions)  # every process's batches, in rank order
        if not trainer.is_global_zero:
            return
        frames = [f for part in parts for f in part]
        if not frames:
            return
        table = pd.concat(frames, ignore_index=True)
        order = {str(s["ticker"].iloc[0]): i for i, s in enumerate(trainer.datamodule.predict_series)}
        table = table.sort_values("ticker", key=lambda t: t.map(order), kind="stable").drop_duplicates(
            ["ticker", "step"]
        )  # a process's repeat that fills its share is dropped
        path = prediction_path(trainer, self.output_file, "forecast.csv")
        path.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False)
        print(f"wrote the next {int(table['step'].max())} bars of {len(order)} series to {path}")
