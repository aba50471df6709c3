"""Text seq2seq (machine translation): TranslationDataModule and Seq2SeqTransformer."""

__all__: list[str] = []
