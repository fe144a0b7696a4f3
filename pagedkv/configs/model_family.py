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

pagedkv sizes the one-pool families, the sliding-window hybrids in :data:`SWA_SIZED` and the
linear-attention hybrids in :data:`LINEAR_SIZED` (:mod:`pagedkv.hybrid_pools`); the lists are
:mod:`pagedkv.configs.architectures`. Every other
model is refused with a :class:`~pagedkv.errors.ConfigError` that names the field, its value
and what to pass, so that no number is printed for a model whose pools SGLang builds in a way
pagedkv does not model.
"""

from __future__ import annotations

from typing import Any

from pagedkv.configs.architectures import (
    DENSE_ARCHITECTURES,
    LINEAR_HYBRID_ARCHITECTURES,
    LINEAR_SIZED,
    MLA_ARCHITECTURES,
    MODEL_TYPE_ARCHITECTURES,
    MULTIMODAL_ARCHITECTURES,
    ONE_POOL_WHEN_SWA_DISABLED,
    SWA_HYBRID_ARCHITECTURES,
    SWA_SIZED,
)
from pagedkv.errors import ConfigError

#: Fields a published ``text_config`` may leave out, with the value transformers' config class
#: fills in (SGLang reads the config through it): ``Gemma3TextConfig``'s defaults.
TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"max_position_embeddings": 131072, "num_key_value_heads": 4,
                    "head_dim": 256, "sliding_window": 4096},
}

#: Text model types whose rope transformers 5 (SGLang 0.5.23's) keeps per layer type
#: (``Gemma3TextConfig.rope_parameters``: one for the window layers, one for the global ones),
#: so that SGLang's ``get_context_length`` finds no ``factor`` in ``rope_scaling``;
#: transformers 4.57 (SGLang 0.5.9's) keeps the config's one ``rope_scaling`` dict.
ROPE_PER_LAYER_TYPE = frozenset({"gemma3_text"})


def rope_context_factor(text: dict[str, Any]) -> float:
    """The factor SGLang's ``get_context_length`` multiplies ``max_position_embeddings`` by,
    read from a config's own ``rope_scaling`` dict: its ``factor`` (default 1), except 1 when
    it names ``original_max_position_embeddings`` (YaRN) or is ``rope_type: llama3``.
    Source: ``utils/hf_transformers/common.py`` (0.5.9: ``utils/hf_transformers_utils.py``)."""
    scaling = text.get("rope_scaling")
    if not isinstance(scaling, dict) or not scaling:
        return 1
    if "original_max_position_embeddings" in scaling or scaling.get("rope_type") == "llama3":
        return 1
    return scaling.get("factor", 1)


#: Model types whose transformers config class (4.57.1, SGLang 0.5.9's) stores
#: ``head_dim=None`` when ``config.json`` omits it (``MistralConfig``, ``MixtralConfig``).
HEAD_DIM_LEFT_NONE = frozenset({"mistral", "mixtral"})


#: ``layer_types`` entries transformers writes, and the ones pagedkv sizes as full layers.
KNOWN_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention",
                               "linear_attention", "mamba", "attention"})

#: The hybrid families in words, for messages.
HYBRID_WORDS = {"swa": "sliding-window", "linear": "linear-attention"}

_SUPPORTED = ", ".join(sorted(DENSE_ARCHITECTURES | MLA_ARCHITECTURES))


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The part of ``config`` that describes the decoder (SGLang ``hf_text_config``).

    Multimodal wrappers (Gemma 3, Llama 4, Qwen3.5) nest it as ``text_config``; the
    checkpoint's dtype may sit on the outer level only, so it is carried over.
    """
    inner = config.get("text_config")
    if not isinstance(inner, dict):
        return config
    merged = {**TEXT_DEFAULTS.get(str(inner.get("model_type")), {}), **inner}
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
    """Which pools SGLang 0.5.23 builds for the model: ``"dense"``, ``"mla"``, ``"swa"`` or
    ``"linear"`` (see the module's docstring).

    ``"swa"``: a sliding-window hybrid pagedkv sizes (:data:`SWA_SIZED`): a full pool and a
    sliding-window pool. With SGLang's ``--disable-hybrid-swa-memory``
    (``disable_hybrid_swa_memory``), ``ModelConfig.is_hybrid_swa`` is false: such a model then
    gets the default configurator's one pool, full-length for every layer, window layers
    included (``"dense"``). ``"linear"``: a linear-attention hybrid pagedkv sizes
    (:data:`LINEAR_SIZED`): KV for its full-attention layers and per-request state slots.

    Raises:
        ConfigError: a hybrid pagedkv does not size, an architecture SGLang 0.5.23 pools in
            some other way or that pagedkv does not know, inconsistent ``layer_types``, a
            field the family needs missing, or a sliding window larger than the context.
            The message names the field, its value and what to pass.
    """
    arch = architecture_of(config, name)
    text = text_config(config)
    kinds = check_layer_types(text, name)
    if arch in LINEAR_SIZED:
        check_linear_fields(text, name, arch)
        return "linear"
    if arch in LINEAR_HYBRID_ARCHITECTURES or "linear_attention" in kinds or "mamba" in kinds:
        raise ConfigError(
            f"config of {name!r}: architectures[0]={arch!r} is a linear-attention hybrid "
            "whose state layout pagedkv does not model (SGLang keeps KV only for its "
            "full-attention layers plus a pool of per-request state slots); valid: "
            + ", ".join(sorted(LINEAR_SIZED)) + f", or a one-pool model ({_SUPPORTED})")
    one_pool = arch in ONE_POOL_WHEN_SWA_DISABLED
    if arch in SWA_SIZED and not disable_hybrid_swa_memory:
        check_swa_fields(text, name, arch, kinds)
        return "swa"
    if arch in SWA_HYBRID_ARCHITECTURES and not (one_pool and disable_hybrid_swa_memory):
        raise ConfigError(
            f"config of {name!r}: architectures[0]={arch!r} is a sliding-window hybrid whose "
            "pools pagedkv does not model (SGLang 0.5.23 gives it a full-attention pool and a "
            "sliding-window pool of its own layout"
            + ("; pagedkv does not size it under --disable-hybrid-swa-memory either); valid "
               "under that flag: " + ", ".join(sorted(ONE_POOL_WHEN_SWA_DISABLED))
               if disable_hybrid_swa_memory else "); valid: " + ", ".join(sorted(SWA_SIZED)))
            + f", or a one-pool model ({_SUPPORTED})")
    if arch not in (DENSE_ARCHITECTURES | MLA_ARCHITECTURES | ONE_POOL_WHEN_SWA_DISABLED
                    | set(MULTIMODAL_ARCHITECTURES)):
        raise ConfigError(
            f"config of {name!r}: architectures[0]={arch!r} is an architecture pagedkv does not "
            f"size (its pools may differ from one KV pool); valid: {_SUPPORTED}, "
            + ", ".join(sorted(SWA_SIZED | LINEAR_SIZED)))
    window = text.get("sliding_window")
    uses_window = "sliding_attention" in kinds or (
        arch.startswith("Gemma") and window is not None)
    if uses_window:
        check_window(text, name)
    if arch in MLA_ARCHITECTURES and text.get("kv_lora_rank"):
        return "mla"
    if arch in MLA_ARCHITECTURES:
        raise ConfigError(
            f"config of {name!r}: architectures[0]={arch!r} needs kv_lora_rank (its "
            "multi-head latent attention caches one latent per token); valid: an integer >= 1")
    return "dense"


