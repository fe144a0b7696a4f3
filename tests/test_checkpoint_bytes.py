"""Quantized presets sized from their checkpoint's own index (``checkpoint_bytes.json``), and
``pagedkv size`` / ``pagedkv simulate`` on every preset."""

import json
from importlib import resources

import pytest

from pagedkv.configs.model_presets import MODEL_PRESETS, load_model
from pagedkv.entrypoints.cli import main
from pagedkv.errors import ConfigError
from pagedkv.weights import (
    checkpoint_sizes,
    preset_checkpoint_bytes,
    preset_sglang_refused_tp,
    preset_sglang_weight_bytes,
    sglang_rank_sizes,
    sglang_refusals,
)

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


#: Bytes per GPU of SGLang 0.5.23's own model on the meta device (sglang_weight_bytes.json,
#: recounted by tests/reference/test_sglang_weight_bytes.py), at the tp sizes shipped.
SGLANG_BYTES = {
    "gpt-oss-120b": {1: 65_248_815_744, 2: 33_328_681_344, 4: 17_368_614_144, 8: 8_711_167_680},
    "deepseek-v3": {1: 673_150_612_784, 2: 337_144_623_664, 4: 169_141_629_104,
                    8: 85_140_131_824, 16: 43_139_383_184},
    "deepseek-v3.2": {1: 674_030_369_424, 2: 338_024_380_304, 4: 170_021_385_744,
                      8: 86_019_888_464, 16: 44_019_139_824},
    "kimi-k2": {1: 1_029_173_250_864, 2: 515_214_679_344, 4: 258_235_393_584,
                8: 129_745_750_704, 16: 65_500_929_264},
}


def test_every_quantized_preset_has_a_weight_size():
    quantized = {n for n in MODEL_PRESETS if load_model(n).is_quantized}
    assert quantized == set(SHIPPED) | set(SGLANG_BYTES)
    assert set(preset_sglang_weight_bytes()) == set(SGLANG_BYTES) | {"gpt-oss-20b"}


@pytest.mark.parametrize("name", sorted(SGLANG_BYTES))
def test_quantized_presets_weigh_what_sglang_allocates(name):
    spec = load_model(name)
    assert spec.checkpoint_bytes is None
    for tp, size in SGLANG_BYTES[name].items():
        assert spec.weight_bytes(tp) == size == preset_sglang_weight_bytes()[name][tp]
    # a tp size pagedkv accepts but that is not shipped: the whole model's bytes / tp, the share
    # rule of a checkpoint index (tp 64: 128 query heads; 64 KV-head-less MLA ranks)
    assert spec.weight_bytes(64) == SGLANG_BYTES[name][1] // 64


REFUSED = "Weight output_partition_size = 576 is not divisible by weight quantization block_n = 128."


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v3.2", "kimi-k2"])
def test_the_tp_sizes_sglang_cannot_build_are_refused(name, capsys):
    # fp8 DeepSeek-V3, V3.2 and Kimi-K2 at tp 32: the dense MLP's 18432 / 32 = 576 rows per
    # rank are not a multiple of the 128-row block (tests/reference/test_sglang_weight_bytes.py)
    assert preset_sglang_refused_tp()[name] == {32: REFUSED}
    assert load_model(name).sglang_refused_tp == ((32, REFUSED),)
    with pytest.raises(ConfigError, match=rf"model='{name}' at tp=32: SGLang 0.5.23 cannot "
                       r"build .*block_n = 128\.\); valid: tp in \{1, 2, 4, 8, 16\}"):
        load_model(name).weight_bytes(32)
    assert main(["size", "--model", name, "--gpu", "h200-141gb", "--tp", "32"]) == 2
    err = capsys.readouterr().err
    assert f"model='{name}' at tp=32" in err and "576 is not divisible" in err
    assert "Traceback" not in err


