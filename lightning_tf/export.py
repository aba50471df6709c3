"""Export trained models to portable formats.

* **safetensors** (every task): a directory with ``model.safetensors`` (the LightningModule's
  ``state_dict``, tied tensors stored once) and ``config.json``, a sidecar with all that rebuilds the
  model without the checkpoint or the training data: the class path, the ``__init__`` arguments
  (``hparams``) and the task's checkpoint extras (the BPE tokenizer of the translation model; class
  names and input normalisation of the ViT; the data scaling of the K-line forecaster). A
  translation model also gets ``tokenizer.json`` (Hugging Face ``tokenizers`` format) beside it.
  :func:`load_safetensors` rebuilds the module from the directory (strict load, bitwise the same
  weights).
* **ONNX** (the ViT and the K-line forecaster): one ``.onnx`` file of the inference ``forward``
  (images ``(B, C, H, W)`` -> logits ``(B, K)``; context ``(B, L, C)``, and a covariate model's
  ``x_future`` ``(B, F, Cf)`` / ``static`` ``(B, S)``, -> forecast ``(B, F, K)`` on the model scale) with a
  dynamic batch axis on every input, exported with ``torch.onnx.export(dynamo=True)`` and checked against
  onnxruntime. The same sidecar JSON, with the inputs' names and shapes (and what a covariate model's
  inputs hold), is stored in the model's metadata under the key ``lightning_tf``.
* **marian** (a Marian-shaped translation model with its SentencePiece tokenizer): a folder that
  transformers' ``MarianMTModel`` and ``MarianTokenizer`` load (:meth:`Seq2SeqTransformer.to_marian`).

The command line (``lightning-tf export``) is :func:`lightning_tf.cli.export.export`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

# torch, Lightning and safetensors are imported where they are used, so that `lightning-tf export
# --help` and its argument errors answer without loading them (seconds at every start).
if TYPE_CHECKING:
    import torch
    from lightning.pytorch import LightningModule
    from torch import Tensor

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "SIDECAR",
    "WEIGHTS",
    "export_onnx",
    "export_safetensors",
    "load_module",
    "load_safetensors",
    "onnx_metadata",
]

log = logging.getLogger(__name__)

FORMAT = "lightning-tf-export"
FORMAT_VERSION = 1
SIDECAR = "config.json"
WEIGHTS = "model.safetensors"
ONNX_METADATA_KEY = "lightning_tf"

# One protobuf may hold at most 2 GiB; larger models keep their weights in a ``.onnx.data`` file.
_ONNX_INLINE_LIMIT = 1.5 * 2**30

Source = Union[str, Path, "LightningModule"]


# ---------------------------------------------------------------------------------------- classes


def _known_classes() -> list[type[LightningModule]]:
    from lightning_tf.kline import KLineForecaster, KronosTuner
    from lightning_tf.text import Seq2SeqTransformer
    from lightning_tf.vision import ViTClassifier

    return [Seq2SeqTransformer, ViTClassifier, KLineForecaster, KronosTuner]


def _class_path(cls: type) -> str:
    """``package.Class`` where the package re-exports the class (``lightning_tf.vision.ViTClassifier``),
    else ``module.Class``."""
    package = cls.__module__.rpartition(".")[0]
    if package and getattr(importlib.import_module(package), cls.__qualname__, None) is cls:
        return f"{package}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _import_class(class_path: str) -> type[LightningModule]:
    """The LightningModule class named by ``class_path``; only lightning_tf's own modules are imported
    from a file's say-so (a sidecar or checkpoint must not make us import arbitrary code)."""
    from lightning.pytorch import LightningModule

    module_name, _, name = class_path.rpartition(".")
    if module_name.split(".")[0] != "lightning_tf":
        raise ValueError(f"class_path {class_path!r} is outside lightning_tf; pass model_class=<the class> to load it")
    cls = getattr(importlib.import_module(module_name), name, None)
    if not (isinstance(cls, type) and issubclass(cls, LightningModule)):
        raise TypeError(f"class_path {class_path!r} does not name a LightningModule")
    return cls


