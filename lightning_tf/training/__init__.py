"""The training runtime every task uses; this ``__init__`` is its one public list (as torchtune's ``training/``).

* :mod:`.loaders`: the training loaders, batches drawn from (seed, epoch), resumable inside an epoch;
  :mod:`.distributed`: the unpadded evaluation sampler and the gathering helpers for DDP.
* :mod:`.checkpoints`: atomic checkpoint writes, the format stamp, one-line checks of a checkpoint path;
  :mod:`.preemption`: :class:`LastCheckpoint` (``last.ckpt`` every epoch, every 30 minutes, on SIGTERM or
  SLURM's requeue signal); :mod:`.callbacks`: :class:`RNGState` and :class:`CallbackMetrics` (exact resume) and :class:`NaNGuard`;
  :mod:`.rank_watch`: :class:`RankWatch` (a rank that dies under data parallelism: the others stop within
  seconds, one line names it).
* :mod:`.optim`: parameter groups (one weight-decay rule, layer-wise rate decay) and the learning-rate schedules;
  :mod:`.averaging`: checkpoint averaging.
* :mod:`.outputs`: the run's folder and its prediction files; :mod:`.agreement`: the data -> model check.
* :mod:`.prepared`: prepared-data folders (text corpora, K-line panels): keyed, checked, built once,
  memory-mapped; :mod:`.memory`: handing freed heap pages back to the system.
* :mod:`.resources`: the files that ship with the package (``configs/``, ``data/msft.csv``), found from any
  folder.

The names load on first use (PEP 562): ``from lightning_tf.training import release_freed_memory`` imports
neither torch nor Lightning, so the torch-free K-line reader can use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_tf import lazy_exports

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from .agreement import check_agreement
    from .averaging import average_checkpoints, average_state_dicts
    from .callbacks import (
        CallbackMetrics,
        CompactModelSummary,
        NaNGuard,
        NonFiniteError,
        RNGState,
        get_rng_states,
        last_checkpoint,
        set_rng_states,
    )
    from .checkpoints import (
        AtomicCheckpointIO,
        CheckedLoading,
        CheckpointError,
        MissingCheckpointError,
        check_checkpoint,
        newest_complete,
        stamp,
    )
    from .distributed import (
        UnpaddedDistributedSampler,
        eval_sampler,
        gather_objects,
        gather_predictions,
        interleave,
        predict_size,
        world_size,
    )
    from .loaders import (
        Batch,
        EpochBatchSampler,
        IgnoreStopSignals,
        ResumableDataLoader,
        SeededBatches,
        ShardedDataLoader,
        ShuffledBatchSampler,
        batch_seed,
    )
    from .memory import release_freed_memory
    from .optim import (
        SchedulerName,
        build_scheduler,
        configure_adamw,
        constant_with_warmup,
        noam,
        parameter_groups,
        patchtst_decay,
        warmup_cosine,
        warmup_steps_for,
    )
    from .outputs import prediction_path, run_dir
    from .preemption import EXIT_STATUS, LastCheckpoint, Stop
    from .prepared import (
        check_manifest,
        crc32,
        default_cache_root,
        file_identity,
        prepare_folder,
        sha256,
        write_manifest,
    )
    from .rank_watch import Lost, RankWatch, lost_connection
    from .resources import bundled_configs, find, repository_root

_WHERE = {
    "AtomicCheckpointIO": ".checkpoints",
    "Batch": ".loaders",
    "batch_seed": ".loaders",
    "build_scheduler": ".optim",
    "check_agreement": ".agreement",
    "check_checkpoint": ".checkpoints",
    "check_manifest": ".prepared",
    "CheckedLoading": ".checkpoints",
    "CheckpointError": ".checkpoints",
    "CompactModelSummary": ".callbacks",
    "configure_adamw": ".optim",
    "average_checkpoints": ".averaging",
    "average_state_dicts": ".averaging",
    "constant_with_warmup": ".optim",
    "crc32": ".prepared",
    "default_cache_root": ".prepared",
    "EpochBatchSampler": ".loaders",
    "eval_sampler": ".distributed",
    "EXIT_STATUS": ".preemption",
    "file_identity": ".prepared",
    "gather_objects": ".distributed",
    "gather_predictions": ".distributed",
    "get_rng_states": ".callbacks",
    "IgnoreStopSignals": ".loaders",
    "interleave": ".distributed",
    "last_checkpoint": ".callbacks",
    "LastCheckpoint": ".preemption",
    "Lost": ".rank_watch",
    "lost_connection": ".rank_watch",
    "MissingCheckpointError": ".checkpoints",
    "NaNGuard": ".callbacks",
    "newest_complete": ".checkpoints",
    "noam": ".optim",
    "NonFiniteError": ".callbacks",
    "parameter_groups": ".optim",
    "patchtst_decay": ".optim",
    "predict_size": ".distributed",
    "prediction_path": ".outputs",
    "prepare_folder": ".prepared",
    "release_freed_memory": ".memory",
    "bundled_configs": ".resources",
    "find": ".resources",
    "repository_root": ".resources",
    "ResumableDataLoader": ".loaders",
    "RankWatch": ".rank_watch",
    "RNGState": ".callbacks",
    "CallbackMetrics": ".callbacks",
    "run_dir": ".outputs",
    "SchedulerName": ".optim",
    "SeededBatches": ".loaders",
    "set_rng_states": ".callbacks",
    "sha256": ".prepared",
    "ShardedDataLoader": ".loaders",
    "ShuffledBatchSampler": ".loaders",
    "stamp": ".checkpoints",
    "Stop": ".preemption",
    "UnpaddedDistributedSampler": ".distributed",
    "warmup_cosine": ".optim",
    "warmup_steps_for": ".optim",
    "world_size": ".distributed",
    "write_manifest": ".prepared",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
