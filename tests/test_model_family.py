"""Which models pagedkv sizes, the named refusal for the rest, and weights from the checkpoint."""

import json

import pytest

from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_presets import load_model
from pagedkv.errors import ConfigError
from pagedkv.weights import count_parameters

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
        "max_position_embeddings": 4096, "tie_word_embeddings": False}


def tiny(arch: str, model_type: str, **extra) -> dict:
    return {"architectures": [arch], "model_type": model_type, **TINY, **extra}


@pytest.mark.parametrize(("config", "match"), [
    ({**TINY, "model_type": "foo"}, r"model_type='foo' \(and no architectures\) is a model "
                                    r"pagedkv does not size; valid: .*LlamaForCausalLM"),
    (tiny("FooForCausalLM", "foo"), r"architectures\[0\]='FooForCausalLM' is an architecture "
                                    r"pagedkv does not size"),
    (tiny("GptOssForCausalLM", "gpt_oss", layer_types=["sliding_attention", "full_attention"]),
     r"sliding_window=None is invalid or missing, and SGLang needs it to size "
     r"GptOssForCausalLM; valid: the window in tokens"),
    (tiny("GptOssForCausalLM", "gpt_oss", sliding_window=128),
     r"layer_types=\[\] names no sliding_attention and full_attention layers"),
    (tiny("GptOssForCausalLM", "gpt_oss", sliding_window=128,
          layer_types=["full_attention", "full_attention"]),
     r"layer_types=\['full_attention', 'full_attention'\] names no sliding_attention"),
    (tiny("GptOssForCausalLM", "gpt_oss", sliding_window=128,
          layer_types=["sliding_attention", "chunked_attention"]),
     r"names no sliding_attention and full_attention"),
    (tiny("GptOssForCausalLM", "gpt_oss", sliding_window=8192, max_position_embeddings=4096,
          layer_types=["sliding_attention", "full_attention"]),
     r"sliding_window=8192 is larger than the context max_position_embeddings=4096"),
    (tiny("Llama4ForConditionalGeneration", "llama4"),
     r"attention_chunk_size=None is invalid or missing, and SGLang needs it to size "
     r"Llama4ForConditionalGeneration"),
    (tiny("Llama4ForConditionalGeneration", "llama4", attention_chunk_size=8192),
     r"attention_chunk_size=8192 is larger than the context max_position_embeddings=4096"),
    (tiny("MiMoV2FlashForCausalLM", "mimo_v2"),
     r"is a sliding-window hybrid whose pools pagedkv does not model.*valid: "
     r"GptOssForCausalLM, Llama4ForConditionalGeneration"),
    (tiny("Qwen3NextForCausalLM", "qwen3_next"),
     r"full_attention_interval=None is invalid or missing, and SGLang needs it to size "
     r"Qwen3NextForCausalLM"),
    (tiny("Qwen3NextForCausalLM", "qwen3_next", full_attention_interval=4,
          linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
          linear_value_head_dim=128, linear_conv_kernel_dim=4),
     r"full_attention_interval=4 is larger than num_hidden_layers=2, which leaves no "
     r"full-attention layer; valid: 1..2"),
    (tiny("JambaForCausalLM", "jamba"),
     r"'JambaForCausalLM' is a linear-attention hybrid whose state layout pagedkv does not "
     r"model.*valid: Qwen3NextForCausalLM"),
    (tiny("LlamaForCausalLM", "llama", layer_types=["linear_attention", "full_attention"]),
     "is a linear-attention hybrid"),
    (tiny("LlamaForCausalLM", "llama", layer_types=["full_attention"]),
     r"layer_types has 1 entries but num_hidden_layers=2"),
    (tiny("LlamaForCausalLM", "llama", layer_types="full_attention"),
     r"layer_types has str entries but num_hidden_layers=2"),
    (tiny("LlamaForCausalLM", "llama", layer_types=["full_attention", "global"]),
     r"layer_types holds \['global'\]; valid: "),
    (tiny("Gemma2ForCausalLM", "gemma2", sliding_window=8192, max_position_embeddings=4096),
     r"sliding_window=8192 is larger than the context max_position_embeddings=4096; valid: "
     r"a window of at most 4096 tokens"),
    (tiny("DeepseekV3ForCausalLM", "deepseek_v3"), r"needs kv_lora_rank"),
])
def test_models_pagedkv_does_not_size_are_refused_by_name(config, match):
    with pytest.raises(ConfigError, match=match):
        ModelSpec.from_config(config, name="m")


