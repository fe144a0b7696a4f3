"""KV geometry and parameter counts read from the shipped config.json presets."""

import json

import pytest

from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_presets import MODEL_PRESETS, load_model
from pagedkv.errors import ConfigError
from pagedkv.weights import (
    count_parameters,
    count_routed_expert_parameters,
    preset_param_counts,
    preset_routed_expert_counts,
)

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}


def test_llama3_8b_bytes_per_token_is_128_kib():
    # 2 (K and V) * 32 layers * 8 KV heads * 128 head_dim * 2 bytes (bf16)
    assert load_model("llama-3-8b").cell_size() == 2 * 32 * 8 * 128 * 2 == 131_072


def test_llama3_8b_parameter_count_and_weight_bytes():
    m = load_model("llama-3-8b")
    assert m.weight_bytes(tp=2) == 16_060_522_496 // 2
    # embed 128256*4096, lm_head the same, 32 layers of 218,112,000, final norm 4096
    assert m.num_params == 2 * 128_256 * 4096 + 32 * 218_112_000 + 4096 == 8_030_261_248
    assert m.weight_bytes() == 16_060_522_496  # 16.06 GB, 14.96 GiB


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("llama-3.1-70b", 70_553_706_496),
        ("qwen2.5-7b", 7_615_616_512),
        ("qwen3-4b", 4_022_468_096),
        ("mistral-7b-v0.3", 7_248_023_552),
        ("gemma-2-9b", 9_241_705_984),
        ("deepseek-v3", 671_026_419_200),  # the 671B of the model card, without the MTP layer
        ("mixtral-8x7b", 46_702_792_704),  # "46.7B total": 8 experts in each of 32 layers
        ("qwen3-30b-a3b", 30_532_122_624),  # "30.5B in total"
        ("qwen3-235b-a22b", 235_093_634_560),  # "235B in total"
    ],
)
def test_parameter_counts_match_model_cards(name, params):
    assert load_model(name).num_params == params


def test_shipped_preset_counts_are_the_meta_device_counts():
    """The table the presets read equals a fresh count of every preset on the meta device."""
    pytest.importorskip("transformers")
    table = preset_param_counts()
    assert set(table) == set(MODEL_PRESETS)
    for name in MODEL_PRESETS:
        assert count_parameters(load_model(name).config) == table[name], name


def test_shipped_routed_expert_counts_are_the_meta_device_counts():
    """The routed-expert table equals a fresh count; dense presets have none."""
    pytest.importorskip("transformers")
    table = preset_routed_expert_counts()
    assert set(table) == set(MODEL_PRESETS)
    for name in MODEL_PRESETS:
        spec = load_model(name)
        assert count_routed_expert_parameters(spec.config) == table[name], name
        assert (table[name] > 0) == spec.is_moe, name


@pytest.mark.parametrize(("name", "active"), [
    ("mixtral-8x7b", 12_879_925_248),  # "12.9B active parameters"
    ("qwen3-30b-a3b", 3_353_032_704),  # "3.3B activated"
    ("deepseek-v3", 37_552_297_472),  # "37B activated", embeddings counted here
    ("llama-3-8b", 8_030_261_248),  # dense: all of them
])
def test_active_parameters_match_model_cards(name, active):
    assert load_model(name).num_active_params == active


def test_qwen3_uses_explicit_head_dim_not_hidden_over_heads():
    m = load_model("qwen3-4b")
    assert m.hidden_size // m.num_attention_heads == 80
    assert m.head_dim == 128
    assert m.cell_size() == 2 * 36 * 8 * 128 * 2 == 147_456


def test_gemma2_head_dim_256():
    assert load_model("gemma-2-9b").cell_size() == 2 * 42 * 8 * 256 * 2


def test_deepseek_v3_mla_latent_never_split_by_tp():
    m = load_model("deepseek-v3")
    assert m.attention_kind == "MLA"
    assert m.cell_size() == (512 + 64) * 61 * 2 == 70_272
    assert m.cell_size(tp=8) == 70_272
    assert m.cell_size("fp8_e4m3") == 35_136


