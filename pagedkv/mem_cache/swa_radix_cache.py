"""The prefix cache of a sliding-window hybrid: a radix tree whose nodes hold full-attention
slots and, while they are inside some request's window, sliding-window slots too.

Follows SGLang 0.5.23's ``UnifiedRadixCache`` built with the components ``(FULL, SWA)``
(``mem_cache/unified_radix_cache.py``, the tree core ``unified_cache/unified_tree_core.py``
and ``unified_cache/components/{full,swa}.py``; SGLang runs the same rules in its Rust core),
over :class:`~pagedkv.mem_cache.allocator.swa.SWATokenToKVPoolAllocator`:

- A node keeps its full slots (``full``) until it is evicted whole. Its SWA slots (``swa``)
  can go earlier: the node is then a *tombstone* (``swa is None``), still matchable for its
  full KV but useless to a window layer.
- :meth:`match_prefix` walks as the plain tree does, but a match may only end where the
  window layers have what they read: on a path with no tombstone, anywhere; after the
  last tombstone, only once at least ``sliding_window_size`` live SWA tokens follow it.
- :meth:`insert` adds a key; with ``evicted_seqlen`` (the request's window-released prefix)
  the new leaf is a tombstone below that position, and the live part is capped at one
  page-aligned window (the rest split off above it). A key overlapping a tombstone with live
  SWA revives it with the incoming slots.
- :meth:`lock` protects the full path to the root and the SWA of the trailing window only.
- :meth:`evict`: first LRU full leaves (heap by last access) until ``num_tokens`` full
  slots are freed, then the SWA LRU list from its least recent end until ``swa_num_tokens``
  SWA slots are: a leaf is deleted whole, an inner node is tombstoned.

The nodes, splits, SWA LRU list, locks, ledgers and checks are
:class:`~pagedkv.mem_cache.swa_radix_tree.SWARadixTree`.

Where we simplify (none of it reached by the scheduler without hierarchical caching):
no host tier (``host_value``, backups, load-back), no sessions, no early SWA lock release
(``release_swa``), LRU only; inserts never meet an evicted full node (without a host tier such
nodes are deleted at once). The branching point of a match the window cut short
(``swa_branching_seqlen``) is :class:`~pagedkv.mem_cache.swa_cache.SWAPrefixCache`'s, from
:attr:`SWARadixCache.full_kv_hit_length`.
"""

from __future__ import annotations

import numpy as np

from pagedkv.errors import AllocatorError, bad_value, check_positive_int
from pagedkv.mem_cache.allocator import IntsLike, as_i64
from pagedkv.mem_cache.swa_radix_tree import NO_SLOTS, SWALock, SWANode, SWARadixTree

__all__ = ["SWALock", "SWANode", "SWARadixCache"]


