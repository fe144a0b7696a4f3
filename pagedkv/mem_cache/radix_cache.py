"""SGLang's prefix cache over a request's life: what is inserted, freed, locked and when.

Follows ``python/sglang/srt/mem_cache/radix_cache.py`` (``RadixCache.cache_unfinished_req``,
``cache_finished_req``, 0.5.9) and, for 0.5.23, ``mem_cache/unified_radix_cache.py``
(``checkpoint_into_tree``) with ``mem_cache/common.py`` (``release_kv_cache``,
``evict_from_tree_cache``). The tree itself is :class:`~pagedkv.mem_cache.radix_tree.RadixTree`.

- After a request's prefill (and at the next step for each middle chunk),
  :meth:`RadixCache.cache_unfinished_req` inserts its computed tokens, cut to whole pages,
  frees the request's own copies of slots another request inserted first, points its row at
  the tree's slots, and moves its lock to the new deepest node.
- At finish, :meth:`RadixCache.cache_finished_req` inserts prompt + output (all but the last
  sampled token, whose KV is never written), page-aligned; frees duplicates and the partial
  last page; drops the lock: the tokens stay cached, evictable.
- At retraction, ``cache_finished_req(is_insert=False)`` inserts nothing: the prompt prefix
  inserted at prefill stays in the tree (now evictable), everything after it is freed.

Where 0.5.23 differs from 0.5.9 (one flag each, a field of :class:`pagedkv.releases.Release`):

- ``free_order``: all cache frees go through ``free_segment`` (pages in row order) instead
  of ``free`` (sorted pages);
- ``split_output_from_prompt``: duplicates are freed node by node during the insert walk;
  after each insert of a key longer than the page-aligned prompt, a second insert of the
  prompt splits the leaf at the prompt boundary, so the output can be evicted on its own;
  the row is repointed along the insert's path (0.5.9 matches the key once more);
- ``evict_until_free``: :meth:`evict_from_tree_cache` evicts only until the allocator has
  enough free slots (0.5.9 evicts the whole amount asked for).
"""

from __future__ import annotations

import numpy as np

from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.base_prefix_cache import CacheReq
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_node import TreeNode
from pagedkv.mem_cache.radix_tree import RadixTree
from pagedkv.releases import DEFAULT_RELEASE, Release, as_release


