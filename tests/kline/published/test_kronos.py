"""Kronos on the core against the reference code (the ``kronos-finance`` package's copy of
github.com/shiyu-coder/Kronos) with the same random weights, in the reference's own configuration: the same
tokens for the same bars, logits within 1e-5, the same sampled forecasts under the same seed through the
reference's ``KronosPredictor``; the published checkpoints' folders and an export back to them; what is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_tf.core import RotaryEmbedding
from lightning_tf.kline.published import (
    KRONOS_PRESETS,
    Kronos,
    KronosConfig,
    KronosTokenizerConfig,
    calendar_stamps,
    token_loss,
)
from tests.helpers.published import KRONOS_MODEL, KRONOS_TOKENIZER, kronos_reference, random_kronos

B, L = 3, 20


def _ours(ref_tok: Any, ref_model: Any, max_context: int = 24, **config: Any) -> Kronos:
    tokenizer_config = KronosTokenizerConfig.from_reference({**KRONOS_TOKENIZER, **config.get("tokenizer", {})})
    model_config = KronosConfig.from_reference({**KRONOS_MODEL, **config.get("model", {})})
    ours = Kronos(model_config, tokenizer_config, max_context=max_context)
    ours.load_reference_weights(ref_model.state_dict(), ref_tok.state_dict())
    return ours.eval()


def _stamps(n: int, batch: int = B, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, k, (batch, n), generator=g) for k in (60, 24, 7, 32, 13)], -1)


def _bars(n: int, batch: int = B, seed: int = 0) -> torch.Tensor:
    """Random-walk OHLCV and amount bars around 50."""
    g = torch.Generator().manual_seed(seed)
    close = 50 + torch.randn(batch, n, generator=g).cumsum(1)
    spread = torch.rand(batch, n, 2, generator=g)
    open_ = close + torch.randn(batch, n, generator=g) * 0.3
    high = torch.maximum(open_, close) + spread[..., 0]
    low = torch.minimum(open_, close) - spread[..., 1]
    volume = 1e4 * (1 + torch.rand(batch, n, generator=g))
    return torch.stack((open_, high, low, close, volume, volume * close), -1)  # (B, n, 6)


@pytest.fixture(scope="module")
def pair() -> tuple[Any, Any, Kronos]:
    ref_tok, ref_model = random_kronos()
    return ref_tok, ref_model, _ours(ref_tok, ref_model)


def _normalised(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(1, keepdim=True)) / (x.std(1, unbiased=False, keepdim=True) + 1e-5)


# ---------------------------------------------------------------------------------------------- parity


def test_the_tokenizer_gives_the_references_tokens_and_reconstruction(pair: tuple) -> None:
    ref_tok, _, ours = pair
    x = _normalised(_bars(L)).clamp(-5, 5)
    with torch.no_grad():
        want = ref_tok.encode(x, half=True)
        got = ours.tokenizer.encode(x)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert want[0].unique().numel() > 4 and want[1].unique().numel() > 4  # not a constant token
        torch.testing.assert_close(ours.tokenizer.decode(*got), ref_tok.decode(want, half=True), atol=1e-5, rtol=0)
        (ref_pre, ref_full), _, ref_q, _ = ref_tok(x)
        pre, full, q = ours.tokenizer(x)
    torch.testing.assert_close(q, ref_q, atol=1e-6, rtol=0)
    torch.testing.assert_close(pre, ref_pre, atol=1e-5, rtol=0)
    torch.testing.assert_close(full, ref_full, atol=1e-5, rtol=0)


def _tokens(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 16, (B, L), generator=g), torch.randint(0, 16, (B, L), generator=g), _stamps(L, seed=seed)


def test_the_models_logits_equal_the_references(pair: tuple) -> None:
    _, ref_model, ours = pair
    s1, s2, stamp = _tokens()
    target = torch.randint(0, 16, (B, L))
    with torch.no_grad():
        ref_s1, _ = ref_model.decode_s1(s1, s2, stamp.float())
        torch.testing.assert_close(ours.model.s1_logits(ours.model.hidden(s1, s2, stamp)), ref_s1, atol=1e-5, rtol=0)
        assert ref_s1.std() > 0.5
        ref_out = ref_model(s1, s2, stamp.float(), use_teacher_forcing=True, s1_targets=target)
        out = ours.model(s1, s2, stamp, target)
        torch.testing.assert_close(out[0], ref_out[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(out[1], ref_out[1], atol=1e-5, rtol=0)
        # without targets both draw the coarse tokens that condition the fine head, in the same way
        torch.manual_seed(5)
        ref_drawn = ref_model(s1, s2, stamp.float())
        torch.manual_seed(5)
        drawn = ours.model(s1, s2, stamp)
        torch.testing.assert_close(drawn[1], ref_drawn[1], atol=1e-5, rtol=0)
        # and without stamps
        torch.testing.assert_close(ours.model.hidden(s1, s2), ref_model.decode_s1(s1, s2)[1], atol=1e-5, rtol=0)


def test_the_dependency_layer_rotates_by_its_own_heads_when_the_model_has_others() -> None:
    """Kronos-small and -base have 8 and 16 heads in their blocks and 4 in the dependency layer: the fine head's
    logits on whole sequences (training) rotate by the dependency layer's head dimension, as the reference's."""
    sizes = dict(d_model=64, n_heads=8, ff_dim=64, n_layers=1)
    ref_tok, ref_model = random_kronos(model=sizes)
    ours = _ours(ref_tok, ref_model, model=sizes)
    s1, s2, stamp = _tokens()
    target = torch.randint(0, 16, (B, L))
    with torch.no_grad():
        ref_out = ref_model(s1, s2, stamp.float(), use_teacher_forcing=True, s1_targets=target)
        out = ours.model(s1, s2, stamp, target)
    torch.testing.assert_close(out[0], ref_out[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1], ref_out[1], atol=1e-5, rtol=0)


def test_long_contexts_need_the_references_float32_rope_angles() -> None:
    """With the published head dimension (64) and 1024 positions, RoPE angles computed in float64 would move the
    logits by more than 1e-5; the float32 angles the model was trained with give the reference's."""
    sizes = dict(d_model=128, n_heads=2, ff_dim=64, n_layers=1)
    ref_tok, ref_model = random_kronos(model=sizes)
    ours = _ours(ref_tok, ref_model, model=sizes)
    s1, s2 = torch.randint(0, 16, (1, 1024)), torch.randint(0, 16, (1, 1024))
    with torch.no_grad():
        want = ref_model.decode_s1(s1, s2)[0]
        torch.testing.assert_close(ours.model.s1_logits(ours.model.hidden(s1, s2)), want, atol=1e-5, rtol=0)
        ours.model.rope = RotaryEmbedding(64)  # float64 angles
        assert (ours.model.s1_logits(ours.model.hidden(s1, s2)) - want).abs().max() > 1e-5


