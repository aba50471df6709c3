"""The ``patches`` backbone: PatchTST's tokens, each channel's window cut into patches.

Nie et al. 2023, "A Time Series is Worth 64 Words: Long-term Forecasting with Transformers": each
channel's (RevIN-normalised) context is cut into N patches of P bars (:func:`~.layers.patchify`), each
patch embedded linearly (``W_P``), given a position and encoded by the shared core's encoder; every
channel is its own sequence, so the encoder never mixes channels (channel independence). The
representation of a channel is its N patch tokens, flattened: what PatchTST's ``Flatten_Head`` reads.

The layout follows the reference ``PatchTST_backbone`` (``layers/PatchTST_backbone.py``): the patch
projection ``W_P``, the positional table over patches, the encoder over the patches of each channel.
"""

from __future__ import annotations

from torch import Tensor, nn

from lightning_tf.core import Encoder, TransformerSpec

from .layers import n_patches, patchify

__all__ = ["PatchBackbone", "check_patching"]


def check_patching(context_len: int, patch_len: int, stride: int, pad_end: bool) -> None:
    """A ValueError unless the patches fit the context and read its newest bars."""
    for name, value in (("patch_len", patch_len), ("stride", stride)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if patch_len > context_len:
        raise ValueError(f"patch_len ({patch_len}) must not exceed context_len ({context_len})")
    unused = (context_len - patch_len) % stride
    if not pad_end and unused:
        # refused rather than warned: the newest bars carry the most information, and a model that never
        # reads them trains and tests without a sign that anything is wrong
        raise ValueError(
            f"pad_end false with context_len {context_len}, patch_len {patch_len} and stride {stride} would "
            f"ignore the newest {unused} bars of every window (the patches cover bars "
            f"0..{context_len - unused - 1}): "
            f"set pad_end: true, or a context_len with (context_len - patch_len) divisible by stride, e.g. "
            f"{context_len - unused} or {context_len - unused + stride}"
        )


class PatchBackbone(nn.Module):
    """Patches of each channel, embedded and encoded channel by channel.

    Args:
        context_len: context length L (bars).
        patch_len: patch length P.
        stride: stride between patch starts.
        pad_end: extend the context by ``stride`` copies of its last bar before patching (PatchTST).
        spec: the encoder's settings (``norm: batch`` is BatchNorm over the patch tokens of the batch,
            PatchTST's choice); its ``max_len`` is set to the number of patches.
    """

    per_channel = True  # one representation per input channel

    def __init__(self, context_len: int, patch_len: int, stride: int, pad_end: bool, spec: TransformerSpec) -> None:
        super().__init__()
        check_patching(context_len, patch_len, stride, pad_end)
        self.patch_len, self.stride, self.pad_end = patch_len, stride, pad_end
        self.n_patches = n_patches(context_len, patch_len, stride, pad_end)  # N
        self.width = self.n_patches * spec.d_model  # R = N * D
        self.patch_embed = nn.Linear(patch_len, spec.d_model)  # PatchTST's W_P
        self.encoder = Encoder(spec.replace(max_len=self.n_patches))

    def patches(self, x: Tensor) -> Tensor:
        """The patches ``(B, C, N, P)`` of the normalised window ``x`` (B, L, C)."""
        return patchify(x, self.patch_len, self.stride, self.pad_end)  # (B, C, N, P)

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """Each channel's representation ``(B, C, N*D)`` of the normalised window ``x`` (B, L, C) and, with
        ``need_weights``, each layer's attention over patches ``(B, C, H, N, N)``."""
        return self.encode_patches(self.patches(x), need_weights)

    def encode_patches(self, patches: Tensor, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """:meth:`forward` from the patches ``(B, C, N, P)`` (masked-patch pretraining hides some first)."""
        B, C, N, _P = patches.shape
        h = self.patch_embed(patches)  # (B, C, N, D)
        h = h.reshape(B * C, N, -1)  # (B*C, N, D): every channel is its own sequence
        weights: list[Tensor] = []
        if need_weights:
            h, weights = self.encoder(h, need_weights=True)  # (B*C, N, D), n_layers x (B*C, H, N, N)
            weights = [w.view(B, C, *w.shape[1:]) for w in weights]  # n_layers x (B, C, H, N, N)
        else:
            h = self.encoder(h)  # (B*C, N, D)
        return h.reshape(B, C, -1), weights  # (B, C, N*D)
