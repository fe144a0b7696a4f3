"""DeepSeek V3.2's sparse attention (DSA): the latent layout and the indexer key cache.

A DSA model (SGLang ``configs/model_config.py`` ``is_deepseek_dsa``: a DeepSeek V3/V3.2
architecture whose config names ``index_topk``) keeps, per token and layer, the MLA latent and
one indexer key: ``index_head_dim`` fp8 bytes plus one float32 scale per 128 of them
(``DSATokenToKVPool.quant_block_size``), stored as uint8. SGLang 0.5.23 sizes both into one
cell (``model_executor/pool_configurator.py`` ``DefaultPoolConfigurator._compute_cell_size``
and ``_compute_dsa_indexer_cell_size``), allocates them in one pool
(``mem_cache/memory_pool.py`` ``DSATokenToKVPool``; the keys in
``mem_cache/index_key_cache.py`` ``IndexKeyCache``: one row of ``page_size * 132`` bytes per
page and layer) and prints their sum as the pool's "KV size". With an fp8 KV cache the
latent is stored with its scales and a bf16 rope part
(``mem_cache/kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim``).

Server arguments (``arg_groups/model_overrides/deepseek_v2.py`` and ``arg_groups/overrides.py``
``_dsa_kv_cache_dtype_default``, ``_dsa_split_backend_resolution``; 0.5.9
``server_args.py`` ``_handle_model_specific_adjustments``): the ``dsa`` attention backend
(``nsa`` in 0.5.9), pages of 64 tokens on CUDA whatever ``--page-size`` says, a KV dtype of
bfloat16 or fp8_e4m3 only, and split prefill/decode backends. What pagedkv models is CUDA
below sm_100 (every CUDA GPU preset): there fp8 uses the scaled layout in both releases, and
0.5.9 profiles it as the raw 576 bytes (:func:`profiled_cell_size`).
Layer-skipping indexers (``index_topk_freq``, ``indexer_types``, ...: GLM-5, LongCat),
pooled keys (``index_kpool`` > 1) and ROCm (whose page size depends on the aiter build) are
refused by name.
"""

from __future__ import annotations

from pagedkv.configs.dsa_config import (
    check_dsa_kv_dtype,
    indexer_bytes_per_token,
    latent_bytes_per_token,
)
from pagedkv.configs.model_config import ModelSpec
from pagedkv.errors import bad_value
from pagedkv.gpus import GPUSpec
from pagedkv.releases import Release

#: The page size SGLang sets for DSA on CUDA (``64 * index_kpool``, index_kpool 1).
DSA_PAGE_SIZE = 64


def dsa_page_size(page_size: int, gpu: GPUSpec | None) -> int:
    """The page size SGLang runs a DSA model with: 64 on CUDA.

    SGLang replaces any ``--page-size`` by 64 ("Setting page size to 64 for DeepSeek DSA.").
    pagedkv takes the default (1) or 64 and refuses any other rather than change it silently.
    ``gpu`` None (measured free memory, no preset) is taken to be CUDA.

    Raises:
        ConfigError: another page size, or a ROCm GPU (its DSA page size is 1 or 64
            depending on the aiter build, which pagedkv cannot see).
    """
    if gpu is not None and gpu.platform != "cuda":
        raise bad_value("gpu", gpu.name, "a CUDA GPU preset for DeepSeek DSA (on ROCm SGLang "
                        "picks page size 1 or 64 by the aiter build, which pagedkv does not model)")
    if page_size not in (1, DSA_PAGE_SIZE):
        raise bad_value("page_size", page_size,
                        f"{DSA_PAGE_SIZE} (or the default 1): SGLang runs DeepSeek DSA with "
                        f"pages of {DSA_PAGE_SIZE} tokens on CUDA whatever --page-size says")
    return DSA_PAGE_SIZE


