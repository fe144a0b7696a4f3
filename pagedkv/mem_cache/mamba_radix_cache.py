"""The prefix cache of a linear-attention hybrid (Qwen3-Next): a radix tree whose nodes hold
the full-attention layers' KV slots and, at some nodes, a checkpoint of the recurrent state.

Follows SGLang 0.5.23's ``UnifiedRadixCache`` built with the components ``(FULL, MAMBA)``
(``mem_cache/unified_radix_cache.py``, the tree core ``unified_cache/unified_tree_core.py``
and ``unified_cache/components/{full,mamba}.py``; SGLang runs the same rules in its Rust core),
over a token allocator and the request table's ``MambaSlotAllocator``:

- A request can reuse a cached prefix only up to a node that holds a state: the linear
  layers need the state after the prefix's last token, and it exists only where the
  scheduler checkpointed one. :meth:`match_prefix` walks the KV as the plain tree does but
  ends at the deepest node on the walk with a state; the KV it walked beyond is
  ``full_kv_hit_length``, and when that reaches a checkpoint grid point past the match
  (``mamba_branching_seqlen``: the hit rounded down to ``lcm(max(chunk, p), p)`` tokens, chunk
  = 64, the model's ``mamba_chunk_size`` or FLA's), the scheduler stops the prefill there
  to checkpoint a state for the next request.
- :meth:`insert` adds a key with its KV slots and the state slot for its end: on a new leaf,
  or on an existing node without a state; a node that has one keeps it
  (``mamba_exist``: the caller frees the slot it passed). The request's KV slots for tokens
  the tree holds already, past ``prev_prefix_len``, are freed (``free_segment``).
- :meth:`lock` protects the KV of the whole path and the state of the node only.
- :meth:`evict`: LRU leaves (heap by last access) until ``num_tokens`` KV slots are freed,
  each leaf with its state; then the state LRU list from its least recent end until
  ``mamba_num`` states are freed: a leaf is deleted whole, an inner node loses its state
  only (a tombstone), its KV stays for longer matches' prefixes.

The nodes, splits, state LRU list, locks, ledgers and checks are
:class:`~pagedkv.mem_cache.mamba_radix_tree.MambaRadixTree`.

What SGLang 0.5.23's scheduler does with this tree (its default server, no flags), which
pagedkv's scheduler runs through :class:`~pagedkv.mem_cache.mamba_cache.MambaPrefixCache` and
:mod:`pagedkv.mem_cache.mamba_track`:

- Strategy: ``--mamba-radix-cache-strategy auto`` resolves (``_mamba_radix_cache_resolution``)
  to ``extra_buffer`` for Qwen3-Next when the overlap loop is on (the default) or pages are
  larger than one token, on CUDA; else ``no_buffer``, which also turns the overlap loop off
  and needs ``page_size`` 1. ``extra_buffer`` gives every running request, besides its live
  state slot, two ping-pong track slots (one without the overlap loop,
  ``get_mamba_tracking_slots``), into which the kernels copy the state at checkpoint
  positions. Slots per running request (``_calculate_mamba_ratio``): 3 with the radix cache,
  plus those track slots (so 5 by default), 1 without; ``max_running_requests`` is capped
  at ``max_mamba_cache_size // ratio``.
- Checkpoints: in a prefill, at the last multiple of ``mamba_cache_chunk_size`` inside the
  extend (``mamba_track_seqlen``); in decode, every ``mamba_track_interval`` tokens
  (default 256, rounded to the checkpoint grid). ``cache_unfinished_req`` (a chunked
  request between chunks) donates the tracked slot to the tree and takes a fresh one
  (``donate_mamba_ping_pong_slot``); ``cache_finished_req`` inserts the last tracked
  state no longer than the key (``_select_finished_checkpoint``), keeping that track slot
  in the tree and freeing the others. With ``no_buffer`` the state at the key's end is
  copied (unfinished) or the live slot given (finished).
- A match copies the matched node's state into the request's own slot (copy-on-write,
  ``finalize_match_result_in_cache``), evicting a state first when none is free.
- Admission and ``check_decode_mem`` count the KV as the plain tree does
  (``full_evictable_size``); every prefill pass takes one slot ahead per waiting request
  (``alloc_group_begin``), and a slot short is met by ``evict_for_alloc(mamba_num=1)``;
  retraction frees the request's slots like a finish without an insert.

Where we simplify (none of it reached without hierarchical caching or sessions): no host
tier, no sessions, no ``--mamba-max-states-per-path`` cap (default unlimited), no int8
checkpoint pool, LRU only; inserts never meet an evicted KV node (without a host tier such
nodes are deleted at once).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.mem_cache.allocator import (
    BaseTokenToKVPoolAllocator,
    IntsLike,
    MambaSlotAllocator,
    as_i64,
)
from pagedkv.mem_cache.mamba_radix_tree import MambaNode, MambaRadixTree
from pagedkv.mem_cache.radix_node import EMPTY_SLOTS, MatchResult, key_match, page_aligned

__all__ = ["MAMBA_CHUNK_SIZE", "MambaNode", "MambaRadixCache"]

#: FLA's ``CHUNK_SIZE`` (``chunk_delta_h.py``), the state checkpoint granularity of a model
#: whose config names no ``mamba_chunk_size`` (Qwen3-Next).
MAMBA_CHUNK_SIZE = 64


class MambaRadixCache(MambaRadixTree):
    """Match, insert and evict on the FULL + MAMBA tree (:class:`MambaRadixTree`).

    Args:
        allocator: the KV allocator (its page size is the tree's).
        mamba_allocator: the state slots' free list.
        mamba_chunk_size: the model's state chunk (``mamba_chunk_size``, else 64); the
            checkpoint grid is ``lcm(max(mamba_chunk_size, p), p)`` tokens
            (``mamba_checkpoint_grid``).

    Raises:
        ConfigError: ``mamba_chunk_size`` below 1, or neither it nor the page size a
            multiple of the other (SGLang's assertion in ``mamba_cache_chunk_size``).
    """

    def __init__(self, allocator: BaseTokenToKVPoolAllocator,
                 mamba_allocator: MambaSlotAllocator,
                 mamba_chunk_size: int = MAMBA_CHUNK_SIZE) -> None:
        super().__init__(allocator, mamba_allocator)
        chunk, p = check_positive_int("mamba_chunk_size", mamba_chunk_size), self.page_size
        if max(chunk, p) % min(chunk, p):
            raise bad_value("mamba_chunk_size", chunk,
                            f"a divisor or multiple of page_size={p}")
        self.mamba_cache_chunk_size = max(chunk, p)
        self.mamba_checkpoint_grid = math.lcm(self.mamba_cache_chunk_size, p)
        self.full_kv_hit_length = 0

    # ----- match -------------------------------------------------------------------------
    def match_prefix(self, key: IntsLike) -> MatchResult:
        """The longest cached prefix of ``key`` that ends at a node with a state.

        Returns SGLang's ``MatchResult``: the KV slots (int64 ``[length]``), the node, and
        ``mamba_branching_seqlen`` (the KV hit rounded down to the checkpoint grid, when
        that is past the match; else None). A walk ending inside a node splits it. Moves
        the node's state to the most recent end of the state LRU list and stamps the node
        and its ancestors. The walk's whole KV length is :attr:`full_kv_hit_length`.
        Source: ``UnifiedTreeCore._match_prefix_helper`` / ``_match_post_processor``,
        ``MambaComponent.create_match_validator``, ``refresh_lru`` (``MATCH_END``),
        ``finalize_match_result_in_tree_core``.

        Raises:
            ConfigError: ``key`` is not a 1-D sequence of integers.
        """
        key = page_aligned(key, self.page_size)
        node, at, chunks = self.root, 0, []
        best, best_len, hit = self.root, 0, 0
        while at < len(key) and self._child_key(key[at:]) in node.children:
            child = node.children[self._child_key(key[at:])]
            n = key_match(child.key, key[at:], self.page_size)
            hit += n
            node = self._split(child, n) if n < len(child.key) else child
            chunks.append(node.full)
            if node.mamba is not None:
                best, best_len = node, len(chunks)
            if node is not child:  # the match ended inside the child
                break
            at += n
        self.full_kv_hit_length = hit
        if best.mamba is not None:
            self._lru_mru(best)
        t, cur = self._tick(), best
        while cur is not None:
            cur.time = t
            t -= 0.00001
            cur = cur.parent
        slots = np.concatenate(chunks[:best_len]) if best_len else EMPTY_SLOTS
        grid = self.mamba_checkpoint_grid
        aligned = hit // grid * grid
        return MatchResult(slots, best,  # type: ignore[arg-type]
                           mamba_branching_seqlen=aligned if aligned > len(slots) else None)

    # ----- insert ------------------------------------------------------------------------
    def insert(self, key: IntsLike, value: IntsLike, mamba_value: int,
               prev_prefix_len: int = 0) -> tuple[int, bool, MambaNode]:
        """Insert ``key`` (cut to whole pages) with its KV slots ``value`` and the state
        slot ``mamba_value`` for its end.

        Returns ``(prefix_len, mamba_exist, node)``: how many leading tokens were cached
        already, whether the key's end node had a state already (the tree then keeps its
        own: the caller frees ``mamba_value``; an empty key counts as that too), and the
        node the key ends on. KV slots of tokens the tree holds already are freed
        (``free_segment``), except those below ``prev_prefix_len`` (the request inserted
        them before and its row points at the tree's slots there).
        Source: ``UnifiedTreeCore.begin_insert`` and its walk/overlap/commit steps,
        ``MambaComponent.commit_insert_component_data``.

        Raises:
            ConfigError: ``value`` shorter than the key cut to pages, ``prev_prefix_len``
                below 0, ``mamba_value`` not a state slot handed out.
        """
        check_positive_int("prev_prefix_len", prev_prefix_len, minimum=0)
        if (isinstance(mamba_value, bool) or not isinstance(mamba_value, (int, np.integer))
                or not self.mamba_allocator.is_allocated(int(mamba_value))):
            raise bad_value("mamba_value", mamba_value,
                            f"a state slot handed out, in 1 .. {self.mamba_allocator.size}")
        key = page_aligned(key, self.page_size)
        value = as_i64("value", value)
        if len(value) < len(key):
            raise bad_value("len(value)", len(value), f">= len(key) cut to pages = {len(key)}")
        value = value[:len(key)]
        self.root.time = self._tick()
        if not len(key):
            return 0, True, self.root
        node, total = self.root, 0
        while total < len(key) and self._child_key(key[total:]) in node.children:
            child = node.children[self._child_key(key[total:])]
            child.time = self._tick()
            n = key_match(child.key, key[total:], self.page_size)
            if n < len(child.key):
                child = self._split(child, n)
            dup = max(0, prev_prefix_len - total)  # the request's own earlier insert
            if dup < n:
                self.allocator.free_segment(value[total + dup:total + n])
            node, total = child, total + n
        if total < len(key):
            leaf = self._node(key[total:], node)
            leaf.full = value[total:].copy()
            node.children[self._child_key(leaf.key)] = leaf
            self.full_evictable += len(leaf.key)
            leaf.mamba = int(mamba_value)
            self._lru_mru(leaf)
            self.mamba_evictable += 1
            return total, False, leaf
        if node.mamba is None:
            self._set_mamba(node, int(mamba_value))
            node.time = self._tick()
            return total, False, node
        self._lru_mru(node)
        node.time = self._tick()
        return total, True, node

    # ----- eviction ----------------------------------------------------------------------
    def _delete_leaf(self, leaf: MambaNode) -> tuple[int, int]:
        """Evict a leaf whole: its KV (``free_segment``), then its state. Returns (KV slots,
        states) freed. Source: ``_delete_unbacked_device_leaf``, ``_drain_device_frees``."""
        full_n, mamba_n = len(leaf.full), 0
        self.full_evictable -= full_n
        del leaf.parent.children[self._child_key(leaf.key)]
        self.allocator.free_segment(leaf.full)
        if leaf.mamba is not None:
            mamba_n = 1
            self.mamba_evictable -= 1
            del self._lru[leaf.id]
            self.mamba_allocator.free([leaf.mamba])
            leaf.mamba = None
        return full_n, mamba_n

    def evict(self, num_tokens: int = 0, mamba_num: int = 0) -> tuple[int, int]:
        """Free at least ``num_tokens`` KV slots (least recently used unlocked leaves,
        deleted whole with their states), then at least ``mamba_num`` states counting those
        already freed (the state LRU list from its least recent end, skipping locked
        states: a leaf is deleted whole, an inner node tombstoned), or as much as can be.
        Returns (KV slots, states) freed. Source: ``UnifiedRadixCache.evict`` /
        ``_evict_components``, ``FullComponent`` / ``MambaComponent._evict_device_next_node``.

        Raises:
            ConfigError: a count below 0.
        """
        check_positive_int("num_tokens", num_tokens, minimum=0)
        check_positive_int("mamba_num", mamba_num, minimum=0)
        return self._evict(num_tokens, mamba_num, None, None)

    def evict_for_alloc(self, num_tokens: int = 0, mamba_num: int = 0) -> tuple[int, int]:
        """Evict until the KV pool has ``num_tokens`` and the state slots ``mamba_num`` more
        free than now (the shortfalls an allocation found): the KV walk stops at its target
        (or when nothing evictable is left), the state walk at its target or once it freed
        ``mamba_num``; a leaf deletion's state counts toward the state side. Returns (KV
        slots, states) freed. Source: ``UnifiedRadixCache.evict_for_alloc``.

        Raises:
            ConfigError: a count below 0.
        """
        check_positive_int("num_tokens", num_tokens, minimum=0)
        check_positive_int("mamba_num", mamba_num, minimum=0)
        return self._evict(
            num_tokens, mamba_num,
            self.allocator.available_size() + num_tokens if num_tokens else None,
            self.mamba_allocator.available_size() + mamba_num if mamba_num else None)

    def _evict(self, num_tokens: int, mamba_num: int, full_target: int | None,
               mamba_target: int | None) -> tuple[int, int]:
        full_freed = mamba_freed = 0

        def reached(target: int | None, available: int) -> bool:
            return target is not None and available >= target

        # the KV walk: a heap of the leaves by last access, a parent joining once it is one
        quota = num_tokens if full_target is None else max(num_tokens, self.full_evictable)
        if not (reached(full_target, self.allocator.available_size()) or full_freed >= quota):
            heap = [(n.time, n.id, n) for n in self.nodes() if self.is_leaf(n)]
            heapq.heapify(heap)
            while full_freed < quota and heap:
                _, _, leaf = heapq.heappop(heap)
                if leaf.parent is None or not self.is_leaf(leaf):
                    continue
                parent = leaf.parent
                f, m = self._delete_leaf(leaf)
                leaf.parent = None
                full_freed, mamba_freed = full_freed + f, mamba_freed + m
                if reached(full_target, self.allocator.available_size()):
                    break
                if self.is_leaf(parent):
                    heapq.heappush(heap, (parent.time, parent.id, parent))
        if mamba_freed >= mamba_num or reached(mamba_target, self.mamba_allocator.available_size()):
            return full_freed, mamba_freed
        # the state walk: nothing moves in the list meanwhile, so one pass in LRU order
        for x in list(self._lru.values()):
            if mamba_freed >= mamba_num:
                break
            if x.mamba_lock > 0 or x.id not in self._lru:
                continue
            if self.is_leaf(x):
                f, m = self._delete_leaf(x)
                x.parent = None
                full_freed, mamba_freed = full_freed + f, mamba_freed + m
            else:  # an inner node keeps its KV and loses its state
                del self._lru[x.id]
                self.mamba_evictable -= 1
                self.mamba_allocator.free([x.mamba])
                x.mamba = None
                mamba_freed += 1
            if reached(mamba_target, self.mamba_allocator.available_size()):
                break
        return full_freed, mamba_freed