def _init_params(cls: type) -> set[str]:
    return {p for p in inspect.signature(cls.__init__).parameters if p != "self"}


def _checkpoint_class(hparams: dict[str, Any], path: Path) -> type[LightningModule]:
    """The class that wrote a checkpoint: LightningCLI records it as ``_class_path``; a plain
    ``Trainer`` run does not, so the class whose ``__init__`` takes exactly these hyperparameters is
    chosen (the narrowest when several take them all)."""
    if "_class_path" in hparams:
        return _import_class(str(hparams["_class_path"]))
    keys = {k for k in hparams if not k.startswith("_")}
    fits = [cls for cls in _known_classes() if keys and keys <= _init_params(cls)]
    if not fits:
        raise ValueError(
            f"{path}: cannot tell which model wrote this checkpoint (hyperparameters {sorted(keys)}); "
            "pass model_class=<the LightningModule class>"
        )
    return min(fits, key=lambda cls: len(_init_params(cls)))


# ------------------------------------------------------------------------------------ loading


def load_module(source: Source, model_class: type[LightningModule] | None = None) -> LightningModule:
    """A LightningModule from a module (returned as is), a Lightning checkpoint (read with
    ``weights_only=True``) or a directory written by :func:`export_safetensors`.

    Args:
        source: module, ``.ckpt`` file or export directory.
        model_class: the class to build; by default read from the checkpoint (``_class_path`` under
            LightningCLI) or recognised from its hyperparameters.
    """
    from lightning.pytorch import LightningModule

    from lightning_tf.training import check_checkpoint

    if isinstance(source, LightningModule):
        return source
    path = Path(source)
    if path.is_dir():
        if (path / SIDECAR).is_file():
            return load_safetensors(path, model_class=model_class)
        raise FileNotFoundError(f"{path} is a directory without {SIDECAR}: not an export of export_safetensors")
    ckpt = check_checkpoint(path, model_class)  # one line for a missing, broken, foreign or too new file
    cls = model_class or _checkpoint_class(dict(ckpt.get("hyper_parameters") or {}), path)
    del ckpt
    model = cls.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    return model.eval()


# ------------------------------------------------------------------------------------- sidecar


