"""What a model takes from its data: a fresh model the data's tokenizer and direction, a trained one keeps its
own and refuses data that reads otherwise."""

from __future__ import annotations

import logging

import pytest

from lightning_tf.text.handover import adopt_direction, adopt_tokenizer
from lightning_tf.text.tokenizer import BPETokenizer
from tests.helpers.text import word_sentences


def test_a_fresh_model_takes_the_data_direction_and_a_trained_one_keeps_its_own() -> None:
    assert adopt_direction((None, None), ("de", "en")) == ("de", "en")
    assert adopt_direction((None, None), (None, None)) == (None, None)
    assert adopt_direction(("de", "en"), ("de", "en")) == ("de", "en")
    assert adopt_direction(("de", "en"), (None, None)) == ("de", "en"), "data that does not say keeps the model's"
    with pytest.raises(ValueError, match=r"the model translates de -> en, the data reads en -> de: set data\.src_lang"):
        adopt_direction(("de", "en"), ("en", "de"))


def test_a_fresh_model_takes_the_data_tokenizer_and_a_trained_one_refuses_another(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = word_sentences(40, 0)
    joint = BPETokenizer.train(text, text, 48)
    separate = BPETokenizer.train(text, word_sentences(40, 1), 48, joint=False)
    assert adopt_tokenizer(None, joint, share_embeddings=True) is joint
    same = BPETokenizer.from_dict(joint.to_dict())  # an equal tokenizer, another object: the model keeps its own
    assert adopt_tokenizer(joint, same, share_embeddings=True) is joint
    with caplog.at_level(logging.WARNING):
        assert adopt_tokenizer(None, separate, share_embeddings=False) is separate
        assert "ids collide" not in caplog.text
        assert adopt_tokenizer(None, separate, share_embeddings=True) is separate
    assert "share_embeddings=True with separate source/target vocabularies: ids collide" in caplog.text
    with pytest.raises(ValueError, match=r"encoded with another tokenizer than the model's .*dm\.use_tokenizer"):
        adopt_tokenizer(joint, separate, share_embeddings=True)
