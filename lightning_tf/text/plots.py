"""Cross-attention heatmaps: one panel per (layer, head), target tokens down, source tokens across."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

__all__ = ["cross_attention_figure", "figure_to_array"]


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
