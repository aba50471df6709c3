"""Chronos-Bolt (Ansari et al. 2024, "Chronos: Learning the Language of Time Series"; Amazon, Apache-2.0;
github.com/amazon-science/chronos-forecasting): quantile forecasts of any series from a T5 encoder-decoder over
patches.

A context is standardised by its own mean and standard deviation (NaN: missing, left out of both), cut into
patches (left-padded with NaN to whole patches), and each patch enters as its values and its mask of observed
values, through a residual MLP. A REG token joins the patches; the encoder is T5's (RMSNorm, bucketed relative
position bias, no biases, unscaled dot products: the core's :class:`~lightning_tf.core.Encoder` with those
options) with patches of no observed value masked out; the decoder reads one learned start token and attends to
the encoder, and a residual MLP turns its output into Q quantiles of the next F steps, un-standardised. Longer
horizons roll out as the reference pipeline does: each of the Q quantile paths is appended to the context and
forecast again, and the Q x Q results are summarised by their empirical quantiles.

Parameters: ``special_embed`` (row 0 the decoder's start, row 1 the REG token), ``patch_embed``, ``encoder``,
``decoder`` (the backbone), ``head``; :meth:`ChronosBolt.layer_depth` gives each its depth.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_tf.core import Decoder, Encoder, TransformerSpec, evaluating

from .configs import ChronosBoltConfig
from .hub import read_config, read_weights, resolve_folder
from .weights import CHRONOS_BOLT_COPIES, chronos_bolt_table, from_reference, load_converted, to_reference

__all__ = ["CHRONOS_BOLT_MODELS", "CHRONOS_BOLT_PRESETS", "ChronosBolt", "ResidualBlock"]

log = logging.getLogger(__name__)

#: the published models' configs (their config.json files), for building them with random weights
CHRONOS_BOLT_PRESETS = {
    "tiny": ChronosBoltConfig(d_model=256, n_heads=4, d_head=64, n_layers=4, n_decoder_layers=4, d_ff=1024),
    "mini": ChronosBoltConfig(d_model=384, n_heads=8, d_head=64, n_layers=4, n_decoder_layers=4, d_ff=1536),
    "small": ChronosBoltConfig(),
    "base": ChronosBoltConfig(d_model=768, n_heads=12, d_head=64, n_layers=12, n_decoder_layers=12, d_ff=3072),
}
#: the published models' hub names
CHRONOS_BOLT_MODELS = tuple(f"amazon/chronos-bolt-{size}" for size in CHRONOS_BOLT_PRESETS)

# the element-wise activation of the residual blocks (the reference's dense_act_fn, un-gated); relu in place, since
# the hidden layer does not need its output for backward
_ELEMENTWISE = {
    "relu": lambda x: F.relu(x, inplace=True),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "geglu": lambda x: F.gelu(x, approximate="tanh"),
    "swiglu": F.silu,
}


class ResidualBlock(nn.Module):
    """``out(dropout(act(hidden(x)))) + skip(x)``: Chronos-Bolt's patch embedding and output head.

    Args:
        d_in: input width.
        d_hidden: hidden width.
        d_out: output width.
        activation: a :class:`ChronosBoltConfig` activation (the gated ones act element-wise here).
        dropout: dropout on the output branch.
    """

    def __init__(self, d_in: int, d_hidden: int, d_out: int, activation: str, dropout: float = 0.0) -> None:
        super().__init__()
        self.act = _ELEMENTWISE[activation]
        self.hidden = nn.Linear(d_in, d_hidden)
        self.out = nn.Linear(d_hidden, d_out)
        self.skip = nn.Linear(d_in, d_out)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(..., d_in) -> (..., d_out)."""
        return self.dropout(self.out(self.act(self.hidden(x)))) + self.skip(x)


def _patches(x: Tensor, size: int, stride: int) -> Tensor:
    """``(B, L)`` -> ``(B, N, size)``, left-padded with NaN to a whole number of patches."""
    L = x.shape[-1]
    if L % size:
        x = torch.cat((x.new_full((*x.shape[:-1], size - L % size), float("nan")), x), dim=-1)
    return x.unfold(-1, size, stride)  # (B, N, size)


