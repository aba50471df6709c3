"""What a wandb run holds: run names, the nested resolved config (with no flat duplicate), metrics
and media of each task, read back from the offline run that a real ``lightning-tf fit`` writes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonargparse import Namespace

from lightning_tf.cli.runs import apply_wandb_run_defaults, resolved_config, run_name

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
WANDB = "lightning.pytorch.loggers.WandbLogger"


# ------------------------------------------------------------------------------------ run names
@pytest.mark.parametrize(
    ("model", "data", "expected"),
    [
        (
            {"class_path": "lightning_tf.text.Seq2SeqTransformer", "init_args": {"preset": "tiny", "d_model": None}},
            {"class_path": "lightning_tf.text.TranslationDataModule", "init_args": {"dataset": "synthetic"}},
            "text-tiny-synthetic",
        ),
        (
            {"class_path": "lightning_tf.text.Seq2SeqTransformer", "init_args": {"preset": "small", "d_model": 64}},
            {"class_path": "lightning_tf.text.TranslationDataModule", "init_args": {"dataset": "copy"}},
            "text-d64-copy",
        ),  # an explicit width overrides the preset, so it names the size
        (
            {"class_path": "lightning_tf.vision.ViTClassifier", "init_args": {"preset": "digits", "d_model": None}},
            {"class_path": "lightning_tf.vision.ImageDataModule", "init_args": {"dataset": "digits"}},
            "vision-digits-digits",
        ),
        (
            {"class_path": "lightning_tf.kline.KLineForecaster", "init_args": {"d_model": 32}},
            {"class_path": "lightning_tf.kline.KLineDataModule", "init_args": {"path": "data/msft.csv"}},
            "kline-d32-msft",
        ),
        (
            {"class_path": "lightning_tf.kline.KLineForecaster", "init_args": {"preset": "patchtst"}},
            {"class_path": "lightning_tf.kline.MultivariateDataModule", "init_args": {"path": "/data/ETT/ETTh1.csv"}},
            "kline-patchtst-ETTh1",
        ),
        (
            {"class_path": "tests.helpers.tiny.TinyRegressor", "init_args": {}},
            {"class_path": "tests.helpers.tiny.TinyDataModule", "init_args": {"n": 64}},
            "tinyregressor-tiny",
        ),  # outside the package: class names, no size
        (
            {"class_path": "lightning_tf.text.Seq2SeqTransformer", "init_args": {"preset": "base"}},
            {
                "class_path": "lightning_tf.text.TranslationDataModule",
                "init_args": {"dataset": None, "train_file": "data/wmt14_en_de/train"},
            },
            "text-base-wmt14_en_de",
        ),  # a file named for its split: the folder names the data
        (
            {"class_path": "lightning_tf.text.Seq2SeqTransformer", "init_args": {"preset": "small"}},
            {
                "class_path": "lightning_tf.text.TranslationDataModule",
                "init_args": {"dataset": None, "train_file": "data/tatoeba/deu.txt.gz"},
            },
            "text-small-deu",
        ),
        (
            {
                "class_path": "lightning_tf.text.Seq2SeqTransformer",
                "init_args": {"preset": "small", "pretrained": "Helsinki-NLP/opus-mt-de-en"},
            },
            {
                "class_path": "lightning_tf.text.TranslationDataModule",
                "init_args": {"dataset": None, "train_file": "data/tatoeba/deu.txt"},
            },
            "text-opus-mt-de-en-deu",
        ),  # a pretrained model is named, not the preset it replaces
        (
            {"class_path": "lightning_tf.vision.ViTClassifier", "init_args": {"preset": "cpu32"}},
            {
                "class_path": "lightning_tf.vision.ImageDataModule",
                "init_args": {"dataset": "image_folder", "root": "/data/flowers"},
            },
            "vision-cpu32-flowers",
        ),  # `image_folder` is a layout, not a name
    ],
)
def test_run_name_says_task_size_and_dataset(model: dict, data: dict, expected: str) -> None:
    assert run_name(model, data) == expected


def _config(logger: Any) -> Namespace:
    return Namespace(
        trainer=Namespace(logger=logger),
        model=Namespace(class_path="lightning_tf.kline.KLineForecaster", init_args=Namespace(d_model=32)),
        data=Namespace(class_path="lightning_tf.kline.KLineDataModule", init_args=Namespace(path="data/msft.csv")),
    )


def test_wandb_run_defaults_fill_only_what_is_unset() -> None:
    config = _config(Namespace(class_path=WANDB, init_args=Namespace(name=None, tags=None, group="mine")))
    replaced = apply_wandb_run_defaults(config, "fit")
    init = config.trainer.logger.init_args
    assert (init.name, init.group, init.tags, init.job_type) == ("kline-d32-msft", "mine", ["kline", "msft"], "fit")
    # what was filled in, with the value as given, for the saved config
    assert sorted(replaced) == [(0, "job_type", None), (0, "name", None), (0, "tags", None)]

    given = _config(Namespace(class_path=WANDB, init_args=Namespace(name="my-run")))
    apply_wandb_run_defaults(given, "test")
    assert given.trainer.logger.init_args.name == "my-run"  # a name the user gave wins
    assert given.trainer.logger.init_args.job_type == "test"


def test_a_relative_wandb_folder_is_made_absolute_and_saved_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wandb's service resolves a relative folder against the folder it was started in: the logger gets the
    folder under the working directory of now, the saved config the folder as given."""
    monkeypatch.chdir(tmp_path)
    config = _config(Namespace(class_path=WANDB, init_args=Namespace(save_dir="runs", name="n", job_type="fit")))
    replaced = apply_wandb_run_defaults(config, "fit")
    assert config.trainer.logger.init_args.save_dir == str(tmp_path / "runs")
    assert [r for r in replaced if r[1] == "save_dir"] == [(0, "save_dir", "runs")]
    absolute = _config(Namespace(class_path=WANDB, init_args=Namespace(save_dir=str(tmp_path), name="n")))
    assert all(key != "save_dir" for _, key, _ in apply_wandb_run_defaults(absolute, "fit"))  # kept as it is
    assert absolute.trainer.logger.init_args.save_dir == str(tmp_path)


