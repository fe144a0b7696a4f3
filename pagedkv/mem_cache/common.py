"""Giving a request's KV back: the one exit every finished or retracted request takes.

Follows SGLang's ``python/sglang/srt/mem_cache/common.py`` (``release_kv_cache``, 0.5.9 and
0.5.23): the prefix cache decides what stays cached and frees the rest
(:meth:`~pagedkv.mem_cache.radix_cache.RadixCache.cache_finished_req`), then the request's
``req_to_token`` row is freed.
"""

from __future__ import annotations

from pagedkv.mem_cache.base_prefix_cache import BasePrefixCache, CacheReq
from pagedkv.mem_cache.memory_pool import ReqToTokenPool


def release_kv_cache(req: CacheReq, tree_cache: BasePrefixCache, req_to_token_pool: ReqToTokenPool,
                     is_insert: bool = True) -> None:
    """Release ``req``'s KV and row: cached in the tree with ``is_insert`` (it finished),
    or freed past its tree prefix without (it was retracted). Afterwards the request holds
    no slots (``kv_committed_len`` 0) and no row (``req_pool_idx`` -1).

    Source: ``mem_cache/common.py: release_kv_cache`` (``is_insert`` in 0.5.9,
    ``checkpoint`` in 0.5.23).
    """
    tree_cache.cache_finished_req(req, is_insert=is_insert)
    req_to_token_pool.free(req.req_pool_idx)
    req.req_pool_idx = -1
    req.kv_committed_len = 0
