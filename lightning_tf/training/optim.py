"""Training plumbing shared by every LightningModule of the package: plain functions, no base class.

* :func:`parameter_groups`: one weight-decay rule for every task. Weight matrices decay (every
  parameter with two or more dimensions, as nanoGPT's ``configure_optimizers``); biases, norm
  weights, LayerScale and the parameters a module lists (its ``no_weight_decay()`` names, as timm's
  models list position embeddings and class tokens) do not.
  With ``layer_decay`` (BEiT, Bao et al. 2021; timm's ``param_groups_layer_decay``), each group also
  carries a rate scale: the layer at depth ``d`` of ``n`` trains at ``layer_decay ** (n - d)`` times the
  head's rate (the embeddings deepest, at depth 0).
* :func:`build_scheduler`: one set of learning-rate schedules (``noam``, ``cosine``, ``onecycle``,
  ``decay``, ``constant``) with one argument name (``scheduler``) and one warmup rule for every
  task: linear warmup over ``min(warmup_steps, total_steps // 2)`` optimizer steps (at least 1;
  the whole ``warmup_steps`` when the schedule is not given the run's length: ``noam`` and
  ``constant`` need not know it, and asking the trainer for it in ``configure_optimizers`` builds
  the training loader before a checkpoint's loader position is restored). Schedules are multiples of the peak rate
  (``torch.optim.lr_scheduler.LambdaLR``), stepped every optimizer step (``decay``: every epoch);
  their step count is checkpointed, so a resumed run continues the schedule where it stopped.

The schedules follow torchtune's ``training/lr_schedulers.py``: functions of the step, outside the
modules.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

if TYPE_CHECKING:
    pass

__all__ = [
    "SchedulerName",
    "build_scheduler",
    "configure_adamw",
    "constant_with_warmup",
    "noam",
    "parameter_groups",
    "patchtst_decay",
    "warmup_cosine",
    "warmup_steps_for",
]

SchedulerName = Literal["noam", "cosine", "onecycle", "decay", "constant"]


# ---------------------------------------------------------------------------------------- decay


def parameter_groups(
    module: nn.Module,
    weight_decay: float,
    layer_decay: float | None = None,
    layer_of: Callable[[str], int] | None = None,
    n_depths: int | None = None,
    lr: float | None = None,
) -> list[dict[str, Any]]:
    """AdamW parameter groups of ``module``: weight matrices with ``weight_decay``, everything else
    (biases, norm weights, LayerScale, and the names ``module.no_weight_decay()`` returns, if the
    module has that method) without.

    A name listed by ``no_weight_decay()`` matches a parameter whose full name equals it or ends in
    ``.<name>`` (``"pos_embed"`` matches ``net.pos_embed``). Only trainable parameters are grouped
    (frozen ones are left out); an empty group is left out.

    Args:
        module: the module whose parameters are grouped.
        weight_decay: the weight decay of the matrices.
        layer_decay: layer-wise learning-rate decay; None (or 1.0) gives every parameter the same rate.
        layer_of: the depth of a parameter name, 0 (the embeddings) to ``n_depths`` (the head); needed
            with ``layer_decay``.
        n_depths: the head's depth.
        lr: the head's learning rate; each group's ``lr`` is ``lr * lr_scale``, its ``lr_scale``
            ``layer_decay ** (n_depths - depth)`` (a group key schedulers and loggers can read).
    """
    listed = set(module.no_weight_decay()) if callable(getattr(module, "no_weight_decay", None)) else set()
    decayed = layer_decay is not None and layer_decay != 1.0
    if decayed:
        if not 0.0 < layer_decay <= 1.0:
            raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
        if layer_of is None or n_depths is None:
            raise ValueError("layer_decay needs the model's layer depths (layer_of and n_depths)")
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    seen: set[int] = set()
    for name, p in module.named_parameters():
        if not p.requires_grad or id(p) in seen:  # a tied weight appears once; a frozen one not at all
            continue
        seen.add(id(p))
        exempt = p.ndim < 2 or any(name == n or name.endswith(f".{n}") for n in listed)
        depth = layer_of(name) if decayed else 0  # type: ignore[misc]
        group = groups.get((depth, exempt))
        if group is None:
            group = {"params": [], "weight_decay": 0.0 if exempt else weight_decay}
            if decayed:
                scale = float(layer_decay) ** (n_depths - depth)  # type: ignore[operator]
                group["lr_scale"] = scale
                if lr is not None:
                    group["lr"] = lr * scale
            groups[(depth, exempt)] = group
        group["params"].append(p)
    # the order of old: decayed matrices first, then the exempt parameters; deepest layer first within each
    return [groups[k] for k in sorted(groups, key=lambda k: (k[1], k[0]))]


# ------------------------------------------------------------------------------------- schedules


def noam(step: int, warmup_steps: int) -> float:
    """Inverse-square-root schedule with linear warmup (Vaswani et al. 2017, eq. 3), as a multiple of
    the peak: ``min((step + 1) / warmup, sqrt(warmup / (step + 1)))``; the peak 1.0 is reached at
    ``step = warmup - 1``. With a peak of ``d_model^-0.5 * warmup^-0.5`` it is the paper's rate."""
    s = step + 1
    return min(s / warmup_steps, math.sqrt(warmup_steps / s))


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, floor: float = 0.0) -> float:
    """Linear warmup to 1.0 over ``warmup_steps`` (``(step + 1) / warmup_steps``), then cosine decay
    to ``floor`` at ``total_steps``, where it stays."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min((step - warmup_steps) / max(total_steps - warmup_steps, 1), 1.0)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def constant_with_warmup(step: int, warmup_steps: int) -> float:
    """Linear warmup to 1.0 over ``warmup_steps``, then flat (no warmup when it is 0)."""
    return 1.0 if step >= warmup_steps else (step + 1) / warmup_steps


def patchtst_decay(epoch: int) -> float:
    """PatchTST's default ("type3"): the peak for the first 3 epochs, then x0.9 per epoch."""
    return 0.9 ** max(epoch - 2, 0)


