"""A sliding-window hybrid's prefix cache over a request's life: what the scheduler calls.

Follows SGLang 0.5.23's ``UnifiedRadixCache`` with the components ``(FULL, SWA)``
(``mem_cache/unified_radix_cache.py``: ``checkpoint_into_tree``, ``match_prefix``,
``touch_prefix``, ``lock``/``unlock``; ``mem_cache/base_prefix_cache.py``: ``free_kv_row``,
``evict_sliding_windows``; ``mem_cache/common.py``: ``release_kv_cache``,
``free_swa_out_of_window_slots``) over
:class:`~pagedkv.mem_cache.allocator.swa.SWATokenToKVPoolAllocator`, enabled (the tree is
:class:`~pagedkv.mem_cache.swa_radix_cache.SWARadixCache`) or disabled
(``--disable-radix-cache``: SGLang builds the same class with ``disable=True``; nothing is
matched or kept).

- :meth:`SWAPrefixCache.cache_unfinished_req` (a checkpoint of a running request: after its
  prefill, before its next chunk): first the request's tokens that left the window give back
  their SWA slots (up to ``len(key) - 1``, SGLang's
  ``SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS``, on by default), then its key, cut to
  pages, is inserted with the request's release cursor (``swa_evicted_seqlen``: the leaf is
  a tombstone below it), its row is pointed at the tree's slots and its lock moves to the
  new node.
- :meth:`SWAPrefixCache.cache_finished_req`: a finished request is inserted the same way
  (no window release first), a retracted one not at all; then its own part of the row
  ``[cache_protected_len, kv_committed_len)`` is freed (:func:`free_kv_row`: full slots only
  below the cursor) and its lock dropped.
- :meth:`SWAPrefixCache.evict_sliding_windows`: a running request's window release
  (``ScheduleBatch.maybe_evict_swa`` calls it).

A request's lock is SGLang's ``TreeLock`` (:class:`~pagedkv.mem_cache.swa_radix_tree.SWALock`),
kept on the request (``Req.swa_lock``): two locks of one node taken at different times can
cover different nodes (a split in between), so each is given back as it was taken.

A match the window cut short leaves the request a branching point
(``swa_branching_seqlen``: the page-aligned full-KV hit); its next checkpoint inserts up to
there only, then releases the window up to the pass's end (``SWAComponent.
prepare_for_caching_req``, ``cleanup_after_caching_req``).

Where we simplify: no sessions, hierarchical tiers, speculative draft windows
(``swa_retain_window`` is the window) or mamba checkpoints (``swa_retain_floor`` is None), as
the SWA tree itself; SGLang's switches that are off by default stay off
(``SGLANG_OPT_RELEASE_PREFILL_SWA``, prefill-aware SWA, per-request SWA rings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pagedkv.errors import check_positive_int
from pagedkv.hybrid_pools import SWA_EVICTION_INTERVAL
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_node import MatchResult
from pagedkv.mem_cache.swa_radix_cache import SWALock, SWANode, SWARadixCache
from pagedkv.mem_cache.swa_window import (
    free_kv_row,
    free_swa_out_of_window_slots,
    swa_dead_lo,
    swa_eviction_due,
)

_EMPTY = np.empty(0, dtype=np.int64)


class SWAPrefixCache:
    """The FULL + SWA prefix cache the scheduler of a sliding-window hybrid uses.

    Args:
        req_to_token_pool: the page table (rows are read and repointed).
        allocator: the two pools' allocator.
        sliding_window_size: tokens a window layer reads back.
        disable: ``--disable-radix-cache`` (nothing matched, inserted or evicted).
        eviction_interval: ``SGLANG_SWA_EVICTION_INTERVAL`` (default 128): a decoding
            request's window is released once it has moved this many tokens past the cursor.
        enable_overlap, chunked_prefill_size: the scheduler's loop and chunk size, which
            decide the window release of a disabled cache's chunks
            (:meth:`maybe_evict_swa_extend`).

    Raises:
        ConfigError: a window or interval below 1, a chunk size below 1.
    """

    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: SWATokenToKVPoolAllocator,
                 sliding_window_size: int, *, disable: bool = False,
                 eviction_interval: int = SWA_EVICTION_INTERVAL, enable_overlap: bool = True,
                 chunked_prefill_size: int | None = None) -> None:
        self.eviction_interval = check_positive_int("eviction_interval", eviction_interval)
        if chunked_prefill_size is not None:
            check_positive_int("chunked_prefill_size", chunked_prefill_size)
        self.enable_overlap, self.chunked_prefill_size = enable_overlap, chunked_prefill_size
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.page_size = allocator.page_size
        self.sliding_window_size = check_positive_int("sliding_window_size", sliding_window_size)
        self.disable = disable
        self.tree = None if disable else SWARadixCache(allocator, sliding_window_size)
        self.root_node = None if self.tree is None else self.tree.root
        self._table = req_to_token_pool.req_to_token.numpy()  # a view: writes reach the pool
        self._held: dict[int, list[SWALock]] = {}  # inc_lock_ref's locks, per node

    # ----- sizes --------------------------------------------------------------------------
    def evictable_size(self) -> int:
        """The full pool's evictable tokens (SGLang's ``evictable_size``: the base component)."""
        return 0 if self.tree is None else self.tree.full_evictable_size()

    def protected_size(self) -> int:
        return 0 if self.tree is None else self.tree.full_protected_size()

    def full_evictable_size(self) -> int:
        return self.evictable_size()

    def swa_evictable_size(self) -> int:
        return 0 if self.tree is None else self.tree.swa_evictable_size()

    def swa_protected_size(self) -> int:
        return 0 if self.tree is None else self.tree.swa_protected_size()

    def total_size(self) -> int:
        return self.evictable_size() + self.protected_size()

    # ----- match and lock -----------------------------------------------------------------
    def match_prefix(self, key: np.ndarray) -> MatchResult:
        """The longest prefix of ``key`` both layer kinds can use (none when disabled)."""
        if self.tree is None:
            return MatchResult(_EMPTY, None)
        n, slots, node = self.tree.match_prefix(key)
        p = self.page_size
        aligned = self.tree.full_kv_hit_length // p * p
        return MatchResult(slots, node, aligned if aligned > n else None)

    def touch_prefix(self, key: np.ndarray) -> None:
        """A match whose result is dropped (0.5.23's ``touch_prefix``)."""
        if self.tree is not None:
            self.tree.match_prefix(key)

    def lock(self, node: SWANode | None) -> SWALock | None:
        """SGLang's ``lock``: protect ``node``'s path (None when disabled or no node)."""
        if self.tree is None or node is None:
            return None
        return self.tree.lock(node)

    def unlock(self, handle: SWALock | None) -> None:
        """SGLang's ``unlock`` (a None handle: nothing)."""
        if handle is not None and self.tree is not None:
            self.tree.unlock(handle)

    def inc_lock_ref(self, node: SWANode | None) -> None:
        """A lock held for a moment (admission's ``_lock_node``), given back by
        :meth:`dec_lock_ref` of the same node, last taken first."""
        if node is not None and self.tree is not None:
            self._held.setdefault(id(node), []).append(self.tree.lock(node))

    def dec_lock_ref(self, node: SWANode | None) -> None:
        if node is not None and self.tree is not None:
            stack = self._held[id(node)]
            self.tree.unlock(stack.pop())
            if not stack:
                del self._held[id(node)]

    # ----- memory -------------------------------------------------------------------------
    def evict_from_tree_cache(self, num_tokens: int) -> None:
        """Make room for ``num_tokens`` in both pools (``evict_to_free_tokens``: each pool's
        shortfall evicted from the tree)."""
        self.allocator.evict_to_free_tokens(self.tree, num_tokens)

    def evict_sliding_windows(self, req: Any, pre_len: int, *, eviction_interval: int = 1) -> None:
        """Release the SWA slots of ``req``'s tokens that left its window below ``pre_len``
        (``BasePrefixCache.evict_sliding_windows``: without prefix sharing up to the window
        boundary, with it a page-rounded window kept)."""
        if req.req_pool_idx < 0:  # holds no KV
            return
        req.swa_evicted_seqlen = free_swa_out_of_window_slots(
            self._table[req.req_pool_idx], pre_len, req.swa_evicted_seqlen,
            cache_protected_len=req.cache_protected_len,
            sliding_window_size=self.sliding_window_size, allocator=self.allocator,
            supports_prefix_sharing=not self.disable, eviction_interval=eviction_interval)

    # ----- a batch's window release (ScheduleBatch.maybe_evict_swa) -------------------------
    def maybe_evict_swa_extend(self, reqs: Sequence[Any]) -> None:
        """Before a prefill pass allocates: with a disabled cache (no prefix sharing), each
        continuing request's window up to its prefix is released; the overlap loop skips a
        request's first two passes (the previous chunk may still run) and releases only up
        to one chunk before its prefix. Then each request's ``extend_batch_idx`` counts this
        pass (SGLang counts it after the allocation, which does not read it).
        Source: ``ScheduleBatch.maybe_evict_swa`` (extend), ``prepare_for_extend``."""
        if not self.disable:
            for req in reqs:
                req.extend_batch_idx += 1
            return
        chunk = self.chunked_prefill_size
        self.allocator.free_group_begin()
        for req in reqs:
            pre = req.prefix_len
            if self.enable_overlap:
                if req.extend_batch_idx < 2:
                    continue
                pre = pre - chunk if chunk else pre
            self.evict_sliding_windows(req, pre)
        self.allocator.free_group_end()
        for req in reqs:
            req.extend_batch_idx += 1

    def maybe_evict_swa_decode(self, reqs: Sequence[Any], seq_lens: Sequence[int]) -> None:
        """Before a decode step allocates: each request that has decoded before and whose
        window has moved ``eviction_interval`` tokens past its cursor releases it, up to
        ``seq_len - 1`` (``seq_lens``: prompt plus committed output, SGLang's
        ``req.seqlen``); then each one's ``decode_batch_idx`` counts this step (SGLang counts
        it after the allocation, which does not read it). Source:
        ``ScheduleBatch.maybe_evict_swa`` (decode), ``_swa_eviction_trigger``,
        ``prepare_for_decode``."""
        w, interval = self.sliding_window_size, self.eviction_interval
        self.allocator.free_group_begin()
        for req, seq in zip(reqs, seq_lens, strict=True):
            if (req.decode_batch_idx >= 1 and req.req_pool_idx >= 0
                    and swa_eviction_due(int(seq), w, req.swa_evicted_seqlen, interval)):
                self.evict_sliding_windows(req, int(seq) - 1)
        self.allocator.free_group_end()
        for req in reqs:
            req.decode_batch_idx += 1

    # ----- a request's life ---------------------------------------------------------------
    def _checkpoint(self, req: Any, end: int, finished: bool) -> None:
        """``checkpoint_into_tree``: insert the first ``end`` tokens, repoint the row, move
        the lock."""
        tree = self.tree
        assert tree is not None
        row = self._table[req.req_pool_idx]
        cpl = req.cache_protected_len
        tokens = req.token_ids(end)
        branch = req.swa_branching_seqlen  # SWAComponent.prepare_for_caching_req
        branch = branch if branch is not None and cpl < branch <= len(tokens) else None
        if branch is not None:  # insert up to the branching point only
            tokens = tokens[:branch]
        if not finished:  # the tokens that left the window first give back their SWA slots
            self.evict_sliding_windows(req, len(tokens) - 1)
        key = tree.page_aligned(tokens)
        if not len(key):
            return
        _, node = tree.insert_node(key, row[:len(key)].astype(np.int64),
                                   req.swa_evicted_seqlen, cpl)
        new = tree.path_full(node)
        row[cpl:len(new)] = new[cpl:]
        self.unlock(req.swa_lock)
        req.swa_lock = tree.lock(node)
        req.cache_protected_len = len(new)
        req.last_node = node
        if branch is not None:  # the branch is in (cleanup_after_caching_req)
            req.swa_branching_seqlen = None
            if not finished:
                self.evict_sliding_windows(req, end - 1)

    def cache_unfinished_req(self, req: Any, up_to: int | None = None) -> None:
        """A running request's checkpoint of its first ``up_to`` tokens (default
        ``kv_committed_len``; the overlap loop passes the pass's extend end); afterwards
        ``prefix_len`` is that. Source: ``UnifiedRadixCache.checkpoint_into_tree``."""
        end = req.kv_committed_len if up_to is None else up_to
        if self.tree is not None:
            self._checkpoint(req, end, finished=False)
        req.prefix_len = end

    def cache_finished_req(self, req: Any, is_insert: bool = True) -> None:
        """Release ``req``'s KV: inserted first if ``is_insert`` (it finished), then its own
        part of the row freed and its lock dropped; the caller frees the row.
        Source: ``mem_cache/common.py: release_kv_cache``, ``BasePrefixCache.free_kv_row``."""
        owned = req.kv_committed_len
        if is_insert and self.tree is not None:
            self._checkpoint(req, owned, finished=True)
        cpl = req.cache_protected_len
        free_kv_row(self.allocator, self._table[req.req_pool_idx, :owned], [(cpl, owned)],
                    swa_evicted_seqlen=req.swa_evicted_seqlen,
                    swa_dead_lo=swa_dead_lo(cpl, self.page_size))
        self.unlock(req.swa_lock)
        req.swa_lock = req.last_node = None
        req.cache_protected_len = req.prefix_len = req.swa_evicted_seqlen = 0
        req.swa_branching_seqlen = None
        req.extend_batch_idx = req.decode_batch_idx = 0  # SGLang's reset_for_retract

    def check_invariants(self) -> None:
        """The tree's ledgers and checks (nothing when disabled)."""
        if self.tree is not None:
            self.tree.check_invariants()
