"""When training starts: the closed-form fits of the network's linear path (:mod:`.networks.linear`) and of
the linear baseline (:mod:`.baselines`), from the trainer's loaders read in order.

Every process reads all windows in order, so all fit the same weights. The function receives the parts it
fits and the loaders; it knows nothing of the LightningModule that calls it.
"""

from __future__ import annotations

import logging
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from .evaluation.baselines import LinearBaseline
from .networks import RIDGES, ForecastNet, LinearFit
from .windows import in_order, xy_pairs

__all__ = ["fit_linear_parts"]

log = logging.getLogger(__name__)


def fit_linear_parts(
    net: ForecastNet,
    baseline: LinearBaseline | None,
    train_loader: Any,
    val_loaders: Any,
    *,
    resumed: bool,
    ridge: float | None,
    blocks: int,
    select_se: float,
) -> LinearFit | None:
    """Fit ``net``'s linear path and ``baseline`` on the training windows, once: closed form on every training
    window, the ridge (and the path's input and pooling, the baseline's variant) chosen on the validation
    windows when there are any. A fitted path is kept; a fitted baseline is kept when ``resumed``.

    Args:
        net: the network whose linear path is fit (if it has one not fitted yet).
        baseline: the linear baseline, or None.
        train_loader: the trainer's training loader (read in order, whatever its sampler).
        val_loaders: the trainer's validation loader(s), or None.
        resumed: whether the run resumes from a checkpoint.
        ridge: the path's ridge penalty; None: chosen on validation among :data:`~.networks.RIDGES`.
        blocks: contiguous blocks of validation windows for the standard error of a choice.
        select_se: standard errors a richer map must win by (0: the lowest validation error).

    Returns:
        What the path's fit chose (None when the path was not fit).
    """
    path = net.linear
    fit_path = path is not None and not bool(path.fitted)
    fit_base = baseline is not None and not (baseline.fitted and resumed)
    if not (fit_path or fit_base):
        return None
    train = in_order(train_loader)
    if train is None:
        log.info("linear fits skipped: the training loader has no dataset to read in order")
        return None
    val = in_order(val_loaders)
    fit = None
    if fit_path:
        val_pairs = None if val is None else (lambda: xy_pairs(val))
        fit = net.fit_linear(
            lambda: xy_pairs(train),
            val_pairs,
            RIDGES if ridge is None else (float(ridge),),
            blocks=blocks,
            select_se=select_se,
        )
        val_mse = f", validation MSE {fit.val_mse:.5g}" if fit.val_mse is not None else ""
        rule = (
            ""
            if fit.lowest is None
            else (
                f"; {fit.lowest} validated lowest ({fit.lowest_val_mse:.5g}) but not by more than "
                f"{select_se:g} standard error, so the simpler map is kept"
            )
        )
        rank_zero_info(
            f"linear path fit in closed form on the training windows: {fit.input} input, {fit.form}, "
            f"{fit.pooling}, ridge {fit.ridge:g} ({fit.dof:.1f} degrees of freedom), training MSE "
            f"{fit.train_mse:.5g}{val_mse}{rule}"
        )
    if fit_base:
        assert baseline is not None
        baseline.target_channels = net.target_channels
        baseline.fit(xy_pairs(train), None if val is None else xy_pairs(val), blocks=blocks, select_se=select_se)
        log.info("linear baseline fit on the training windows: %s", baseline.describe())
    return fit
