"""``lightning-tf walkforward`` end to end on a generated universe (20 tickers x 500 days, 2 folds, 1 epoch, a tiny
model): one subprocess run, then in-process runs that resume it and run one fold alone and gather."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lightning_tf.cli.commands import main
from lightning_tf.kline.universe.predictions import arrange
from tests.helpers.cli import cli
from tests.helpers.kline import make_bars

pytestmark = pytest.mark.integration

TINY_CONFIG = """\
seed_everything: 0
trainer:
  max_epochs: 1
  logger: false
  enable_progress_bar: false
  enable_model_summary: false
model:
  class_path: lightning_tf.kline.KLineForecaster
  init_args: {{patch_len: 8, stride: 4, d_model: 16, n_heads: 2, n_layers: 1, d_ff: 32, revin: false}}
data:
  class_path: lightning_tf.kline.KLineDataModule
  init_args: {{path: {path}, context_len: 32, horizon: 2, batch_size: 256}}
"""


@pytest.fixture(scope="module")
def universe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("walkforward")
    bars = pd.concat([make_bars(500, seed=i).assign(Ticker=f"T{i:02d}") for i in range(20)])
    bars.to_csv(root / "universe.csv", index=False)
    (root / "tiny.yaml").write_text(TINY_CONFIG.format(path=root / "universe.csv"), encoding="utf-8")
    out = root / "out"
    proc = cli("walkforward", *_args(root, out), timeout=900)
    assert "walk-forward fold 2/2" in proc.stdout, proc.stdout[-3000:]
    return {"root": root, "out": out, "bars": root / "universe.csv", "stdout": proc.stdout}


def _args(root: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--config",
        str(root / "tiny.yaml"),
        "--folds",
        "2",
        "--test_span",
        "60",
        "--val_span",
        "40",
        "--out",
        str(out),
        *extra,
    ]


def test_folds_csv_has_each_folds_dates_embargoed_and_metrics(universe: dict[str, Path]) -> None:
    table = pd.read_csv(universe["out"] / "folds.csv", parse_dates=[1, 2, 3, 4, 5, 6])
    assert list(table["fold"]) == [1, 2]
    dates = pd.DatetimeIndex(sorted(pd.read_csv(universe["bars"], parse_dates=["Date"])["Date"].unique()))
    pos = lambda t: dates.get_loc(t)  # noqa: E731
    for row in table.itertuples():
        assert row.train_start <= row.train_end < row.val_start <= row.val_end < row.test_start <= row.test_end
        assert pos(row.val_start) - pos(row.train_end) - 1 == 2  # embargo: the horizon, by default
        assert pos(row.test_start) - pos(row.val_end) - 1 == 2
        assert pos(row.test_end) - pos(row.test_start) + 1 == 60
    assert table["test_end"].iloc[-1] == dates[-1]
    assert table["residual_kept"].isin([True, False]).all()
    columns = ["rank_ic", "long_short_ir", "momentum_rank_ic", "linear_rank_ic", "residual_rank_ic"]
    if importlib.util.find_spec("lightgbm") is not None:
        columns.append("lightgbm_rank_ic")
    for column in columns:
        assert table[column].notna().all(), column


def test_predictions_file_holds_every_test_window_with_realised_returns(universe: dict[str, Path]) -> None:
    frame = pd.read_parquet(universe["out"] / "predictions.parquet")
    for column in (
        "date",
        "ticker",
        "step",
        "prediction",
        "residual",
        "realised",
        "linear",
        "lightgbm",
        "momentum",
        "fold",
    ):
        assert column in frame, column
    assert list(arrange(frame).columns) == list(frame.columns)  # in the declared order
    assert set(frame["step"]) == {1, 2} and frame["ticker"].nunique() == 20
    assert frame["prediction"].notna().all()
    # the model with its whole residual: the tested forecast where validation kept it, else a different one
    # (the linear path plus the residual), and never the linear path's when the residual forecasts anything
    table = pd.read_csv(universe["out"] / "folds.csv")
    for row in table.itertuples():
        part = frame[frame["fold"] == row.fold]
        if row.residual_kept:
            np.testing.assert_allclose(part["residual"], part["prediction"], rtol=1e-6, atol=1e-9)
        else:
            np.testing.assert_allclose(part["prediction"], part["linear"], rtol=1e-6, atol=1e-9)
        assert not np.allclose(part["residual"], part["linear"], rtol=1e-6, atol=1e-9)
    if importlib.util.find_spec("lightgbm") is not None:
        assert frame.loc[frame["step"] == 1, "lightgbm"].notna().all()
    # realised: the log return of bar t + step of the ticker, t the origin
    bars = pd.read_csv(universe["bars"], parse_dates=["Date"])
    close = bars.pivot(index="Date", columns="Ticker", values="Close")
    log_ret = np.log(close).diff()
    row_of = {t: i for i, t in enumerate(close.index)}
    sample = frame.sample(200, random_state=0)
    expected = [log_ret[r.ticker].iloc[row_of[r.date] + r.step] for r in sample.itertuples()]
    np.testing.assert_allclose(sample["realised"], expected, rtol=1e-5, atol=1e-7)
    # every target lies in its fold's test span
    table = pd.read_csv(universe["out"] / "folds.csv", parse_dates=["test_start", "test_end"])
    for row in table.itertuples():
        part = frame[frame["fold"] == row.fold]
        target_day = [close.index[row_of[d] + s] for d, s in zip(part["date"], part["step"], strict=True)]
        assert min(target_day) == row.test_start and max(target_day) == row.test_end
    # momentum: the past 20 bars' log return at the origin
    m = sample[sample["momentum"].notna()].head(20)
    want = [
        np.log(close[r.ticker].iloc[row_of[r.date]] / close[r.ticker].iloc[row_of[r.date] - 20]) for r in m.itertuples()
    ]
    np.testing.assert_allclose(m["momentum"], want, rtol=1e-9)


def test_report_judges_the_model_against_each_baseline(universe: dict[str, Path]) -> None:
    report = (universe["out"] / "report.md").read_text(encoding="utf-8")
    for name in ("linear path", "momentum (20 bars)"):
        assert f"* the model vs {name}:" in report
    if importlib.util.find_spec("lightgbm") is not None:
        assert "* the model vs LightGBM:" in report
        assert "* the model, residual always kept vs LightGBM:" in report
    assert "equal-weight universe" in report and "RankIC" in report and "## Per fold" in report
    for png in ("cumulative_return.png", "ic_per_month.png"):
        assert (universe["out"] / png).read_bytes()[:4] == b"\x89PNG"
    assert (universe["out"] / "fold_1" / "model.ckpt").exists() and (universe["out"] / "fold_2" / "model.ckpt").exists()


def test_a_rerun_continues_from_the_first_unfinished_fold(universe: dict[str, Path], capsys) -> None:
    out = universe["out"]
    before = pd.read_parquet(out / "predictions.parquet")
    kept = (out / "fold_1" / "predictions.parquet").stat().st_mtime_ns
    (out / "fold_2" / "done.json").unlink()
    main(["walkforward", *_args(universe["root"], out)])
    printed = capsys.readouterr().out
    assert "fold 1/2: finished earlier, kept" in printed and "walk-forward fold 2/2: train" in printed
    assert (out / "fold_1" / "predictions.parquet").stat().st_mtime_ns == kept
    pd.testing.assert_frame_equal(pd.read_parquet(out / "predictions.parquet"), before)


def test_one_fold_alone_then_gather_equals_the_full_run(universe: dict[str, Path]) -> None:
    full, alone = universe["out"], universe["root"] / "alone"
    alone.mkdir()
    shutil.copy(full / "walkforward.json", alone / "walkforward.json")
    shutil.copytree(full / "fold_2", alone / "fold_2")  # as another job of the array left it
    with pytest.raises(SystemExit):  # fold 1 is missing: gather names it
        main(["walkforward", *_args(universe["root"], alone, "--gather")])
    main(["walkforward", *_args(universe["root"], alone, "--fold", "1")])
    assert not (alone / "report.md").exists()
    main(["walkforward", *_args(universe["root"], alone, "--gather")])
    pd.testing.assert_frame_equal(
        pd.read_parquet(alone / "predictions.parquet"), pd.read_parquet(full / "predictions.parquet")
    )
    done = json.loads((alone / "fold_1" / "done.json").read_text())
    assert done["test_start"] == pd.read_csv(full / "folds.csv")["test_start"].iloc[0]


def test_zero_shot_tests_one_model_on_every_fold_and_warns_of_dates_it_has_seen(universe: dict[str, Path]) -> None:
    """``--zero_shot CKPT`` trains nothing: every fold tests that checkpoint. Given fold 2's model, fold 2's forecasts
    are the full run's, bit for bit; fold 1's test dates come before what that model has seen, and it says so."""
    full, out = universe["out"], universe["root"] / "zero_shot"
    model = full / "fold_2" / "model.ckpt"
    with pytest.warns(
        UserWarning, match=r"look-ahead: the test split of .* starts .*, but this model has seen bars until"
    ):
        main(["walkforward", *_args(universe["root"], out, "--zero_shot", str(model), "--no_lightgbm")])
    for fold in (1, 2):
        done = json.loads((out / f"fold_{fold}" / "done.json").read_text())
        assert done["checkpoint"] == str(model)
        assert not list((out / f"fold_{fold}").rglob("*.ckpt"))  # nothing trained, nothing saved
    ours, theirs = pd.read_parquet(out / "predictions.parquet"), pd.read_parquet(full / "predictions.parquet")
    two = ["date", "ticker", "step", "prediction", "realised"]
    pd.testing.assert_frame_equal(
        ours[ours["fold"] == 2][two].reset_index(drop=True), theirs[theirs["fold"] == 2][two].reset_index(drop=True)
    )
    # fold 1's rows are fold 1's data, in its units, whatever model forecasts them
    one = ["date", "ticker", "step", "realised", "momentum"]
    pd.testing.assert_frame_equal(
        ours[ours["fold"] == 1][one].reset_index(drop=True), theirs[theirs["fold"] == 1][one].reset_index(drop=True)
    )
    assert json.loads((out / "walkforward.json").read_text())["refit"].startswith("none (zero-shot")


def test_zero_shot_of_a_published_model_tests_it_alone_on_every_fold(universe: dict[str, Path], tmp_path: Path) -> None:
    """``--zero_shot`` a published model's folder: the config's forecaster started from it, tested alone, nothing
    trained; fold 2's forecasts are that forecaster's on fold 2's test windows."""
    from tests.helpers.published import random_chronos_bolt

    bolt = tmp_path / "chronos-bolt"
    random_chronos_bolt().save_pretrained(bolt)
    out = universe["root"] / "zero_shot_bolt"
    main(["walkforward", *_args(universe["root"], out, "--zero_shot", str(bolt), "--no_lightgbm")])
    for fold in (1, 2):
        done = json.loads((out / f"fold_{fold}" / "done.json").read_text())
        assert done["checkpoint"] == str(bolt) and done["residual_kept"] is True
        assert not list((out / f"fold_{fold}").rglob("*.ckpt"))
    frame = pd.read_parquet(out / "predictions.parquet")
    assert frame["prediction"].notna().all() and frame["prediction"].nunique() > 10
    baseline = pd.read_parquet(universe["out"] / "predictions.parquet")
    assert not np.allclose(frame["prediction"].to_numpy(), baseline["prediction"].to_numpy())
    assert (out / "report.md").exists()


