"""The text section of ``benchmarks/scale.py``: ``TranslationDataModule`` on generated WMT-length corpora
against the limit, the tokenizers library alone, in one run.

A corpus of ``n`` aligned pairs (``train.de`` / ``train.en``, about 26 words a side, each language a
Zipf-distributed vocabulary of 30,000 made-up words, as WMT's sentences are long and their words follow
Zipf's law) is written once per size into the work folder. Each phase runs in a fresh interpreter, its
memory counted above what its imports hold:

* ``limit``: the tokenizers library alone reads both files, trains the same BPE (vocabulary 32,000, the
  same normaliser, pre-tokenizer and trainer settings) and encodes both sides in chunks into numpy;
* ``cold``: ``prepare_data()`` on an empty cache (reading, dedup, BPE training, encoding), then, in a
  second interpreter, ``setup("fit")`` and the first training batch;
* ``warm``: the same two interpreters once the cache exists;
* ``steady``: after ``setup`` the interpreter reads one whole epoch of training batches (so every page
  of the prepared corpus is touched, as training does) and its PSS is taken;
* ``ddp``: two processes in a ``torch.distributed`` (gloo) group, as Lightning's DDP runs the DataModule
  (``prepare_data`` on rank 0, a barrier, ``setup`` on every rank), each reading its share of one epoch;
  the two ranks' PSS above their imports is summed (PSS splits a shared page between the processes that
  map it, so the sum is what the machine holds).

Run alone: ``python benchmarks/scale_text.py --sizes 100000 300000 1000000 [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 32_000
HELD_OUT = 3_000  # validation and test pairs each, split off the training file (WMT's newstest sets: ~3,000)


# ------------------------------------------------------------------------------------------- the corpus


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    consonants, vowels = list("bcdfghklmnprstvwz"), list("aeiouy")
    out: set[str] = set()
    while len(out) < n:
        syllables = int(rng.integers(1, 4))
        out.add("".join(
            str(rng.choice(consonants)) + str(rng.choice(vowels)) + (str(rng.choice(consonants)) if rng.random() < 0.4 else "")
            for _ in range(syllables)))  # fmt: skip
    words = np.array(sorted(out), dtype=object)
    rng.shuffle(words)
    return words


def write_corpus(prefix: Path, n: int, seed: int = 0) -> Path:
    """``{prefix}.de`` and ``{prefix}.en``: ``n`` aligned pairs of WMT length; kept when already written."""
    if all(Path(f"{prefix}.{lang}").is_file() for lang in ("de", "en")):
        return prefix
    prefix.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.normal(26, 9, n).round().astype(int), 3, 70)
    for lang in ("de", "en"):
        words = _words(rng, 30_000)
        p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
        p /= p.sum()
        side = np.clip(lengths + rng.integers(-3, 4, n), 2, 75)
        tmp = Path(f"{prefix}.{lang}.tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for a in range(0, n, 50_000):
                ls = side[a : a + 50_000]
                drawn = words[rng.choice(len(words), size=int(ls.sum()), p=p)]
                bounds = np.concatenate([[0], np.cumsum(ls)])
                lines = [" ".join(drawn[bounds[i] : bounds[i + 1]]) for i in range(len(ls))]
                f.write("".join(s[0].upper() + s[1:] + ".\n" for s in lines))
        tmp.rename(f"{prefix}.{lang}")
    return prefix


# ------------------------------------------------------------------------------------------- phases


def _status(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return math.nan


def pss_mb() -> float:
    """This process's proportional set size in MB (a page shared by k processes counts 1/k)."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return math.nan


def _datamodule(args: dict[str, Any]) -> Any:
    from lightning_tf.text import TranslationDataModule

    return TranslationDataModule(
        dataset=None, train_file=args["prefix"], src_lang="de", tgt_lang="en", vocab_size=VOCAB,
        n_val=HELD_OUT, n_test=HELD_OUT, max_tokens=8192, cache_dir=args["cache"],
    )  # fmt: skip


def _epoch(loader: Any) -> int:
    return sum(1 for _ in loader)