def test_training_mode_logits_equal_the_references_with_dropout_off() -> None:
    """In training the dependency layer is causal (the reference's is_causal=self.training)."""
    ref_tok, ref_model = random_kronos(
        model=dict(ffn_dropout_p=0.0, attn_dropout_p=0.0, resid_dropout_p=0.0, token_dropout_p=0.0)
    )
    ours = _ours(
        ref_tok, ref_model, model=dict(ffn_dropout_p=0.0, attn_dropout_p=0.0, resid_dropout_p=0.0, token_dropout_p=0.0)
    )
    s1, s2, stamp = _tokens()
    target = torch.randint(0, 16, (B, L))
    ref_model.train(), ours.model.train()
    ref_out = ref_model(s1, s2, stamp.float(), use_teacher_forcing=True, s1_targets=target)
    out = ours.model(s1, s2, stamp, target)
    torch.testing.assert_close(out[1], ref_out[1], atol=1e-5, rtol=0)
    ours.model.eval()
    assert not torch.allclose(ours.model(s1, s2, stamp, target)[1], out[1], atol=1e-3)  # eval: not causal
    # the reference's training loss on the next tokens
    head = ref_model.head
    want = head.compute_loss(ref_out[0][:, :-1], ref_out[1][:, :-1], s1[:, 1:], s2[:, 1:])[0]
    torch.testing.assert_close(
        token_loss(out[0][:, :-1], out[1][:, :-1], s1[:, 1:], s2[:, 1:]), want, atol=1e-5, rtol=0
    )


