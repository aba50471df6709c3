"""Images as a trained model sees them: every kind of input gives the DataModule's prediction pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from lightning_tf.vision.data import ImageDataModule
from lightning_tf.vision.inputs import (
    as_image_list,
    normalise_images,
    prepare_images,
    read_image,
    resize_images,
    tensor_image,
)
from tests.helpers.vision import make_image_folder, write_image

MEAN, STD = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]


def test_path_pil_and_tensor_layouts_give_the_same_batch(tmp_path: Path) -> None:
    path = write_image(tmp_path / "x.png", 7, size=(13, 9))
    pil = Image.open(path)
    hwc = torch.from_numpy(np.array(pil))  # (9, 13, 3) uint8, as PIL gives it
    chw = hwc.permute(2, 0, 1)  # (3, 9, 13)
    batch = prepare_images([path, str(path), pil, hwc, chw, chw.float() / 255], 8, 3, MEAN, STD)  # (6, 3, 8, 8)
    assert batch.shape == (6, 3, 8, 8) and batch.dtype == torch.float32
    for i in range(1, 5):
        assert torch.equal(batch[i], batch[0])
    torch.testing.assert_close(batch[5], batch[0], atol=0.05, rtol=0)  # float: resized without uint8 rounding


def test_the_datamodule_prepares_files_identically(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "data", {"a": 2, "b": 2})
    path = write_image(tmp_path / "new.png", 3, size=(30, 11), mode="L")
    dm = ImageDataModule("image_folder", root=str(tmp_path / "data"), image_size=8, mean=MEAN, std=STD)
    assert torch.equal(prepare_images([path], 8, 3, MEAN, STD)[0], dm.load_image(path))


def test_a_batch_is_prepared_to_the_values_of_the_whole_pipeline_image_by_image(tmp_path: Path) -> None:
    """The pipeline is split (geometry, then scaling per batch, as the server runs it) and images of one size
    are resized at once: each image of the batch equals the evaluation pipeline of training applied to that
    image alone, bit for bit."""
    from torchvision import tv_tensors

    from lightning_tf.vision.transforms import build_transform

    sizes, modes = [(9, 17), (12, 16), (9, 17), (9, 17), (15, 15)], ["L", "RGB", "RGB", "L", "L"]
    files = [write_image(tmp_path / f"{i}.png", i, size=sizes[i], mode=modes[i]) for i in range(5)]  # 3 of 9x17
    whole = build_transform(train=False, image_size=8, mean=MEAN, std=STD, source="file")
    expected = [whole(tv_tensors.Image(read_image(f, 3))).as_subclass(torch.Tensor) for f in files]
    resized = resize_images(files, 8, 3)
    assert all(x.dtype == torch.uint8 and x.shape == (3, 8, 8) for x in resized)
    batch = normalise_images(resized, MEAN, STD)  # (5, 3, 8, 8), one dtype: scaled at once
    mixed = normalise_images([resized[0], resized[1].float() / 255, *resized[2:]], MEAN, STD)  # one by one
    for i, want in enumerate(expected):
        assert torch.equal(batch[i], want)
        assert torch.equal(prepare_images([files[i]], 8, 3, MEAN, STD)[0], want)
    torch.testing.assert_close(mixed, batch, atol=1e-6, rtol=0)
    assert torch.equal(mixed[0], batch[0]) and torch.equal(mixed[2:], batch[2:])
    assert all(torch.equal(x, y) for x, y in zip(resize_images(resized, 8, 3), resized, strict=True))  # idempotent
    with pytest.raises(ValueError, match="no images"):
        normalise_images([], MEAN, STD)


def test_channel_conversions_follow_pil(tmp_path: Path) -> None:
    """Grey to RGB repeats the channel, RGB to grey is PIL's luma (bit-exact on uint8), alpha is dropped."""
    rgba = write_image(tmp_path / "c.png", 5, mode="RGBA")
    pil = Image.open(rgba)
    as_tensor = torch.from_numpy(np.array(pil))  # (10, 12, 4)
    grey = torch.from_numpy(np.array(pil.convert("L")))[None]  # (1, 10, 12)
    assert torch.equal(tensor_image(as_tensor, 1), grey)
    assert torch.equal(read_image(pil, 1), grey) and torch.equal(read_image(rgba, 1), grey)
    assert torch.equal(tensor_image(as_tensor, 3), as_tensor[..., :3].permute(2, 0, 1))
    assert torch.equal(tensor_image(grey[0], 3), grey.expand(3, -1, -1))  # (H, W) grey -> RGB
    floats = tensor_image(as_tensor[..., :3].permute(2, 0, 1).double() / 255, 1)  # float luma
    torch.testing.assert_close(floats, grey.double() / 255, atol=1 / 255, rtol=0)


def test_image_lists() -> None:
    batch = torch.zeros(3, 1, 5, 5)
    assert len(as_image_list(batch)) == 3 and len(as_image_list(batch[0])) == 1
    assert as_image_list("a.png") == ["a.png"] and as_image_list(["a.png", "b.png"]) == ["a.png", "b.png"]


def test_bad_inputs_are_named(tmp_path: Path) -> None:
    shapes = r"must be \(H, W\), \(C, H, W\) or \(H, W, C\) with 1 to 4 channels; got shape \(5, 6, 7\)"
    with pytest.raises(ValueError, match=shapes):
        tensor_image(torch.zeros(5, 6, 7), 3)
    with pytest.raises(ValueError, match=r"float image tensor must hold values in \[0, 1\], got 0\.\.255; pass uint8"):
        tensor_image(torch.full((3, 4, 4), 255.0).index_fill_(1, torch.tensor([0]), 0.0), 3)
    nan = torch.rand(3, 8, 8)
    nan[0, 2, 3] = float("nan")  # a NaN compares as neither below 0 nor above 1: refused, not classified as NaN
    with pytest.raises(ValueError, match=r"float image tensor must hold values in \[0, 1\], got 1 NaN or inf"):
        tensor_image(nan, 3)
    with pytest.raises(ValueError, match=r"an image tensor must hold pixels, got shape \(3, 0, 0\)"):
        tensor_image(torch.rand(3, 0, 0), 3)
    with pytest.raises(ValueError, match=r"integer image tensor must hold values 0\.\.255, got 0\.\.300"):
        tensor_image(torch.tensor([[0, 300]]), 1)
    with pytest.raises(TypeError, match="a path, a PIL image or a tensor; got int"):
        read_image(3, 1)  # type: ignore[arg-type]
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    with pytest.raises(ValueError, match=r"bad.png: cannot read the image"):
        prepare_images([bad], 8, 3, MEAN, STD)
