"""Which models pagedkv sizes exactly, and a named refusal for every other one.

SGLang 0.5.23 picks a model's KV pools by its architecture (the first ``architectures`` entry
of ``config.json``): most get one pool of identical cells for every layer
(``DefaultPoolConfigurator``); multi-head latent attention (DeepSeek V2/V3, Kimi K2) the same
pool with one latent per token; the sliding-window hybrids on its list
(``configs/model_config.py`` ``is_hybrid_swa_model``: gpt-oss, Llama 4, MiMo-V2, Gemma 4, ...)
a full pool plus a sliding-window pool (``HybridSWAPoolConfigurator``); the linear-attention
hybrids (``configs/hybrid_arch.py`` ``mambaish_config``: Qwen3-Next, Qwen3.5, Mamba, ...) KV
for their few full-attention layers plus per-request state slots. Mixture-of-experts models
with dense attention (Mixtral, Qwen3-MoE) size their KV like any dense model: only their
weights differ, and those come from the checkpoint (:mod:`pagedkv.weights`).

pagedkv models the one-pool families. Every other model is refused with a
:class:`~pagedkv.errors.ConfigError` that names the field, its value and what to pass, so that
no number is printed for a model whose pools SGLang builds differently.
"""

from __future__ import annotations

from typing import Any

from pagedkv.errors import ConfigError

#: Architectures SGLang 0.5.23 gives one pool of per-head K and V for every layer.
#: Gemma 2 and Gemma 3 have sliding-window layers, but SGLang 0.5.23 does not list them as
#: hybrid: their window layers get full-length KV like the rest.
DENSE_ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "Gemma2ForCausalLM", "Gemma3ForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM",
})

#: Architectures with multi-head latent attention: one ``kv_lora_rank + qk_rope_head_dim``
#: latent per token and layer (Kimi K2 is served by SGLang's ``DeepseekV3ForCausalLM``).
MLA_ARCHITECTURES = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"})

#: Sliding-window hybrids SGLang 0.5.23 gives a full and a sliding-window pool
#: (``is_hybrid_swa_model``; the ones with a transformers config today).
SWA_HYBRID_ARCHITECTURES = frozenset({
    "GptOssForCausalLM", "Llama4ForConditionalGeneration", "MiMoV2FlashForCausalLM",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Step3p5ForCausalLM",
})

#: Sliding-window hybrids whose every layer has the same K/V head layout, so that SGLang's
#: ``--disable-hybrid-swa-memory`` leaves the one default pool pagedkv sizes (checked against
#: SGLang's own configurator by the reference tests).
ONE_POOL_WHEN_SWA_DISABLED = frozenset({"GptOssForCausalLM"})

#: Linear-attention (GDN, Mamba, KDA, lightning) hybrids: KV for the full-attention layers
#: only, plus one recurrent-state slot per running request (``mambaish_config``).
LINEAR_HYBRID_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "FalconH1ForCausalLM", "NemotronHForCausalLM",
    "JambaForCausalLM", "MambaForCausalLM", "Mamba2ForCausalLM", "KimiLinearForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MiniMaxText01ForCausalLM", "LFM2ForCausalLM",
    "GraniteMoeHybridForCausalLM",
})

#: Multimodal wrappers of one-pool decoders: SGLang 0.5.23 takes a reservation for their
#: vision features out of the KV budget (``kv_cache_configurator.py``
#: ``mm_runtime_reservation_gb``: ``SGLANG_VLM_CACHE_SIZE_MB``, more with GPU feature
#: transport), which pagedkv does not model. Value: the text-only architecture to pass.
MULTIMODAL_ARCHITECTURES: dict[str, str] = {
    "Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
}

#: ``model_type`` -> architecture, for configs that name no ``architectures``.
MODEL_TYPE_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM", "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration", "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
    "kimi_k2": "DeepseekV3ForCausalLM", "gpt_oss": "GptOssForCausalLM",
    "llama4": "Llama4ForConditionalGeneration", "qwen3_next": "Qwen3NextForCausalLM",
}

#: ``layer_types`` entries transformers writes, and the ones pagedkv sizes as full layers.
KNOWN_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention",
                               "linear_attention", "mamba", "attention"})

