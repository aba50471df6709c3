"""TextAPI without a server: a batch of requests gives each sentence the translation ``translate([text])`` gives
it alone, and every bad request gets its 4xx and one line."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("litserve")

from lightning_tf.serve.api import Serving
from lightning_tf.serve.text import TextAPI
from tests.helpers.serve import tiny_text

SENTENCES = ["the man sees a dog.", "a cat.", "the small red house eats the big apple today.", "dog."]


@pytest.fixture(scope="module")
def api() -> TextAPI:
    a = TextAPI("unused.ckpt", Serving(max_batch_size=8), beam_size=3)
    a.model = tiny_text(max_len=24)
    return a


def tokens(api: TextAPI, text: str) -> int:
    """Source tokens of ``text``, EOS included, as the model's tokenizer counts them."""
    return len(api.model.tokenizer.encode([text], side="src")[0]) + 1


def served(api: TextAPI, bodies: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    outputs = api.unbatch(api.predict(api.batch([api.decode_request(b) for b in bodies])))
    return [(r.status_code, json.loads(r.body)) for r in map(api.encode_response, outputs)]


def test_a_batch_translates_each_sentence_as_translate_does_alone(api: TextAPI) -> None:
    alone = [api.model.translate([s], beam_size=3)[0] for s in SENTENCES]
    assert len(set(alone)) > 1  # distinct outputs: a mix-up between rows would show
    assert served(api, [{"text": s} for s in SENTENCES]) == [(200, {"translation": t}) for t in alone]
    # mixed with bad requests, and in another order
    results = served(api, [{"text": SENTENCES[2]}, {"text": ""}, {"text": SENTENCES[0]}])
    assert results[0] == (200, {"translation": alone[2]}) and results[2] == (200, {"translation": alone[0]})


def test_the_server_beam_size_is_used(api: TextAPI) -> None:
    greedy = TextAPI("unused.ckpt", Serving(max_batch_size=8), beam_size=1)
    greedy.model = api.model
    expected = [api.model.translate([s], beam_size=1)[0] for s in SENTENCES]
    assert served(greedy, [{"text": s} for s in SENTENCES]) == [(200, {"translation": t}) for t in expected]


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({}, 422, "text: field required"),
        ({"text": 5}, 422, "text: input should be a valid string"),
        ({"text": None}, 422, "text: input should be a valid string"),
        ({"text": ["a"]}, 422, "text: input should be a valid string"),
        ({"text": ""}, 422, "text is empty"),
        ({"text": " \n\t "}, 422, "text is empty"),
        ({"text": "a cat.", "beam": 2}, 422, "beam: unknown field"),
        (
            json.loads('{"text": "a cat \\ud800"}'),
            422,
            "text holds '\\ud800' at character 6, half of a UTF-16 surrogate pair; send the whole character",
        ),
        (
            {"text": "dog " * 30},
            422,
            "text has {n} tokens (EOS included), more than max_len (24) of the sinusoidal positional encoding",
        ),
        ("a cat.", 400, "the body must be a JSON object, got str"),
        ([{"text": "a cat."}], 400, "the body must be a JSON object, got list"),
    ],
)
def test_bad_requests(api: TextAPI, body: Any, status: int, error: str) -> None:
    if "{n}" in error:
        error = error.format(n=tokens(api, body["text"]))
    assert served(api, [body, {"text": "a cat."}]) == [
        (status, {"error": error}),
        (200, {"translation": api.model.translate(["a cat."], beam_size=3)[0]}),
    ]


def test_a_text_within_max_len_tokens_but_over_it_for_a_relative_encoding_is_refused() -> None:
    a = TextAPI("unused.ckpt", Serving())
    a.model = tiny_text(max_len=24)
    a.model.hparams.pos_encoding = "rope"  # no positional limit: the server's own bound applies
    assert a.parse({"text": "dog " * 10}) == "dog " * 10
    n = tokens(a, "dog " * 30)
    assert n > 24
    out = a.decode_request({"text": "dog " * 30})
    assert (out.status, out.error) == (422, f"text has {n} tokens (EOS included), more than max_len (24) of this model")


def test_the_batch_timeout_is_the_task_default_unless_given() -> None:
    assert TextAPI("unused.ckpt", Serving()).batch_timeout == 0.05
    assert TextAPI("unused.ckpt", Serving(batch_timeout=0.001)).batch_timeout == 0.001


def test_info(api: TextAPI) -> None:
    info = api.describe()
    assert info["languages"] == {"source": "en", "target": "de"}
    assert (info["max_len"], info["beam_size"], info["vocab_size"]) == (24, 3, 64)
    assert info["size"]["d_model"] == 32
