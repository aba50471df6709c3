"""Seq2SeqTransformer against ``torch.nn.Transformer``, and decoding with the KV cache against without.

Three parts, each printed as a markdown table with the machine it ran on:

* ``train``: training throughput (target tokens per second: label-smoothed cross-entropy, backward,
  Adam step) of :class:`~lightning_tf.text.Seq2SeqTransformer` and of a model of the same size built
  on ``torch.nn.Transformer`` (same embedding scale, sinusoidal positions, tied output projection,
  Pre-LN with final norms, so the parameter counts are equal; the script checks it). Both see the same
  right-padded batches; torch gets its key-padding masks and causal mask, we get ours. The two
  alternate within every repeat and each cell is the median.
* ``decode``: greedy and beam-4 decoding of a random Seq2SeqTransformer with the KV cache and by full
  recomputation of the prefix each step (both project only the last position to the vocabulary),
  forced to exactly 32 / 64 / 128 output tokens (EOS is penalised so it never comes early). Outputs
  of the two paths are checked to be identical.
* ``--quality``: trains the built-in English -> German config (and, if the shared Tatoeba file is
  present, de -> en Tatoeba) for a fixed wall-clock budget with ``trainer.max_time`` and reports test
  BLEU / chrF (beam 4), printing the equivalent ``lightning-tf`` command.

Run (``--quick`` is a < 60 s smoke run)::

    python benchmarks/seq2seq.py [--quick] [--device cpu|cuda] [--threads N] [--repeats N] [--json PATH]
        [--parts train decode] [--quality] [--budget-min M] [--tatoeba PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info, sync  # noqa: E402

from lightning_tf.core import DecoderCache, sinusoidal_table  # noqa: E402
from lightning_tf.text import Seq2SeqTransformer, beam_search, greedy_search  # noqa: E402
from lightning_tf.text.tokenizer import BOS_ID, EOS_ID, PAD_ID  # noqa: E402

IDS = dict(pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID)
TATOEBA = ROOT.parent / "shared" / "data" / "tatoeba_deu_eng" / "deu_eng.tsv"


# ------------------------------------------------------------------------------------- training
class TorchSeq2Seq(nn.Module):
    """The same model on ``torch.nn.Transformer``: scaled shared embedding, sinusoidal table, tied head."""

    def __init__(
        self, vocab_size: int, d_model: int, n_heads: int, n_layers: int, d_ff: int, max_len: int = 512
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        self.scale = math.sqrt(d_model)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)
        self.transformer = nn.Transformer(
            d_model, n_heads, n_layers, n_layers, d_ff, dropout=0.0, batch_first=True, norm_first=True
        )

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        S, T = src.shape[1], tgt.shape[1]
        x = self.embed(src) * self.scale + self.pe[:S]  # (B, S, D)
        y = self.embed(tgt) * self.scale + self.pe[:T]  # (B, T, D)
        src_pad = src == PAD_ID  # torch's polarity: True = ignore
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=tgt.device)
        h = self.transformer(
            x,
            y,
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )  # (B, T, D)
        return F.linear(h, self.embed.weight)  # (B, T, V)


def make_batch(B: int, S: int, T: int, V: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random right-padded ``src (B, S)`` and ``tgt (B, T + 1)`` (BOS + tokens + EOS), lengths 60-100%."""
    src = torch.randint(4, V, (B, S), generator=g)
    tgt = torch.randint(4, V, (B, T + 1), generator=g)
    tgt[:, 0] = BOS_ID
    for b in range(B):
        s = int(torch.randint(int(0.6 * S), S + 1, (1,), generator=g))
        t = int(torch.randint(int(0.6 * T), T + 1, (1,), generator=g))
        src[b, s - 1], src[b, s:] = EOS_ID, PAD_ID
        tgt[b, t], tgt[b, t + 1 :] = EOS_ID, PAD_ID
    return src, tgt


@dataclass
class TrainRow:
    model: str
    B: int
    S: int
    T: int
    params: int
    ours_tok_s: float
    torch_tok_s: float
    ratio: float
    ratio_fastest: float


