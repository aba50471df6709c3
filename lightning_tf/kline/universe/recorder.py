"""What one walk-forward fold keeps (:class:`FoldRecorder`): its test forecasts beside the baselines' as
``predictions.parquet``, and the tested checkpoint as ``model.ckpt``, in the fold's folder."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from .forecasts import fold_predictions
from .kronos import KronosColumn, finetune_kronos, kronos_column
from .predictions import arrange

__all__ = ["MODEL", "PREDICTIONS", "FoldRecorder"]

#: a fold's (and the gathered walk-forward's) predictions frame
PREDICTIONS = "predictions.parquet"
#: a fold's tested checkpoint
MODEL = "model.ckpt"


class FoldRecorder(Callback):
    """What one fold keeps: warm-starts the model from the previous fold's checkpoint when training starts
    (``warm_from``), and when the test on the tested checkpoint ends, writes the test windows' forecasts of the
    model (:meth:`~lightning_tf.kline.KLineForecaster.window_forecasts`), LightGBM on the same inputs and momentum
    (:func:`~.forecasts.fold_predictions`) to ``folder/predictions.parquet`` and the tested checkpoint to
    ``folder/model.ckpt``.

    Args:
        folder: the fold's folder.
        warm_from: a checkpoint whose weights start training (the linear path is fit again), or None.
        lightgbm: also fit LightGBM on the fold's windows.
        keep_model: copy the tested checkpoint into the fold's folder (a fold that trains); a fold that only tests
            another fold's or a pretrained checkpoint keeps none of its own.
        kronos: also forecast with a published Kronos from the raw bars (the column ``kronos``), or None.
    """

    #: the Kronos model of the process, loaded once for all its folds
    _kronos: dict[KronosColumn, Any] = {}

    def __init__(
        self,
        folder: Path,
        warm_from: Path | None = None,
        lightgbm: bool = True,
        keep_model: bool = True,
        kronos: KronosColumn | None = None,
    ) -> None:
        self.folder = folder
        self.kronos = kronos
        self.warm_from = warm_from
        self.lightgbm = lightgbm
        self.keep_model = keep_model
        self.notes: list[str] = []
        self.test_summary: dict[str, Any] = {}
        self.residual_kept = False

    @classmethod
    def preload(cls, kronos: KronosColumn) -> Any:
        """The Kronos model of ``kronos``, loaded on first use and kept for the process's later folds."""
        if kronos not in cls._kronos:
            cls._kronos[kronos] = kronos.load()
        return cls._kronos[kronos]

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.warm_from is None:
            return
        state = torch.load(self.warm_from, map_location=pl_module.device, weights_only=True)["state_dict"]
        pl_module.load_state_dict(state)
        linear = getattr(getattr(pl_module, "net", None), "linear", None)
        if linear is not None:
            linear.fitted.fill_(False)  # the closed form is fit again on this fold's training windows

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        dm = trainer.datamodule
        # mapped back with the data's scaling: a model tested zero-shot keeps its own, of the data it was trained on
        model = pl_module.window_forecasts(dm.datasets["test"], dm.data_scale)
        kronos = None if self.kronos is None else (self.preload(self.kronos), self.kronos)
        frame, notes = fold_predictions(
            model,
            dm.bars,
            dm.datasets,
            dm.data_scale,
            lightgbm=self.lightgbm,
            kronos=kronos,
            calendar=dm.covariates.calendar,
        )
        self.notes += notes
        self.folder.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(self.folder / PREDICTIONS, index=False)
        best = getattr(trainer.checkpoint_callback, "best_model_path", "") if trainer.checkpoint_callback else ""
        keep = self.folder / MODEL
        if self.keep_model and best and Path(best).exists() and Path(best).resolve() != keep.resolve():
            shutil.copyfile(best, keep)
        self.test_summary = dict(getattr(pl_module, "test_summary", {}) or {})
        self.residual_kept = bool(getattr(pl_module, "residual_kept", False))

    def after_run(self, datamodule: Any) -> None:
        """What follows the fold's run, on rank zero: with ``kronos.finetune_steps``, Kronos fine-tuned on the
        fold's training bars (:func:`~.kronos.finetune_kronos`, its best weights in ``folder/kronos``) and its
        forecasts added to the fold's predictions as ``kronos_tuned``."""
        if self.kronos is None or not self.kronos.finetune_steps:
            return
        dm, path = datamodule, self.folder / PREDICTIONS
        tuned = finetune_kronos(self.preload(self.kronos), dm.bars, dm.splits, self.kronos, self.folder / "kronos")
        frame = pd.read_parquet(path)
        column, notes = kronos_column(frame, dm.bars, tuned, self.kronos, dm.covariates.calendar, "kronos_tuned")
        frame["kronos_tuned"] = column
        arrange(frame).to_parquet(path, index=False)
        self.notes += notes