def _jsonable(value: Any, where: str) -> Any:
    """``value`` as JSON types (tuples become lists); anything else is an error naming ``where``."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:  # numpy scalars
        value = value.item()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value}, which JSON cannot hold")
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{where} is a {type(value).__name__}; the export sidecar holds plain JSON values only")


def _describe(model: LightningModule) -> dict[str, Any]:
    """Class path, init arguments and task extras of ``model``. The extras are exactly what the
    module's ``on_save_checkpoint`` adds to a checkpoint (the tokenizer, the class names and
    normalisation, the data scaling), so ``on_load_checkpoint`` restores them on load."""
    import torch

    from lightning_tf import __version__

    hparams = {k: v for k, v in dict(model.hparams).items() if not k.startswith("_")}
    extras: dict[str, Any] = {}
    model.on_save_checkpoint(extras)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "class_path": _class_path(type(model)),
        "hparams": _jsonable(hparams, "hparams"),
        "extras": _jsonable(extras, "extras"),
        "versions": {"lightning_tf": __version__, "torch": torch.__version__.split("+")[0]},
    }


def _dedupe(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Store each tensor once. safetensors refuses tensors that share memory (tied embeddings: the
    output projection of the translation model *is* its target embedding); an alias whose tensor is
    the same view of the same memory as an earlier name is dropped and recorded as
    ``alias -> kept name``; a tensor that overlaps another differently is stored as a copy."""
    kept: dict[tuple[Any, ...], str] = {}
    storages: set[int] = set()
    tensors: dict[str, Tensor] = {}
    tied: dict[str, str] = {}
    for name, t in state.items():
        t = t.detach()
        if t.numel() == 0:  # no memory to share (and no meaningful data pointer)
            tensors[name] = t.contiguous()
            continue
        ptr = t.untyped_storage().data_ptr()
        view = (ptr, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        if view in kept:
            tied[name] = kept[view]
            continue
        kept[view] = name
        tensors[name] = t.clone().contiguous() if ptr in storages or not t.is_contiguous() else t
        storages.add(ptr)
    return tensors, tied


# --------------------------------------------------------------------------------- safetensors


def export_safetensors(source: Source, out_dir: str | Path, model_class: type[LightningModule] | None = None) -> Path:
    """Write ``model.safetensors`` and the ``config.json`` sidecar (and, for a translation model,
    ``tokenizer.json`` / ``tokenizer_config.json``) to ``out_dir``; returns ``out_dir``.

    Args:
        source: a LightningModule, a Lightning checkpoint or an export directory.
        out_dir: directory to write (created if needed; files of the same names are replaced).
        model_class: the checkpoint's class, if it cannot be recognised (see :func:`load_module`).
    """
    from safetensors.torch import save_file

    model = load_module(source, model_class)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sidecar = _describe(model)
    tensors, tied = _dedupe(model.state_dict())  # before moving to the CPU, which would untie
    tensors = {k: v.cpu() for k, v in tensors.items()}
    sidecar["tied"] = tied
    (out / SIDECAR).write_text(json.dumps(sidecar, indent=2) + "\n")
    save_file(tensors, out / WEIGHTS, metadata={"format": "pt", "class_path": sidecar["class_path"]})
    # safetensors writes through a private (0600) temporary file: give the weights the sidecar's
    # permissions, i.e. the user's umask, so an export can be shared like any other file
    os.chmod(out / WEIGHTS, (out / SIDECAR).stat().st_mode & 0o777)
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None and hasattr(tokenizer, "save"):
        # for other runtimes (tokenizers in Rust / JS / Python); the sidecar's copy is what reloads
        tokenizer.save(out)
    log.info("exported %s to %s", sidecar["class_path"], out)
    return out


def load_safetensors(
    directory: str | Path, model_class: type[LightningModule] | None = None, device: str | torch.device = "cpu"
) -> LightningModule:
    """Rebuild the module exported to ``directory`` by :func:`export_safetensors`, in eval mode.

    The module is constructed from the sidecar's ``hparams``, its extras are restored by its own
    ``on_load_checkpoint`` (tokenizer, class names, normalisation, data scaling) and the weights are
    loaded strictly.

    Args:
        directory: the export directory.
        model_class: build this class instead of the sidecar's ``class_path`` (needed for classes
            outside lightning_tf).
        device: where to put the weights.
    """
    from safetensors.torch import load_file

    directory = Path(directory)
    config_path, weights_path = directory / SIDECAR, directory / WEIGHTS
    for p in (config_path, weights_path):
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found: not a directory written by export_safetensors")
    config = json.loads(config_path.read_text())
    if config.get("format") != FORMAT:
        raise ValueError(f"{config_path}: format is {config.get('format')!r}, expected {FORMAT!r}")
    if int(config.get("format_version", 0)) > FORMAT_VERSION:
        raise ValueError(
            f"{config_path}: format_version {config['format_version']} is newer than this lightning_tf reads "
            f"({FORMAT_VERSION}); upgrade lightning-tf"
        )
    cls = model_class or _import_class(config["class_path"])
    model = cls(**config["hparams"])
    model.on_load_checkpoint(dict(config.get("extras") or {}))
    state = load_file(weights_path, device=str(device))
    for alias, name in (config.get("tied") or {}).items():
        state[alias] = state[name]
    model.load_state_dict(state, strict=True)
    return model.to(device).eval()


# ---------------------------------------------------------------------------------------- ONNX


def _onnx_spec(model: LightningModule, batch: int) -> tuple[dict[str, Tensor], list[str], str, list[Any]]:
    """Example inputs of ``batch`` rows by ``forward``'s argument name, the graph's input names (one per example
    input, in order), its output name and output shape (``"batch"`` for the dynamic axis), read from the module:
    its ``onnx_example_inputs(batch)`` where it has one (the inputs it reads: the K-line forecaster's context and
    covariates), else Lightning's ``example_input_array`` (one tensor, batch first) redrawn at ``batch``; and its
    ``onnx_input_names`` / ``onnx_output_names``."""
    import torch
    from torch import Tensor

    example = getattr(model, "example_input_array", None)
    if example is None:
        raise ValueError(
            f"{type(model).__name__} cannot be exported to ONNX: it has no example_input_array (a translation "
            "model decodes in Python, beam search over a KV cache, around the network); export it with "
            "--format safetensors"
        )
    if callable(getattr(model, "onnx_example_inputs", None)):
        inputs = dict(model.onnx_example_inputs(batch))
    elif isinstance(example, Tensor):
        p = next(model.parameters())
        first = next(iter(inspect.signature(model.forward).parameters))
        inputs = {first: torch.randn(batch, *example.shape[1:], dtype=p.dtype, device=p.device)}  # (batch, ...)
    else:
        raise ValueError(
            f"{type(model).__name__} cannot be exported to ONNX: its example_input_array is a "
            f"{type(example).__name__} and it has no onnx_example_inputs(batch) naming forward's arguments"
        )
    names = list(getattr(model, "onnx_input_names", None) or ["input"])
    if len(names) != len(inputs):
        raise ValueError(
            f"{type(model).__name__} cannot be exported to ONNX: onnx_input_names {names} do not name its "
            f"example inputs {list(inputs)} one to one"
        )
    output_name = (getattr(model, "onnx_output_names", None) or ["output"])[0]
    with torch.no_grad():
        out = model(**{k: v[:1] for k, v in inputs.items()})
    return inputs, names, output_name, ["batch", *out.shape[1:]]


def onnx_metadata(path: str | Path) -> dict[str, Any]:
    """The sidecar stored in an ONNX file by :func:`export_onnx` (class path, hparams, extras, input
    and output names and shapes, and what a model with covariates reads besides its context)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    if ONNX_METADATA_KEY not in props:
        raise ValueError(f"{path}: no {ONNX_METADATA_KEY!r} metadata; not written by export_onnx")
    return json.loads(props[ONNX_METADATA_KEY])


def export_onnx(
    source: Source,
    path: str | Path,
    opset_version: int | None = None,
    verify: bool = True,
    atol: float = 1e-4,
    model_class: type[LightningModule] | None = None,
) -> Path:
    """Export the inference ``forward`` of a module with an ``example_input_array`` (the ViT, the K-line
    forecaster) to ONNX with a dynamic batch axis on every input; names and shapes come from the module.

    ViT: ``images`` (batch, C, H, W), normalised as in training -> ``logits`` (batch, K).
    K-line: ``context`` (batch, L, C) on the model scale, and for a model with covariates ``x_future``
    (batch, F, Cf) float32 and / or ``static`` (batch, S) int64 (only those it reads) -> ``forecast``
    (batch, F, K) on the model scale (the metadata's ``extras.data_scale`` maps it to original units; its
    ``covariates`` entry describes the covariate inputs). The attention-weights path is not part of the graph.
    Uses the ``torch.export`` based exporter (``dynamo=True``): the legacy TorchScript exporter is deprecated and
    cannot export the K-line model's ``unfold`` with a dynamic batch. Weights stay inside the file up to 1.5 GiB
    (else in ``<path>.data``).

    Args:
        source: a LightningModule, a Lightning checkpoint or a safetensors export directory.
        path: the ``.onnx`` file to write.
        opset_version: ONNX opset; default: the exporter's.
        verify: run the file in onnxruntime (if installed) on random inputs of every kind at batch sizes 1 and 3
            and raise if any output differs from torch's by more than ``atol`` (plus 1e-3 relative).
        atol: absolute tolerance of ``verify``.
        model_class: the checkpoint's class, if it cannot be recognised (see :func:`load_module`).

    Returns:
        The path written.
    """
    import warnings

    import torch

    from lightning_tf.core import evaluating

    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(
            f"ONNX export needs {' and '.join(missing)}: pip install 'lightning-tf[onnx]' (onnx, onnxscript and "
            "onnxruntime to verify)"
        )
    model = load_module(source, model_class)
    path = Path(path)
    with evaluating(model):
        # input and configuration errors surface here, readably, not from inside the tracer. An example batch
        # of 2: torch.export specialises a size-1 dimension to the constant 1
        inputs, input_names, output_name, out_shape = _onnx_spec(model, batch=2)
        meta = _describe(model) | {
            "inputs": {name: ["batch", *t.shape[1:]] for name, t in zip(input_names, inputs.values())},
            "outputs": {output_name: out_shape},
        }
        sidecar = getattr(model, "onnx_sidecar", None)
        if callable(sidecar):  # what the module says of its inputs (the K-line forecaster's covariates)
            meta |= _jsonable(sidecar(), "onnx_sidecar")
        path.parent.mkdir(parents=True, exist_ok=True)
        first, *rest = inputs  # the first argument positionally, as before; optional ones by name
        with warnings.catch_warnings():
            # several inputs share the one batch axis; the exporter says it names it once
            warnings.filterwarnings("ignore", message=r".*axis name: batch will not be used")
            program = torch.onnx.export(
                model,
                (inputs[first],),
                kwargs={k: inputs[k] for k in rest} or None,
                dynamo=True,
                input_names=input_names,
                output_names=[output_name],
                dynamic_shapes={k: {0: "batch"} for k in inputs},
                opset_version=opset_version,
                verbose=False,
            )
        assert program is not None
        from onnx_ir.traversal import RecursiveGraphIterator

        # the exporter annotates every node with its Python stack trace and module path: a third of
        # the file for a small model, and local file paths nobody downstream needs
        for node in RecursiveGraphIterator(program.model.graph):
            node.metadata_props.clear()
        program.model.metadata_props[ONNX_METADATA_KEY] = json.dumps(meta)
        n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        program.save(path, external_data=n_bytes > _ONNX_INLINE_LIMIT)
        if verify:
            _verify_onnx(model, path, input_names, atol)
    return path


def _verify_onnx(model: LightningModule, path: Path, input_names: list[str], atol: float) -> None:
    """onnxruntime's output of ``path`` against ``model``'s on fresh example inputs (every input the graph
    takes, by ``input_names``) at batch sizes 1 and 3."""
    import torch

    if importlib.util.find_spec("onnxruntime") is None:
        log.warning("onnxruntime is not installed: %s was not checked against torch", path)
        return
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        inputs, *_ = _onnx_spec(model, batch)
        if any(t.is_floating_point() and t.dtype != torch.float32 for t in inputs.values()):
            dtypes = {k: str(t.dtype) for k, t in inputs.items()}
            log.warning("%s has inputs %s: not checked against torch (the check feeds float32 arrays)", path, dtypes)
            return
        with torch.no_grad():
            ref = model(**inputs).cpu().numpy()
        got = session.run(None, {name: t.cpu().numpy() for name, t in zip(input_names, inputs.values())})[0]
        if got.shape != ref.shape or not np.allclose(got, ref, atol=atol, rtol=1e-3):
            diff = float(np.abs(got - ref).max()) if got.shape == ref.shape else float("nan")
            raise RuntimeError(
                f"{path}: onnxruntime output {got.shape} differs from torch {ref.shape} at batch {batch} "
                f"(max abs diff {diff:.3g}, tolerance {atol})"
            )
        log.info("%s: onnxruntime matches torch at batch %d (max abs diff %.2g)", path, batch, np.abs(got - ref).max())


# ----------------------------------------------------------------------------------------- CLI
