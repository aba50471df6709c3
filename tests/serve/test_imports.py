"""The task packages never import LitServe (nor the serving package): only ``lightning-tf serve`` loads it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# a fresh interpreter that imports Lightning (about 10 s on a busy 2-core machine): the integration tier
pytestmark = pytest.mark.integration


def test_importing_the_task_packages_loads_no_litserve() -> None:
    code = (
        "import json, sys\n"
        "import lightning_tf, lightning_tf.text, lightning_tf.vision, lightning_tf.kline, lightning_tf.export\n"
        "from lightning_tf.text import Seq2SeqTransformer\n"
        "from lightning_tf.vision import ViTClassifier\n"
        "from lightning_tf.kline import KLineForecaster\n"
        "import lightning_tf.kline.inference, lightning_tf.cli.lightning_cli\n"
        "found = sorted(m for m in sys.modules if m.split('.')[0] in ('litserve', 'fastapi', 'uvicorn')\n"
        "               or m.startswith('lightning_tf.serve'))\n"
        "print(json.dumps(found))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
