"""Quantized presets sized from their checkpoint's own index (``checkpoint_bytes.json``), and
``pagedkv size`` / ``pagedkv simulate`` on every preset."""

import json
from importlib import resources

import pytest

from pagedkv.configs.model_presets import MODEL_PRESETS, load_model
from pagedkv.entrypoints.cli import main
from pagedkv.errors import ConfigError
from pagedkv.weights import checkpoint_sizes, preset_checkpoint_bytes

TABLE = json.loads(resources.files("pagedkv.presets").joinpath(
    "models/checkpoint_bytes.json").read_text())
SHIPPED = {k: v for k, v in TABLE.items() if not k.startswith("_")}
README = resources.files("pagedkv.presets").joinpath("models/README.md").read_text()


def test_gpt_oss_20b_weighs_its_index_total():
    # openai/gpt-oss-20b's model.safetensors.index.json: {"metadata": {"total_size": 13761264768}}
    spec = load_model("gpt-oss-20b")
    assert spec.checkpoint_bytes == 13_761_264_768
    assert spec.weight_bytes(1) == 13_761_264_768
    assert spec.weight_bytes(2) == 6_880_632_384  # the per-GPU share under tp, as for a folder


def test_size_says_where_the_weights_came_from(capsys):
    assert main(["size", "--model", "gpt-oss-20b", "--gpu", "h100-sxm-80gb"]) == 0
    out = capsys.readouterr().out
    assert "mem usage=12.82 GB" in out  # 13,761,264,768 B in GiB, as SGLang prints it
    assert "weights from the checkpoint's model.safetensors.index.json total, shipped" in out


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_each_shipped_size_is_a_quantized_preset_with_its_source(name):
    entry = SHIPPED[name]
    assert name in MODEL_PRESETS and load_model(name).is_quantized
    assert entry["source"] == f"{MODEL_PRESETS[name]}/model.safetensors.index.json"
    assert entry["how"].startswith("quoted by public code on GitHub: ")
    assert load_model(name).weight_bytes() == entry["total_size"] == preset_checkpoint_bytes()[name]


QUANTIZED_WITHOUT_INDEX = sorted(n for n in MODEL_PRESETS
                                 if load_model(n).is_quantized and n not in SHIPPED)


@pytest.mark.parametrize("name", QUANTIZED_WITHOUT_INDEX)
def test_a_quantized_preset_without_a_quoted_index_keeps_the_refusal(name):
    with pytest.raises(ConfigError, match=r"--weights-gib"):
        load_model(name).weight_bytes()
    assert f"`{name}`" in README.split("## Weights of quantized presets")[1]  # the README says so


@pytest.mark.parametrize(("table", "message"), [
    ({"x": {"total_size": 0}}, "x.total_size=0 is invalid"),
    ({"x": {"total_size": True}}, "x.total_size=True is invalid"),
    ({"x": {"total_size": 1.5}}, "x.total_size=1.5 is invalid"),
    ({"x": {"source": "a/b"}}, "x.total_size=None is invalid"),
    ({"x": 7}, "x.total_size=None is invalid"),
])
def test_a_broken_entry_is_named(table, message):
    with pytest.raises(ConfigError, match=message):
        checkpoint_sizes(table)
    assert checkpoint_sizes({"_about": "notes", "y": {"total_size": 5}}) == {"y": 5}


#: A GPU preset and tp on which each model preset's weights fit with room for a pool.
SETUPS = {
    "llama-3-8b": ("h100-sxm-80gb", 1), "llama-3.1-8b": ("h100-sxm-80gb", 1),
    "llama-3.1-70b": ("h100-sxm-80gb", 4), "qwen2.5-7b": ("h100-sxm-80gb", 1),
    "qwen3-4b": ("h100-sxm-80gb", 1), "qwq-32b": ("h100-sxm-80gb", 2),
    "mistral-7b-v0.3": ("h100-sxm-80gb", 1), "gemma-2-9b": ("h100-sxm-80gb", 1),
    "deepseek-v3": ("h200-141gb", 8), "deepseek-v3.2": ("h200-141gb", 8),
    "mixtral-8x7b": ("h100-sxm-80gb", 2), "qwen3-30b-a3b": ("h200-141gb", 1),
    "qwen3-235b-a22b": ("h200-141gb", 8), "gpt-oss-20b": ("h100-sxm-80gb", 1),
    "gpt-oss-120b": ("h100-sxm-80gb", 2), "qwen3-next-80b-a3b": ("h100-sxm-80gb", 4),
    "kimi-k2": ("h200-141gb", 8), "gemma-3-27b": ("h100-sxm-80gb", 1),
    "llama-4-scout": ("h100-sxm-80gb", 4),
}


#: What ``simulate`` needs beyond the setup (nothing: every preset runs with the radix cache).
SIMULATE_FLAGS: dict[str, list[str]] = {}


def test_every_preset_has_a_setup():
    assert set(SETUPS) == set(MODEL_PRESETS)


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_size_and_simulate_run_on_every_preset(name, capsys):
    gpu, tp = SETUPS[name]
    where = ["--model", name, "--gpu", gpu, "--tp", str(tp)]
    refused = name in QUANTIZED_WITHOUT_INDEX
    simulate = ["simulate", *where, "--num-requests", "20", "--quiet", *SIMULATE_FLAGS.get(name, [])]
    for argv in (["size", *where], simulate):
        assert main(argv) == (2 if refused else 0), argv
        captured = capsys.readouterr()
        if refused:  # named, with what to pass
            assert "--weights-gib" in captured.err and "Traceback" not in captured.err
        else:
            assert captured.out
