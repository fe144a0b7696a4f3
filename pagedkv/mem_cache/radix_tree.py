"""The core of SGLang's prefix cache: a radix tree whose edges are token ids and whose values
are KV slots.

Follows ``python/sglang/srt/mem_cache/radix_cache.py`` (``RadixCache``, 0.5.9) and the
default tree of 0.5.23, ``mem_cache/unified_radix_cache.py`` (``UnifiedRadixCache`` with a
Rust core; its matches, inserts, locks and eviction order are those of 0.5.9's tree, checked
by the reference tests). The path from the root to a node
(:class:`~pagedkv.mem_cache.radix_node.TreeNode`: token ids cut to whole pages, and their KV
slots) spells a token prefix; a request whose prompt starts with it reuses those slots.
:meth:`RadixTree.match_prefix` returns the slots of the longest cached prefix of a key and
:meth:`RadixTree.insert` adds a key and its slots; both split a node where the key leaves
its edge. Locks and eviction are functions of :mod:`pagedkv.mem_cache.radix_eviction`, which
the methods of the same names call. What a request's life does to the tree
(``cache_unfinished_req``, ``cache_finished_req``, where the two releases differ) is
:class:`pagedkv.mem_cache.radix_cache.RadixCache`, built on this core as 0.5.23 builds
``UnifiedRadixCache`` on its tree core.

Where we simplify: access times come from an integer clock, not ``time.monotonic()``: one
tick per match or insert for every node it walks, a later tick for every node it creates.
For sequential calls this is the order both releases produce. No ``extra_key`` namespaces,
no host (hierarchical) cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count

import numpy as np

from pagedkv.errors import AllocatorError, bad_value
from pagedkv.mem_cache import radix_eviction
from pagedkv.mem_cache.allocator import IN_USE, BaseTokenToKVPoolAllocator, IntsLike, as_i64
from pagedkv.mem_cache.radix_node import (
    EMPTY_SLOTS,
    MatchResult,
    TreeNode,
    get_child_key,
    key_match,
    page_aligned,
)
from pagedkv.release_behaviours import FREE_ORDERS
from pagedkv.releases import DEFAULT_RELEASE


class RadixTree:
    """The prefix tree over one KV pool.

    Args:
        allocator: the pool's allocator; evicted slots go back to it.
        free_order: how evicted pages are freed (``Release.free_order``): ``"row"`` (0.5.23,
            the default: in the leaf's key order, ``free_segment``) or ``"sorted"`` (0.5.9:
            ``free``).

    Attributes:
        root_node: the empty-key root, always locked (``lock_ref`` 1) so it is never evicted.
        evictable_size_: slots in nodes no running request locks (SGLang's name).
        protected_size_: slots in locked nodes.
        evicted_tokens: slots evicted so far (a counter of ours, for the book).
        num_nodes: nodes in the tree, the root included.
        lru_heap: ``(last_access_time, id, node)`` of unlocked leaves, a heap that
            :mod:`~pagedkv.mem_cache.radix_eviction` keeps (stale entries pruned lazily).
    """

    def __init__(self, allocator: BaseTokenToKVPoolAllocator, *,
                 free_order: str = DEFAULT_RELEASE.free_order) -> None:
        if free_order not in FREE_ORDERS:
            raise bad_value("free_order", free_order, " or ".join(map(repr, FREE_ORDERS)))
        self.allocator = allocator
        self.page_size = allocator.page_size
        self.free_order = free_order
        self.disable = False
        self.reset()

    def reset(self) -> None:
        """Drop every node (their slots are NOT freed: call on an empty tree or a fresh pool)."""
        self._ids = count()
        self._clock = count(1)
        self.root_node = TreeNode(id=next(self._ids), lock_ref=1)
        self.evictable_size_ = 0
        self.protected_size_ = 0
        self.lru_heap: list[tuple[int, int, TreeNode]] = []
        self.num_nodes = 1
        self.evicted_tokens = 0  # slots evicted since the last reset

    # ----- sizes ------------------------------------------------------------------------
    def evictable_size(self) -> int:
        """Slots :meth:`evict` could free now; admission counts them as available."""
        return self.evictable_size_

    def protected_size(self) -> int:
        """Slots in nodes locked by running requests."""
        return self.protected_size_

    def total_size(self) -> int:
        """Slots held by the tree, locked or not."""
        return self.evictable_size_ + self.protected_size_

    # ----- keys and the clock -----------------------------------------------------------
    def page_aligned(self, key: IntsLike) -> np.ndarray:
        """``key`` as int64 token ids cut to whole pages; ConfigError if not integers."""
        return page_aligned(key, self.page_size)

    def _stamp(self, node: TreeNode, tick: int) -> None:
        node.last_access_time = tick
        radix_eviction.push_if_evictable(self, node)

    def _new_node(self, parent: TreeNode, key: np.ndarray, value: np.ndarray,
                  lock_ref: int = 0) -> TreeNode:
        node = TreeNode(id=next(self._ids), key=key, value=value, parent=parent,
                        lock_ref=lock_ref, last_access_time=next(self._clock))
        self.num_nodes += 1
        return node

    # ----- match and insert -------------------------------------------------------------
    def match_prefix(self, key: IntsLike) -> MatchResult:
        """Slots of the longest cached prefix of ``key`` (token ids, cut to whole pages).

        Splits the node the match ends inside and marks every node on the path as just
        used. Source: ``RadixCache.match_prefix`` / ``_match_prefix_helper``.
        """
        found: list[np.ndarray] = []
        node = self._walk(key, found)
        slots = np.concatenate(found) if found else EMPTY_SLOTS
        return MatchResult(slots, node)

    def _walk(self, key: IntsLike, found: list[np.ndarray] | None) -> TreeNode:
        """The match's walk: stamp the path, split where the match ends inside a node,
        append each matched node's slots to ``found`` (unless None); return the last node."""
        key = self.page_aligned(key)
        tick = next(self._clock)
        node = self.root_node
        node.last_access_time = tick
        while len(key) and (child := node.children.get(get_child_key(key, self.page_size))) is not None:
            self._stamp(child, tick)
            n = key_match(child.key, key, self.page_size)
            if n < len(child.key):
                node = self._split_node(child, n)
                if found is not None:
                    found.append(node.value)
                break
            if found is not None:
                found.append(child.value)
            node, key = child, key[n:]
        return node

    def touch_prefix(self, key: IntsLike) -> None:
        """A match whose result is dropped: the same walk (access times, splits), no slots
        gathered (0.5.23's ``touch_prefix``, used by its waiting-queue refresh)."""
        self._walk(key, None)

    def _split_node(self, child: TreeNode, n: int) -> TreeNode:
        """Cut ``child``'s edge after ``n`` tokens; return the new node holding the first part."""
        parent = child.parent
        assert parent is not None and 0 < n < len(child.key)
        new = self._new_node(parent, child.key[:n], child.value[:n], lock_ref=child.lock_ref)
        parent.children[get_child_key(new.key, self.page_size)] = new
        child.key, child.value, child.parent = child.key[n:], child.value[n:], new
        new.children[get_child_key(child.key, self.page_size)] = child
        return new

    def insert(self, key: IntsLike, value: IntsLike) -> tuple[int, TreeNode, list[tuple[int, int]]]:
        """Add ``key`` (token ids) with ``value`` (their slots, int64 ``[len(key)]``).

        Both are cut to whole pages. New nodes are unlocked, so they count as evictable.

        Returns:
            ``(prefix_len, node, overlaps)``: how many tokens of the key were already in the
            tree (the caller owns ``value[:prefix_len]`` twice over and must free its own
            copies), the node the key ends on, and the ``(start, end)`` token ranges of the
            key that each existing node covered, in walk order (0.5.23 frees duplicates
            node by node).
        Raises:
            ConfigError: ``len(value) != len(key)``.
        Source: ``RadixCache.insert`` / ``_insert_helper`` (0.5.9); the insert walk of
        ``UnifiedTreeCore`` (0.5.23).
        """
        slots = as_i64("value", value)
        key = np.asarray(key)
        if len(slots) != len(key):
            raise bad_value("len(value)", len(slots), f"len(key) = {len(key)}")
        key = self.page_aligned(key)
        slots = slots[:len(key)]
        tick, p = next(self._clock), self.page_size
        node, done, overlaps = self.root_node, 0, []
        node.last_access_time = tick
        while done < len(key) and (child := node.children.get(get_child_key(key[done:], p))) is not None:
            self._stamp(child, tick)
            n = key_match(child.key, key[done:], p)
            if n < len(child.key):
                child = self._split_node(child, n)
            overlaps.append((done, done + n))
            node, done = child, done + n
        if done < len(key):
            leaf = self._new_node(node, key[done:].copy(), slots[done:].copy())
            node.children[get_child_key(leaf.key, self.page_size)] = leaf
            self.evictable_size_ += len(leaf.key)
            radix_eviction.push_if_evictable(self, leaf)
            node = leaf
        return done, node, overlaps

    def insert_held_prefix(self, node: TreeNode, depth: int) -> None:
        """``insert(key[:depth], ...)`` for a key the tree already holds on the path to
        ``node``: the path's nodes down to ``depth`` tokens are marked as just used, and a
        node is split so that one ends at ``depth``. The same clock ticks and splits as that
        insert, without comparing keys (``depth`` a multiple of the page size, at most the
        path's length).
        """
        path = []
        while node is not self.root_node:
            path.append(node)
            assert node.parent is not None
            node = node.parent
        tick = next(self._clock)
        self.root_node.last_access_time = tick
        done = 0
        for child in reversed(path):
            if done >= depth:
                break
            self._stamp(child, tick)
            n = min(len(child.key), depth - done)
            if n < len(child.key):
                self._split_node(child, n)
            done += n

    def path_indices(self, node: TreeNode) -> np.ndarray:
        """The slots on the path from the root to ``node``, in token order."""
        parts = []
        while node is not self.root_node:
            parts.append(node.value)
            assert node.parent is not None
            node = node.parent
        return np.concatenate(parts[::-1]) if parts else EMPTY_SLOTS

    def detach_leaf(self, leaf: TreeNode) -> TreeNode:
        """Unlink ``leaf`` from its parent (its slots and the size counters are the caller's:
        :func:`~pagedkv.mem_cache.radix_eviction.evict_leaf`); return the parent."""
        parent = leaf.parent
        assert parent is not None and not leaf.children
        del parent.children[get_child_key(leaf.key, self.page_size)]
        leaf.parent = None
        self.num_nodes -= 1
        return parent

    # ----- locks and eviction (pagedkv.mem_cache.radix_eviction) -------------------------
    def inc_lock_ref(self, node: TreeNode) -> None:
        """Lock the path from ``node`` up to the root: its slots stop being evictable."""
        radix_eviction.inc_lock_ref(self, node)

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Undo one :meth:`inc_lock_ref` on the same node; AllocatorError if not locked."""
        radix_eviction.dec_lock_ref(self, node)

    def evict(self, num_tokens: int) -> int:
        """:func:`~pagedkv.mem_cache.radix_eviction.evict`: free ``num_tokens`` slots' worth."""
        return radix_eviction.evict(self, num_tokens)

    def evict_for_alloc(self, num_tokens: int) -> int:
        """:func:`~pagedkv.mem_cache.radix_eviction.evict_for_alloc` (0.5.23): evict until
        the allocator has ``num_tokens`` free slots."""
        return radix_eviction.evict_for_alloc(self, num_tokens)

    # ----- reading the tree -------------------------------------------------------------
    def nodes(self) -> Iterator[TreeNode]:
        """Every node, root first, depth first, children in insertion order."""
        stack = [self.root_node]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children.values()))

    def check_invariants(self) -> None:
        """Raise AllocatorError unless the tree is consistent with itself and the allocator.

        Checks: every edge non-empty, whole pages, filed under its first page, as long as
        its slots; no child holds more locks than its parent (below the root); the size
        counters equal the unlocked and locked totals; no slot in two nodes; every slot the
        tree holds is in use in the allocator.
        """
        evictable = protected = 0
        slots = []
        for node in self.nodes():
            for ck, child in node.children.items():
                if child.parent is not node or ck != get_child_key(child.key, self.page_size):
                    raise AllocatorError(f"node {child.id} is filed under the wrong parent or key")
                if node is not self.root_node and child.lock_ref > node.lock_ref:
                    raise AllocatorError(f"node {child.id} has more locks than its parent")
            if node is self.root_node:
                continue
            if not len(node.key) or len(node.key) % self.page_size or len(node.value) != len(node.key):
                raise AllocatorError(f"node {node.id}: key of {len(node.key)} tokens, "
                                     f"{len(node.value)} slots, page_size {self.page_size}")
            if node.lock_ref:
                protected += len(node.key)
            else:
                evictable += len(node.key)
            slots.append(node.value)
        if (evictable, protected) != (self.evictable_size_, self.protected_size_):
            raise AllocatorError(f"size counters {self.evictable_size_}/{self.protected_size_} "
                                 f"!= evictable/protected totals {evictable}/{protected}")
        held = np.concatenate(slots) if slots else EMPTY_SLOTS
        if len(np.unique(held)) != len(held):
            raise AllocatorError("a KV slot is held by two tree nodes")
        if (self.allocator.slot_state.numpy()[held] != IN_USE).any():
            raise AllocatorError("the tree holds slots the allocator does not")