class SWARadixCache(SWARadixTree):
    """Match, insert and evict on the FULL + SWA tree (:class:`SWARadixTree`).

    Built as :class:`SWARadixTree` is: the same arguments, the same errors.
    """

    # ----- match --------------------------------------------------------------------------
    def match_prefix(self, key: IntsLike) -> tuple[int, np.ndarray, SWANode]:
        """The longest cached prefix of ``key`` that the window layers can use.

        Returns ``(length, full slots int64 [length], last node)``; a match ending inside
        a node splits it. Refreshes the SWA LRU over the last node's window and stamps the
        node and its ancestors. Source: ``UnifiedTreeCore._match_prefix_helper``,
        ``SWAComponent.create_match_validator`` (``swa_gates_prefix_match=True``). The
        walk's whole length, window or not, is kept as :attr:`full_kv_hit_length` (SGLang's
        ``MatchResult.full_kv_hit_length``).
        """
        key = self.page_aligned(key)
        self.full_kv_hit_length = 0
        node, at, chunks = self.root, 0, []
        best, best_len, live = self.root, 0, float("inf")
        while at < len(key) and self._child_key(key[at:]) in node.children:
            child = node.children[self._child_key(key[at:])]
            if child.full is None:
                break
            n = self._match_len(child.key, key[at:])
            self.full_kv_hit_length += n
            node = self._split(child, n) if n < len(child.key) else child
            chunks.append(node.full)
            if node.swa is None:  # a tombstone: the window starts over
                live = 0
            else:
                live += len(node.key)
                if live >= self.window:
                    best, best_len = node, len(chunks)
            if node is not child:  # the match ended inside the child
                break
            at += n
        if best is not self.root:
            self._refresh_window(best)
        t, cur = self._tick(), best
        while cur is not None:
            cur.time = t
            self._push_if_leaf(cur)
            t -= 0.00001
            cur = cur.parent
        slots = np.concatenate(chunks[:best_len]) if best_len else NO_SLOTS
        return len(slots), slots, best

    # ----- insert -------------------------------------------------------------------------
    def insert(self, key: IntsLike, value: IntsLike, evicted_seqlen: int = 0,
               prev_prefix_len: int = 0) -> int:
        """Insert ``key`` (cut to whole pages) with its full slots ``value``; return how many
        leading tokens were cached already (:meth:`insert_node` also gives the node the key
        ends on).

        ``evicted_seqlen`` (page-aligned): the inserting request's tokens before it have had
        their SWA slots released (the window moved on). Slots the tree already holds are
        freed from ``value`` (``free_segment``; below ``evicted_seqlen``
        ``free_full_segment``), except where a tombstone is revived: from
        ``max(evicted_seqlen, node start)`` on, the node takes the incoming slots and frees
        its old full slots (or, when its full slots are locked, keeps them and takes only the
        incoming SWA slots). A new leaf is a tombstone below ``evicted_seqlen`` and its live
        part is capped at ``ceil(window / p) * p`` tokens (the older part split off above).
        ``prev_prefix_len``: the request inserted its first tokens before and its row already
        points at the tree's slots there (a running request's next checkpoint): nothing below
        it is freed or revived.
        Source: ``UnifiedTreeCore.begin_insert`` and its walk/overlap/commit/tail steps,
        ``SWAComponent.update_component_on_insert_overlap``, ``commit_insert_component_data``.
        """
        return self.insert_node(key, value, evicted_seqlen, prev_prefix_len)[0]

    def insert_node(self, key: IntsLike, value: IntsLike, evicted_seqlen: int = 0,
                    prev_prefix_len: int = 0) -> tuple[int, SWANode]:
        """:meth:`insert`, returning ``(prefix_len, the node the key ends on)`` (SGLang's
        ``InsertResult.prefix_len`` and ``last_device_node``; the root for an empty key)."""
        p = self.page_size
        check_positive_int("prev_prefix_len", prev_prefix_len, minimum=0)
        if evicted_seqlen % p or evicted_seqlen < 0:
            raise bad_value("evicted_seqlen", evicted_seqlen, f"a multiple of page_size={p}, >= 0")
        key = self.page_aligned(key)
        value = as_i64("value", value)
        if len(value) < len(key):
            raise bad_value("len(value)", len(value), f">= len(key) cut to pages = {len(key)}")
        value = value[:len(key)]
        self.root.time = self._tick()
        node, total = self.root, 0
        while total < len(key) and self._child_key(key[total:]) in node.children:
            child = node.children[self._child_key(key[total:])]
            child.time = self._tick()
            self._push_if_leaf(child)
            n = self._match_len(child.key, key[total:])
            if n < len(child.key):
                child = self._split(child, n)
            if child.full is None:
                raise AllocatorError("insert met an evicted node (no host tier is modelled)")
            self._overlap(child, total, value[total:total + n], evicted_seqlen, prev_prefix_len)
            node, total = child, total + n
        target = node
        if total < len(key):
            target = self._new_leaf(node, key[total:], value[total:], total, evicted_seqlen)
        if target is not self.root:
            self._refresh_window(target)
        return total, target

    def _overlap(self, node: SWANode, start: int, incoming: np.ndarray, evicted: int,
                 prev: int) -> None:
        """The walk met ``node`` (tokens ``start .. start + len``): free the duplicates, or
        revive the node's SWA from the incoming slots."""
        alloc, end = self.allocator, start + len(node.key)
        consumed = len(node.key)
        if prev < end and node.swa is None and max(start, evicted) < end:
            live = max(start, evicted)
            if live > start:  # the part below the window stays a tombstone
                self._split(node, live - start)
            fresh = incoming[live - start:]
            consumed = live - start
            if node.full_lock > 0:  # RecoverSWAWithLockedFull: keep the locked full slots
                swa = alloc.translate_loc_from_full_to_swa(fresh).numpy()
                alloc.clear_full_to_swa_mapping(fresh)
                alloc.set_full_to_swa_mapping(node.full, swa)
                alloc.free_full_segment(fresh, 0)
            else:  # adopt the incoming slots, free the old full ones
                old, node.full = node.full, fresh.copy()
                self.version += 1
                alloc.free_full_segment(old, 0)
                swa = alloc.translate_loc_from_full_to_swa(node.full).numpy()
            self._set_swa(node, swa)
        dup = max(0, prev - start)  # the request's own inserted part is the tree's already
        if dup < consumed:
            self._free_dups(incoming[dup:consumed], start + dup, evicted)

    def _free_dups(self, dup: np.ndarray, start: int, evicted: int) -> None:
        """The caller's copies of cached tokens: full side only below ``evicted``."""
        gone = min(max(evicted - start, 0), len(dup))
        if gone:
            self.allocator.free_full_segment(dup[:gone], 0)
        if gone < len(dup):
            self.allocator.free_segment(dup[gone:], 0)

    def _new_leaf(self, parent: SWANode, key: np.ndarray, value: np.ndarray, start: int,
                  evicted: int) -> SWANode:
        leaf = self._node(key, parent)
        leaf.full = value.copy()
        parent.children[self._child_key(key)] = leaf
        self._push_if_leaf(leaf)
        self.full_evictable += len(key)
        self.version += 1
        end = start + len(key)
        live = max(start, evicted)
        if live < end:
            if live > start:  # below the window: a tombstone parent
                self._split(leaf, live - start)
            tail = -(-self.window // self.page_size) * self.page_size
            upper = self._split(leaf, len(leaf.key) - tail) if len(leaf.key) > tail else None
            for n in (upper, leaf):  # the older part first, so the tail is more recent
                if n is not None:
                    self._set_swa(n, self.allocator.translate_loc_from_full_to_swa(n.full).numpy())
        return leaf

    # ----- eviction -----------------------------------------------------------------------
    def _delete_leaf(self, leaf: SWANode) -> tuple[int, int]:
        """Evict a leaf whole: its full slots (full pool only), then its SWA slots
        (``free_swa_segment``). Returns (full, SWA) slots freed.
        Source: ``_delete_unbacked_device_leaf``, ``_drain_device_frees``."""
        full_n, swa_n = len(leaf.full), 0
        self.full_evictable -= full_n
        self.version += 1
        if leaf.swa is not None:
            swa_n = len(leaf.swa)
            self.swa_evictable -= swa_n
            self._lru_remove(leaf)
        del leaf.parent.children[self._child_key(leaf.key)]
        self.allocator.full_attn_allocator.free_segment(leaf.full)
        if swa_n:
            self.allocator.free_swa_segment(leaf.full, 0)
        leaf.swa = None
        self._push_if_leaf(leaf.parent)
        return full_n, swa_n

    def _prev_unlocked(self, at: int) -> SWANode | None:
        """The first node before LRU position ``at`` (toward the most recent) whose SWA is
        not locked (``get_prev_no_lock``)."""
        for node in reversed(self._lru[:at]):
            if node.swa_lock == 0:
                return node
        return None

    def evict(self, num_tokens: int = 0, swa_num_tokens: int = 0) -> tuple[int, int]:
        """Free at least ``num_tokens`` full slots (least recently used unlocked leaves,
        deleted whole), then at least ``swa_num_tokens`` SWA slots counting those already
        freed (the SWA LRU list from its least recent end: a leaf is deleted whole, an
        inner node tombstoned), or as much as can be. Returns (full, SWA) slots freed.
        Source: ``UnifiedRadixCache.evict`` / ``_evict_components``, ``FullComponent`` /
        ``SWAComponent._evict_device_next_node``.
        """
        check_positive_int("num_tokens", num_tokens, minimum=0)
        check_positive_int("swa_num_tokens", swa_num_tokens, minimum=0)
        return self._evict(num_tokens, swa_num_tokens, None, None)

    def evict_for_alloc(self, num_tokens: int = 0, swa_num_tokens: int = 0) -> tuple[int, int]:
        """Evict until each pool has ``num_tokens`` / ``swa_num_tokens`` more free slots than
        now (the shortfalls an allocation found): the full walk stops at its pool's target
        (or when nothing evictable is left), the SWA walk at its target or once it freed
        ``swa_num_tokens``; a full-leaf deletion's SWA slots count toward the SWA side.
        Returns (full, SWA) slots freed. Source: ``UnifiedRadixCache.evict_for_alloc``."""
        check_positive_int("num_tokens", num_tokens, minimum=0)
        check_positive_int("swa_num_tokens", swa_num_tokens, minimum=0)
        a = self.allocator
        return self._evict(num_tokens, swa_num_tokens,
                           a.full_available_size() + num_tokens if num_tokens else None,
                           a.swa_available_size() + swa_num_tokens if swa_num_tokens else None)

    def _evict(self, num_tokens: int, swa_num_tokens: int, full_target: int | None,
               swa_target: int | None) -> tuple[int, int]:
        a = self.allocator
        full_freed = swa_freed = 0

        def reached(target: int | None, available: int) -> bool:
            return target is not None and available >= target

        # the full walk: with a target it may go on past num_tokens until the target is met
        quota = num_tokens if full_target is None else max(num_tokens, self.full_evictable)
        while full_freed < quota and not reached(full_target, a.full_available_size()):
            leaf = self.pop_lru_leaf()
            if leaf is None:
                break
            f, s = self._delete_leaf(leaf)
            full_freed, swa_freed = full_freed + f, swa_freed + s
        if swa_freed >= swa_num_tokens or reached(swa_target, a.swa_available_size()):
            return full_freed, swa_freed
        cursor = self._prev_unlocked(len(self._lru))
        while swa_freed < swa_num_tokens and cursor is not None:
            x = cursor
            cursor = self._prev_unlocked(self._lru.index(x))
            if self._is_leaf(x):
                f, s = self._delete_leaf(x)
                full_freed, swa_freed = full_freed + f, swa_freed + s
            else:  # tombstone an inner node: its SWA slots go, its full slots stay
                swa_freed += len(x.swa)
                self.swa_evictable -= len(x.swa)
                self._lru_remove(x)
                x.swa = None
                self.version += 1
                self.allocator.free_swa_segment(x.full, 0)
            if reached(swa_target, a.swa_available_size()):
                break
        return full_freed, swa_freed
