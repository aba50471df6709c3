"""The forecaster's flat Transformer arguments (what LightningCLI turns into flags) become one TransformerSpec
that reaches each backbone's encoder, with what is the backbone's own set there."""

from __future__ import annotations

import pytest

from lightning_tf.kline import KLineForecaster

FLAT = dict(
    d_model=24,
    n_heads=3,
    n_layers=3,
    d_ff=40,
    dropout=0.15,
    attn_dropout=0.05,
    activation="gelu",
    norm_first=False,
    norm="batch",
    pos_encoding="sinusoidal",
)


@pytest.mark.parametrize("backbone", ["patches", "variates", "bars"])
def test_the_flat_arguments_reach_the_encoder(backbone: str) -> None:
    model = KLineForecaster(n_features=2, n_targets=2, context_len=16, horizon=3, backbone=backbone, **FLAT)
    spec = model.net.backbone.encoder.spec
    assert {k: getattr(spec, k) for k in FLAT if k != "pos_encoding"} == {
        k: v for k, v in FLAT.items() if k != "pos_encoding"
    }
    encoder = model.net.backbone.encoder
    assert len(encoder.layers) == 3 and encoder.layers[0].ff.linear1.out_features == 40
    own = {"patches": ("sinusoidal", 4, None), "variates": ("none", 512, True), "bars": ("sinusoidal", 16, None)}
    assert (spec.pos_encoding, spec.max_len, spec.final_norm) == own[backbone]  # 4 patches of 8, stride 4, padded
    assert model.hparams.d_model == 24  # the checkpoint keeps the flat arguments
