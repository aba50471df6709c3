"""``lightning-tf tune``'s own options: each wrong one is one line on stderr and exit status 2, before any
config is read (in-process, fast); and a search space the configs do not take, before any trial."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lightning_tf.__main__ import COMMANDS, main
from tests.helpers.cli import ROOT


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trials", "4"], r"^lightning-tf: error: --search is required: a search file such as"),
        (["--search", "absent.yaml"], r"^lightning-tf: error: search file absent\.yaml not found$"),
        (["--search", "space.yaml", "--jobs", "0"], r"^lightning-tf: error: --jobs must be >= 1, got 0$"),
        (["--search", "space.yaml", "--timeout", "-1"], r"^lightning-tf: error: --timeout must be > 0 seconds"),
        (
            ["--search", "space.yaml", "--pruner", "percentile"],
            r"^lightning-tf: error: argument --pruner: invalid choice: 'percentile'",
        ),
        (
            ["--search", "space.yaml", "--study_name", "a b"],
            r"^lightning-tf: error: study name 'a b': use letters, digits, '-' and '_' only$",
        ),
        (["--report"], r"^lightning-tf: error: --report needs --study_name"),
        (
            ["--report", "--study_name", "nothing"],
            r"^lightning-tf: error: no study 'nothing': runs/tune/nothing/journal\.log not found \(give --storage\)$",
        ),
        (
            ["--report", "--study_name", "x", "--trainer.max_epochs=3"],
            r"^lightning-tf: error: --report takes only --study_name and --storage, not --trainer\.max_epochs=3$",
        ),
    ],
)
def test_wrong_options_are_one_line(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text("model.init_args.lr: {type: float, low: 0.001, high: 0.01}\n")
    with pytest.raises(SystemExit) as exit_:
        main(["tune", *args])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert re.search(message, line), line
    assert "tune" in COMMANDS


@pytest.mark.integration
def test_a_searched_name_the_configs_do_not_take_is_one_line_naming_the_search_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The configs are resolved with the space's probe values (``fit --print_config``, a subprocess) before any
    trial: a name they do not have stops the command there, in one line naming the search file and the name."""
    pytest.importorskip("optuna")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    (tmp_path / "space.yaml").write_text("model.init_args.no_such_option: {type: float, low: 0.001, high: 0.01}\n")
    config = str(ROOT / "configs/vision/digits.yaml")
    with pytest.raises(SystemExit) as exit_:
        main(["tune", "--config", config, "--search", "space.yaml", "--study_name", "bad"])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"lightning-tf: error: {tmp_path / 'space.yaml'} with these configs: "), line
    assert "no_such_option" in line, line
    assert not (tmp_path / "runs").exists()  # no study, no trial folder