_SUPPORTED = ", ".join(sorted(DENSE_ARCHITECTURES | MLA_ARCHITECTURES))


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The part of ``config`` that describes the decoder (SGLang ``hf_text_config``).

    Multimodal wrappers (Gemma 3, Llama 4, Qwen3.5) nest it as ``text_config``; the
    checkpoint's dtype may sit on the outer level only, so it is carried over.
    """
    inner = config.get("text_config")
    if not isinstance(inner, dict):
        return config
    merged = dict(inner)
    for key in ("torch_dtype", "dtype", "quantization_config"):
        if key not in merged and key in config:
            merged[key] = config[key]
    return merged


def architecture_of(config: dict[str, Any], name: str) -> str:
    """The architecture SGLang would load: ``architectures[0]``, else by ``model_type``.

    Raises:
        ConfigError: neither field names a known model.
    """
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    model_type = config.get("model_type")
    if model_type in MODEL_TYPE_ARCHITECTURES:
        return MODEL_TYPE_ARCHITECTURES[model_type]
    raise ConfigError(
        f"config of {name!r}: model_type={model_type!r} (and no architectures) is a model "
        f"pagedkv does not size; valid: a config.json naming one of {_SUPPORTED} in "
        "architectures, or a model_type among " + ", ".join(sorted(MODEL_TYPE_ARCHITECTURES)))


def check_layer_types(text: dict[str, Any], name: str) -> list[str]:
    """The config's ``layer_types`` (empty when it has none), checked for consistency.

    Raises:
        ConfigError: not a list of ``num_hidden_layers`` known layer kinds.
    """
    kinds = text.get("layer_types")
    if kinds is None:
        return []
    layers = text.get("num_hidden_layers")
    if not isinstance(kinds, list) or len(kinds) != layers:
        count = len(kinds) if isinstance(kinds, list) else type(kinds).__name__
        raise ConfigError(
            f"config of {name!r}: layer_types has {count} entries but num_hidden_layers="
            f"{layers}; valid: one entry per layer (fix the config.json)")
    unknown = sorted({k for k in kinds if k not in KNOWN_LAYER_TYPES}, key=str)
    if unknown:
        raise ConfigError(
            f"config of {name!r}: layer_types holds {unknown!r}; valid: "
            + ", ".join(sorted(KNOWN_LAYER_TYPES)))
    return kinds


def attention_family(config: dict[str, Any], name: str,
                     disable_hybrid_swa_memory: bool = False) -> str:
    """``"dense"`` or ``"mla"``: the one-pool families pagedkv sizes exactly.

    With SGLang's ``--disable-hybrid-swa-memory`` (``disable_hybrid_swa_memory``),
    ``ModelConfig.is_hybrid_swa`` is false: a sliding-window hybrid gets the default
    configurator's one pool, full-length for every layer, window layers included.

    Raises:
        ConfigError: a sliding-window or linear-attention hybrid, an architecture SGLang
            0.5.23 pools in some other way or that pagedkv does not know, inconsistent
            ``layer_types``, or a sliding window larger than the context. The message names
            the field, its value and what to pass.
    """
    arch = architecture_of(config, name)
    text = text_config(config)
    kinds = check_layer_types(text, name)
    if arch in LINEAR_HYBRID_ARCHITECTURES or "linear_attention" in kinds or "mamba" in kinds:
        raise ConfigError(
            f"config of {name!r}: architectures[0]={arch!r} is a linear-attention hybrid: "
            "SGLang keeps KV only for its full-attention layers plus a pool of per-request "
            "state slots (--max-mamba-cache-size, --mamba-full-memory-ratio), which pagedkv "
            f"does not model; valid: a one-pool model ({_SUPPORTED})")
    one_pool = arch in ONE_POOL_WHEN_SWA_DISABLED
    if arch in SWA_HYBRID_ARCHITECTURES and not (one_pool and disable_hybrid_swa_memory):
        raise ConfigError(
            f"config of {name!r}: architectures[0]={arch!r} is a sliding-window hybrid: "
            "SGLang 0.5.23 gives it a full-attention pool and a sliding-window pool "
            "(--swa-full-tokens-ratio), which pagedkv does not model; valid: a one-pool model "
            f"({_SUPPORTED})" + (", or this one under --disable-hybrid-swa-memory (SGLang's "
                                 "flag: one full-length pool for every layer, which pagedkv "
                                 "sizes)" if one_pool else ""))
    if arch in MULTIMODAL_ARCHITECTURES:
        raise ConfigError(
            f"config of {name!r}: architectures[0]={arch!r} is multimodal: SGLang 0.5.23 "
            "reserves memory for its image features out of the KV budget "
            "(SGLANG_VLM_CACHE_SIZE_MB), which pagedkv does not model; valid: the text-only "
            f"{MULTIMODAL_ARCHITECTURES[arch]} (its text_config as config.json)")
    if arch not in DENSE_ARCHITECTURES | MLA_ARCHITECTURES | ONE_POOL_WHEN_SWA_DISABLED:
        raise ConfigError(
            f"config of {name!r}: architectures[0]={arch!r} is an architecture pagedkv does not "
            f"size (its pools may differ from one KV pool); valid: {_SUPPORTED}")
    window = text.get("sliding_window")
    context = text.get("max_position_embeddings")
    uses_window = "sliding_attention" in kinds or (
        arch.startswith("Gemma") and window is not None)
    if uses_window and isinstance(window, int) and isinstance(context, int) and window > context:
        raise ConfigError(
            f"config of {name!r}: sliding_window={window} is larger than the context "
            f"max_position_embeddings={context}; valid: a window of at most {context} tokens")
    if arch in MLA_ARCHITECTURES and text.get("kv_lora_rank"):
        return "mla"
    if arch in MLA_ARCHITECTURES:
        raise ConfigError(
            f"config of {name!r}: architectures[0]={arch!r} needs kv_lora_rank (its "
            "multi-head latent attention caches one latent per token); valid: an integer >= 1")
    return "dense"
