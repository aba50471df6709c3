"""Every YAML under configs/ parses, each experiment config runs one batch through the CLI, and each search
space (configs/search/, lightning-tf tune) fits the config its header names.

Configs that read files a user supplies (a WMT-style corpus, Tatoeba, CIFAR-10, Fashion-MNIST, ETTh1)
run on small stand-ins written by the test, with the data paths (and nothing about the model) pointed
at them: the paper-size models are built and take a training and a validation step as configured.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import ROOT, cli

# subprocesses, process groups or whole training runs: the integration tier (make test-integration)
pytestmark = pytest.mark.integration

CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))
EXPERIMENTS = [p for p in CONFIGS if p.parent.name not in ("trainer", "search")]  # search: lightning-tf tune's spaces
SEARCH_SPACES = [p for p in CONFIGS if p.parent.name == "search"]


def _name(path: Path) -> str:
    return path.relative_to(ROOT / "configs").as_posix()


# ------------------------------------------------------------------ stand-ins for the user's files
WORDS_EN = ["the", "cat", "dog", "sees", "a", "red", "house", "today", "small", "man", "buys", "car"]
WORDS_DE = ["die", "Katze", "Hund", "sieht", "ein", "rotes", "Haus", "heute", "klein", "Mann", "kauft", "Auto"]


def _sentence_pair(rng: random.Random) -> tuple[str, str]:
    idx = [rng.randrange(len(WORDS_EN)) for _ in range(rng.randint(3, 9))]
    return " ".join(WORDS_EN[i] for i in idx), " ".join(WORDS_DE[i] for i in idx)


def _aligned_corpus(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    rng = random.Random(0)
    for split, n in (("train", 300), ("valid", 16), ("test", 16)):
        pairs = [_sentence_pair(rng) for _ in range(n)]
        (tmp / f"{split}.en").write_text("\n".join(p[0] for p in pairs) + "\n")
        (tmp / f"{split}.de").write_text("\n".join(p[1] for p in pairs) + "\n")
    return [
        "--data.init_args.train_file",
        str(tmp / "train"),
        "--data.init_args.val_file",
        str(tmp / "valid"),
        "--data.init_args.test_file",
        str(tmp / "test"),
        "--data.init_args.vocab_size",
        "200",
        "--data.init_args.max_tokens",
        "256",
        "--data.init_args.num_workers",
        "0",
    ]


def _tatoeba(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    rng = random.Random(1)
    lines = [f"{en}\t{de}\tCC-BY 2.0 (France)" for en, de in (_sentence_pair(rng) for _ in range(300))]
    (tmp / "deu.txt").write_text("\n".join(lines) + "\n")
    return [
        "--data.init_args.train_file",
        str(tmp / "deu.txt"),
        "--data.init_args.n_val",
        "16",
        "--data.init_args.n_test",
        "16",
        "--data.init_args.vocab_size",
        "200",
        "--data.init_args.max_tokens",
        "256",
    ]


def _opus_mt(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A random tiny Marian model with its SentencePiece tokenizer in a local folder, in place of the hub's."""
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from tests.helpers.marian import write_marian_folder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = str(write_marian_folder(tmp / "opus-mt-tiny"))
    args = _tatoeba(tmp, monkeypatch)
    args = [a for i, a in enumerate(args) if "vocab_size" not in a and "vocab_size" not in args[i - 1]]
    return [*args, "--model.init_args.pretrained", folder, "--data.init_args.tokenizer_dir", folder]