class RadixCache(RadixTree):
    """The radix tree plus the request-life operations the scheduler calls.

    Args:
        req_to_token_pool: the page table (rows are read and repointed).
        allocator: the pool's allocator.
        free_order, evict_until_free, split_output_from_prompt: the release's rules (the
            :class:`~pagedkv.releases.Release` fields of these names; 0.5.23's by default);
            :meth:`for_release` takes a release instead.

    Raises:
        ConfigError: an unknown ``free_order``.
    """

    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: BaseTokenToKVPoolAllocator,
                 *, free_order: str = DEFAULT_RELEASE.free_order,
                 evict_until_free: bool = DEFAULT_RELEASE.evict_until_free,
                 split_output_from_prompt: bool = DEFAULT_RELEASE.split_output_from_prompt) -> None:
        super().__init__(allocator, free_order=free_order)
        self.evict_until_free = evict_until_free
        self.split_output_from_prompt = split_output_from_prompt
        self.req_to_token_pool = req_to_token_pool
        self._table = req_to_token_pool.req_to_token.numpy()  # a view: writes reach the pool

    @classmethod
    def for_release(cls, req_to_token_pool: ReqToTokenPool, allocator: BaseTokenToKVPoolAllocator,
                    release: Release | str) -> RadixCache:
        """The cache ``release`` (a :class:`Release` or its name) builds.

        Raises:
            ConfigError: an unknown release.
        """
        r = as_release(release)
        return cls(req_to_token_pool, allocator, free_order=r.free_order,
                   evict_until_free=r.evict_until_free,
                   split_output_from_prompt=r.split_output_from_prompt)

    # ----- memory -----------------------------------------------------------------------
    def evict_from_tree_cache(self, num_tokens: int) -> None:
        """Make room for ``num_tokens`` slots by evicting, if the free list is short.

        0.5.9 (``mem_cache/common.py: evict_from_tree_cache``): evict ``num_tokens`` slots'
        worth of LRU leaves; 0.5.23 (``allocator.evict_to_free_tokens``): evict until
        ``available_size() >= num_tokens``.
        """
        if self.allocator.available_size() >= num_tokens:
            return
        if self.evict_until_free:
            self.evict_for_alloc(num_tokens)
        else:
            self.evict(num_tokens)

    def _free_row(self, row: np.ndarray, start: int, end: int) -> None:
        """Free ``row[start:end]``: 0.5.9 ``free`` (sorted pages), 0.5.23 ``free_segment``."""
        if end > start:
            self.allocator.free_run(row[start:end], self.free_order)

    # ----- a request's life -------------------------------------------------------------
    def _insert_req(self, req: CacheReq, row: np.ndarray, keys: np.ndarray) -> TreeNode:
        """Insert ``keys`` with the row's slots, free the request's duplicates, repoint the
        row to the tree's slots and move the request's lock; return the new deepest node."""
        cpl = req.cache_protected_len
        values = row[:len(keys)].astype(np.int64)
        had, node, overlaps = self.insert(keys, values)
        if self.split_output_from_prompt:  # 0.5.23's checkpoint_into_tree
            for start, end in overlaps:  # the walk frees duplicates node by node
                self._free_row(row, max(start, cpl), end)
            prompt = req.origin_len // self.page_size * self.page_size
            if 0 < prompt < len(keys):  # split at the prompt boundary (frees nothing)
                self.insert_held_prefix(node, prompt)
            new_indices = self.path_indices(node)
        else:
            self._free_row(row, cpl, had)
            match = self.match_prefix(keys)
            new_indices, node = match.device_indices, match.last_device_node
        assert len(new_indices) == len(keys)
        row[cpl:len(keys)] = new_indices[cpl:]
        req.cache_protected_len = len(keys)
        if req.last_node is not None:
            self.dec_lock_ref(req.last_node)
        self.inc_lock_ref(node)
        req.last_node = node
        return node

    def cache_unfinished_req(self, req: CacheReq, up_to: int | None = None) -> None:
        """After a prefill pass (or before the next chunk): put the request's computed
        tokens, page-aligned, into the tree; it keeps computing on the tree's slots.

        The first ``up_to`` tokens (default ``req.kv_committed_len``) are inserted: the
        overlap loop passes the pass's extend end, as the request may already hold the
        slot of its next decode step; afterwards ``cache_protected_len`` is that cut to
        whole pages and ``prefix_len`` is all of it (a partial last page stays the
        request's own). Source: ``RadixCache.cache_unfinished_req`` (0.5.9),
        ``checkpoint_kv_cache`` (0.5.23, ``up_to=req.extend_end``).
        """
        end = req.kv_committed_len if up_to is None else up_to
        row = self._table[req.req_pool_idx]
        keys = self.page_aligned(req.token_ids(end))
        self._insert_req(req, row, keys)
        req.prefix_len = end

    def cache_finished_req(self, req: CacheReq, is_insert: bool = True) -> None:
        """Release a request's KV: with ``is_insert`` (it finished) its prompt and output but
        the last token, page-aligned, stay cached; without (it was retracted) nothing new is
        inserted. Either way every slot it holds outside the tree is freed and its lock
        dropped; the caller frees its ``req_to_token`` row.

        Source: ``RadixCache.cache_finished_req`` (0.5.9), ``release_kv_cache`` (0.5.23).
        """
        row = self._table[req.req_pool_idx]
        committed = req.kv_committed_len
        keys = self.page_aligned(req.token_ids(committed))
        cpl = req.cache_protected_len
        if self.split_output_from_prompt:  # 0.5.23's release_kv_cache
            if is_insert:
                self._insert_req(req, row, keys)
            self._free_row(row, req.cache_protected_len, committed)
        else:
            if is_insert:
                had, _, _ = self.insert(keys, row[:len(keys)].astype(np.int64))
                self._free_row(row, cpl, had)
            else:
                self._free_row(row, cpl, len(keys))
            self._free_row(row, len(keys), committed)  # the partial last page
        if req.last_node is not None:
            self.dec_lock_ref(req.last_node)
        req.last_node = None
        req.cache_protected_len = req.prefix_len = 0
