"""What a :class:`~lightning_tf.text.Seq2SeqTransformer` takes from its data, once (in ``setup``): the tokenizer
and the direction, each the data's for a fresh model, else the model's own, which the data's must equal."""

from __future__ import annotations

import logging

from .tokenizer import TextTokenizer

__all__ = ["adopt_direction", "adopt_tokenizer"]

log = logging.getLogger(__name__)

Direction = tuple[str | None, str | None]


def adopt_direction(ours: Direction, data: Direction) -> Direction:
    """The direction ``(src_lang, tgt_lang)`` a model keeps: the data's when the model has none, else its own.

    Args:
        ours: the model's direction (``(None, None)``: a fresh model, or one started from a pretrained model).
        data: the DataModule's direction (a None: the data does not say).

    Raises:
        ValueError: when both say and differ.
    """
    if ours[0] is None:
        return data
    if None not in data and data != ours:
        raise ValueError(
            f"the model translates {ours[0]} -> {ours[1]}, the data reads {data[0]} -> {data[1]}: set data.src_lang "
            "and data.tgt_lang to the model's"
        )
    return ours


def adopt_tokenizer(ours: TextTokenizer | None, data: TextTokenizer, share_embeddings: bool) -> TextTokenizer:
    """The tokenizer a model keeps: the data's when the model has none (a fresh model learns the data's ids),
    else its own, which the data's must equal (its weights read its ids).

    Args:
        ours: the model's tokenizer (None: a fresh model).
        data: the DataModule's tokenizer.
        share_embeddings: whether the model has one embedding table for both sides (a warning when the data's
            vocabularies are separate).

    Raises:
        ValueError: when the model has a tokenizer and the data is encoded with another.
    """
    if ours is None:
        if share_embeddings and not data.joint:
            log.warning("share_embeddings=True with separate source/target vocabularies: ids collide in one table")
        return data
    if ours != data:
        raise ValueError(
            "the data is encoded with another tokenizer than the model's (its weights read the model's ids): "
            "give the DataModule the model's tokenizer, with dm.use_tokenizer(model.tokenizer) before calling "
            "the Trainer, or with the DataModule's tokenizer_dir argument naming the tokenizer folder of the "
            "model's training run"
        )
    return ours
