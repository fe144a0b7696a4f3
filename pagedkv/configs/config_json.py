"""ModelSpec's fields read from a Hugging Face ``config.json``: which pools, the KV geometry,
the weights' dtype, the hybrid layers, the rope factor.

Follows SGLang ``python/sglang/srt/configs/model_config.py`` (``ModelConfig.__init__``:
``hf_text_config``, ``get_num_kv_heads``, ``head_dim``, MLA detection, ``dtype="auto"``) and
``srt/utils/hf_transformers_utils.py`` (``get_hf_text_config``, ``get_context_length``).
:meth:`pagedkv.configs.model_config.ModelSpec.from_config` builds the spec from these fields;
this module reads, the spec computes (cell sizes, weight bytes).
"""

from __future__ import annotations

from typing import Any

from pagedkv.configs.dsa_config import check_dsa_fields, is_dsa
from pagedkv.configs.model_family import (
    HEAD_DIM_LEFT_NONE,
    ROPE_PER_LAYER_TYPE,
    architecture_of,
    attention_family,
    rope_context_factor,
    text_config,
)
from pagedkv.configs.model_hybrid import (
    linear_layer_count,
    swa_layer_count,
    swa_window,
    vision_encoder,
)
from pagedkv.errors import ConfigError, check_positive_int
from pagedkv.units import kv_dtype_bytes
from pagedkv.weights import quant_method

_REQUIRED = ("num_hidden_layers", "num_attention_heads", "hidden_size")


def spec_fields(config: dict[str, Any], name: str = "custom", checkpoint_bytes: int | None = None,
                disable_hybrid_swa_memory: bool = False) -> dict[str, Any]:
    """The keyword arguments of :class:`~pagedkv.configs.model_config.ModelSpec` for the
    parsed ``config.json`` ``config`` (see ``ModelSpec.from_config`` for the arguments).

    Raises:
        ConfigError: a required field is missing or not a positive integer, or a model
            whose pools pagedkv does not size exactly (see
            :func:`pagedkv.configs.model_family.attention_family`).
    """
    family = attention_family(config, name, disable_hybrid_swa_memory)
    full = config
    arch = str((full.get("architectures") or [""])[0])
    config = text_config(config)
    missing = [k for k in _REQUIRED if k not in config]
    if missing:
        raise ConfigError(
            f"config of {name!r} lacks required field(s) {', '.join(missing)}; "
            f"valid: a Hugging Face config.json with {', '.join(_REQUIRED)}"
        )
    for key in _REQUIRED:
        check_positive_int(f"config.{key}", config[key])
    layers = config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    kv_lora = (config.get("kv_lora_rank") or 0) if family == "mla" else 0
    if kv_lora:  # MLA: K heads are nope + rope wide; the cache holds only the latent
        rope = config["qk_rope_head_dim"]
        head_dim, v_head_dim = config["qk_nope_head_dim"] + rope, config["v_head_dim"]
    else:
        rope, v_head_dim = 0, config.get("v_head_dim") or head_dim
    # SGLang's dtype "auto" serves a float32 checkpoint in 16 bits (model_config.py).
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    weight_bytes = min(2, kv_dtype_bytes(dtype.replace("torch.", "")))
    return dict(
        name=name,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        hidden_size=hidden,
        context_len=int(config.get("max_position_embeddings") or 0),
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope,
        weight_dtype_bytes=weight_bytes,
        num_experts=int(config.get("n_routed_experts") or config.get("num_local_experts")
                        or config.get("num_experts") or 0),
        num_experts_per_tok=config.get("num_experts_per_tok") or 0,
        quantization=quant_method(config),
        architecture=str((full.get("architectures") or [""])[0]),
        checkpoint_bytes=checkpoint_bytes,
        model_type=str(full.get("model_type") or ""),
        config=full,
        family=family,
        num_swa_layers=swa_layer_count(config, arch) if family == "swa" else 0,
        sliding_window=swa_window(config, arch) if family == "swa" else None,
        num_linear_layers=linear_layer_count(config) if family == "linear" else 0,
        vision=vision_encoder(full, name),
        rope_factor=rope_context_factor(config),
        rope_per_layer_type=str(config.get("model_type") or "") in ROPE_PER_LAYER_TYPE,
        head_dim_left_none=(str(config.get("model_type") or "") in HEAD_DIM_LEFT_NONE
                            and not config.get("head_dim")),
        index_head_dim=(check_dsa_fields(config, name)
                        if is_dsa(architecture_of(full, name), config) else 0),
    )
