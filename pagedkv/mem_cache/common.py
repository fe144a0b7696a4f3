"""Giving a request's KV back: the one exit every finished or retracted request takes.

Follows SGLang's ``python/sglang/srt/mem_cache/common.py`` (``release_kv_cache``, 0.5.9 and
0.5.23): the prefix cache decides what stays cached and frees the rest
(:meth:`~pagedkv.mem_cache.radix_cache.RadixCache.cache_finished_req`), then the request's
``req_to_token`` row is freed, and on a linear-attention hybrid its state slot.
"""

from __future__ import annotations

from typing import cast

from pagedkv.errors import OutOfMemoryError
from pagedkv.mem_cache.base_prefix_cache import BasePrefixCache, CacheReq
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool, MambaRequest
from pagedkv.mem_cache.memory_pool import ReqToTokenPool


def release_kv_cache(req: CacheReq, tree_cache: BasePrefixCache, req_to_token_pool: ReqToTokenPool,
                     is_insert: bool = True) -> None:
    """Release ``req``'s KV and row: cached in the tree with ``is_insert`` (it finished),
    or freed past its tree prefix without (it was retracted). Afterwards the request holds
    no slots (``kv_committed_len`` 0), no row (``req_pool_idx`` -1) and, on a
    :class:`~pagedkv.mem_cache.mamba_pool.HybridReqToTokenPool`, no state slot
    (``mamba_pool_idx`` -1): a finished and a retracted request alike.

    Source: ``mem_cache/common.py: release_kv_cache`` (``is_insert`` in 0.5.9,
    ``checkpoint`` in 0.5.23); the state slot: 0.5.23 ``UnifiedRadixCache.on_release`` (or
    ``checkpoint_into_tree`` of a disabled cache) -> the mamba component's
    ``cleanup_after_caching_req`` -> ``HybridReqToTokenPool.free_mamba_cache``.
    """
    tree_cache.cache_finished_req(req, is_insert=is_insert)
    req_to_token_pool.free(req.req_pool_idx)
    req.req_pool_idx = -1
    req.kv_committed_len = 0
    if isinstance(req_to_token_pool, HybridReqToTokenPool):
        req_to_token_pool.free_mamba_cache(cast(MambaRequest, req))


def alloc_req_slot(req: MambaRequest, req_to_token_pool: ReqToTokenPool) -> None:
    """Give ``req`` (holding no row) a row and, on a
    :class:`~pagedkv.mem_cache.mamba_pool.HybridReqToTokenPool`, a state slot unless it holds
    one: SGLang 0.5.23 ``mem_cache/allocation.py`` ``alloc_req_slots`` for one request.

    Raises:
        OutOfMemoryError: no row or no state slot free (admission, which counts both,
            should have prevented it; SGLang raises ``RuntimeError`` / asserts).
    """
    if isinstance(req_to_token_pool, HybridReqToTokenPool):
        rows = req_to_token_pool.alloc([req])
    else:
        rows = req_to_token_pool.alloc(1)
        if rows is not None:
            req.req_pool_idx = rows[0]
    if rows is None:
        raise OutOfMemoryError("alloc_req_slots runs out of memory: no request row is free; "
                               "admission should have counted the free rows")
