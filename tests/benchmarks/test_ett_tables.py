"""benchmarks/ett.py's tables: each dataset's own published columns (PatchTST/42 or /64 by look-back, DLinear,
iTransformer at its look-back 96), one table per dataset, the backbone of each row, and what each backbone adds
to the config."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from ett import added_args, backbone_args, markdown_tables, published_patchtst, verdict_counts  # noqa: E402


def row(data_name: str | None, backbone: str, context_len: int = 336, horizon: int = 96, mse: float = 0.3) -> dict:
    r = {
        "backbone": backbone,
        "context_len": context_len,
        "horizon": horizon,
        "mse": mse,
        "mae": 0.35,
        "linear_mse": 0.31,
        "linear_mae": 0.36,
        "linear_variant": "pooled Linear",
        "residual_kept": True,
        "published_mse": mse,
        "published_mae": 0.35,
        "persistence_mse": 1.0,
        "persistence_mae": 0.7,
        "epochs": 3,
        "best_epoch": 1,
        "train_s": 90.0,
    }
    if data_name is not None:
        r["data_name"] = data_name
    return r


def test_each_dataset_gets_its_own_published_columns() -> None:
    text = markdown_tables([row("ETTh1", "patches"), row("ETTh2", "variates"), row("ETTh2", "bars", 512, 192)])
    etth1, etth2 = text.split("## ETTh2")
    assert text.startswith("## ETTh1") and "| 336 | 96 | patches |" in etth1 and "ETTh2" not in etth1
    assert "| 0.375 / 0.399 (/42) | 0.375 / 0.399 | 0.386 / 0.405 |" in etth1
    assert "| 0.274 / 0.336 (/42) | 0.289 / 0.353 | 0.297 / 0.349 |" in etth2  # ETTh2's, not ETTh1's 0.375
    assert "| 512 | 192 | bars |" in etth2 and "| 0.341 / 0.382 (/64) | 0.383 / 0.418 | 0.380 / 0.400 |" in etth2
    # a file that is none of the four ETT datasets gets no published numbers at all
    other = markdown_tables([row("weather", "patches")])
    assert "| - | - | - |" in other and "0.375" not in other
    # rows written before the dataset column are ETTh1's
    assert "| 0.375 / 0.399 (/42) |" in markdown_tables([row(None, "patches")])


def test_the_rows_of_one_table_go_by_horizon_then_backbone() -> None:
    rows = [row("ETTh1", b, horizon=h) for h in (192, 96) for b in ("bars", "patches", "variates")]
    lines = [line for line in markdown_tables(rows).splitlines() if line.startswith("| 336 ")]
    assert [line.split(" | ")[1:3] for line in lines] == [
        ["96", "patches"],
        ["96", "variates"],
        ["96", "bars"],
        ["192", "patches"],
        ["192", "variates"],
        ["192", "bars"],
    ]


def test_verdicts_compare_with_the_rows_own_dataset() -> None:
    rows = [row("ETTh2", "patches", mse=0.2744), row("ETTh1", "patches", mse=0.3754)]
    assert published_patchtst("ETTh2", 336)[96] == (0.274, 0.336) and published_patchtst("ETTm1", 512)[96][0] == 0.293
    # only the ETTh2 row is below its linear model (0.31); both round to their own dataset's 0.274 and 0.375
    assert verdict_counts(rows) == (1, 0, 2, 2)
    assert verdict_counts([row("ETTh2", "patches", mse=0.3)]) == (1, 0, 0, 0)  # above ETTh2's 0.274


def test_what_each_backbone_adds_to_the_config() -> None:
    assert backbone_args("patches", 96) == {"backbone": "patches"}
    small, large = backbone_args("variates", 192), backbone_args("variates", 336)
    assert small["d_model"] == small["d_ff"] == 256 and large["d_model"] == large["d_ff"] == 512
    assert small["activation"] == "gelu" and small["norm"] == "layer" and small["norm_first"] is False
    assert backbone_args("bars", 720) == {"backbone": "bars"}


def test_what_a_backbone_added_is_told_with_the_horizons_it_changes_with() -> None:
    rows = [{**row("ETTh1", "variates", horizon=h), "model_args": backbone_args("variates", h)} for h in (336, 96, 192)]
    text = added_args(rows)
    assert "d_model 256 (horizons 96, 192), 512 (336)" in text and "activation 'gelu'" in text
    assert added_args([{**row("ETTh1", "bars"), "model_args": backbone_args("bars", 96)}]) == "nothing"
