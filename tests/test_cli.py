"""The ``lightning-tf`` command on test-only modules (``tests.helpers.tiny``): what a run writes and
where, what it prints (the fit summary, one table of test metrics, the model summary, nothing a user
cannot act on), and the trainer configs' switches. In process where that is enough; the real command
in a subprocess (integration tier) where the console or the files of a whole run are the point."""

from __future__ import annotations

import logging
import os
import re
import shlex
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, ProgressBar, RichModelSummary
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.model_summary import summarize
from torchmetrics import MeanSquaredError

from lightning_tf.__main__ import COMMANDS, main
from lightning_tf.cli.lightning_cli import make_cli
from lightning_tf.cli.runs import link_wandb_run, lost_rank_line, quiet_wandb
from lightning_tf.training import CompactModelSummary, Lost, RankWatch
from tests.helpers.cli import ROOT, LogCollector, cli, run_dir_args

TINY = ["--model", "tests.helpers.tiny.TinyRegressor", "--data", "tests.helpers.tiny.TinyDataModule"]
DEFAULT = str(ROOT / "configs/trainer/default.yaml")


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in-process commands in ``tmp_path``, as if typed there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["lightning-tf"])  # LightningCLI compares its args with the command line
    return tmp_path


# ------------------------------------------------------------------------------- trainer switches


@pytest.mark.parametrize(
    "overlays",
    [
        pytest.param([], id="default"),
        pytest.param(["debug"], id="default+debug"),
        pytest.param(["bf16"], id="default+bf16"),
        pytest.param(["gpu"], id="default+gpu", marks=pytest.mark.gpu),
        pytest.param(["fsdp"], id="default+fsdp", marks=pytest.mark.gpu),
    ],
)
def test_logger_false_works_with_every_trainer_config(overlays: list[str], in_tmp: Path) -> None:
    configs = [a for name in overlays for a in ("--config", str(ROOT / f"configs/trainer/{name}.yaml"))]
    cli = make_cli(
        ["fit", "--config", DEFAULT, *configs, *TINY, "--trainer.logger", "false", "--trainer.max_epochs", "1"]
    )
    assert cli.trainer.state.finished and cli.trainer.logger is None
    assert not any(isinstance(cb, LearningRateMonitor) for cb in cli.trainer.callbacks)
    assert not (in_tmp / "lightning_logs").exists() and not (in_tmp / "runs" / "lightning_logs").exists()


def test_debug_config_alone_runs_one_batch(in_tmp: Path) -> None:
    cli = make_cli(["fit", "--config", str(ROOT / "configs/trainer/debug.yaml"), *TINY])
    assert cli.trainer.state.finished and cli.trainer.global_step == 1
    assert list(in_tmp.iterdir()) == []  # no logger, no checkpoints: nothing written


@pytest.mark.parametrize(
    ("switch", "dropped"),
    [("--trainer.enable_checkpointing", ModelCheckpoint), ("--trainer.enable_progress_bar", ProgressBar)],
)
def test_switching_off_a_callback_of_the_default_config_leaves_it_out(switch: str, dropped: type, in_tmp: Path) -> None:
    cli = make_cli(["--config", DEFAULT, *TINY, "--trainer.logger", "false", switch, "false"], run=False)
    assert not any(isinstance(cb, dropped) for cb in cli.trainer.callbacks)
    assert not any(isinstance(cb, LearningRateMonitor) for cb in cli.trainer.callbacks)  # no logger either


@pytest.mark.integration
def test_logger_false_works_with_ddp(tmp_path: Path) -> None:
    proc = cli(
        "fit",
        "--config",
        DEFAULT,
        "--config",
        str(ROOT / "configs/trainer/ddp.yaml"),
        *TINY,
        "--trainer.logger",
        "false",
        "--trainer.max_epochs",
        "1",
        "--trainer.log_every_n_steps",
        "1",
        cwd=tmp_path,
    )
    assert "fit done" in proc.stdout


# ------------------------------------------------------------------------------- what fit prints


