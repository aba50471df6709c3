"""``lightning-tf tune`` end to end on the digits ViT cut to a few batches: two workers on one journal file,
each trial an ordinary run (its config, checkpoints and offline wandb run in the study's group), the report,
``best.yaml`` training through ``fit``; a study killed (SIGKILL), one worker stopped by SIGTERM, the study stopped (SIGINT) and continued; trials
pruned, failed and refused while the study goes on; and the command's one-line errors."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

optuna = pytest.importorskip("optuna")

from tests.helpers.cli import ROOT, cli  # noqa: E402
from tests.test_wandb import OfflineRun  # noqa: E402

pytestmark = pytest.mark.integration

# the digits ViT, small and short: 2 layers of width 32, 3 epochs of 3 batches, 2 validation batches
TINY = [
    "--config",
    "configs/trainer/default.yaml",
    "--config",
    "configs/vision/digits.yaml",
    "--model.init_args.d_model=32",
    "--model.init_args.n_layers=2",
    "--trainer.max_epochs=3",
    "--trainer.limit_train_batches=3",
    "--trainer.limit_val_batches=2",
    "--model.init_args.warmup_steps=2",
]
SPACE = """\
model.init_args.lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}
model.init_args.drop_path: {type: categorical, choices: [0.0, 0.1]}
"""
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}


def tune(tmp: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return cli("tune", *TINY, *args, cwd=tmp, check=check, timeout=400)


def load(tmp: Path, name: str) -> optuna.Study:
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(tmp / "runs/tune" / name / "journal.log")))
    return optuna.load_study(study_name=name, storage=storage)


def write_space(tmp: Path, text: str = SPACE) -> str:
    path = tmp / "space.yaml"
    path.write_text(text)
    return str(path)


def test_two_workers_run_ordinary_trials_and_the_report_trains_through_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the trials and the fit of best.yaml: the same numerics
    proc = tune(tmp_path, "--search", write_space(tmp_path), "--trials", "4", "--jobs", "2", "--study_name", "two")
    study = load(tmp_path, "two")
    trials = study.trials
    assert len(trials) == 4, proc.stdout
    states = {t.state for t in trials}
    assert states <= {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    assert optuna.trial.TrialState.COMPLETE in states
    assert {t.user_attrs["worker"] for t in trials} == {0, 1}  # both workers took trials
    assert len({t.user_attrs["pid"] for t in trials}) == 2
    for t in trials:  # one line per trial in the command's output (the study's log)
        assert f"trial {t.number} {t.state.name.lower()}" in proc.stdout
    folder = tmp_path / "runs/tune/two"
    for t in trials:  # an ordinary run each: its resolved config and checkpoints in its own folder
        run = Path(t.user_attrs["run_dir"])
        assert run == folder / "lightning-tf" / f"two-{t.number:04d}"
        saved = yaml.safe_load((run / "config.yaml").read_text())
        assert saved["model"]["init_args"]["lr"] == t.params["model.init_args.lr"]
        assert saved["model"]["init_args"]["drop_path"] == t.params["model.init_args.drop_path"]
        assert list((run / "checkpoints").glob("*.ckpt"))
        assert (
            len(t.intermediate_values)
            == t.user_attrs["epochs"]
            == (3 if t.state.name == "COMPLETE" else len(t.intermediate_values))
        )
        wandb_run = OfflineRun.read((run / "wandb").resolve())  # the run folder's link to its wandb run
        assert (wandb_run.name, wandb_run.group, wandb_run.job_type) == (f"two-{t.number:04d}", "two", "tune")
        assert wandb_run.config["tune"] == {"study": "two", "trial": t.number, "params": t.params}
    for t in trials:  # every validation metric of the trial's best epoch is kept beside its value
        assert t.user_attrs["val_metrics"]["val/loss"] == min(t.intermediate_values.values())
        assert 0 <= t.user_attrs["val_metrics"]["val/acc"] <= 1
    best = study.best_trial
    assert best.value == min(t.value for t in trials if t.state.name == "COMPLETE")
    assert best.value == min(best.intermediate_values.values())  # a trial's value: its best epoch
    # the report
    for name in ("history.png", "importances.png", "parallel_coordinate.png", "intermediate_values.png"):
        assert (folder / name).stat().st_size > 5000, name
    rows = list(csv.DictReader((folder / "trials.csv").open()))
    assert [int(r["number"]) for r in rows] == [0, 1, 2, 3]
    assert [r["state"] for r in rows] == [t.state.name.lower() for t in trials]
    assert float(rows[best.number]["model.init_args.lr"]) == best.params["model.init_args.lr"]
    summary = (folder / "summary.md").read_text()
    assert f"Trial {best.number}: val/loss **{best.value:.6g}**" in summary and "## Top 10" in summary
    assert "4 trials: " in summary and "Wall time " in summary and "![history.png](history.png)" in summary
    # best.yaml: a complete config; fit trains it as is
    best_yaml = folder / "best.yaml"
    config = yaml.safe_load(best_yaml.read_text())
    assert config["model"]["init_args"]["lr"] == best.params["model.init_args.lr"]
    assert config["trainer"]["logger"]["init_args"]["id"] is None  # the trial's own run id is not kept
    fit = cli("fit", "--config", str(best_yaml), cwd=tmp_path)
    assert "fit done" in fit.stdout
    runs = [p for p in (tmp_path / "runs/lightning-tf").iterdir() if (p / "config.yaml").is_file()]
    assert len(runs) == 1 and list((runs[0] / "checkpoints").glob("best-*.ckpt"))
    # ... and trains the best trial again: the same best validation loss, to the last bit
    import torch

    state = torch.load(runs[0] / "checkpoints/last.ckpt", weights_only=True)["callbacks"]
    (score,) = [v["best_model_score"] for k, v in state.items() if "'monitor': 'val/loss'" in k]
    assert float(score) == best.value
    # --report rewrites the report from the storage alone (in this process: one command fewer to start)
    from lightning_tf.__main__ import main

    (folder / "summary.md").unlink()
    monkeypatch.chdir(tmp_path)
    main(["tune", "--study_name", "two", "--report"])
    assert (folder / "summary.md").read_text().split("Written")[0] == summary.split("Written")[0]
    assert "best config: runs/tune/two/best.yaml" in capsys.readouterr().out


def _wait(predicate, timeout: float, what: str) -> None:  # noqa: ANN001
    t0 = time.time()
    while not predicate():
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_a_killed_and_an_interrupted_study_continue_where_they_stopped(tmp_path: Path) -> None:
    space = write_space(tmp_path)
    # no logger: these trials need no wandb run, and start faster without one
    # 2 trials: the killed study holds as many as it asks for, all of them left running by dead workers
    options = [
        *TINY,
        "--trainer.logger=false",
        "--trainer.max_epochs=8",
        "--search",
        space,
        "--trials",
        "2",
        "--jobs",
        "2",
        "--study_name",
        "cont",
    ]
    args = [sys.executable, "-m", "lightning_tf", "tune", *options]
    journal = tmp_path / "runs/tune/cont/journal.log"

    def running() -> list:  # trials running now, in a live worker
        if not journal.exists():
            return []
        return [
            t
            for t in load(tmp_path, "cont").trials
            if t.state.name == "RUNNING" and "pid" in t.user_attrs and _alive(t.user_attrs["pid"])
        ]

    # SIGKILL of the command: its workers stop at once, their trials stay RUNNING in the storage
    proc = subprocess.Popen(args, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: len(running()) == 2, 240, "two running trials")
        killed = {t.number: t for t in running()}
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        _wait(lambda: not any(_alive(t.user_attrs["pid"]) for t in killed.values()), 30, "the workers to stop")
    finally:
        proc.kill()
    study = load(tmp_path, "cont")
    assert {t.number for t in study.trials if t.state.name == "RUNNING"} == set(killed)  # left behind
    # SIGINT (Ctrl-C) of the continued command: the running trials end as interrupted, exit status 130
    proc = subprocess.Popen(args, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: len(running()) == 2, 240, "two running trials after the kill")
        # SIGTERM to one worker alone (as a cluster stops every process of a job): the run's LastCheckpoint
        # takes it, saves the trial's step and stops; the trial ends as interrupted and that worker exits
        termed = running()[0]
        trial_dir = tmp_path / f"runs/tune/cont/trials/{termed.number:04d}"
        _wait(lambda: any(trial_dir.rglob("last.ckpt")), 240, "the trial's first epoch")  # training under way
        os.kill(termed.user_attrs["pid"], signal.SIGTERM)
        _wait(lambda: not _alive(termed.user_attrs["pid"]), 120, "the worker stopped by SIGTERM to exit")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert "was left running by a worker that is gone" in out and "stopping: the running trials" in out
    assert "stopped; continue the study with the same command: lightning-tf tune" in out
    study = load(tmp_path, "cont")
    stale = [t for t in study.trials if t.number in killed]
    assert all(t.state.name == "FAIL" and t.user_attrs["interrupted"] == "its worker process was gone" for t in stale)
    interrupted = [t for t in study.trials if t.user_attrs.get("interrupted") == "Ctrl-C or a stop signal"]
    assert len(interrupted) == 2 and all(t.state.name == "FAIL" for t in interrupted)
    assert termed.number in {t.number for t in interrupted}
    # continued: each interrupted trial's parameters run again, and the study ends with the 2 trials it asks for
    final = cli("tune", *options, cwd=tmp_path, timeout=400)
    study = load(tmp_path, "cont")
    counted = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(counted) == 2 and not [t for t in study.trials if t.state.name in ("RUNNING", "WAITING")]
    assert len(study.trials) == 6  # 2 killed, 2 interrupted, 2 finished
    retried = {t.user_attrs["retry_of"]: t for t in study.trials if "retry_of" in t.user_attrs}
    for t in stale + interrupted:
        assert retried[t.number].params == t.params
    assert "report: " in final.stdout


FAILING = """\
# 0.003 learns, 1e-7 does not (pruned), 1e6 turns the loss into NaN (NaNGuard: failed);
# a width of 30 is not divisible by the preset's 4 heads (refused before training)
model.init_args.lr: {type: categorical, choices: [3.0e-3, 1.0e-7, 1.0e+6]}
model.init_args.d_model: {type: categorical, choices: [32, 30]}
"""


def test_pruned_failed_and_refused_trials_leave_the_study_going(tmp_path: Path) -> None:
    # seed 10 draws: good, NaN, refused, slow, good, slow (one worker: in this order)
    proc = tune(
        tmp_path,
        "--trainer.logger=false",
        "--search",
        write_space(tmp_path, FAILING),
        "--trials",
        "6",
        "--trainer.max_epochs=4",
        "--sampler",
        "random",
        "--seed",
        "10",
        "--pruner_startup",
        "1",
        "--pruner_warmup",
        "0",
        "--study_name",
        "bad",
    )
    trials = load(tmp_path, "bad").trials
    assert len(trials) == 6
    by = {}
    for t in trials:
        lr, width = t.params["model.init_args.lr"], t.params["model.init_args.d_model"]
        kind = "refused" if width == 30 else {3e-3: "good", 1e-7: "slow", 1e6: "nan"}[lr]
        by.setdefault(kind, []).append(t)
    assert set(by) == {"good", "slow", "nan", "refused"}, [t.params for t in trials]
    for t in by["refused"]:
        assert t.state.name == "FAIL" and t.user_attrs["refused"] and t.user_attrs.get("epochs") is None
        assert t.user_attrs["reason"] == "refused: model.d_model (30) must be divisible by model.n_heads (4)"
        assert f"trial {t.number} refused in " in proc.stdout
    for t in by["nan"]:
        assert t.state.name == "FAIL" and t.user_attrs["reason"].startswith("non-finite: the training loss is nan")
        assert f"trial {t.number} FAILED in " in proc.stdout
    assert all(t.state.name == "COMPLETE" and len(t.intermediate_values) == 4 for t in by["good"])
    pruned = [t for t in by["slow"] if t.state.name == "PRUNED"]
    assert pruned, [t.state for t in by["slow"]]
    for t in pruned:  # stopped early: fewer epochs than the budget, as reported
        assert t.user_attrs["epochs"] == len(t.intermediate_values) < 4
        assert t.user_attrs["reason"] == f"pruned after epoch {t.user_attrs['epochs']}"
    summary = (tmp_path / "runs/tune/bad/summary.md").read_text()
    assert f"- trial {by['refused'][0].number} (refused): refused: model.d_model (30)" in summary