def test_kronos_forecasts_every_folds_test_origins_beside_the_model(universe: dict[str, Path], tmp_path: Path) -> None:
    """``--kronos`` a folder ``to_kronos`` wrote: its zero-shot forecasts from the raw bars on every test origin of
    every fold (the column ``kronos``, a report row ``Kronos zero-shot``), each fold's equal to the column computed
    from the fold's own frame; the model's forecasts are unchanged by it. ``--kronos_finetune_steps``: a copy
    fine-tuned on each fold's training bars, its forecasts beside (``kronos_tuned``, ``Kronos fine-tuned``)."""
    from lightning_tf.kline import KLineDataModule
    from lightning_tf.kline.published import KRONOS_PRESETS, Kronos, KronosConfig
    from lightning_tf.kline.universe.kronos import KronosColumn, kronos_column

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    _, tokenizer, _ = KRONOS_PRESETS["small"]
    folder = Kronos(KronosConfig(n_layers=1, d_model=32, n_heads=4, d_ff=64), tokenizer, max_context=32).to_kronos(
        tmp_path / "kronos"
    )
    out = universe["root"] / "with_kronos"
    extra = ("--kronos", str(folder), "--kronos_context", "24", "--kronos_samples", "2", "--no_lightgbm")
    extra += ("--kronos_finetune_steps", "4", "--kronos_finetune_lr", "1e-3")
    main(["walkforward", *_args(universe["root"], out, "--refit", "once", *extra)])
    frame = pd.read_parquet(out / "predictions.parquet")
    assert frame["kronos"].notna().mean() > 0.99 and frame["kronos"].nunique() > 100
    report = (out / "report.md").read_text()
    assert "Kronos zero-shot" in report and "Kronos fine-tuned" in report
    # fine-tuned on each fold's own training bars: its own weights, its own forecasts
    assert frame["kronos_tuned"].notna().mean() > 0.99
    assert not np.allclose(frame["kronos_tuned"].to_numpy(), frame["kronos"].to_numpy())
    weights = [torch.load(out / f"fold_{k}" / "kronos" / "kronos.ckpt", weights_only=True) for k in (1, 2)]
    assert not torch.equal(
        weights[0]["state_dict"]["kronos.model.head.proj_s1.weight"],
        weights[1]["state_dict"]["kronos.model.head.proj_s1.weight"],
    )
    first = frame[frame["fold"] == 1].drop(columns="fold").reset_index(drop=True)
    bars = KLineDataModule(path=str(universe["bars"]), context_len=32, horizon=2).bars
    settings = KronosColumn(str(folder), context=24, samples=2)
    expected, _ = kronos_column(first, bars, settings.load(), settings)
    np.testing.assert_allclose(first["kronos"].to_numpy(), expected.to_numpy(), rtol=1e-6)
    plain = pd.read_parquet(universe["out"] / "predictions.parquet")
    np.testing.assert_array_equal(
        frame.loc[frame["fold"] == 1, "prediction"].to_numpy(), plain.loc[plain["fold"] == 1, "prediction"].to_numpy()
    )