def _times(n: int, batch: int = B, seed: int = 0) -> list[pd.DatetimeIndex]:
    """``batch`` lists of ``n`` random wall-clock times (any minute, hour, day and month)."""
    g = torch.Generator().manual_seed(seed)
    minutes = torch.randint(0, 60 * 24 * 365 * 3, (batch, n), generator=g)
    return [pd.Timestamp("2022-01-01") + pd.to_timedelta(row.tolist(), unit="min") for row in minutes]


def _predict_reference(
    ref_tok: Any, ref_model: Any, bars: torch.Tensor, times: list[pd.DatetimeIndex], F: int, W: int, **kw: Any
) -> np.ndarray:
    """The reference ``KronosPredictor.predict_batch`` on DataFrames of the bars and their times -> (B, F, 6)."""
    ref = kronos_reference()
    predictor = ref.KronosPredictor(ref_model, ref_tok, device="cpu", max_context=W)
    names = ["open", "high", "low", "close", "volume", "amount"][: bars.shape[-1]]
    n = bars.shape[1]
    frames = [pd.DataFrame(bars[b].double().numpy(), columns=names) for b in range(bars.shape[0])]
    xs = [pd.Series(t[:n]) for t in times]
    ys = [pd.Series(t[n:]) for t in times]
    out = predictor.predict_batch(frames, xs, ys, pred_len=F, verbose=False, **kw)
    return np.stack([o.to_numpy() for o in out])


CASES = {
    # L, F, max_context, columns, samples, settings
    "the window grows": (20, 4, 32, 6, 2, dict(top_p=0.9)),
    "the window slides": (20, 12, 24, 6, 3, dict(top_k=3)),
    "a longer context, truncated": (30, 8, 24, 6, 2, dict(top_p=0.5, T=0.7)),
    "without amount": (16, 5, 32, 5, 1, dict(top_p=1.0)),
    "without volume": (16, 5, 32, 4, 2, dict(top_p=0.8, T=1.3)),
}


@pytest.mark.parametrize("case", CASES)
def test_forecasts_equal_the_reference_predictors_under_the_same_seed(pair: tuple, case: str) -> None:
    ref_tok, ref_model, _ = pair
    n, F, W, C, S, kw = CASES[case]
    ours = _ours(ref_tok, ref_model, max_context=W)
    bars = _bars(n)[..., :C]
    times = _times(n + F)
    stamps = torch.stack([calendar_stamps(t) for t in times])  # (B, n + F, 5)
    torch.manual_seed(11)
    want = _predict_reference(ref_tok, ref_model, bars, times, F, W, sample_count=S, **kw)
    torch.manual_seed(11)
    got = ours.forecast(
        bars,
        stamps[:, :n],
        stamps[:, n:],
        samples=S,
        temperature=kw.get("T", 1.0),
        top_k=kw.get("top_k", 0),
        top_p=kw.get("top_p", 0.9),
        truncate=n > W,
    )
    assert got.shape == (B, S, F, 6)
    mean = got.mean(1).double().numpy()
    # float32 rounding only: within 1e-5 of each column's scale (a different token moves a bar by percents)
    error = (np.abs(mean - want) / np.abs(want).max(axis=(0, 1))).max()
    assert error < 1e-5, error
    assert not np.allclose(want[:, 1:], want[:, :-1], rtol=1e-3)  # forecasts that move


