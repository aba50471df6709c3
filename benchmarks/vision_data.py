"""Training-loader throughput of ``ImageDataModule`` against the usual per-image torchvision v2
pipeline with the same operations, side by side in one run.

Ours transforms a whole uint8 batch at once (random shift and flip vectorised, RandAugment and
TrivialAugment grouped by drawn operation, each image still with its own draw); the reference is
the textbook ``Dataset.__getitem__`` applying ``v2.Compose([Resize, RandomCrop(padding),
RandomHorizontalFlip, RandAugment | TrivialAugmentWide, ToDtype, Normalize])`` image by image.
Before timing, both evaluation pipelines are checked to give identical tensors.

Datasets: ``digits`` always; ``fashion_mnist`` when its files are found (Debian's
``dataset-fashion-mnist`` in /usr/share/datasets/fashion-mnist, or ``--root``).

Run (about a minute on a 2-core CPU; ``--quick`` is a < 30 s smoke run)::

    python benchmarks/vision_data.py [--images N] [--repeats N] [--threads N] [--root DIR]
        [--batch-size N] [--num-workers N] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info  # noqa: E402

from lightning_tf.vision.data import ImageDataModule  # noqa: E402
from lightning_tf.vision.transforms import AUGMENTS  # noqa: E402


class PerImage(Dataset):
    """The reference: one image at a time through a ``v2.Compose``."""

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, transform: v2.Compose) -> None:
        self.images, self.targets, self.transform = images, targets, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(tv_tensors.Image(self.images[i])).as_subclass(torch.Tensor), int(self.targets[i])


def reference_pipeline(dm: ImageDataModule, augment: str, train: bool = True) -> v2.Compose:
    """The per-image v2 pipeline with the operations of ``dm``'s preset."""
    size = dm.image_size
    ops: list = [v2.Resize(size, antialias=True)]
    if train and augment != "none":
        ops.append(v2.RandomCrop(size, padding=max(1, size // 8)))
        if dm.hflip:
            ops.append(v2.RandomHorizontalFlip())
    if train and augment == "randaugment":
        ops.append(v2.RandAugment(num_ops=2, magnitude=9))
    if train and augment == "trivialaugment":
        ops.append(v2.TrivialAugmentWide())
    ops += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(dm.mean, dm.std)]
    return v2.Compose(ops)


def images_per_second(loader: DataLoader, n_images: int) -> float:
    n, start = 0, time.perf_counter()
    while n < n_images:
        for images, _ in loader:
            n += len(images)
            if n >= n_images:
                break
    return n / (time.perf_counter() - start)


def check_same_eval_images(dm: ImageDataModule) -> None:
    """Our batched evaluation pipeline equals the per-image reference, image for image."""
    ref = reference_pipeline(dm, "none", train=False)
    ours = torch.stack([dm.val_set[i][0] for i in range(64)])  # (64, C, S, S)
    theirs = torch.stack([ref(tv_tensors.Image(dm.val_set.images[i])) for i in range(64)])  # (64, C, S, S)
    if not torch.allclose(ours, theirs, atol=1e-5):
        raise SystemExit(f"evaluation images differ: max |diff| {(ours - theirs).abs().max():.3g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=6000, help="training images drawn per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per cell (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--root", default="data/downloads", help="where fashion_mnist is (or is unpacked to)")
    parser.add_argument("--quick", action="store_true", help="digits only, few images: a smoke run")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.quick:
        args.images, args.repeats = 600, 1

    datasets = ["digits"]
    if not args.quick:
        try:
            ImageDataModule("fashion_mnist", root=args.root, download=False).prepare_data()
            datasets.append("fashion_mnist")
        except FileNotFoundError as err:
            print(f"fashion_mnist skipped: {err}\n")

    rows = []
    for name in datasets:
        for augment in AUGMENTS:
            dm = ImageDataModule(
                name,
                root=args.root,
                augment=augment,
                batch_size=args.batch_size,
                num_workers=args.num_workers,
                download=False,
            )
            dm.setup("fit")
            if augment == "none":
                check_same_eval_images(dm)
            ref_set = PerImage(dm.train_set.images, dm.train_set.targets, reference_pipeline(dm, augment))
            loaders = {
                "ours": dm.train_dataloader(),
                "ref": DataLoader(ref_set, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers),
            }
            speed: dict[str, list[float]] = {"ours": [], "ref": []}
            for _ in range(args.repeats):  # alternate, so load changes hit both alike
                for key, loader in loaders.items():
                    speed[key].append(images_per_second(loader, args.images))
            ours, ref = statistics.median(speed["ours"]), statistics.median(speed["ref"])
            rows.append(
                {
                    "dataset": name,
                    "size": dm.image_size,
                    "augment": augment,
                    "ours": ours,
                    "ref": ref,
                    "ratio": ours / ref,
                }
            )

    info = machine_info(torch.device("cpu"))
    print(f"machine: {info}")
    print(
        f"batch {args.batch_size}, num_workers {args.num_workers}, {args.images} images x {args.repeats} repeats "
        "(median)\n"
    )
    print("| dataset | augment | ours img/s | per-image v2 img/s | ours/v2 |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['dataset']} ({r['size']}x{r['size']}) | {r['augment']} | {r['ours']:,.0f} | {r['ref']:,.0f} "
            f"| {r['ratio']:.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