def test_fit_without_logger_prints_commands_that_repeat_its_arguments(
    in_tmp: Path, capsys: pytest.CaptureFixture
) -> None:
    args = [
        "fit",
        *TINY,
        "--trainer.logger",
        "false",
        "--trainer.max_epochs",
        "2",
        "--trainer.enable_progress_bar",
        "false",
        "--test_after_fit",
        "true",
        "--trainer.enable_model_summary",
        "false",
    ]
    main(args)
    out = capsys.readouterr().out
    best = next(in_tmp.glob("checkpoints/*.ckpt"))
    summary = out[out.index("fit done") :].splitlines()
    assert summary[1].split() == ["best", "checkpoint", str(best.relative_to(in_tmp))]  # no monitor: no score
    assert summary[2].split() == ["config", "not", "saved", "(no", "logger)"]
    assert summary[3] == "next:"
    fit_args = [
        "--model",
        "tests.helpers.tiny.TinyRegressor",
        "--data",
        "tests.helpers.tiny.TinyDataModule",
        "--trainer.logger",
        "false",
        "--trainer.max_epochs",
        "2",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
    ]  # as given, without fit and --test_after_fit
    for line, sub in zip(summary[4:6], ("test", "predict")):
        assert shlex.split(line) == ["lightning-tf", sub, *fit_args, "--ckpt_path", str(best.relative_to(in_tmp))]
    # the test after fit printed its one table, before the summary
    assert re.search(r"^test:\n  loss +[0-9.e-]+$", out[: out.index("fit done")], re.M), out
    # the printed test command runs and scores the same checkpoint the same way
    main(shlex.split(summary[4])[1:])
    assert re.search(r"^test:\n  loss +[0-9.e-]+$", capsys.readouterr().out, re.M)