def profiled_cell_size(model: ModelSpec, kv_cache_dtype: str, tp: int, release: Release) -> int:
    """The bytes per token SGLang profiles the pool with: :meth:`ModelSpec.cell_size`, except
    for a DSA model with an fp8_e4m3 cache under a release that profiles the latent as 576 fp8
    bytes while its pool stores 656 (``Release.dsa_fp8_latent_profiled_as_stored``; 0.5.9
    ``model_runner_kv_cache_mixin.py`` ``get_cell_size_per_token``): there the pool built
    takes more than the budget it was sized from."""
    cell = model.cell_size(kv_cache_dtype, tp)
    if (not model.index_head_dim or kv_cache_dtype != "fp8_e4m3"
            or release.dsa_fp8_latent_profiled_as_stored):
        return cell
    stored = latent_bytes_per_token(model.kv_lora_rank, model.qk_rope_head_dim, kv_cache_dtype)
    raw = model.kv_lora_rank + model.qk_rope_head_dim
    return cell - (stored - raw) * model.num_full_attention_layers


def index_cache_bytes(tokens: int, page_size: int, layers: int, index_head_dim: int) -> int:
    """Bytes of the index key cache for a pool of ``tokens`` tokens: per layer one row of
    ``page_size * 132`` uint8 per page, ``(tokens + page_size + 1) // page_size`` pages (one
    padding page, as the latent buffer's ``size + page_size`` rows).
    Source: 0.5.23 ``mem_cache/index_key_cache.py`` ``IndexKeyCache.__init__`` and
    ``_buffer_shape`` (0.5.9: ``NSATokenToKVPool.__init__``)."""
    pages = (tokens + page_size + 1) // page_size
    return layers * pages * page_size * indexer_bytes_per_token(index_head_dim)


def latent_pool_bytes(tokens: int, page_size: int, layers: int, kv_lora_rank: int,
                      qk_rope_head_dim: int, kv_cache_dtype: str) -> int:
    """Bytes of the latent buffers of a DSA pool of ``tokens`` tokens: ``tokens + page_size``
    rows per layer (``MLATokenToKVPool._create_buffers``)."""
    per_token = latent_bytes_per_token(kv_lora_rank, qk_rope_head_dim, kv_cache_dtype)
    return (tokens + page_size) * per_token * layers


def dsa_pool_bytes(model: ModelSpec, tokens: int, page_size: int, kv_cache_dtype: str) -> int:
    """Bytes of ``model``'s DSA pool of ``tokens`` tokens, latents and index keys: what SGLang
    prints as its "KV size" (``DSATokenToKVPool.get_kv_size_bytes``)."""
    layers = model.num_full_attention_layers
    return (latent_pool_bytes(tokens, page_size, layers, model.kv_lora_rank,
                              model.qk_rope_head_dim, kv_cache_dtype)
            + index_cache_bytes(tokens, page_size, layers, model.index_head_dim))


def dsa_server_args(page_size: int, kv_cache_dtype: str, gpu: GPUSpec | None,
                    release: Release) -> tuple[int, list[str]]:
    """The page size a DSA model runs with and the lines SGLang prints when it sets the
    model's server arguments (CUDA below sm_100): its attention backend, the page size, and
    the split prefill/decode backends for the KV dtype, in ``release``'s words
    (``Release.dsa_attention_backend``). ``kv_cache_dtype`` is explicit: SGLang's
    "Setting KV cache dtype to ... on SM.. device." line, printed only for ``auto``, is not.

    Raises:
        ConfigError: a KV dtype, page size or platform DSA refuses (named).
    """
    check_dsa_kv_dtype(kv_cache_dtype)
    page_size = dsa_page_size(page_size, gpu)
    backend, fp8_prefill_backend = release.dsa_attention_backend
    word = backend.upper()
    if kv_cache_dtype == "fp8_e4m3":
        prefill, decode, dtype = fp8_prefill_backend, "flashmla_kv", "fp8_e4m3"
    else:
        prefill, decode, dtype = "flashmla_sparse", "fa3", "bfloat16"
    return page_size, [
        f"Use {backend} attention backend for DeepSeek with DSA.",
        f"Setting page size to {DSA_PAGE_SIZE} for DeepSeek DSA.",
        f"Set {word} backends for {dtype} KV Cache: prefill={prefill}, decode={decode}."]
