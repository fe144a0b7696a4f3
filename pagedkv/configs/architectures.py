"""Which architectures get which KV pools in SGLang 0.5.23, and which of them pagedkv sizes.

Data only: the architecture lists of ``configs/model_config.py`` (``is_hybrid_swa_model``,
``_derive_hybrid_model``) and ``configs/hybrid_arch.py`` (``mambaish_config``), by the first
``architectures`` entry of a ``config.json``. :mod:`pagedkv.configs.model_family` reads them
to pick a model's family or refuse it by name.
"""

from __future__ import annotations

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
MLA_ARCHITECTURES = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
                               "DeepseekV32ForCausalLM"})  # V3.2: pagedkv.dsa_indexer

#: Sliding-window hybrids SGLang 0.5.23 gives a full and a sliding-window pool
#: (``is_hybrid_swa_model``; the ones with a transformers config today).
SWA_HYBRID_ARCHITECTURES = frozenset({
    "GptOssForCausalLM", "Llama4ForConditionalGeneration", "MiMoV2FlashForCausalLM",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Step3p5ForCausalLM",
})

#: Sliding-window hybrids whose every layer has the same K/V head layout, so that SGLang's
#: ``--disable-hybrid-swa-memory`` leaves the one default pool pagedkv sizes, full-length for
#: every layer (0.5.23 ``ModelConfig._derive_hybrid_model``: ``is_hybrid_swa`` is false; for
#: Llama 4 the chunked layers too; checked against SGLang's own configurator by the reference
#: tests).
ONE_POOL_WHEN_SWA_DISABLED = frozenset({"GptOssForCausalLM", "Llama4ForConditionalGeneration"})

#: Linear-attention (GDN, Mamba, KDA, lightning) hybrids: KV for the full-attention layers
#: only, plus one recurrent-state slot per running request (``mambaish_config``).
LINEAR_HYBRID_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "FalconH1ForCausalLM", "NemotronHForCausalLM",
    "JambaForCausalLM", "MambaForCausalLM", "Mamba2ForCausalLM", "KimiLinearForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MiniMaxText01ForCausalLM", "LFM2ForCausalLM",
    "GraniteMoeHybridForCausalLM",
})

#: Multimodal wrappers of one-pool decoders that pagedkv sizes: SGLang 0.5.23 takes a
#: reservation for their vision features out of the KV budget (``kv_cache_configurator.py``
#: ``mm_runtime_reservation_gb``: ``SGLANG_VLM_CACHE_SIZE_MB``, 100 MiB, with the default
#: CPU feature transport) and lowers its default ``mem_fraction_static`` by the vision
#: encoder's size. Value: the text-only architecture.
MULTIMODAL_ARCHITECTURES: dict[str, str] = {
    "Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
    "Llama4ForConditionalGeneration": "Llama4ForCausalLM",
}

#: ``model_type`` -> architecture, for configs that name no ``architectures``.
MODEL_TYPE_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM", "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration", "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
    "deepseek_v32": "DeepseekV32ForCausalLM", "kimi_k2": "DeepseekV3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "llama4": "Llama4ForConditionalGeneration", "qwen3_next": "Qwen3NextForCausalLM",
}

#: Sliding-window hybrids pagedkv sizes as SGLang 0.5.23 does (checked against its
#: ``HybridSWAPoolConfigurator`` and ``SWARequestCapPoolConfigurator``): window and full
#: layers with the same K/V head layout, split by ``layer_types``.
SWA_SIZED = frozenset({"GptOssForCausalLM", "Llama4ForConditionalGeneration"})

#: Linear-attention hybrids pagedkv sizes as SGLang 0.5.23 does (gated delta nets: the
#: default configurator for the full-attention layers plus ``MambaPool`` state slots).
LINEAR_SIZED = frozenset({"Qwen3NextForCausalLM"})
