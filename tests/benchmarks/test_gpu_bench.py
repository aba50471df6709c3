"""The GPU benchmark still runs: ``--dry-run`` goes through every part at tiny sizes on the CPU and
writes a result for each; without CUDA the plain command says so in one line and writes nothing. The
pieces only a GPU run takes (the datasheet peak by GPU name, the trainer configs of the task commands,
which runs are planned for one or several GPUs, the machine table) are checked directly. No speed is
asserted here."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu.py"
PARTS = ["machine", "backends", "layers", "vit", "seq2seq", "decode", "cli"]


def _bench() -> ModuleType:
    """benchmarks/gpu.py as a module (sys.path as it was: the script adds benchmarks/ for itself)."""
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("gpu_bench_under_test", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = saved


def _run(*args: str, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_dry_run_writes_every_part(tmp_path: Path) -> None:
    proc = _run("--dry-run", "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert result["dry_run"] is True and list(result["parts"]) == PARTS
    for name, part in result["parts"].items():
        assert part["status"] == "ok", f"{name}: {part['status']} {part.get('errors')} {part.get('tracebacks')}"
    assert result["machine"]["torch"] == torch.__version__
    parts = result["parts"]
    backends = {r["path"]: r for r in parts["backends"]["rows"]}
    assert len(backends) == 12 and all(r["math"] in ("yes", "-") for r in backends.values())
    assert backends["attention weights (need_weights=True)"]["default"].startswith("none")  # the explicit path
    assert all(not r["default"].startswith("none") for p, r in backends.items() if "need_weights" not in p)
    rows = parts["layers"]["rows"]
    assert [(r["layer"], r["mode"]) for r in rows] == [
        ("encoder", "eager"),
        ("decoder", "eager"),
        ("encoder", "compiled"),
        ("decoder", "compiled"),
    ]
    assert all(r["ours_tok_s"] > 0 and r["torch_tok_s"] > 0 for r in rows)
    assert [r["mode"] for r in parts["vit"]["rows"]] == ["eager", "compiled"]
    assert parts["vit"]["logits_max_abs_diff_fp32_cpu"] < 1e-4
    assert len(parts["seq2seq"]["rows"]) == 1 and parts["seq2seq"]["rows"][0]["ours_tok_s"] > 0
    assert [(r["search"], r["batch"]) for r in parts["decode"]["rows"]] == [
        ("greedy", 1),
        ("greedy", 2),
        ("beam4", 1),
        ("beam4", 2),
    ]
    cli = parts["cli"]["rows"]
    assert [(r["task"], r["mode"]) for r in cli] == [
        ("text", "1 device"),
        ("vision", "1 device"),
        ("kline", "1 device"),
        ("vision", "ddp, all devices"),
    ]
    assert all(r["status"] == "ok" and r["steps_timed"] == 1 and r["steps_per_s"] > 0 for r in cli), cli
    md = (tmp_path / "gpu.md").read_text()
    assert md.startswith("# lightning-tf on a GPU (dry run")
    assert "| attention path | taken by | flash | efficient | cuDNN | math | picked unrestricted |" in md
    assert md.count("| encoder | (2, 16, 32, 4) |") == 2 and "| beam4 | 2 | 4 |" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    proc = _run("--out", str(tmp_path / "results"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.strip().splitlines()) == 1 and "no CUDA device" in proc.stdout, proc.stdout
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H200", 989.0),
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H20", 148.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA L40", 181.0),
        ("NVIDIA GeForce RTX 4090", 165.0),
        ("NVIDIA A10G", None),
        ("Tesla V100-SXM2-16GB", None),
    ],
)
def test_datasheet_peak_by_gpu_name(name: str, peak: float | None) -> None:
    found = _bench().peak_from_datasheet(name)
    assert (found[1] if found else None) == peak


def test_task_commands_on_a_gpu() -> None:
    """The single-device commands stack default.yaml, gpu.yaml (bf16-mixed) and the task's config and
    pin one device; the DDP ones put ddp.yaml before the task's config and keep every device."""
    bench = _bench()
    cfg = {"dry_run": False, "sizes": bench.SIZES["gpu"], "gpu_count": 1}
    single = bench.cli_args(cfg, "vision", "configs/vision/digits.yaml", [], "t.json", "root")
    configs = [single[i + 1] for i, a in enumerate(single) if a == "--config"]
    assert configs == ["configs/trainer/default.yaml", "configs/trainer/gpu.yaml", "configs/vision/digits.yaml"]
    assert single[single.index("--trainer.devices") + 1] == "1" and "--trainer.accelerator" not in single
    assert single[single.index("--trainer.max_steps") + 1] == "100"
    callbacks = json.loads(single[single.index("--trainer.callbacks") + 1])
    assert [c["class_path"].rsplit(".", 1)[1] for c in callbacks] == ["RNGState", "NaNGuard", "StepTimer"]
    ddp = bench.cli_args(cfg, "text", "configs/text/synthetic.yaml", ["--config", "configs/trainer/ddp.yaml"], "t", "r")
    configs = [ddp[i + 1] for i, a in enumerate(ddp) if a == "--config"]
    assert configs[-2:] == ["configs/trainer/ddp.yaml", "configs/text/synthetic.yaml"]
    assert "--trainer.devices" not in ddp
    compiled = bench.cli_args(cfg, "kline", "configs/kline/msft_daily.yaml", ["--model.compile", "true"], "t", "r")
    assert compiled[compiled.index("--model.compile") + 1] == "true"

    ok = {"text": True, "vision": True, "kline": True}
    one = [(t, m) for t, _, m, _ in bench.cli_runs(cfg, ok)]
    assert one[:4] == [
        ("text", "1 device"),
        ("vision", "1 device"),
        ("kline", "1 device"),
        ("vision", "ddp, all devices"),
    ]
    assert len(one) == 7 and all(m == "1 device, compiled" for _, m in one[4:])
    four = [(t, m) for t, _, m, _ in bench.cli_runs({**cfg, "gpu_count": 4}, {"text": True})]
    assert sum(m.startswith("ddp") for _, m in four) == 3 and four[-1] == ("text", "1 device, compiled")


def test_markdown_of_a_gpu_machine() -> None:
    bench = _bench()
    machine = {
        "cpu": "Some CPU",
        "cpu_cores": 16,
        "torch": "2.14.1",
        "cuda": "13.0",
        "cudnn": "92400",
        "gpu_count": 1,
        "gpus": [{"name": "NVIDIA H200", "memory_gib": 139.8, "capability": "9.0", "multiprocessors": 132}],
        "driver": "570.1",
        "mm_tflops_measured": 700.0,
        "mm_shape": "8192^3 bfloat16",
        "peak_tflops": 989.0,
        "peak_source": "datasheet (H200, dense bf16)",
    }
    part = {"status": "ok", "rows": [], "machine": machine, "seconds": 2, "budget_s": 9}
    results = {
        "dry_run": False,
        "command": "python benchmarks/gpu.py",
        "started": "now",
        "budget_s": 400,
        "sizes": bench.SIZES["gpu"],
        "machine": machine,
        "parts": {"machine": part},
    }
    md = "\n".join(bench.markdown(results))
    assert "# lightning-tf on a GPU\n" in md and "NVIDIA H200 (139.8 GiB, sm 9.0)" in md
    assert "| NVIDIA H200 | 139.8 GiB | 9.0 | 1 |" in md and "989.0 (datasheet (H200, dense bf16))" in md
    assert "| machine | ok | 2 | 9 |" in md
