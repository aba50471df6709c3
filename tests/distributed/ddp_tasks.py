"""Train, validate, test and predict each task with ``devices`` CPU processes (gloo), and write what
rank 0 saw to ``<out>/<task>.json``: the logged metrics, per-rank facts gathered from every process,
and the prediction files under ``<out>/``.

Run as a script: ``python tests/distributed/ddp_tasks.py --devices 2 --out DIR [--tasks text,vision]``.
Lightning's DDP launcher starts the other ranks by running this same command again, so every
process runs the same sequence of Trainers. ``--devices 1`` runs the same strategy (``ddp``) in one
process, so both runs draw their training batches from the same permutation (the loaders' own
``ShuffledBatchSampler``, dealt out as ``DistributedSampler`` deals it; it does not depend on the number
of processes): one process with batch ``2b`` sees at every
step exactly the union of what two processes with batch ``b`` see.

Sizes are chosen so that the evaluation sets do NOT divide by 2: a sampler that pads them (with a
repeated item) changes the metrics.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch import Trainer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the tests package (synthetic bars), also in the launched ranks

from lightning_tf.training import gather_objects

SEED = 0


def trainer(devices: int, **kwargs: Any) -> Trainer:
    return Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
        **kwargs,
    )


def metrics(results: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(v) for d in results for k, v in d.items()}


def param_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def write_once(path: Path, text: str) -> Path:
    """Write an input file atomically (every rank runs this script and may write it at the same time)."""
    if not path.exists():
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def save(out: Path, task: str, record: dict[str, Any], rank: int) -> None:
    if rank == 0:
        (out / f"{task}.json").write_text(json.dumps(record, indent=1, sort_keys=True))


# ------------------------------------------------------------------------------------------ text


def run_text(devices: int, out: Path) -> None:
    from lightning_tf.text import Seq2SeqTransformer, TranslationDataModule, TranslationWriter

    tokens = 64  # padded tokens per process per step: the same global budget, 128, in both runs
    data_kw = {
        "dataset": "copy",
        "n_train": 96,
        "n_val": 21,
        "n_test": 21,
        "min_words": 2,
        "max_words": 6,
        "vocab_size": 40,
        "max_length": 20,
        "batch_size": None,
        "seed": SEED,
    }
    model_kw = {
        "vocab_size": 40,
        "d_model": 16,
        "n_heads": 2,
        "n_layers": 1,
        "d_ff": 32,
        "dropout": 0.0,
        "lr": 3e-3,
        "warmup_steps": 2,
        "beam_size": 1,
        "extra_len": 3,
        "n_logged_samples": 0,
    }
    record: dict[str, Any] = {}
    # lines of several lengths (so the bucketed predict batches reorder them) and one empty line
    lines = [" ".join("abcdefgh"[(i * 3 + j) % 8] for j in range(1 + i % 5)) for i in range(13)]
    lines[6] = ""
    predict_file = write_once(out / "text_in.txt", "\n".join(lines) + "\n")

    pl.seed_everything(SEED, verbose=False)
    dm = TranslationDataModule(max_tokens=tokens * 2 // devices, **data_kw)
    model = Seq2SeqTransformer(**model_kw)
    t = trainer(devices, max_epochs=1, use_distributed_sampler=False, limit_val_batches=0)
    t.fit(model, datamodule=dm)
    sampler = t.train_dataloader.batch_sampler
    seen = gather_objects([list(map(int, bt)) for bt in sampler])  # this rank's batches of epoch 0
    record["train_batches"] = seen
    record["max_tokens"] = tokens * 2 // devices
    record["train_all_batches_unsharded"] = [list(map(int, bt)) for bt in sampler.all_batches()]
    record["src_lengths"] = [int(x) for x in dm.datasets["train"].src_lengths]
    record["tgt_lengths"] = [int(x) for x in dm.datasets["train"].tgt_lengths]
    record["global_step"] = gather_objects(t.global_step)
    record["params"] = gather_objects(param_digest(model))

    # evaluation and prediction of the SAME weights and batches in both runs: the untrained, seeded model
    # (trained weights differ, since batches under a budget of 128 and of 64 tokens are cut differently)
    pl.seed_everything(SEED, verbose=False)
    model = Seq2SeqTransformer(**model_kw)
    dm = TranslationDataModule(max_tokens=tokens, predict_file=str(predict_file), **data_kw)
    t = trainer(devices, use_distributed_sampler=False)
    record["test"] = metrics(t.test(model, datamodule=dm, verbose=False))
    record["validate"] = metrics(t.validate(model, datamodule=dm, verbose=False))
    writer = TranslationWriter(str(out / "translations.txt"))
    t = trainer(devices, use_distributed_sampler=False, callbacks=[writer])
    t.predict(model, datamodule=dm, return_predictions=False)
    # Lightning's default for prediction: it deals the batches out to the processes (without repeats)
    writer = TranslationWriter(str(out / "translations_sharded.txt"))
    t = trainer(devices, callbacks=[writer])
    t.predict(model, datamodule=dm, return_predictions=False)
    record["predict_batches"] = gather_objects(int(t.num_predict_batches[0]))
    save(out, "text", record, t.global_rank)


# ---------------------------------------------------------------------------------------- vision


def run_vision(devices: int, out: Path) -> None:
    from lightning_tf.vision import ClassificationWriter, ImageDataModule, ViTClassifier

    b = 16
    # 1797 digits: test 20% -> 359 images, val 10% of the rest -> 143: both odd
    data_kw = {"dataset": "digits", "val_fraction": 0.1, "test_fraction": 0.2, "augment": "none", "seed": SEED}
    model_kw = {
        "preset": "digits",
        "num_classes": 10,
        "in_chans": 1,
        "dropout": 0.0,
        "drop_path": 0.0,
        "lr": 2e-3,
        "warmup_steps": 2,
        "label_smoothing": 0.0,
        "attention_images": 0,
    }
    record: dict[str, Any] = {}
    pl.seed_everything(SEED, verbose=False)
    dm = ImageDataModule(batch_size=b * 2 // devices, **data_kw)
    model = ViTClassifier(**model_kw)
    t = trainer(devices, max_steps=6, limit_val_batches=0)
    t.fit(model, datamodule=dm)
    record["global_step"] = gather_objects(t.global_step)
    record["params"] = gather_objects(param_digest(model))
    t = trainer(devices)
    record["sizes"] = {"val": len(dm.val_set), "test": len(dm.test_set)}
    record["validate"] = metrics(t.validate(model, datamodule=dm, verbose=False))
    record["test"] = metrics(t.test(model, datamodule=dm, verbose=False))
    record["eval_batches"] = gather_objects(int(t.num_test_batches[0]))
    writer = ClassificationWriter(output_file=str(out / "predictions.csv"))
    trainer(devices, callbacks=[writer]).predict(model, datamodule=dm, return_predictions=False)
    save(out, "vision", record, t.global_rank)


# ----------------------------------------------------------------------------------------- kline


def kline_csv(out: Path) -> Path:
    import pandas as pd

    from tests.helpers.kline import make_bars

    frames = []
    for k, name in enumerate(["AAA", "BBB", "CCC"]):  # three tickers: three prediction windows
        f = make_bars(260, seed=k)
        f.insert(0, "Ticker", name)
        frames.append(f)
    return write_once(out / "bars.csv", pd.concat(frames).to_csv(index=False))


def run_kline(devices: int, out: Path) -> None:
    from lightning_tf.kline import ForecastWriter, KLineDataModule, KLineForecaster

    b = 16
    path = kline_csv(out)
    data_kw = {"path": str(path), "context_len": 32, "horizon": 4, "ticker_column": "Ticker", "seed": SEED}
    model_kw = {
        "n_features": 6,
        "n_targets": 1,
        "context_len": 32,
        "horizon": 4,
        "patch_len": 8,
        "stride": 8,
        "d_model": 16,
        "n_heads": 2,
        "n_layers": 1,
        "d_ff": 32,
        "dropout": 0.0,
        "head_dropout": 0.0,
        "revin": False,
        "lr": 1e-3,
        "warmup_steps": 2,
    }
    record: dict[str, Any] = {}
    pl.seed_everything(SEED, verbose=False)
    # the two processes read a panel prepared once (rank 0 prepares, both map it); one process builds it in memory
    cache = {"cache_dir": str(out / "panel_cache")} if devices > 1 else {}
    dm = KLineDataModule.from_arguments({"batch_size": b * 2 // devices, **data_kw, **cache})
    model = KLineForecaster(**model_kw)
    t = trainer(devices, max_steps=6, limit_val_batches=0)
    t.fit(model, datamodule=dm)
    record["global_step"] = gather_objects(t.global_step)
    record["params"] = gather_objects(param_digest(model))
    t = trainer(devices)
    record["sizes"] = {k: len(dm.datasets[k]) for k in ("train", "val", "test")}
    record["validate"] = metrics(t.validate(model, datamodule=dm, verbose=False))
    record["test"] = metrics(t.test(model, datamodule=dm, verbose=False))
    record["test_summary"] = model.test_summary
    writer = ForecastWriter(output_file=str(out / "forecast" / "forecast.csv"), plot_bars=20)
    trainer(devices, callbacks=[writer]).predict(model, datamodule=dm, return_predictions=False)
    # one ticker, one window, two processes: the second process forecasts it too, the file has it once
    one_ticker = write_once(out / "bars_bbb.csv", _bbb(path))
    dm = KLineDataModule.from_arguments({"batch_size": b, "predict_path": str(one_ticker), **data_kw})
    writer = ForecastWriter(output_file=str(out / "forecast_one" / "forecast.csv"), plot_bars=20)
    trainer(devices, callbacks=[writer]).predict(model, datamodule=dm, return_predictions=False)
    save(out, "kline", record, t.global_rank)


def _bbb(path: Path) -> str:
    import pandas as pd

    frame = pd.read_csv(path)
    return frame[frame["Ticker"] == "BBB"].to_csv(index=False)


RUNNERS = {"text": run_text, "vision": run_vision, "kline": run_kline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", default=",".join(RUNNERS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    for task in args.tasks.split(","):
        RUNNERS[task](args.devices, args.out)


if __name__ == "__main__":
    main()
