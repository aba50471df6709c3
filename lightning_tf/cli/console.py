"""What the ``lightning-tf`` command prints: one compact table of metrics, and the library messages it keeps
quiet. Standard library only."""

from __future__ import annotations

import logging
import math
import re
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

__all__ = ["EVAL_WARNINGS", "LOG_NOISE", "WARNINGS", "metrics_table", "quiet", "quiet_eval"]


# ------------------------------------------------------------------------------------ quiet console
# Each entry: (message regex, module regex). Only messages nobody running the command can act on:
# what a user can fix (a small dataset against log_every_n_steps, few dataloader workers) still shows.

#: warnings silenced while the command runs
WARNINGS: tuple[tuple[str, str], ...] = (
    # Lightning calls a torch API that torch deprecated (`LeafSpec`) on every fit, test and predict;
    # only a Lightning release can change it
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"lightning\.pytorch\."),
    # LightningCLI built from Python (the tour, the tests) while sys.argv holds the calling command's
    # own arguments: intended here, and said once per task
    (r"LightningCLI's args parameter is intended to run from within Python", r"lightning\.pytorch\.cli"),
    # the model summary sizes weights at 32 bits under bf16-/16-mixed precision, which is right: mixed
    # precision keeps the weights in float32
    (r"Precision [\w-]+ is not supported by the model summary", r"lightning\.pytorch\."),
)

#: warnings silenced while validate, test or predict runs from a checkpoint: the state of the
#: callbacks that wrote it (checkpoint folder, best scores, RNG states) only matters to resume training
EVAL_WARNINGS: tuple[tuple[str, str], ...] = (
    (r"The dirpath has changed from", r"lightning\.pytorch\.callbacks\.model_checkpoint"),
    (r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint", r"lightning\.pytorch\."),
)

#: (logger, message prefix) of info lines dropped while the command runs
LOG_NOISE: tuple[tuple[str, str], ...] = (
    # advertisements for Lightning's cloud products, on every run
    ("lightning.pytorch.utilities.rank_zero", "💡 Tip:"),
    ("lightning.fabric.utilities.rank_zero", "💡 Tip:"),
    # no TPU is no news (the GPU line stays: it says where the run computes)
    ("lightning.pytorch.utilities.rank_zero", "TPU available: False"),
    # an internal step of the learning-rate schedule's setup
    ("lightning.pytorch.utilities.rank_zero", "Loading `train_dataloader` to estimate number of stepping batches"),
    # the seed is in the run's config.yaml; the line would also precede every one-line argument error
    ("lightning.fabric.utilities.seed", "Seed set to"),
)


class _DropPrefixes(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


@contextmanager
def quiet() -> Iterator[None]:
    """Run a command without the library messages listed in :data:`WARNINGS` and :data:`LOG_NOISE`.
    The filters are narrow (message and module) and end with the block, so a Python session that
    runs the CLI keeps its own warning settings."""
    filters: dict[str, _DropPrefixes] = {}
    for name, prefix in LOG_NOISE:
        filters.setdefault(name, _DropPrefixes(()))
        filters[name].prefixes += (prefix,)
    with warnings.catch_warnings():
        for message, module in WARNINGS:
            warnings.filterwarnings("ignore", message=message, module=module)
        for name, log_filter in filters.items():
            logging.getLogger(name).addFilter(log_filter)
        try:
            yield
        finally:
            for name, log_filter in filters.items():
                logging.getLogger(name).removeFilter(log_filter)


def quiet_eval() -> None:
    """Silence :data:`EVAL_WARNINGS` until the enclosing :func:`quiet` block ends."""
    for message, module in EVAL_WARNINGS:
        warnings.filterwarnings("ignore", message=message, module=module)


# ----------------------------------------------------------------------------------- metrics table


def _natural(name: str) -> list[object]:
    """Sort key reading digit runs as numbers: ``acc_class/2`` before ``acc_class/10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _number(value: float) -> str:
    return "nan" if isinstance(value, float) and math.isnan(value) else f"{value:.4g}"


def metrics_table(metrics: Mapping[str, float], stage: str, width: int = 100) -> str:
    """``metrics`` as one compact table under a ``<stage>:`` title: names without the ``<stage>/``
    prefix, in natural order, read down then across, values to four significant digits, as many
    name-value columns as fit in ``width`` characters."""
    if not metrics:
        return f"{stage}: no metrics logged"
    names = sorted(metrics, key=_natural)
    shown = [name.removeprefix(f"{stage}/") for name in names]
    values = [_number(float(metrics[name])) for name in names]
    name_w, value_w = max(map(len, shown)), max(map(len, values))
    cell = name_w + 2 + value_w
    n_cols = max(1, (width - 2 + 4) // (cell + 4))
    n_rows = math.ceil(len(names) / n_cols)
    lines = [f"{stage}:"]
    for row in range(n_rows):
        cells = [f"{shown[i]:<{name_w}}  {values[i]:>{value_w}}" for i in range(row, len(names), n_rows)]
        lines.append("  " + "    ".join(cells).rstrip())
    return "\n".join(lines)
