"""Text seq2seq (machine translation): the Seq2SeqTransformer and everything only it needs.

* :mod:`.module`: :class:`Seq2SeqTransformer`, the encoder-decoder LightningModule (presets, loss,
  BLEU/chrF evaluation, :meth:`~Seq2SeqTransformer.translate`);
* :mod:`.embedding`: the scaled token embedding and the (tied) output projection;
* :mod:`.decoding`: greedy and beam search on the decoder's KV cache;
* :mod:`.tokenizer`: the tokenizer interface and the BPE tokenizer, kept in checkpoints as plain data;
* :mod:`.spm_tokenizer`: the SentencePiece tokenizer of Marian / OPUS-MT models;
* :mod:`.marian`: Marian / OPUS-MT models (transformers) into and out of :class:`Seq2SeqTransformer`;
* :mod:`.io`: readers of TSV and line-aligned parallel files;
* :mod:`.sampler`: length-bucketed batches under a token budget, resumable mid-epoch;
* :mod:`.data`: datasets, collate functions and the :class:`TranslationDataModule`;
* :mod:`.handover`: what the model takes from its data once (tokenizer, direction), checked against its own;
* :mod:`.synthetic`: the built-in generated corpora;
* :mod:`.scoring`: BLEU, chrF, chrF++, TER and the paired bootstrap comparison of two systems;
* :mod:`.writer`: :class:`TranslationWriter`, the prediction writer.
"""

from .data import (
    PredictDataset,
    TranslationDataModule,
    TranslationDataset,
    collate_predict,
    collate_translation,
)
from .decoding import beam_search, block_repeated_ngrams, greedy_search, length_penalty
from .embedding import OutputProjection, TokenEmbedding
from .io import ReadStats, read_aligned, read_lines, read_pairs, read_tsv
from .module import PRESETS, Seq2SeqTransformer
from .sampler import BatchListDataset, BucketBatchSampler, ResumableDataLoader, padding_fraction
from .scoring import SystemComparison, paired_bootstrap, report_scores
from .spm_tokenizer import SentencePieceTokenizer
from .tokenizer import BPETokenizer, TextTokenizer
from .tokenizer_kinds import load_tokenizer, tokenizer_from_dict
from .writer import TranslationWriter

__all__ = [
    "PRESETS",
    "BPETokenizer",
    "BatchListDataset",
    "BucketBatchSampler",
    "OutputProjection",
    "PredictDataset",
    "ReadStats",
    "ResumableDataLoader",
    "SentencePieceTokenizer",
    "SystemComparison",
    "Seq2SeqTransformer",
    "TextTokenizer",
    "TokenEmbedding",
    "TranslationDataModule",
    "TranslationDataset",
    "TranslationWriter",
    "beam_search",
    "block_repeated_ngrams",
    "collate_predict",
    "collate_translation",
    "greedy_search",
    "length_penalty",
    "load_tokenizer",
    "padding_fraction",
    "paired_bootstrap",
    "read_aligned",
    "read_lines",
    "read_pairs",
    "read_tsv",
    "report_scores",
    "tokenizer_from_dict",
]
