"""The ViT behind ``POST /predict``: an image file (base64 in JSON, or a multipart upload) -> its most probable
classes.

Each request is read and prepared by the model's own pipeline, :meth:`ViTClassifier.prepare
<lightning_tf.vision.ViTClassifier.prepare>` (the evaluation pipeline of training) in its two halves: a request's
image is read into the model's channels as it arrives (and resized then if it is large, to hold less); a batch
is those images resized and centre-cropped (those of one size at once,
:func:`~lightning_tf.vision.inputs.resize_images`), scaled and normalised at once
(:func:`~lightning_tf.vision.inputs.normalise_images`) and run once by :meth:`ViTClassifier.top_classes
<lightning_tf.vision.ViTClassifier.top_classes>`: the labels and probabilities :meth:`classify
<lightning_tf.vision.ViTClassifier.classify>` gives for the same file."""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from lightning_tf.vision.inputs import normalise_images, read_image, resize_images

from .api import Serving, TaskAPI
from .errors import BadRequest

__all__ = ["MAX_PIXELS", "VisionAPI", "VisionRequest", "VisionResponse", "decode_base64"]

#: the largest image a request may send (width x height); a larger one gets 413
MAX_PIXELS = 50_000_000


class VisionRequest(BaseModel):
    """An image file, base64-encoded (or sent as the ``image`` field of a multipart upload)."""

    model_config = ConfigDict(extra="forbid")
    image: str = Field(
        description="base64 of the image file's bytes (PNG, JPEG, ... any format PIL reads; a data: URL works too)",
        examples=["iVBORw0KGgo..."],
    )
    top_k: int | None = Field(None, ge=1, description="classes to return (default: the server's --top_k)")


class Prediction(BaseModel):
    label: str = Field(examples=["5"])
    probability: float = Field(examples=[0.71])


class VisionResponse(BaseModel):
    """The most probable classes, most probable first (probabilities: the softmax over all classes)."""

    predictions: list[Prediction]


def decode_base64(text: str) -> bytes:
    """The bytes of base64 ``text`` (whitespace and a ``data:...;base64,`` prefix allowed)."""
    if text.startswith("data:") and "," in text:
        text = text.split(",", 1)[1]
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError) as err:
        raise BadRequest(f"image: not base64 ({err})") from None


class VisionAPI(TaskAPI):
    """A :class:`~lightning_tf.vision.ViTClassifier` checkpoint behind ``POST /predict``.

    Args:
        checkpoint: the checkpoint to serve.
        serving: batching, key, threads, workers, compilation.
        top_k: classes per answer when a request does not say (at most the model's number of classes).
    """

    task = "vision"
    model_class = "ViTClassifier"
    # a worker runs at once what is queued when it is free: a lone request or a few answer sooner than after a wait
    # for company, and under many clients the requests that come while a batch runs make the next one
    # (docs/serve.md); a larger model's longer batches gather more of them
    default_batch_timeout = 0.0
    request_model = VisionRequest
    response_model = VisionResponse

    def __init__(self, checkpoint: str, serving: Serving, top_k: int = 5) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        super().__init__(checkpoint, serving)
        self.top_k = top_k

    def check_model(self) -> None:
        if self.model.mean is None or self.model.std is None or not self.model.class_names:
            raise ValueError(
                f"{self.checkpoint}: the model has no class names or normalisation "
                "(it was not trained with an ImageDataModule)"
            )

    def compile_model(self) -> None:
        net = self.model.net
        net.forward = torch.compile(net.forward)

    def warmup(self) -> None:
        net = self.model.net
        for n in sorted({1, self.max_batch_size}):
            self.model.top_classes(torch.zeros(n, net.in_chans, net.image_size, net.image_size), 1)

    def parse(self, body: dict[str, Any]) -> tuple[Tensor, int]:
        if isinstance(body.get("image"), bytes):  # a multipart upload: the file's bytes and text fields
            unknown = sorted(set(body) - {"image", "top_k"})
            if unknown:
                raise BadRequest(f"{unknown[0]}: unknown field; the fields are image and top_k")
            raw, top_k = body["image"], _form_int(body.get("top_k"), "top_k")
        else:
            request = self.validate(body)
            raw, top_k = decode_base64(request.image), request.top_k
        if not raw:
            raise BadRequest("image: empty")
        try:
            with Image.open(io.BytesIO(raw)) as img:
                width, height = img.size
                if width * height > MAX_PIXELS:
                    raise BadRequest(f"image: {width}x{height} pixels, more than {MAX_PIXELS:,}", status=413)
                img.load()
                net = self.model.net
                x = read_image(img, net.in_chans)  # (C, H, W) uint8
            if x.shape[-2] * x.shape[-1] > 4 * net.image_size**2:  # a large image is resized now, to hold less
                x = resize_images([x], net.image_size, net.in_chans)[0]  # (C, S, S)
        except BadRequest:
            raise
        except Image.DecompressionBombError as err:  # PIL's own limit, checked as the file opens
            raise BadRequest(f"image: more than {MAX_PIXELS:,} pixels ({err})", status=413) from None
        except UnidentifiedImageError:
            raise BadRequest("image: not an image file (PNG, JPEG, ... any format PIL reads)") from None
        except (OSError, SyntaxError, ValueError) as err:
            raise BadRequest(f"image: the file does not decode ({type(err).__name__}: {err})") from None
        return x, self.top_k if top_k is None else top_k

    def run(self, inputs: list[tuple[Tensor, int]]) -> Sequence[list[tuple[str, float]]]:
        net = self.model.net
        images = resize_images([image for image, _ in inputs], net.image_size, net.in_chans)  # B x (C, S, S)
        x = normalise_images(images, self.model.mean, self.model.std)  # (B, C, S, S)
        return self.model.top_classes(x, [k for _, k in inputs])

    def encode(self, output: list[tuple[str, float]]) -> dict[str, Any]:
        return {"predictions": [{"label": label, "probability": p} for label, p in output]}

    def describe(self) -> dict[str, Any]:
        net = self.model.net
        return {
            "size": {
                "patch_size": net.patch_size,
                "d_model": net.head.in_features,
                "n_layers": len(net.encoder.layers),
                "tokens": net.n_prefix + net.grid[0] * net.grid[1],
            },
            "class_names": list(self.model.class_names),
            "image_size": net.image_size,
            "in_chans": net.in_chans,
            "mean": list(self.model.mean),
            "std": list(self.model.std),
            "top_k": self.top_k,
            "request": {"image": "<base64 of the image file>", "top_k": self.top_k},
            "response": {"predictions": [{"label": "<class name>", "probability": "<softmax probability>"}]},
        }


def _form_int(value: Any, name: str) -> int | None:
    """A form field that must hold a positive integer (None when absent)."""
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        raise BadRequest(f"{name}: not an integer: {str(value)[:40]!r}") from None
    if number < 1:
        raise BadRequest(f"{name}: must be at least 1, got {number}")
    return number