def test_a_refusal_reaches_the_command_line_as_exit_2(tmp_path, capsys):
    from pagedkv.entrypoints.cli import main

    (tmp_path / "config.json").write_text(json.dumps(tiny("GptOssForCausalLM", "gpt_oss")))
    assert main(["size", "--model", str(tmp_path), "--gpu", "h100-sxm-80gb"]) == 2
    assert "sliding_window=None is invalid or missing" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps(tiny("FooForCausalLM", "foo")))
    assert main(["size", "--model", str(tmp_path), "--gpu", "h100-sxm-80gb"]) == 2
    err = capsys.readouterr().err
    assert "architectures[0]='FooForCausalLM'" in err and "GptOssForCausalLM" in err


def test_gemma3_multimodal_wrapper_is_sized_as_its_text_model():
    """SGLang 0.5.23 serves Gemma 3 text-only unless --enable-multimodal is given, with one full
    pool for all its layers, window layers included; the text_config's missing fields take
    transformers' Gemma3TextConfig defaults (max_position_embeddings 131072)."""
    text = {**TINY, "model_type": "gemma3_text", "head_dim": 32, "sliding_window": 1024}
    del text["max_position_embeddings"]
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "torch_dtype": "bfloat16", "text_config": text,
              "vision_config": {"num_hidden_layers": 27, "hidden_size": 1152}}
    m = ModelSpec.from_config(config)
    assert (m.family, m.context_len, m.vision) == ("dense", 131072, (27, 1152))
    assert m.cell_size() == 2 * 2 * 2 * 32 * 2
    with pytest.raises(ConfigError, match=r"vision_config.hidden_size=None is invalid or missing"):
        ModelSpec.from_config({**config, "vision_config": {"num_hidden_layers": 27}})
    m = ModelSpec.from_config({**text, "architectures": ["Gemma3ForCausalLM"],
                               "max_position_embeddings": 4096})
    assert m.cell_size() == 2 * 2 * 2 * 32 * 2 and m.architecture == "Gemma3ForCausalLM"


def test_moe_experts_are_counted_in_the_weights():
    """Mixtral: 4 experts of 3 matrices each, plus the router, in every layer."""
    pytest.importorskip("transformers")
    m = ModelSpec.from_config(tiny("MixtralForCausalLM", "mixtral", num_local_experts=4,
                                   num_experts_per_tok=2))
    attn = 64 * 64 * 2 + 64 * 32 * 2
    layer = attn + 4 * 3 * 64 * 128 + 64 * 4 + 2 * 64
    assert m.is_moe and m.num_experts == 4
    assert m.num_params == 2 * layer + 2 * 100 * 64 + 64 == 234_816
    qwen = ModelSpec.from_config(tiny("Qwen3MoeForCausalLM", "qwen3_moe", num_experts=8,
                                      moe_intermediate_size=32, head_dim=16))
    # q/k norms (16 each), 8 experts of 3 * 64 * 32, router 64 * 8
    q_layer = 64 * 64 + 64 * 32 * 2 + 64 * 64 + 2 * 16 + 8 * 3 * 64 * 32 + 64 * 8 + 2 * 64
    assert qwen.num_params == 2 * q_layer + 2 * 100 * 64 + 64


def test_weights_from_the_checkpoint_index(tmp_path):
    """The index's total_size wins, quantized checkpoints included, split by tp."""
    config = tiny("LlamaForCausalLM", "llama", quantization_config={"quant_method": "fp8"})
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"quant_method='fp8'.*--weights-gib"):
        load_model(tmp_path).weight_bytes()
    index = {"metadata": {"total_size": 1_000_001}, "weight_map": {}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert load_model(tmp_path).weight_bytes() == 1_000_001
    assert load_model(tmp_path / "config.json").weight_bytes(tp=2) == 500_000
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ConfigError, match=r"metadata.total_size=None is invalid"):
        load_model(tmp_path)


