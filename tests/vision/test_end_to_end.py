"""After training: a tiny ViT trained through the real CLI on an image folder predicts from its checkpoint
alone, in Python (``classify``) and through ``lightning-tf predict`` with the run's saved config, after the
training folder was moved away and from a working directory without any of the run's files."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from lightning_tf.vision import ViTClassifier
from tests.helpers.cli import cli, run_dir_args
from tests.helpers.vision import make_image_folder, write_image


@pytest.mark.integration
def test_train_move_the_folder_away_then_classify_and_predict(tmp_path: Path) -> None:
    folder = make_image_folder(tmp_path / "pets", {"cat": 6, "dog": 6}, size=(12, 10))
    runs = tmp_path / "runs"
    cli(
        "fit",
        "--config",
        "configs/trainer/default.yaml",
        "--config",
        "configs/vision/digits.yaml",
        "--data.dataset",
        "image_folder",
        "--data.root",
        str(folder),
        "--data.image_size",
        "8",
        "--data.batch_size",
        "4",
        "--model.d_model",
        "16",
        "--model.n_heads",
        "2",
        "--model.n_layers",
        "1",
        "--model.d_ff",
        "32",
        "--trainer.max_steps",
        "3",
        "--trainer.limit_val_batches",
        "1",
        *run_dir_args(runs),
    )
    (config,) = runs.glob("lightning-tf/*/config.yaml")
    ckpt = config.parent / "checkpoints" / "last.ckpt"
    shutil.move(folder, tmp_path / "archived")

    # everything inference needs is in the checkpoint, as plain data
    saved = torch.load(ckpt, weights_only=True)
    imagenet = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    assert saved["class_names"] == ["cat", "dog"] and saved["input_shape"] == [3, 8, 8]
    assert saved["normalization"] == imagenet
    assert saved["ImageDataModule"] == {"class_names": ["cat", "dog"], "image_size": 8, "in_chans": 3, **imagenet}

    # new images of other sizes and colour modes
    new = tmp_path / "new"
    files = [
        write_image(new / "a_grey.png", 3, size=(30, 17), mode="L"),
        write_image(new / "b_wide.jpg", 5, size=(40, 9)),
    ]
    model = ViTClassifier.load_from_checkpoint(ckpt)
    classes = model.classify(files, top_k=2)
    assert [sorted(name for name, _ in row) for row in classes] == [["cat", "dog"]] * 2
    assert all(sum(p for _, p in row) == pytest.approx(1.0) for row in classes)

    empty = tmp_path / "empty"
    empty.mkdir()
    proc = cli("predict", "--config", str(config), "--ckpt_path", str(ckpt), "--data.predict_path", str(new), cwd=empty)
    written = re.search(r"wrote 2 predictions to (\S+)", proc.stdout)
    assert written, proc.stdout[-2000:]
    path = Path(written[1])
    assert path.is_file() and path.parent.parent == config.parent.parent  # its own run folder beside the training one
    df = pd.read_csv(path)
    assert [Path(f).name for f in df["file"]] == ["a_grey.png", "b_wide.jpg"]
    assert df["top1_class"].tolist() == [row[0][0] for row in classes]
    assert df["top1_prob"].tolist() == pytest.approx([row[0][1] for row in classes], abs=1e-5)
    assert list(empty.iterdir()) == []  # nothing written where predict ran

    # a folder without images: one line naming it, exit status 2
    proc = cli(
        "predict",
        "--config",
        str(config),
        "--ckpt_path",
        str(ckpt),
        "--data.predict_path",
        str(empty),
        cwd=empty,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"lightning-tf: error: {empty}: no image files (looked for")