def _cifar10(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from tests.helpers.vision import fake_cifar10

    fake_cifar10(tmp, monkeypatch)
    return [
        "--data.init_args.root",
        str(tmp),
        "--data.init_args.download",
        "false",
        "--data.init_args.batch_size",
        "4",
        "--data.init_args.num_workers",
        "0",
        "--data.init_args.val_fraction",
        "0.4",
    ]  # 20 stand-in training images: 2 per class held out


def _fashion_mnist(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from tests.helpers.vision import fake_mnist

    fake_mnist(tmp)  # flat idx files in root: laid out for torchvision by the DataModule
    return ["--data.init_args.root", str(tmp), "--data.init_args.download", "false", "--data.init_args.batch_size", "8"]


def _etth1(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from tests.helpers.kline import write_etth1

    return ["--data.init_args.path", str(write_etth1(tmp))]


def _timm_weights(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A small random timm ViT of the config's patch size saved as safetensors, in place of the hub's."""
    import torch
    from safetensors.torch import save_file
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(img_size=64, patch_size=16, embed_dim=64, depth=2, num_heads=1, num_classes=5)
    save_file({k: v.contiguous() for k, v in vit.state_dict().items()}, str(tmp / "vit.safetensors"))
    return ["--model.init_args.pretrained", str(tmp / "vit.safetensors")]


def _universe(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from tests.helpers.universe import write_universe

    path = tmp / "universe.csv"
    write_universe(path, n_tickers=4, n_days=1040, start="2008-06-02")  # to 2012-06: every split has bars
    return ["--data.init_args.path", str(path)]


def _corpus(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A pretraining corpus's shape: one file per ticker in subfolders, bars from 2005 to past the config's cut."""
    from tests.helpers.universe import reversal_universe

    frame = reversal_universe(8, 900, reversal=0.5, seed=3, start="2005-01-03")  # to 2008-06: past the cut
    for i, (name, part) in enumerate(frame.groupby("ticker")):
        folder = tmp / "Data" / ("ETFs" if i % 4 == 0 else "Stocks")
        folder.mkdir(parents=True, exist_ok=True)
        part.drop(columns="ticker").to_csv(folder / f"{str(name).lower()}.us.txt", index=False)
    return ["--data.init_args.path", str(tmp / "Data")]


def _chronos_bolt(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The universe, and a random small Chronos-Bolt in a local folder in place of the hub's."""
    from tests.helpers.published import random_chronos_bolt

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    random_chronos_bolt().save_pretrained(tmp / "chronos-bolt")
    return [*_universe(tmp, monkeypatch), "--model.init_args.pretrained", str(tmp / "chronos-bolt")]


def _kronos(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The universe, and a tiny random Kronos in a folder ``to_kronos`` wrote in place of the hub's."""
    from lightning_tf.kline.published import KRONOS_PRESETS, Kronos, KronosConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _, tokenizer, _ = KRONOS_PRESETS["small"]
    folder = Kronos(KronosConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64), tokenizer, max_context=128).to_kronos(
        tmp / "kronos"
    )
    return [*_universe(tmp, monkeypatch), "--model.init_args.pretrained", str(folder)]


USER_DATA: dict[str, Callable[[Path, pytest.MonkeyPatch], list[str]]] = {
    "text/transformer_base.yaml": _aligned_corpus,
    "text/tatoeba_de_en.yaml": _tatoeba,
    "text/opus_mt_finetune.yaml": _opus_mt,
    "vision/vit_small_cifar10.yaml": _cifar10,
    "vision/cifar10_cpu32.yaml": _cifar10,
    "vision/fashion_mnist.yaml": _fashion_mnist,
    "vision/finetune.yaml": _timm_weights,
    "kline/patchtst_etth1.yaml": _etth1,
    "kline/patchtst_etth1_paper.yaml": _etth1,
    "kline/us_universe.yaml": _universe,
    "kline/universe_daily.yaml": _universe,
    "kline/pretrain.yaml": _corpus,
    "kline/pretrain_gpu.yaml": _corpus,
    "kline/chronos_bolt.yaml": _chronos_bolt,
    "kline/kronos_finetune.yaml": _kronos,
}
# overlays: configs put after another one, as their headers say
BASE = {"kline/pretrain_gpu.yaml": "kline/pretrain.yaml", "kline/chronos_bolt.yaml": "kline/us_universe.yaml"}


# ------------------------------------------------------------------------------------------ tests
def test_configs_exist() -> None:
    names = {_name(p) for p in CONFIGS}
    assert {
        "trainer/default.yaml",
        "trainer/debug.yaml",
        "trainer/ddp.yaml",
        "trainer/bf16.yaml",
        "trainer/gpu.yaml",
    } <= names
    assert set(USER_DATA) <= names, set(USER_DATA) - names


@pytest.mark.parametrize("path", CONFIGS, ids=_name)
def test_config_starts_with_a_comment_and_parses(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("#"), f"{path} must start with a comment saying what it does"
    assert "lightning-tf " in text.split("\n\n")[0] or path.parent.name == "trainer", (
        f"{path}: header lacks the command"
    )
    assert isinstance(yaml.safe_load(text), dict)


@pytest.mark.parametrize("path", SEARCH_SPACES, ids=_name)
def test_each_search_space_fits_the_config_its_header_names(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fit --print_config`` of the header's configs with the space's probe values as overrides, as the tune
    command resolves them (in this process: the command's own subprocess adds about 10 s of imports)."""
    pytest.importorskip("optuna")
    from lightning_tf.__main__ import main
    from lightning_tf.tune.space import load_space, probe, to_overrides

    configs = re.findall(r"--config (configs/\S+\.yaml)", path.read_text().split("\n\n")[0])
    assert configs[0] == "configs/trainer/default.yaml" and len(configs) == 2, configs
    space = load_space(path)
    assert len(space) >= 4
    args = [a for c in configs for a in ("--config", str(ROOT / c))]
    monkeypatch.setattr("sys.argv", ["lightning-tf"])
    with pytest.raises(SystemExit) as done:  # print_config exits 0; a config that does not take a value, 2
        main(["fit", *args, *to_overrides(probe(space)), "--print_config"])
    assert done.value.code == 0, capsys.readouterr().err
    config = yaml.safe_load(capsys.readouterr().out)
    for name, value in probe(space).items():  # each searched name is one the config has, set to the probe
        node = config
        for key in name.split("."):
            node = node[key]
        assert node == value, name


@pytest.mark.parametrize("path", [p for p in EXPERIMENTS if _name(p) not in USER_DATA], ids=_name)
def test_experiment_fast_dev_run(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process, as the command runs it (a subprocess would add about 10 s of imports to each config): the
    config's model and data, one training and one validation step."""
    from lightning_tf.__main__ import main

    monkeypatch.setattr("sys.argv", ["lightning-tf"])
    monkeypatch.chdir(ROOT)  # the configs' relative paths
    main(["fit", "--config", str(path), "--config", str(ROOT / "configs/trainer/debug.yaml")])


@pytest.mark.parametrize("name", sorted(USER_DATA))
def test_experiment_on_user_data_fast_dev_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (the CIFAR stand-in patches torchvision's checksums): build the config's model and
    data, as configured, on the stand-in files, and take one training and one validation step."""
    from lightning_tf.__main__ import main

    args = USER_DATA[name](tmp_path, monkeypatch)
    monkeypatch.setattr("sys.argv", ["lightning-tf"])
    monkeypatch.chdir(tmp_path)
    base = [a for b in BASE.get(name, "").split() for a in ("--config", str(ROOT / "configs" / b))]
    main(
        [
            "fit",
            *base,
            "--config",
            str(ROOT / "configs" / name),
            "--config",
            str(ROOT / "configs/trainer/debug.yaml"),
            "--trainer.accelerator",
            "cpu",
            "--trainer.precision",
            "32-true",
            *args,
        ]
    )


TINY = ["--model", "tests.helpers.tiny.TinyRegressor", "--data", "tests.helpers.tiny.TinyDataModule"]


@pytest.mark.parametrize(
    ("extra", "world_size"),
    [
        (["--config", "configs/trainer/bf16.yaml", "--trainer.accelerator", "cpu"], 1),
        (["--config", "configs/trainer/ddp.yaml", "--trainer.accelerator", "cpu", "--trainer.devices", "2"], 2),
    ],
    ids=["bf16", "ddp-2-cpu-processes"],
)
def test_trainer_configs_train(extra: list[str], world_size: int, tmp_path: Path) -> None:
    """bf16 autocast and DDP (gloo, two CPU processes) each run a short fit and leave a checkpoint;
    under DDP each process sees half the data, so an epoch has half the steps."""
    cli(
        "fit",
        *extra,
        *TINY,
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.logger",
        "false",
        "--trainer.max_epochs",
        "2",
        "--trainer.enable_progress_bar",
        "false",
    )
    steps = 2 * (64 // 16) // world_size  # 2 epochs of 64 samples in batches of 16, split across processes
    assert [p.name for p in (tmp_path / "checkpoints").glob("*.ckpt")] == [f"epoch=1-step={steps}.ckpt"]
