"""Text seq2seq (machine translation): TranslationDataModule and Seq2SeqTransformer."""

from .data import TranslationDataModule
from .decoding import beam_search, block_repeated_ngrams, greedy_search, length_penalty
from .module import PRESETS, Seq2SeqTransformer
from .tokenizer import BPETokenizer
from .writer import TranslationWriter

__all__ = [
    "PRESETS",
    "BPETokenizer",
    "Seq2SeqTransformer",
    "TranslationDataModule",
    "TranslationWriter",
    "beam_search",
    "block_repeated_ngrams",
    "greedy_search",
    "length_penalty",
]
