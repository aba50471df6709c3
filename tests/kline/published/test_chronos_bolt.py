"""Chronos-Bolt on the core against ``chronos-forecasting``'s model with the same random weights: quantile
forecasts within 1e-5 on the same contexts (padded, with gaps, constant, shorter than a patch, empty), the
pipeline's roll-out past the model's horizon and its truncation of long contexts, the training loss; the
published checkpoints' folders and an export back to them; what is refused. The reference is small (3 heads of 12
channels in a width of 32, 8 relative buckets up to distance 20, patches of 4) and every tensor is perturbed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_tf.kline.published import CHRONOS_BOLT_PRESETS, ChronosBolt, ChronosBoltConfig
from tests.helpers.published import chronos_reference, chronos_t5_config, random_chronos_bolt

FEED_FORWARDS = {"relu": {}, "gated-gelu": dict(feed_forward_proj="gated-gelu")}


def _ours(ref: Any) -> ChronosBolt:
    ours = ChronosBolt(ChronosBoltConfig.from_reference(ref.config.to_dict()))
    ours.load_reference_weights(ref.state_dict())
    return ours.eval()


@pytest.fixture(scope="module", params=list(FEED_FORWARDS))
def pair(request: pytest.FixtureRequest) -> tuple[Any, ChronosBolt]:
    ref = random_chronos_bolt(**FEED_FORWARDS[request.param])
    return ref, _ours(ref)


def _contexts(L: int = 50) -> torch.Tensor:
    """Five series of ``L`` steps: plain, left-padded (a shorter series), with a gap, constant, and one
    observed value."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, L, generator=g).cumsum(1) * 3 + 10
    x[1, :13] = float("nan")
    x[2, 20:27] = float("nan")
    x[3] = 5.0
    x[4, :-1] = float("nan")
    return x


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Within 1e-5 of the forecasts' scale."""
    error = ((got - want).abs().max() / want.abs().max()).item()
    assert error < 1e-5, error


# ---------------------------------------------------------------------------------------------- parity


@pytest.mark.parametrize("L", [50, 48, 3, 64])
def test_quantiles_equal_the_references(pair: tuple, L: int) -> None:
    """Lengths: not a whole number of patches, whole, shorter than one patch, the model's context_length."""
    ref, ours = pair
    x = _contexts(max(L, 30))[:, -L:]
    with torch.no_grad():
        want = ref(context=x).quantile_preds  # (B, Q, F)
        got = ours(x)  # (B, F, Q)
    assert got.shape == (5, 8, 5)
    _close(got.transpose(1, 2), want)
    assert want.std() > 1.0 and not torch.allclose(want[0], want[1], atol=1e-2)


def test_an_empty_series_and_padding_behave_as_the_references(pair: tuple) -> None:
    ref, ours = pair
    x = _contexts()
    x[0] = float("nan")  # nothing observed: only the REG token is seen
    with torch.no_grad():
        _close(ours(x).transpose(1, 2), ref(context=x).quantile_preds)
        # left padding is what a shorter series is: the same forecast as the series alone
        alone = ours(x[1:2, 13:])
        torch.testing.assert_close(ours(x)[1:2], alone, atol=1e-4 * alone.abs().max().item(), rtol=0)


def test_the_pipelines_rollout_and_truncation_are_the_references(pair: tuple) -> None:
    ref, ours = pair
    pipeline = chronos_reference().ChronosBoltPipeline(ref)
    x = _contexts(100)  # longer than context_length (64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = pipeline.predict(x, prediction_length=20)  # (B, Q, 20): three passes
    got = ours.forecast(x, 20, truncate=True)
    assert got.shape == (5, 20, 5)
    _close(got.transpose(1, 2), want)
    _close(ours.forecast(x[:, -64:]).transpose(1, 2), pipeline.predict(x[:, -64:]))