def bench_train(
    name: str,
    size: dict,
    B: int,
    S: int,
    T: int,
    V: int,
    repeats: int,
    warmup: int,
    steps: int,
    device: torch.device = torch.device("cpu"),
) -> TrainRow:
    torch.manual_seed(0)
    ours = Seq2SeqTransformer(vocab_size=V, **size, dropout=0.0, norm_first=True, max_len=512, label_smoothing=0.1)
    peer = TorchSeq2Seq(V, size["d_model"], size["n_heads"], size["n_layers"], size["d_ff"])
    ours, peer = ours.to(device), peer.to(device)
    n_ours = sum(p.numel() for p in ours.parameters())
    n_peer = sum(p.numel() for p in peer.parameters())
    if n_ours != n_peer:
        raise SystemExit(f"{name}: parameter counts differ: ours {n_ours}, torch {n_peer}")
    g = torch.Generator().manual_seed(0)
    batches = [tuple(t.to(device) for t in make_batch(B, S, T, V, g)) for _ in range(steps)]
    n_tokens = sum(int((tgt[:, 1:] != PAD_ID).sum()) for _, tgt in batches)

    def runner(model: nn.Module, fwd) -> callable:
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

        def run() -> None:
            for src, tgt in batches:
                logits = fwd(src, tgt[:, :-1])  # (B, T, V)
                loss = F.cross_entropy(
                    logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD_ID, label_smoothing=0.1
                )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

        return run

    run_ours = runner(ours, ours)
    run_peer = runner(peer, peer)
    for _ in range(max(1, warmup)):  # the first call of each pays one-off allocation costs: never time it
        run_ours(), run_peer()
    t_ours, t_peer = [], []
    for r in range(repeats):
        pair = [(run_ours, t_ours), (run_peer, t_peer)]
        for fn, acc in pair if r % 2 == 0 else pair[::-1]:
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            acc.append(time.perf_counter() - start)
    ours_tps, peer_tps = n_tokens / statistics.median(t_ours), n_tokens / statistics.median(t_peer)
    return TrainRow(name, B, S, T, n_ours, ours_tps, peer_tps, ours_tps / peer_tps, min(t_peer) / min(t_ours))


# ------------------------------------------------------------------------------------- decoding
class NoEarlyEos:
    """Penalise EOS so decoding runs to its limit (the forced EOS at the limit still ends it)."""

    def __init__(self, model: Seq2SeqTransformer) -> None:
        self.model = model

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.model.encode(src)

    def decode_step(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        logits = self.model.decode_step(tgt, memory, src_mask, cache)  # (B, V)
        logits[:, EOS_ID] -= 1e4
        return logits

    def init_cache(self, capacity: int) -> DecoderCache:
        return self.model.init_cache(capacity)


@dataclass
class DecodeRow:
    search: str
    B: int
    out_len: int
    cached_s: float
    uncached_s: float
    speedup: float


def bench_decode(
    size: dict, B: int, S: int, lengths: list[int], V: int, repeats: int, device: torch.device = torch.device("cpu")
) -> list[DecodeRow]:
    torch.manual_seed(0)
    model = NoEarlyEos(Seq2SeqTransformer(vocab_size=V, **size, dropout=0.0, max_len=512).eval().to(device))
    src = make_batch(B, S, 4, V, torch.Generator().manual_seed(1))[0].to(device)
    rows = []
    for search in ("greedy", "beam4"):
        for L in lengths:

            def run(cache: bool, search: str = search, L: int = L) -> Tensor:
                if search == "greedy":
                    return greedy_search(model, src, L, **IDS, use_cache=cache)
                return beam_search(model, src, L, **IDS, beam_size=4, alpha=0.6, use_cache=cache)[0]

            a, b = run(True), run(False)
            if not torch.equal(a, b) or a.shape[1] != L:
                raise SystemExit(f"{search} L={L}: cached and uncached outputs differ (or wrong length {a.shape})")
            times: dict[bool, list[float]] = {True: [], False: []}
            for r in range(repeats):
                for cache in (True, False) if r % 2 == 0 else (False, True):
                    sync(device)
                    start = time.perf_counter()
                    run(cache)
                    sync(device)
                    times[cache].append(time.perf_counter() - start)
            c, u = statistics.median(times[True]), statistics.median(times[False])
            rows.append(DecodeRow(search, B, L, c, u, u / c))
    return rows


# -------------------------------------------------------------------------------------- quality
def quality_runs(budget_min: float, tatoeba: Path, threads: int) -> list[dict]:
    from lightning_tf.cli.lightning_cli import make_cli

    budget = f"00:00:{int(budget_min):02d}:{int(round(60 * (budget_min % 1))):02d}"
    runs = [("synthetic en->de (built-in)", ["--config", "configs/text/synthetic.yaml"])]
    if tatoeba.is_file():
        runs.append(
            ("Tatoeba de->en (first 50k pairs)", ["--config", "configs/text/synthetic.yaml", *tatoeba_args(tatoeba)])
        )
    else:
        print(f"Tatoeba file {tatoeba} absent: skipping that run")
    results = []
    for name, args in runs:
        root = ROOT / "runs" / "bench_seq2seq" / name.split()[0].lower()
        full = [
            "--config",
            "configs/trainer/default.yaml",
            *args,
            "--trainer.max_time",
            budget,
            "--trainer.default_root_dir",
            str(root),
            "--trainer.logger",
            "lightning.pytorch.loggers.CSVLogger",
            "--trainer.logger.init_args.save_dir",
            str(root),
        ]
        command = f"OMP_NUM_THREADS={threads} lightning-tf fit " + " ".join(full) + " --test_after_fit true"
        print(f"\n### {name}\n{command}\n", flush=True)
        start = time.perf_counter()
        cli = make_cli(full, run=False)  # the command `lightning-tf fit` builds
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        fit_s = time.perf_counter() - start
        metrics = cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path="best", verbose=False)[0]
        results.append(
            {
                "run": name,
                "command": command,
                "fit_s": fit_s,
                "epochs": cli.trainer.current_epoch,
                "steps": cli.trainer.global_step,
                "test_bleu": metrics["test/bleu"],
                "test_chrf": metrics["test/chrf"],
                "test_loss": metrics["test/loss"],
                "sacrebleu": BLEU_SIGNATURE,
            }
        )
    return results


