"""``lightning-tf tune`` end to end on the digits ViT cut to a few batches: two trials at once on one journal file,
each an ordinary ``fit`` run (its config, checkpoints and offline wandb run in the study's group), the report,
``best.yaml`` training through ``fit``; a trial's run killed (SIGKILL) mid-trial and the command stopped by SIGTERM,
then continued by the same command; and two commands on one PostgreSQL study, one killed (its runs stop with it),
its trial failed by Optuna's heartbeat and run again by the other."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

optuna = pytest.importorskip("optuna")

from optuna.storages import RetryHeartbeatStaleTrialCallback as Retry  # noqa: E402

from tests.helpers.cli import ROOT, cli  # noqa: E402
from tests.test_wandb import OfflineRun  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")]

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


def load(tmp: Path, name: str, storage: str | None = None) -> optuna.Study:
    from lightning_tf.tune.study import open_storage

    return optuna.load_study(
        study_name=name, storage=open_storage(storage or str(tmp / f"runs/tune/{name}/journal.log"))
    )


def write_space(tmp: Path, text: str = SPACE) -> str:
    path = tmp / "space.yaml"
    path.write_text(text)
    return str(path)


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    t0 = time.time()
    while not predicate():
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _training(study: optuna.Study) -> list:
    """Running trials of a live command whose run has finished an epoch."""
    trials = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    return [t for t in trials if _alive(t.user_attrs.get("run_pid", 0)) and t.intermediate_values]


def _training_in(tmp: Path, name: str) -> list:
    """``_training`` of the study in ``tmp``'s journal; none while the command has made the file but not the study."""
    try:
        study = load(tmp, name)
    except KeyError:  # Optuna's "Record does not exist": the journal's first record is not written yet
        return []
    return _training(study)


def _accounted(study: optuna.Study, trials: int) -> None:
    """``trials`` trials finished, nothing left running or queued, every failed trial run again with its values."""
    from lightning_tf.tune.study import retried

    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") + states.count("PRUNED") == trials, states
    assert "RUNNING" not in states and "WAITING" not in states, states
    for t in study.trials:
        if t.state.name == "FAIL":
            assert t.number in retried(study.trials)
            (again,) = [r for r in study.trials if Retry.retry_history(r)[-1:] == [t.number]]
            assert again.params == t.params


def test_two_jobs_run_ordinary_trials_and_the_report_trains_through_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the trials and the fit of best.yaml: the same numerics
    args = ["--search", write_space(tmp_path), "--trials", "3", "--jobs", "2", "--study_name", "two"]
    proc = cli("tune", *TINY, *args, cwd=tmp_path, timeout=600)
    study = load(tmp_path, "two")
    trials = study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3, proc.stdout  # the median pruner waits for 3
    _accounted(study, 3)
    assert {t.user_attrs["job"] for t in trials} == {0, 1}  # two at once
    assert len({t.user_attrs["run_pid"] for t in trials}) == 3 and len({t.user_attrs["pid"] for t in trials}) == 1
    for t in trials:  # one line per trial in the command's output
        assert f"trial {t.number} complete in " in proc.stdout
    folder = tmp_path / "runs/tune/two"
    for t in trials:  # an ordinary run each: its resolved config and checkpoints in its own folder
        run = Path(t.user_attrs["run_dir"])
        assert run == folder / "lightning-tf" / f"two-{t.number:04d}"
        saved = yaml.safe_load((run / "config.yaml").read_text())
        assert saved["model"]["init_args"]["lr"] == t.params["model.init_args.lr"]
        assert saved["model"]["init_args"]["drop_path"] == t.params["model.init_args.drop_path"]
        assert list((run / "checkpoints").glob("best-*.ckpt"))
        assert sorted(t.intermediate_values) == [0, 1, 2]
        wandb_run = OfflineRun.read((run / "wandb").resolve())  # the run folder's link to its wandb run
        assert (wandb_run.name, wandb_run.group, wandb_run.job_type) == (f"two-{t.number:04d}", "two", "tune")
        assert wandb_run.config["tune"] == {"study": "two", "trial": t.number, "params": t.params}
        # every validation metric of the trial's best epoch is kept beside its value
        assert t.value == t.user_attrs["val_metrics"]["val/loss"] == min(t.intermediate_values.values())
        assert 0 <= t.user_attrs["val_metrics"]["val/acc"] <= 1
    best = study.best_trial
    for name in ("history.png", "importances.png", "parallel_coordinate.png", "intermediate_values.png"):
        assert (folder / name).stat().st_size > 5000, name
    rows = list(csv.DictReader((folder / "trials.csv").open()))
    assert [(int(r["number"]), r["state"]) for r in rows] == [(0, "complete"), (1, "complete"), (2, "complete")]
    assert float(rows[best.number]["model.init_args.lr"]) == best.params["model.init_args.lr"]
    summary = (folder / "summary.md").read_text()
    assert f"Trial {best.number}: val/loss **{best.value:.6g}**" in summary and "## Top 10" in summary
    assert "3 trials: 3 complete." in summary and "![history.png](history.png)" in summary
    # best.yaml: a complete config; fit trains it as is, to the same best validation loss, to the last bit
    best_yaml = folder / "best.yaml"
    config = yaml.safe_load(best_yaml.read_text())
    assert config["model"]["init_args"]["lr"] == best.params["model.init_args.lr"]
    assert config["trainer"]["logger"]["init_args"]["id"] is None  # the trial's own run id is not kept
    assert "TrialReporter" not in best_yaml.read_text()
    fit = cli("fit", "--config", str(best_yaml), cwd=tmp_path)
    assert "fit done" in fit.stdout
    runs = [p for p in (tmp_path / "runs/lightning-tf").iterdir() if (p / "config.yaml").is_file()]
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


