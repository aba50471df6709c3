"""The translation model behind ``POST /predict``: ``{"text": "..."}`` -> ``{"translation": "..."}``.

A batch of requests is one call of :meth:`Seq2SeqTransformer.translate
<lightning_tf.text.Seq2SeqTransformer.translate>` on their sentences: right-padded with PAD and decoded
under the source mask, so a sentence's translation is the one ``translate([text])`` gives, whichever
sentences share its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .api import Serving, TaskAPI
from .errors import BadRequest

__all__ = ["TextAPI", "TextRequest", "TextResponse"]


class TextRequest(BaseModel):
    """A sentence to translate."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(
        description="the source sentence (not empty; at most the model's max_len tokens)",
        examples=["The dog does not find the green cup."],
    )


class TextResponse(BaseModel):
    """Its translation."""

    translation: str = Field(examples=["Der Hund findet die grüne Tasse nicht."])


class TextAPI(TaskAPI):
    """A :class:`~lightning_tf.text.Seq2SeqTransformer` checkpoint behind ``POST /predict``.

    Args:
        checkpoint: the checkpoint to serve.
        serving: batching, key, threads, workers.
        beam_size: beam width of every translation (None: the model's ``beam_size``; 1: greedy).
    """

    task = "text"
    model_class = "Seq2SeqTransformer"
    # decoding a batch takes far longer than a short wait for the batch to fill, and is where batching saves: a
    # batch that waits 50 ms for company is fuller (docs/serve.md)
    default_batch_timeout = 0.05
    request_model = TextRequest
    response_model = TextResponse

    def __init__(self, checkpoint: str, serving: Serving, beam_size: int | None = None) -> None:
        if beam_size is not None and beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {beam_size}")
        if serving.compile:
            raise ValueError(
                "--compile is for vision and kline checkpoints: translation decodes token by token on a "
                "KV cache that grows every step, which torch.compile would recompile at each step"
            )
        super().__init__(checkpoint, serving)
        self.beam_size = beam_size

    def check_model(self) -> None:
        if self.model.tokenizer is None:
            raise ValueError(f"{self.checkpoint}: the model has no tokenizer, so it cannot read text")

    def warmup(self) -> None:
        self.run(["warm up"])

    def parse(self, body: dict[str, Any]) -> str:
        text = self.validate(body).text
        if not text.strip():
            raise BadRequest("text is empty")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:  # a lone surrogate, sent as a JSON escape (\ud800)
            raise BadRequest(
                f"text holds {text[err.start]!r} at character {err.start}, half of a UTF-16 surrogate pair; "
                "send the whole character"
            ) from None
        # the model's own tokenisation and its positional limit; beyond max_len tokens a request is refused
        # (not cut) whatever the encoding, so that no request can hold a worker for an unbounded time
        limit = self.model.hparams.max_len
        try:
            n = int((self.model.encode_texts([text]) != self.model.hparams.pad_id).sum())
        except ValueError as err:
            raise BadRequest(str(err).replace("sentence 0 has", "text has", 1)) from None
        if n > limit:
            raise BadRequest(f"text has {n} tokens (EOS included), more than max_len ({limit}) of this model")
        return text

    def run(self, inputs: list[str]) -> Sequence[str]:
        return self.model.translate(inputs, beam_size=self.beam_size, batch_size=len(inputs))

    def encode(self, output: str) -> dict[str, Any]:
        return {"translation": output}

    def describe(self) -> dict[str, Any]:
        hp = self.model.hparams
        return {
            "size": dict(self.model.size),
            "languages": {"source": self.model.src_lang, "target": self.model.tgt_lang},
            "max_len": hp.max_len,
            "beam_size": hp.beam_size if self.beam_size is None else self.beam_size,
            "vocab_size": hp.vocab_size,
            "request": {"text": "a sentence"},
            "response": {"translation": "its translation"},
        }