def test_the_samples_differ_and_a_generator_repeats_them(pair: tuple) -> None:
    _, _, ours = pair
    bars, stamps = _bars(12, 2), _stamps(16, 2)

    def run(seed: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return ours.forecast(bars, stamps[:, :12], stamps[:, 12:], samples=4, generator=generator)

    a = run(3)
    assert torch.equal(a, run(3)) and not torch.equal(a, run(4))
    assert not torch.allclose(a[:, 0], a[:, 1])  # four different draws per series


def test_a_generator_per_series_draws_each_series_as_it_draws_alone(pair: tuple) -> None:
    """With one generator per series, a series' draws depend on its bars and generator alone: in a batch of three
    they equal the series forecast on its own; one generator for the batch draws the second series otherwise."""
    _, _, ours = pair
    bars, stamps = _bars(12), _stamps(16)

    def run(rows: list[int], seeds: list[int]) -> torch.Tensor:
        generators = [torch.Generator().manual_seed(k) for k in seeds]
        return ours.forecast(bars[rows], stamps[rows, :12], stamps[rows, 12:], samples=3, generator=generators)

    together = run([0, 1, 2], [7, 7, 7])
    for b in range(B):
        torch.testing.assert_close(together[b], run([b], [7])[0], rtol=1e-5, atol=1e-5)
    shared = ours.forecast(bars, stamps[:, :12], stamps[:, 12:], samples=3, generator=torch.Generator().manual_seed(7))
    assert not torch.allclose(shared[1], together[1])  # one stream for the batch: a series' draws depend on it
    with pytest.raises(ValueError, match=r"generator: one for the batch or one per series \(3\), got 2"):
        run([0, 1, 2], [1, 2])
    with pytest.raises(ValueError, match="generator: a torch.Generator or a list of them, got int"):
        ours.forecast(bars, stamps[:, :12], stamps[:, 12:], generator=7)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- it can fail


@pytest.mark.parametrize("mutation", ["a weight", "the final norm", "the dependency layer's norm", "the rope angles"])
def test_the_parity_checks_fail_on_a_mutated_model(pair: tuple, mutation: str) -> None:
    ref_tok, ref_model, _ = pair
    ours = _ours(ref_tok, ref_model)
    if mutation == "a weight":
        with torch.no_grad():
            ours.model.blocks[1].ff.linear2.weight[0, 0] += 0.5
    elif mutation == "the final norm":
        ours.model.norm = torch.nn.Identity()
    elif mutation == "the dependency layer's norm":
        ours.model.dep_layer.norm = torch.nn.Identity()
    else:
        ours.model.rope.precision = "float64"
        ours.model.rope.base = 5000.0
    s1, s2, stamp = _tokens()
    target = torch.randint(0, 16, (B, L))
    with torch.no_grad():
        want = ref_model(s1, s2, stamp.float(), use_teacher_forcing=True, s1_targets=target)
        got = ours.model(s1, s2, stamp, target)
    assert not (torch.allclose(got[0], want[0], atol=1e-5) and torch.allclose(got[1], want[1], atol=1e-5))


# ---------------------------------------------------------------------------------------------- folders


def test_from_pretrained_reads_the_references_folders(tmp_path: Path, pair: tuple) -> None:
    ref_tok, ref_model, ours = pair
    ref_tok.save_pretrained(tmp_path / "tok")
    ref_model.save_pretrained(tmp_path / "model")
    loaded = Kronos.from_pretrained(tmp_path / "model", tmp_path / "tok", max_context=24)
    assert not loaded.training and loaded.max_context == 24
    for a, b in zip(loaded.state_dict().values(), ours.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_to_kronos_writes_what_the_reference_loads_and_what_we_read_back(tmp_path: Path, pair: tuple) -> None:
    _, _, ours = pair
    out = ours.to_kronos(tmp_path / "export")
    ref = kronos_reference()
    ref_tok = ref.KronosTokenizer.from_pretrained(out / "tokenizer").eval()
    ref_model = ref.Kronos.from_pretrained(out / "model").eval()
    for name, tensor in ref_model.state_dict().items():  # buffers too: the RoPE frequencies
        assert torch.equal(tensor, ours.reference_state_dicts()[0][name]), name
    x = _normalised(_bars(L)).clamp(-5, 5)
    s1, s2, stamp = _tokens()
    with torch.no_grad():
        assert torch.equal(ref_tok.encode(x, half=True)[0], ours.tokenizer.encode(x)[0])
        want = ref_model.decode_s1(s1, s2, stamp.float())[0]
        torch.testing.assert_close(ours.model.s1_logits(ours.model.hidden(s1, s2, stamp)), want, atol=1e-5, rtol=0)
    back = Kronos.from_pretrained(out)
    assert back.max_context == ours.max_context
    assert json.loads((out / "model" / "config.json").read_text()) == KRONOS_MODEL
    for a, b in zip(back.state_dict().values(), ours.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_fixed_calendar_tables_load_and_export() -> None:
    ref_tok, ref_model = random_kronos(model=dict(learn_te=False))
    ours = _ours(ref_tok, ref_model, model=dict(learn_te=False))
    assert not ours.model.time_embed.minute.weight.requires_grad
    s1, s2, stamp = _tokens()
    with torch.no_grad():
        want = ref_model.decode_s1(s1, s2, stamp.float())[0]
        torch.testing.assert_close(ours.model.s1_logits(ours.model.hidden(s1, s2, stamp)), want, atol=1e-5, rtol=0)
    assert "time_emb.minute_embed.emb.weight" in ours.reference_state_dicts()[0]


# ---------------------------------------------------------------------------------------------- what it knows


def test_calendar_stamps_are_the_references_fields() -> None:
    times = pd.to_datetime(["2024-03-15 13:45", "2024-12-31 00:00", "2025-01-06 09:30"])
    assert calendar_stamps(times).tolist() == [[45, 13, 4, 15, 3], [0, 0, 1, 31, 12], [30, 9, 0, 6, 1]]
    ref = kronos_reference()
    assert calendar_stamps(times).tolist() == ref.calc_time_stamps(pd.Series(times)).to_numpy().tolist()


def test_presets_have_the_published_parameter_counts() -> None:
    """Kronos-mini 4.1M, -small 24.7M, -base 102.3M parameters (the model; the tokenizers are about 4M)."""
    counts = {}
    for name, (model, tokenizer, _) in KRONOS_PRESETS.items():
        with torch.device("meta"):
            k = Kronos(model, tokenizer)
        counts[name] = round(sum(p.numel() for p in k.model.parameters()) / 1e6, 1)
    assert counts == {"mini": 4.1, "small": 24.7, "base": 102.3}


def test_layer_depths_name_the_blocks(pair: tuple) -> None:
    _, _, ours = pair
    depths = {name: ours.layer_depth(name) for name, _ in ours.named_parameters()}
    assert depths["model.blocks.0.norm1.weight"] == 1 and depths["model.blocks.1.ff.linear2.weight"] == 2
    assert depths["model.embed.emb_s1.weight"] == 0 and depths["model.time_embed.hour.weight"] == 0
    assert depths["model.head.proj_s2.weight"] == 3 == ours.model.n_depths
    assert depths["tokenizer.embed.weight"] == 0
    assert set(depths.values()) == {0, 1, 2, 3}


# ---------------------------------------------------------------------------------------------- refused


def test_bad_inputs_are_one_line_each(pair: tuple) -> None:
    _, _, ours = pair
    bars, stamps = _bars(30), _stamps(40)
    cases = [
        (dict(bars=bars), r"a context of 30 bars is longer than the model's max_context \(24\); pass the last 24 bars"),
        (
            dict(bars=bars[:, :10], stamps=stamps[:, :10], future=stamps[:, :30]),
            r"a horizon of 30 bars is longer than the model's max_context \(24\)",
        ),
        (dict(bars=bars[..., :3]), r"bars must have shape \(B, L, C\) or \(L, C\) with C = 4, 5 or 6"),
        (dict(bars=bars.clone().index_fill_(1, torch.tensor([3]), float("nan"))), r"bars hold NaN or infinite values"),
        (
            dict(bars=bars[:, :10], stamps=stamps[:, :9]),
            r"stamps must have shape \(3, 10, 5\) to go with the bars, got \(3, 9, 5\)",
        ),
        (
            dict(bars=bars[:, :10], stamps=stamps[:, :10] + torch.tensor([0, 0, 0, 0, 13])),
            r"stamps: month holds 13..25; expected 0..12",
        ),
        (dict(bars=bars[:, :10], stamps=stamps[:, :10], samples=0), r"samples \(0\) must be >= 1"),
        (dict(bars=bars[:, :10], stamps=stamps[:, :10], top_p=0.0), r"top_p \(0.0\) in \(0, 1\]"),
        (
            dict(bars=bars[:, :10], stamps=stamps[:, :10], future=stamps[:2, 10:14]),
            r"future_stamps must have shape \(3, F, 5\)",
        ),
    ]
    for kw, message in cases:
        b = kw.pop("bars")
        s = kw.pop("stamps", stamps[:, : b.shape[1]])
        f = kw.pop("future", stamps[:, 30:34])
        with pytest.raises(ValueError, match=message) as info:
            ours.forecast(b, s, f, **kw)
        assert "\n" not in str(info.value)


def test_folders_of_other_architectures_and_missing_tokenizers_are_one_line(tmp_path: Path, pair: tuple) -> None:
    ref_tok, ref_model, _ = pair
    ref_tok.save_pretrained(tmp_path / "tok")
    ref_model.save_pretrained(tmp_path / "model")
    (tmp_path / "bolt").mkdir()
    (tmp_path / "bolt" / "config.json").write_text(
        json.dumps({"architectures": ["ChronosBoltModelForForecasting"], "d_model": 8})
    )
    cases = [
        (dict(model=tmp_path / "model"), r"Kronos model '.*model': which tokenizer\? pass tokenizer=NAME_OR_FOLDER"),
        (
            dict(model=tmp_path / "tok", tokenizer=tmp_path / "tok"),
            r"not a Kronos model config \(keys .*; missing \[.*\]\); it is a Kronos tokenizer's",
        ),
        (
            dict(model=tmp_path / "model", tokenizer=tmp_path / "model"),
            r"not a Kronos tokenizer config .*; it is a Kronos model's: the tokenizer is another folder",
        ),
        (
            dict(model=tmp_path / "bolt", tokenizer=tmp_path / "tok"),
            r"config.json: not a Kronos model config \(architectures \['ChronosBoltModelForForecasting'\]",
        ),
        (dict(model=tmp_path / "nowhere" / "x", tokenizer=tmp_path / "tok"), r"Kronos model '.*x': no such folder"),
    ]
    for kw, message in cases:
        with pytest.raises((ValueError, FileNotFoundError), match=message) as info:
            Kronos.from_pretrained(**kw)
        assert "\n" not in str(info.value)


def test_an_unknown_hub_name_offline_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ValueError,
        match=r"Kronos model 'NeoQuasar/Kronos-nano': HF_HUB_OFFLINE=1 and it is not in the Hugging Face cache; fetch it once",
    ) as info:
        Kronos.from_pretrained("NeoQuasar/Kronos-nano", "NeoQuasar/Kronos-Tokenizer-base", cache_dir=tmp_path)
    assert "\n" not in str(info.value)
    # a published name resolves its tokenizer by itself: the model is the first thing missing
    with pytest.raises(ValueError, match=r"Kronos model 'NeoQuasar/Kronos-small': HF_HUB_OFFLINE=1"):
        Kronos.from_pretrained("NeoQuasar/Kronos-small", cache_dir=tmp_path)


def test_weights_of_another_size_are_one_line(tmp_path: Path, pair: tuple) -> None:
    ref_tok, ref_model, ours = pair
    state = dict(ref_model.state_dict())
    with pytest.raises(
        ValueError, match=r"model: lacks 1 tensors of a Kronos model \(\['norm.weight'\]\); is it another architecture"
    ):
        ours.load_reference_weights({k: v for k, v in state.items() if k != "norm.weight"}, ref_tok.state_dict())
    big = Kronos(
        KronosConfig.from_reference({**KRONOS_MODEL, "ff_dim": 64}),
        KronosTokenizerConfig.from_reference(KRONOS_TOKENIZER),
    )
    with pytest.raises(
        ValueError, match=r"model: blocks.0.ff.linear1.weight has shape \(96, 32\) where the config gives \(128, 32\)"
    ):
        big.load_reference_weights(state, ref_tok.state_dict())
    with pytest.raises(
        ValueError, match=r"the tokenizer's \(s1_bits, s2_bits\) \(4, 4\) differ from the model's \(10, 10\)"
    ):
        Kronos(KronosConfig(), KronosTokenizerConfig.from_reference(KRONOS_TOKENIZER))
