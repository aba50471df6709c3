"""VisionAPI without a server: an image sent as base64 or as a multipart upload gets the labels and probabilities
``classify`` gives for the same file, alone or in a batch, and every bad request gets its 4xx and one line."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("litserve")

from PIL import Image
from starlette.datastructures import FormData, Headers, UploadFile

import lightning_tf.serve.vision as served_vision
from lightning_tf.serve.api import Serving
from lightning_tf.serve.vision import VisionAPI
from tests.helpers.serve import b64, png_bomb, png_bytes, tiny_vit


@pytest.fixture(scope="module")
def api() -> VisionAPI:
    a = VisionAPI("unused.ckpt", Serving(max_batch_size=8), top_k=2)
    a.model = tiny_vit()
    return a


def served(api: VisionAPI, bodies: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    outputs = api.unbatch(api.predict(api.batch([api.decode_request(b) for b in bodies])))
    return [(r.status_code, json.loads(r.body)) for r in map(api.encode_response, outputs)]


def predictions(pairs: list[tuple[str, float]]) -> dict[str, Any]:
    return {"predictions": [{"label": label, "probability": p} for label, p in pairs]}


def close(result: dict[str, Any], expected: dict[str, Any]) -> bool:
    got, want = result["predictions"], expected["predictions"]
    return [g["label"] for g in got] == [w["label"] for w in want] and all(
        abs(g["probability"] - w["probability"]) <= 1e-6 for g, w in zip(got, want, strict=True)
    )


def test_base64_and_uploads_get_what_classify_gives_for_the_file(api: VisionAPI, tmp_path: Path) -> None:
    files = []
    for seed, mode, size in [(0, "RGB", (20, 24)), (1, "L", (16, 16)), (2, "RGB", (40, 13))]:
        path = tmp_path / f"{seed}.png"
        path.write_bytes(png_bytes(seed, size, mode))
        files.append(path)
    offline = [api.model.classify([f], top_k=k)[0] for f, k in zip(files, (2, 3, 1), strict=True)]
    assert len({o[0][0] for o in offline}) > 1 or len({o[0][1] for o in offline}) == 3  # distinct answers
    upload = FormData([("image", UploadFile(io.BytesIO(files[1].read_bytes()), headers=Headers({}))), ("top_k", "3")])
    bodies = [
        {"image": b64(files[0].read_bytes())},
        upload,
        {"image": "data:image/png;base64," + b64(files[2].read_bytes()), "top_k": 1},
    ]
    results = served(api, bodies)
    assert [status for status, _ in results] == [200, 200, 200]
    for (_, result), expected in zip(results, offline, strict=True):
        assert close(result, predictions(expected)), (result, expected)
    # alone (a batch of one) the same again
    alone = served(api, [{"image": b64(files[0].read_bytes())}])
    assert alone[0][0] == 200 and close(alone[0][1], predictions(offline[0]))


def test_a_batch_runs_on_the_tensor_prepare_gives_for_its_files(
    api: VisionAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read as requests arrive, a large image resized then, the rest resized per size and scaled as one batch:
    the model gets, bit for bit, what ``prepare`` makes of the same files (three of one size, two others, one
    over four times the model's pixels)."""
    side = api.model.net.image_size
    specs = [
        (5, "RGB", (20, 24)),
        (6, "L", (20, 24)),
        (7, "RGB", (20, 24)),
        (8, "L", (31, 9)),
        (9, "RGB", (5 * side, 3 * side)),
    ]
    files = []
    for seed, mode, size in specs:
        path = tmp_path / f"{seed}.png"
        path.write_bytes(png_bytes(seed, size, mode))
        files.append(path)
    seen: list[Any] = []
    top_classes = api.model.top_classes

    def spy(x: Any, k: Any) -> Any:
        seen.append(x.clone())
        return top_classes(x, k)

    monkeypatch.setattr(api.model, "top_classes", spy)
    results = served(api, [{"image": b64(f.read_bytes())} for f in files])
    assert [status for status, _ in results] == [200] * len(files)
    (x,) = seen
    assert torch.equal(x, api.model.prepare(files))


def test_top_k_beyond_the_classes_gives_them_all(api: VisionAPI) -> None:
    ((status, result),) = served(api, [{"image": b64(png_bytes(3)), "top_k": 10}])
    assert status == 200
    assert sorted(p["label"] for p in result["predictions"]) == ["bird", "cat", "dog"]
    assert abs(sum(p["probability"] for p in result["predictions"]) - 1) < 1e-6


PNG = png_bytes(4)


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({}, 422, "image: field required"),
        ({"image": 5}, 422, "image: input should be a valid string"),
        ({"image": b64(PNG), "top_k": 0}, 422, "top_k: input should be greater than or equal to 1"),
        ({"image": b64(PNG), "top_k": "3"}, 422, "top_k: input should be a valid integer"),
        ({"image": b64(PNG), "top_k": True}, 422, "top_k: input should be a valid integer"),
        ({"image": b64(PNG), "topk": 3}, 422, "topk: unknown field"),
        ({"image": "not base64!"}, 422, "image: not base64 (Only base64 data is allowed)"),
        ({"image": ""}, 422, "image: empty"),
        ({"image": b64(png_bomb(8000, 8000))}, 413, "image: 8000x8000 pixels, more than 50,000,000"),
        (
            {"image": b64(png_bomb(30000, 30000))},
            413,
            "image: more than 50,000,000 pixels (Image size (900000000 pixels)",
        ),
        ({"image": b64(b"hello, this is text")}, 422, "image: not an image file (PNG, JPEG, ... any format PIL reads)"),
        (
            {"image": b64(PNG[: len(PNG) // 2])},
            422,
            "image: the file does not decode (OSError: image file is truncated",
        ),
        (FormData([("top_k", "2")]), 422, "image: field required"),
        (
            FormData([("image", UploadFile(io.BytesIO(PNG), headers=Headers({}))), ("top_k", "two")]),
            422,
            "top_k: not an integer: 'two'",
        ),
        (
            FormData([("image", UploadFile(io.BytesIO(PNG), headers=Headers({}))), ("size", "2")]),
            422,
            "size: unknown field; the fields are image and top_k",
        ),
        (["x"], 400, "the body must be a JSON object, got list"),
    ],
)
def test_bad_requests(api: VisionAPI, body: Any, status: int, error: str) -> None:
    results = served(api, [body, {"image": b64(PNG)}])
    assert results[0][0] == status
    assert results[0][1]["error"].startswith(error), results[0][1]["error"]
    assert results[1][0] == 200
    assert close(results[1][1], predictions(api.model.classify([Image.open(io.BytesIO(PNG))], top_k=2)[0]))


def test_an_image_of_too_many_pixels_is_413(api: VisionAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served_vision, "MAX_PIXELS", 20 * 24 - 1)
    ((status, body),) = served(api, [{"image": b64(png_bytes(5, (20, 24)))}])
    assert (status, body) == (413, {"error": "image: 20x24 pixels, more than 479"})


def test_info(api: VisionAPI) -> None:
    info = api.describe()
    assert info["class_names"] == ["cat", "dog", "bird"]
    assert (info["image_size"], info["in_chans"], info["top_k"]) == (16, 3, 2)
    assert info["size"] == {"patch_size": 4, "d_model": 32, "n_layers": 2, "tokens": 17}
