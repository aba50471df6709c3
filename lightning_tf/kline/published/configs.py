"""The settings of the published models, in the package's vocabulary, read from and written to the reference's
``config.json``.

Each config is a frozen dataclass with the package's names (``d_ff``, ``dropout``, ...); ``from_reference``
reads the reference's config.json (Kronos's ``PyTorchModelHubMixin`` keyword arguments, Chronos-Bolt's T5 config
with its ``chronos_config``) and says in one line when the file belongs to another architecture;
``to_reference`` writes it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_tf.core import Activation

__all__ = ["ChronosBoltConfig", "KronosConfig", "KronosTokenizerConfig", "architecture_of"]


def architecture_of(config: Mapping[str, Any]) -> str:
    """What a config.json says it is, for messages: its ``architectures``, ``model_type`` or first keys."""
    if config.get("architectures"):
        return f"architectures {config['architectures']}"
    if config.get("model_type"):
        return f"model_type {config['model_type']!r}"
    return f"keys {sorted(config)[:6]}"


def _read(config: Mapping[str, Any], names: Mapping[str, str], what: str, where: str, hint: str = "") -> dict[str, Any]:
    """``config``'s values of the reference ``names`` (reference name -> ours), all required."""
    missing = [k for k in names if k not in config]
    if missing:
        raise ValueError(f"{where}: not a {what} config ({architecture_of(config)}; missing {missing}){hint}")
    return {ours: config[theirs] for theirs, ours in names.items()}


# ---------------------------------------------------------------------------------------------- Kronos

_TOKENIZER_NAMES = {
    "d_in": "d_in",
    "d_model": "d_model",
    "n_heads": "n_heads",
    "ff_dim": "d_ff",
    "n_enc_layers": "n_enc_layers",
    "n_dec_layers": "n_dec_layers",
    "s1_bits": "s1_bits",
    "s2_bits": "s2_bits",
    "resid_dropout_p": "dropout",
    "attn_dropout_p": "attn_dropout",
    "ffn_dropout_p": "ffn_dropout",
    "beta": "beta",
    "gamma0": "gamma0",
    "gamma": "gamma",
    "zeta": "zeta",
    "group_size": "group_size",
}

_MODEL_NAMES = {
    "s1_bits": "s1_bits",
    "s2_bits": "s2_bits",
    "n_layers": "n_layers",
    "d_model": "d_model",
    "n_heads": "n_heads",
    "ff_dim": "d_ff",
    "resid_dropout_p": "dropout",
    "attn_dropout_p": "attn_dropout",
    "ffn_dropout_p": "ffn_dropout",
    "token_dropout_p": "token_dropout",
    "learn_te": "learned_calendar",
}


def _check_bits(s1_bits: int, s2_bits: int) -> None:
    if s1_bits < 1 or s2_bits < 1:
        raise ValueError(f"s1_bits ({s1_bits}) and s2_bits ({s2_bits}) must be positive")


@dataclass(frozen=True)
class KronosTokenizerConfig:
    """The Kronos tokenizer's sizes (defaults: ``NeoQuasar/Kronos-Tokenizer-base``).

    Args:
        d_in: values per bar (open, high, low, close, volume, amount).
        d_model: width D.
        n_heads: heads H.
        d_ff: feed-forward hidden width.
        n_enc_layers: the reference's encoder depth; the encoder has ``n_enc_layers - 1`` blocks.
        n_dec_layers: likewise for the decoder.
        s1_bits: bits of the coarse token.
        s2_bits: bits of the fine token.
        dropout: dropout on the residual branches (the reference's ``resid_dropout_p``).
        attn_dropout: dropout on the attention weights.
        ffn_dropout: the reference's dropout on the feed-forward output; the core's blocks use ``dropout`` there.
        beta: weight of the quantiser's commitment loss (kept for the reference's training).
        gamma0: weight of its per-sample entropy.
        gamma: weight of its codebook entropy.
        zeta: weight of the entropy penalty.
        group_size: the quantiser's entropy groups.
    """

    d_in: int = 6
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 512
    n_enc_layers: int = 4
    n_dec_layers: int = 4
    s1_bits: int = 10
    s2_bits: int = 10
    dropout: float = 0.0
    attn_dropout: float = 0.0
    ffn_dropout: float = 0.0
    beta: float = 0.05
    gamma0: float = 1.0
    gamma: float = 1.1
    zeta: float = 0.05
    group_size: int = 4

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.n_enc_layers < 1 or self.n_dec_layers < 1:
            raise ValueError(f"n_enc_layers ({self.n_enc_layers}) and n_dec_layers ({self.n_dec_layers}) must be >= 1")
        _check_bits(self.s1_bits, self.s2_bits)

    @classmethod
    def from_reference(cls, config: Mapping[str, Any], where: str = "config") -> KronosTokenizerConfig:
        """From the reference ``KronosTokenizer``'s config.json (its keyword arguments).

        Raises:
            ValueError: a config of another architecture (naming what it is and what is missing).
        """
        hint = "; it is a Kronos model's: the tokenizer is another folder" if "learn_te" in config else ""
        return cls(**_read(config, _TOKENIZER_NAMES, "Kronos tokenizer", where, hint))

    def to_reference(self) -> dict[str, Any]:
        """The reference's config.json."""
        return {theirs: getattr(self, ours) for theirs, ours in sorted(_TOKENIZER_NAMES.items())}


