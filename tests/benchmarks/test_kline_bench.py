"""The K-line and ETT benchmarks still run end to end (``--quick``) and print their tables; the
speed comparison aborts unless our forecaster and the torch.nn.TransformerEncoder copy agree.
No accuracy or speed is asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ETTH1 = ROOT.parent / "shared" / "data" / "ett" / "ETTh1.csv"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_kline_benchmark_smoke(tmp_path: Path) -> None:
    proc = run(
        "benchmarks/kline.py", "--quick", "--workdir", str(tmp_path / "ckpt"), "--json", str(tmp_path / "out.json")
    )
    assert "| forecast | mse | mae | rmse | mase | dir_acc | up_share | ic | rank_ic |" in proc.stdout
    for name in ("model", "persistence", "mean", "linear"):
        assert f"| {name} |" in proc.stdout
    assert "| strategy | cum_return | sharpe | max_drawdown | turnover | hit_rate | exposure |" in proc.stdout
    assert "| buy_and_hold |" in proc.stdout and "long/flat strategy" in proc.stdout
    assert "| mode | ours windows/s | torch.nn.TransformerEncoder windows/s | ours/torch |" in proc.stdout
    out = json.loads((tmp_path / "out.json").read_text())
    assert [r["mode"] for r in out["speed"]] == ["train", "eval"]
    assert set(out["accuracy"]["summary"]["backtest"]["strategies"]) >= {"model", "buy_and_hold", "linear"}


@pytest.mark.skipif(not ETTH1.is_file(), reason=f"{ETTH1} not present")
@pytest.mark.parametrize("backbone", ["patches", "variates", "bars"])
def test_ett_benchmark_smoke(backbone: str, tmp_path: Path) -> None:
    proc = run("benchmarks/ett.py", "--quick", "--backbone", backbone, "--workdir", str(tmp_path / "ckpt"))
    assert "| look-back | horizon | backbone | model MSE / MAE | beats linear |" in proc.stdout
    assert f"| 96 | 24 | {backbone} |" in proc.stdout
    assert "| linear by lowest validation error (variant) |" in proc.stdout


def test_the_speed_table_times_every_backbone_against_patches(tmp_path: Path) -> None:
    run(
        "benchmarks/ett.py",
        "--speed",
        "--lookbacks",
        "48",
        "--horizons",
        "24",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--out",
        str(tmp_path / "ett"),
    )
    table = (tmp_path / "ett_speed.md").read_text()
    assert "| horizon | backbone | parameters | train windows/s | train vs patches |" in table
    assert "| 24 | patches |" in table and "| 1.00 |" in table
    rows = json.loads((tmp_path / "ett_speed.json").read_text())["rows"]
    assert [r["backbone"] for r in rows] == ["patches", "variates", "bars"] and all(r["train_wps"] > 0 for r in rows)


def test_an_etth2_file_gets_etth2s_published_columns(tmp_path: Path) -> None:
    """A file named ETTh2.csv (here a generated one of ETTh1's shape) runs under the ETT-hour borders and its
    table carries ETTh2's published numbers (PatchTST/42 0.274 at horizon 96), not ETTh1's (0.375)."""
    from tests.helpers.kline import write_etth1

    data = tmp_path / "ETTh2.csv"
    write_etth1(tmp_path).rename(data)
    run(
        "benchmarks/ett.py",
        "--quick",
        "--data",
        str(data),
        "--lookbacks",
        "48",
        "--horizons",
        "96",
        "--workdir",
        str(tmp_path / "ckpt"),
        "--out",
        str(tmp_path / "ett_etth2"),
    )
    table = (tmp_path / "ett_etth2.md").read_text()
    assert table.startswith("# ETTh2:") and "| 48 | 96 | patches |" in table
    assert "| 0.274 / 0.336 (/42) | 0.289 / 0.353 | 0.297 / 0.349 |" in table and "0.375 / 0.399" not in table
    assert json.loads((tmp_path / "ett_etth2.json").read_text())["rows"][0]["data_name"] == "ETTh2"


def test_the_lowest_validation_linear_is_the_default_baseline_scored_on_every_test_window(tmp_path: Path) -> None:
    """With the default selection (the lowest validation error) the benchmark's extra column is the model's own
    baseline: the same variant, and its MSE over every test window equals the baseline's scored by hand."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch
    from ett import lowest_validation_linear

    from lightning_tf.kline import KLineForecaster, LinearBaseline, MultivariateDataModule
    from lightning_tf.kline.windows import in_order
    from tests.helpers.kline import write_etth1

    dm = MultivariateDataModule(str(write_etth1(tmp_path)), context_len=48, horizon=24, features="M", batch_size=50)
    dm.setup("fit")
    dm.setup("test")
    model = KLineForecaster(
        n_features=7,
        n_targets=7,
        target_channels=list(range(7)),
        context_len=48,
        horizon=24,
        patch_len=8,
        stride=8,
        d_model=8,
        n_heads=2,
        n_layers=1,
        d_ff=16,
    )
    got = lowest_validation_linear(model, dm)
    base = LinearBaseline(48, 24, target_channels=list(range(7))).fit(
        ((b["x"], b["y"]) for b in in_order(dm.train_dataloader())),
        ((b["x"], b["y"]) for b in in_order(dm.val_dataloader())),
    )
    with torch.no_grad():
        errs = torch.cat([base(b["x"]) - b["y"] for b in dm.test_dataloader()])  # (N, F, C)
    assert got["variant"] == base.describe()
    assert got["mse"] == pytest.approx(float(errs.pow(2).mean()), rel=1e-6)  # float32 sums in another order


def test_published_protocol_scores_the_windows_the_published_loader_keeps(tmp_path: Path) -> None:
    """``published_protocol`` = MSE/MAE over the first ``len // batch * batch`` test windows, in order;
    with batches of 1 it is every window."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch
    from ett import published_protocol

    from lightning_tf.kline import KLineForecaster, MultivariateDataModule
    from tests.helpers.kline import write_etth1

    dm = MultivariateDataModule(str(write_etth1(tmp_path)), context_len=48, horizon=24, features="M", batch_size=50)
    dm.setup("test")
    torch.manual_seed(0)
    model = KLineForecaster(
        n_features=7,
        n_targets=7,
        target_channels=list(range(7)),
        context_len=48,
        horizon=24,
        patch_len=8,
        stride=8,
        d_model=8,
        n_heads=2,
        n_layers=1,
        d_ff=16,
    ).eval()
    with torch.no_grad():
        errs = torch.cat([model(b["x"]) - b["y"] for b in dm.test_dataloader()])  # (N, F, C), every window in order
    n = len(errs)
    kept = errs[: n // 128 * 128]
    assert 0 < len(kept) < n  # the last partial batch really is dropped
    mse, mae = published_protocol(model, dm, batch_size=128)
    assert mse == pytest.approx(float(kept.pow(2).mean()), rel=1e-5)
    assert mae == pytest.approx(float(kept.abs().mean()), rel=1e-5)
    assert published_protocol(model, dm, batch_size=1)[0] == pytest.approx(float(errs.pow(2).mean()), rel=1e-5)


def test_verdict_counts_compare_each_scoring_with_the_published_row() -> None:
    """Below / tie against the linear model on the same windows; at or below PatchTST's published MSE after
    rounding to 3 decimals, counted for every-window scoring and for the published loader's windows apart."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from ett import published_patchtst, verdict_counts

    pub = published_patchtst("ETTh1", 336)[96][0]  # 0.375
    rows = [
        {"context_len": 336, "horizon": 96, "mse": pub + 0.0004, "published_mse": pub + 0.0006, "linear_mse": 0.5},
        {"context_len": 336, "horizon": 96, "mse": pub + 6e-4, "published_mse": pub - 0.01, "linear_mse": pub + 6e-4},
        {"context_len": 336, "horizon": 96, "mse": 0.9, "published_mse": 0.9, "linear_mse": 0.8},
        {"context_len": 336, "horizon": 24, "mse": 0.1, "published_mse": 0.1, "linear_mse": 0.2},  # no published row
    ]
    assert verdict_counts(rows) == (2, 1, 1, 1)


def test_the_benchmarks_stop_early_as_the_config_says(tmp_path: Path) -> None:
    """``load_config`` reads the config's EarlyStopping monitor and patience (None without one) and applies
    model overrides as YAML values."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from ett import load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "trainer:\n  max_epochs: 2\n  callbacks+:\n    - class_path: lightning.pytorch.callbacks.EarlyStopping\n"
        "      init_args: {monitor: val/loss_residual, patience: 5}\n"
        "model:\n  init_args: {residual: on, lr: 0.001}\ndata:\n  init_args: {batch_size: 4}\n"
    )
    model, data, trainer, stopping = load_config(cfg, ["lr=1e-4", "residual=blend"])
    assert stopping == {"monitor": "val/loss_residual", "patience": 5}
    assert model == {"residual": "blend", "lr": 1e-4} and data == {"batch_size": 4} and trainer == {"max_epochs": 2}
    cfg.write_text("model:\n  init_args: {residual: off}\ndata:\n  init_args: {}\n")
    model, _, _, stopping = load_config(cfg)
    assert stopping is None and model == {"residual": "off"}  # YAML 1.1's unquoted off, read back as the word
