"""The per-request recurrent state of a linear-attention hybrid: its tensor shapes and dtypes.

Follows SGLang 0.5.23 ``python/sglang/srt/configs/mamba_utils.py`` (``Mamba2StateShape.create``,
``Mamba2StateDType``, ``BaseLinearStateParams.mamba_cache_per_req``) and
``configs/qwen3_next.py`` (``Qwen3NextConfig.mamba2_cache_params``), which 0.5.9 computes the
same way. One request's state slot is, per linear-attention layer on one attention-TP rank:

- a convolution window ``(conv_dim / tp, conv_kernel - 1)`` in bfloat16, where
  ``conv_dim = intermediate_size + 2 * n_groups * state_size`` (``n_groups`` rounded up to a
  multiple of ``tp`` when ``tp`` does not divide it: every head shard carries its groups);
- a recurrent (temporal) matrix ``(num_heads / tp, head_dim, state_size)`` in
  ``mamba_ssm_dtype`` (float32 unless the config names another).

Where we simplify: SGLang lets the environment override both dtypes
(``SGLANG_MAMBA_CONV_DTYPE``, ``SGLANG_MAMBA_SSM_DTYPE``) and turns an unknown
``mamba_ssm_dtype`` into float32 with a warning; pagedkv takes the defaults and refuses an
unknown name (a config that would be sized on a dtype it does not say).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pagedkv.errors import ConfigError, bad_value, check_positive_int

#: Bytes of the state dtypes SGLang accepts (``mamba2_state_dtype``'s ``dtype_map``).
STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: ``SGLANG_MAMBA_CONV_DTYPE``'s default.
DEFAULT_CONV_DTYPE = "bfloat16"
#: ``mamba2_state_dtype``'s SSM default, when the config names none.
DEFAULT_SSM_DTYPE = "float32"


def divide(numerator: int, denominator: int, name: str) -> int:
    """SGLang's ``distributed.utils.divide``: an exact quotient, else :class:`ConfigError`
    naming ``name`` (SGLang asserts)."""
    if numerator % denominator:
        raise bad_value("tp", denominator, f"a divisor of {name}={numerator}")
    return numerator // denominator


@dataclass(frozen=True)
class Mamba2StateShape:
    """One layer's state shapes on one rank: ``conv`` (one ``(dim, K - 1)`` tuple per conv
    tensor; GDN has one) and ``temporal`` ``(heads, head_dim, state_size)``."""

    conv: tuple[tuple[int, int], ...]
    temporal: tuple[int, int, int]

    @staticmethod
    def create(*, tp_world_size: int, intermediate_size: int, n_groups: int, num_heads: int,
               head_dim: int, state_size: int, conv_kernel: int) -> Mamba2StateShape:
        """SGLang 0.5.23 ``Mamba2StateShape.create`` (its shapes; the fields it keeps for the
        speculative and transfer paths are left out).

        Raises:
            ConfigError: ``tp_world_size`` does not divide ``conv_dim`` or ``num_heads``.
        """
        check_positive_int("tp", tp_world_size)
        if n_groups % tp_world_size:  # extra_groups_for_head_shards
            n_groups += tp_world_size - n_groups
        conv_dim = intermediate_size + 2 * n_groups * state_size
        conv = (divide(conv_dim, tp_world_size, "conv_dim"), conv_kernel - 1)
        temporal = (divide(num_heads, tp_world_size, "num_heads"), head_dim, state_size)
        return Mamba2StateShape(conv=(conv,), temporal=temporal)


@dataclass(frozen=True)
class Mamba2CacheParams:
    """What ``MambaPool`` is built from (SGLang's ``Mamba2CacheParams``): the shapes, the
    linear-attention layer ids (``layers``) and the two dtype names."""

    shape: Mamba2StateShape
    layers: tuple[int, ...]
    conv_dtype: str = DEFAULT_CONV_DTYPE
    temporal_dtype: str = DEFAULT_SSM_DTYPE

    def __post_init__(self) -> None:
        for name in ("conv_dtype", "temporal_dtype"):
            value = getattr(self, name)
            if value not in STATE_DTYPE_BYTES:
                raise bad_value(name, value, ", ".join(STATE_DTYPE_BYTES))

    @property
    def conv_bytes_per_req(self) -> int:
        """Convolution-state bytes of one slot, over every layer."""
        numel = sum(math.prod(shape) for shape in self.shape.conv)
        return numel * STATE_DTYPE_BYTES[self.conv_dtype] * len(self.layers)

    @property
    def temporal_bytes_per_req(self) -> int:
        """Recurrent-state bytes of one slot, over every layer."""
        numel = math.prod(self.shape.temporal)
        return numel * STATE_DTYPE_BYTES[self.temporal_dtype] * len(self.layers)

    @property
    def mamba_cache_per_req(self) -> int:
        """Bytes of one slot (SGLang's ``mamba_cache_per_req``): conv + temporal."""
        return self.conv_bytes_per_req + self.temporal_bytes_per_req


def linear_layer_ids(text: dict[str, Any]) -> tuple[int, ...]:
    """Qwen3-Next's gated-delta-net layers: those whose ``(i + 1) % full_attention_interval``
    is not 0 (transformers' ``layer_types``, SGLang's ``linear_layer_ids``)."""
    interval = text["full_attention_interval"]
    return tuple(i for i in range(text["num_hidden_layers"]) if (i + 1) % interval)


def gdn_cache_params(text: dict[str, Any], tp: int, name: str = "custom") -> Mamba2CacheParams:
    """Qwen3-Next's state on one attention-TP rank (``Qwen3NextConfig.mamba2_cache_params``).

    Args:
        text: the (text) config dict: ``linear_{num_key,num_value}_heads``,
            ``linear_{key,value}_head_dim``, ``linear_conv_kernel_dim``,
            ``full_attention_interval``, ``num_hidden_layers``, optional ``mamba_ssm_dtype``.
        tp: the attention-TP size.

    Raises:
        ConfigError: ``tp`` does not divide the key and value heads (SGLang pads them only on
            its CPU engine), or an unknown ``mamba_ssm_dtype``.
    """
    check_positive_int("tp", tp)
    k_heads, v_heads = text["linear_num_key_heads"], text["linear_num_value_heads"]
    if k_heads % tp or v_heads % tp:
        raise bad_value("tp", tp, f"a divisor of linear_num_key_heads={k_heads} and "
                        f"linear_num_value_heads={v_heads}")
    ssm = text.get("mamba_ssm_dtype") or DEFAULT_SSM_DTYPE
    if ssm not in STATE_DTYPE_BYTES:
        raise ConfigError(f"config of {name!r}: mamba_ssm_dtype={ssm!r} is invalid; valid: "
                          + ", ".join(STATE_DTYPE_BYTES))
    v_dim = text["linear_value_head_dim"]
    shape = Mamba2StateShape.create(
        tp_world_size=tp, intermediate_size=v_dim * v_heads, n_groups=k_heads,
        num_heads=v_heads, head_dim=v_dim, state_size=text["linear_key_head_dim"],
        conv_kernel=text["linear_conv_kernel_dim"])
    return Mamba2CacheParams(shape, linear_layer_ids(text), DEFAULT_CONV_DTYPE, ssm)
