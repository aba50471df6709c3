"""Learning-rate schedules as multipliers of the peak rate, for ``torch.optim.lr_scheduler.LambdaLR``."""

from __future__ import annotations

import math

__all__ = ["warmup_cosine"]


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, floor: float = 0.0) -> float:
    """Linear warmup to 1.0 over ``warmup_steps`` (``(step + 1) / warmup_steps``), then cosine decay
    to ``floor`` at ``total_steps``, where it stays."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min((step - warmup_steps) / max(total_steps - warmup_steps, 1), 1.0)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
