"""Seq2SeqTransformer: the encoder-decoder of Vaswani et al. 2017 ("Attention Is All You Need") for
machine translation, as a LightningModule.

Training follows the paper: label-smoothed cross-entropy (sec. 5.4), Adam with beta2 = 0.98 and
eps = 1e-9 and the inverse-square-root warmup schedule (sec. 5.3, :func:`lightning_tf.training.noam`),
shared and tied embeddings (sec. 3.4, Press & Wolf 2017). Evaluation decodes with beam search (GNMT length penalty, see
:mod:`.decoding`) and scores detokenised text with sacreBLEU (Post 2018) and chrF (Popovic 2015). Pretrained Marian /
OPUS-MT models come in and go out through :mod:`.marian`.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.loggers import WandbLogger
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from lightning_tf.core import (
    Activation,
    Decoder,
    DecoderCache,
    Encoder,
    PositionalName,
    TransformerSpec,
    evaluating,
    padding_mask,
)
from lightning_tf.training import CheckedLoading, SchedulerName, check_agreement, configure_adamw, gather_objects, stamp

from .decoding import beam_search, decode_by_length, greedy_search
from .embedding import OutputProjection, TokenEmbedding
from .handover import adopt_direction, adopt_tokenizer
from .marian import ARCHITECTURE, EXPORTED, from_marian_arguments, load_pretrained, to_marian
from .scoring import DecodedEpochs, corpus_scores, report_scores, target_texts
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, TextTokenizer, source_ids
from .tokenizer_kinds import tokenizer_from_dict
from .writer import TranslationWriter

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PRESETS", "Preset", "Seq2SeqTransformer"]

log = logging.getLogger(__name__)

Preset = Literal["base", "small", "tiny"]

#: Model sizes by name. ``base`` is the paper's base model (Table 3); ``small`` and ``tiny`` train on a CPU.
PRESETS: dict[str, dict[str, Any]] = {
    "base": dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1, norm_first=False),
    "small": dict(d_model=256, n_heads=4, n_layers=3, d_ff=1024, dropout=0.1, norm_first=True),
    "tiny": dict(d_model=128, n_heads=4, n_layers=2, d_ff=512, dropout=0.1, norm_first=True),
}

_ABSOLUTE_PE = ("sinusoidal", "sinusoidal_halves", "learned")


class Seq2SeqTransformer(CheckedLoading, LightningModule):
    """Encoder-decoder Transformer for translation with greedy/beam decoding on the KV cache.

    Size arguments left at ``None`` (``d_model``, ``n_heads``, ``n_layers``, ``d_ff``, ``dropout``,
    ``norm_first``) come from ``preset``; any given explicitly overrides it. The tokenizer comes from the
    DataModule in the first ``fit`` (or with the ``pretrained`` model) and is kept in the checkpoint with the
    direction (:attr:`src_lang`, :attr:`tgt_lang`), so a loaded model translates on its own (:meth:`translate`).

    Args:
        vocab_size: id capacity V of the tokenizer; must equal the DataModule's ``vocab_size``.
        preset: ``base`` (6+6 layers, d_model 512, 8 heads, d_ff 2048, Post-LN, dropout 0.1: the
            paper's base model), ``small`` (3+3, 256, 4, 1024, Pre-LN) or ``tiny`` (2+2, 128, 4, 512, Pre-LN).
        d_model: model width D (None: the preset's).
        n_heads: attention heads H (None: the preset's).
        n_layers: encoder layers, and decoder layers unless ``n_decoder_layers`` is set (None: the preset's).
        n_decoder_layers: decoder layers (None: ``n_layers``).
        d_ff: feed-forward width (None: the preset's).
        dropout: dropout on embeddings, sublayer outputs and feed-forward hidden units (None: the preset's).
        attn_dropout: dropout on attention weights.
        ffn_dropout: the feed-forward hidden units' own rate (None: ``dropout``'s; Marian's ``activation_dropout``).
        norm_first: Pre-LN (True) or Post-LN (False, the paper's) (None: the preset's).
        activation: feed-forward activation.
        pos_encoding: positional encoding of both stacks.
        max_len: positions covered by absolute encodings (``sinusoidal``/``learned``): the longest
            source, and the longest output of decoding.
        share_embeddings: one embedding table for source and target (needs a joint vocabulary to be
            meaningful).
        tie_output: the output projection reuses the target embedding matrix.
        scale_embedding: multiply token embeddings by sqrt(d_model) (the paper's; Marian's ``scale_embedding``).
        output_bias: a trained per-token bias on the logits (Marian's ``final_logits_bias``).
        pad_id: the tokenizer's padding id (hidden from attention, ignored by the loss).
        bos_id: the tokenizer's decoder start token (Marian models start with ``pad_id``).
        eos_id: the tokenizer's end-of-sentence id.
        pretrained: a Marian / OPUS-MT model to start from, by hub name or local folder (``hf`` extra): its
            architecture, special ids, tokenizer and weights replace the arguments above (dropout rates left at None
            take its) and the initial weights; checkpoints keep the result with ``pretrained: null``.
        label_smoothing: label smoothing of the cross-entropy (PAD targets are ignored).
        lr: peak learning rate.
        scheduler: learning-rate schedule (:func:`lightning_tf.training.build_scheduler`): ``noam``
            (linear warmup, then inverse square root: the paper's), ``cosine`` (linear warmup, cosine decay
            to ``min_lr`` at the end of training), ``onecycle`` (OneCycleLR peaking at ``lr``), ``decay``
            (``lr`` for 3 epochs, then x0.9 per epoch) or ``constant`` (linear warmup, then flat).
        warmup_steps: optimizer steps of linear warmup, at most half of the run when its length is known;
            ``noam`` needs >= 1.
        total_steps: the run's length in optimizer steps for the schedule (None: the Trainer's estimate for
            ``cosine`` and ``onecycle``, unknown for the others).
        min_lr: the rate ``cosine`` ends at.
        betas: AdamW's betas.
        eps: AdamW's epsilon.
        weight_decay: decoupled weight decay on matrices (0: plain Adam).
        beam_size: beam width of validation, test, predict and :meth:`translate` (1: greedy).
        alpha: length-penalty exponent of beam search, ``((5 + len) / 6) ** alpha``.
        extra_len: decoding stops after ``source length + extra_len`` tokens.
        no_repeat_ngram_size: block repeated n-grams of this size in decoding (0: off).
        bleu_every_n_epochs: decode the validation set and log BLEU/chrF every this many epochs.
        bleu_max_batches: decode at most this many validation batches (None: all); test decodes all.
        n_logged_samples: translations shown in the logged sample table (wandb only), drawn afresh every
            decoding epoch across source lengths.
        sample_seed: seed of that draw (with the epoch number: the same run shows the same sentences).
        compile: compile the training and evaluation forward with torch.compile (the decoding loop /
            attention-map path stay eager).
    """

    def __init__(
        self,
        vocab_size: int = 8000,
        preset: Preset = "small",
        d_model: int | None = None,
        n_heads: int | None = None,
        n_layers: int | None = None,
        n_decoder_layers: int | None = None,
        d_ff: int | None = None,
        dropout: float | None = None,
        attn_dropout: float = 0.0,
        ffn_dropout: float | None = None,
        norm_first: bool | None = None,
        activation: Activation = "relu",
        pos_encoding: PositionalName = "sinusoidal",
        max_len: int = 256,
        share_embeddings: bool = True,
        tie_output: bool = True,
        scale_embedding: bool = True,
        output_bias: bool = False,
        pad_id: int = PAD_ID,
        bos_id: int = BOS_ID,
        eos_id: int = EOS_ID,
        pretrained: str | None = None,
        label_smoothing: float = 0.1,
        lr: float = 7e-4,
        scheduler: SchedulerName = "noam",
        warmup_steps: int = 4000,
        total_steps: int | None = None,
        min_lr: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        weight_decay: float = 0.0,
        beam_size: int = 4,
        alpha: float = 0.6,
        extra_len: int = 50,
        no_repeat_ngram_size: int = 0,
        bleu_every_n_epochs: int = 1,
        bleu_max_batches: int | None = None,
        n_logged_samples: int = 10,
        sample_seed: int = 0,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        hp = self.hparams
        state, tokenizer = None, None
        if pretrained:  # its architecture replaces the arguments; the hyperparameters keep the result
            defaults = inspect.signature(Seq2SeqTransformer.__init__).parameters
            changed = {k: hp[k] for k in ARCHITECTURE if hp[k] != defaults[k].default}
            arch, state, tokenizer = load_pretrained(pretrained, changed, dropout, ffn_dropout)
            hp.update(arch, pretrained=None)
        vocab_size = hp.vocab_size
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; expected one of {list(PRESETS)}")
        specials = {k: hp[k] for k in ("pad_id", "bos_id", "eos_id")}
        if not all(0 <= i < vocab_size for i in specials.values()):
            raise ValueError(f"vocab_size ({vocab_size}) must exceed the special ids ({specials}), which are >= 0")
        for name, value in (("beam_size", beam_size), ("bleu_every_n_epochs", bleu_every_n_epochs)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if warmup_steps < (1 if scheduler == "noam" else 0):
            raise ValueError(
                f"warmup_steps must be at least {1 if scheduler == 'noam' else 0} with scheduler {scheduler!r}, "
                f"got {warmup_steps}"
            )
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must lie in [0, 1), got {label_smoothing}")
        size = {
            k: PRESETS[preset][k] if hp[k] is None else hp[k]
            for k in ("d_model", "n_heads", "n_layers", "d_ff", "dropout", "norm_first")
        }
        #: the resolved sizes (preset plus overrides)
        n_dec = hp.n_decoder_layers
        self.size = size | {"n_decoder_layers": size["n_layers"] if n_dec is None else n_dec}
        spec = TransformerSpec(
            **size,
            attn_dropout=hp.attn_dropout,
            ffn_dropout=hp.ffn_dropout,
            activation=hp.activation,
            pos_encoding=hp.pos_encoding,
            max_len=hp.max_len,
        )
        D, pad = size["d_model"], hp.pad_id
        self.tgt_embed = TokenEmbedding(vocab_size, D, pad, hp.scale_embedding)
        self.src_embed = None if hp.share_embeddings else TokenEmbedding(vocab_size, D, pad, hp.scale_embedding)
        self.encoder = Encoder(spec)
        self.decoder = Decoder(spec.replace(n_layers=self.size["n_decoder_layers"]))
        self.head = OutputProjection(D, vocab_size, hp.output_bias, tie_to=self.tgt_embed if hp.tie_output else None)

        self.tokenizer: TextTokenizer | None = tokenizer  # a pretrained model's, else the data's in the first fit
        #: the direction, ``src_lang -> tgt_lang`` (from the data of the first fit, kept in the checkpoint)
        self.src_lang: str | None = None
        self.tgt_lang: str | None = None
        self.metrics = nn.ModuleDict()
        for stage in ("train", "val", "test"):
            self.metrics[f"{stage}_token_acc"] = MulticlassAccuracy(vocab_size, average="micro", ignore_index=pad)
            self.metrics[f"{stage}_perplexity"] = Perplexity(ignore_index=pad)
        self._epochs = DecodedEpochs()  # what validation and test decode, per stage
        self._signature_logged = False
        # the teacher-forced forward of the loss, compiled by configure_model when `compile` is set
        self._compiled_forward: Callable[[Tensor, Tensor], Tensor] | None = None
        if state is not None:
            self.load_state_dict(state, strict=True)

    @classmethod
    def from_marian(cls, model: Any, tokenizer: Any = None, **hparams: Any) -> Seq2SeqTransformer:
        """Our model with the architecture, special ids and weights of a transformers ``MarianMTModel``: the
        same teacher-forced logits and greedy translations (tests/text/test_marian.py).

        Args:
            model: a ``MarianMTModel``, or a hub name or local folder of one (as ``pretrained``).
            tokenizer: its ``MarianTokenizer`` or a :class:`~.spm_tokenizer.SentencePieceTokenizer` (None: from
                the name or folder, if ``model`` is one).
            hparams: further arguments (``lr``, ``beam_size``, ``label_smoothing``, ...).
        """
        arguments, state, tok = from_marian_arguments(model, tokenizer, hparams)
        out = cls(**arguments)
        out.load_state_dict(state, strict=True)
        out.tokenizer = tok
        return out

    def to_marian(self, directory: str | Path) -> Path:
        """Write a folder that transformers' ``MarianMTModel`` and ``MarianTokenizer`` load with
        ``from_pretrained``: this model's weights and SentencePiece tokenizer; returns the folder."""
        arguments = {k: self.size.get(k, self.hparams[k]) for k in EXPORTED}  # the resolved sizes, the rest as given
        return to_marian(directory, self.state_dict(), self.tokenizer, **arguments)

    # ------------------------------------------------------------------ model
    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Source ids ``(B, S)`` -> memory ``(B, S, D)`` and the source key mask ``(B, 1, 1, S)``."""
        src_mask = padding_mask(src, self.hparams.pad_id)  # (B, 1, 1, S)
        embed = self.tgt_embed if self.src_embed is None else self.src_embed
        return self.encoder(embed(src), src_mask), src_mask  # (B, S, D)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """Target ids ``(B, T)`` -> next-token logits ``(B, T, V)``; with a cache, ``tgt`` holds only the
        positions not decoded yet. Target padding needs no mask: it follows every real token, and
        causality already hides later positions."""
        h = self.decoder(self.tgt_embed(tgt), memory, memory_mask=src_mask, cache=cache)  # (B, T, D)
        return self.head(h)  # (B, T, V)

    def decode_step(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """Next-token logits ``(B, V)`` after ``tgt (B, T)`` (with a cache: only the new positions); the
        output projection runs on the last position only."""
        h = self.decoder(self.tgt_embed(tgt), memory, memory_mask=src_mask, cache=cache)  # (B, T, D)
        return self.head(h[:, -1])  # (B, V)

    def init_cache(self, capacity: int) -> DecoderCache:
        """An empty decoder cache for ``capacity`` target positions."""
        return self.decoder.init_cache(capacity)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher-forced logits: ``src_ids (B, S)`` and ``tgt_ids (B, T)`` (BOS first) -> ``(B, T, V)``;
        position t predicts target token t + 1."""
        memory, src_mask = self.encode(src_ids)  # (B, S, D)
        return self.decode(tgt_ids, memory, src_mask)  # (B, T, V)

    @torch.no_grad()
    def cross_attention(self, src_ids: Tensor, tgt_ids: Tensor) -> list[Tensor]:
        """Per decoder layer, the cross-attention weights ``(B, H, T, S)`` of a teacher-forced pass."""
        memory, src_mask = self.encode(src_ids)  # (B, S, D)
        _, _, cross = self.decoder(self.tgt_embed(tgt_ids), memory, memory_mask=src_mask, need_weights=True)
        return cross

    # --------------------------------------------------------------- decoding
    def max_new_tokens(self, src_ids: Tensor, extra_len: int | None = None) -> Tensor:
        """Per-sentence output limit ``(B,)``: source length (EOS included) + ``extra_len``, capped so
        absolute positional encodings cover every decoder position."""
        extra = self.hparams.extra_len if extra_len is None else extra_len
        limit = (src_ids != self.hparams.pad_id).sum(1) + extra  # (B,)
        if self.hparams.pos_encoding in _ABSOLUTE_PE:
            limit = limit.clamp(max=self.hparams.max_len - 1)  # BOS takes position 0
        return limit.clamp(min=1)

    @torch.no_grad()
    def generate(
        self,
        src_ids: Tensor,
        beam_size: int | None = None,
        alpha: float | None = None,
        extra_len: int | None = None,
        no_repeat_ngram_size: int | None = None,
        use_cache: bool = True,
    ) -> Tensor:
        """Decode ``src_ids (B, S)`` into ids ``(B, T)`` (each row ends with EOS, then PAD); arguments left
        at None take the module's hyperparameters."""
        hp = self.hparams
        beam_size = hp.beam_size if beam_size is None else beam_size
        ngram = hp.no_repeat_ngram_size if no_repeat_ngram_size is None else no_repeat_ngram_size
        alpha = hp.alpha if alpha is None else alpha
        for name, value in (("beam_size", beam_size), ("no_repeat_ngram_size", ngram)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (name == "beam_size"):
                raise ValueError(f"{name} must be an integer >= {int(name == 'beam_size')}, got {value!r}")
        if not math.isfinite(alpha):
            raise ValueError(f"alpha must be a finite number, got {alpha!r}")
        limit = self.max_new_tokens(src_ids, extra_len)
        ids = {k: hp[k] for k in ("pad_id", "bos_id", "eos_id")} | dict(no_repeat_ngram_size=ngram, use_cache=use_cache)
        if beam_size == 1:
            return greedy_search(self, src_ids, limit, **ids)
        return beam_search(self, src_ids, limit, beam_size=beam_size, alpha=alpha, **ids)[0]  # the hypotheses

    def _require_tokenizer(self) -> TextTokenizer:
        if self.tokenizer is None:
            raise RuntimeError(
                "this Seq2SeqTransformer has no tokenizer: fit it on data that has one (it takes the data's), "
                "load it from a checkpoint of such a run, start from a pretrained model, or assign model.tokenizer"
            )
        return self.tokenizer

    def encode_texts(self, texts: Sequence[str]) -> Tensor:
        """Tokenise raw source sentences into ids ``(B, S)``: tokens + EOS, right-padded with PAD."""
        hp = self.hparams
        limit = hp.max_len if hp.pos_encoding in _ABSOLUTE_PE else None
        ids = source_ids(self._require_tokenizer(), texts, limit, f"of the {hp.pos_encoding} positional encoding")
        return ids.to(self.device)

    @torch.no_grad()
    def translate(
        self,
        texts: Sequence[str],
        beam_size: int | None = None,
        alpha: float | None = None,
        extra_len: int | None = None,
        no_repeat_ngram_size: int | None = None,
        batch_size: int = 64,
    ) -> list[str]:
        """Translate raw sentences with the tokenizer stored in the model (or its checkpoint).

        Args:
            texts: source sentences.
            beam_size: beam width (1: greedy); defaults to the hyperparameter.
            alpha: length-penalty exponent; defaults to the hyperparameter.
            extra_len: output limit beyond the source length; defaults to the hyperparameter.
            no_repeat_ngram_size: n-gram blocking (0: off); defaults to the hyperparameter.
            batch_size: sentences decoded together (sorted by length to limit padding).

        Returns:
            One translation per input, in input order; an empty or blank input gives "" (no decoding guess).
        """
        if isinstance(texts, str):
            raise TypeError("translate expects a list of sentences, got one str; wrap it in a list")
        other = next(((i, t) for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if other is not None:
            raise TypeError(f"translate expects sentences (str); item {other[0]} is {type(other[1]).__name__}")
        tok = self._require_tokenizer()

        def decode(src: Tensor) -> list[str]:  # (b, S_b) -> b translations
            return tok.decode(self.generate(src, beam_size, alpha, extra_len, no_repeat_ngram_size), side="tgt")

        with evaluating(self):
            out = decode_by_length(self.encode_texts(texts), self.hparams.pad_id, batch_size, decode)
        return [t if s.strip() else "" for t, s in zip(out, texts, strict=True)]  # an empty line stays empty

    # --------------------------------------------------------------- training
    def setup(self, stage: str) -> None:
        """The one hand-over from the data: check ``vocab_size`` and take the DataModule's tokenizer and
        direction (``src_lang``, ``tgt_lang``) when the model has none (a fresh model learns the data's
        ids). A model that has them (loaded from a checkpoint) keeps them, and data encoded by another
        tokenizer or read in another direction is an error: the weights read the model's ids. (Under
        ``ckpt_path`` a fresh model takes the data's tokenizer here, if the data has one yet; after this
        hook Lightning restores the checkpoint's into the model, :meth:`on_load_checkpoint`, and into the
        DataModule, which encodes its data again: both agree.)"""
        dm = getattr(self.trainer, "datamodule", None)
        if dm is None:
            return
        check_agreement("vocab_size", self.hparams.vocab_size, getattr(dm, "vocab_size", None))
        data_direction = (getattr(dm, "src_lang", None), getattr(dm, "tgt_lang", None))
        direction = adopt_direction((self.src_lang, self.tgt_lang), data_direction)
        tokenizer = getattr(dm, "tokenizer", None)
        if tokenizer is None:
            return
        for name in ("pad_id", "bos_id", "eos_id"):
            check_agreement(name, self.hparams[name], getattr(tokenizer, name))
        self.src_lang, self.tgt_lang = direction
        self.tokenizer = adopt_tokenizer(self.tokenizer, tokenizer, self.hparams.share_embeddings)

    def configure_model(self) -> None:
        """With ``compile``, compile the teacher-forced forward of the loss, once (Lightning calls this hook
        in every fit/validate/test/predict). The compiled function wraps :meth:`forward`; no child module
        is replaced, so the state dict keeps the eager names and checkpoints of compiled and eager runs
        are interchangeable. Greedy and beam search stay eager: the KV cache grows by one position per
        step and beam search reorders it, so every step has new shapes and in-place cache writes that
        would recompile or break the graph each time."""
        if self.hparams.compile and self._compiled_forward is None:
            self._compiled_forward = torch.compile(self.forward)

    def loss(self, batch: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor]:
        """Teacher-forced label-smoothed cross-entropy of a batch (PAD targets ignored); returns the
        loss, the logits ``(B, T, V)`` and the targets ``(B, T)``."""
        src, tgt = batch["src"], batch["tgt"]  # (B, S), (B, 1 + T)
        tgt_in = tgt[:, :-1]  # (B, T): position t predicts token t + 1
        logits = (self._compiled_forward or self)(src, tgt_in)  # (B, T, V)
        target = tgt[:, 1:]  # (B, T)
        hp = self.hparams
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), target.flatten(), ignore_index=hp.pad_id, label_smoothing=hp.label_smoothing
        )
        return loss, logits, target

    def _shared_step(self, batch: dict[str, Any], stage: str) -> Tensor:
        loss, logits, target = self.loss(batch)
        B = batch["src"].shape[0]
        acc, ppl = self.metrics[f"{stage}_token_acc"], self.metrics[f"{stage}_perplexity"]
        acc(logits.detach().argmax(-1), target)
        ppl(logits.detach().float(), target)
        # a float batch size: Lightning averages the summed count over processes in its dtype, and an integer
        # count truncates (10.5 -> 10) when the processes saw different numbers of sentences (Lightning #21859)
        self.log(f"{stage}/loss", loss, prog_bar=True, batch_size=float(B), sync_dist=stage != "train")
        self.log(f"{stage}/token_acc", acc, prog_bar=stage != "train", batch_size=B)
        self.log(f"{stage}/perplexity", ppl, batch_size=B)
        return loss

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._shared_step(batch, "val")
        if not self._decoding_epoch("val"):
            return
        limit = self.hparams.bleu_max_batches
        if limit is None or batch_idx < limit:
            self._decode_batch(batch, "val")
        self._collect_candidates(batch, "val")  # every batch: the samples are drawn across all lengths

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._shared_step(batch, "test")
        self._decode_batch(batch, "test")
        self._collect_candidates(batch, "test")

    def _decoding_epoch(self, stage: str) -> bool:
        if stage == "test":
            return True
        if self.trainer.sanity_checking:
            return False
        return (self.current_epoch + 1) % self.hparams.bleu_every_n_epochs == 0

    def _texts(self, ids: Tensor) -> list[str]:
        hp = self.hparams
        return target_texts(self.tokenizer, ids, hp.pad_id, hp.bos_id, hp.eos_id)

    def _references(self, batch: dict[str, Any]) -> list[str]:
        return batch["tgt_text"] if "tgt_text" in batch else self._texts(batch["tgt"])

    def _decode_batch(self, batch: dict[str, Any], stage: str) -> None:
        self._epochs.add(stage, self._texts(self.generate(batch["src"])), self._references(batch))

    def _collect_candidates(self, batch: dict[str, Any], stage: str) -> None:
        """Keep the batch's sentences for the sample table; only under a WandbLogger, the one logger that
        shows it, and only on the rank that logs."""
        if isinstance(self.logger, WandbLogger) and self.trainer.is_global_zero:
            self._epochs.add_candidates(stage, batch, self.hparams.pad_id, self._references(batch))

    def _end_decoding_epoch(self, stage: str) -> None:
        hyps, refs, candidates = self._epochs.pop(stage)
        if not self._decoding_epoch(stage):
            return
        hyps = [h for part in gather_objects(hyps) for h in part]
        refs = [r for part in gather_objects(refs) for r in part]
        if not hyps:
            return
        bleu_score, chrf_score, signature = corpus_scores(hyps, refs)
        self.log(f"{stage}/bleu", bleu_score.score, prog_bar=True, rank_zero_only=True)
        self.log(f"{stage}/chrf", chrf_score.score, rank_zero_only=True)
        log.info("%s: %s | %s (%d sentences)", stage, bleu_score, chrf_score, len(hyps))
        if stage == "test":  # the test report adds chrF++ and TER (lower is better)
            scores, more = report_scores(hyps, refs)
            self.log("test/chrfpp", scores["chrfpp"], rank_zero_only=True)
            self.log("test/ter", scores["ter"], rank_zero_only=True)
            log.info("test: chrF++ %.2f | TER %.2f (%s)", scores["chrfpp"], scores["ter"], more)
        if not self._signature_logged:
            log.info("sacreBLEU signatures: %s", signature)
            if self.logger is not None:
                self.logger.log_hyperparams(signature)
            self._signature_logged = True
        if isinstance(self.logger, WandbLogger) and candidates:
            from .plots import log_samples

            hp = self.hparams
            log_samples(
                self.logger,
                stage,
                candidates,
                n=hp.n_logged_samples,
                seed=hp.sample_seed,
                epoch=self.current_epoch,
                step=self.global_step,
                pad_id=hp.pad_id,
                attention_figure=self.attention_figure,
                translate=lambda src: self._texts(self.generate(src.to(self.device))),
            )

    def on_validation_epoch_end(self) -> None:
        self._end_decoding_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._end_decoding_epoch("test")

    @torch.no_grad()
    def attention_figure(self, src: Tensor, title: str = "") -> Figure:
        """A layer x head grid of the cross-attention of the model's own greedy translation of one
        sentence ``src (S,)`` (ids + EOS; padding is dropped): source tokens across, the predicted target
        tokens (through EOS) down, no padding position on either axis."""
        from .plots import greedy_attention_figure

        hp = self.hparams
        return greedy_attention_figure(
            src.to(self.device),
            partial(self.generate, beam_size=1),
            self.cross_attention,
            self.tokenizer,
            pad_id=hp.pad_id,
            bos_id=hp.bos_id,
            eos_id=hp.eos_id,
            title=title,
        )

    def configure_callbacks(self) -> list[Callback]:
        """A :class:`TranslationWriter` into the run folder, unless the Trainer already has a prediction
        writer (one given in the config or on the command line wins)."""
        if any(isinstance(c, BasePredictionWriter) for c in self.trainer.callbacks):
            return []
        return [TranslationWriter()]

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any]:
        """Translate a batch; returns ``{"index": [...], "translation": [...]}`` (index = input line), which
        :class:`~lightning_tf.text.TranslationWriter` writes to a file in input order; writes nothing."""
        hyps = self._texts(self.generate(batch["src"]))
        if "src_text" in batch:  # an empty input line stays an empty output line, not a guess
            hyps = [h if s.strip() else "" for h, s in zip(hyps, batch["src_text"], strict=True)]
        index = batch["index"].tolist() if "index" in batch else list(range(len(hyps)))
        return {"index": index, "translation": hyps}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The tokenizer (plain JSON types) and the direction beside the weights; ``max_len``, the special ids
        and the decoding settings are hyperparameters."""
        stamp(checkpoint)  # the package version and checkpoint format
        if self.tokenizer is not None:
            checkpoint["tokenizer"] = self.tokenizer.to_dict()
        if self.src_lang is not None:
            checkpoint["src_lang"], checkpoint["tgt_lang"] = self.src_lang, self.tgt_lang

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "tokenizer" in checkpoint:
            self.tokenizer = tokenizer_from_dict(checkpoint["tokenizer"])
        if "src_lang" in checkpoint:
            self.src_lang, self.tgt_lang = checkpoint["src_lang"], checkpoint["tgt_lang"]

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        total = hp.total_steps
        if total is None and hp.scheduler in ("cosine", "onecycle"):
            # only where the schedule needs the run's length: reading it builds the training loader early
            total = self.trainer.estimated_stepping_batches
        return configure_adamw(self, hp, total, eps=hp.eps)