def test_the_training_loss_is_the_references(pair: tuple) -> None:
    ref, ours = pair
    x = _contexts()
    target = torch.randn(5, 6) * 3 + 10  # shorter than the horizon: padded and left out
    target[0, 2] = float("nan")
    with torch.no_grad():
        want = ref(context=x, target=target).loss
        got = ours.loss(x, target)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match=r"target of 9 steps is longer than prediction_length \(8\)"):
        ours.loss(x, torch.randn(5, 9))


# ---------------------------------------------------------------------------------------------- it can fail


@pytest.mark.parametrize("mutation", ["a weight", "the bucket count", "the encoder's final norm", "the REG token"])
def test_the_parity_check_fails_on_a_mutated_model(mutation: str) -> None:
    ref = random_chronos_bolt()
    ours = _ours(ref)
    if mutation == "a weight":
        with torch.no_grad():
            ours.encoder.layers[1].ff.linear2.weight[0, 0] += 0.5
    elif mutation == "the bucket count":
        ours.encoder.pos.relative.n_buckets = 6  # the same table read with another bucketing
    elif mutation == "the encoder's final norm":
        ours.encoder.norm = torch.nn.Identity()
    else:
        ours.config = ours.config.replace(use_reg_token=False)
    x = _contexts()
    with torch.no_grad():
        want, got = ref(context=x).quantile_preds, ours(x).transpose(1, 2)
    assert ((got - want).abs().max() / want.abs().max()).item() > 1e-4


# ---------------------------------------------------------------------------------------------- folders


def test_from_pretrained_reads_the_references_folder_and_to_chronos_bolt_writes_one(tmp_path: Path) -> None:
    ref = random_chronos_bolt(**FEED_FORWARDS["gated-gelu"])
    ref.save_pretrained(tmp_path / "ref")
    ours = ChronosBolt.from_pretrained(tmp_path / "ref")
    assert not ours.training and ours.config.activation == "geglu"
    x = _contexts()
    with torch.no_grad():
        want = ref(context=x).quantile_preds
        _close(ours(x).transpose(1, 2), want)
    out = ours.to_chronos_bolt(tmp_path / "ours")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipeline = chronos_reference().ChronosBoltPipeline.from_pretrained(out)
    _close(pipeline.predict(x), want)
    assert ChronosBoltConfig.from_reference(json.loads((out / "config.json").read_text())) == ours.config
    back = ChronosBolt.from_pretrained(out)
    for a, b in zip(back.state_dict().values(), ours.state_dict().values(), strict=True):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------- what it knows


def test_presets_have_the_published_parameter_counts() -> None:
    """Chronos-Bolt tiny 9M, mini 21M, small 48M, base 205M parameters."""
    counts = {}
    for name, config in CHRONOS_BOLT_PRESETS.items():
        with torch.device("meta"):
            counts[name] = round(sum(p.numel() for p in ChronosBolt(config).parameters()) / 1e6)
    assert counts == {"tiny": 9, "mini": 21, "small": 48, "base": 205}


def test_layer_depths_name_the_blocks() -> None:
    ours = ChronosBolt(ChronosBoltConfig.from_reference(chronos_t5_config().to_dict()))
    depths = {name: ours.layer_depth(name) for name, _ in ours.named_parameters()}
    assert depths["patch_embed.hidden.weight"] == 0 and depths["encoder.pos.relative.embedding.weight"] == 0
    assert depths["encoder.layers.1.self_attn.qkv_proj.weight"] == 2
    assert depths["decoder.layers.0.cross_attn.kv_proj.weight"] == 3 == depths["head.out.weight"] == ours.n_depths
    assert set(depths.values()) == {0, 1, 2, 3}


# ---------------------------------------------------------------------------------------------- refused


