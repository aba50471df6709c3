"""Trainer callbacks: exact resume (:class:`RNGState`), a clear stop on non-finite values
(:class:`NaNGuard`), and a model summary that lists only what has parameters (:class:`CompactModelSummary`).

Both are plain Lightning callbacks; add them to ``trainer.callbacks`` (``configs/trainer/default.yaml``
does). Everything they put into a checkpoint is plain data (tensors, lists, ints, strings), so
checkpoints still load with ``torch.load(path, weights_only=True)``.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, ModelSummary
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.model_summary.model_summary import get_human_readable_count
from torch import Tensor
from torchmetrics import Metric

__all__ = [
    "CallbackMetrics",
    "CompactModelSummary",
    "NaNGuard",
    "NonFiniteError",
    "RNGState",
    "get_rng_states",
    "last_checkpoint",
    "set_rng_states",
]

log = logging.getLogger(__name__)

#: key of the RNG states in a checkpoint
CHECKPOINT_KEY = "rng_states"
#: key of the trainer's callback metrics in a checkpoint
METRICS_KEY = "callback_metrics"


# ----------------------------------------------------------------------------------------------
# RNG states as plain data


def _capture() -> tuple[Any, ...]:
    """The states as the libraries return them (cheap: taken after every training batch)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None  # (is_available is slow)
    return random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda


def _plain(captured: tuple[Any, ...]) -> dict[str, Any]:
    (version, internal, gauss_next), (kind, keys, pos, has_gauss, cached_gaussian), cpu, cuda = captured
    states: dict[str, Any] = {
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(keys.astype(np.int64)),  # (624,) uint32 values
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": cpu,
    }
    if cuda is not None:
        states["cuda"] = cuda
    return states


def _restore(captured: tuple[Any, ...]) -> None:
    py, np_state, cpu, cuda = captured
    random.setstate(py)
    np.random.set_state(np_state)
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def get_rng_states() -> dict[str, Any]:
    """The global random states of Python, NumPy, torch (CPU) and, when CUDA is in use, every CUDA
    device, as plain data (tensors, lists, ints, floats, strings) that ``torch.load(weights_only=True)``
    reads."""
    return _plain(_capture())