def check_window(text: dict[str, Any], name: str) -> None:
    """Raise ConfigError when ``sliding_window`` is larger than ``max_position_embeddings``."""
    window = text.get("sliding_window")
    context = text.get("max_position_embeddings")
    if isinstance(window, int) and isinstance(context, int) and window > context:
        raise ConfigError(
            f"config of {name!r}: sliding_window={window} is larger than the context "
            f"max_position_embeddings={context}; valid: a window of at most {context} tokens")


def _need(text: dict[str, Any], name: str, arch: str, field: str, valid: str) -> None:
    value = text.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"config of {name!r}: {field}={value!r} is invalid or missing, and SGLang needs it "
            f"to size {arch}; valid: {valid}")


def check_swa_fields(text: dict[str, Any], name: str, arch: str, kinds: list[str]) -> None:
    """What a sliding-window hybrid needs to be split as SGLang splits it
    (``configs/model_config.py`` ``get_hybrid_layer_ids``): gpt-oss, ``sliding_window`` and
    ``layer_types`` naming both kinds; Llama 4, ``attention_chunk_size`` (every fourth layer
    is global, the others attend within their chunk).

    Raises:
        ConfigError: a field missing or inconsistent, or a window larger than the context.
    """
    if arch == "Llama4ForConditionalGeneration":
        _need(text, name, arch, "attention_chunk_size", "the chunk in tokens, an integer >= 1")
        _need(text, name, arch, "num_hidden_layers", "an integer >= 4 (every fourth is global)")
        window, context = text["attention_chunk_size"], text.get("max_position_embeddings")
        if isinstance(context, int) and window > context:
            raise ConfigError(
                f"config of {name!r}: attention_chunk_size={window} is larger than the context "
                f"max_position_embeddings={context}; valid: a chunk of at most {context} tokens")
        return
    _need(text, name, arch, "sliding_window", "the window in tokens, an integer >= 1")
    if not kinds or "sliding_attention" not in kinds or "full_attention" not in kinds:
        raise ConfigError(
            f"config of {name!r}: layer_types={kinds!r} names no sliding_attention and "
            f"full_attention layers, which SGLang reads to split {arch}'s pools; valid: one "
            "entry per layer, 'sliding_attention' or 'full_attention', both present")
    odd = sorted({k for k in kinds if k not in ("sliding_attention", "full_attention")})
    if odd:
        raise ConfigError(
            f"config of {name!r}: layer_types holds {odd!r}, which {arch} does not have; "
            "valid: 'sliding_attention' and 'full_attention'")
    check_window(text, name)


def check_linear_fields(text: dict[str, Any], name: str, arch: str) -> None:
    """What a gated-delta-net hybrid (Qwen3-Next) needs: its full-attention interval and
    the linear-attention head sizes (SGLang's ``Qwen3NextConfig``).

    Raises:
        ConfigError: a field missing or not a positive integer.
    """
    for field in ("full_attention_interval", "linear_num_key_heads", "linear_num_value_heads",
                  "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim"):
        _need(text, name, arch, field, "an integer >= 1 (as the published config.json has it)")
    interval, layers = text["full_attention_interval"], text.get("num_hidden_layers")
    if isinstance(layers, int) and interval > layers:
        raise ConfigError(
            f"config of {name!r}: full_attention_interval={interval} is larger than "
            f"num_hidden_layers={layers}, which leaves no full-attention layer; valid: 1.."
            f"{layers}")
