"""The Vision Transformer network (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

An image ``(B, C, H, W)`` is cut into non-overlapping ``p x p`` patches, each linearly embedded
(a convolution with stride ``p``), a learnable class token is prepended (or the patch tokens are
mean-pooled instead), position embeddings are added, the shared Pre-LN :class:`~lightning_tf.core.Encoder`
mixes the tokens and a linear head classifies the pooled token.

The layout follows timm's ``VisionTransformer`` (``timm/models/vision_transformer.py``) so that its
weights map one to one (:mod:`.timm_interop`): the learned position table ``(1, 1 + N, D)`` has a row
for the class token; mean pooling moves the final norm after the pooling (timm's ``fc_norm``);
LayerNorm eps 1e-6; exact GELU. A learned table trained at one resolution is resampled bicubically
for another (timm's ``dynamic_img_size``); the 2-D sin-cos table (MAE, He et al. 2021) is simply
recomputed for the new grid.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_tf.core import Encoder, TransformerSpec, sincos_2d

__all__ = [
    "PRESETS",
    "PatchEmbed",
    "PoolName",
    "PosEncodingName",
    "PresetName",
    "VisionTransformer",
    "patchify",
    "preset_config",
    "resample_pos_embed",
    "unpatchify",
]

PoolName = Literal["cls", "mean"]
PosEncodingName = Literal["learned", "sincos2d", "none"]
PresetName = Literal["tiny", "small", "base", "cpu28", "cpu32", "digits"]

# Architecture presets. tiny/small/base are timm's vit_{tiny,small,base}_patch16_224 (ViT/DeiT sizes);
# the cpu presets are small enough to train on a laptop CPU in minutes:
#   cpu28: 28x28 (MNIST, Fashion-MNIST), patch 4, 6 layers, d 64, mlp ratio 2: ~0.2M parameters,
#          the size of the small Fashion-MNIST ViTs usually quoted (92.3% test accuracy);
#   cpu32: 32x32 (CIFAR), patch 4, 6 layers, d 128, mlp ratio 2: ~0.8M parameters;
#   digits: scikit-learn's 8x8 digits upsampled to 16x16, patch 4 (16 patches), 4 layers, d 64.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(image_size=224, patch_size=16, d_model=192, n_heads=3, n_layers=12, d_ff=768),
    "small": dict(image_size=224, patch_size=16, d_model=384, n_heads=6, n_layers=12, d_ff=1536),
    "base": dict(image_size=224, patch_size=16, d_model=768, n_heads=12, n_layers=12, d_ff=3072),
    "cpu28": dict(image_size=28, patch_size=4, d_model=64, n_heads=4, n_layers=6, d_ff=128),
    "cpu32": dict(image_size=32, patch_size=4, d_model=128, n_heads=4, n_layers=6, d_ff=256),
    "digits": dict(image_size=16, patch_size=4, d_model=64, n_heads=4, n_layers=4, d_ff=128),
}


def preset_config(preset: str) -> dict[str, Any]:
    """The architecture of a preset: a copy of ``PRESETS[preset]``."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {list(PRESETS)}")
    return dict(PRESETS[preset])


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut ``(B, C, H, W)`` images into flattened patches ``(B, N, C * p * p)``, row-major over the
    ``(H/p, W/p)`` grid, each patch flattened in ``(C, p, p)`` order (that of the convolution weight)."""
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)  # (B, C, gh, p, gw, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, gh, gw, C, p, p)
    return x.reshape(B, (H // p) * (W // p), C * p * p)  # (B, N, C p p)


def unpatchify(patches: Tensor, patch_size: int, grid: tuple[int, int], in_chans: int) -> Tensor:
    """Inverse of :func:`patchify`: ``(B, N, C * p * p)`` -> ``(B, C, gh * p, gw * p)``."""
    B = patches.shape[0]
    (gh, gw), p = grid, patch_size
    x = patches.reshape(B, gh, gw, in_chans, p, p)  # (B, gh, gw, C, p, p)
    x = x.permute(0, 3, 1, 4, 2, 5)  # (B, C, gh, p, gw, p)
    return x.reshape(B, in_chans, gh * p, gw * p)  # (B, C, H, W)


def resample_pos_embed(
    pos_embed: Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int], n_prefix: int
) -> Tensor:
    """Resample a learned position table ``(1, n_prefix + gh*gw, D)`` to another patch grid, bicubic
    with antialiasing, the prefix (class token) rows unchanged: the scheme of timm's
    ``resample_abs_pos_embed``. The same grid gives the same table (up to float rounding)."""
    prefix, grid = pos_embed[:, :n_prefix], pos_embed[:, n_prefix:]  # (1, n_prefix, D), (1, N, D)
    D = pos_embed.shape[-1]
    grid = grid.float().reshape(1, *old_grid, D).permute(0, 3, 1, 2)  # (1, D, gh, gw)
    grid = F.interpolate(grid, size=new_grid, mode="bicubic", antialias=True)  # (1, D, gh', gw')
    grid = grid.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], D)  # (1, N', D)
    return torch.cat((prefix, grid.to(pos_embed.dtype)), dim=1)  # (1, n_prefix + N', D)


class PatchEmbed(nn.Module):
    """Linear embedding of non-overlapping patches, as a convolution with kernel = stride = ``patch_size``.

    Args:
        patch_size: patch side p.
        in_chans: image channels C.
        d_model: embedding width D.
    """

    def __init__(self, patch_size: int, in_chans: int, d_model: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_chans, d_model, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, N, D)`` with ``N = (H/p) * (W/p)``, row-major."""
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, D, gh, gw) -> (B, N, D)


