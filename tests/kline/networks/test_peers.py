"""The ``patches`` and ``variates`` backbones against neuralforecast's ``PatchTST`` and ``iTransformer`` with
copied weights: the same forecasts within 1e-5 (docs/kline.md lists what differs on purpose and how both
sides are set the same here). Skipped without neuralforecast (``pip install -e '.[forecast-peers]'``)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from torch import Tensor, nn

from lightning_tf.core import TransformerSpec
from lightning_tf.kline import ForecastNet

B, L, C, F = 3, 40, 4, 6
D, H, N_LAYERS, D_FF = 16, 2, 2, 32


@pytest.fixture(scope="module")
def nf_models() -> ModuleType:
    """``neuralforecast.models``, imported by the tests that use it (not at collection), skipped without it.

    neuralforecast imports pytorch_lightning, which points the rank-zero log shared with ``lightning``
    (``lightning_utilities``) at its own logger; it is pointed back, so the process logs as before."""
    import lightning_utilities.core.rank_zero as rank_zero

    saved = {k: getattr(rank_zero, k) for k in ("log", "rank_zero_deprecation_category") if hasattr(rank_zero, k)}
    try:
        return pytest.importorskip("neuralforecast.models")
    finally:
        for k, v in saved.items():
            setattr(rank_zero, k, v)


def _randomise(module: nn.Module) -> None:
    """Every parameter and BatchNorm running statistic drawn anew (matrices scaled by their fan-in, so the
    forecasts stay of order one), so no copy error hides behind an init."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.ndim < 2 else p[0].numel() ** -0.5))
        for m in module.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.copy_(torch.randn_like(m.running_mean) * 0.5)
                m.running_var.copy_(torch.rand_like(m.running_var) + 0.5)


def _copy(dst: nn.Linear, weight: Tensor, bias: Tensor) -> None:
    with torch.no_grad():
        dst.weight.copy_(weight)
        dst.bias.copy_(bias)


def _copy_attention(ours: nn.Module, q: nn.Linear, k: nn.Linear, v: nn.Linear, out: nn.Linear) -> None:
    """Separate query, key and value projections into the fused ``qkv_proj`` (same head layout)."""
    _copy(ours.qkv_proj, torch.cat((q.weight, k.weight, v.weight)), torch.cat((q.bias, k.bias, v.bias)))
    _copy(ours.out_proj, out.weight, out.bias)


def _copy_batch_norm(ours: nn.Module, theirs: nn.BatchNorm1d) -> None:
    ours.bn.load_state_dict(theirs.state_dict())  # TokenBatchNorm's BatchNorm1d


# ------------------------------------------------------------------------------------------- PatchTST


def _patchtst_pair(nf_models: ModuleType, activation: str, revin_affine: bool) -> tuple[nn.Module, ForecastNet]:
    theirs = nf_models.PatchTST(
        h=F,
        input_size=L,
        encoder_layers=N_LAYERS,
        n_heads=H,
        hidden_size=D,
        linear_hidden_size=D_FF,
        dropout=0.0,
        fc_dropout=0.0,
        head_dropout=0.0,
        attn_dropout=0.0,
        patch_len=8,
        stride=4,
        revin=True,
        revin_affine=revin_affine,
        revin_subtract_last=False,
        activation=activation,
        res_attention=False,
        batch_normalization=False,
        learn_pos_embed=True,
        scaler_type="identity",
        random_seed=0,
    )
    ours = ForecastNet(
        C,
        C,
        L,
        F,
        backbone="patches",
        residual="only",
        patch_len=8,
        stride=4,
        pad_end=True,
        spec=TransformerSpec(
            D,
            H,
            N_LAYERS,
            D_FF,
            dropout=0.0,
            activation=activation,
            norm_first=False,
            norm="batch",
            pos_encoding="learned",
        ),
        head_dropout=0.0,
        revin=True,
        revin_affine=revin_affine,
    )
    _randomise(theirs)
    backbone, tst = ours.backbone, theirs.model.backbone
    with torch.no_grad():
        if revin_affine:  # a scale away from zero: denormalising divides by it
            theirs.model.revin_layer.affine_weight.fill_(1.3)
        _copy(backbone.patch_embed, tst.W_P.weight, tst.W_P.bias)
        backbone.encoder.pos.absolute.weight.copy_(tst.W_pos)  # (N, D): "zeros" is a learned uniform table
        for layer, ref in zip(backbone.encoder.layers, tst.encoder.layers, strict=True):
            a = ref.self_attn
            _copy_attention(layer.self_attn, a.W_Q, a.W_K, a.W_V, a.to_out[0])
            _copy_batch_norm(layer.norm1, ref.norm_attn[1])
            _copy(layer.ff.linear1, ref.ff[0].weight, ref.ff[0].bias)
            _copy(layer.ff.linear2, ref.ff[3].weight, ref.ff[3].bias)
            _copy_batch_norm(layer.norm2, ref.norm_ffn[1])
        head = theirs.model.head.linear  # (F, D*N): Flatten_Head flattens (D, N), ours (N, D)
        N = backbone.n_patches
        _copy(ours.head, head.weight.view(F, D, N).transpose(1, 2).reshape(F, N * D), head.bias)
        if revin_affine:  # one univariate model for every series: one scale and shift, ours one per channel
            ours.revin.weight.copy_(theirs.model.revin_layer.affine_weight.expand(C))
            ours.revin.bias.copy_(theirs.model.revin_layer.affine_bias.expand(C))
    return theirs, ours


