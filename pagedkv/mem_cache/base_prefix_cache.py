"""What the scheduler asks of a prefix cache, and what a cache asks of a request.

Follows SGLang's ``python/sglang/srt/mem_cache/base_prefix_cache.py`` (``BasePrefixCache``).
Two caches implement it: :class:`~pagedkv.mem_cache.radix_cache.RadixCache` (the default, as
in SGLang) and :class:`~pagedkv.mem_cache.chunk_cache.ChunkCache` (``--disable-radix-cache``:
nothing is shared, a request's KV is freed when it finishes).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class CacheReq(Protocol):
    """The request state a cache reads and updates (SGLang's ``Req`` / ``ReqKvInfo``).

    Attributes:
        req_pool_idx: the request's row of ``req_to_token``.
        kv_committed_len: tokens whose KV is written (the row's first entries).
        cache_protected_len: leading tokens of the row that belong to the tree (locked by
            this request through ``last_node``), a multiple of the page size.
        prefix_len: tokens of the row already computed before the next extend (the tree
            part plus, for a chunked request, its own unaligned tail).
        last_node: the tree node the request locks (None: nothing locked).
        origin_len: prompt tokens (``len(origin_input_ids)``).
    """

    req_pool_idx: int
    kv_committed_len: int
    cache_protected_len: int
    prefix_len: int
    last_node: Any
    origin_len: int

    def token_ids(self, end: int) -> np.ndarray:
        """The first ``end`` tokens of prompt + output, int64."""
        ...


class BasePrefixCache(Protocol):
    """The scheduler-facing interface of a prefix cache (SGLang ``BasePrefixCache``)."""

    disable: bool
    page_size: int

    def match_prefix(self, key: np.ndarray) -> Any: ...
    def evictable_size(self) -> int: ...
    def protected_size(self) -> int: ...
    def inc_lock_ref(self, node: Any) -> None: ...
    def dec_lock_ref(self, node: Any) -> None: ...
    def evict_from_tree_cache(self, num_tokens: int) -> None: ...
    def cache_unfinished_req(self, req: CacheReq, up_to: int | None = None) -> None: ...
    def cache_finished_req(self, req: CacheReq, is_insert: bool = True) -> None: ...
    def check_invariants(self) -> None: ...