def test_the_charts_go_to_an_offline_wandb_run(universe: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    from lightning_tf.kline.universe.report import evaluate_forecasters, log_wandb

    monkeypatch.setenv("WANDB_SILENT", "true")
    out = universe["out"]
    result = evaluate_forecasters(pd.read_parquet(out / "predictions.parquet"), top_k=2, n_drop=1, cost_bps=10.0)
    files = {name: out / f"{name}.png" for name in ("cumulative_return", "ic_per_month")}
    files["report"] = out / "report.md"
    log_wandb(files, result, {"project": "wf-test", "save_dir": str(tmp_path), "offline": True})
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    media = sorted(p.name for p in runs[0].rglob("*.png"))
    assert any(n.startswith("walkforward_cumulative_return") or "cumulative_return" in n for n in media), media
    assert any("ic_per_month" in n for n in media), media


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--fold", "3"], "--fold 3: the walk-forward has folds 1..2"),
        (["--embargo", "1"], r"--embargo \(1\) must be at least the data's horizon \(2\) bars"),
        (["--folds", "9"], r"9 folds of test_span 60 .* need 621 trading dates; the data has 500"),
        (["--refit", "warm"], "holds a walk-forward with other folds or refit"),
        (["--kronos", "NeoQuasar/Kronos-small"], "HF_HUB_OFFLINE=1 and it is not in the Hugging Face cache"),
        (["--kronos", "NeoQuasar/Kronos-small", "--kronos_samples", "0"], "kronos samples must be >= 1"),
        (["--kronos_finetune_steps", "3"], "--kronos_finetune_steps fine-tunes the model --kronos names"),
    ],
)
def test_bad_walkforward_options_are_one_line(universe: dict[str, Path], extra: list[str], match: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["walkforward", *_args(universe["root"], universe["out"]), *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(match, err), err


def test_one_ticker_is_refused_before_any_fold_trains(universe: dict[str, Path], tmp_path: Path, capsys) -> None:
    """A single series has no cross-section to rank: refused in one line before the first fold, not after all."""
    make_bars(500, seed=0).assign(Ticker="MSFT").to_csv(tmp_path / "one.csv", index=False)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["walkforward", *_args(universe["root"], out), f"--data.init_args.path={tmp_path / 'one.csv'}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(r"lightning-tf: error: data: one ticker \(MSFT\) in .*one.csv; a walk-forward ranks .*", err)
    assert not (out / "fold_1").exists()
