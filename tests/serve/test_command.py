"""``lightning-tf serve``'s errors before a server starts: one line, exit status 2, for a missing or broken
checkpoint, an option of another task, out-of-range values; ``--help`` answers without LitServe or torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("litserve")

from lightning_tf.__main__ import COMMANDS, main
from tests.helpers.serve import save_checkpoint, tiny_kline, tiny_text, tiny_vit


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckpt")
    return {
        name: save_checkpoint(build(), root / f"{name}.ckpt")
        for name, build in (("text", tiny_text), ("vision", tiny_vit), ("kline", tiny_kline))
    }


def error_of(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_serve_is_a_command() -> None:
    assert "serve" in COMMANDS


def test_errors_before_any_loading(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "none.ckpt"
    assert error_of([str(missing)], capsys) == f"lightning-tf: error: checkpoint not found: {missing}"
    ckpt = str(tmp_path / "x.ckpt")
    Path(ckpt).write_bytes(b"")
    cases = {
        ("--port", "80"): "--port must be 1024-65535, got 80",
        ("--max_batch_size", "0"): "--max_batch_size must be at least 1, got 0",
        ("--workers_per_device", "0"): "--workers_per_device must be at least 1, got 0",
        ("--batch_timeout", "-1"): "--batch_timeout must be 0 or more, got -1.0",
        ("--timeout", "0"): "--timeout must be positive, or -1, got 0.0",
        ("--devices", "x"): "--devices must be 'auto' or a number, got 'x'",
        ("--top_k", "0"): "--top_k must be at least 1, got 0",
        ("--max_payload_mb", "0"): "--max_payload_mb must be positive, got 0.0",
    }
    for args, message in cases.items():
        assert error_of([ckpt, *args], capsys) == f"lightning-tf: error: {message}"


def test_a_port_in_use_is_one_line_before_anything_loads(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import socket

    ckpt = tmp_path / "x.ckpt"
    ckpt.write_bytes(b"")  # never read: the port is refused first
    with socket.socket() as other:  # another server on 127.0.0.1
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        message = error_of([str(ckpt), "--host", "127.0.0.1", "--port", str(port)], capsys)
    assert message == (
        f"lightning-tf: error: --port: cannot listen on 127.0.0.1:{port} (Address already in use); choose another port"
    )
    message = error_of([str(ckpt), "--host", "999.1.1.1", "--port", str(port)], capsys)  # the host is wrong
    assert message.startswith("lightning-tf: error: --host: cannot listen on 999.1.1.1:") and message.endswith(
        "check it"
    )


def test_a_file_that_is_no_checkpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "broken.ckpt"
    bad.write_bytes(b"not a checkpoint at all")
    assert error_of([str(bad)], capsys).startswith(f"lightning-tf: error: {bad}: ")


def test_options_of_another_task(capsys: pytest.CaptureFixture[str], checkpoints: dict[str, Path]) -> None:
    vision, text, kline = checkpoints["vision"], checkpoints["text"], checkpoints["kline"]
    assert error_of([str(vision), "--beam_size", "2"], capsys) == (
        f"lightning-tf: error: --beam_size is for text checkpoints; {vision} is a vision one (ViTClassifier)"
    )
    assert error_of([str(text), "--top_k", "2"], capsys) == (
        f"lightning-tf: error: --top_k is for vision checkpoints; {text} is a text one (Seq2SeqTransformer)"
    )
    assert error_of([str(text), "--on_error", "drop"], capsys) == (
        f"lightning-tf: error: --on_error is for kline checkpoints; {text} is a text one (Seq2SeqTransformer)"
    )
    assert error_of([str(vision), "--on_error", "drop"], capsys).endswith("is a vision one (ViTClassifier)")
    assert error_of([str(text), "--timeout", "0.01"], capsys) == (
        "lightning-tf: error: --timeout (0.01) must be longer than the batch timeout (0.05), or -1"
    )
    assert error_of([str(vision), "--timeout", "0.1", "--batch_timeout", "0.2"], capsys) == (
        "lightning-tf: error: --timeout (0.1) must be longer than the batch timeout (0.2), or -1"
    )
    assert error_of([str(text), "--compile"], capsys) == (
        "lightning-tf: error: --compile is for vision and kline checkpoints: translation decodes token by token on a "
        "KV cache that grows every step, which torch.compile would recompile at each step"
    )
    assert "kline" in str(kline)


def test_a_model_that_cannot_serve(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = tiny_vit()
    model.mean = model.std = None
    ckpt = save_checkpoint(model, tmp_path / "raw.ckpt")
    assert error_of([str(ckpt)], capsys) == (
        f"lightning-tf: error: {ckpt}: the model has no class names or normalisation (it was not trained with an "
        "ImageDataModule)"
    )


def test_help_answers_without_litserve_or_torch() -> None:
    code = (
        "import sys\nfrom lightning_tf.__main__ import main\n"
        "try:\n    main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'litserve', 'lightning') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "usage: lightning-tf serve [-h]" in out and "--max_batch_size" in out and "--api_key" in out
    assert out.strip().splitlines()[-1] == "[]"
