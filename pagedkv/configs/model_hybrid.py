"""The parts of a ``config.json`` beyond one uniform decoder: the layer split and per-request
state of the hybrid models pagedkv sizes, and a multimodal wrapper's vision encoder.

Sliding-window hybrids: SGLang 0.5.23 splits gpt-oss's layers by ``layer_types`` and Llama 4's
by position (every fourth global; ``configs/model_config.py`` ``get_hybrid_layer_ids``), and
takes gpt-oss's window from its model class (``models/gpt_oss.py``
``get_attention_sliding_window_size``: ``sliding_window - 1``), Llama 4's from
``attention_chunk_size``.

Linear-attention hybrids (Qwen3-Next): every ``full_attention_interval``-th layer is full
attention, the others gated delta nets whose state per request is a convolution window and a
recurrent matrix per layer (:mod:`pagedkv.configs.mamba_utils`, SGLang's
``configs/mamba_utils.py`` and ``configs/qwen3_next.py`` ``mamba2_cache_params``)::

    conv:     (V_heads * V_dim + 2 * K_heads * K_dim) / tp  x  (conv_kernel - 1)   bf16
    temporal: V_heads / tp  x  V_dim  x  K_dim                                     fp32

(the state dtypes: ``SGLANG_MAMBA_CONV_DTYPE`` bfloat16, ``mamba_ssm_dtype`` float32 unless
the config names another).
"""

from __future__ import annotations

from typing import Any

from pagedkv.configs.mamba_utils import gdn_cache_params, linear_layer_ids
from pagedkv.configs.model_family import MULTIMODAL_ARCHITECTURES
from pagedkv.errors import ConfigError


def swa_layer_count(text: dict[str, Any], arch: str) -> int:
    """Window layers of a sliding-window hybrid: Llama 4's layers but every fourth, gpt-oss's
    ``layer_types`` entries ``"sliding_attention"`` (the family check has made sure both
    kinds are there)."""
    if arch == "Llama4ForConditionalGeneration":
        return sum((i + 1) % 4 != 0 for i in range(text["num_hidden_layers"]))
    return sum(kind == "sliding_attention" for kind in text["layer_types"])


def swa_window(text: dict[str, Any], arch: str) -> int:
    """SGLang's ``sliding_window_size`` (``load_model_utils.resolve_sliding_window_size``):
    gpt-oss's model class gives ``sliding_window - 1``; Llama 4's has no such method and its
    text config no window, so SGLang takes ``attention_chunk_size``."""
    if arch == "Llama4ForConditionalGeneration":
        return int(text["attention_chunk_size"])
    return int(text["sliding_window"]) - 1


#: Model classes whose SGLang implementation states its own window
#: (``get_attention_sliding_window_size``): ``models/gpt_oss.py``, ``gemma2.py``,
#: ``gemma3_causal.py``, ``gemma3_mm.py`` (0.5.9 and 0.5.23).
WINDOW_FROM_MODEL_CLASS = frozenset({"GptOssForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
                                     "Gemma3ForConditionalGeneration"})

#: The text-config keys SGLang's ``ModelConfig._get_sliding_window_size`` reads, in order.
WINDOW_KEYS = ("sliding_window_size", "sliding_window", "window_size")


def window_from_attention_chunk(text: dict[str, Any], arch: str, is_hybrid_swa: bool) -> int | None:
    """The ``attention_chunk_size`` SGLang takes as the window when nothing else gives one, and
    logs as "Setting sliding_window_size to be attention_chunk_size: N" (Llama 4); None when
    the model class gives the window, when a sliding-window hybrid's config does
    (``is_hybrid_swa``: SGLang's ``ModelConfig.is_hybrid_swa``, false under
    ``--disable-hybrid-swa-memory``), or when the config has no chunk.

    Source: 0.5.23 ``model_executor/model_runner_components/load_model_utils.py``
    ``resolve_sliding_window_size``; 0.5.9 ``model_executor/model_runner.py``
    ``ModelRunner.load_model`` (the same three branches; the line comes before "Load weight
    end").
    """
    chunk = text.get("attention_chunk_size")
    if arch in WINDOW_FROM_MODEL_CLASS:
        return None
    if is_hybrid_swa and any(text.get(key) is not None for key in WINDOW_KEYS):
        return None
    return None if chunk is None else int(chunk)


def linear_layer_count(text: dict[str, Any]) -> int:
    """Gated-delta-net layers: those whose ``(i + 1) % full_attention_interval`` is not 0."""
    return len(linear_layer_ids(text))


def gdn_state_bytes(text: dict[str, Any], tp: int, name: str = "custom") -> tuple[int, int]:
    """Bytes of one request's state slot, over every gated-delta-net layer, on one rank:
    ``(conv_state, ssm_state)`` (SGLang logs the two apart); see
    :func:`pagedkv.configs.mamba_utils.gdn_cache_params`.

    Raises:
        ConfigError: ``tp`` does not divide the linear-attention key and value heads
            (SGLang pads them only on its CPU engine), or an unknown ``mamba_ssm_dtype``.
    """
    params = gdn_cache_params(text, tp, name)
    return params.conv_bytes_per_req, params.temporal_bytes_per_req


def vision_encoder(config: dict[str, Any], name: str) -> tuple[int, int] | None:
    """``(num_hidden_layers, hidden_size)`` of a multimodal wrapper's ``vision_config``.

    Raises:
        ConfigError: a multimodal architecture whose ``vision_config`` lacks either field.
    """
    archs = config.get("architectures") or [""]
    if archs[0] not in MULTIMODAL_ARCHITECTURES:
        return None
    vision = config.get("vision_config")
    vision = vision if isinstance(vision, dict) else {}
    for key in ("num_hidden_layers", "hidden_size"):
        value = vision.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"config of {name!r}: vision_config.{key}={value!r} is invalid or missing, and "
                f"SGLang sizes {archs[0]}'s memory by its vision encoder; valid: an integer >= 1")
    return vision["num_hidden_layers"], vision["hidden_size"]
