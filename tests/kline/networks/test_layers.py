"""RevIN round-trip and statelessness; patching against a hand-written loop and ``unfold``."""

from __future__ import annotations

import pytest
import torch

from lightning_tf.kline.networks.layers import RevIN, n_patches, patchify


@pytest.mark.parametrize("affine", [True, False])
def test_revin_round_trip(affine: bool) -> None:
    revin = RevIN(3, affine=affine)
    if affine:
        with torch.no_grad():
            revin.weight.copy_(torch.tensor([0.5, 2.0, -1.5]))
            revin.bias.copy_(torch.tensor([0.1, -0.3, 2.0]))
    x = torch.randn(4, 20, 3) * torch.tensor([1.0, 10.0, 0.01]) + torch.tensor([5.0, -100.0, 0.3])
    z, stats = revin.normalize(x)
    torch.testing.assert_close(revin.denormalize(z, stats), x, rtol=1e-5, atol=1e-4)
    # a subset of channels maps back with that subset's statistics and affine parameters
    torch.testing.assert_close(revin.denormalize(z[..., [2, 0]], stats, [2, 0]), x[..., [2, 0]], rtol=1e-5, atol=1e-4)


def test_revin_returns_its_statistics_and_keeps_no_batch_state() -> None:
    revin = RevIN(2, affine=False)
    x1, x2 = torch.randn(3, 16, 2) * 4 + 7, torch.randn(5, 16, 2) - 3
    z1, s1 = revin.normalize(x1)
    _, _s2 = revin.normalize(x2)  # a second batch in between must not disturb the first
    torch.testing.assert_close(s1.mean, x1.mean(1, keepdim=True))
    torch.testing.assert_close(s1.std, torch.sqrt(x1.var(1, unbiased=False, keepdim=True) + revin.eps))
    torch.testing.assert_close(revin.denormalize(z1, s1), x1, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(z1.mean(1), torch.zeros(3, 2), atol=1e-5, rtol=0)
    torch.testing.assert_close(z1.std(1, unbiased=False), torch.ones(3, 2), atol=1e-3, rtol=0)
    assert list(revin.state_dict()) == [] and not list(revin.buffers())
    assert not [k for k, v in vars(revin).items() if isinstance(v, torch.Tensor)]
    assert list(RevIN(2).state_dict()) == ["weight", "bias"]


def test_revin_statistics_are_constants_for_the_gradient() -> None:
    revin = RevIN(1, affine=False)
    x = torch.randn(2, 8, 1, requires_grad=True)
    z, _ = revin.normalize(x)
    z.sum().backward()
    # with the statistics detached, d(sum z)/dx = 1/std for every element
    torch.testing.assert_close(
        x.grad, (1 / torch.sqrt(x.detach().var(1, unbiased=False, keepdim=True) + revin.eps)).expand_as(x)
    )


@pytest.mark.parametrize(("L", "P", "S"), [(24, 8, 4), (30, 16, 8), (10, 3, 3), (12, 12, 5)])
def test_patchify_matches_a_loop_with_end_padding(L: int, P: int, S: int) -> None:
    x = torch.randn(2, L, 3)
    patches = patchify(x, P, S)
    N = n_patches(L, P, S)
    assert patches.shape == (2, 3, N, P)
    padded = torch.cat((x, x[:, -1:].expand(-1, S, -1)), dim=1)  # (B, L + S, C)
    for n in range(N):
        torch.testing.assert_close(patches[:, :, n], padded[:, n * S : n * S + P].transpose(1, 2))
    # the newest bar is inside the last patch
    assert (patches[:, :, -1] == x[:, -1, :, None]).any(-1).all()


def test_patchify_without_padding_is_unfold() -> None:
    x = torch.randn(2, 64, 4)
    out = patchify(x, 16, 8, pad_end=False)
    assert out.shape == (2, 4, n_patches(64, 16, 8, pad_end=False), 16) == (2, 4, 7, 16)
    torch.testing.assert_close(out, x.permute(0, 2, 1).unfold(2, 16, 8))


def test_patchtst_patch_count() -> None:
    # PatchTST's ETTh1 setting: L=336, P=16, S=8 with end padding gives 42 patches
    assert n_patches(336, 16, 8) == 42 and n_patches(512, 16, 8) == 64
