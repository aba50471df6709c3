"""Seq2SeqTransformer.from_marian against transformers' MarianMTModel: how often the two decode the same
translation, and how fast each decodes.

Random OPUS-MT-shaped Marian models (tests/helpers/marian.py: swish, scale_embedding, pad = start token,
eos = 0, a random final_logits_bias with a bias towards ``</s>`` so that translations end on their own)
are copied into our model; both decode the same random, right-padded sources (transformers one sentence
at a time, each with our length limit ``source length + extra_len``), in float32, with
``no_repeat_ngram_size=2`` (random weights otherwise repeat one token).

* ``agreement``: the share of sentences both decode to the same ids, for greedy search, for beam search
  under the same scoring (ours ``alpha=0``, theirs ``length_penalty=0, early_stopping=True``: both rank
  by log-probability and stop at ``beam_size`` finished hypotheses), and for beam search with each side's
  default length normalisation (ours GNMT's ``((5 + |Y|) / 6) ** 0.6``, theirs ``|Y| ** 1.0`` with
  ``early_stopping=False``). Also counted: the sentences where transformers' best hypothesis ends before
  the length limit (at the limit transformers forces ``</s>`` with log-probability 0 where we add the
  model's log P(</s>), the one scoring step that differs under the same settings).
* ``speed``: greedy and beam-4 decoding of one batch of equal-length sources, forced to the full length
  (``</s>`` is penalised), ours batched on the KV cache against transformers' ``generate`` on the same
  batch; medians of the repeats, as target tokens per second and as a ratio.

Run (``--quick`` is a smoke run of well under a minute; needs the ``hf`` extra)::

    python benchmarks/marian.py [--quick] [--threads N] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core_layers import machine_info  # noqa: E402

from lightning_tf.text import Seq2SeqTransformer  # noqa: E402
from tests.helpers.marian import LARGER, SMALL, padded_sources, random_marian  # noqa: E402

V = 61
# (size, share and tie the embeddings, bias towards </s>): the bias ends a fair share of sentences early
MODELS = {"small": (SMALL, True, 1.0), "larger": (LARGER, True, 4.0), "small-untied": (SMALL, False, 3.0)}


def _rows(ids: torch.Tensor, eos: int = 0) -> list[list[int]]:
    return [row[: row.index(eos) + 1] if eos in row else row for row in ids.tolist()]


def _reference(ref: Any, src: torch.Tensor, mask: torch.Tensor, limits: list[int], **kw: Any) -> list[list[int]]:
    out = []
    for b, limit in enumerate(limits):
        n = int(mask[b].sum())
        with torch.no_grad():
            ids = ref.generate(
                input_ids=src[b : b + 1, :n],
                attention_mask=mask[b : b + 1, :n],
                max_new_tokens=limit,
                do_sample=False,
                bad_words_ids=[[V - 1]],
                forced_eos_token_id=0,
                no_repeat_ngram_size=2,
                **kw,
            )[0, 1:].tolist()
        out.append(ids[: ids.index(0) + 1] if 0 in ids else ids)
    return out


SETTINGS = {
    "greedy": (dict(beam_size=1), dict(num_beams=1)),
    "beam 4, the same scoring": (
        dict(beam_size=4, alpha=0.0),
        dict(num_beams=4, length_penalty=0.0, early_stopping=True),
    ),
    "beam 4, each side's default": (
        dict(beam_size=4, alpha=0.6),
        dict(num_beams=4, length_penalty=1.0, early_stopping=False),
    ),
}


def agreement(seeds: int, batch: int) -> list[dict[str, Any]]:
    """Per setting: sentences, identical outputs, and those among the sentences transformers ends early."""
    counts = {name: {"sentences": 0, "same": 0, "ended": 0, "same_ended": 0} for name in SETTINGS}
    for name, (size, share, eos_bias) in MODELS.items():
        for seed in range(seeds):
            ref = random_marian(V, size, share=share, tie=share, seed=seed, eos_bias=eos_bias)
            ours = Seq2SeqTransformer.from_marian(ref, extra_len=30).eval()
            lengths = torch.randint(2, 17, (batch,), generator=torch.Generator().manual_seed(seed)).tolist()
            src, mask = padded_sources(V, lengths, seed=100 + seed)
            limits = ours.max_new_tokens(src).tolist()
            for setting, (kw_ours, kw_ref) in SETTINGS.items():
                got = _rows(ours.generate(src, no_repeat_ngram_size=2, **kw_ours))
                expected = _reference(ref, src, mask, limits, **kw_ref)
                c = counts[setting]
                for g, e, lim in zip(got, expected, limits, strict=True):
                    c["sentences"] += 1
                    c["same"] += g == e
                    if len(e) < lim:
                        c["ended"] += 1
                        c["same_ended"] += g == e
        print(f"  agreement: {name} done", flush=True)
    return [{"setting": k, **v} for k, v in counts.items()]


def _median_time(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def speed(size: dict[str, int], vocab: int, batch: int, src_len: int, new_tokens: int, repeats: int) -> list[dict]:
    """Decoding time of one batch, forced to ``new_tokens`` tokens per sentence, ours against theirs."""
    ref = random_marian(vocab, size, seed=0, eos_bias=-1e4)  # </s> never wins before the limit
    ours = Seq2SeqTransformer.from_marian(ref, extra_len=new_tokens - src_len).eval()
    src, mask = padded_sources(vocab, [src_len] * batch, seed=1)
    assert ours.max_new_tokens(src).tolist() == [new_tokens] * batch
    rows = []
    for beam in (1, 4):

        def run_ours() -> torch.Tensor:
            return ours.generate(src, beam_size=beam, alpha=0.0)

        def run_ref() -> torch.Tensor:
            with torch.no_grad():
                scoring = dict(length_penalty=0.0, early_stopping=True) if beam > 1 else {}
                return ref.generate(
                    input_ids=src,
                    attention_mask=mask,
                    max_new_tokens=new_tokens,
                    do_sample=False,
                    num_beams=beam,
                    bad_words_ids=[[vocab - 1]],
                    forced_eos_token_id=0,
                    **scoring,
                )

        ours_ids, ref_ids = run_ours(), run_ref()  # warm-up, and the check that both ran to the full length
        assert ours_ids.shape[1] == new_tokens and ref_ids.shape[1] == new_tokens + 1, (ours_ids.shape, ref_ids.shape)
        t_ours, t_ref = _median_time(run_ours, repeats), _median_time(run_ref, repeats)
        tokens = batch * new_tokens
        rows.append(
            {
                "search": "greedy" if beam == 1 else f"beam {beam}",
                "tokens": tokens,
                "ours_tok_s": tokens / t_ours,
                "transformers_tok_s": tokens / t_ref,
                "ratio": t_ref / t_ours,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: one seed, a small speed model")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of each speed measurement (median)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    info = machine_info(torch.device("cpu"))
    import transformers

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {info}; transformers {transformers.__version__}; load average at start: {load:.1f}")
    agree = agreement(seeds=1 if args.quick else 4, batch=8 if args.quick else 16)
    print("\n| setting | sentences | same ids | transformers ends before the limit | same ids there |")
    print("|---|---:|---:|---:|---:|")
    for r in agree:
        print(
            f"| {r['setting']} | {r['sentences']} | {r['same']} ({100 * r['same'] / r['sentences']:.0f}%) | "
            f"{r['ended']} | {r['same_ended']} ({100 * r['same_ended'] / max(r['ended'], 1):.0f}%) |"
        )
    size = SMALL if args.quick else dict(d_model=256, encoder_layers=3, decoder_layers=3, heads=4, ffn=1024)
    vocab = V if args.quick else 8000
    fast = speed(
        size,
        vocab,
        batch=4 if args.quick else 16,
        src_len=8 if args.quick else 20,
        new_tokens=12 if args.quick else 40,
        repeats=1 if args.quick else args.repeats,
    )
    print(
        f"\nspeed: d_model {size['d_model']}, {size['encoder_layers']}+{size['decoder_layers']} layers, "
        f"vocabulary {vocab}, {args.threads} thread(s)"
    )
    print("| search | target tokens | ours tok/s | transformers tok/s | ours / transformers speed |")
    print("|---|---:|---:|---:|---:|")
    for r in fast:
        print(
            f"| {r['search']} | {r['tokens']} | {r['ours_tok_s']:.0f} | {r['transformers_tok_s']:.0f} | "
            f"{r['ratio']:.2f} |"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": info, "agreement": agree, "speed": fast}, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
