"""Exact resume: a run stopped after a checkpoint and resumed with ``ckpt_path="last"`` ends with
bitwise the same weights, optimizer state, scheduler state and metrics as the run that was never
stopped, for each task; and every checkpoint loads with ``torch.load(weights_only=True)``.

The runs use dropout, shuffled data and (vision) random augmentation, so a missing RNG or sampler
state shows: the same comparison without :class:`RNGState` differs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer, seed_everything
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader

from lightning_tf.kline import KLineDataModule, KLineForecaster
from lightning_tf.kline.settings import Features, Loading, Reading, Splits
from lightning_tf.text import BucketBatchSampler, ResumableDataLoader, Seq2SeqTransformer, TranslationDataModule
from lightning_tf.training import CallbackMetrics, LastCheckpoint, RNGState, get_rng_states, set_rng_states
from lightning_tf.vision import ImageDataModule, ViTClassifier
from lightning_tf.vision import data as vision_data
from tests.helpers.kline import make_bars
from tests.helpers.preemption import SignalAt

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
Task = Callable[[], tuple[LightningModule, LightningDataModule]]


def text_task() -> tuple[LightningModule, LightningDataModule]:
    dm = TranslationDataModule(dataset="copy", n_train=160, n_val=8, n_test=8, vocab_size=64, batch_size=16)
    model = Seq2SeqTransformer(
        vocab_size=64,
        d_model=16,
        n_heads=2,
        n_layers=1,
        d_ff=32,
        dropout=0.2,
        beam_size=1,
        extra_len=4,
        lr=3e-3,
        warmup_steps=4,
    )
    return model, dm


def vision_task() -> tuple[LightningModule, LightningDataModule]:
    dm = ImageDataModule(dataset="digits", batch_size=16, augment="flip_crop")
    model = ViTClassifier(
        preset="digits",
        d_model=16,
        n_heads=2,
        n_layers=1,
        d_ff=32,
        dropout=0.2,
        drop_path=0.1,
        warmup_steps=3,
        attention_images=0,
    )
    return model, dm


def kline_task() -> tuple[LightningModule, LightningDataModule]:
    dm = KLineDataModule(str(ROOT / "data" / "msft.csv"), context_len=32, horizon=4, loading=Loading(batch_size=32))
    model = KLineForecaster(
        n_features=6,
        n_targets=1,
        context_len=32,
        horizon=4,
        patch_len=8,
        stride=4,
        d_model=16,
        n_heads=2,
        n_layers=1,
        d_ff=32,
        dropout=0.2,
        head_dropout=0.2,
        warmup_steps=3,
        baselines=False,
    )
    return model, dm


TASKS: dict[str, Task] = {"text": text_task, "vision": vision_task, "kline": kline_task}


class Killed(Exception):
    """The stand-in for a killed process: raised at a batch start, so nothing is saved after it."""


class Kill(Callback):
    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.at_step:
            raise Killed(f"killed at step {self.at_step}")


def tiny_trainer(root: Path, callbacks: list[Any], **overrides: Any) -> Trainer:
    """The seeded, deterministic CPU trainer of these tests: 4 training batches and 1 validation batch an epoch,
    no logger, no progress bar; ``overrides`` (``max_epochs``, ``num_sanity_val_steps``, ...) on top."""
    settings: dict[str, Any] = {
        "max_epochs": 3,
        "limit_train_batches": 4,
        "limit_val_batches": 1,
        "num_sanity_val_steps": 0,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "deterministic": True,
        "accelerator": "cpu",
        "devices": 1,
    }
    return Trainer(callbacks=callbacks, default_root_dir=root, **(settings | overrides))


def fit(
    task: Task,
    root: Path,
    max_epochs: int = 3,
    ckpt_path: str | None = None,
    rng: bool = True,
    every_n_train_steps: int | None = None,
    kill_at_step: int | None = None,
    isolate_validation: bool = True,
) -> tuple[LightningModule, Trainer]:
    """One ``fit`` as a user runs it: seeded, deterministic, the checkpoints of the default trainer config
    (the best by val/loss, last.ckpt every epoch); with ``kill_at_step`` the process "dies" as that step starts (same config otherwise,
    since e.g. a cosine schedule's length depends on ``max_epochs``)."""
    seed_everything(0)
    if every_n_train_steps:  # step checkpoints keep the latest: val/loss does not exist before validation
        checkpoints = [
            ModelCheckpoint(dirpath=root, save_last=True, save_top_k=1, every_n_train_steps=every_n_train_steps)
        ]
    else:  # as configs/trainer/default.yaml: the best by val/loss, and last.ckpt after every epoch
        checkpoints = [
            ModelCheckpoint(dirpath=root, monitor="val/loss", save_top_k=1, filename="best-{epoch}-{step}"),
            ModelCheckpoint(dirpath=root, filename="last", save_top_k=1, enable_version_counter=False),
        ]
    callbacks: list[Any] = [*checkpoints, *([RNGState(isolate_validation), CallbackMetrics()] if rng else [])]
    if kill_at_step is not None:
        callbacks.append(Kill(kill_at_step))
    model, dm = task()
    trainer = tiny_trainer(root, callbacks, max_epochs=max_epochs, num_sanity_val_steps=1)
    if kill_at_step is None:
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
        if ckpt_path is not None:  # it did resume (for "last", Lightning only warns when it finds nothing)
            assert trainer.ckpt_path is not None and Path(trainer.ckpt_path).name == "last.ckpt"
    else:
        with pytest.raises(Killed):
            trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model, trainer


def differences(a: tuple[LightningModule, Trainer], b: tuple[LightningModule, Trainer]) -> list[str]:
    """Names of the weights, optimizer and scheduler tensors and metrics that are not bitwise equal."""
    (ma, ta), (mb, tb) = a, b
    out = [k for k, v in ma.state_dict().items() if not torch.equal(v, mb.state_dict()[k])]
    oa, ob = ta.optimizers[0].state_dict()["state"], tb.optimizers[0].state_dict()["state"]
    out += [
        f"optimizer {i}.{k}"
        for i in oa
        for k in oa[i]
        if not torch.equal(torch.as_tensor(oa[i][k]), torch.as_tensor(ob[i][k]))
    ]
    sa, sb = ta.lr_scheduler_configs[0].scheduler.state_dict(), tb.lr_scheduler_configs[0].scheduler.state_dict()
    out += [f"scheduler {k}" for k in ("last_epoch", "_last_lr") if sa[k] != sb[k]]
    ca, cb = ta.callback_metrics, tb.callback_metrics
    out += [
        f"metric {k}" for k in sorted(set(ca) | set(cb)) if k not in ca or k not in cb or not torch.equal(ca[k], cb[k])
    ]
    return out


@pytest.fixture(autouse=True)
def _deterministic(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Leave no global trace: deterministic mode and seed_everything's environment variables."""
    before = torch.are_deterministic_algorithms_enabled()
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.delenv(name, raising=False)  # restored after the test
    yield
    torch.use_deterministic_algorithms(before)


# ---------------------------------------------------------------------------------- epoch boundary


@pytest.mark.parametrize("name", list(TASKS))
def test_resume_at_epoch_boundary_is_exact(name: str, tmp_path: Path) -> None:
    """Killed as epoch 3 starts (last.ckpt written at the validation end of epoch 2), resumed from
    last.ckpt: the same weights, optimizer moments, schedule and final metrics as the run never stopped."""
    task = TASKS[name]
    full = fit(task, tmp_path / "full")
    fit(task, tmp_path / "cut", kill_at_step=8)
    ckpt = torch.load(tmp_path / "cut" / "last.ckpt", weights_only=True)  # plain data, RNG states included
    assert ckpt["global_step"] == 8 and ckpt["rng_states"]["restore_at"] == "load"
    resumed = fit(task, tmp_path / "cut", ckpt_path=str(tmp_path / "cut" / "last.ckpt"))
    assert resumed[1].global_step == full[1].global_step == 12
    assert differences(full, resumed) == []


@pytest.mark.parametrize("name", ["text", "vision"])
def test_resume_without_rng_state_differs(name: str, tmp_path: Path) -> None:
    """The same comparison without RNGState fails: the test above can see a lost random state
    (text: dropout; vision: dropout, shuffling and augmentation)."""
    task = TASKS[name]
    full = fit(task, tmp_path / "full", rng=False)
    fit(task, tmp_path / "cut", kill_at_step=8, rng=False)
    resumed = fit(task, tmp_path / "cut", ckpt_path=str(tmp_path / "cut" / "last.ckpt"), rng=False)
    assert len(differences(full, resumed)) > 0


def test_resume_with_the_cli_spelling_last(tmp_path: Path) -> None:
    """``ckpt_path="last"`` (``--ckpt_path last``) finds the run's last.ckpt and resumes exactly."""
    full = fit(text_task, tmp_path / "full", max_epochs=2)
    fit(text_task, tmp_path / "cut", max_epochs=2, kill_at_step=4)
    resumed = fit(text_task, tmp_path / "cut", max_epochs=2, ckpt_path="last")
    assert resumed[1].global_step == 8
    assert differences(full, resumed) == []


# ---------------------------------------------------------------------------------- mid-epoch


def panel_task(folder: Path) -> Task:
    """K-line windows of a folder of tickers, prepared once into a panel under ``cache`` and mapped."""
    bars = folder / "bars"
    bars.mkdir(parents=True, exist_ok=True)
    for seed, name in enumerate(["A", "B", "C"]):
        make_bars(300, seed=seed).to_csv(bars / f"{name}.csv", index=False)

    def task() -> tuple[LightningModule, LightningDataModule]:
        model, _ = kline_task()
        dm = KLineDataModule(
            str(bars),
            context_len=32,
            horizon=4,
            cache_dir=str(folder / "cache"),
            splits=Splits(val_start="2000-09-01", test_start="2000-11-01"),
            loading=Loading(batch_size=32),
        )
        return model, dm

    return task


def pretrain_task(folder: Path, objective: str) -> Task:
    """K-line pretraining as configs/kline/pretrain.yaml trains (a Transformer alone, each batch one date's universe,
    the cross-sectional label, quantiles and the IC term; or the masked-patch objective, whose masks are drawn from
    the RNG) on a corpus with a date cut, prepared once."""
    from tests.helpers.universe import reversal_universe

    path = folder / "corpus.csv"
    reversal_universe(12, 300, reversal=0.5, seed=3).to_csv(path, index=False)

    def task() -> tuple[LightningModule, LightningDataModule]:
        dm = KLineDataModule(
            str(path),
            context_len=16,
            horizon=2,
            features=Features(names=["log_return", "high_rel", "low_rel", "volatility"], label="cs_rank"),
            reading=Reading(cut="2016-01-04"),
            splits=Splits(val_start="2015-11-02", test_start="2016-01-04"),
            loading=Loading(batch_size=64, batch_by_date=True),
            cache_dir=str(folder / "cache"),
        )
        model = KLineForecaster(
            n_features=4,
            n_targets=1,
            context_len=16,
            horizon=2,
            residual="only",
            channel_mixing=True,
            objective=objective,  # type: ignore[arg-type]
            loss="quantile",
            ic_weight=1.0 if objective == "forecast" else 0.0,
            d_model=16,
            n_heads=2,
            n_layers=1,
            d_ff=32,
            dropout=0.2,
            warmup_steps=3,
            baselines=False,
        )
        return model, dm

    return task


@pytest.mark.parametrize("name", [*TASKS, "kline_panel", "kline_pretrain_masked"])
def test_resume_mid_epoch_is_exact(name: str, tmp_path: Path) -> None:
    """ModelCheckpoint(every_n_train_steps=3) saves inside epochs (steps 3, 9) and at an epoch's last
    batch (step 12, before its validation). Killed at step 10, resumed from step 9 (batch 2 of epoch
    3): the stateful loader goes on with the epoch's 2nd batch (vision: with that batch's own
    augmentation draws) and the RNG is restored after the new iterator exists, so the result is
    bitwise the uninterrupted run. Text trains on its prepared corpus, ``kline_panel`` on a prepared panel."""
    if name.startswith("kline_pretrain"):
        task = pretrain_task(tmp_path, name.rpartition("_")[2])
    else:
        task = TASKS[name] if name in TASKS else panel_task(tmp_path)
    full = fit(task, tmp_path / "full", max_epochs=4, every_n_train_steps=3)
    fit(task, tmp_path / "cut", max_epochs=4, every_n_train_steps=3, kill_at_step=10)
    ckpt = torch.load(tmp_path / "cut" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 9 and ckpt["rng_states"]["restore_at"] == "train_start"
    assert ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [
        {"epoch": 2, "batches_done": 1, "num_replicas": 1}
    ]
    resumed = fit(task, tmp_path / "cut", max_epochs=4, every_n_train_steps=3, ckpt_path="last")
    assert resumed[1].global_step == full[1].global_step == 16
    assert differences(full, resumed) == []


@pytest.mark.parametrize(("name", "isolate"), [("text", True), ("vision", True), ("kline", True), ("text", False)])
def test_resume_from_a_step_checkpoint_at_an_epoch_end(name: str, isolate: bool, tmp_path: Path) -> None:
    """every_n_train_steps=4 saves at the last batch of each epoch, before its validation, which the
    resumed run does not repeat: exact for every task, and only because validation draws nothing from
    the training stream (without ``isolate_validation`` the validation loader's seed draw is missing
    from the resumed run)."""
    task = TASKS[name]
    full = fit(task, tmp_path / "full", every_n_train_steps=4, isolate_validation=isolate)
    fit(task, tmp_path / "cut", every_n_train_steps=4, kill_at_step=6, isolate_validation=isolate)
    ckpt = torch.load(tmp_path / "cut" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 4 and ckpt["rng_states"]["restore_at"] == "train_start"
    resumed = fit(task, tmp_path / "cut", every_n_train_steps=4, ckpt_path="last", isolate_validation=isolate)
    assert (differences(full, resumed) == []) == isolate


class PlainLoaderImages(ImageDataModule):
    """Digits served by a plain shuffled DataLoader, which has no position to save."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=16, shuffle=True, collate_fn=vision_data._collate)


def plain_vision_task() -> tuple[LightningModule, LightningDataModule]:
    model, _ = vision_task()
    return model, PlainLoaderImages(dataset="digits", batch_size=16, augment="flip_crop")


def early_stopped_fit(root: Path, metrics: bool, ckpt_path: str | None = None, kill_at_step: int | None = None) -> Any:
    """K-lines validated every other epoch (after epochs 1 and 3) with EarlyStopping checking at every
    training epoch's end (not strict: before the first validation there is nothing to check), and a
    checkpoint every 3 steps; with or without :class:`CallbackMetrics`."""
    seed_everything(0)
    stopping = EarlyStopping(monitor="val/loss", patience=5, check_on_train_epoch_end=True, strict=False)
    callbacks: list[Any] = [
        ModelCheckpoint(dirpath=root, filename="{step}", every_n_train_steps=3, save_top_k=-1),
        RNGState(),
        stopping,
        *([CallbackMetrics()] if metrics else []),
        *([Kill(kill_at_step)] if kill_at_step is not None else []),
    ]
    model, dm = kline_task()
    trainer = tiny_trainer(root, callbacks, max_epochs=4, check_val_every_n_epoch=2)
    if kill_at_step is None:
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    else:
        with pytest.raises(Killed):
            trainer.fit(model, datamodule=dm)
    return model, trainer, stopping


@pytest.mark.parametrize("metrics", [True, False])
def test_a_resumed_run_finds_the_last_validations_metrics(metrics: bool, tmp_path: Path) -> None:
    """Resumed from step 9 (inside epoch 2, after epoch 1's validation): at epoch 2's end EarlyStopping reads
    val/loss of epoch 1's validation. With CallbackMetrics the checkpoint carries it, and the run ends
    bitwise as the uninterrupted one (EarlyStopping's count and best score too); without, the restored
    trainer has no val/loss until the next validation, and EarlyStopping skips epoch 2's check (a strict
    one, its default, stops the run: "conditioned on metric `val/loss` which is not available")."""
    model, trainer, stopping = early_stopped_fit(tmp_path / "full", metrics)
    early_stopped_fit(tmp_path / "cut", metrics, kill_at_step=10)
    ckpt = str(tmp_path / "cut" / "step=9.ckpt")
    if metrics:
        assert set(torch.load(ckpt, weights_only=True)["callback_metrics"]["ranks"][0]["metrics"]) >= {
            "val/loss",
            "train/loss",
        }
    resumed = early_stopped_fit(tmp_path / "cut", metrics, ckpt_path=ckpt)
    assert resumed[1].global_step == trainer.global_step == 16
    assert differences((model, trainer), resumed[:2]) == []
    assert torch.equal(stopping.best_score, resumed[2].best_score)
    # epochs 1, 2 (the stale val/loss of epoch 1) and 3 checked: no improvement after epoch 1 on this tiny run
    assert (stopping.wait_count, resumed[2].wait_count) == ((2, 2) if metrics else (2, 1))


def signalled_fit(
    task: Task, root: Path, signal_at: tuple[int, int, str] | None = None, ckpt_path: str | None = None
) -> Any:
    """The checkpoints and monitoring callbacks of configs/trainer/default.yaml (the best by val/loss,
    LastCheckpoint, RNGState, CallbackMetrics) and the K-line config's EarlyStopping; with ``signal_at``
    (epoch, batch, where) a real SIGTERM to this process there, which LastCheckpoint turns into a stop."""
    seed_everything(0)
    stopping = EarlyStopping(monitor="val/loss", patience=5)
    best = ModelCheckpoint(dirpath=root, monitor="val/loss", save_top_k=1, filename="best-{epoch}-{step}")
    callbacks: list[Any] = [best, LastCheckpoint(dirpath=str(root)), RNGState(), CallbackMetrics(), stopping]
    if signal_at is not None:
        callbacks.append(SignalAt(*signal_at, group=False))
    model, dm = task()
    trainer = tiny_trainer(root, callbacks)
    if signal_at is None:
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    else:
        with pytest.raises(SIGTERMException):
            trainer.fit(model, datamodule=dm)
    return model, trainer, stopping, best


@pytest.mark.parametrize(("name", "where"), [("kline", "train"), ("text", "val"), ("vision", "train")])
def test_sigterm_at_an_epochs_last_step_or_in_its_validation_stops_at_the_epochs_end(
    name: str, where: str, tmp_path: Path
) -> None:
    """A real SIGTERM after epoch 0's last batch, or during the validation that follows it, stops the run at
    the epoch's end, after that validation (a checkpoint at the last batch's end would resume without the
    validation and the epoch's end, and one at the validation's end without the metrics EarlyStopping
    reads at the epoch's end): the resumed run ends bitwise as the uninterrupted one, EarlyStopping's count
    and the best checkpoint included."""
    task = TASKS[name]
    full = signalled_fit(task, tmp_path / "full")
    cut = signalled_fit(task, tmp_path / "cut", signal_at=(0, 3, where))
    stopped = next(cb for cb in cut[1].callbacks if isinstance(cb, LastCheckpoint)).stopped
    assert stopped is not None and (stopped["global_step"], stopped["epoch"]) == (4, 0)
    resumed = signalled_fit(task, tmp_path / "cut", ckpt_path=str(tmp_path / "cut" / "last.ckpt"))
    assert differences(full[:2], resumed[:2]) == []
    assert (full[2].wait_count, float(full[2].best_score)) == (resumed[2].wait_count, float(resumed[2].best_score))
    assert Path(full[3].best_model_path).name == Path(resumed[3].best_model_path).name
    assert torch.equal(full[3].best_model_score, resumed[3].best_model_score)


def test_plain_loader_mid_epoch_resume_is_not_exact(tmp_path: Path) -> None:
    """The documented limit: a plain DataLoader cannot resume inside an epoch; Lightning restarts that
    epoch's data, so the result differs (an epoch-boundary checkpoint is exact)."""
    full = fit(plain_vision_task, tmp_path / "full", every_n_train_steps=3)
    fit(plain_vision_task, tmp_path / "cut", every_n_train_steps=3, kill_at_step=10)
    with pytest.warns(UserWarning, match="not resumable"):
        resumed = fit(plain_vision_task, tmp_path / "cut", every_n_train_steps=3, ckpt_path="last")
    assert len(differences(full, resumed)) > 0


# ---------------------------------------------------------------------------------- the pieces


def test_bucket_sampler_state_skips_the_batches_already_trained() -> None:
    lengths = list(np.random.default_rng(0).integers(3, 20, size=200))
    sampler = BucketBatchSampler(lengths, batch_size=8, seed=3)
    sampler.set_epoch(2)
    epoch = list(sampler)
    it = iter(sampler)
    for _ in range(5):
        next(it)
    state = sampler.state_dict()
    assert state == {"epoch": 2, "batches_done": 5, "num_replicas": 1}
    fresh = BucketBatchSampler(lengths, batch_size=8, seed=3)
    fresh.load_state_dict(state)
    assert list(fresh) == epoch[5:]  # the rest of epoch 2, in order
    assert list(fresh) == epoch  # only the first iteration resumes
    fresh.load_state_dict(state)
    fresh.set_epoch(3)  # the checkpoint's epoch is over: the next epoch starts at its first batch
    assert list(fresh) == sampler.all_batches(3)


def test_resumable_loader_counts_returned_batches_not_prefetched_ones() -> None:
    """With workers the sampler runs ahead of training; the loader's state counts what it returned."""
    data = list(range(64))
    sampler = BucketBatchSampler([5] * 64, batch_size=4, seed=0)
    loader = ResumableDataLoader(data, batch_sampler=sampler, num_workers=1, prefetch_factor=4)
    it = iter(loader)
    seen = [next(it).tolist() for _ in range(3)]
    assert sampler.yielded > 3  # the worker fetched ahead
    assert loader.state_dict()["batches_done"] == 3
    resumed = ResumableDataLoader(data, batch_sampler=BucketBatchSampler([5] * 64, batch_size=4, seed=0))
    resumed.load_state_dict(loader.state_dict())
    rest = [b.tolist() for b in resumed]
    assert seen + rest == [b.tolist() for b in ResumableDataLoader(data, batch_sampler=sampler)]
    del it


def test_rng_states_round_trip_through_a_weights_only_file(tmp_path: Path) -> None:
    """Python, NumPy and torch states survive ``torch.save`` / ``torch.load(weights_only=True)``."""
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.gauss(0, 1), np.random.normal()  # leave a cached Gaussian in both
    torch.save({"rng": get_rng_states()}, tmp_path / "s.pt")
    expected = (random.random(), random.gauss(0, 1), np.random.normal(), np.random.rand(3), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    set_rng_states(torch.load(tmp_path / "s.pt", weights_only=True)["rng"])
    got = (random.random(), random.gauss(0, 1), np.random.normal(), np.random.rand(3), torch.rand(3))
    assert got[:3] == expected[:3]
    np.testing.assert_array_equal(got[3], expected[3])
    assert torch.equal(got[4], expected[4])


def test_last_checkpoint_writes_on_its_time_trigger_inside_an_epoch(tmp_path: Path) -> None:
    """``train_time_interval`` writes last.ckpt at a step's end once that much training time has passed
    (0 here: every step), besides the epoch ends: a run killed as step 3 starts leaves step 3's state, not
    the start's; without the trigger, nothing (no epoch ended yet)."""
    from datetime import timedelta

    from lightning_tf.training import LastCheckpoint

    for interval, saved in ((timedelta(0), 3), (None, None)):
        root = tmp_path / str(interval)
        seed_everything(0)
        model, dm = vision_task()
        last = LastCheckpoint(dirpath=str(root), train_time_interval=interval)
        trainer = Trainer(
            max_epochs=1,
            limit_train_batches=6,
            limit_val_batches=1,
            num_sanity_val_steps=0,
            callbacks=[last, Kill(3)],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="cpu",
            devices=1,
        )
        with pytest.raises(Killed):
            trainer.fit(model, datamodule=dm)
        files = sorted(p.name for p in root.glob("*.ckpt")) if root.exists() else []
        if saved is None:
            assert files == []
        else:
            assert files == ["last.ckpt"]
            assert torch.load(root / "last.ckpt", weights_only=True)["global_step"] == saved