def test_a_killed_run_and_a_stopped_command_leave_a_study_the_same_command_finishes(tmp_path: Path) -> None:
    options = [*TINY, "--trainer.logger=false", "--trainer.max_epochs=8", "--search", write_space(tmp_path)]
    options += ["--trials", "2", "--jobs", "2", "--study_name", "cont"]
    out = tmp_path / "out.txt"
    with open(out, "w") as handle:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lightning_tf", "tune", *options],
            cwd=tmp_path,
            env=ENV,
            stdout=handle,
            stderr=handle,
        )
    journal = tmp_path / "runs/tune/cont/journal.log"
    try:
        _wait(lambda: journal.exists() and len(_training_in(tmp_path, "cont")) == 2, 300, "two trials training")
        killed = _training(load(tmp_path, "cont"))[0]
        os.kill(killed.user_attrs["run_pid"], signal.SIGKILL)  # a trial's run, mid-trial
        # the command ends its trial as interrupted at once and queues it again
        _wait(lambda: load(tmp_path, "cont").trials[killed.number].state.name == "FAIL", 60, "the killed trial")
        _wait(lambda: _training(load(tmp_path, "cont")), 300, "a trial training after the kill")
        termed = _training(load(tmp_path, "cont"))[0]
        proc.send_signal(signal.SIGTERM)  # the command: it stops its trials
        proc.wait(120)
    finally:
        proc.kill()
    text = out.read_text()
    assert proc.returncode == 130, text
    assert f"trial {killed.number} interrupted in " in text and "interrupted: its run ended (-9) [" in text
    assert (
        "stopping: the running trials" in text and "continue the study with the same command: lightning-tf tune" in text
    )
    study = load(tmp_path, "cont")
    stopped = study.trials[termed.number]
    assert stopped.state.name == "FAIL" and stopped.user_attrs["reason"] == "interrupted: the study was stopped"
    # SIGTERM reached the trial's run, whose LastCheckpoint saved where it stopped
    assert (tmp_path / f"runs/tune/cont/trials/{termed.number:04d}/checkpoints/last.ckpt").is_file()
    final = cli("tune", *options, cwd=tmp_path, timeout=600)
    study = load(tmp_path, "cont")
    _accounted(study, 2)
    assert {killed.number, termed.number} <= {t.number for t in study.trials if t.state.name == "FAIL"}
    rows = {r["number"]: r for r in csv.DictReader((tmp_path / "runs/tune/cont/trials.csv").open())}
    assert rows[str(killed.number)]["state"] == rows[str(termed.number)]["state"] == "interrupted"
    assert "report: " in final.stdout


# ------------------------------------------------------------------ several machines: one PostgreSQL study


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found is None:
        candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
        found = str(candidates[-1]) if candidates else None
    return found


@pytest.fixture
def postgres() -> Iterator[str]:
    """A PostgreSQL server of this test's own (initdb into a temporary folder, 127.0.0.1 on a free port); its URL."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl are not installed (apt-get install postgresql)")
    pytest.importorskip("psycopg")
    folder = Path(tempfile.mkdtemp(prefix="tune-pg-"))
    folder.chmod(0o755)
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: the server runs as the postgres user
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = folder / "data"
    run = dict(check=True, capture_output=True, timeout=120)
    subprocess.run([*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "tune"], **run)
    options = f"-p {port} -c listen_addresses=127.0.0.1 -k {folder}"
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-o", options, "-w", "start"], **run)
    try:
        yield f"postgresql+psycopg://tune@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def test_two_commands_share_a_postgresql_study_and_the_heartbeat_retries_a_killed_ones_trial(
    tmp_path: Path, postgres: str
) -> None:
    options = [*TINY, "--trainer.logger=false", "--trainer.max_epochs=6", "--search", write_space(tmp_path)]
    options += ["--trials", "2", "--study_name", "pg", "--storage", postgres, "--heartbeat", "1"]
    command = [sys.executable, "-m", "lightning_tf", "tune", *options]
    first = subprocess.Popen(
        command, cwd=tmp_path / "..", env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait(lambda: _has_study(postgres) and _training(load(tmp_path, "pg", postgres)), 300, "the first's trial")
        killed = _training(load(tmp_path, "pg", postgres))[0]
        first.send_signal(signal.SIGKILL)  # the whole command: its trial's run follows at once
        first.wait(30)
        _wait(lambda: not _alive(killed.user_attrs["run_pid"]), 10, "the killed command's run to stop")
    finally:
        first.kill()
    assert load(tmp_path, "pg", postgres).trials[killed.number].state.name == "RUNNING"  # until the heartbeat says
    second = cli("tune", *options, cwd=tmp_path, timeout=600)  # another machine: its own folder, the same study
    study = load(tmp_path, "pg", postgres)
    _accounted(study, 2)
    assert study.trials[killed.number].state.name == "FAIL"
    again = [t for t in study.trials if Retry.retried_trial_number(t) == killed.number]
    assert again[0].state.name == "COMPLETE" and again[0].user_attrs["pid"] != killed.user_attrs["pid"]
    assert "report: " in second.stdout


def _has_study(url: str) -> bool:
    try:
        return "pg" in [s.study_name for s in optuna.get_all_study_summaries(url)]
    except Exception:  # noqa: BLE001 - the tables do not exist yet
        return False