def test_wandb_run_defaults_leave_other_loggers_alone() -> None:
    for off in (False, None):
        config = _config(off)
        apply_wandb_run_defaults(config, "fit")
        assert config.trainer.logger is off
    csv = Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=Namespace(save_dir="logs"))
    wandb = Namespace(class_path=WANDB, init_args=Namespace())
    apply_wandb_run_defaults(_config([csv, wandb]), "fit")
    assert csv.init_args == Namespace(save_dir="logs")
    assert wandb.init_args.name == "kline-d32-msft"  # the WandbLogger of a list is named


@pytest.mark.parametrize(
    ("mode", "offline"), [("offline", True), ("dryrun", True), ("online", False), ("disabled", False)]
)
def test_wandb_mode_from_the_environment_wins_over_offline(
    mode: str, offline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WandbLogger(offline=True) sets WANDB_MODE=dryrun itself: an online or disabled mode the user
    exported would be overridden unless ``offline`` is cleared before the logger is built."""
    monkeypatch.setenv("WANDB_MODE", mode)
    config = _config(Namespace(class_path=WANDB, init_args=Namespace(offline=True)))
    apply_wandb_run_defaults(config, "fit")
    assert config.trainer.logger.init_args.offline is offline


def test_resolved_config_adds_linked_arguments_and_drops_cli_bookkeeping() -> None:
    dumped = "seed_everything: 0\nmodel:\n  class_path: M\n  init_args:\n    d_model: 32\ndata:\n  class_path: D\n"
    model = dict(d_model=32, n_features=6, _instantiator="lightning.pytorch.cli.instantiate_module")
    config = resolved_config(dumped, model, dict(path="data/msft.csv", _class_path="D"))
    assert config == {
        "seed_everything": 0,
        "model": {"class_path": "M", "init_args": {"d_model": 32, "n_features": 6}},
        "data": {"class_path": "D", "init_args": {"path": "data/msft.csv"}},
    }


def test_kline_forecast_figure_draws_context_truth_and_forecast_of_each_window() -> None:
    import numpy as np

    from lightning_tf.kline.evaluation.plots import forecast_figure

    rng = np.random.default_rng(0)
    past, true, pred = rng.normal(size=(3, 16)), rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    fig = forecast_figure(past, true, pred, "log_return")
    assert len(fig.axes) == 3
    for w, ax in enumerate(fig.axes):
        lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
        np.testing.assert_array_equal(lines["context"].get_xdata(), np.arange(-16, 0))
        np.testing.assert_array_equal(lines["context"].get_ydata(), past[w])
        np.testing.assert_array_equal(lines["actual"].get_ydata(), true[w])
        np.testing.assert_array_equal(lines["forecast"].get_ydata(), pred[w])
    no_context = forecast_figure(None, true[:1], pred[:1])
    assert [line.get_label() for line in no_context.axes[0].get_lines()][:2] == ["actual", "forecast"]


# ------------------------------------------------------------------------ the offline run file
def wandb_records(path: Path) -> list[Any]:
    """The protobuf records of a ``run-<id>.wandb`` file: a LevelDB-style log (a 7-byte file header,
    32 KiB blocks of chunks with a 7-byte header: CRC, length, type full/first/middle/last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    records, chunk, pos = [], b"", 7
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # full or last
            record = pb.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def _set(target: dict[str, Any], item: Any) -> None:
    keys = list(item.nested_key) or [item.key]
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = json.loads(item.value_json)


@dataclass
class OfflineRun:
    path: Path
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, run_dir: Path) -> OfflineRun:
        (log,) = run_dir.glob("run-*.wandb")
        run = cls(run_dir)
        for record in wandb_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                r = record.run
                run.name, run.group, run.job_type, run.tags = r.display_name, r.run_group, r.job_type, list(r.tags)
                for item in r.config.update:
                    _set(run.config, item)
            elif kind == "config":
                for item in record.config.update:
                    _set(run.config, item)
            elif kind == "summary":
                for item in record.summary.update:
                    _set(run.summary, item)
            elif kind == "history":
                row: dict[str, Any] = {}
                for item in record.history.item:
                    _set(row, item)
                run.history.append(row)
        return run

    def media(self, key: str) -> list[Path]:
        """The files logged under ``key`` (an image list or a table) that exist on disk."""
        entry = self.summary[key]
        names = entry.get("filenames") or [entry["path"]]
        return [p for p in (self.path / "files" / n for n in names) if p.is_file()]


# ------------------------------------------------------------------- one real run per task
TASKS = {
    # config, expected run name, a metric of val and of test, media keys (images or tables)
    "text": (
        "configs/text/copy.yaml",
        "text-d64-copy",
        "val/bleu",
        "test/bleu",
        ["val/cross_attention", "val/samples", "test/cross_attention", "test/samples"],
    ),
    "vision": (
        "configs/vision/digits.yaml",
        "vision-digits-digits",
        "val/acc",
        "test/acc",
        ["val/attention", "test/confusion_matrix"],
    ),
    "kline": (
        "configs/kline/msft_daily.yaml",
        "kline-d32-msft",
        "val/mse",
        "test/mse",
        ["test/attention", "test/forecast"],
    ),
}

LINKED = {"text": ("vocab_size", None), "vision": ("num_classes", 10), "kline": ("n_features", 6)}


def _assert_holds(saved: dict, written: dict, where: str) -> None:
    """Every value ``written`` gives is in ``saved`` (a nested mapping, key by key)."""
    for key, value in written.items():
        assert key in saved, f"{where}.{key} missing"
        if isinstance(value, dict) and "class_path" not in value:
            _assert_holds(saved[key], value, f"{where}.{key}")
        else:
            assert saved[key] == value, f"{where}.{key}"


@pytest.fixture(scope="module", params=list(TASKS))
def task_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """``lightning-tf fit --test_after_fit`` of the task's config under the default trainer config
    (offline WandbLogger), two batches per stage, everything written under a temporary folder."""
    task = request.param
    config = TASKS[task][0]
    tmp = tmp_path_factory.mktemp(task)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    args = [
        "fit",
        "--config",
        "configs/trainer/default.yaml",
        "--config",
        config,
        "--trainer.default_root_dir",
        str(tmp),
        "--trainer.logger.init_args.save_dir",
        str(tmp),
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "2",
        "--trainer.limit_val_batches",
        "2",
        "--trainer.limit_test_batches",
        "2",
        "--test_after_fit",
        "true",
    ]
    if task == "text":
        args += ["--data.n_train", "512"]
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_tf", *args],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"lightning-tf {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return task, tmp


def test_offline_run_holds_name_config_metrics_and_media(task_run: tuple[str, Path]) -> None:
    task, tmp = task_run
    config_file, name, val_metric, test_metric, media = TASKS[task]
    (run_dir,) = (tmp / "wandb").glob("offline-run-*")
    run = OfflineRun.read(run_dir)

    assert run.name == name
    dataset = name.rsplit("-", 1)[1]
    assert (run.group, run.tags, run.job_type) == (f"{task}-{dataset}", [task, dataset], "fit")

    # the resolved config, nested by section, as the YAML says (and with the defaults it left out)
    written = yaml.safe_load((ROOT / config_file).read_text())
    model_args = run.config["model"]["init_args"]
    for key, value in written["model"]["init_args"].items():
        assert model_args[key] == value, key
    assert run.config["model"]["class_path"] == written["model"]["class_path"]
    # an argument the model takes from the data (a link: not in the parsed config) with its value
    linked, expected = LINKED[task]
    if expected is None:
        assert isinstance(model_args[linked], int) and model_args[linked] > 0
    else:
        assert model_args[linked] == expected
    # the data's arguments as written (a K-line settings group nested as in the YAML), the defaults beside them
    given = {**written["data"]["init_args"], **({"n_train": 512} if task == "text" else {})}  # the command line's
    _assert_holds(run.config["data"]["init_args"], given, "data.init_args")
    assert run.config["trainer"]["max_epochs"] == 1  # the command line wins over the YAML
    # the run's name and job type are derived again when the config is reused: saved as given (unset)
    assert run.config["trainer"]["logger"]["init_args"]["name"] is None
    assert run.config["trainer"]["logger"]["init_args"]["job_type"] is None
    assert run.config["seed_everything"] == written["seed_everything"]
    # the model's and the data's arguments appear once, under model./data., not flat beside them
    flat = (set(model_args) | set(run.config["data"]["init_args"])) & set(run.config)
    assert not flat, f"flat duplicates of init_args in the wandb config: {sorted(flat)}"
    assert not any(key.startswith("_") and key != "_wandb" for key in run.config), sorted(run.config)

    # the config file beside the checkpoints, in the directory of this run's id
    (saved,) = tmp.glob("lightning-tf/*/config.yaml")
    assert saved.parent.name == run_dir.name.rsplit("-", 1)[1]
    assert (saved.parent / "checkpoints" / "last.ckpt").is_file()
    saved_config = yaml.safe_load(saved.read_text())
    assert saved_config["model"]["class_path"] == written["model"]["class_path"]
    assert saved_config["trainer"]["logger"]["init_args"]["offline"] is True
    assert saved_config["trainer"]["logger"]["init_args"]["name"] is None
    assert not (tmp / "config.yaml").exists()

    # metrics of validation and test reach the history and the summary
    assert val_metric in run.summary and test_metric in run.summary, sorted(run.summary)
    assert "val/loss" in run.summary and "test/loss" in run.summary
    assert any(test_metric in row for row in run.history)

    # media: each key in the summary, its file on disk
    for key in media:
        assert key in run.summary, f"{key} not logged; summary keys: {sorted(run.summary)}"
        files = run.media(key)
        assert files and all(f.stat().st_size > 0 for f in files), key

    # wandb's own reader of the log (`wandb leet inspect`, wandb >= 0.2x) agrees with the one above
    leet = wandb_inspect(run_dir)
    if leet is not None:
        assert (leet["name"], leet["state"], leet["exit_code"]) == (name, "finished", 0)
        assert leet["tags"] == run.tags
        assert leet["config"]["model"] == run.config["model"]
        assert leet["summary"][test_metric] == pytest.approx(run.summary[test_metric])
        assert leet["summary"][media[-1]] == run.summary[media[-1]]


def wandb_inspect(run_dir: Path) -> dict[str, Any] | None:
    """``wandb leet inspect --summary --json`` of an offline run, or None where this wandb lacks it."""
    exe = Path(sys.executable).with_name("wandb")
    if not exe.is_file():
        return None
    proc = subprocess.run(
        [str(exe), "leet", "inspect", "--summary", "--json", str(run_dir)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.startswith("{") else None


@pytest.mark.slow
def test_saved_config_repeats_the_run_under_another_subcommand(tmp_path: Path) -> None:
    """``lightning-tf test --config <run>/config.yaml``: the same model and data, a new run named as
    before with job type ``test`` (the saved file keeps the name and job type unset)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "OMP_NUM_THREADS": "1",
    }
    common = [
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.logger.init_args.save_dir",
        str(tmp_path),
        "--trainer.limit_test_batches",
        "2",
    ]

    def cli(*args: str) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "lightning_tf", *args, *common],
            cwd=ROOT,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-5000:]

    cli(
        "fit",
        "--config",
        "configs/trainer/default.yaml",
        "--config",
        "configs/kline/msft_daily.yaml",
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "2",
        "--trainer.limit_val_batches",
        "2",
    )
    (saved,) = tmp_path.glob("lightning-tf/*/config.yaml")
    cli("test", "--config", str(saved), "--ckpt_path", str(saved.parent / "checkpoints" / "last.ckpt"))
    runs = {r.job_type: r for r in map(OfflineRun.read, (tmp_path / "wandb").glob("offline-run-*"))}
    assert sorted(runs) == ["fit", "test"]
    assert runs["test"].name == runs["fit"].name == "kline-d32-msft"
    assert runs["test"].config["model"] == runs["fit"].config["model"]
    assert "test/mse" in runs["test"].summary and "test/attention" in runs["test"].summary


@pytest.mark.integration
def test_a_run_started_after_a_change_of_folder_is_written_whole_under_its_own_folder(tmp_path: Path) -> None:
    """wandb's service starts in the folder of a process's first run and resolves relative folders against it:
    a process that then moves to another folder and fits with ``save_dir: runs`` (the default config's) gets
    its whole run, the data file ``wandb sync`` uploads and the console log, under the new folder; nothing of it
    lands in the first."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    args = [
        *("fit", "--config", str(ROOT / "configs/trainer/default.yaml")),
        *("--config", str(ROOT / "configs/kline/msft_daily.yaml"), "--data.path", str(ROOT / "data/msft.csv")),
        *("--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2"),
        *("--trainer.logger.init_args.save_dir", "runs"),
    ]
    script = (
        "import os, sys, wandb\n"
        f"wandb.init(dir={str(first)!r}, mode='offline').finish()\n"
        f"os.chdir({str(second)!r})\n"
        "from lightning_tf.__main__ import main\n"
        f"sys.exit(main({args!r}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=first, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert sorted(os.listdir(first)) == ["wandb"]  # the first run's folder alone
    (run,) = (second / "runs" / "wandb").glob("offline-run-*")
    assert list(run.glob("run-*.wandb")) and (run / "files" / "output.log").is_file()
