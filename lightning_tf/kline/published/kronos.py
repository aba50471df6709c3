"""Kronos, a foundation model of K-lines (Shi et al. 2025; MIT licence; github.com/shiyu-coder/Kronos): its
tokenizer and its model together, with the reference predictor's forecast.

:class:`Kronos` holds a :class:`.KronosTokenizer` (``tokenizer.*``) and a :class:`.KronosModel` (``model.*``).
:meth:`Kronos.forecast` does what the reference's ``KronosPredictor.predict`` does to a window of bars: each
series is standardised by its own mean and standard deviation and clipped, tokenized, continued token pair by
token pair (coarse then fine, each drawn with temperature and top-k or top-p), decoded and un-standardised. It
returns every sample; their mean is the reference's forecast. The draws use torch's random generator in the
reference's order, so under the same seed and weights both draw the same tokens. Where the reference feeds the
whole window to the model at every step, this model keeps its keys and values while the window grows, and
recomputes only once the window slides past ``max_context``.

:meth:`Kronos.from_pretrained` reads the published checkpoints (``NeoQuasar/Kronos-mini``, ``-small``,
``-base``, each with its tokenizer) from the hub or from folders; :meth:`Kronos.to_kronos` writes both back in
the reference's layout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from lightning_tf.core import KVCache, evaluating

from .configs import KronosConfig, KronosTokenizerConfig
from .hub import read_config, read_weights, resolve_folder
from .kronos_layers import CALENDAR_FIELDS
from .kronos_model import KronosModel
from .kronos_tokenizer import KronosTokenizer
from .weights import (
    KRONOS_MODEL_BUFFERS,
    KRONOS_TOKENIZER_BUFFERS,
    from_reference,
    kronos_model_table,
    kronos_tokenizer_table,
    load_converted,
    to_reference,
)

__all__ = ["KRONOS_MODELS", "KRONOS_PRESETS", "Kronos", "calendar_stamps", "sample_tokens"]

log = logging.getLogger(__name__)

#: the published models: hub name -> (their tokenizer's hub name, the context they were trained on)
KRONOS_MODELS = {
    "NeoQuasar/Kronos-mini": ("NeoQuasar/Kronos-Tokenizer-2k", 2048),
    "NeoQuasar/Kronos-small": ("NeoQuasar/Kronos-Tokenizer-base", 512),
    "NeoQuasar/Kronos-base": ("NeoQuasar/Kronos-Tokenizer-base", 512),
}
_TOKENIZER_2K = KronosTokenizerConfig(group_size=5)
#: the published models' configs (their config.json files), for building them with random weights
KRONOS_PRESETS: dict[str, tuple[KronosConfig, KronosTokenizerConfig, int]] = {
    "mini": (
        KronosConfig(
            n_layers=4,
            d_model=256,
            n_heads=4,
            d_ff=512,
            dropout=0.2,
            attn_dropout=0.0,
            ffn_dropout=0.2,
            token_dropout=0.0,
        ),
        _TOKENIZER_2K,
        2048,
    ),
    "small": (KronosConfig(), KronosTokenizerConfig(), 512),
    "base": (
        KronosConfig(
            n_layers=12,
            d_model=832,
            n_heads=16,
            d_ff=2048,
            dropout=0.2,
            attn_dropout=0.0,
            ffn_dropout=0.2,
            token_dropout=0.0,
        ),
        KronosTokenizerConfig(),
        512,
    ),
}
#: the bar layout Kronos reads, in order
BAR_COLUMNS = ("open", "high", "low", "close", "volume", "amount")
_EXPORT = "kronos.json"


def calendar_stamps(timestamps: Any) -> Tensor:
    """The calendar stamps Kronos embeds, ``(L, 5)`` int64: minute, hour, weekday (Monday 0), day of the month,
    month, of each time stamp (anything ``pandas.DatetimeIndex`` takes; wall-clock fields of aware ones)."""
    import pandas as pd

    index = pd.DatetimeIndex(timestamps)
    fields = (index.minute, index.hour, index.day_of_week, index.day, index.month)
    return torch.as_tensor([list(f) for f in fields], dtype=torch.long).T.contiguous()  # (L, 5)


def sample_tokens(
    logits: Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
) -> Tensor:
    """One token per row of ``logits`` ``(N, V)`` -> ``(N,)``, as the reference draws them: the logits divided
    by ``temperature``; then only the ``top_k`` most likely kept if ``top_k > 0``, else (``top_p < 1``) the
    smallest set of most likely tokens whose probability reaches ``top_p`` (nucleus sampling, Holtzman et al.
    2020); then one draw from the softmax (``torch.multinomial`` with ``generator``). A sequence of ``k``
    generators draws the rows in ``k`` equal consecutive groups, group ``j`` from generator ``j``."""
    logits = logits / temperature
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[..., -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    elif top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)  # (N, V) each
        drop = ordered.softmax(-1).cumsum(-1) > top_p
        drop[..., 1:] = drop[..., :-1].clone()  # keep the token that crosses top_p, and always the first
        drop[..., 0] = False
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    probs = logits.softmax(-1)  # (N, V)
    if generator is None or isinstance(generator, torch.Generator):
        return torch.multinomial(probs, 1, generator=generator)[:, 0]  # (N,)
    groups = probs.chunk(len(generator))  # (N / k, V) each
    return torch.cat([torch.multinomial(p, 1, generator=g)[:, 0] for p, g in zip(groups, generator, strict=True)])


def _as_batch(x: Tensor | Sequence[Any], name: str, dtype: torch.dtype, width: int | None = None) -> Tensor:
    t = torch.as_tensor(x)
    if t.ndim == 2:
        t = t.unsqueeze(0)
    if t.ndim != 3 or (width is not None and t.shape[-1] != width):
        want = f"(B, T, {width})" if width is not None else "(B, T, C)"
        raise ValueError(f"{name} must have shape {want} or one series without B, got {tuple(t.shape)}")
    return t.to(dtype)


class Kronos(nn.Module):
    """The Kronos tokenizer and model, and the reference predictor's forecast.

    Args:
        model_config: the model's sizes; None: Kronos-small's.
        tokenizer_config: the tokenizer's sizes; None: Kronos-Tokenizer-base's.
        max_context: the most tokens the model reads (512 for Kronos-small and -base, 2048 for -mini).
        clip: standardised bars are clipped to ``[-clip, clip]``.
    """

    def __init__(
        self,
        model_config: KronosConfig | None = None,
        tokenizer_config: KronosTokenizerConfig | None = None,
        *,
        max_context: int = 512,
        clip: float = 5.0,
    ) -> None:
        super().__init__()
        model_config = KronosConfig() if model_config is None else model_config
        tokenizer_config = KronosTokenizerConfig() if tokenizer_config is None else tokenizer_config
        bits = (tokenizer_config.s1_bits, tokenizer_config.s2_bits)
        if bits != (model_config.s1_bits, model_config.s2_bits):
            raise ValueError(
                f"the tokenizer's (s1_bits, s2_bits) {bits} differ from the model's "
                f"{(model_config.s1_bits, model_config.s2_bits)}"
            )
        if tokenizer_config.d_in != len(BAR_COLUMNS):
            raise ValueError(f"the tokenizer reads d_in={tokenizer_config.d_in} values a bar; Kronos bars have 6")
        if max_context < 1 or clip <= 0:
            raise ValueError(f"max_context ({max_context}) and clip ({clip}) must be positive")
        for config in (model_config, tokenizer_config):
            if config.ffn_dropout != config.dropout:
                log.info(
                    "%s: ffn_dropout %s differs from dropout %s; the core's blocks drop both residual branches at %s",
                    type(config).__name__,
                    config.ffn_dropout,
                    config.dropout,
                    config.dropout,
                )
        self.max_context, self.clip = max_context, clip
        self.tokenizer = KronosTokenizer(tokenizer_config)
        self.model = KronosModel(model_config)

    # ------------------------------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(
        cls,
        model: str | Path,
        tokenizer: str | Path | None = None,
        *,
        max_context: int | None = None,
        cache_dir: str | Path | None = None,
    ) -> Kronos:
        """A published Kronos, from hub names or folders (each: config.json and model.safetensors).

        Args:
            model: the model's hub name (``NeoQuasar/Kronos-small``) or folder, or a folder :meth:`to_kronos`
                wrote (``model/`` and ``tokenizer/`` in it).
            tokenizer: the tokenizer's hub name or folder; None: the published model's own (see
                :data:`KRONOS_MODELS`), or the ``tokenizer/`` of a :meth:`to_kronos` folder.
            max_context: the most tokens the model reads; None: the published model's (or the folder's), else 512.
            cache_dir: the Hugging Face cache; None: the default one.

        Raises:
            ValueError: a hub name that is not reachable (offline and not cached), a folder of another
                architecture, a model folder without a tokenizer, a tokenizer whose bits differ from the model's.
        """
        folder = resolve_folder(model, "Kronos model", cache_dir)
        exported: dict[str, Any] = {}
        if (folder / _EXPORT).is_file():
            exported = json.loads((folder / _EXPORT).read_text(encoding="utf-8"))
            model_dir = folder / "model"
            tokenizer = folder / "tokenizer" if tokenizer is None else tokenizer
        else:
            model_dir = folder
        known = KRONOS_MODELS.get(str(model))
        if tokenizer is None:
            if known is None:
                raise ValueError(
                    f"Kronos model {str(model)!r}: which tokenizer? pass tokenizer=NAME_OR_FOLDER (the published "
                    "models use NeoQuasar/Kronos-Tokenizer-base, Kronos-mini NeoQuasar/Kronos-Tokenizer-2k)"
                )
            tokenizer = known[0]
        tokenizer_dir = resolve_folder(tokenizer, "Kronos tokenizer", cache_dir)
        model_config = KronosConfig.from_reference(
            read_config(model_dir, "Kronos model"), str(model_dir / "config.json")
        )
        tokenizer_config = KronosTokenizerConfig.from_reference(
            read_config(tokenizer_dir, "Kronos tokenizer"), str(tokenizer_dir / "config.json")
        )
        if max_context is None:
            max_context = exported.get("max_context") or (known[1] if known else 512)
        out = cls(model_config, tokenizer_config, max_context=max_context, clip=exported.get("clip", 5.0))
        out.load_reference_weights(
            read_weights(model_dir, "Kronos model"),
            read_weights(tokenizer_dir, "Kronos tokenizer"),
            where=(str(model_dir), str(tokenizer_dir)),
        )
        return out.eval()

    def load_reference_weights(
        self,
        model_state: dict[str, Tensor],
        tokenizer_state: dict[str, Tensor],
        where: tuple[str, str] = ("model", "tokenizer"),
    ) -> None:
        """Load the reference ``Kronos`` and ``KronosTokenizer`` state dicts.

        Raises:
            ValueError: tensors missing, unknown or of another shape (naming the first few).
        """
        t, m = self.tokenizer.config, self.model.config
        table = kronos_tokenizer_table(t.n_enc_layers - 1, t.n_dec_layers - 1)
        state = from_reference(tokenizer_state, table, KRONOS_TOKENIZER_BUFFERS, "Kronos tokenizer", where[1])
        load_converted(self.tokenizer, state, where[1])
        table = kronos_model_table(m.n_layers, m.learned_calendar)
        state = from_reference(model_state, table, KRONOS_MODEL_BUFFERS, "Kronos model", where[0])
        load_converted(self.model, state, where[0])

    def reference_state_dicts(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """The model's and the tokenizer's weights in the reference's names, with its derived buffers."""
        t, m = self.tokenizer.config, self.model.config
        model = to_reference(self.model.state_dict(), kronos_model_table(m.n_layers, m.learned_calendar))
        tokenizer = to_reference(
            self.tokenizer.state_dict(), kronos_tokenizer_table(t.n_enc_layers - 1, t.n_dec_layers - 1)
        )

        def inv_freq(d_model: int, n_heads: int) -> Tensor:
            dh = d_model // n_heads
            return 1.0 / (10000 ** (torch.arange(0, dh, 2).float() / dh))

        for i in range(m.n_layers):
            model[f"transformer.{i}.self_attn.rotary.inv_freq"] = inv_freq(m.d_model, m.n_heads)
        model["dep_layer.cross_attn.rotary.inv_freq"] = inv_freq(m.d_model, m.dependency_heads)
        for stack, n in (("encoder", t.n_enc_layers - 1), ("decoder", t.n_dec_layers - 1)):
            for i in range(n):
                tokenizer[f"{stack}.{i}.self_attn.rotary.inv_freq"] = inv_freq(t.d_model, t.n_heads)
        bits = t.s1_bits + t.s2_bits
        tokenizer["tokenizer.bsq.basis"] = 2 ** torch.arange(bits - 1, -1, -1)
        tokenizer["tokenizer.bsq.group_basis"] = 2 ** torch.arange(t.group_size - 1, -1, -1)
        return model, tokenizer

    def to_kronos(self, directory: str | Path) -> Path:
        """Write the model and the tokenizer in the reference's layout, ``directory/model`` and
        ``directory/tokenizer`` (config.json and model.safetensors each: the reference's ``Kronos.from_pretrained``
        and ``KronosTokenizer.from_pretrained`` read them), and ``kronos.json`` (``max_context``, ``clip``), which
        :meth:`from_pretrained` reads back. Returns the folder."""
        from safetensors.torch import save_file

        out = Path(directory)
        model_state, tokenizer_state = self.reference_state_dicts()
        parts = (
            ("model", self.model.config.to_reference(), model_state),
            ("tokenizer", self.tokenizer.config.to_reference(), tokenizer_state),
        )
        for name, config, state in parts:
            (out / name).mkdir(parents=True, exist_ok=True)
            (out / name / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
            save_file(state, str(out / name / "model.safetensors"))
        exported = {"max_context": self.max_context, "clip": self.clip}
        (out / _EXPORT).write_text(json.dumps(exported, indent=2) + "\n", encoding="utf-8")
        log.info("wrote the Kronos model and tokenizer to %s", out)
        return out

    # ------------------------------------------------------------------------------------------ forecasting

    def layer_depth(self, name: str) -> int:
        """A parameter's depth for layer-wise learning-rate decay: the tokenizer's at 0 (it makes the input),
        the model's as :meth:`.KronosModel.layer_depth`."""
        if name.startswith("tokenizer."):
            return 0
        return self.model.layer_depth(name.removeprefix("model."))

    def complete_bars(self, bars: Tensor | Sequence[Any]) -> Tensor:
        """Bars ``(B, L, C)`` with ``C`` 4 (OHLC), 5 (and volume) or 6 (and amount) -> ``(B, L, 6)`` float32, as
        the reference completes them: volume and amount 0 without volume, amount ``volume * mean(OHLC)`` without
        amount.

        Raises:
            ValueError: another width, or a value that is NaN or infinite.
        """
        x = torch.as_tensor(bars)
        if x.ndim == 2:
            x = x.unsqueeze(0)
        if x.ndim != 3 or x.shape[-1] not in (4, 5, 6):
            raise ValueError(
                f"bars must have shape (B, L, C) or (L, C) with C = 4, 5 or 6 (open, high, low, close, volume, "
                f"amount), got {tuple(x.shape)}"
            )
        x = x.double()
        if not torch.isfinite(x).all():
            raise ValueError("bars hold NaN or infinite values; Kronos reads complete bars")
        if x.shape[-1] == 4:
            x = torch.cat((x, x.new_zeros(*x.shape[:2], 2)), dim=-1)
        elif x.shape[-1] == 5:
            x = torch.cat((x, x[..., 4:5] * x[..., :4].mean(-1, keepdim=True)), dim=-1)
        return x.float()  # (B, L, 6)

    def _check_stamps(self, stamps: Tensor, name: str, B: int, T: int | None) -> Tensor:
        stamps = _as_batch(stamps, name, torch.long, width=len(CALENDAR_FIELDS))
        if stamps.shape[0] != B or (T is not None and stamps.shape[1] != T):
            want = f"({B}, {T}, 5)" if T is not None else f"({B}, F, 5)"
            raise ValueError(f"{name} must have shape {want} to go with the bars, got {tuple(stamps.shape)}")
        for i, (field, size) in enumerate(CALENDAR_FIELDS):
            values = stamps[..., i]
            if values.numel() and (int(values.min()) < 0 or int(values.max()) >= size):
                raise ValueError(
                    f"{name}: {field} holds {int(values.min())}..{int(values.max())}; expected 0..{size - 1} "
                    "(calendar_stamps makes them from time stamps)"
                )
        return stamps

    @torch.no_grad()
    def forecast(
        self,
        bars: Tensor | Sequence[Any],
        stamps: Tensor | Sequence[Any],
        future_stamps: Tensor | Sequence[Any],
        *,
        samples: int = 1,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 0.9,
        truncate: bool = False,
        generator: torch.Generator | Sequence[torch.Generator] | None = None,
    ) -> Tensor:
        """Sampled future bars, in the units of ``bars``.

        Args:
            bars: ``(B, L, C)`` or ``(L, C)``, C = 4, 5 or 6 (:meth:`complete_bars`).
            stamps: the bars' calendar stamps ``(B, L, 5)`` (:func:`calendar_stamps`).
            future_stamps: the stamps of the bars to forecast ``(B, F, 5)``; F is the horizon.
            samples: forecasts drawn per series (the reference's ``sample_count``).
            temperature: the logits' divisor (the reference's ``T``).
            top_k: keep the ``top_k`` most likely tokens (0: off; when on, ``top_p`` is not applied).
            top_p: nucleus sampling's probability mass.
            truncate: a context longer than ``max_context``: tokenize it whole and keep its last ``max_context``
                tokens, as the reference does; False: refuse it.
            generator: the random generator of the draws, one for the batch (in the reference's order; None:
                torch's global one, the reference's), or one per series (``B`` of them): a series' draws then depend
                on its own bars and generator alone, whatever batch it is forecast in.

        Returns:
            ``(B, samples, F, 6)``: open, high, low, close, volume, amount of every draw; ``.mean(1)`` is the
            reference's forecast.

        Raises:
            ValueError: bars or stamps of the wrong shape or range, a context longer than ``max_context`` without
                ``truncate``, a horizon longer than ``max_context``, a setting out of range.
        """
        x = self.complete_bars(bars)  # (B, L, 6)
        B, L, _ = x.shape
        stamps = self._check_stamps(torch.as_tensor(stamps), "stamps", B, L)
        future = self._check_stamps(torch.as_tensor(future_stamps), "future_stamps", B, None)
        F, W = future.shape[1], self.max_context
        if L < 1 or F < 1:
            raise ValueError(f"Kronos needs at least one bar and one future stamp, got L={L}, F={F}")
        if L > W and not truncate:
            raise ValueError(
                f"a context of {L} bars is longer than the model's max_context ({W}); pass the last {W} bars, or "
                "truncate=True to tokenize them all and keep the last tokens as the reference does"
            )
        if F > W:
            raise ValueError(f"a horizon of {F} bars is longer than the model's max_context ({W})")
        if not (generator is None or isinstance(generator, torch.Generator)):
            if not isinstance(generator, Sequence) or not all(isinstance(g, torch.Generator) for g in generator):
                raise ValueError(f"generator: a torch.Generator or a list of them, got {type(generator).__name__}")
            if len(generator) != B:
                raise ValueError(f"generator: one for the batch or one per series ({B}), got {len(generator)}")
        if samples < 1 or temperature <= 0 or top_k < 0 or not 0.0 < top_p <= 1.0:
            raise ValueError(
                f"samples ({samples}) must be >= 1, temperature ({temperature}) > 0, top_k ({top_k}) >= 0 and "
                f"top_p ({top_p}) in (0, 1]"
            )
        device = next(self.parameters()).device
        x, stamps, future = x.to(device), stamps.to(device), future.to(device)
        # each series standardised by its own context, as the reference does (statistics in float64, then float32)
        mean = x.double().mean(1, keepdim=True).float()  # (B, 1, 6)
        std = x.double().std(1, unbiased=False, keepdim=True).float()  # (B, 1, 6)
        x = ((x - mean) / (std + 1e-5)).clamp(-self.clip, self.clip)
        with evaluating(self):
            z = self._sample(x, torch.cat((stamps, future), dim=1), F, samples, temperature, top_k, top_p, generator)
        z = z.view(B, samples, F, -1)  # (B, S, F, 6)
        return z * (std + 1e-5).unsqueeze(1) + mean.unsqueeze(1)

    def _sample(
        self,
        x: Tensor,
        stamps: Tensor,
        F: int,
        samples: int,
        temperature: float,
        top_k: int,
        top_p: float,
        generator: torch.Generator | Sequence[torch.Generator] | None,
    ) -> Tensor:
        """Standardised bars ``(B, L, 6)`` and the stamps of context and horizon ``(B, L + F, 5)`` -> ``samples``
        standardised continuations of each series, ``(B * samples, F, 6)``, row ``b * samples + s``."""
        B, L, _ = x.shape
        W, S, model = self.max_context, samples, self.model
        s1, s2 = self.tokenizer.encode(x)  # (B, L) each
        expand = torch.arange(B, device=x.device).repeat_interleave(S)  # (N,): row b * S + s continues series b
        tok1 = torch.cat((s1, s1.new_zeros(B, F)), dim=1)  # (B, L + F)
        tok2 = torch.cat((s2, s2.new_zeros(B, F)), dim=1)
        # the caches serve while the window grows, up to min(L + F, W) positions: allocated once, at that size, and
        # not at all when the window is full from the start (it slides at the second bar)
        caches = model.init_cache(min(L + F, W)) if L < W else None
        dep_cache = KVCache(min(L + F, W))
        for i in range(F):
            cur = L + i
            start = max(cur - W, 0)
            if i == 0:
                # the samples of a series share its context: read it once per series, then repeat the rows
                h = model.hidden(tok1[:, start:cur], tok2[:, start:cur], stamps[:, start:cur], cache=caches)
                if caches is not None:
                    model.dep_layer.remember(h, dep_cache)
                    for c in [*caches, dep_cache]:
                        c.reorder(expand)
                h, tok1, tok2, stamps = h[expand], tok1[expand], tok2[expand], stamps[expand]
            elif caches is not None and cur <= W:
                new = slice(cur - 1, cur)
                h = model.hidden(tok1[:, new], tok2[:, new], stamps[:, new], cache=caches)  # (N, 1, D)
                model.dep_layer.remember(h, dep_cache)
            else:  # the window slides past max_context: every hidden state changes and nothing cached holds
                caches = None
                h = model.hidden(tok1[:, start:cur], tok2[:, start:cur], stamps[:, start:cur])  # (N, W, D)
            coarse = sample_tokens(model.s1_logits(h[:, -1]), temperature, top_k, top_p, generator)  # (N,)
            sibling = model.embed.emb_s1(coarse).unsqueeze(1)  # (N, 1, D)
            if caches is not None:
                x2 = model.dep_layer.step(h[:, -1:], sibling, dep_cache)  # (N, 1, D)
            else:
                x2 = model.dep_layer(h, sibling, causal=False)  # (N, 1, D)
            fine = sample_tokens(model.head.proj_s2(x2[:, -1]), temperature, top_k, top_p, generator)  # (N,)
            tok1[:, cur], tok2[:, cur] = coarse, fine
        start = max(L + F - W, 0)  # the decoder reads the last window, as the model did
        return self.tokenizer.decode(tok1[:, start:], tok2[:, start:])[:, -F:]  # (N, F, 6)