def _from_plain(states: dict[str, Any]) -> tuple[Any, ...]:
    py, n = states["python"], states["numpy"]
    keys = np.asarray(n["keys"].numpy() if isinstance(n["keys"], Tensor) else n["keys"], dtype=np.uint32)
    cuda = states.get("cuda")
    if cuda is not None and not (torch.cuda.is_available() and len(cuda) == torch.cuda.device_count()):
        cuda = None
    return (
        (py["version"], tuple(py["internal"]), py["gauss_next"]),
        (n["kind"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]),
        states["torch"].cpu(),
        None if cuda is None else [s.cpu() for s in cuda],
    )


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_states` returned. CUDA states are restored only on a machine with the
    same number of devices (a checkpoint from a GPU run resumed on a CPU keeps the CPU streams exact)."""
    _restore(_from_plain(states))


# ----------------------------------------------------------------------------------------------
# exact resume


class RNGState(Callback):
    """Saves the global random states in every checkpoint and restores them on resume, so that a run
    resumed with ``ckpt_path="last"`` (``--ckpt_path last``) draws the same dropout masks, shuffles and
    augmentations as the run that was never stopped.

    Lightning restores weights, optimizer, LR scheduler, loop counters and stateful data loaders, but
    not the Python / NumPy / torch / CUDA generators. Restoring them is exact only if both runs draw
    the same numbers after the checkpoint, so the timing matters:

    * **Validation draws nothing from the training stream.** Creating the validation loader's iterator
      (its base seed), ``validation_step`` and the validation hooks may draw random numbers, some of
      them after a checkpoint is written (a checkpoint taken at a training batch's end comes before
      the validation that follows it), and a resumed run repeats a validation in some restarts and
      not in others. The states are therefore taken after every training batch (a few small copies) and
      put back when validation ends (during ``fit``; Lightning already isolates the sanity check),
      so whatever validation does, the training stream is the same, and a checkpoint written at
      validation end or epoch end holds the state of the end of the training batches. A side effect
      worth having: ``val_check_interval`` and ``limit_val_batches`` do not change the training
      run.
    * **Epoch-end checkpoint** (saved at the end of an epoch's validation or at epoch end, as
      ``ModelCheckpoint`` on ``val/loss`` does): the uninterrupted run next creates the training
      iterator of the new epoch (which draws the loader's base seed and, for ``shuffle=True``, the
      sampler's seed) and trains. The states are restored as the checkpoint is loaded, before the
      resumed run creates that iterator (which can happen as early as ``configure_optimizers``:
      ``trainer.estimated_stepping_batches`` sets up the training data), so both runs create it
      from the same states.
    * **Checkpoint at a training batch's end** (``ModelCheckpoint(every_n_train_steps=...)``,
      ``max_steps``) or inside an epoch: the resumed run first sets up a training iterator that the
      uninterrupted run never made (inside an epoch it continues from it; after an epoch's last batch
      Lightning discards it and creates the next epoch's), so the states are restored in
      ``on_train_start``, after it exists and before the next batch is fetched. Inside an epoch this
      is exact for a loader that resumes its position (``state_dict``/``load_state_dict``, as every
      task's :class:`~lightning_tf.training.loaders.ResumableDataLoader` does); a plain ``DataLoader`` restarts
      the epoch (Lightning warns), so its order is not the same. Lightning loads a checkpoint's loader
      position when it builds the training loader, and builds it before restoring the loop when
      ``configure_optimizers`` asks for ``trainer.estimated_stepping_batches``; the position would
      then be lost, so ``on_train_start`` loads it again (no batch has been asked for yet).

    Exactness also needs deterministic kernels (``torch.use_deterministic_algorithms(True)``, the
    Trainer's ``deterministic=True``) and the same devices and world size; the number of loader
    workers may differ (tested with 0 and 2). Randomness drawn in hooks between the checkpoint and the
    next batch (``on_fit_start``, or a module's ``on_train_epoch_end`` after a checkpoint taken at
    validation end) is not covered, nor are strategies that load checkpoints after
    ``configure_optimizers`` (``restore_checkpoint_after_setup``, e.g. DeepSpeed). Under DDP each
    rank's states are gathered into the checkpoint and each rank gets its own back (rank 0's when the
    world size changed). Checkpoints loaded for ``validate``/``test``/``predict`` leave the random
    states alone.

    Args:
        isolate_validation: restore the training states when validation ends during ``fit`` (needed
            for exact resume from a checkpoint taken at a training batch's end that validation follows).
    """

    def __init__(self, isolate_validation: bool = True) -> None:
        self.isolate_validation = isolate_validation
        self._train_states: tuple[Any, ...] | None = None  # after the latest training batch
        self._loaded: dict[str, Any] | None = None  # from the checkpoint, until applied
        self._loader_states: list[Any] | None = None  # the training loaders' positions, likewise

    # ------------------------------------------------------------------ training stream
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.isolate_validation:
            self._train_states = _capture()  # the generators' states: a few small copies per batch

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # callbacks run before ModelCheckpoint, so a checkpoint saved now holds the training states
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking
        if self.isolate_validation and fitting and self._train_states is not None:
            _restore(self._train_states)

    # ------------------------------------------------------------------ save
    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        captured = _capture()
        if trainer.validating and trainer.state.fn == TrainerFn.FITTING and self._train_states is not None:
            captured = self._train_states  # saved from inside validation: the training stream's states
        states = _plain(captured)
        ranks = [states]
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * trainer.world_size
            dist.all_gather_object(gathered, states)
            ranks = gathered
        progress = trainer.fit_loop.epoch_loop.batch_progress
        mid_epoch = bool(progress.current.ready) and not progress.is_last_batch
        in_batch_end = progress.current.completed < progress.current.processed  # on_train_batch_end
        checkpoint[CHECKPOINT_KEY] = {
            "ranks": ranks,
            # when the resumed run must restore: as the checkpoint loads, or once its iterator exists
            "restore_at": "train_start" if mid_epoch or in_batch_end else "load",
        }

    # ------------------------------------------------------------------ load
    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return
        fit_loop = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
        self._loader_states = fit_loop.get("combined_loader")  # the training loaders' positions: on_train_start
        saved = checkpoint.get(CHECKPOINT_KEY)
        if saved is None:
            rank_zero_warn(
                "the checkpoint holds no RNG states (it was saved without the RNGState callback): the resumed run "
                "draws different dropout masks and shuffles than an uninterrupted run would"
            )
            return
        ranks = saved["ranks"]
        if len(ranks) != trainer.world_size:
            rank_zero_warn(
                f"the checkpoint holds the RNG states of {len(ranks)} rank(s) but this run has {trainer.world_size}: "
                "every rank resumes with rank 0's states"
            )
        states = ranks[trainer.global_rank] if len(ranks) == trainer.world_size else ranks[0]
        self._loaded = {"states": states, "restore_at": saved["restore_at"]}
        self._train_states = _from_plain(states)  # a validation repeated before the first batch is isolated too
        if saved["restore_at"] == "load":
            # now: the training iterator can be created as early as configure_optimizers
            # (estimated_stepping_batches sets up the training data)
            set_rng_states(states)
            self._loaded = None

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Lightning loads a checkpoint's loader positions when it builds the training loader; one built
        # earlier (``trainer.estimated_stepping_batches`` in ``configure_optimizers``) would restart its
        # epoch. Loading again is harmless: no batch has been asked for yet.
        loaders = trainer.train_dataloader
        loaders = loaders if isinstance(loaders, (list, tuple)) else [loaders]
        for loader, state in zip(loaders, self._loader_states or [], strict=False):
            if state and callable(getattr(loader, "load_state_dict", None)):
                loader.load_state_dict(state)
        self._loader_states = None
        if self._loaded is not None:
            set_rng_states(self._loaded["states"])
            self._loaded = None


class CallbackMetrics(Callback):
    """Puts the trainer's ``callback_metrics`` (the latest value of every logged scalar: the last
    validation's ``val/loss`` among them) into every checkpoint written during ``fit`` and puts them back
    when a resumed run starts training, so that everything that reads them finds what the run that was
    never stopped finds at that point. The states of the module's ``torchmetrics`` metrics (what an
    epoch's metrics have accumulated so far; Lightning saves them only when a metric is made persistent,
    and then as weights) travel the same way, so the metrics of an epoch resumed in its middle cover the
    whole epoch.

    Lightning restores weights, optimizer, schedulers, loops and callback states, but a restored trainer's
    ``callback_metrics`` stay empty until the next validation. Whatever reads a monitored metric before
    then fails or decides differently after a checkpoint taken inside an epoch, or between a validation
    and the epoch's end: ``EarlyStopping`` and a monitored ``ModelCheckpoint`` checking at the training
    epoch's end (their default when validation runs once per epoch) raise "conditioned on metric
    `val/loss` which is not available", ``ReduceLROnPlateau`` stepping every step raises likewise, and
    both would otherwise miss a value the uninterrupted run used.

    The values are scalars (plain tensors: ``torch.load(weights_only=True)`` reads them), saved per rank
    under DDP (a metric logged without ``sync_dist`` differs between ranks), and put back in
    ``on_train_start``, after Lightning's sanity check (which clears the metrics) and before the first
    batch. A metric the resumed run has logged by then keeps its new value.
    """

    def __init__(self) -> None:
        self._loaded: dict[str, Any] | None = None

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return
        metrics: dict[str, Any] = {
            str(k): v.detach().to("cpu", copy=True)
            for k, v in trainer.callback_metrics.items()
            if isinstance(v, Tensor) and v.numel() == 1
        }
        states = {
            name: {key: _cpu(value) for key, value in module.metric_state.items()}
            for name, module in pl_module.named_modules()
            if isinstance(module, Metric)
        }
        ranks = [{"metrics": metrics, "states": states}]
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * trainer.world_size
            dist.all_gather_object(gathered, ranks[0])
            ranks = gathered
        checkpoint[METRICS_KEY] = {"ranks": ranks}

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get(METRICS_KEY)
        if trainer.state.fn != TrainerFn.FITTING or saved is None:
            return
        ranks = saved["ranks"]
        self._loaded = ranks[trainer.global_rank] if len(ranks) == trainer.world_size else ranks[0]

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._loaded is None:
            return
        device = pl_module.device
        metrics = trainer.callback_metrics  # the trainer's own dict: what every callback reads
        for name, value in self._loaded["metrics"].items():
            metrics.setdefault(name, value.to(device))
        modules = dict(pl_module.named_modules())
        for name, states in self._loaded["states"].items():
            module = modules.get(name)
            if isinstance(module, Metric):
                for key, value in states.items():
                    if key in module.metric_state:  # torchmetrics' states are plain attributes
                        setattr(
                            module, key, [v.to(device) for v in value] if isinstance(value, list) else value.to(device)
                        )
        self._loaded = None


def _cpu(value: Any) -> Any:
    """A metric state (a tensor or a list of tensors) copied to the CPU."""
    if isinstance(value, list):
        return [v.detach().to("cpu", copy=True) for v in value]
    return value.detach().to("cpu", copy=True)


# ----------------------------------------------------------------------------------------------
# NaN / Inf guard


class NonFiniteError(FloatingPointError):
    """Training met a NaN or an infinity; the message names the step and the last good checkpoint."""


def last_checkpoint(trainer: Trainer) -> str | None:
    """The most recently written checkpoint file of the trainer's ``ModelCheckpoint`` callbacks, or None."""
    paths: set[str] = set()
    for cb in trainer.checkpoint_callbacks:
        if isinstance(cb, ModelCheckpoint):
            paths.update(p for p in (cb.last_model_path, cb.best_model_path, *cb.best_k_models) if p)
    existing = [Path(p) for p in paths if Path(p).is_file()]
    if not existing:
        return None
    return str(max(existing, key=lambda p: p.stat().st_mtime_ns))


def _describe(t: Tensor) -> str:
    t = t.detach()
    if t.numel() == 1:
        return str(t.item())
    n_nan, n_inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
    return f"{n_nan} NaN and {n_inf} infinite of {t.numel()} values"


class NaNGuard(Callback):
    """Stops training with one clear :class:`NonFiniteError` when the training loss (and, if asked,
    a gradient or a parameter) stops being finite.

    The loss is checked in ``on_before_backward``, before the optimizer step could spread the NaN into
    the weights, so the model in memory and every checkpoint written stay finite; ``ModelCheckpoint``
    saves nothing more after the exception (unless ``save_on_exception=True``, which then saves those
    still-finite weights). The exception ends ``fit`` (the ``lightning-tf`` command exits with status 1)
    and names the global step, the epoch and batch, the quantity, and the checkpoint to resume from::

        NonFiniteError: the training loss is nan at global step 1234 (epoch 3, batch 56).
        The optimizer step was not taken; weights and checkpoints are finite.
        Last good checkpoint: runs/lightning-tf/abc123/checkpoints/last.ckpt
        (resume: --ckpt_path runs/lightning-tf/abc123/checkpoints/last.ckpt, e.g. with a lower model.lr
        or trainer.gradient_clip_val).

    Cost: the loss check reads one scalar per step (a device synchronisation on a GPU); set
    ``every_n_steps`` to check less often. The gradient and parameter checks reduce every tensor and
    are off by default. Under 16-bit mixed precision, infinite gradients are the loss scaler's business
    (it skips the step and lowers the scale), so ``check_grads`` is ignored there. Under DDP the
    decision is shared, so every rank stops together.

    Validation and test losses are checked once per epoch, on the epoch's logged ``val/loss`` /
    ``test/loss`` (no per-step synchronisation): a non-finite one stops the run before
    ``ModelCheckpoint`` could save a model scored NaN, saying whether the weights are finite (then
    the evaluation data is the suspect).

    The modules of this package do not check their losses themselves: this callback is the one place.

    Args:
        check_loss: check the training loss before each backward pass.
        check_grads: check every gradient before each optimizer step.
        check_params: check every parameter after each optimizer step.
        check_eval: check the epoch's validation and test losses (``<stage>/loss``).
        every_n_steps: check on optimizer steps that are multiples of this (1: every step).
    """

    def __init__(
        self,
        check_loss: bool = True,
        check_grads: bool = False,
        check_params: bool = False,
        check_eval: bool = True,
        every_n_steps: int = 1,
    ) -> None:
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps ({every_n_steps}) must be >= 1")
        self.check_loss, self.check_grads, self.check_params = check_loss, check_grads, check_params
        self.check_eval = check_eval
        self.every_n_steps = every_n_steps
        self._batch_idx = 0

    def _due(self, trainer: Trainer) -> bool:
        return trainer.global_step % self.every_n_steps == 0

    def _any_rank(self, trainer: Trainer, bad: bool) -> bool:
        if trainer.world_size > 1:
            return trainer.strategy.reduce_boolean_decision(bad, all=False)
        return bad

    def _fail(self, trainer: Trainer, what: str, when: str | None = None) -> None:
        if when is None:  # the step was not taken: say whether the weights are still good
            bad, _ = _first_non_finite(trainer.lightning_module.named_parameters())
            if bad is not None:
                when = (
                    f"The optimizer step was not taken, but {bad} is already non-finite: a step without a check "
                    f"(every_n_steps={self.every_n_steps}) spread it; checkpoints since then may be bad too."
                )
            elif self.every_n_steps == 1:
                when = "The optimizer step was not taken; weights and checkpoints are finite."
            else:
                when = "The optimizer step was not taken; the weights are finite."
        path = last_checkpoint(trainer)
        where = f"global step {trainer.global_step} (epoch {trainer.current_epoch}, batch {self._batch_idx})"
        if path is None:
            resume = "Last good checkpoint: none saved yet."
        else:
            resume = (
                f"Last good checkpoint: {path}\n(resume: --ckpt_path {path}, e.g. with a lower model.lr or "
                "trainer.gradient_clip_val)."
            )
        raise NonFiniteError(f"{what} at {where}.\n{when}\n{resume}")

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self._batch_idx = batch_idx

    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: Tensor) -> None:
        if not (self.check_loss and self._due(trainer)):
            return
        bad = not bool(torch.isfinite(loss.detach()).all())
        if self._any_rank(trainer, bad):
            what = (
                f"the training loss is {_describe(loss)}" if bad else "the training loss is not finite on another rank"
            )
            self._fail(trainer, what)

    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if not (self.check_grads and self._due(trainer)):
            return
        if getattr(trainer.precision_plugin, "scaler", None) is not None:
            return  # the GradScaler skips steps with infinite gradients by design
        name, grad = _first_non_finite((n, p.grad) for n, p in pl_module.named_parameters() if p.grad is not None)
        if self._any_rank(trainer, name is not None):
            what = f"the gradient of {name} has {_describe(grad)}" if grad is not None else "a gradient is not finite"
            self._fail(trainer, what)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # global_step has just advanced: check the step that was taken
        if not (self.check_params and (trainer.global_step - 1) % self.every_n_steps == 0):
            return
        name, param = _first_non_finite(pl_module.named_parameters())
        if self._any_rank(trainer, name is not None):
            what = f"parameter {name} has {_describe(param)}" if param is not None else "a parameter is not finite"
            self._fail(
                trainer,
                what,
                "The weights in memory are corrupt; this step was not checkpointed (the checks run before "
                "ModelCheckpoint's).",
            )

    def _check_eval(self, trainer: Trainer, stage: str) -> None:
        if not self.check_eval:
            return
        value = trainer.callback_metrics.get(f"{stage}/loss")
        if value is None or bool(torch.isfinite(torch.as_tensor(value)).all()):
            return
        name = {"val": "validation", "test": "test"}[stage]
        bad, _ = _first_non_finite(trainer.lightning_module.named_parameters())
        weights = (
            f"parameter {bad} is not finite"
            if bad is not None
            else f"the weights are finite: look for NaN or infinite values in the {name} data"
        )
        where = f"epoch {trainer.current_epoch}, global step {trainer.global_step}"
        if stage == "val" and trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            path = last_checkpoint(trainer)
            resume = f"Last good checkpoint: {path or 'none saved yet'}."
            raise NonFiniteError(
                f"the {name} loss is {_describe(torch.as_tensor(value))} after {where}; {weights}.\n"
                f"No checkpoint was saved from this validation.\n{resume}"
            )
        raise NonFiniteError(f"the {name} loss is {_describe(torch.as_tensor(value))} ({where}); {weights}.")

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # before ModelCheckpoint's on_validation_end (Lightning runs checkpoint callbacks last)
        self._check_eval(trainer, "val")

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._check_eval(trainer, "test")


def _first_non_finite(named: Any) -> tuple[str | None, Tensor | None]:
    named = [(n, t) for n, t in named]
    if not named:
        return None, None
    # one fused reduction per tensor and a single host read in the common, all-finite case
    flags = torch.stack([torch.isfinite(t.detach()).all().to(named[0][1].device) for _, t in named])
    if bool(flags.all()):
        return None, None
    i = int((~flags).nonzero()[0, 0])
    return named[i]


# ----------------------------------------------------------------------------------------------
# model summary


class CompactModelSummary(ModelSummary):
    """Lightning's model summary without what says nothing about the model: the rows of modules
    without parameters (the metric collections), the train/eval mode column and its totals, and the
    FLOPs column when nothing was counted (a model without ``example_input_array``).

    Its arguments are ModelSummary's: ``max_depth`` 1 lists the module's direct children, -1 every layer.
    """

    @staticmethod
    def summarize(  # type: ignore[override]
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int = 0,
        **summarize_kwargs: Any,
    ) -> None:
        columns = [
            (name, [str(v).strip() for v in values])
            for name, values in summary_data
            if name != "Mode" and (name != "FLOPs" or total_flops)
        ]
        rows = [i for i, n in enumerate(dict(columns)["Params"]) if n != "0"]
        widths = [max([len(name), *(len(values[i]) for i in rows)]) for name, values in columns]
        lines = [" | ".join(f"{name:<{w}}" for (name, _), w in zip(columns, widths)).rstrip()]
        lines.append("-" * len(lines[0]))
        lines += [" | ".join(f"{values[i]:<{w}}" for (_, values), w in zip(columns, widths)).rstrip() for i in rows]
        frozen = total_parameters - trainable_parameters
        total = f"{_count(total_parameters)} parameters ({model_size:,.2f} MB)"
        total += f", {_count(frozen)} frozen" if frozen else ""
        total += f"; {_count(total_flops)} FLOPs for the example input" if total_flops else ""
        rank_zero_info("\n".join([*lines, total]))


def _count(n: int) -> str:
    """``n`` as Lightning's summary writes counts: ``136 K``, ``4.5 M``."""
    return get_human_readable_count(n).strip()
