"""What the text task shows on its dashboards: the seeded draw of sample translations across source
lengths, and cross-attention heatmaps (one panel per (layer, head), target tokens down, source tokens
across)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

__all__ = ["cross_attention_figure", "draw_samples", "figure_to_array"]


def draw_samples(lengths: Sequence[int], n: int, seed: int, epoch: int) -> list[int]:
    """Indices of ``n`` items drawn across lengths: the items, sorted by length (then index), are cut
    into ``n`` consecutive runs of nearly equal size and one item is drawn from each run, by a generator
    seeded with ``seed`` and ``epoch``: the same seed and epoch draw the same items, another epoch others.

    Args:
        lengths: the length of every item.
        n: how many to draw; all items (in length order) when there are no more than ``n``.
        seed: the run's seed.
        epoch: the epoch the draw is for.

    Returns:
        The drawn indices, shortest item first.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    if n >= len(order):
        return order
    rng = random.Random(f"{seed}/{epoch}")  # a str seed is hashed (sha512): no two (seed, epoch) collide
    bounds = [k * len(order) // n for k in range(n + 1)]  # every run holds at least one item, as n < len
    return [order[rng.randrange(bounds[k], bounds[k + 1])] for k in range(n)]


def cross_attention_figure(
    weights: Sequence[Tensor], src_tokens: Sequence[str], tgt_tokens: Sequence[str], title: str = ""
) -> Figure:
    """A layer x head grid of heatmaps.

    Args:
        weights: per decoder layer, the cross-attention of one sentence ``(H, T, S)``.
        src_tokens: the S source token strings (x axis).
        tgt_tokens: the T target token strings (y axis): the token each row predicts.
        title: figure title.
    """
    n_layers, n_heads = len(weights), weights[0].shape[0]
    T, S = weights[0].shape[1:]
    cell = 0.22
    fig = Figure(figsize=(max(2.5, S * cell) * n_heads + 1, max(2.5, T * cell) * n_layers + 1), layout="constrained")
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    for i, layer in enumerate(weights):
        for h in range(n_heads):
            ax = axes[i][h]
            ax.imshow(layer[h].float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_title(f"layer {i} head {h}", fontsize=8)
            ax.set_xticks(range(S), list(src_tokens), rotation=90, fontsize=6)
            ax.set_yticks(range(T), list(tgt_tokens), fontsize=6)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def figure_to_array(fig: Figure) -> np.ndarray:
    """Render a figure (Agg) to an RGB array ``(height, width, 3)``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
