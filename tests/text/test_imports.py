"""The text package keeps transformers and sentencepiece (the ``hf`` extra) out of its import: they load
only when a Marian model or a SentencePiece tokenizer is used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# a fresh interpreter that imports Lightning (about 10 s on a busy 2-core machine): the integration tier
pytestmark = pytest.mark.integration


def test_importing_the_text_package_loads_neither_transformers_nor_sentencepiece() -> None:
    # Lightning itself imports transformers when it is installed (torchmetrics' BERTScore): what counts is
    # that lightning_tf.text adds no module of either package to what Lightning already loaded
    code = (
        "import json, sys\n"
        "import lightning, torchmetrics.text\n"
        "before = set(sys.modules)\n"
        "import lightning_tf.text\n"
        "new = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('transformers', 'sentencepiece'))\n"
        "print(json.dumps({'text': 'lightning_tf.text.marian' in sys.modules, 'new': new}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"text": True, "new": []}
