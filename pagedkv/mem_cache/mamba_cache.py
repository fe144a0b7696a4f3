"""A linear-attention hybrid's prefix cache over a request's life: what the scheduler calls.

Follows SGLang 0.5.23's ``UnifiedRadixCache`` with the components ``(FULL, MAMBA)``
(``mem_cache/unified_radix_cache.py``: ``match_prefix``, ``touch_prefix``,
``checkpoint_into_tree``, ``on_release``; ``unified_cache/components/mamba.py``:
``finalize_match_result_in_cache``, ``prepare_for_caching_req``,
``_select_finished_checkpoint``, ``cleanup_after_caching_req``, ``_alloc_mamba_slot``;
``mem_cache/common.py``: ``release_kv_cache``; ``mem_cache/allocation.py``:
``ensure_mamba_capacity``) over the tree :class:`~pagedkv.mem_cache.mamba_radix_cache.
MambaRadixCache` and a :class:`~pagedkv.mem_cache.mamba_pool.HybridReqToTokenPool`.

- A match ends at the deepest node holding a state; the request gets a state slot of its own
  (taken ahead by the pass if it can, else from the free list, else after evicting one
  tree-held state with the node locked) into which that state is copied
  (:meth:`MambaPrefixCache.finalize_match_result`).
- A checkpoint of a running request (after a prefill, before its next chunk,
  :meth:`cache_unfinished_req`) inserts its tokens up to the last tracked state
  (``mamba_last_track_seqlen``; none tracked: nothing is inserted) and gives the tree the
  track slot holding that state, taking a fresh one in its place (``extra_buffer``); with
  ``no_buffer`` (pages of one token, no overlap loop) the live state is copied into a new
  slot at the key's end. A state the tree has already at that node is freed.
- A finished request (:meth:`cache_finished_req`) inserts up to its last tracked state no
  longer than its tokens (else the one before, ``_select_finished_checkpoint``), the tree
  keeping that track slot; its live slot and other track slots are freed. With
  ``no_buffer`` its live slot is the state inserted. A retracted request inserts nothing and
  frees every slot it holds.
- Room: KV shortfalls evict LRU leaves with their states (``evict_for_alloc``); a state slot
  short evicts tree-held states (``evict_for_alloc(mamba_num)``).

What the kernels record when is :mod:`pagedkv.mem_cache.mamba_track`. Where we simplify: no
host tier, sessions, int8 checkpoints, lazy track slots or speculative decoding (all off by
default for Qwen3-Next).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool
from pagedkv.mem_cache.mamba_radix_cache import MAMBA_CHUNK_SIZE, MambaNode, MambaRadixCache
from pagedkv.mem_cache.radix_node import MatchResult, page_aligned


class MambaPrefixCache:
    """The FULL + MAMBA prefix cache the scheduler of a linear-attention hybrid uses with
    the radix cache on.

    Args:
        req_to_token_pool: the request table with its state slots (its track slots per
            request say the strategy: ``extra_buffer`` with some, ``no_buffer`` without).
        allocator: the full-attention layers' KV allocator.
        mamba_chunk_size: the model's state chunk (64 for Qwen3-Next).
    """

    disable = False

    def __init__(self, req_to_token_pool: HybridReqToTokenPool,
                 allocator: BaseTokenToKVPoolAllocator,
                 mamba_chunk_size: int = MAMBA_CHUNK_SIZE) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.page_size = allocator.page_size
        self.mamba_allocator = req_to_token_pool.mamba_allocator
        self.tree = MambaRadixCache(allocator, self.mamba_allocator, mamba_chunk_size)
        self.root_node = self.tree.root
        self.extra_buffer = req_to_token_pool.enable_mamba_extra_buffer
        self._table = req_to_token_pool.req_to_token.numpy()  # a view: writes reach the pool

    # ----- sizes --------------------------------------------------------------------------
    def evictable_size(self) -> int:
        """KV tokens the tree can evict (SGLang's ``evictable_size``: the full component)."""
        return self.tree.full_evictable_size()

    def protected_size(self) -> int:
        return self.tree.full_protected_size()

    def total_size(self) -> int:
        return self.evictable_size() + self.protected_size()

    def mamba_evictable_size(self) -> int:
        return self.tree.mamba_evictable_size()

    def mamba_protected_size(self) -> int:
        return self.tree.mamba_protected_size()

    # ----- match and lock -----------------------------------------------------------------
    def match_prefix(self, key: np.ndarray) -> MatchResult:
        """The longest prefix of ``key`` ending at a node with a state
        (:meth:`MambaRadixCache.match_prefix`)."""
        return self.tree.match_prefix(key)

    def touch_prefix(self, key: np.ndarray) -> None:
        """A match whose result is dropped (0.5.23's ``touch_prefix``: the walk only)."""
        self.tree.match_prefix(key)

    def finalize_match_result(self, req: Any, match: MatchResult) -> None:
        """Copy-on-write of the matched state: a request holding no state slot takes one
        (``MambaSlotAllocator.alloc``: one the pass took ahead first); none free, the node
        is locked while one tree-held state is evicted for it.
        Source: ``MambaComponent.finalize_match_result_in_cache``."""
        node = match.last_device_node
        if not isinstance(node, MambaNode) or node.mamba is None or req.mamba_pool_idx >= 0:
            return
        slot = self.mamba_allocator.alloc(1)
        if slot is None:
            self.tree.lock(node)
            self.tree.evict_for_alloc(mamba_num=1)
            slot = self.mamba_allocator.alloc(1)
            self.tree.unlock(node)
            assert slot is not None, "Can not alloc mamba cache"
        req.mamba_pool_idx = slot[0]

    def inc_lock_ref(self, node: MambaNode | None) -> None:
        """Protect ``node``'s KV path and its state (``lock``); None or the root: nothing."""
        if node is not None:
            self.tree.lock(node)

    def dec_lock_ref(self, node: MambaNode | None) -> None:
        if node is not None:
            self.tree.unlock(node)

    # ----- memory -------------------------------------------------------------------------
    def evict_from_tree_cache(self, num_tokens: int) -> None:
        """Evict until ``num_tokens`` KV slots are free, or nothing evictable is left
        (``evict_to_free_tokens``: the shortfall, ``evict_for_alloc``)."""
        shortfall = num_tokens - self.allocator.available_size()
        if shortfall > 0:
            self.tree.evict_for_alloc(num_tokens=shortfall)

    def ensure_mamba_capacity(self, reqs: Any) -> None:
        """Before a pass binds rows: evict tree-held states until the state slots its
        requests take are free (``ensure_mamba_capacity``)."""
        needed = self.req_to_token_pool.mamba_slots_needed(reqs)
        available = self.mamba_allocator.available_size()
        if available < needed:
            self.tree.evict_for_alloc(mamba_num=needed - available)

    def _alloc_mamba_slot(self) -> int:
        """One state slot, evicting one tree-held state if none is free
        (``MambaComponent._alloc_mamba_slot``)."""
        slot = self.mamba_allocator.alloc(1)
        if slot is None:
            self.tree.evict_for_alloc(mamba_num=1)
            slot = self.mamba_allocator.alloc(1)
            assert slot is not None, "Can not alloc mamba cache"
        return slot[0]

    # ----- a request's life ---------------------------------------------------------------
    def _select_finished_checkpoint(self, req: Any, tokens: int) -> tuple[int, int] | None:
        """The tracked state a finished request leaves: the last one if it is no longer than
        its ``tokens``, else the one before (two track slots only), else none."""
        pool = self.req_to_token_pool
        keep = req.mamba_last_track_idx
        cache_len = req.mamba_last_track_seqlen or 0
        if cache_len <= tokens:
            return cache_len, keep
        prev = req.mamba_prev_track_seqlen
        if pool.mamba_ping_pong_track_buffer_size != 2 or prev is None or prev > tokens:
            return None
        return prev, pool.get_mamba_ping_pong_other_idx(keep)

    def _prepare(self, req: Any, tokens: int, finished: bool) -> tuple[int, int | None, int | None]:
        """``prepare_for_caching_req``: ``(cache_len, state slot to insert, keep position)``."""
        pool = self.req_to_token_pool
        if finished:
            if not self.extra_buffer:
                return tokens, req.mamba_pool_idx, None
            picked = self._select_finished_checkpoint(req, tokens)
            if picked is None:
                return 0, None, None
            cache_len, keep = picked
            return cache_len, req.mamba_ping_pong_track_buffer[keep], keep
        cache_len = req.mamba_last_track_seqlen if self.extra_buffer else tokens
        if cache_len is None:
            return 0, None, None
        if self.extra_buffer:  # the tracked state goes to the tree, a fresh slot replaces it
            return cache_len, pool.donate_mamba_ping_pong_slot(req, self._alloc_mamba_slot()), None
        return cache_len, self._alloc_mamba_slot(), None  # the live state copied into it

    def _cleanup(self, req: Any, finished: bool, inserted: bool, value: int | None,
                 keep: int | None) -> None:
        """``cleanup_after_caching_req``: what the request still holds that the tree did not
        take is freed (finished), or the unused state (a checkpoint)."""
        pool = self.req_to_token_pool
        if finished:
            if self.extra_buffer:
                pool.free_mamba_cache(req, keep=keep if inserted else None)
            elif not inserted:
                pool.free_mamba_cache(req)
            else:  # no_buffer: the live slot is the tree's now
                req.mamba_pool_idx = -1
            return
        if value is not None and not inserted:
            self.mamba_allocator.free([value])
        req.mamba_last_track_seqlen = req.mamba_prev_track_seqlen = None

    def _checkpoint(self, req: Any, end: int, finished: bool) -> None:
        """``checkpoint_into_tree``: insert the first ``end`` tokens, cut to the state the
        tree can keep, repoint the row, move the lock."""
        tree, row, cpl = self.tree, self._table[req.req_pool_idx], req.cache_protected_len
        tokens = req.token_ids(end)
        cache_len, value, keep = self._prepare(req, len(tokens), finished)
        effective = min(len(tokens), cache_len)
        if effective <= 0 or value is None:
            self._cleanup(req, finished, False, value, keep)
            return
        key = page_aligned(tokens[:effective], self.page_size)
        _, exists, node = tree.insert(key, row[:len(key)].astype(np.int64), value, cpl)
        new = tree.path_full(node)
        row[cpl:len(new)] = new[cpl:]
        self.dec_lock_ref(req.last_node)
        req.last_node = node
        self.inc_lock_ref(node)
        req.cache_protected_len = len(new)
        self._cleanup(req, finished, not exists, value, keep)

    def cache_unfinished_req(self, req: Any, up_to: int | None = None) -> None:
        """A running request's checkpoint of its first ``up_to`` tokens (default
        ``kv_committed_len``); afterwards ``prefix_len`` is that, inserted or not.
        Source: ``checkpoint_kv_cache``, ``UnifiedRadixCache.checkpoint_into_tree``."""
        end = req.kv_committed_len if up_to is None else up_to
        self._checkpoint(req, end, finished=False)
        req.prefix_len = end

    def cache_finished_req(self, req: Any, is_insert: bool = True) -> None:
        """Release ``req``: inserted first if ``is_insert`` (it finished), then its own part
        of the row freed, its lock dropped and, retracted, every state slot it holds freed
        (``on_release``); the caller frees the row.
        Source: ``mem_cache/common.py: release_kv_cache``."""
        owned = req.kv_committed_len
        if is_insert:
            self._checkpoint(req, owned, finished=True)
        cpl = req.cache_protected_len
        if owned > cpl:
            self.allocator.free_segment(self._table[req.req_pool_idx, cpl:owned])
        self.dec_lock_ref(req.last_node)
        req.last_node = None
        if not is_insert and req.mamba_pool_idx >= 0:
            self.req_to_token_pool.free_mamba_cache(req)
        req.cache_protected_len = req.prefix_len = 0
        req.decode_batch_idx = 0  # SGLang's reset_for_retract

    def check_invariants(self) -> None:
        """The tree's ledgers and checks."""
        self.tree.check_invariants()