@dataclass(frozen=True)
class KronosConfig:
    """The Kronos model's sizes (defaults: ``NeoQuasar/Kronos-small``).

    Args:
        s1_bits: bits of the coarse token (the tokenizer's).
        s2_bits: bits of the fine token.
        n_layers: blocks.
        d_model: width D.
        n_heads: heads H.
        d_ff: feed-forward hidden width.
        dropout: dropout on the residual branches (the reference's ``resid_dropout_p``).
        attn_dropout: dropout on the attention weights.
        ffn_dropout: the reference's dropout on the feed-forward output; the core's blocks use ``dropout`` there.
        token_dropout: dropout on the embedded tokens.
        learned_calendar: learned calendar embeddings (the reference's ``learn_te``), else fixed sinusoidal ones.
        dependency_heads: heads of the dependency-aware layer (the reference fixes 4).
    """

    s1_bits: int = 10
    s2_bits: int = 10
    n_layers: int = 8
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 1024
    dropout: float = 0.25
    attn_dropout: float = 0.1
    ffn_dropout: float = 0.25
    token_dropout: float = 0.1
    learned_calendar: bool = True
    dependency_heads: int = 4

    def __post_init__(self) -> None:
        for heads in (self.n_heads, self.dependency_heads):
            if self.d_model % heads:
                raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({heads})")
        if self.n_layers < 1:
            raise ValueError(f"n_layers must be at least 1, got {self.n_layers}")
        _check_bits(self.s1_bits, self.s2_bits)

    @classmethod
    def from_reference(cls, config: Mapping[str, Any], where: str = "config") -> KronosConfig:
        """From the reference ``Kronos``'s config.json (its keyword arguments).

        Raises:
            ValueError: a config of another architecture (naming what it is and what is missing).
        """
        hint = "; it is a Kronos tokenizer's: pass it as the tokenizer" if "n_enc_layers" in config else ""
        return cls(**_read(config, _MODEL_NAMES, "Kronos model", where, hint))

    def to_reference(self) -> dict[str, Any]:
        """The reference's config.json."""
        return {theirs: getattr(self, ours) for theirs, ours in sorted(_MODEL_NAMES.items())}


# ---------------------------------------------------------------------------------------------- Chronos-Bolt

_T5_NAMES = {
    "d_model": "d_model",
    "num_heads": "n_heads",
    "d_kv": "d_head",
    "num_layers": "n_layers",
    "d_ff": "d_ff",
    "relative_attention_num_buckets": "relative_buckets",
    "relative_attention_max_distance": "relative_max_distance",
    "layer_norm_epsilon": "layer_norm_eps",
    "dropout_rate": "dropout",
}
_CHRONOS_NAMES = {
    "context_length": "context_length",
    "prediction_length": "prediction_length",
    "input_patch_size": "patch_size",
    "input_patch_stride": "patch_stride",
    "quantiles": "quantiles",
}
# T5's feed_forward_proj -> the core's activation
_FEED_FORWARD = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "silu": "silu",
    "gated-gelu": "geglu",
    "gated-gelu_new": "geglu",
    "gated-silu": "swiglu",
}
# the core's activation -> (feed_forward_proj, the T5 config's dense_act_fn, whether it is gated)
_TO_T5 = {
    "relu": ("relu", "relu", False),
    "gelu": ("gelu", "gelu", False),
    "gelu_tanh": ("gelu_new", "gelu_new", False),
    "silu": ("silu", "silu", False),
    "geglu": ("gated-gelu", "gelu_new", True),
    "swiglu": ("gated-silu", "silu", True),
}
_ARCHITECTURE = "ChronosBoltModelForForecasting"


