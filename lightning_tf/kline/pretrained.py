"""Starting a :class:`~lightning_tf.kline.KLineForecaster` from a pretrained one (``pretrained: PATH``), as the ViT's
``pretrained:`` starts from timm's weights.

The source is one of this package's K-line forecasters: a checkpoint (``.ckpt``) or a folder ``lightning-tf export
--format safetensors`` wrote; or a published forecaster, Chronos-Bolt (``amazon/chronos-bolt-small`` from the hub, or
a folder holding its config.json and weights), which becomes the ``chronos_bolt`` backbone whole: its encoder,
decoder and quantile head (:func:`read_published`). Its architecture (the backbone and its Transformer) is taken whole; the weights of
the backbone load, and so does every other tensor of the network whose name and shape the new model shares (RevIN
for the same channels, the head for the same horizon and targets); the rest (a head for another horizon, targets
or covariates, the linear path, which is fit on the new data) starts fresh. What the source was trained on (its
provenance: the data, the date cut, the tickers, the objective) comes along, so the new model can say when its
data's dates fall before what the source has seen (a look-ahead).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from lightning_tf.training import CheckpointError, check_checkpoint

__all__ = [
    "ARCHITECTURE",
    "PretrainedSource",
    "is_published",
    "load_pretrained",
    "look_ahead",
    "read_pretrained",
    "read_published",
    "summary",
]

log = logging.getLogger(__name__)

#: the forecaster's arguments that make its network's shape and computation: taken from the source
ARCHITECTURE = (
    "backbone",
    "channel_mixing",
    "patch_len",
    "stride",
    "pad_end",
    "d_model",
    "n_heads",
    "n_layers",
    "d_ff",
    "activation",
    "norm_first",
    "norm",
    "pos_encoding",
    "causal",
    "revin",
    "revin_affine",
    "published",
)
#: hub names of the published forecasters a forecaster starts from (any folder holding one's files does too)
PUBLISHED_PREFIXES = ("amazon/chronos-bolt-",)


@dataclass
class PretrainedSource:
    """A pretrained forecaster, read.

    Attributes:
        path: where it was read from.
        hparams: its arguments.
        state: its network's tensors (``net.`` dropped from the names).
        provenance: what it was trained on (:func:`~.handover.DataHandover.provenance`), or empty.
        pretrained_from: the source's own source, when it was itself fine-tuned from one.
    """

    path: str
    hparams: dict[str, Any]
    state: dict[str, Tensor]
    provenance: dict[str, Any] = field(default_factory=dict)
    pretrained_from: list[dict[str, Any]] = field(default_factory=list)

    @property
    def architecture(self) -> dict[str, Any]:
        """The source's :data:`ARCHITECTURE` arguments (those it has)."""
        return {k: self.hparams[k] for k in ARCHITECTURE if k in self.hparams}


def _network_state(state: dict[str, Tensor], path: Path) -> dict[str, Tensor]:
    net = {k[len("net.") :]: v for k, v in state.items() if k.startswith("net.")}
    if not any(k.startswith("backbone.") for k in net):
        raise ValueError(
            f"pretrained {path}: holds no K-line forecaster's Transformer (no net.backbone weights); give a "
            "checkpoint or export of a KLineForecaster trained with a backbone (residual on, only or blend)"
        )
    return net


def _reference_config(path: Path) -> dict[str, Any] | None:
    """A folder's config.json when it is a published model's (a reference ``architectures`` entry), else None."""
    config_path = path / "config.json"
    if not path.is_dir() or not config_path.is_file():
        return None
    config = json.loads(config_path.read_text(encoding="utf-8"))
    return config if isinstance(config, dict) and config.get("architectures") else None


def _kronos(source: str | Path) -> bool:
    """Whether ``source`` names a Kronos model or tokenizer: a hub name of one, or a folder whose config is one's."""
    if str(source).startswith("NeoQuasar/Kronos"):
        return True
    folder = Path(source).expanduser()
    if (folder / "kronos.json").is_file():  # what Kronos.to_kronos writes beside model/ and tokenizer/
        return True
    config_path = folder / "config.json"
    if not config_path.is_file():
        return False
    config = json.loads(config_path.read_text(encoding="utf-8"))
    return isinstance(config, dict) and "s1_bits" in config


def is_published(source: str | Path) -> bool:
    """Whether ``source`` names a published forecaster: a hub name of one, or a folder holding one's config."""
    text = str(source)
    return text.startswith(PUBLISHED_PREFIXES) or _reference_config(Path(text).expanduser()) is not None


def read_published(source: str | Path) -> PretrainedSource:
    """A published Chronos-Bolt (hub name or folder) as a source of the ``chronos_bolt`` backbone: its config as the
    forecaster's ``published`` argument, its weights under ``backbone.``.

    Raises:
        ValueError: a model of another architecture (Kronos, original Chronos, ...), or a hub name not reachable.
    """
    from lightning_tf.kline.published import ChronosBolt

    model = ChronosBolt.from_pretrained(source)
    c = model.config
    hparams = {
        "backbone": "chronos_bolt",
        "published": {"name": str(source), "config": asdict(c)},
        "channel_mixing": False,
        # Chronos-Bolt standardises each context itself; RevIN's statistics only set the scale the linear path and
        # the residual rule work on, and an affine map would be a parameter nothing reads
        "revin": True,
        "revin_affine": False,
        # the encoder's blocks, the depths of freeze: first_n_blocks and layer_decay; the other sizes are the
        # published config's
        "n_layers": c.n_layers,
    }
    state = {f"backbone.{k}": v for k, v in model.state_dict().items()}
    return PretrainedSource(str(source), hparams, state, {"data": f"published model {source}"})


