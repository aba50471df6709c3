"""``lightning-tf walkforward``'s plan (``lightning_tf.cli.walkforward``); the command end to end is
``tests/kline/universe/test_walkforward_cli.py``."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from lightning_tf.cli.walkforward import PLAN, _check_plan


def test_folds_started_together_read_a_whole_plan(tmp_path: Path) -> None:
    """An array's jobs start at once: each reads the plan another may be writing, and must find it whole."""
    plan = {"folds": [{"number": k, "test_start": "2012-01-03" * 50} for k in range(2_000)], "refit": "every"}
    errors: list[BaseException] = []

    def job(out: Path) -> None:
        try:
            _check_plan(out, plan)
        except BaseException as e:  # noqa: BLE001 (collected for the assertion)
            errors.append(e)

    for round_ in range(5):
        out = tmp_path / f"wf{round_}"
        threads = [threading.Thread(target=job, args=(out,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert json.loads((out / PLAN).read_text(encoding="utf-8"))["folds"] == plan["folds"]
        assert [p.name for p in out.iterdir()] == [PLAN]  # no partial file left beside it
    assert not errors, errors[0]
