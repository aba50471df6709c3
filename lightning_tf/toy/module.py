"""A small encoder-decoder Transformer that learns to reverse token sequences."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from lightning_tf.core import (
    Decoder,
    Encoder,
    OutputProjection,
    PositionalName,
    TokenEmbedding,
    padding_mask,
    warmup_cosine,
)

from .data import BOS_ID, EOS_ID, PAD_ID

__all__ = ["ReverseSeq2Seq"]


class ReverseSeq2Seq(LightningModule):
    """Encoder-decoder with shared, tied embeddings, trained with teacher forcing and evaluated
    by greedy decoding on the KV cache.

    Args:
        vocab_size: vocabulary size V; must equal the DataModule's.
        d_model: model width D.
        n_heads: attention heads H.
        n_layers: layers of the encoder and of the decoder.
        d_ff: feed-forward width; defaults to ``4 * d_model``.
        dropout: dropout rate.
        norm_first: Pre-LN (True) or Post-LN (False).
        pos_encoding: positional encoding of both stacks.
        max_len: longest sequence the absolute encodings cover.
        lr: peak learning rate of AdamW.
        warmup_steps: linear warmup steps before cosine decay.
        weight_decay: AdamW weight decay.
    """

    def __init__(
        self,
        vocab_size: int = 16,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        dropout: float = 0.0,
        norm_first: bool = True,
        pos_encoding: PositionalName = "sinusoidal",
        max_len: int = 64,
        lr: float = 1e-3,
        warmup_steps: int = 100,
        weight_decay: float = 0.01,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        stack = dict(
            d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=d_ff, dropout=dropout,
            norm_first=norm_first, pos_encoding=pos_encoding, max_len=max_len,
        )
        self.embed = TokenEmbedding(vocab_size, d_model, padding_idx=PAD_ID)
        self.encoder = Encoder(**stack)
        self.decoder = Decoder(**stack)
        self.head = OutputProjection(d_model, vocab_size, tie_to=self.embed)
        self.metrics = torch.nn.ModuleDict(
            {
                f"{stage}_{name}": metric
                for stage in ("train", "val", "test")
                for name, metric in (
                    ("token_acc", MulticlassAccuracy(vocab_size, average="micro", ignore_index=PAD_ID)),
                    ("exact_match", MeanMetric()),
                )
            }
        )

    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        if dm is not None and getattr(dm, "vocab_size", self.hparams.vocab_size) != self.hparams.vocab_size:
            raise ValueError(
                f"model vocab_size ({self.hparams.vocab_size}) differs from the data's vocab_size ({dm.vocab_size})"
            )

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits: ``src (B, S)``, ``tgt_in (B, T)`` -> ``(B, T, V)``."""
        src_mask = padding_mask(src, PAD_ID)  # (B, 1, 1, S)
        memory = self.encoder(self.embed(src), src_mask)  # (B, S, D)
        h = self.decoder(self.embed(tgt_in), memory, memory_mask=src_mask)  # (B, T, D)
        return self.head(h)  # (B, T, V)

    @torch.no_grad()
    def generate(self, src: Tensor, max_new_tokens: int | None = None) -> Tensor:
        """Greedy decoding with the KV cache: ``src (B, S)`` -> tokens ``(B, T)`` ending in eos
        (then padding)."""
        B, S = src.shape
        max_new_tokens = S + 1 if max_new_tokens is None else max_new_tokens
        src_mask = padding_mask(src, PAD_ID)  # (B, 1, 1, S)
        memory = self.encoder(self.embed(src), src_mask)  # (B, S, D)
        cache = self.decoder.init_cache(capacity=max_new_tokens)
        token = torch.full((B, 1), BOS_ID, device=src.device)  # (B, 1)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        out = []
        for _ in range(max_new_tokens):
            h = self.decoder(self.embed(token), memory, memory_mask=src_mask, cache=cache)  # (B, 1, D)
            token = self.head(h).argmax(-1)  # (B, 1)
            token = token.masked_fill(done[:, None], PAD_ID)
            out.append(token)
            done |= token[:, 0] == EOS_ID
            if bool(done.all()):
                break
        return torch.cat(out, dim=1)  # (B, T)

    def _shared_step(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        logits = self(batch["src"], batch["tgt_in"])  # (B, T, V)
        target = batch["tgt_out"]  # (B, T)
        loss = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD_ID)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{stage} loss is {loss.item()} at step {self.global_step}")
        acc = self.metrics[f"{stage}_token_acc"]
        acc(logits.argmax(-1), target)
        self.log(f"{stage}/loss", loss, prog_bar=stage != "test", batch_size=target.shape[0])
        self.log(f"{stage}/token_acc", acc, prog_bar=True, batch_size=target.shape[0])
        if stage != "train":
            pred = self.generate(batch["src"], max_new_tokens=target.shape[1])  # (B, <=T)
            pred = F.pad(pred, (0, target.shape[1] - pred.shape[1]), value=PAD_ID)  # (B, T)
            em = self.metrics[f"{stage}_exact_match"]
            em((pred == target).all(dim=1).float())
            self.log(f"{stage}/exact_match", em, prog_bar=True, batch_size=target.shape[0])
        return loss

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self.generate(batch["src"])

    def configure_optimizers(self):
        decay = [p for n, p in self.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.named_parameters() if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.hparams.lr,
            betas=(0.9, 0.98),
        )
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        warmup = min(self.hparams.warmup_steps, total)
        schedule = partial(warmup_cosine, warmup_steps=warmup, total_steps=total)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