def test_bad_contexts_are_one_line() -> None:
    ours = ChronosBolt(ChronosBoltConfig.from_reference(chronos_t5_config().to_dict())).eval()
    cases = [
        (
            torch.randn(2, 65),
            r"a context of 65 steps is longer than the model's context_length \(64\); pass the last 64, or truncate=True",
        ),
        (torch.randn(2, 3, 4), r"context must have shape \(B, L\) or \(L,\) with L >= 1, got \(2, 3, 4\)"),
        (torch.randn(2, 0), r"context must have shape \(B, L\) or \(L,\) with L >= 1, got \(2, 0\)"),
    ]
    for context, message in cases:
        with pytest.raises(ValueError, match=message) as info:
            ours.forecast(context)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"horizon must be positive, got 0"):
        ours.forecast(torch.randn(10), 0)
    assert ours.forecast(torch.randn(10)).shape == (1, 8, 5)


def test_configs_of_other_architectures_are_one_line(tmp_path: Path) -> None:
    kronos = {"s1_bits": 10, "s2_bits": 10, "n_layers": 8, "d_model": 512, "learn_te": True}
    original = {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        "chronos_config": {"n_tokens": 4096},
    }
    cases = [
        (kronos, r"config.json: not a Chronos-Bolt config \(keys \['d_model', 'learn_te', 'n_layers'"),
        (
            original,
            r"not a Chronos-Bolt config \(architectures \['T5ForConditionalGeneration'\]\); expected architectures \['ChronosBoltModelForForecasting'\]",
        ),
        (
            {**chronos_t5_config().to_dict(), "feed_forward_proj": "gated-tanh"},
            r"feed_forward_proj 'gated-tanh' is not one of",
        ),
    ]
    for i, (config, message) in enumerate(cases):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match=message) as info:
            ChronosBolt.from_pretrained(folder)
        assert "\n" not in str(info.value)
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "config.json").write_text(chronos_t5_config().to_json_string())
    with pytest.raises(
        FileNotFoundError,
        match=r"Chronos-Bolt model folder .*ok has none of \['model.safetensors', 'pytorch_model.bin'\]",
    ):
        ChronosBolt.from_pretrained(tmp_path / "ok")


def test_an_unknown_hub_name_offline_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ValueError,
        match=r"Chronos-Bolt model 'amazon/chronos-bolt-nano': HF_HUB_OFFLINE=1 and it is not in the Hugging Face cache",
    ) as info:
        ChronosBolt.from_pretrained("amazon/chronos-bolt-nano", cache_dir=tmp_path)
    assert "\n" not in str(info.value)


def test_a_hub_name_in_the_cache_loads_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's cache layout (refs/main naming a snapshot folder) is read without a network."""
    ref = random_chronos_bolt()
    repo = tmp_path / "models--amazon--chronos-bolt-test"
    snapshot = repo / "snapshots" / ("0" * 40)
    ref.save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ours = ChronosBolt.from_pretrained("amazon/chronos-bolt-test", cache_dir=tmp_path)
    x = _contexts()
    with torch.no_grad():
        _close(ours(x).transpose(1, 2), ref(context=x).quantile_preds)


def test_weights_that_do_not_fit_are_one_line() -> None:
    ref = random_chronos_bolt()
    ours = ChronosBolt(ChronosBoltConfig.from_reference(chronos_t5_config().to_dict()))
    state = dict(ref.state_dict())
    del state["encoder.final_layer_norm.weight"]
    state["encoder.block.9.layer.0.layer_norm.weight"] = torch.ones(32)
    with pytest.raises(
        ValueError,
        match=r"lacks 1 tensors of a Chronos-Bolt model .* and holds 1 it does not know \(\['encoder.block.9",
    ):
        ours.load_reference_weights(state)
    wide = ChronosBolt(ChronosBoltConfig.from_reference(chronos_t5_config(d_ff=64).to_dict()))
    with pytest.raises(
        ValueError, match=r"weights: patch_embed.hidden.weight has shape \(48, 8\) where the config gives \(64, 8\)"
    ):
        wide.load_reference_weights(dict(ref.state_dict()))
