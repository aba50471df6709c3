"""Speed of ViTClassifier's network against timm's ``VisionTransformer`` computing the same function,
and (``--fashion-mnist``) test accuracy on Fashion-MNIST after a fixed CPU budget.

Speed mode: for each size, timm's ``VisionTransformer`` is built with the same configuration
(image size, patch, channels, width, depth, heads, MLP ratio, class token, no dropout) and our
:class:`~lightning_tf.vision.vit.VisionTransformer` takes its weights (``timm_to_ours``); the logits are
checked to agree within 1e-5 before any timing (the run aborts otherwise). Two modes per size:

* ``train``: ``zero_grad`` + forward + cross-entropy + backward + ``AdamW.step``;
* ``eval``: ``model.eval()`` under ``torch.inference_mode()``.

Ours and timm alternate within every repeat (swapping order each repeat) so that load from other
processes hits both alike; each cell reports the median images/s, and the ratio ours/timm from the
medians and from the fastest repeat of each.

Quality mode (``--fashion-mnist``): the ``cpu28`` preset (patch 4, 6 layers, d 64, ~0.2M parameters)
trained for ``--epochs`` on Fashion-MNIST, its test accuracy printed beside the 92.3% published for a
~210k-parameter ViT of the same shape. The data: torchvision's layout under ``--root``, or Debian's
``dataset-fashion-mnist`` package (``/usr/share/datasets/fashion-mnist``); without either, the script
tries ``apt-get download dataset-fashion-mnist`` + ``dpkg -x`` into a temporary folder, else skips.

Run::

    python benchmarks/vit.py [--quick] [--device cpu|cuda] [--batch N] [--threads N] [--repeats N] [--sizes digits cifar tiny] [--json PATH]
    python benchmarks/vit.py --fashion-mnist [--epochs 10] [--threads 2] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core_layers import machine_info, sync

from lightning_tf.vision.timm_interop import timm_to_ours

# name: (image_size, patch, in_chans, num_classes, d_model, depth, heads, mlp_ratio, batch)
SIZES = {
    "digits": (16, 4, 1, 10, 64, 4, 4, 2.0, 64),
    "cpu28": (28, 4, 1, 10, 64, 6, 4, 2.0, 64),
    "cifar": (32, 4, 3, 10, 128, 6, 4, 2.0, 64),
    "tiny": (224, 16, 3, 1000, 192, 12, 3, 4.0, 4),
}
QUICK_BATCH = {"digits": 16, "cpu28": 16, "cifar": 8, "tiny": 1}
PUBLISHED_FASHION_MNIST = 0.923


@dataclass
class Row:
    """One table row: a size in one mode."""

    size: str
    image: int
    patch: int
    d_model: int
    depth: int
    batch: int
    mode: str
    ours_img_s: float
    timm_img_s: float
    ratio: float
    ratio_fastest: float


def build_pair(size: str, device: torch.device) -> tuple[nn.Module, nn.Module, torch.Tensor]:
    """(ours, timm) with the same weights (checked on the CPU), and a batch of images, on ``device``."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    image, patch, chans, classes, d, depth, heads, mlp, batch = SIZES[size]
    theirs = TimmViT(
        img_size=image,
        patch_size=patch,
        in_chans=chans,
        num_classes=classes,
        embed_dim=d,
        depth=depth,
        num_heads=heads,
        mlp_ratio=mlp,
    )
    ours, _ = timm_to_ours(theirs)
    x = torch.randn(batch, chans, image, image)
    ours.eval(), theirs.eval()
    with torch.no_grad():
        diff = (ours(x[:2]) - theirs(x[:2])).abs().max().item()
    if diff > 1e-5:
        raise SystemExit(f"{size}: our logits differ from timm's by {diff:.2e}; not timing different functions")
    return ours.to(device), theirs.to(device), x.to(device)


