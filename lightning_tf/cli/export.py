"""``lightning-tf export``: a checkpoint written as safetensors (+ config), ONNX or a transformers Marian
folder (:mod:`lightning_tf.export` does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["export"]


def _size(path: Path) -> str:
    n = path.stat().st_size
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def export(
    *,
    ckpt_path: str,
    format: Literal["safetensors", "onnx", "marian"] = "safetensors",
    output: str | None = None,
    opset: int | None = None,
    no_verify: bool = False,
) -> None:
    """Export a trained model: safetensors weights + a JSON sidecar (every task), ONNX (vision and kline, whose
    known-future and static covariates become inputs of the graph beside the context), or a
    transformers Marian folder (a translation model of Marian's shape).

    Args:
        ckpt_path: Lightning checkpoint (.ckpt) or a safetensors export dir
        format: export format
        output: directory (safetensors, marian) or .onnx file; default: next to the checkpoint,
            <name>_safetensors/, <name>_marian/ or <name>.onnx
        opset: ONNX opset (default: the exporter's)
        no_verify: skip the onnxruntime check of an ONNX export
    """
    from lightning_tf.export import export_onnx, export_safetensors, load_module, onnx_metadata

    ckpt = Path(ckpt_path)
    if output is not None and format != "onnx" and Path(output).exists() and not Path(output).is_dir():
        raise ValueError(f"--output {output}: a file is there; --format {format} writes a folder (name a new one)")
    inputs: dict[str, list] = {}
    stem = ckpt.parent / ckpt.name.removesuffix(".ckpt")
    try:
        model = load_module(ckpt)
        if format == "onnx":
            out = Path(output) if output else stem.with_name(stem.name + ".onnx")
            if out.is_dir():
                out = out / (stem.name + ".onnx")
            export_onnx(model, out, opset_version=opset, verify=not no_verify)
            data = out.with_name(out.name + ".data")
            files = [out, *([data] if data.exists() else [])]
            inputs = onnx_metadata(out)["inputs"]
        elif format == "marian":
            if not callable(getattr(model, "to_marian", None)):
                raise ValueError(
                    f"--format marian is for translation models; {type(model).__name__} has no Marian form"
                )
            out = model.to_marian(output or stem.with_name(stem.name + "_marian"))
            files = sorted(p for p in out.iterdir() if p.is_file())
        else:
            out = export_safetensors(model, output or stem.with_name(stem.name + "_safetensors"))
            files = sorted(p for p in out.iterdir() if p.is_file())
    except (TypeError, ModuleNotFoundError) as e:
        raise ValueError(str(e)) from None
    print(f"exported {type(model).__name__} from {ckpt} ({format}):")
    for f in files:
        print(f"  {f}  {_size(f)}")
    if inputs:  # what to feed: the context, and a covariate model's x_future / static
        print("  inputs: " + ", ".join(f"{name} ({', '.join(map(str, shape))})" for name, shape in inputs.items()))
