"""Where a published model's files come from: folders, hub names, the offline cache, and the one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightning_tf.kline.published.hub import read_config, read_weights, resolve_folder


def test_a_folder_is_itself_and_a_missing_path_is_not_a_hub_name(tmp_path: Path) -> None:
    assert resolve_folder(tmp_path, "model") == tmp_path
    for source in (tmp_path / "missing", "./relative/path/x", "plain-name"):
        with pytest.raises(FileNotFoundError, match=r"model '.*': no such folder \(nor a hub name owner/name\)"):
            resolve_folder(source, "model")
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"no such folder"):
        resolve_folder(tmp_path / "file.json", "model")


def test_offline_a_hub_name_outside_the_cache_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ValueError,
        match=r"model 'owner/name': HF_HUB_OFFLINE=1 and it is not in the Hugging Face cache; fetch it once where there is a network \(huggingface-cli download owner/name\) or pass a folder",
    ) as info:
        resolve_folder("owner/name", "model", cache_dir=tmp_path)
    assert "\n" not in str(info.value)


def test_weights_are_read_from_safetensors_first_then_a_torch_file(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    torch.save({"w": torch.ones(2)}, tmp_path / "pytorch_model.bin")
    assert torch.equal(read_weights(tmp_path, "model")["w"], torch.ones(2))
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    assert torch.equal(read_weights(tmp_path, "model")["w"], torch.zeros(2))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"config.json is not a JSON object"):
        read_config(tmp_path, "model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"model folder .*empty has no config.json"):
        read_config(tmp_path / "empty", "model")
    with pytest.raises(
        FileNotFoundError, match=r"model folder .*empty has none of \['model.safetensors', 'pytorch_model.bin'\]"
    ):
        read_weights(tmp_path / "empty", "model")
