"""A DeepSeek V3.2 (DSA) config's fields and its bytes per token, as SGLang reads them.

SGLang ``configs/model_config.py`` ``is_deepseek_dsa`` decides which configs are DSA;
``_compute_dsa_indexer_cell_size`` (0.5.23 ``model_executor/pool_configurator.py``) and
``calculate_mla_kv_cache_dim`` (``mem_cache/kv_cache_configurator.py``) give the index key's
and the latent's bytes per token and layer. :class:`~pagedkv.configs.model_config.ModelSpec`
reads these; the pool built from them (page size, pool bytes, start-up lines) is
:mod:`pagedkv.dsa_indexer`'s.
"""

from __future__ import annotations

from typing import Any

from pagedkv.errors import ConfigError, bad_value

#: ``DSATokenToKVPool.quant_block_size``: fp8 values per float32 scale (index keys, latents).
QUANT_BLOCK_SIZE = 128
#: Bytes of one float32 scale.
SCALE_BYTES = 4
#: ``DSATokenToKVPool.rope_storage_dtype`` (bf16): the rope part stays in 16 bits under fp8.
ROPE_STORAGE_BYTES = 2
#: KV dtypes SGLang accepts for DSA (pagedkv's names; SGLang's "bf16" becomes "bfloat16").
DSA_KV_DTYPES = ("bf16", "fp8_e4m3")
#: Architectures ``is_deepseek_dsa`` lists that pagedkv sizes (with ``index_topk`` set).
DSA_ARCHITECTURES = frozenset({"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"})
#: Config fields that make some layers reuse another's top-k or pool keys: not modelled.
_UNMODELLED = {"index_topk_freq": 1, "index_topk_pattern": None, "indexer_types": None,
               "cli_factor": 1, "index_kpool": 1, "index_skip_topk_offset": None}


def is_dsa(architecture: str, config: dict[str, Any]) -> bool:
    """SGLang's ``is_deepseek_dsa`` for the architectures pagedkv sizes: a DeepSeek V3/V3.2
    ``architecture`` whose config has ``index_topk``."""
    return architecture in DSA_ARCHITECTURES and config.get("index_topk") is not None


def check_dsa_fields(config: dict[str, Any], name: str) -> int:
    """The config's ``index_head_dim``, checked as SGLang checks it.

    Raises:
        ConfigError: ``index_head_dim`` is not 128 (``DSATokenToKVPool`` asserts it), or a
            field that skips or pools index keys is set (not modelled by pagedkv).
    """
    dim = config.get("index_head_dim")
    if dim != 128 or isinstance(dim, bool):
        raise ConfigError(
            f"config of {name!r}: index_head_dim={dim!r}; SGLang's DSATokenToKVPool asserts "
            "index_head_dim == 128 (one 128-wide fp8 key per token and layer); valid: 128")
    for key, default in _UNMODELLED.items():
        if config.get(key, default) not in (default, None):
            raise ConfigError(
                f"config of {name!r}: {key}={config[key]!r} changes which layers keep index "
                "keys, which pagedkv does not model; valid: leave it out (DeepSeek V3.2's "
                "config has none of index_topk_freq, index_topk_pattern, indexer_types, "
                "cli_factor, index_kpool, index_skip_topk_offset)")
    return dim


def indexer_bytes_per_token(index_head_dim: int) -> int:
    """Bytes of one token's index key in one layer: the fp8 key and its float32 scales,
    ``index_head_dim + index_head_dim // 128 * 4`` (132 for V3.2), stored as uint8.
    Source: 0.5.23 ``pool_configurator.py`` ``_compute_dsa_indexer_cell_size``."""
    return index_head_dim + index_head_dim // QUANT_BLOCK_SIZE * SCALE_BYTES


def latent_bytes_per_token(kv_lora_rank: int, qk_rope_head_dim: int, kv_cache_dtype: str) -> int:
    """Bytes of one token's MLA latent in one layer of a DSA pool.

    bf16: ``(kv_lora_rank + qk_rope_head_dim) * 2`` (1,152 for V3.2). fp8_e4m3: the latent in
    fp8 with a float32 scale per 128 values and the rope part in bf16,
    ``kv_lora_rank + kv_lora_rank // 128 * 4 + qk_rope_head_dim * 2`` (656), stored as uint8.
    Source: 0.5.23 ``kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim`` (CUDA below
    sm_100, where the fp8 backends are flashmla_kv: the scaled layout).

    Raises:
        ConfigError: a KV dtype DSA refuses.
    """
    check_dsa_kv_dtype(kv_cache_dtype)
    if kv_cache_dtype == "fp8_e4m3":
        return (kv_lora_rank + kv_lora_rank // QUANT_BLOCK_SIZE * SCALE_BYTES
                + qk_rope_head_dim * ROPE_STORAGE_BYTES)
    return (kv_lora_rank + qk_rope_head_dim) * 2


def check_dsa_kv_dtype(kv_cache_dtype: str) -> None:
    """Raise ConfigError unless ``kv_cache_dtype`` is one SGLang accepts for DSA (its
    ``_dsa_kv_cache_dtype_default`` asserts "DeepSeek DSA only supports bf16/bfloat16 or
    fp8_e4m3 kv_cache_dtype")."""
    if kv_cache_dtype not in DSA_KV_DTYPES:
        raise bad_value("kv_cache_dtype", kv_cache_dtype,
                        "bf16 or fp8_e4m3 (SGLang: DeepSeek DSA only supports bf16/bfloat16 or "
                        "fp8_e4m3 kv_cache_dtype)")