def test_gpt_oss_builds_at_every_tp_up_to_32():
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        assert preset_sglang_refused_tp()[name] == {}
        assert set(preset_sglang_weight_bytes()[name]) == {1, 2, 4, 8, 16, 32}
    # tp 32: SGLang pads each rank's expert shard (2880 / 32 = 90 rows) to 128, so a rank holds
    # more than the tp=1 bytes / 32 (2,039,025,492 B)
    assert load_model("gpt-oss-120b").weight_bytes(32) == 2_915_409_168


def test_an_index_comes_first():
    # gpt-oss-20b has both; they agree at tp=1 (SGLang's model holds the index's tensors) and
    # the index's share rule is kept at tp=2 (SGLang's rank: 6,998,169,216 B, padded experts)
    spec = load_model("gpt-oss-20b")
    assert preset_sglang_weight_bytes()["gpt-oss-20b"][1] == spec.checkpoint_bytes
    assert spec.weight_bytes(2) == spec.checkpoint_bytes // 2


def test_size_names_sglangs_model_as_the_source(capsys):
    assert main(["size", "--model", "deepseek-v3", "--gpu", "h200-141gb", "--tp", "8"]) == 0
    out = capsys.readouterr().out
    assert "mem usage=79.29 GB" in out  # 85,140,131,824 B in GiB
    assert "weights from SGLang 0.5.23's own model class and quantization" in out


def test_a_quantized_model_outside_the_presets_without_an_index_keeps_the_refusal(tmp_path,
                                                                                  capsys):
    config = load_model("deepseek-v3").config
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = load_model(tmp_path)
    assert spec.sglang_rank_bytes == () and spec.checkpoint_bytes is None
    with pytest.raises(ConfigError, match=r"--weights-gib"):
        spec.weight_bytes()
    assert main(["size", "--model", str(tmp_path), "--gpu", "h200-141gb", "--tp", "8"]) == 2
    err = capsys.readouterr().err
    assert "--weights-gib" in err and "Traceback" not in err


@pytest.mark.parametrize(("table", "message"), [
    ({"x": {}}, r"x.per_rank=None is invalid"),
    ({"x": {"per_rank": {"2": 5}}}, r"x.per_rank=\{'2': 5\} is invalid"),
    ({"x": {"per_rank": {"1": 5, "0": 3}}}, "key '0' is invalid"),
    ({"x": {"per_rank": {"1": 5, "two": 3}}}, "key 'two' is invalid"),
    ({"x": {"per_rank": {"1": 0}}}, r"x.per_rank\[1\]=0 is invalid"),
    ({"x": {"per_rank": {"1": 2.5}}}, r"x.per_rank\[1\]=2.5 is invalid"),
])
def test_a_broken_sglang_entry_is_named(table, message):
    with pytest.raises(ConfigError, match=message):
        sglang_rank_sizes(table)
    assert sglang_rank_sizes({"_about": "notes", "y": {"per_rank": {"1": 8, "2": 5}}}) == {
        "y": {1: 8, 2: 5}}


@pytest.mark.parametrize(("table", "message"), [
    ({"x": {"refused": []}}, r"x.refused=\[\] is invalid"),
    ({"x": {"refused": {"0": "no"}}}, "refused key '0' is invalid"),
    ({"x": {"refused": {"t": "no"}}}, "refused key 't' is invalid"),
    ({"x": {"refused": {"4": ""}}}, r"x.refused\[4\]='' is invalid"),
    ({"x": {"refused": {"4": 3}}}, r"x.refused\[4\]=3 is invalid"),
])
def test_a_broken_refusal_is_named(table, message):
    with pytest.raises(ConfigError, match=message):
        sglang_refusals(table)
    assert sglang_refusals({"_about": "notes", "y": {"per_rank": {"1": 8}},
                            "z": {"refused": {"32": "why"}}}) == {"y": {}, "z": {32: "why"}}


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
    simulate = ["simulate", *where, "--num-requests", "20", "--quiet", *SIMULATE_FLAGS.get(name, [])]
    for argv in (["size", *where], simulate):
        assert main(argv) == 0, argv
        assert capsys.readouterr().out
