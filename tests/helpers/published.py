"""Test-only reference models of the published foundation models, small and random, built offline.

The Kronos reference is the code the ``kronos-finance`` package vendors (``kronos_finance._vendor.kronos_model``,
identical to github.com/shiyu-coder/Kronos's ``model/``); the package exposes no public name for it, so this is
the one place that imports it, and the ``published`` extra pins the release. Chronos-Bolt's reference is
``chronos.chronos_bolt`` of ``chronos-forecasting``. Every tensor of a reference model is perturbed (norm
weights away from 1, biases away from 0), so a tensor copied to the wrong place shows. Callers skip without the
packages (:func:`kronos_reference`, :func:`chronos_reference`).
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

import pytest
import torch

#: a small Kronos tokenizer and model in the reference's config.json terms (dropouts on, as published)
KRONOS_TOKENIZER = dict(
    d_in=6,
    d_model=32,
    n_heads=4,
    ff_dim=48,
    n_enc_layers=3,
    n_dec_layers=3,
    ffn_dropout_p=0.0,
    attn_dropout_p=0.0,
    resid_dropout_p=0.0,
    s1_bits=4,
    s2_bits=4,
    beta=0.05,
    gamma0=1.0,
    gamma=1.1,
    zeta=0.05,
    group_size=4,
)
KRONOS_MODEL = dict(
    s1_bits=4,
    s2_bits=4,
    n_layers=2,
    d_model=32,
    n_heads=4,
    ff_dim=48,
    ffn_dropout_p=0.2,
    attn_dropout_p=0.1,
    resid_dropout_p=0.2,
    token_dropout_p=0.1,
    learn_te=True,
)


def kronos_reference() -> ModuleType:
    """The reference Kronos code (``Kronos``, ``KronosTokenizer``, ``KronosPredictor``, ...); skips without
    ``kronos-finance``."""
    pytest.importorskip("kronos_finance")
    import kronos_finance._vendor.kronos_model.kronos as reference

    return reference


def chronos_reference() -> ModuleType:
    """``chronos.chronos_bolt`` (``ChronosBoltModelForForecasting``, ``ChronosBoltPipeline``); skips without
    ``chronos-forecasting``."""
    pytest.importorskip("chronos")
    import chronos.chronos_bolt as reference

    return reference


def perturb(module: torch.nn.Module, scale: float = 0.1, seed: int = 0) -> torch.nn.Module:
    """Every floating parameter moved by ``scale`` times a standard normal draw (in place); returns ``module``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.is_floating_point():
                p.add_(torch.randn(p.shape, generator=g) * scale)
    return module


def random_kronos(
    tokenizer: dict[str, Any] | None = None, model: dict[str, Any] | None = None, seed: int = 0
) -> tuple[Any, Any]:
    """A reference ``(KronosTokenizer, Kronos)`` pair, random and perturbed, in eval mode."""
    ref = kronos_reference()
    torch.manual_seed(seed)
    tok = perturb(ref.KronosTokenizer(**{**KRONOS_TOKENIZER, **(tokenizer or {})}), seed=seed)
    mod = perturb(ref.Kronos(**{**KRONOS_MODEL, **(model or {})}), seed=seed + 1)
    return tok.eval(), mod.eval()


def chronos_t5_config(**changes: Any) -> Any:
    """A small Chronos-Bolt T5 config: 3 heads of 12 channels in a width of 32 (T5's ``d_kv`` apart from
    ``d_model / num_heads``), 8 relative buckets up to distance 20, patches of 4, 5 quantiles, a REG token."""
    from transformers import T5Config

    chronos = dict(
        context_length=64,
        prediction_length=8,
        input_patch_size=4,
        input_patch_stride=4,
        quantiles=[0.1, 0.25, 0.5, 0.75, 0.9],
        use_reg_token=True,
    )
    chronos.update(changes.pop("chronos", {}))
    config = dict(
        d_model=32,
        d_kv=12,
        d_ff=48,
        num_heads=3,
        num_layers=2,
        num_decoder_layers=2,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        dropout_rate=0.1,
        layer_norm_epsilon=1e-6,
        feed_forward_proj="relu",
        initializer_factor=1.0,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        vocab_size=2,
        is_encoder_decoder=True,
        architectures=["ChronosBoltModelForForecasting"],
        chronos_config=chronos,
    )
    config.update(changes)
    return T5Config(**config)


def random_chronos_bolt(seed: int = 0, **changes: Any) -> Any:
    """A reference ``ChronosBoltModelForForecasting`` of :func:`chronos_t5_config`, perturbed, in eval mode."""
    ref = chronos_reference()
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ref.ChronosBoltModelForForecasting(chronos_t5_config(**changes))
    return perturb(model, 0.05, seed).eval()