class ChronosBolt(nn.Module):
    """A context ``(B, L)`` -> quantiles of the next steps ``(B, F, Q)``.

    Args:
        config: the sizes (:class:`ChronosBoltConfig`; :meth:`ChronosBoltConfig.from_reference` reads the
            reference's config.json). None: Chronos-Bolt-small's.
    """

    def __init__(self, config: ChronosBoltConfig | None = None) -> None:
        super().__init__()
        c = ChronosBoltConfig() if config is None else config
        self.config = c
        D = c.d_model
        spec = TransformerSpec(
            D,
            c.n_heads,
            c.n_layers,
            c.d_ff,
            dropout=c.dropout,
            attn_dropout=c.dropout,
            activation=c.activation,
            norm_first=True,
            pos_encoding="relative",
            bias=False,
            layer_norm_eps=c.layer_norm_eps,
            norm="rms",
            d_head=c.d_head,
            attn_scale=1.0,
            relative_buckets=c.relative_buckets,
            relative_max_distance=c.relative_max_distance,
        )
        self.special_embed = nn.Embedding(2 if c.use_reg_token else 1, D)
        self.patch_embed = ResidualBlock(2 * c.patch_size, c.d_ff, D, c.activation, c.dropout)
        self.encoder = Encoder(spec)
        self.decoder = Decoder(spec.replace(n_layers=c.n_decoder_layers))
        self.dropout = nn.Dropout(c.dropout)  # after each stack's final norm, as T5 does
        self.head = ResidualBlock(D, c.d_ff, len(c.quantiles) * c.prediction_length, c.activation, c.dropout)
        self.register_buffer("quantiles", torch.tensor(c.quantiles), persistent=False)

    # ------------------------------------------------------------------------------------------ the network

    def scaling(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """The mean and standard deviation of each row of ``context`` (B, L) over its observed values, ``(B, 1)``
        each: 0 and 1 for a row with none, ``1e-5`` for a constant row's deviation."""
        x = context.float()
        loc = torch.nan_to_num(torch.nanmean(x, dim=-1, keepdim=True), nan=0.0)  # (B, 1)
        scale = torch.nan_to_num((x - loc).square().nanmean(dim=-1, keepdim=True).sqrt(), nan=1.0)  # (B, 1)
        return loc, torch.where(scale == 0, 1e-5, scale)

    def encode(self, context: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor]]:
        """The encoder's view of a context ``(B, L)`` (L at most ``context_length``; NaN = missing).

        Returns:
            The encoder output ``(B, N', D)`` (N' patches, and the REG token), the key mask ``(B, N')`` (True:
            a patch with an observed value), and the context's ``(loc, scale)``.
        """
        c = self.config
        observed = (~torch.isnan(context)).float()  # (B, L)
        loc, scale = self.scaling(context)
        x = (context.float() - loc) / scale  # (B, L)
        values = _patches(x, c.patch_size, c.patch_stride)  # (B, N, P)
        seen = torch.nan_to_num(_patches(observed, c.patch_size, c.patch_stride), nan=0.0)  # (B, N, P)
        values = torch.where(seen > 0, values, 0.0)
        tokens = self.patch_embed(torch.cat((values, seen), dim=-1))  # (B, N, 2P) -> (B, N, D)
        keep = seen.sum(-1) > 0  # (B, N)
        if c.use_reg_token:
            B = tokens.shape[0]
            tokens = torch.cat((tokens, self.special_embed.weight[1].expand(B, 1, -1)), dim=1)  # (B, N + 1, D)
            keep = torch.cat((keep, keep.new_ones(B, 1)), dim=1)
        memory = self.dropout(self.encoder(tokens, mask=keep[:, None, None, :]))  # (B, N', D)
        return memory, keep, (loc, scale)

    def _standardised(self, context: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Quantiles in the standardised scale ``(B, Q, F)`` and the context's ``(loc, scale)``."""
        memory, keep, loc_scale = self.encode(context)
        # looked up, not a view of the weight: a view made under no_grad would be a leaf that needs a gradient
        # (a module hook, such as a FLOP counter's, refuses it)
        start = self.special_embed(memory.new_zeros(memory.shape[0], 1, dtype=torch.long))  # (B, 1, D)
        out = self.dropout(self.decoder(start, memory, memory_mask=keep[:, None, None, :]))  # (B, 1, D)
        c = self.config
        return self.head(out[:, 0]).view(-1, len(c.quantiles), c.prediction_length), loc_scale  # (B, Q, F)

    def _quantiles(self, context: Tensor) -> Tensor:
        """``(B, L)`` -> quantiles ``(B, Q, F)`` in the context's units (the reference's layout)."""
        q, (loc, scale) = self._standardised(context)
        B = q.shape[0]
        return (q.reshape(B, -1) * scale + loc).view_as(q)  # (B, Q, F)

    def forward(self, context: Tensor) -> Tensor:
        """Context ``(B, L)`` (L at most ``context_length``; NaN = missing) -> quantiles ``(B, F, Q)`` of the
        next ``prediction_length`` steps, in the context's units."""
        return self._quantiles(context).transpose(1, 2)

    def loss(self, context: Tensor, target: Tensor) -> Tensor:
        """The reference's training loss: twice the pinball loss of each quantile on the standardised ``target``
        ``(B, H)`` (H at most F; NaN = missing, counted as 0), averaged over the quantiles, summed over the
        horizon, averaged over the batch. (The reference's comments say the other way round; its code, which
        trained the published models, reduces the axes in this order.)"""
        q, (loc, scale) = self._standardised(context)  # (B, Q, F)
        F_ = self.config.prediction_length
        if target.shape[-1] > F_:
            raise ValueError(f"target of {target.shape[-1]} steps is longer than prediction_length ({F_})")
        y = ((target.float() - loc) / scale).unsqueeze(1)  # (B, 1, H)
        seen = ~torch.isnan(y)
        y = torch.where(seen, y, 0.0)
        pad = F_ - y.shape[-1]
        y, seen = F.pad(y, (0, pad)), F.pad(seen, (0, pad))
        levels = self.quantiles.view(1, -1, 1)  # (1, Q, 1)
        pinball = 2 * torch.abs((y - q) * ((y <= q).float() - levels)) * seen.float()  # (B, Q, F)
        return pinball.mean(dim=-2).sum(dim=-1).mean()

    # ------------------------------------------------------------------------------------------ forecasting

    def _context(self, context: Tensor | Sequence[Any], truncate: bool) -> Tensor:
        x = torch.as_tensor(context)
        if x.ndim == 1:
            x = x.unsqueeze(0)
        if x.ndim != 2 or x.shape[-1] < 1:
            raise ValueError(f"context must have shape (B, L) or (L,) with L >= 1, got {tuple(x.shape)}")
        n = self.config.context_length
        if x.shape[-1] > n:
            if not truncate:
                raise ValueError(
                    f"a context of {x.shape[-1]} steps is longer than the model's context_length ({n}); pass the "
                    f"last {n}, or truncate=True to keep them as the reference pipeline does"
                )
            x = x[..., -n:]
        return x.to(device=self.quantiles.device, dtype=torch.float32)

    @torch.no_grad()
    def forecast(
        self, context: Tensor | Sequence[Any], horizon: int | None = None, *, truncate: bool = False
    ) -> Tensor:
        """Quantile forecasts of each series, as the reference's ``ChronosBoltPipeline.predict``.

        Args:
            context: ``(B, L)`` or ``(L,)``; NaN marks a missing value (left-pad shorter series with NaN).
            horizon: steps to forecast; None: ``prediction_length``. Longer horizons roll out on the quantile
                paths (see the module docstring), which the model was not trained for.
            truncate: a context longer than ``context_length``: keep its last ``context_length`` steps, as the
                reference does; False: refuse it.

        Returns:
            ``(B, horizon, Q)`` at the levels ``config.quantiles``.

        Raises:
            ValueError: a context of the wrong shape, or longer than ``context_length`` without ``truncate``.
        """
        ctx = self._context(context, truncate)  # (B, L)
        c = self.config
        horizon = c.prediction_length if horizon is None else horizon
        if horizon < 1:
            raise ValueError(f"horizon must be positive, got {horizon}")
        if horizon > c.prediction_length:
            log.warning(
                "a horizon of %d is longer than the model's prediction_length (%d): the rest rolls out on the "
                "quantile paths, which the model was not trained for",
                horizon,
                c.prediction_length,
            )
        with evaluating(self):
            return self.roll_out(ctx, horizon)

    def roll_out(self, context: Tensor, horizon: int) -> Tensor:
        """Quantiles ``(B, horizon, Q)`` of the next ``horizon`` steps of ``context`` ``(B, L)`` (L at most
        ``context_length``; NaN = missing), in the context's units, with gradients: one pass, then, beyond
        ``prediction_length``, the roll-out on the quantile paths of :meth:`forecast`."""
        c = self.config
        pred = self._quantiles(context)  # (B, Q, F)
        steps, done = [pred], pred.shape[-1]
        if done < horizon:
            Q = len(c.quantiles)
            context = context.unsqueeze(1).repeat(1, Q, 1)  # (B, Q, L): one context per quantile path
        while done < horizon:
            context = torch.cat((context, pred), dim=-1)[..., -c.context_length :]  # (B, Q, L')
            B, Q, L = context.shape
            pred = self._quantiles(context.reshape(B * Q, L)).reshape(B, Q * Q, -1)  # (B, Q * Q, F)
            pred = torch.quantile(pred, q=self.quantiles, dim=1).transpose(0, 1)  # (B, Q, F)
            steps.append(pred)
            done += pred.shape[-1]
        return torch.cat(steps, dim=-1)[..., :horizon].transpose(1, 2)  # (B, horizon, Q)

    # ------------------------------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(cls, source: str | Path, *, cache_dir: str | Path | None = None) -> ChronosBolt:
        """A published Chronos-Bolt from its hub name (``amazon/chronos-bolt-small``) or a folder holding its
        config.json and model.safetensors.

        Raises:
            ValueError: a hub name that is not reachable (offline and not cached), a folder of another
                architecture (original Chronos, Chronos-2, Kronos, ...) or weights that do not fit its config.
        """
        folder = resolve_folder(source, "Chronos-Bolt model", cache_dir)
        config = ChronosBoltConfig.from_reference(
            read_config(folder, "Chronos-Bolt model"), str(folder / "config.json")
        )
        model = cls(config)
        model.load_reference_weights(read_weights(folder, "Chronos-Bolt model"), where=str(folder))
        return model.eval()

    def _table(self) -> list[tuple[str, list[str]]]:
        c = self.config
        return chronos_bolt_table(c.n_layers, c.n_decoder_layers, gated=c.activation in ("geglu", "swiglu"))

    def load_reference_weights(self, state: dict[str, Tensor], where: str = "weights") -> None:
        """Load a reference ``ChronosBoltModelForForecasting`` state dict.

        Raises:
            ValueError: tensors missing, unknown or of another shape (naming the first few).
        """
        load_converted(
            self, from_reference(state, self._table(), CHRONOS_BOLT_COPIES, "Chronos-Bolt model", where), where
        )

    def reference_state_dict(self) -> dict[str, Tensor]:
        """The weights in the reference's names."""
        return to_reference(self.state_dict(), self._table())

    def to_chronos_bolt(self, directory: str | Path) -> Path:
        """Write the model in the reference's layout: config.json and model.safetensors, which
        ``ChronosBoltPipeline.from_pretrained`` reads. Returns the folder."""
        from safetensors.torch import save_file

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(self.config.to_reference(), indent=2) + "\n", encoding="utf-8")
        save_file(self.reference_state_dict(), str(out / "model.safetensors"))
        log.info("wrote the Chronos-Bolt model to %s", out)
        return out

    # ------------------------------------------------------------------------------------------ fine-tuning

    @property
    def n_depths(self) -> int:
        """Depths of :meth:`layer_depth`: the patch embedding (0), each encoder block, then the rest."""
        return len(self.encoder.layers) + 1

    def layer_depth(self, name: str) -> int:
        """A parameter's depth for layer-wise learning-rate decay: 0 for the patch embedding, the REG token and
        the encoder's position bias, ``i + 1`` for encoder block ``i``, ``n_layers + 1`` for the encoder's final
        norm, the decoder and the head."""
        if name.startswith(("patch_embed.", "special_embed.", "encoder.pos.")):
            return 0
        if name.startswith("encoder.layers."):
            return int(name.split(".")[2]) + 1
        return len(self.encoder.layers) + 1