def _patchtst_forecast(theirs: nn.Module, x: Tensor) -> Tensor:
    """neuralforecast's PatchTST is univariate: every channel of ``x`` (B, L, C) is one series."""
    series = x.permute(0, 2, 1).reshape(B * C, L, 1)  # (B*C, L, 1)
    y = theirs({"insample_y": series})  # (B*C, F, 1)
    return y.reshape(B, C, F).transpose(1, 2)  # (B, F, C)


@pytest.mark.parametrize(("activation", "revin_affine"), [("gelu", False), ("relu", True)])
def test_patches_equals_neuralforecast_patchtst(nf_models: ModuleType, activation: str, revin_affine: bool) -> None:
    theirs, ours = _patchtst_pair(nf_models, activation, revin_affine)
    x = torch.randn(B, L, C) * 3 + torch.arange(C)
    theirs.eval(), ours.eval()  # BatchNorm on its running statistics
    with torch.no_grad():
        expected = _patchtst_forecast(theirs, x)
        torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-5)
    theirs.train(), ours.train()  # the batch's statistics: over the same B*C*N patch tokens on both sides
    with torch.no_grad():
        torch.testing.assert_close(ours(x), _patchtst_forecast(theirs, x), rtol=0, atol=1e-5)
    assert (expected - x[:, -1:, :]).abs().max() > 0.1  # a forecast, not the last value copied


# ---------------------------------------------------------------------------------------- iTransformer


def _itransformer_pair(nf_models: ModuleType) -> tuple[nn.Module, ForecastNet]:
    theirs = nf_models.iTransformer(
        h=F,
        input_size=L,
        n_series=C,
        hidden_size=D,
        n_heads=H,
        e_layers=N_LAYERS,
        d_ff=D_FF,
        dropout=0.0,
        use_norm=True,
        scaler_type="identity",
        random_seed=0,
    )
    ours = ForecastNet(
        C,
        C,
        L,
        F,
        backbone="variates",
        residual="only",
        spec=TransformerSpec(D, H, N_LAYERS, D_FF, dropout=0.0, activation="gelu", norm_first=False, norm="layer"),
        head_dropout=0.0,
        revin=True,
        revin_affine=False,
    )
    _randomise(theirs)
    backbone = ours.backbone
    emb = theirs.enc_embedding.value_embedding
    with torch.no_grad():
        _copy(backbone.embed, emb.weight, emb.bias)
        for layer, ref in zip(backbone.encoder.layers, theirs.encoder.attn_layers, strict=True):
            a = ref.attention
            _copy_attention(layer.self_attn, a.query_projection, a.key_projection, a.value_projection, a.out_projection)
            _copy(layer.ff.linear1, ref.conv1.weight[..., 0], ref.conv1.bias)  # a 1x1 convolution is a linear map
            _copy(layer.ff.linear2, ref.conv2.weight[..., 0], ref.conv2.bias)
            layer.norm1.load_state_dict(ref.norm1.state_dict())
            layer.norm2.load_state_dict(ref.norm2.state_dict())
        backbone.encoder.norm.load_state_dict(theirs.encoder.norm.state_dict())
        _copy(ours.head, theirs.projector.weight, theirs.projector.bias)
    return theirs, ours


def test_variates_equals_neuralforecast_itransformer(nf_models: ModuleType) -> None:
    theirs, ours = _itransformer_pair(nf_models)
    x = torch.randn(B, L, C) * 3 + torch.arange(C)
    theirs.eval(), ours.eval()
    with torch.no_grad():
        expected = theirs({"insample_y": x})  # (B, F, C): the series are the variates
        torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-5)
        # attention across the variates: moving one channel moves the others' forecasts on both sides
        x2 = x.clone()
        x2[..., 0] = torch.randn(B, L)
        moved = theirs({"insample_y": x2})
        torch.testing.assert_close(ours(x2), moved, rtol=0, atol=1e-5)
    assert (moved[..., 1:] - expected[..., 1:]).abs().max() > 1e-3