def phase_limit(args: dict[str, Any]) -> dict[str, float]:
    """The tokenizers library alone: read both files, train the same BPE, encode both sides into numpy."""
    from itertools import chain

    from tokenizers import Tokenizer

    from lightning_tf.text.tokenizer import SPECIAL_TOKENS, _new_tokenizer

    from tokenizers import trainers

    base = _status("VmRSS")
    start = time.perf_counter()

    def batches(lang: str) -> Any:
        with open(f"{args['prefix']}.{lang}", encoding="utf-8") as f:
            batch: list[str] = []
            for line in f:
                batch.append(line.rstrip("\n"))
                if len(batch) == 50_000:
                    yield batch
                    batch = []
            if batch:
                yield batch

    tok: Tokenizer = _new_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
                                  limit_alphabet=1000, show_progress=False)  # fmt: skip
    tok.train_from_iterator(chain(batches("de"), batches("en")), trainer)
    trained = time.perf_counter() - start
    tokens = 0
    for lang in ("de", "en"):
        parts = []
        for batch in batches(lang):
            ids = [e.ids for e in tok.encode_batch(batch, add_special_tokens=False)]
            parts.append(np.fromiter(chain.from_iterable(ids), np.uint16))
        tokens += sum(len(p) for p in parts)
        flat = np.concatenate(parts)
        del flat, parts
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mb": _status("VmHWM") - base, "tokens": tokens,
            "phase_seconds": {"tokenizer": trained, "encode": seconds - trained}}  # fmt: skip


def phase_prepare(args: dict[str, Any]) -> dict[str, float]:
    base = _status("VmRSS")
    dm = _datamodule(args)
    start = time.perf_counter()
    dm.prepare_data()
    seconds = time.perf_counter() - start
    manifest = json.loads((Path(args["cache"]) / "text" / dm.corpus_spec().key() / "manifest.json").read_text())
    return {"seconds": seconds, "peak_mb": _status("VmHWM") - base, "phase_seconds": manifest["phase_seconds"]}


def phase_setup(args: dict[str, Any]) -> dict[str, float]:
    """``setup`` and the first training batch; with ``epoch``, then one whole epoch (steady PSS)."""
    base_rss, base_pss = _status("VmRSS"), pss_mb()
    dm = _datamodule(args)
    start = time.perf_counter()
    dm.setup("fit")
    loader = dm.train_dataloader()
    next(iter(loader))
    out = {"seconds": time.perf_counter() - start, "pss_first_batch_mb": pss_mb() - base_pss}
    if args.get("epoch"):
        out["batches"] = _epoch(loader)
        out["pss_mb"] = pss_mb() - base_pss
        d = dm.datasets["train"]
        out["int32_ids_mb"] = 4 * (len(d.src_ids.values) + len(d.tgt_ids.values)) / 2**20
        out["pairs"] = len(d)
    out["peak_mb"] = _status("VmHWM") - base_rss
    return out


def _rank(rank: int, world: int, args: dict[str, Any], port: int, out: str) -> None:
    import tokenizers  # noqa: F401  (the imports, before the baseline)
    import torch.distributed as dist

    import lightning_tf.text  # noqa: F401

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    base, base_rss = pss_mb(), _status("VmRSS")
    dm = _datamodule(args)
    if rank == 0:
        dm.prepare_data()
    dist.barrier()
    dm.setup("fit")
    batches = _epoch(dm.train_dataloader())
    dist.barrier()  # both ranks have read their share: measure while both still map the corpus
    record = {"pss_mb": pss_mb() - base, "rss_mb": _status("VmRSS") - base_rss, "batches": batches}
    Path(f"{out}.{rank}").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


def phase_ddp(args: dict[str, Any]) -> dict[str, Any]:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(Path(args["cache"]) / f"ddp-{os.getpid()}")
    mp.spawn(_rank, args=(2, args, port, out), nprocs=2, join=True)
    ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(2)]
    return {"pss_mb_per_rank": [r["pss_mb"] for r in ranks], "pss_mb": sum(r["pss_mb"] for r in ranks),
            "rss_mb_per_rank": [r["rss_mb"] for r in ranks], "batches_per_rank": [r["batches"] for r in ranks]}  # fmt: skip


PHASES = {"limit": phase_limit, "prepare": phase_prepare, "setup": phase_setup, "ddp": phase_ddp}