def warmup_steps_for(warmup_steps: int, total_steps: int | None) -> int:
    """The one warmup rule: ``warmup_steps``, at most half of a known run length (a short run still
    reaches its peak and decays)."""
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps ({warmup_steps}) must be >= 0")
    if total_steps is None or warmup_steps == 0:
        return warmup_steps
    return min(warmup_steps, max(total_steps // 2, 1))  # a 1-step run (fast_dev_run) still warms up over 1


def _finite_steps(estimated: float | int | None) -> int | None:
    if estimated is None or not math.isfinite(float(estimated)):
        return None
    return max(int(estimated), 1)


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    scheduler: SchedulerName,
    *,
    lr: float,
    warmup_steps: int = 0,
    total_steps: float | int | None = None,
    min_lr: float = 0.0,
) -> dict[str, Any] | None:
    """The ``lr_scheduler`` entry of ``configure_optimizers`` for the schedule named ``scheduler``.

    Args:
        optimizer: the optimizer whose rate is scheduled (its groups start at ``lr``).
        scheduler: ``noam`` (linear warmup, then inverse square root; needs ``warmup_steps >= 1``),
            ``cosine`` (linear warmup, cosine decay to ``min_lr`` at ``total_steps``), ``onecycle``
            (OneCycleLR: 30% rise to ``lr``, then annealing), ``decay`` (PatchTST: ``lr`` for 3
            epochs, then x0.9 per epoch) or ``constant`` (linear warmup, then flat).
        lr: the peak rate.
        warmup_steps: optimizer steps of linear warmup, at most half of ``total_steps``.
        total_steps: the run's optimizer steps (``trainer.estimated_stepping_batches``); needed by
            ``cosine`` and ``onecycle``; None or infinite when unknown.
        min_lr: the rate ``cosine`` ends at.

    Returns:
        ``{"scheduler": ..., "interval": "step" | "epoch", "frequency": 1}``, or None for
        ``constant`` without warmup (nothing to schedule).
    """
    total = _finite_steps(total_steps)
    warmup = warmup_steps_for(warmup_steps, total)
    interval = "step"
    if scheduler in ("cosine", "onecycle") and total is None:
        raise ValueError(f"scheduler '{scheduler}' needs the run's length: set trainer.max_steps or trainer.max_epochs")
    if scheduler == "noam":
        if warmup < 1:
            raise ValueError(f"scheduler 'noam' needs warmup_steps >= 1 (got {warmup_steps}, run of {total} steps)")
        sched: Any = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(noam, warmup_steps=warmup))
    elif scheduler == "cosine":
        floor = min(min_lr / lr, 1.0) if lr > 0 else 0.0
        sched = torch.optim.lr_scheduler.LambdaLR(
            optimizer, partial(warmup_cosine, warmup_steps=warmup, total_steps=total, floor=floor)
        )
    elif scheduler == "onecycle":
        # each group's own peak (layer-wise decay gives the groups different rates)
        peaks = [g.get("lr", lr) for g in optimizer.param_groups]
        sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=peaks, total_steps=total, pct_start=0.3)
    elif scheduler == "decay":
        sched, interval = torch.optim.lr_scheduler.LambdaLR(optimizer, patchtst_decay), "epoch"
    elif scheduler == "constant":
        if warmup == 0:
            return None
        sched = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(constant_with_warmup, warmup_steps=warmup))
    else:
        raise ValueError(f"unknown scheduler {scheduler!r}; expected noam, cosine, onecycle, decay or constant")
    return {"scheduler": sched, "interval": interval, "frequency": 1}


def configure_adamw(
    module: nn.Module,
    hp: Mapping[str, Any],
    total_steps: int | float | None,
    eps: float = 1e-8,
    layer_of: Callable[[str], int] | None = None,
    n_depths: int | None = None,
) -> dict[str, Any]:
    """What ``configure_optimizers`` returns for hyperparameters ``hp`` naming ``lr``, ``weight_decay``,
    ``betas``, ``scheduler``, ``warmup_steps`` and ``min_lr`` (and optionally ``layer_decay``): AdamW over
    :func:`parameter_groups` of ``module``'s trainable parameters and :func:`build_scheduler` over
    ``total_steps`` (the Trainer's ``estimated_stepping_batches``, say; None: unknown), with AdamW's
    ``eps``. ``layer_of`` and ``n_depths`` give the depths layer-wise decay needs."""
    groups = parameter_groups(
        module, hp["weight_decay"], hp.get("layer_decay"), layer_of=layer_of, n_depths=n_depths, lr=hp["lr"]
    )
    if not groups:
        raise ValueError("every parameter is frozen: nothing to train (freeze less)")
    optimizer = torch.optim.AdamW(groups, lr=hp["lr"], betas=tuple(hp["betas"]), eps=eps)
    floor = hp["min_lr"]
    scheduler = build_scheduler(
        optimizer,
        hp["scheduler"],
        lr=hp["lr"],
        warmup_steps=hp["warmup_steps"],
        total_steps=total_steps,
        min_lr=floor,
    )
    return {"optimizer": optimizer} if scheduler is None else {"optimizer": optimizer, "lr_scheduler": scheduler}
