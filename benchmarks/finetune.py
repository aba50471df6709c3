"""Fine-tuning a ViT at equal wall time: from scratch, full fine-tune, layer-wise decay and linear probe.

A small ViT (the ``digits`` preset: 16x16 images, patches of 4, 4 layers, d 64) is pretrained on
Fashion-MNIST (Debian's ``dataset-fashion-mnist``, resized to 16x16) for ``--pretrain_seconds``, its
checkpoint then serves as ``pretrained=`` for four runs on scikit-learn's digits, each given the same
``--seconds`` of training (``Trainer(max_time=...)``, a constant rate after a short warmup, so that no
schedule depends on the run's length):

* ``scratch``: the same network from a random initialisation;
* ``full``: every weight fine-tuned at one rate;
* ``layer_decay``: every weight fine-tuned, block ``i`` at ``lr * 0.75 ** (n - i)``;
* ``linear_probe``: only the (re-initialised) head trained (``freeze: backbone``).

Every fine-tuned run starts from a new head (Fashion-MNIST's ten classes are not the digits'). The
digits test split (360 images) gives the accuracy. One thread (``--threads``), no loader workers.

Run::

    python benchmarks/finetune.py [--pretrain_seconds 90] [--seconds 30] [--seeds 1 2] [--json docs/results/finetune.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARMS = ("scratch", "full", "layer_decay", "linear_probe")


def _trainer(seconds: float, root: Path, val: bool = True):
    from lightning.pytorch import Trainer

    return Trainer(
        max_time={"seconds": seconds},
        max_epochs=10_000,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        num_sanity_val_steps=0,
        limit_val_batches=1.0 if val else 0,
        default_root_dir=root,
    )


def pretrain(seconds: float, fashion_root: str, work: Path) -> tuple[Path, dict]:
    """The digits-preset ViT trained ``seconds`` on Fashion-MNIST at 16x16; its checkpoint and numbers."""
    import torch

    from lightning_tf.vision import ImageDataModule, ViTClassifier

    torch.manual_seed(0)
    dm = ImageDataModule(
        dataset="fashion_mnist", root=fashion_root, image_size=16, batch_size=128, download=False, augment="flip_crop"
    )
    model = ViTClassifier(preset="digits", lr=2e-3, scheduler="constant", warmup_steps=50, label_smoothing=0.1)
    trainer = _trainer(seconds, work, val=False)
    start = time.perf_counter()
    trainer.fit(model, dm)
    wall = time.perf_counter() - start
    ckpt = work / "pretrained.ckpt"
    trainer.save_checkpoint(ckpt)
    acc = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    return ckpt, {"wall_s": round(wall, 1), "steps": trainer.global_step, "fashion_mnist_test_acc": round(acc, 4)}


def finetune(arm: str, seconds: float, source: Path, work: Path, seed: int) -> dict:
    """One arm on the digits for ``seconds``: its test accuracy, steps and trainable parameters. ``seed``
    draws the initialisation (the head, or the whole network from scratch); the data split and order stay."""
    import torch

    from lightning_tf.vision import ImageDataModule, ViTClassifier

    torch.manual_seed(seed)
    common = dict(scheduler="constant", warmup_steps=20, label_smoothing=0.1)
    if arm == "scratch":
        model = ViTClassifier(preset="digits", lr=2e-3, **common)
    else:
        kw = {
            "full": dict(lr=1e-3),
            "layer_decay": dict(lr=1e-3, layer_decay=0.75),
            "linear_probe": dict(lr=1e-2, freeze="backbone", weight_decay=0.0),
        }[arm]
        model = ViTClassifier(pretrained=str(source), **kw, **common)
        model.net.reset_classifier(10)  # a new head: the pretraining classes are not the digits
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    dm = ImageDataModule(dataset="digits", batch_size=64, augment="flip_crop")
    trainer = _trainer(seconds, work)
    start = time.perf_counter()
    trainer.fit(model, dm)
    wall = time.perf_counter() - start
    acc = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    return {
        "arm": arm,
        "seed": seed,
        "digits_test_acc": round(acc, 4),
        "steps": trainer.global_step,
        "epochs": trainer.current_epoch,
        "wall_s": round(wall, 1),
        "trainable_params": trainable,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretrain_seconds", type=float, default=90.0)
    parser.add_argument("--seconds", type=float, default=30.0, help="training wall time of each fine-tuning arm")
    parser.add_argument("--fashion_root", default="data/downloads", help="where Fashion-MNIST is (or is unpacked to)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[1], help="initialisation seeds of each arm")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        source, pre = pretrain(args.pretrain_seconds, args.fashion_root, work)
        print(f"pretrained on Fashion-MNIST: {pre}", flush=True)
        rows = []
        for seed in args.seeds:  # seed by seed: machine load drifting over the run hits every arm alike
            for arm in args.arms:
                rows.append(finetune(arm, args.seconds, source, work, seed))
                print(rows[-1], flush=True)
    result = {
        "pretrain": pre,
        "seconds_per_arm": args.seconds,
        "threads": args.threads,
        "torch": torch.__version__.split("+")[0],
        "arms": rows,
    }
    print("\n| arm | digits test acc (mean) | per seed | steps per seed | trainable params |\n|---|---|---|---|---|")
    for arm in args.arms:
        mine = [r for r in rows if r["arm"] == arm]
        mean = sum(r["digits_test_acc"] for r in mine) / len(mine)
        accs = ", ".join(f"{100 * r['digits_test_acc']:.1f}" for r in mine)
        steps = ", ".join(str(r["steps"]) for r in mine)
        print(f"| {arm} | {100 * mean:.1f}% | {accs} | {steps} | {mine[0]['trainable_params']:,} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
