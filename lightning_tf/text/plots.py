"""What the text task shows on its dashboards: the seeded draw of sample translations across source
lengths, and cross-attention heatmaps (one panel per (layer, head), target tokens down, source tokens
across)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

if TYPE_CHECKING:
    from lightning.pytorch.loggers import WandbLogger

    from .tokenizer import TextTokenizer

__all__ = [
    "cross_attention_figure",
    "draw_samples",
    "figure_to_array",
    "greedy_attention_figure",
    "log_samples",
    "token_strings",
]


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


def log_samples(
    logger: WandbLogger,
    stage: str,
    candidates: Sequence[tuple[list[int], str, str]],
    *,
    n: int,
    seed: int,
    epoch: int,
    step: int,
    pad_id: int,
    translate: Callable[[Tensor], list[str]],
    attention_figure: Callable[[Tensor, str], Figure],
) -> None:
    """Log to wandb the sample table, ``n`` sentences drawn across source lengths from this epoch's
    ``candidates`` (seeded by ``seed`` and ``epoch``, so every epoch shows others), translated now, and the
    cross-attention of the drawn sentence nearest the epoch's median length.

    Args:
        logger: the run's wandb logger.
        stage: the log keys' prefix (``val``, ``test``).
        candidates: ``(source ids + EOS, source text, reference)`` of every sentence of the epoch.
        n: sentences in the table.
        seed: the run's sample seed.
        epoch: the epoch the draw is for (and the figure's title).
        step: the global step the image is logged at.
        pad_id: the padding id of the source batch handed to ``translate``.
        translate: source ids ``(n, S)`` -> one translation each.
        attention_figure: source ids ``(S,)`` and a title -> the cross-attention figure of that sentence.
    """
    import torch

    lengths = [len(ids) for ids, _, _ in candidates]
    chosen = draw_samples(lengths, n, seed, epoch)
    if chosen:
        width = max(lengths[i] for i in chosen)
        src = torch.full((len(chosen), width), pad_id, dtype=torch.long)  # (n, S)
        for b, i in enumerate(chosen):
            src[b, : lengths[i]] = torch.tensor(candidates[i][0])
        hyps = translate(src)
        rows = [[candidates[i][1], candidates[i][2], h] for i, h in zip(chosen, hyps, strict=True)]
        logger.log_table(key=f"{stage}/samples", columns=["source", "reference", "translation"], data=rows)
    median = sorted(lengths)[len(lengths) // 2]
    # a typical sentence, not the shortest: the drawn one (else any) nearest the median length
    shown = min(chosen or range(len(lengths)), key=lambda i: (abs(lengths[i] - median), i))
    fig = attention_figure(torch.tensor(candidates[shown][0]), f"{stage} epoch {epoch}")
    logger.log_image(key=f"{stage}/cross_attention", images=[figure_to_array(fig)], step=step)


def greedy_attention_figure(
    src: Tensor,
    generate: Callable[[Tensor], Tensor],
    cross_attention: Callable[[Tensor, Tensor], list[Tensor]],
    tokenizer: TextTokenizer | None,
    *,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    title: str = "",
) -> Figure:
    """The cross-attention of a greedy translation of one sentence ``src (S,)``, through its first EOS, padding
    dropped (:meth:`Seq2SeqTransformer.attention_figure <lightning_tf.text.Seq2SeqTransformer.attention_figure>`).

    Args:
        src: source ids ``(S,)`` (+ EOS, maybe padded), on the device of ``generate``.
        generate: greedy decoding, source ids ``(1, S)`` -> ids ``(1, T')``.
        cross_attention: teacher-forced ``(src (1, S), tgt (1, T))`` -> per decoder layer ``(1, H, T, S)``.
        tokenizer: names the tokens on the axes (None: the ids).
        pad_id: the padding id dropped from ``src``.
        bos_id: the decoder's start token.
        eos_id: the end-of-sentence id the translation is cut after.
        title: figure title.
    """
    import torch

    src = src[src != pad_id][None]  # (1, S): the real tokens only
    hyp = generate(src)[0]  # (T',): the translation's ids
    ends = (hyp == eos_id).nonzero()
    hyp = hyp[: int(ends[0]) + 1 if len(ends) else len(hyp)][None]  # (1, T): through the first EOS
    tgt = torch.cat((torch.full_like(hyp[:, :1], bos_id), hyp[:, :-1]), dim=1)  # (1, T): BOS + all but the last
    weights = [w[0] for w in cross_attention(src, tgt)]  # L x (H, T, S)
    src_tokens, tgt_tokens = (token_strings(tokenizer, i, s) for i, s in ((src[0], "src"), (hyp[0], "tgt")))
    return cross_attention_figure(weights, src_tokens, tgt_tokens, title=title)


def token_strings(tokenizer: TextTokenizer | None, ids: Tensor, side: Literal["src", "tgt"]) -> list[str]:
    """The tokens of ``ids`` (S,) as strings (special tokens named; the ids themselves without a tokenizer)."""
    if tokenizer is None:
        return [str(i) for i in ids.tolist()]
    specials = {tokenizer.bos_id: "<s>", tokenizer.pad_id: "<pad>", tokenizer.eos_id: "</s>"}
    return [specials.get(i) or tokenizer.id_to_token(i, side) or str(i) for i in ids.tolist()]