@dataclass(frozen=True)
class ChronosBoltConfig:
    """Chronos-Bolt's sizes (defaults: ``amazon/chronos-bolt-small``).

    Args:
        d_model: width D.
        n_heads: heads H.
        d_head: head dimension (T5's ``d_kv``; ``n_heads * d_head`` may differ from D).
        n_layers: encoder blocks.
        n_decoder_layers: decoder blocks.
        d_ff: feed-forward hidden width (also the hidden width of the patch embedding and the output block).
        activation: the feed-forward and residual blocks' activation: ``relu`` (the published models),
            ``gelu``, ``gelu_tanh``, ``silu``, or the gated ``geglu`` and ``swiglu`` of T5 v1.1.
        relative_buckets: buckets of the relative position bias.
        relative_max_distance: the distance from which all keys share its last bucket.
        layer_norm_eps: epsilon of the RMS norms.
        dropout: T5's one dropout rate.
        context_length: the longest context the model reads (its ``chronos_config``).
        prediction_length: steps forecast in one pass F.
        patch_size: values per input patch P.
        patch_stride: the step between patches.
        quantiles: the quantile levels of the output, Q of them.
        use_reg_token: a REG token appended to the encoder input.
    """

    d_model: int = 512
    n_heads: int = 8
    d_head: int = 64
    n_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    activation: Activation = "relu"
    relative_buckets: int = 32
    relative_max_distance: int = 128
    layer_norm_eps: float = 1e-6
    dropout: float = 0.1
    context_length: int = 2048
    prediction_length: int = 64
    patch_size: int = 16
    patch_stride: int = 16
    quantiles: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    use_reg_token: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "quantiles", tuple(float(q) for q in self.quantiles))
        if self.activation not in _TO_T5:
            raise ValueError(f"activation must be one of {sorted(_TO_T5)}, got {self.activation!r}")
        if not self.quantiles or not all(0.0 < q < 1.0 for q in self.quantiles):
            raise ValueError(f"quantiles must be levels in (0, 1), got {list(self.quantiles)}")
        if list(self.quantiles) != sorted(self.quantiles):
            raise ValueError(f"quantiles must be increasing, got {list(self.quantiles)}")
        for name in ("context_length", "prediction_length", "patch_size", "patch_stride"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    @classmethod
    def from_reference(cls, config: Mapping[str, Any], where: str = "config") -> ChronosBoltConfig:
        """From a Chronos-Bolt config.json (a T5 config with ``chronos_config``).

        Raises:
            ValueError: a config of another architecture (original Chronos, Chronos-2, a Kronos model, ...) or a
                feed-forward this model cannot express.
        """
        architectures = config.get("architectures") or []
        if _ARCHITECTURE not in architectures or not isinstance(config.get("chronos_config"), Mapping):
            raise ValueError(
                f"{where}: not a Chronos-Bolt config ({architecture_of(config)}); "
                f"expected architectures [{_ARCHITECTURE!r}] with a chronos_config"
            )
        values = _read(config, _T5_NAMES, "Chronos-Bolt", where)
        values.update(_read(config["chronos_config"], _CHRONOS_NAMES, "Chronos-Bolt chronos_config", where))
        proj = str(config.get("feed_forward_proj", "relu"))
        if proj not in _FEED_FORWARD:
            raise ValueError(f"{where}: feed_forward_proj {proj!r} is not one of {sorted(_FEED_FORWARD)}")
        return cls(
            **values,
            n_decoder_layers=config.get("num_decoder_layers") or config["num_layers"],
            activation=_FEED_FORWARD[proj],
            use_reg_token=bool(config["chronos_config"].get("use_reg_token", False)),
        )

    def to_reference(self) -> dict[str, Any]:
        """A config.json that ``ChronosBoltModelForForecasting.from_pretrained`` reads."""
        proj, act, gated = _TO_T5[self.activation]
        out = {theirs: getattr(self, ours) for theirs, ours in _T5_NAMES.items()}
        return {
            **out,
            "architectures": [_ARCHITECTURE],
            "model_type": "t5",
            "chronos_pipeline_class": "ChronosBoltPipeline",
            "num_decoder_layers": self.n_decoder_layers,
            "feed_forward_proj": proj,
            "dense_act_fn": act,
            "is_gated_act": gated,
            "is_encoder_decoder": True,
            "initializer_factor": 1.0,
            "vocab_size": 2 if self.use_reg_token else 1,
            "decoder_start_token_id": 0,
            "pad_token_id": 0,
            "eos_token_id": 1,
            "use_cache": True,
            "chronos_config": {
                "context_length": self.context_length,
                "prediction_length": self.prediction_length,
                "input_patch_size": self.patch_size,
                "input_patch_stride": self.patch_stride,
                "quantiles": list(self.quantiles),
                "use_reg_token": self.use_reg_token,
            },
        }

    def replace(self, **changes: Any) -> ChronosBoltConfig:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)