def read_pretrained(source: str | Path, model_class: type | None = None) -> PretrainedSource:
    """The forecaster at ``source``: a checkpoint file or an export folder, or a published model
    (:func:`read_published`).

    Args:
        source: the ``.ckpt`` file, or the folder holding ``config.json`` and ``model.safetensors``.
        model_class: the class a checkpoint must be of (the forecaster's), checked with its stamp and CRC.

    Raises:
        FileNotFoundError: nothing at ``source``.
        ValueError: a checkpoint or export of another task, or one without a Transformer; one line each.
    """
    path = Path(source).expanduser()
    if _kronos(source):
        raise ValueError(
            f"pretrained {source}: a Kronos model, which reads raw bars with their time stamps where the forecaster "
            "reads scaled features: forecast with lightning_tf.kline.published.Kronos.from_pretrained(...).forecast; "
            "the forecaster starts from Chronos-Bolt (amazon/chronos-bolt-*) or its own checkpoints"
        )
    if is_published(source):
        return read_published(source)
    if not path.exists():
        raise FileNotFoundError(
            f"pretrained {source}: no such file or folder (a K-line forecaster's .ckpt, or a folder "
            "`lightning-tf export --format safetensors` wrote)"
        )
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file() or not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"pretrained {path}: a folder without config.json and model.safetensors")
        config = json.loads(config_path.read_text(encoding="utf-8"))
        class_path = str(config.get("class_path", ""))
        if not class_path.endswith("KLineForecaster"):
            raise ValueError(
                f"pretrained {path}: an export of {class_path or 'an unknown model'}, not a KLineForecaster"
            )
        from safetensors.torch import load_file

        extras = dict(config.get("extras") or {})
        return PretrainedSource(
            str(path),
            dict(config["hparams"]),
            _network_state(load_file(str(path / "model.safetensors")), path),
            dict(extras.get("provenance") or {}),
            list(extras.get("pretrained_from") or []),
        )
    try:
        ckpt = check_checkpoint(path, model_class=model_class)
    except CheckpointError as err:
        raise ValueError(f"pretrained {err}") from None
    return PretrainedSource(
        str(path),
        dict(ckpt.get("hyper_parameters") or {}),
        _network_state(ckpt["state_dict"], path),
        dict(ckpt.get("provenance") or {}),
        list(ckpt.get("pretrained_from") or []),
    )


def load_pretrained(net: nn.Module, source: PretrainedSource) -> tuple[list[str], list[str]]:
    """Load ``source``'s tensors into ``net``: every backbone tensor (a backbone of another shape is refused), and
    every other tensor whose name and shape ``net`` shares. Returns the names loaded and the names left fresh.

    Raises:
        ValueError: one line naming the first backbone tensor of another shape (or missing) and what makes it.
    """
    own = net.state_dict()
    loaded, fresh = [], []
    for name, tensor in own.items():
        theirs = source.state.get(name)
        if name.startswith("backbone."):
            if theirs is None or theirs.shape != tensor.shape:
                got = "missing" if theirs is None else f"{tuple(theirs.shape)}"
                raise ValueError(
                    f"pretrained {source.path}: its backbone does not fit this model: {name} is {got} there and "
                    f"{tuple(tensor.shape)} here (the number of patches follows context_len, patch_len and stride; "
                    "a bars backbone's embedding, the number of features): give the data the pretrained model's "
                    f"context_len ({source.hparams.get('context_len')}) and features "
                    f"({source.hparams.get('n_features')})"
                )
        # the linear path is fit in closed form on the new data when training starts: never taken from the source
        if theirs is not None and theirs.shape == tensor.shape and not name.startswith("linear."):
            own[name] = theirs.to(tensor.dtype)
            loaded.append(name)
        else:
            fresh.append(name)
    net.load_state_dict(own)
    return loaded, fresh


def look_ahead(
    provenance: dict[str, Any], first: str | None, what: str, model: str = "the pretrained model"
) -> str | None:
    """One warning line when ``first`` (the first date of a validation or test split, or of a forecast's bars)
    falls on or before the last date the pretrained model has seen, else None.

    Args:
        provenance: the pretrained model's (``seen_until``: its last training or validation bar's date).
        first: the date to check (ISO format), or None.
        what: what that date is, for the message (``"the test split"``).
        model: which model has seen them, for the message (``"this model"`` for its own training).
    """
    seen = provenance.get("seen_until")
    if not seen or not first or str(first) > str(seen):
        return None
    return (
        f"look-ahead: {what} starts {str(first)[:10]}, but {model} has seen bars until "
        f"{str(seen)[:10]} (of {provenance.get('tickers', '?')} tickers in {provenance.get('data', '?')}): its "
        "weights may know what followed; evaluate on dates after its cut"
    )


def summary(loaded: list[str], fresh: list[str]) -> str:
    """Which parts of the network came from the source and which start fresh, in a few words."""

    def parts(names: list[str]) -> str:
        tops = sorted({n.split(".")[0] for n in names})
        return ", ".join(tops) or "none"

    return f"loaded {len(loaded)} tensors ({parts(loaded)}); fresh: {parts(fresh)}"