def test_a_model_transformers_cannot_build_asks_for_its_size():
    pytest.importorskip("transformers")
    with pytest.raises(ConfigError, match=r"model_type='no_such_model'.*--weights-gib"):
        count_parameters({"model_type": "no_such_model", "hidden_size": 8})


def test_size_prints_the_pool_and_the_source_of_the_weights(capsys):
    """Mixtral-8x7B on two H100s: 86.99 GiB of experts and attention, half per GPU."""
    from pagedkv.entrypoints.cli import main

    assert main(["size", "--model", "mixtral-8x7b", "--gpu", "h100-sxm-80gb", "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "mem usage=43.50 GB." in out
    assert ("pools: one KV pool for all 32 layers (GQA: K and V heads per layer, 8 experts per "
            "MoE layer; SGLang's DefaultPoolConfigurator); weights from the parameter count of "
            "the model built on the meta device") in out


def test_disable_hybrid_swa_memory_gives_gpt_oss_one_full_pool(tmp_path, capsys):
    """SGLang's --disable-hybrid-swa-memory: every gpt-oss layer, window layers included,
    holds full-length K and V (8 KV heads of 64 in each of 24 layers, bf16)."""
    config = tiny("GptOssForCausalLM", "gpt_oss", num_hidden_layers=24, num_key_value_heads=8,
                  num_attention_heads=64, head_dim=64, sliding_window=128,
                  layer_types=["sliding_attention", "full_attention"] * 12)
    assert ModelSpec.from_config(config).family == "swa"
    spec = ModelSpec.from_config(config, disable_hybrid_swa_memory=True)
    assert spec.family == "dense" and spec.num_swa_layers == 0
    assert spec.cell_size() == 24 * 8 * (64 + 64) * 2 == 49_152
    assert spec.cell_size(tp=8) == 6_144
    (tmp_path / "config.json").write_text(json.dumps(config))
    from pagedkv.entrypoints.cli import main

    assert main(["size", "--model", str(tmp_path), "--free-before-gib", "79",
                 "--free-after-gib", "65", "--mem-fraction-static", "0.85",
                 "--disable-hybrid-swa-memory"]) == 0
    assert "window layers full-length under --disable-hybrid-swa-memory" in capsys.readouterr().out


def test_disable_hybrid_swa_memory_gives_llama4_one_full_pool(capsys):
    """SGLang 0.5.23's --disable-hybrid-swa-memory on Llama 4 Scout: ``is_hybrid_swa`` is
    false, so the default configurator's one pool holds full-length K and V for all 48 layers,
    the 36 chunked ones included (8 KV heads of 128, bf16), instead of a refusal."""
    from pagedkv.configs.model_presets import load_model
    from pagedkv.entrypoints.cli import main

    assert load_model("llama-4-scout").family == "swa"
    spec = load_model("llama-4-scout", disable_hybrid_swa_memory=True)
    assert spec.family == "dense" and spec.num_swa_layers == 0 and spec.sliding_window is None
    assert spec.cell_size() == 48 * 8 * (128 + 128) * 2 == 196_608
    assert spec.cell_size(tp=8) == 24_576
    assert main(["size", "--model", "llama-4-scout", "--gpu", "h200-141gb", "--tp", "8",
                 "--disable-hybrid-swa-memory"]) == 0
    out = capsys.readouterr().out
    assert ("one KV pool for all 48 layers" in out
            and "window layers full-length under --disable-hybrid-swa-memory" in out)


@pytest.mark.parametrize(("arch", "model_type", "match"), [
    ("Gemma4ForCausalLM", "gemma4_text",
     r"is a sliding-window hybrid.*does not size it under --disable-hybrid-swa-memory either\); "
     r"valid under that flag: GptOssForCausalLM, Llama4ForConditionalGeneration, or a "
     r"one-pool model .*\)$"),
])
def test_disable_hybrid_swa_memory_does_not_cover_other_hybrids(arch, model_type, match):
    with pytest.raises(ConfigError, match=match):
        ModelSpec.from_config(tiny(arch, model_type), disable_hybrid_swa_memory=True)