def run_phase(name: str, args: dict[str, Any], timeout: float = 7200) -> dict[str, Any]:
    """Run phase ``name`` in a fresh interpreter (imports excluded from its numbers); its result dict."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + '/benchmarks');"
        "import lightning_tf.text, torch, numpy, tokenizers; import scale_text as s;"
        "print('RESULT ' + json.dumps(s.PHASES[sys.argv[2]](json.loads(sys.argv[3]))))"
    )
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true", "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code, str(ROOT), name, json.dumps(args)], capture_output=True,
                          text=True, timeout=timeout, env=env)  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"phase {name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT ") :])


# ------------------------------------------------------------------------------------------- the section


def growth(sizes: list[int], values: list[float]) -> float:
    """Least-squares slope of log(value) on log(size): 1 is linear growth."""
    x, y = np.log(np.asarray(sizes, float)), np.log(np.maximum(np.asarray(values, float), 1e-9))
    return float(np.polyfit(x, y, 1)[0]) if len(sizes) > 1 else math.nan


def measure(sizes: list[int], work: Path, ddp: bool = True, log: Any = print) -> list[dict[str, Any]]:
    """One row per size: limit, cold, warm, steady and DDP memory (see the module docstring)."""
    rows = []
    for n in sizes:
        prefix = write_corpus(work / f"text-{n}" / "train", n)
        cache = work / f"text-{n}" / "cache"
        if cache.exists():
            import shutil

            shutil.rmtree(cache)
        args = {"prefix": str(prefix), "cache": str(cache)}
        log(f"text {n:,} pairs: the tokenizers library alone ...")
        limit = run_phase("limit", args)
        log(f"text {n:,} pairs: cold prepare_data ...")
        cold_prepare = run_phase("prepare", args)
        cold_setup = run_phase("setup", args)
        warm_prepare = run_phase("prepare", args)
        warm_setup = run_phase("setup", {**args, "epoch": True})
        row = {
            "pairs": n,
            "limit_s": limit["seconds"],
            "limit_peak_mb": limit["peak_mb"],
            "cold_s": cold_prepare["seconds"] + cold_setup["seconds"],
            "warm_s": warm_prepare["seconds"] + warm_setup["seconds"],
            "peak_mb": max(cold_prepare["peak_mb"], cold_setup["peak_mb"], warm_setup["peak_mb"]),
            "steady_pss_mb": warm_setup["pss_mb"],
            "first_batch_pss_mb": warm_setup["pss_first_batch_mb"],
            "int32_ids_mb": warm_setup["int32_ids_mb"],
            "train_pairs": warm_setup["pairs"],
            "limit_phase_s": limit["phase_seconds"],
            "cold_phase_s": cold_prepare["phase_seconds"],
        }
        if ddp:
            log(f"text {n:,} pairs: 2-process DDP ...")
            d = run_phase("ddp", args)
            row.update(ddp_pss_mb=d["pss_mb"], ddp_pss_mb_per_rank=d["pss_mb_per_rank"],
                       ddp_rss_mb_per_rank=d["rss_mb_per_rank"])  # fmt: skip
        row["cold_ratio"] = row["cold_s"] / row["limit_s"]
        rows.append(row)
        log(json.dumps(row))
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    """The targets of the largest size, and the growth exponents: (target, met, measured)."""
    big = rows[-1]
    out = [
        ("cold <= 1.5x limit + 15 s", big["cold_s"] <= 1.5 * big["limit_s"] + 15,
         f"{big['cold_s']:.1f} s vs {1.5 * big['limit_s'] + 15:.1f} s"),
        ("warm <= 10 s", big["warm_s"] <= 10, f"{big['warm_s']:.1f} s"),
        ("peak above imports <= 1.5 GB", big["peak_mb"] <= 1536, f"{big['peak_mb']:.0f} MB"),
        ("steady PSS <= 3x int32 ids + 100 MB", big["steady_pss_mb"] <= 3 * big["int32_ids_mb"] + 100,
         f"{big['steady_pss_mb']:.0f} MB vs {3 * big['int32_ids_mb'] + 100:.0f} MB"),
    ]  # fmt: skip
    if "ddp_pss_mb" in big:
        out.append(("2 DDP ranks <= 1.3x one rank", big["ddp_pss_mb"] <= 1.3 * big["steady_pss_mb"],
                    f"{big['ddp_pss_mb']:.0f} MB vs 1.3 x {big['steady_pss_mb']:.0f} MB"))  # fmt: skip
    if len(rows) > 1:
        sizes = [r["pairs"] for r in rows]
        for key, what in (("cold_s", "cold time"), ("peak_mb", "peak memory")):
            g = growth(sizes, [r[key] for r in rows])
            out.append((f"growth exponent of {what} <= 1.1", g <= 1.1, f"{g:.2f}"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--work", type=Path, default=None, help="where corpora and caches go (default: a temp folder)")
    parser.add_argument("--no-ddp", action="store_true")
    a = parser.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="scale-text-"))
    rows = measure(a.sizes, work, ddp=not a.no_ddp)
    for target, met, got in verdicts(rows):
        print(f"{'PASS' if met else 'FAIL'}  {target}: {got}")


if __name__ == "__main__":
    main()