def time_pair(
    ours: nn.Module, theirs: nn.Module, x: torch.Tensor, mode: str, repeats: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Seconds per step of each side, alternating (and swapping order) every repeat."""
    y = torch.randint(0, 10, (x.shape[0],), device=x.device)
    steps = {}
    for name, model in (("ours", ours), ("timm", theirs)):
        if mode == "train":
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

            def step(model: nn.Module = model, opt: torch.optim.Optimizer = opt) -> None:
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
                opt.step()
        else:
            model.eval()

            def step(model: nn.Module = model) -> None:
                with torch.inference_mode():
                    model(x)

        steps[name] = step
    for _ in range(warmup):
        steps["ours"](), steps["timm"]()
    times: dict[str, list[float]] = {"ours": [], "timm": []}
    for r in range(repeats):
        for name in ("ours", "timm") if r % 2 == 0 else ("timm", "ours"):
            sync(x.device)
            t = time.perf_counter()
            steps[name]()
            sync(x.device)
            times[name].append(time.perf_counter() - t)
    return times["ours"], times["timm"]


def speed(args: argparse.Namespace) -> list[Row]:
    rows = []
    for size in args.sizes:
        if args.quick:
            SIZES[size] = SIZES[size][:-1] + (QUICK_BATCH[size],)
        if args.batch:
            SIZES[size] = SIZES[size][:-1] + (args.batch,)
        ours, theirs, x = build_pair(size, torch.device(args.device))
        image, patch, _, _, d, depth, *_ = SIZES[size]
        for mode in args.modes:
            t_ours, t_timm = time_pair(ours, theirs, x, mode, args.repeats, args.warmup)
            B = x.shape[0]
            o, t = B / statistics.median(t_ours), B / statistics.median(t_timm)
            rows.append(Row(size, image, patch, d, depth, B, mode, o, t, o / t, min(t_timm) / min(t_ours)))
            print(f"{size:>6} {mode:>5}: ours {o:9.1f} img/s  timm {t:9.1f} img/s  ratio {o / t:.3f}", flush=True)
    return rows


def markdown(rows: list[Row]) -> str:
    lines = [
        (
            "| size | image | patch | d | depth | batch | mode | ours img/s | timm img/s | ours/timm "
            "| ours/timm (fastest) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.size} | {r.image} | {r.patch} | {r.d_model} | {r.depth} | {r.batch} | {r.mode} | "
            f"{r.ours_img_s:.1f} | {r.timm_img_s:.1f} | {r.ratio:.3f} | {r.ratio_fastest:.3f} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------- Fashion-MNIST


def find_fashion_mnist(root: str | None) -> str | None:
    """A root where ImageDataModule finds Fashion-MNIST, or None."""
    from lightning_tf.vision.datasets import FASHION_MNIST_SYSTEM_DIRS

    if root is not None:
        return root
    if any(d.is_dir() and any(d.iterdir()) for d in FASHION_MNIST_SYSTEM_DIRS):
        return tempfile.mkdtemp(prefix="fmnist-")  # the DataModule copies the system files into it
    if shutil.which("apt-get") and shutil.which("dpkg"):
        work = Path(tempfile.mkdtemp(prefix="fmnist-deb-"))
        try:
            subprocess.run(
                ["apt-get", "download", "dataset-fashion-mnist"], cwd=work, check=True, capture_output=True, timeout=600
            )
            deb = next(work.glob("dataset-fashion-mnist*.deb"))
            subprocess.run(["dpkg", "-x", str(deb), str(work / "x")], check=True, capture_output=True, timeout=600)
            found = next((p.parent for p in (work / "x").rglob("train-images-idx3-ubyte*")), None)
            return str(found) if found else None
        except (subprocess.SubprocessError, StopIteration, OSError) as e:
            print(f"apt-get download dataset-fashion-mnist failed: {e}", file=sys.stderr)
    return None


def fashion_mnist(args: argparse.Namespace) -> dict[str, float] | None:
    from lightning.pytorch import Trainer, seed_everything

    from lightning_tf.vision import ImageDataModule, ViTClassifier

    root = find_fashion_mnist(args.root)
    if root is None:
        print(
            "SKIPPED --fashion-mnist: no Fashion-MNIST files. Install Debian's package `dataset-fashion-mnist` "
            "(files under /usr/share/datasets/fashion-mnist) or pass --root with torchvision's FashionMNIST layout."
        )
        return None
    seed_everything(0)
    dm = ImageDataModule(
        dataset="fashion_mnist", root=root, batch_size=128, augment="flip_crop", download=False, num_workers=0
    )
    # a short budget: little regularisation, a high peak learning rate
    model = ViTClassifier(
        num_classes=10,
        in_chans=1,
        preset="cpu28",
        lr=3e-3,
        weight_decay=0.05,
        warmup_steps=200,
        label_smoothing=0.0,
        drop_path=0.0,
        attention_images=0,
    )
    trainer = Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(model, dm)
    train_s = time.perf_counter() - start
    acc = trainer.test(model, dm, verbose=False)[0]["test/acc"]
    params = sum(p.numel() for p in model.parameters())
    print(
        "\n| model | parameters | epochs | train time | test accuracy |\n|---|---|---|---|---|\n"
        f"| ViTClassifier cpu28 (patch 4, 6 layers, d 64) | {params / 1e3:.0f}k | {args.epochs} | "
        f"{train_s / 60:.1f} min | {100 * acc:.2f}% |\n"
        f"| published ViT (patch 4, 6 layers, d 64) | 210k | - | - | {100 * PUBLISHED_FASHION_MNIST:.1f}% |"
    )
    return {"test_acc": acc, "train_s": train_s, "epochs": args.epochs, "params": params}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small batches, 2 sizes, few repeats: a < 60 s smoke test")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the speed mode runs")
    p.add_argument("--batch", type=int, default=None, help="images per step of every size (default: the size's)")
    p.add_argument("--sizes", nargs="+", choices=list(SIZES), default=None, help="default: digits cifar tiny")
    p.add_argument("--modes", nargs="+", choices=["train", "eval"], default=["train", "eval"])
    p.add_argument("--repeats", type=int, default=None, help="timed steps per side and cell (default 20; --quick 3)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per side first (default 3; --quick 1)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--json", metavar="PATH", help="also write machine info and rows as JSON")
    p.add_argument("--fashion-mnist", action="store_true", help="quality mode: Fashion-MNIST test accuracy")
    p.add_argument("--epochs", type=int, default=10, help="--fashion-mnist training epochs")
    p.add_argument("--root", default=None, help="--fashion-mnist data root (torchvision layout or the idx files)")
    args = p.parse_args(argv)
    args.sizes = args.sizes or (["digits", "cifar"] if args.quick else ["digits", "cifar", "tiny"])
    args.repeats = args.repeats or (3 if args.quick else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("WANDB_MODE", "offline")
    if args.threads:
        torch.set_num_threads(args.threads)
    info = machine_info(torch.device(args.device))
    print("machine:", ", ".join(f"{k}={v}" for k, v in info.items() if v is not None))
    result: dict = {"machine": info}
    if args.fashion_mnist:
        result["fashion_mnist"] = fashion_mnist(args)
    else:
        torch.manual_seed(0)
        rows = speed(args)
        print()
        print(markdown(rows))
        result["rows"] = [asdict(r) for r in rows]
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
