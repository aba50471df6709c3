"""Exported models against the LightningModule they came from, side by side in one run: file sizes
(checkpoint, safetensors, ONNX) and the latency of one forward pass in torch (``inference_mode``)
and in onnxruntime (CPUExecutionProvider), for the digits ViT and the default K-line forecaster.

Latency does not depend on the weights, so the models are built fresh from their configs
(``configs/vision/digits.yaml``, ``configs/kline/msft_daily.yaml``); a checkpoint of each is written
first so that its size can be compared. Both runtimes use the same number of threads.

Run::

    python benchmarks/export.py [--threads 1] [--repeats 50] [--batches 1 64] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info

from lightning_tf.export import export_onnx, export_safetensors


def models() -> dict[str, torch.nn.Module]:
    """The two exportable task models, as their default configs build them."""
    from lightning_tf.kline import KLineForecaster
    from lightning_tf.vision import ViTClassifier

    torch.manual_seed(0)
    vit = ViTClassifier(num_classes=10, in_chans=1, preset="digits", image_size=16)
    kline = KLineForecaster(
        n_features=6,
        n_targets=1,
        target_channels=[0],
        context_len=64,
        horizon=5,
        patch_len=8,
        stride=4,
        d_model=32,
        n_heads=4,
        n_layers=2,
        d_ff=64,
        dropout=0.2,
        head_dropout=0.2,
        revin=False,
    )
    return {"ViT digits (1x16x16)": vit.eval(), "K-line default (64 bars x 6)": kline.eval()}


def median_ms(fn, repeats: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def kib(path: Path) -> float:
    return (
        sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size
    ) / 1024


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    p.add_argument("--quick", action="store_true", help="smoke run: 3 repeats, batch 1")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.batches = 3, [1]
    import onnxruntime as ort

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    print(f"machine: {machine_info(torch.device('cpu'))}; onnxruntime {ort.__version__}, {args.threads} thread(s)")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = args.threads
    size_rows, speed_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models().items():
            out = Path(tmp) / name.split()[0]
            ckpt = out.with_suffix(".ckpt")
            torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}, ckpt)
            st = export_safetensors(model, out / "safetensors")
            onnx_path = export_onnx(model, out / "model.onnx")
            size_rows.append(f"| {name} | {kib(ckpt):.0f} | {kib(st):.0f} | {kib(onnx_path):.0f} |")
            session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
            inp = session.get_inputs()[0]
            for b in args.batches:
                x = torch.randn(b, *inp.shape[1:])
                xn = x.numpy()
                with torch.inference_mode():
                    t_torch = median_ms(lambda: model(x), args.repeats)
                t_ort = median_ms(lambda: session.run(None, {inp.name: xn}), args.repeats)
                speed_rows.append(f"| {name} | {b} | {t_torch:.3f} | {t_ort:.3f} | {t_torch / t_ort:.2f}x |")
    print("\n| model | weights in a state-dict file (KiB) | safetensors dir (KiB) | ONNX (KiB) |\n|---|---|---|---|")
    print("\n".join(size_rows))
    print(f"\nmedian of {args.repeats} forward passes after 2 warm-up calls")
    print("| model | batch | torch (ms) | onnxruntime (ms) | torch / onnxruntime |\n|---|---|---|---|---|")
    print("\n".join(speed_rows))


if __name__ == "__main__":
    main()