def tatoeba_args(path: Path) -> list[str]:
    return [
        "--data.dataset",
        "null",
        "--data.train_file",
        str(path),
        "--data.src_lang",
        "de",
        "--data.tgt_lang",
        "en",
        "--data.n_val",
        "1000",
        "--data.n_test",
        "1000",
        "--data.vocab_size",
        "4000",
        "--model.vocab_size",
        "4000",
    ]


BLEU_SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" + __import__("sacrebleu").__version__


# ----------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where training and decoding run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--parts", nargs="*", choices=["train", "decode"], default=["train", "decode"], help="none: only --quality"
    )
    parser.add_argument("--quality", action="store_true", help="also train for a fixed time and report BLEU")
    parser.add_argument("--budget-min", type=float, default=5.0, help="training minutes per quality run")
    parser.add_argument("--tatoeba", type=Path, default=TATOEBA)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("WANDB_MODE", "offline")

    device = torch.device(args.device)
    info = machine_info(device)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"machine: {info}; load average at start: {load}")
    out: dict = {"machine": info, "load_start": load}

    V = 1000
    if args.quick:
        train_cfg = [("tiny-d64", dict(d_model=64, n_heads=4, n_layers=1, d_ff=128), 8, 16, 16, 2)]
        dec_size, dec_B, dec_S, lengths = dict(d_model=64, n_heads=4, n_layers=1, d_ff=128), 2, 8, [8, 16]
    else:
        train_cfg = [
            ("tiny (2+2, d128)", dict(d_model=128, n_heads=4, n_layers=2, d_ff=512), 64, 24, 24, 4),
            ("small (3+3, d256)", dict(d_model=256, n_heads=4, n_layers=3, d_ff=1024), 32, 32, 32, 3),
            ("base (6+6, d512)", dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048), 16, 32, 32, 2),
        ]
        dec_size, dec_B, dec_S, lengths = dict(d_model=256, n_heads=4, n_layers=3, d_ff=1024), 8, 32, [32, 64, 128]

    if "train" in args.parts:
        rows = [
            bench_train(n, s, B, S, T, V, args.repeats, args.warmup, steps, device)
            for n, s, B, S, T, steps in train_cfg
        ]
        print("\n#### Training throughput: Seq2SeqTransformer vs torch.nn.Transformer (same size, Pre-LN, fp32)\n")
        print("| model | batch (B x S x T) | params | ours tok/s | torch tok/s | ours/torch | ours/torch (fastest) |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r.model} | {r.B} x {r.S} x {r.T} | {r.params / 1e6:.2f}M | {r.ours_tok_s:,.0f} | "
                f"{r.torch_tok_s:,.0f} | {r.ratio:.2f} | {r.ratio_fastest:.2f} |"
            )
        out["train"] = [asdict(r) for r in rows]

    if "decode" in args.parts:
        rows = bench_decode(dec_size, dec_B, dec_S, lengths, V, max(1, args.repeats // 2), device)
        d = dec_size
        print(
            f"\n#### Decoding {dec_B} sentences (d_model {d['d_model']}, {d['n_layers']}+{d['n_layers']} layers): "
            "KV cache vs recomputing the prefix\n"
        )
        print("| search | output tokens | cached s | uncached s | speed-up |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r.search} | {r.out_len} | {r.cached_s:.3f} | {r.uncached_s:.3f} | {r.speedup:.1f}x |")
        out["decode"] = [asdict(r) for r in rows]

    if args.quality:
        results = quality_runs(args.budget_min, args.tatoeba, args.threads)
        print(
            f"\n#### Quality after {args.budget_min:g} min of training "
            f"(test split, beam 4, sacreBLEU {BLEU_SIGNATURE})\n"
        )
        print("| corpus | epochs | steps | test BLEU | test chrF |")
        print("|---|---|---|---|---|")
        for r in results:
            print(f"| {r['run']} | {r['epochs']} | {r['steps']} | {r['test_bleu']:.1f} | {r['test_chrf']:.1f} |")
        out["quality"] = results

    out["load_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"\nload average at end: {out['load_end']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