def test_kv_dtypes():
    m = load_model("llama-3-8b")
    assert [m.cell_size(d) for d in ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")] == [
        262_144, 131_072, 131_072, 65_536, 65_536]
    with pytest.raises(ConfigError, match="kv_cache_dtype='int3' is invalid; valid: "):
        m.cell_size("int3")


def test_tp_splits_kv_heads_and_replicates_beyond_them():
    m = load_model("llama-3-8b")  # 8 KV heads
    assert m.kv_heads_per_rank(2) == 4
    assert m.kv_heads_per_rank(8) == 1
    assert m.kv_heads_per_rank(16) == 1  # replicated: each rank keeps one head
    assert m.cell_size(tp=16) == m.cell_size(tp=8)
    with pytest.raises(ConfigError, match="tp=3 is invalid; valid: a divisor or a multiple of"):
        m.kv_heads_per_rank(3)
    with pytest.raises(ConfigError, match="tp=0 is invalid; valid: an integer >= 1"):
        m.cell_size(tp=0)


def test_missing_num_key_value_heads_means_mha():
    m = ModelSpec.from_config({**LLAMA, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "hidden_size": 64})
    assert m.num_key_value_heads == 4 and m.attention_kind == "MHA"
    assert m.cell_size("fp32") == 2 * 2 * 4 * 16 * 4


def test_mqa_kind():
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 1, "hidden_size": 64}
    assert ModelSpec.from_config(cfg).attention_kind == "MQA"


def test_config_missing_fields_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"lacks required field.*num_hidden_layers"):
        ModelSpec.from_config({**LLAMA, "num_attention_heads": 4, "hidden_size": 64}, name="broken")


def test_load_from_file_and_folder(tmp_path):
    cfg = {**LLAMA, "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
           "hidden_size": 256, "intermediate_size": 512, "vocab_size": 1000,
           "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model(tmp_path).cell_size() == load_model(tmp_path / "config.json").cell_size()
    pytest.importorskip("transformers")
    per_layer = 256 * 256 * 2 + 256 * 64 * 2 + 2 * 256 + 3 * 256 * 512  # q,o; k,v; norms; mlp
    assert load_model(tmp_path).num_params == 3 * per_layer + 2 * 1000 * 256 + 256


def test_unknown_preset_and_bad_json(tmp_path):
    with pytest.raises(ConfigError, match="model='llama-9' is invalid; valid: a preset"):
        load_model("llama-9")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model(bad)


def test_quantized_weights_need_override():
    # the preset's config outside the presets: no index, no SGLang count shipped for it
    spec = ModelSpec.from_config(load_model("deepseek-v3").config, name="my-deepseek")
    with pytest.raises(ConfigError, match=r"quantized \(quantization_config.quant_method='fp8'\)"
                       r".*--weights-gib"):
        spec.weight_bytes()


def test_every_preset_loads():
    for name in MODEL_PRESETS:
        assert load_model(name).cell_size() > 0


def test_tp_must_divide_the_query_heads():
    with pytest.raises(ConfigError, match="tp=8 is invalid; valid: a divisor of num_attention_heads=28"):
        load_model("qwen2.5-7b").cell_size(tp=8)  # 4 KV heads replicate, but 28 q heads do not split
    assert load_model("qwen2.5-7b").cell_size(tp=4) == 57_344 // 4


def test_folder_without_config_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"a folder holding a config\.json"):
        load_model(tmp_path)


def test_moe_weights_count_every_expert():
    """Mixtral-8x7B's checkpoint is ~87 GiB in bf16, not the 13.5 GB of one expert per layer."""
    assert load_model("mixtral-8x7b").weight_bytes() == 2 * 46_702_792_704  # 86.99 GiB
    assert load_model("qwen3-30b-a3b").weight_bytes(tp=2) == 30_532_122_624