def test_test_prints_one_compact_table(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    main(["test", *TINY, "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"])
    out = capsys.readouterr().out
    assert re.fullmatch(r"test:\n  loss +[0-9.]+\n", out), out  # Lightning's table is off


def test_verbose_true_brings_back_lightnings_table_instead(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    main(["test", *TINY, "--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--verbose", "true"])
    out = capsys.readouterr().out
    assert "test/loss" in out and "test:" not in out


def test_validate_prints_one_compact_table(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    main(["validate", *TINY, "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"])
    assert re.fullmatch(r"val:\n  loss +[0-9.]+\n", capsys.readouterr().out)


def test_a_module_report_replaces_the_table(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    main(
        [
            "test",
            "--model",
            "tests.helpers.tiny.ReportingRegressor",
            "--data",
            "tests.helpers.tiny.TinyDataModule",
            "--trainer.logger",
            "false",
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    assert re.fullmatch(r"tiny report: test loss [0-9.]+\n", capsys.readouterr().out)


@pytest.mark.parametrize("subcommand", ["validate", "predict"])
def test_validate_and_predict_run(subcommand: str, in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    main([subcommand, *TINY, "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"])
    if subcommand == "validate":
        assert re.search(r"^val:\n  loss +[0-9.]+$", capsys.readouterr().out, re.M)
    else:  # the tiny module's predictions go nowhere: nothing on the console either
        assert capsys.readouterr().out == ""


def test_print_config_merges_config_files_in_order(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    first = in_tmp / "first.yaml"
    second = in_tmp / "second.yaml"
    first.write_text("trainer:\n  max_epochs: 7\n  log_every_n_steps: 3\n")
    second.write_text("trainer:\n  max_epochs: 11\n")
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", str(first), "--config", str(second), *TINY, "--print_config"])
    assert done.value.code == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["trainer"]["max_epochs"] == 11  # the later file wins
    assert config["trainer"]["log_every_n_steps"] == 3  # keys it does not set survive


def test_short_class_names_resolve(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["fit", "--model", "Seq2SeqTransformer", "--data", "TranslationDataModule", "--print_config"])
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["model"]["class_path"] == "lightning_tf.text.Seq2SeqTransformer"
    assert config["data"]["class_path"] == "lightning_tf.text.TranslationDataModule"


def test_run_without_logger_writes_no_config_into_the_working_directory(in_tmp: Path) -> None:
    main(
        [
            "fit",
            *TINY,
            "--trainer.logger",
            "false",
            "--trainer.max_epochs",
            "1",
            "--trainer.enable_checkpointing",
            "false",
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    assert not (in_tmp / "config.yaml").exists()


def test_help_lists_every_command(capsys: pytest.CaptureFixture) -> None:
    main(["--help"])
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS)


def test_subcommand_help_is_named_for_the_command(in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: lightning-tf [options] fit")
    # the classes of the three tasks are listed: `--model ViTClassifier` resolves by short name
    for name in (
        "lightning_tf.text.Seq2SeqTransformer",
        "lightning_tf.vision.ViTClassifier",
        "lightning_tf.kline.KLineForecaster",
    ):
        assert name in out


# ----------------------------------------------------------------------------------- model summary


class _WithMetric(LightningModule):
    def __init__(self, example: bool) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 3)
        self.frozen = torch.nn.Linear(3, 1).requires_grad_(False)
        self.val_mse = MeanSquaredError()  # no parameters
        if example:
            self.example_input_array = torch.zeros(1, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.frozen(self.net(x))


def _compact_summary(model: LightningModule) -> str:
    s = summarize(model, max_depth=1)
    logger, handler = logging.getLogger("lightning.pytorch.utilities.rank_zero"), LogCollector()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        CompactModelSummary.summarize(
            s._get_summary_data(),
            s.total_parameters,
            s.trainable_parameters,
            s.model_size,
            s.total_training_modes,
            total_flops=s.total_flops,
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    (text,) = handler.messages
    return text


def test_model_summary_lists_layers_with_parameters_without_mode_or_empty_flops() -> None:
    lines = _compact_summary(_WithMetric(example=False)).splitlines()
    assert [c.strip() for c in lines[0].split("|")] == ["", "Name", "Type", "Params"]
    assert [[c.strip() for c in line.split("|")] for line in lines[2:4]] == [
        ["0", "net", "Linear", "15"],
        ["1", "frozen", "Linear", "4"],
    ]  # val_mse (0 parameters) left out
    assert lines[4] == "19 parameters (0.00 MB), 4 frozen"
    assert len(lines) == 5


def test_model_summary_keeps_flops_when_they_were_counted() -> None:
    lines = _compact_summary(_WithMetric(example=True)).splitlines()
    assert [c.strip() for c in lines[0].split("|")] == ["", "Name", "Type", "Params", "FLOPs", "In sizes", "Out sizes"]
    assert re.fullmatch(r"19 parameters \(0\.00 MB\), 4 frozen; \d+ FLOPs for the example input", lines[-1])


def test_the_compact_summary_takes_the_place_of_lightnings(in_tmp: Path) -> None:
    cli = make_cli(["--config", DEFAULT, *TINY, "--trainer.logger", "false"], run=False)
    kinds = [type(cb) for cb in cli.trainer.callbacks]
    assert CompactModelSummary in kinds and RichModelSummary not in kinds
    cli = make_cli(
        ["--config", DEFAULT, *TINY, "--trainer.logger", "false", "--trainer.enable_model_summary", "false"], run=False
    )  # as configs/trainer/fsdp.yaml sets it
    assert not any(isinstance(cb, CompactModelSummary) for cb in cli.trainer.callbacks)


# ------------------------------------------------------------------------------------ wandb runs


def _offline_logger(tmp_path: Path) -> tuple[WandbLogger, Path]:
    """A WandbLogger whose run (not started: a stand-in with wandb's attributes) lives in wandb's folder."""
    logger = WandbLogger(project="lightning-tf", save_dir=str(tmp_path), offline=True)
    files = tmp_path / "wandb" / "offline-run-20260101_000000-abc123" / "files"
    files.mkdir(parents=True)
    logger._experiment = SimpleNamespace(dir=str(files), project="lightning-tf", id="abc123")
    return logger, files.parent


def test_the_run_folder_links_its_wandb_run(tmp_path: Path) -> None:
    logger, wandb_dir = _offline_logger(tmp_path)
    written = link_wandb_run(SimpleNamespace(loggers=[logger], default_root_dir=str(tmp_path)))
    assert written == tmp_path / "lightning-tf" / "abc123" / "wandb"
    assert written.is_symlink() and written.resolve() == wandb_dir.resolve()
    assert not Path(written.readlink()).is_absolute()  # the runs folder can move as a whole


def test_without_symbolic_links_a_text_file_names_the_wandb_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("symbolic links are not supported here")

    monkeypatch.setattr(Path, "symlink_to", refuse)
    logger, wandb_dir = _offline_logger(tmp_path)
    written = link_wandb_run(SimpleNamespace(loggers=[logger], default_root_dir=str(tmp_path)))
    assert written == tmp_path / "lightning-tf" / "abc123" / "wandb.txt"
    assert written.read_text() == f"{wandb_dir.resolve()}\n"


def test_offline_wandb_runs_start_silent_and_without_the_anonymous_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    offline, online = WandbLogger(offline=True), WandbLogger(offline=False)
    monkeypatch.setenv("WANDB_MODE", "online")
    quiet_wandb(SimpleNamespace(loggers=[offline, online]))
    assert "anonymous" not in offline._wandb_init and "anonymous" not in online._wandb_init
    assert offline._wandb_init["settings"].silent is True
    assert online._wandb_init.get("settings") is None  # an online run says where to find it
    monkeypatch.setenv("WANDB_SILENT", "false")  # the environment decides when it says something
    again = WandbLogger(offline=True)
    quiet_wandb(SimpleNamespace(loggers=[again]))
    assert again._wandb_init.get("settings") is None


# ------------------------------------------------------------------------------- a rank that dies


def _checkpoint(path: Path, step: int, age: float) -> str:
    """A checkpoint file at ``step``, written ``age`` seconds ago."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": step}, path)
    os.utime(path, (time.time() - age, time.time() - age))
    return str(path)


def _rank(rank: int, callbacks: list[Any], loggers: list[Any] | None = None, fn: str = "fit") -> Any:
    """What the line reads of a Trainer on ``rank`` of 2."""
    return SimpleNamespace(
        global_step=7,
        is_global_zero=rank == 0,
        state=SimpleNamespace(fn=fn),
        checkpoint_callbacks=callbacks,
        loggers=loggers or [],
    )


LOST = Lost(0, 2, "its process ended", 1, "parent")


def test_a_dead_rank_is_one_line_resuming_from_the_newest_checkpoint_the_run_wrote(in_tmp: Path) -> None:
    """The newest by time among every checkpoint callback's files (a file gone, or another run's, is not one);
    without a logger the command repeats the fit's arguments, without its old --ckpt_path."""
    folder = in_tmp / "checkpoints"
    best = _checkpoint(folder / "best-epoch=00-step=5.ckpt", 5, age=30)
    step = _checkpoint(folder / "step=6.ckpt", 6, age=10)
    last = _checkpoint(folder / "last.ckpt", 5, age=20)
    _checkpoint(folder / "other.ckpt", 9, age=0)  # in the folder, not the run's
    callbacks = [
        SimpleNamespace(best_model_path=best, last_model_path="", best_k_models={best: 1.0}),
        SimpleNamespace(
            best_model_path=step, last_model_path="", best_k_models={step: 0, str(folder / "gone.ckpt"): 0}
        ),
        SimpleNamespace(best_model_path=last, last_model_path=""),
    ]
    given = ["fit", "--config", "a.yaml", "--ckpt_path", "old.ckpt", "--trainer.devices", "2"]
    assert lost_rank_line(_rank(1, callbacks), LOST, given) == (
        "lightning-tf: rank 0 of 2 died (its process ended; seen by rank 1); every rank stopped at global step 7 "
        "(exit status 1); resume from checkpoints/step=6.ckpt (global step 6): lightning-tf fit --config a.yaml "
        "--trainer.devices 2 --ckpt_path checkpoints/step=6.ckpt"
    )
    assert lost_rank_line(_rank(1, callbacks[:1]), LOST, given).endswith(
        "resume from checkpoints/best-epoch=00-step=5.ckpt (global step 5): lightning-tf fit --config a.yaml "
        "--trainer.devices 2 --ckpt_path checkpoints/best-epoch=00-step=5.ckpt"
    )
    assert lost_rank_line(_rank(1, []), LOST, given).endswith(
        "(exit status 1); no checkpoint was written yet: run the same command again"
    )
    assert lost_rank_line(_rank(1, callbacks, fn="validate"), LOST, given).endswith(
        "(exit status 1); run the same command again"
    )


def test_a_rank_other_than_0_resumes_a_wandb_run_with_its_saved_config_and_id(in_tmp: Path) -> None:
    """Rank 0 alone knows the wandb run's id: the others take the run folder from the checkpoints' folder."""
    run = in_tmp / "runs" / "lightning-tf" / "cy91sd2d"
    last = _checkpoint(run / "checkpoints" / "last.ckpt", 4127, age=0)
    (run / "config.yaml").write_text("trainer: {}\n")
    logger = WandbLogger(project="lightning-tf", save_dir=str(in_tmp / "runs"), offline=True)
    trainer = _rank(1, [SimpleNamespace(best_model_path=last, last_model_path="")], [logger])
    assert lost_rank_line(trainer, LOST, ["fit", "--config", "a.yaml"]).endswith(
        "resume from runs/lightning-tf/cy91sd2d/checkpoints/last.ckpt (global step 4127): lightning-tf fit --config "
        "runs/lightning-tf/cy91sd2d/config.yaml --ckpt_path runs/lightning-tf/cy91sd2d/checkpoints/last.ckpt "
        "--trainer.logger.init_args.id cy91sd2d"
    )


def test_the_command_gives_the_rank_watch_its_line_and_nccl_its_error_handling(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    monkeypatch.delenv("LIGHTNING_TF_DEBUG", raising=False)
    cli = make_cli(["--config", DEFAULT, *TINY, "--trainer.logger", "false"], run=False)
    (watch,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, RankWatch)]
    assert watch.report is not None and watch.details is False
    assert watch.report(LOST).startswith(
        "lightning-tf: rank 0 of 2 died (its process ended; seen by rank 1); every rank stopped at global step 0 "
        "(exit status 1); "
    )
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"  # a failed or timed-out collective ends the process
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # the user's choice stays
    monkeypatch.setenv("LIGHTNING_TF_DEBUG", "1")
    cli = make_cli(["--config", DEFAULT, *TINY, "--trainer.logger", "false"], run=False)
    assert [cb.details for cb in cli.trainer.callbacks if isinstance(cb, RankWatch)] == [True]
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


@pytest.mark.parametrize("name", ["ddp", "fsdp"])
def test_the_parallel_trainer_configs_bound_a_collective_at_ten_minutes(
    name: str, in_tmp: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                "--config",
                DEFAULT,
                "--config",
                str(ROOT / f"configs/trainer/{name}.yaml"),
                *TINY,
                "--print_config",
            ]
        )
    strategy = yaml.safe_load(capsys.readouterr().out)["trainer"]["strategy"]
    assert strategy["init_args"]["timeout"] == "0:10:00"


# ------------------------------------------------------------------ the real command, in subprocesses


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fit (with test after it) of the tiny model under the default trainer config."""
    tmp = tmp_path_factory.mktemp("run")
    proc = cli(
        "fit",
        "--config",
        "configs/trainer/default.yaml",
        *TINY,
        *run_dir_args(tmp),
        "--trainer.max_epochs",
        "3",
        "--test_after_fit",
        "true",
    )
    (tmp / "stdout.txt").write_text(proc.stdout + proc.stderr)
    return tmp


@pytest.mark.integration
def test_fit_writes_checkpoints_and_offline_wandb_run(fitted: Path) -> None:
    ckpts = sorted(p.name for p in fitted.rglob("*.ckpt"))
    assert "last.ckpt" in ckpts
    assert any(name.startswith("best-") for name in ckpts), ckpts
    runs = list((fitted / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    assert list(runs[0].glob("*.wandb")), "the offline run holds no .wandb log"
    # the resolved config is saved beside the run and names the classes chosen on the command line
    config = yaml.safe_load(next(fitted.rglob("config.yaml")).read_text())
    assert config["model"]["class_path"] == "tests.helpers.tiny.TinyRegressor"
    # the checkpoint loads with weights_only=True and training actually moved the weights
    last = next(fitted.rglob("last.ckpt"))
    state = torch.load(last, weights_only=True)
    assert state["global_step"] == 3 * 4  # 3 epochs x 64 samples / batch 16
    # test ran after fit and printed its loss
    assert re.search(r"^test:\n  loss +[0-9.]+$", (fitted / "stdout.txt").read_text(), re.M)


@pytest.mark.integration
def test_test_subcommand_from_checkpoint(fitted: Path, in_tmp: Path, capsys: pytest.CaptureFixture) -> None:
    """The last checkpoint of the real command's run, tested (in this process)."""
    main(["test", *TINY, "--trainer.logger", "false", "--ckpt_path", str(next(fitted.rglob("last.ckpt")))])
    assert re.search(r"^test:\n  loss +[0-9.]+$", capsys.readouterr().out, re.M)


@pytest.mark.integration
def test_unknown_model_class_is_a_clear_error() -> None:
    proc = cli("fit", "--model", "NoSuchModel", "--print_config", check=False, timeout=120)
    assert proc.returncode == 2
    assert "NoSuchModel" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# A user's run under the default trainer config, typed in a fresh folder, its output piped (as into a
# file or `tee`): the fit (with test), then the two commands its summary suggests.

#: what must not reach the console: (what it is, pattern)
NOISE = [
    ("a Python or Lightning warning (file:line: message)", r"\.py:\d+: "),
    ("a warning", r"(?i)\bwarn(ing)?s?\b"),
    ("Lightning's advertisements", r"Tip:|💡|litlogger|litmodels"),
    ("the FLOPs column of a model without example input", r"FLOPs"),
    ("the summary's train/eval mode counts", r"Modules in (train|eval) mode"),
    ("a terminal escape code in piped output", r"\x1b\["),
    ("wandb's banner and closing lines", r"(?m)^wandb: "),
    ("the TPU line", r"TPU available"),
    ("the missing-seed notice", r"No seed found|Seed set to"),
    ("Lightning's test table", r"DataLoader 0|Test metric"),
    ("the checkpoint's callbacks notice", r"callbacks used to create the checkpoint|dirpath has changed"),
]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    cwd = tmp_path_factory.mktemp("user")
    outputs = {}
    fit = cli(
        "fit",
        "--config",
        DEFAULT,
        *TINY,
        "--trainer.max_epochs",
        "2",
        "--trainer.log_every_n_steps",
        "1",
        "--test_after_fit",
        "true",
        cwd=cwd,
        wandb_silent=False,
    )
    outputs["fit"] = fit.stdout + fit.stderr
    next_commands = re.findall(r"^  (lightning-tf (?:test|predict) .*)$", fit.stdout, re.M)
    assert len(next_commands) == 2, fit.stdout
    for command in next_commands:
        args = shlex.split(command)[1:]
        proc = cli(*args, cwd=cwd, wandb_silent=False)
        outputs[args[0]] = proc.stdout + proc.stderr
    return cwd, outputs


@pytest.mark.integration
def test_fit_ends_with_a_summary_of_where_everything_is(default_run: tuple[Path, dict[str, str]]) -> None:
    cwd, outputs = default_run
    summary = outputs["fit"][outputs["fit"].index("fit done: ") :].splitlines()
    folder = cwd / summary[0].removeprefix("fit done: ")
    rows = {line[:18].strip(): line[18:].strip() for line in summary[1:5]}
    assert folder.parent == cwd / "runs" / "lightning-tf"
    best_text, score_text = re.fullmatch(r"(\S+) \(val/loss ([0-9.e-]+)\)", rows["best checkpoint"]).groups()
    best = cwd / best_text
    assert best.parent == folder / "checkpoints" and best.name.startswith("best-")
    assert cwd / rows["last checkpoint"] == folder / "checkpoints" / "last.ckpt"
    assert cwd / rows["config"] == folder / "config.yaml" and (folder / "config.yaml").is_file()
    wandb_text = re.fullmatch(r"(\S+) \(offline; upload: wandb sync (\S+)\)", rows["wandb run"])
    assert wandb_text[1] == wandb_text[2] and (cwd / wandb_text[1]).is_dir()
    # the score printed is the one the checkpoint callback recorded
    state = torch.load(best, weights_only=True)
    (callback_state,) = [
        v for k, v in state["callbacks"].items() if k.startswith("ModelCheckpoint") and "val/loss" in k
    ]
    assert float(score_text) == pytest.approx(float(callback_state["best_model_score"]), rel=1e-3)
    assert summary[5] == "next:"
    for line, sub in zip(summary[6:8], ("test", "predict")):
        assert shlex.split(line) == ["lightning-tf", sub, "--config", rows["config"], "--ckpt_path", best_text]
    # the suggested test scored the best checkpoint on the same data as the test after fit
    after_fit = re.search(r"^test:\n  loss +([0-9.]+)$", outputs["fit"], re.M)[1]
    assert re.search(r"^test:\n  loss +([0-9.]+)$", outputs["test"], re.M)[1] == after_fit


@pytest.mark.integration
def test_a_default_run_keeps_its_outputs_under_its_run_folder(default_run: tuple[Path, dict[str, str]]) -> None:
    cwd, _ = default_run
    assert sorted(p.name for p in cwd.iterdir()) == ["runs"]
    assert sorted(p.name for p in (cwd / "runs").iterdir()) == ["lightning-tf", "wandb"]
    assert not list(cwd.rglob("lightning_logs"))
    folders = list((cwd / "runs" / "lightning-tf").iterdir())
    assert len(folders) == 3  # fit, test and predict: one run each
    for folder in folders:  # each reaches its wandb run from its own folder
        link = folder / "wandb"
        assert link.is_symlink() and link.resolve().name.endswith(f"-{folder.name}"), link
        assert link.resolve().parent == (cwd / "runs" / "wandb").resolve()


@pytest.mark.integration
@pytest.mark.parametrize("command", ["fit", "test", "predict"])
def test_the_console_shows_nothing_a_user_cannot_act_on(command: str, default_run: tuple[Path, dict[str, str]]) -> None:
    output = default_run[1][command]
    found = [(what, m[0]) for what, pattern in NOISE if (m := re.search(pattern, output))]
    assert not found, f"{found}\n{output}"


def test_a_model_argument_on_the_command_line_wins_over_the_checkpoints(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LightningCLI puts a checkpoint's hyperparameters over the config; one the command line of a validate, test or
    predict sets for this run (``predict --ckpt_path ... --model.beam_size 1``) is the user's and wins; the others
    stay the checkpoint's, and a fit that resumes keeps the checkpoint's (the run it continues)."""
    import functools

    from tests.helpers.tiny import TinyRegressor

    quiet = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "1"]
    main(["fit", *TINY, "--model.lr", "0.1", *quiet])
    ckpt = str(next(in_tmp.rglob("*.ckpt")))
    seen: list[float] = []
    original = TinyRegressor.__init__

    @functools.wraps(original)
    def record(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        seen.append(self.hparams.lr)

    monkeypatch.setattr(TinyRegressor, "__init__", record)
    main(["validate", *TINY, "--ckpt_path", ckpt, "--model.lr", "0.5", *quiet])
    main(["validate", *TINY, "--ckpt_path", ckpt, "--model.init_args.lr=0.25", *quiet])
    main(["validate", *TINY, "--ckpt_path", ckpt, *quiet])
    main(["fit", *TINY, "--ckpt_path", ckpt, "--model.lr", "0.5", *quiet[:4], "--trainer.max_epochs", "2"])
    assert seen == [0.5, 0.25, 0.1, 0.1]