class VisionTransformer(nn.Module):
    """ViT image classifier: patch embedding, class token or mean pooling, position embedding, the
    core Pre-LN encoder and a linear head.

    Args:
        image_size: training image side (square); the learned position table covers its patch grid.
        patch_size: patch side p; must divide ``image_size``.
        in_chans: image channels C.
        num_classes: classes of the head.
        d_model: width D.
        n_heads: attention heads H.
        n_layers: encoder layers.
        d_ff: feed-forward width; defaults to ``4 * d_model``.
        pool: ``cls`` (class token) or ``mean`` (average of the patch tokens, normed after pooling).
        class_token: prepend a class token; defaults to ``pool == "cls"`` (``mean`` pooling with a class
            token, as in MAE's fine-tuning, averages the patch tokens only).
        pos_encoding: ``learned`` (a trained table ``pos_embed``, resampled for other resolutions),
            ``sincos2d`` (fixed) or ``none``.
        dropout: dropout on the embeddings and on every residual branch.
        attn_dropout: dropout on the attention weights.
        drop_path: stochastic depth rate of the last layer (linearly increasing from 0 over depth).
        layer_scale: initial LayerScale value (CaiT, Touvron et al. 2021); None disables it.
        head_dropout: dropout before the head.
        layer_norm_eps: epsilon of every layer norm.
    """

    def __init__(
        self,
        image_size: int = 16,
        patch_size: int = 4,
        in_chans: int = 1,
        num_classes: int = 10,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 4,
        d_ff: int | None = None,
        *,
        pool: PoolName = "cls",
        class_token: bool | None = None,
        pos_encoding: PosEncodingName = "learned",
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        drop_path: float = 0.0,
        layer_scale: float | None = None,
        head_dropout: float = 0.0,
        layer_norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        if patch_size < 1 or image_size % patch_size:
            raise ValueError(f"patch_size ({patch_size}) must divide image_size ({image_size})")
        if num_classes < 1:
            raise ValueError(f"num_classes must be at least 1, got {num_classes}")
        if pool not in ("cls", "mean"):
            raise ValueError(f"unknown pool {pool!r}; expected 'cls' or 'mean'")
        if pos_encoding not in ("learned", "sincos2d", "none"):
            raise ValueError(f"unknown pos_encoding {pos_encoding!r}; expected 'learned', 'sincos2d' or 'none'")
        class_token = pool == "cls" if class_token is None else class_token
        if pool == "cls" and not class_token:
            raise ValueError("pool 'cls' needs the class token (class_token=True)")
        self.image_size, self.patch_size, self.in_chans = image_size, patch_size, in_chans
        self.grid = (image_size // patch_size, image_size // patch_size)
        self.pool, self.pos_encoding = pool, pos_encoding
        self.n_prefix = 1 if class_token else 0
        n_tokens = self.n_prefix + self.grid[0] * self.grid[1]

        self.patch_embed = PatchEmbed(patch_size, in_chans, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model)) if class_token else None
        self.pos_embed: nn.Parameter | Tensor | None
        if pos_encoding == "learned":
            self.pos_embed = nn.Parameter(torch.zeros(1, n_tokens, d_model))
        elif pos_encoding == "sincos2d":
            self.register_buffer("pos_embed", self._sincos(self.grid, d_model), persistent=False)
        else:
            self.pos_embed = None
        spec = TransformerSpec(
            d_model,
            n_heads,
            n_layers,
            d_ff,
            dropout=dropout,
            attn_dropout=attn_dropout,
            activation="gelu",
            norm_first=True,
            final_norm=pool == "cls",
            pos_encoding="none",
            layer_norm_eps=layer_norm_eps,
            drop_path=drop_path,
            layer_scale=layer_scale,
        )
        self.encoder = Encoder(spec)
        # mean pooling normalises the pooled vector instead of every token (timm's fc_norm)
        self.fc_norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if pool == "mean" else None
        self.head_dropout = nn.Dropout(head_dropout)
        self.head = nn.Linear(d_model, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # timm's ViT scheme for what the encoder does not initialise: truncated normal(0.02) for the
        # position table and the head, a near-zero class token, and the patch projection as a linear
        # map of the flattened patch (Xavier over fan-in C*p*p, as in the reference JAX code).
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        w = self.patch_embed.proj.weight
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.zeros_(self.patch_embed.proj.bias)
        nn.init.trunc_normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def _sincos(self, grid: tuple[int, int], d_model: int) -> Tensor:
        table = sincos_2d(d_model, *grid)  # (N, D)
        if self.n_prefix:
            table = torch.cat((table.new_zeros(self.n_prefix, d_model), table))  # the class token gets no position
        return table.unsqueeze(0)  # (1, n_prefix + N, D)

    @property
    def d_model(self) -> int:
        return self.head.in_features

    @property
    def num_classes(self) -> int:
        return self.head.out_features

    def position_table(self, grid: tuple[int, int]) -> Tensor | None:
        """The position embedding ``(1, n_prefix + gh*gw, D)`` for a patch grid: the stored one at the
        training grid, resampled (learned) or recomputed (sin-cos) for another."""
        if self.pos_embed is None or grid == self.grid:
            return self.pos_embed
        if self.pos_encoding == "sincos2d":
            return self._sincos(grid, self.d_model).to(self.pos_embed)
        return resample_pos_embed(self.pos_embed, grid, self.grid, self.n_prefix)

    def reset_classifier(self, num_classes: int) -> None:
        """A new, freshly initialised head for ``num_classes`` (fine-tuning on another label set)."""
        self.head = nn.Linear(self.d_model, num_classes).to(self.head.weight)
        nn.init.trunc_normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def tokens(self, images: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """Embedded input of the encoder: ``(B, C, H, W)`` -> ``(B, n_prefix + N, D)`` and the grid."""
        if images.ndim != 4:
            raise ValueError(f"images must be (B, C, H, W), got shape {tuple(images.shape)}")
        B, C, H, W = images.shape
        p = self.patch_size
        if C != self.in_chans:
            raise ValueError(f"images have {C} channels but the model expects in_chans={self.in_chans}")
        if H % p or W % p:
            raise ValueError(f"patch_size ({p}) must divide the image size ({H}x{W})")
        grid = (H // p, W // p)
        x = self.patch_embed(images)  # (B, N, D)
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(B, -1, -1), x), dim=1)  # (B, 1 + N, D)
        pos = self.position_table(grid)
        if pos is not None:
            x = x + pos  # (B, n_prefix + N, D)
        return x, grid

    def forward_features(self, images: Tensor, need_weights: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Encoded tokens ``(B, n_prefix + N, D)`` (and each layer's attention ``(B, H, S, S)``)."""
        x, _ = self.tokens(images)
        return self.encoder(x, need_weights=need_weights)

    def pre_logits(self, tokens: Tensor) -> Tensor:
        """Pooled, normalised features ``(B, n_prefix + N, D)`` -> ``(B, D)``."""
        if self.pool == "cls":
            return tokens[:, 0]  # (B, D)
        assert self.fc_norm is not None
        return self.fc_norm(tokens[:, self.n_prefix :].mean(dim=1))  # (B, D)

    def forward(self, images: Tensor) -> Tensor:
        """Logits: ``(B, C, H, W)`` -> ``(B, num_classes)``. H and W may differ from the training size
        as long as ``patch_size`` divides them."""
        tokens = self.forward_features(images)  # (B, S, D)
        assert isinstance(tokens, Tensor)
        return self.head(self.head_dropout(self.pre_logits(tokens)))  # (B, num_classes)

    def forward_with_attention(self, images: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits ``(B, num_classes)`` and every layer's attention weights ``(B, H, S, S)``."""
        tokens, weights = self.forward_features(images, need_weights=True)  # (B, S, D), L x (B, H, S, S)
        return self.head(self.head_dropout(self.pre_logits(tokens))), weights
