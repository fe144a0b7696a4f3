"""The prefix cache switched off (``--disable-radix-cache``): nothing is shared or kept.

Follows SGLang 0.5.9's ``python/sglang/srt/mem_cache/chunk_cache.py`` (``ChunkCache``, built
when the radix cache is disabled and chunked prefill is on) and 0.5.23's
``UnifiedRadixCache(disable=True)``, which behave alike: no match ever hits, nothing is
evictable, a chunked request keeps its own slots between chunks, and a finished or retracted
request frees every slot of its row. 0.5.9 frees with ``free`` (pages sorted), 0.5.23 with
``free_segment`` (pages in row order).
"""

from __future__ import annotations

import numpy as np

from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.base_prefix_cache import CacheReq
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_node import MatchResult
from pagedkv.releases import DEFAULT_RELEASE, Release, as_release

_EMPTY = np.empty(0, dtype=np.int64)


class ChunkCache:
    """A cache that caches nothing.

    Args:
        req_to_token_pool: the page table; allocator: the pool's allocator;
        free_order: how a request's slots are freed (``Release.free_order``: ``"row"``,
            0.5.23's default, or ``"sorted"``).
    """

    disable = True

    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: BaseTokenToKVPoolAllocator,
                 *, free_order: str = DEFAULT_RELEASE.free_order) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.page_size = allocator.page_size
        self.free_order = free_order
        self._table = req_to_token_pool.req_to_token.numpy()
        self.root_node = None

    @classmethod
    def for_release(cls, req_to_token_pool: ReqToTokenPool, allocator: BaseTokenToKVPoolAllocator,
                    release: Release | str) -> ChunkCache:
        """The cache ``release`` (a :class:`Release` or its name) builds with the radix cache
        off. Raises ConfigError for an unknown release."""
        return cls(req_to_token_pool, allocator, free_order=as_release(release).free_order)

    def match_prefix(self, key: np.ndarray) -> MatchResult:
        """Never a hit: no slots, and no node to lock."""
        return MatchResult(_EMPTY, None)

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def total_size(self) -> int:
        return 0

    def inc_lock_ref(self, node: object) -> None:
        """Nothing to lock."""

    def dec_lock_ref(self, node: object) -> None:
        """Nothing to unlock."""

    def evict_from_tree_cache(self, num_tokens: int) -> None:
        """Nothing to evict."""

    def cache_unfinished_req(self, req: CacheReq, up_to: int | None = None) -> None:
        """Keep the first ``up_to`` computed slots (default all) as the request's own
        prefix for its next chunk."""
        req.prefix_len = req.kv_committed_len if up_to is None else up_to

    def cache_finished_req(self, req: CacheReq, is_insert: bool = True) -> None:
        """Free every slot of the request's row (the caller frees the row itself)."""
        row = self._table[req.req_pool_idx, :req.kv_committed_len]
        if len(row):
            self.allocator.free_run(row, self.free_order)
        req.prefix_len = req.cache_protected_len = 0
        req.last_node = None

    def check_invariants(self) -> None:
        """Nothing held, nothing to check."""
