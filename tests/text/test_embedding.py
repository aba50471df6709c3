"""TokenEmbedding (sqrt(D) scale, padding row) and OutputProjection (weight tying, init scale).

Vaswani et al. 2017, sec. 3.4; Press & Wolf 2017 for the tied output projection.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lightning_tf.text.embedding import OutputProjection, TokenEmbedding

V, D = 11, 8


def test_token_embedding_scales_by_sqrt_d_model_exactly() -> None:
    emb = TokenEmbedding(V, D)
    ids = torch.tensor([[1, 4, 10], [0, 0, 7]])
    out = emb(ids)
    assert out.shape == (2, 3, D)
    assert torch.equal(out, emb.weight[ids] * math.sqrt(D))


def test_token_embedding_without_scale() -> None:
    emb = TokenEmbedding(V, D, scale=False)
    ids = torch.tensor([[1, 4, 10]])
    assert torch.equal(emb(ids), emb.weight[ids])


def test_token_embedding_unit_variance_after_scale() -> None:
    # N(0, 1/D) table times sqrt(D): unit variance per channel, the scale of the sinusoidal encoding
    emb = TokenEmbedding(4096, 64)
    out = emb(torch.arange(4096))
    assert abs(out.std().item() - 1.0) < 0.02


def test_token_embedding_padding_row_is_zero_and_gets_no_gradient() -> None:
    pad = 3
    emb = TokenEmbedding(V, D, padding_idx=pad)
    assert torch.all(emb.weight[pad] == 0.0)
    ids = torch.tensor([[1, pad, 2, pad], [pad, 5, pad, 1]])
    out = emb(ids)
    assert torch.all(out[ids == pad] == 0.0)
    (out * torch.randn_like(out)).sum().backward()
    assert torch.all(emb.weight.grad[pad] == 0.0)
    for used in (1, 2, 5):
        assert emb.weight.grad[used].abs().sum() > 0
    for unused in (0, 4, 6):
        assert torch.all(emb.weight.grad[unused] == 0.0)


def test_token_embedding_padding_row_zero_after_reset() -> None:
    emb = TokenEmbedding(V, D, padding_idx=0)
    with torch.no_grad():
        emb.weight.fill_(1.0)
    emb.reset_parameters()
    assert torch.all(emb.weight[0] == 0.0)
    assert emb.weight[1:].abs().sum() > 0


@pytest.mark.parametrize("padding_idx", [-1, V, V + 5])
def test_token_embedding_bad_padding_idx_raises(padding_idx: int) -> None:
    with pytest.raises(ValueError, match=rf"padding_idx \({padding_idx}\) must lie in \[0, vocab_size={V}\)"):
        TokenEmbedding(V, D, padding_idx=padding_idx)


@pytest.mark.parametrize(("vocab_size", "d_model"), [(4096, 64), (2048, 256)])
def test_init_std_is_inverse_sqrt_d_model(vocab_size: int, d_model: int) -> None:
    target = d_model**-0.5
    emb = TokenEmbedding(vocab_size, d_model)
    proj = OutputProjection(d_model, vocab_size)
    for weight in (emb.weight, proj.weight):
        # ~262k-524k samples: the sample std is within ~0.3% of the true one; 2% is a wide margin
        assert abs(weight.std().item() / target - 1.0) < 0.02
        assert abs(weight.mean().item()) < 0.02 * target


def test_output_projection_untied_is_linear_map() -> None:
    proj = OutputProjection(D, V, bias=True)
    with torch.no_grad():
        proj.bias.uniform_(-1, 1)
    x = torch.randn(2, 3, D)
    logits = proj(x)
    assert logits.shape == (2, 3, V)
    torch.testing.assert_close(logits, x @ proj.weight.T + proj.bias, atol=1e-6, rtol=0)


def test_output_projection_no_bias_by_default() -> None:
    proj = OutputProjection(D, V)
    assert proj.bias is None
    assert [n for n, _ in proj.named_parameters()] == ["weight"]


def test_tied_projection_shares_the_parameter_object() -> None:
    emb = TokenEmbedding(V, D)
    proj = OutputProjection(D, V, tie_to=emb)
    assert proj.weight is emb.weight
    x = torch.randn(2, 3, D)
    torch.testing.assert_close(proj(x), x @ emb.weight.T, atol=1e-6, rtol=0)
    # a model holding both counts the matrix once
    model = nn.ModuleDict({"emb": emb, "proj": proj})
    assert sum(p.numel() for p in model.parameters()) == V * D


def test_tied_gradient_step_changes_both_and_sums_both_paths() -> None:
    emb = TokenEmbedding(V, D)
    proj = OutputProjection(D, V, tie_to=emb)
    model = nn.ModuleDict({"emb": emb, "proj": proj})
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    target = torch.tensor([[2, 3, 4], [5, 6, 7]])

    def loss_fn(e: TokenEmbedding, p: OutputProjection) -> torch.Tensor:
        logits = p(e(ids))
        return nn.functional.cross_entropy(logits.reshape(-1, V), target.reshape(-1))

    # independent gradients: untied copies of the same weight
    e_copy, p_copy = TokenEmbedding(V, D), OutputProjection(D, V)
    with torch.no_grad():
        e_copy.weight.copy_(emb.weight)
        p_copy.weight.copy_(emb.weight)
    loss_fn(e_copy, p_copy).backward()
    expected_grad = e_copy.weight.grad + p_copy.weight.grad

    before = emb.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    loss_fn(emb, proj).backward()
    torch.testing.assert_close(emb.weight.grad, expected_grad, atol=1e-6, rtol=0)
    opt.step()
    assert proj.weight is emb.weight
    assert not torch.equal(emb.weight, before)
    torch.testing.assert_close(emb.weight, before - 0.1 * expected_grad, atol=1e-6, rtol=0)
    assert torch.equal(proj.weight, emb.weight)


def test_tied_projection_can_have_own_bias() -> None:
    emb = TokenEmbedding(V, D)
    proj = OutputProjection(D, V, bias=True, tie_to=emb)
    assert proj.bias is not None and proj.bias.shape == (V,)
    assert proj.bias is not emb.weight


@pytest.mark.parametrize(("d_model", "vocab_size"), [(D, V + 1), (D + 2, V), (V, D)])
def test_tie_shape_mismatch_raises(d_model: int, vocab_size: int) -> None:
    emb = TokenEmbedding(V, D)
    with pytest.raises(ValueError, match=rf"cannot tie output projection \({vocab_size}, {d_model}\).*\({V}, {D}\)"):
        OutputProjection(d_model, vocab_size, tie_to=emb)
