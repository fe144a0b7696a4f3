"""Giving a request's KV back: the one exit every finished or retracted request takes.

Follows SGLang's ``python/sglang/srt/mem_cache/common.py`` (``release_kv_cache``, 0.5.9 and
0.5.23): the prefix cache decides what stays cached and frees the rest
(:meth:`~pagedkv.mem_cache.radix_cache.RadixCache.cache_finished_req`), then the request's
``req_to_token`` row is freed, and on a linear-attention hybrid its state slot.
"""

from __future__ import annotations

from collections.abc import Sequence
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
        mamba_req = cast(MambaRequest, req)
        # the mamba radix cache has already given the state slots back (or to the tree)
        if mamba_req.mamba_pool_idx >= 0:
            req_to_token_pool.free_mamba_cache(mamba_req)


def alloc_req_slots(reqs: Sequence[MambaRequest], req_to_token_pool: ReqToTokenPool) -> None:
    """Give each request of ``reqs`` (none holding a row) a row and, on a
    :class:`~pagedkv.mem_cache.mamba_pool.HybridReqToTokenPool`, a state slot unless it holds
    one, in one call for the whole pass: SGLang 0.5.23 ``mem_cache/allocation.py``
    ``alloc_req_slots`` (0.5.9 ``mem_cache/common.py``). The rows are taken together, as
    SGLang takes them (0.5.23: the last ``len(reqs)`` of the free list, in list order).

    Raises:
        OutOfMemoryError: too few rows or state slots (admission, which counts both, should
            have prevented it; SGLang raises ``RuntimeError`` / asserts).
    """
    if not reqs:
        return
    if isinstance(req_to_token_pool, HybridReqToTokenPool):
        rows = req_to_token_pool.alloc(reqs)
    else:
        rows = req_to_token_pool.alloc(len(reqs))
        for req, row in zip(reqs, rows or (), strict=False):
            req.req_pool_idx = row
    if rows is None:
        raise OutOfMemoryError(f"alloc_req_slots runs out of memory: {len(reqs)} request rows "
                               f"asked, {req_to_token_pool.available_size()} free; admission "
                               "should have counted the free rows")
