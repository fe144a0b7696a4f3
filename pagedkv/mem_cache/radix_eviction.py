"""What the radix tree may free, and freeing it: locks, the LRU leaves, eviction.

Follows ``python/sglang/srt/mem_cache/radix_cache.py`` (``RadixCache.inc_lock_ref``,
``dec_lock_ref``, ``evict``; 0.5.9) and 0.5.23's ``mem_cache/unified_radix_cache.py``
(``UnifiedRadixCache.evict_for_alloc``), whose locks and eviction order are 0.5.9's (checked
by the reference tests). Functions over a :class:`~pagedkv.mem_cache.radix_tree.RadixTree`
(what they use of it is :class:`EvictableTree`), which calls them from its methods of the
same names:

- a running request locks the path to its last matched node (:func:`inc_lock_ref`), so
  eviction cannot free slots it reads; a locked node's slots count as ``protected_size_``,
  an unlocked one's as ``evictable_size_``, which admission counts as available;
- :func:`evict` frees least-recently-used unlocked leaves until enough slots are freed; a
  parent whose last child goes becomes a leaf and a candidate in turn;
  :func:`evict_for_alloc` (0.5.23) instead stops as soon as the allocator has enough free
  slots.

Where we simplify: LRU is the only eviction policy (SGLang's default
``--radix-eviction-policy``). Unlocked leaves wait in a heap kept across calls
(``RadixTree.lru_heap``; SGLang rebuilds it on every ``evict``); the order popped is the same.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from pagedkv.errors import AllocatorError, check_positive_int
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.radix_node import TreeNode


class EvictableTree(Protocol):
    """What locking and eviction use of a radix tree
    (:class:`~pagedkv.mem_cache.radix_tree.RadixTree` has it all): its root, node count and
    nodes, its size counters (slots), its heap of unlocked leaves, the allocator its slots
    go back to and in which order (``free_order``, a ``Release`` field), and unlinking a leaf."""

    root_node: TreeNode
    num_nodes: int
    evictable_size_: int
    protected_size_: int
    evicted_tokens: int
    lru_heap: list[tuple[int, int, TreeNode]]
    allocator: BaseTokenToKVPoolAllocator
    free_order: str

    def nodes(self) -> Iterator[TreeNode]:
        """Every node, the root included."""

    def detach_leaf(self, leaf: TreeNode) -> TreeNode:
        """Unlink ``leaf`` from its parent; return the parent."""


def push_if_evictable(tree: EvictableTree, node: TreeNode) -> None:
    """Queue ``node`` in ``tree.lru_heap`` if it is now an unlocked leaf (below the root)."""
    if not node.children and node.lock_ref == 0 and node is not tree.root_node:
        heapq.heappush(tree.lru_heap, (node.last_access_time, node.id, node))
        if len(tree.lru_heap) > 4 * tree.num_nodes + 64:  # mostly stale entries: rebuild
            tree.lru_heap = [(n.last_access_time, n.id, n) for n in tree.nodes()
                             if not n.children and n.lock_ref == 0 and n is not tree.root_node]
            heapq.heapify(tree.lru_heap)


def inc_lock_ref(tree: EvictableTree, node: TreeNode) -> None:
    """Lock the path from ``node`` up to the root: its slots stop being evictable.
    Source: ``RadixCache.inc_lock_ref``."""
    while node is not tree.root_node:
        if node.lock_ref == 0:
            tree.evictable_size_ -= len(node.key)
            tree.protected_size_ += len(node.key)
        node.lock_ref += 1
        assert node.parent is not None
        node = node.parent


def dec_lock_ref(tree: EvictableTree, node: TreeNode) -> None:
    """Undo one :func:`inc_lock_ref` on the same node; a node left unlocked and childless
    becomes an eviction candidate. Source: ``RadixCache.dec_lock_ref``.

    Raises:
        AllocatorError: a node on the path is not locked (unlocked twice?).
    """
    walk = node
    while walk is not tree.root_node:
        if walk.lock_ref < 1:
            raise AllocatorError(f"dec_lock_ref on node {node.id}: node {walk.id} is not "
                                 "locked (unlocked twice?)")
        assert walk.parent is not None
        walk = walk.parent
    while node is not tree.root_node:
        if node.lock_ref == 1:
            tree.evictable_size_ += len(node.key)
            tree.protected_size_ -= len(node.key)
        node.lock_ref -= 1
        if node.lock_ref == 0:
            push_if_evictable(tree, node)
        assert node.parent is not None
        node = node.parent


def pop_lru_leaf(tree: EvictableTree) -> TreeNode | None:
    """The least recently used unlocked leaf, or None (stale heap entries dropped)."""
    heap = tree.lru_heap
    while heap:
        t, _, node = heapq.heappop(heap)
        if (node.parent is not None and not node.children and node.lock_ref == 0
                and node.last_access_time == t):
            return node
    return None


def evict_leaf(tree: EvictableTree, leaf: TreeNode, free: bool = True) -> int:
    """Take ``leaf`` out of the tree (its parent may become a candidate); free its slots too
    unless ``free`` is False (the caller frees them). Returns its slots."""
    if free:
        tree.allocator.free_run(leaf.value, tree.free_order)
    parent = tree.detach_leaf(leaf)
    tree.evictable_size_ -= len(leaf.key)
    tree.evicted_tokens += len(leaf.key)
    push_if_evictable(tree, parent)
    return len(leaf.key)


def evict(tree: EvictableTree, num_tokens: int) -> int:
    """Free unlocked leaves, least recently used first, until ``num_tokens`` slots are freed
    or nothing unlocked is left; return the slots freed (may exceed the ask by up to one
    node).

    Raises:
        ConfigError: ``num_tokens`` is not an integer >= 0.
    Source: ``RadixCache.evict``.
    """
    check_positive_int("num_tokens", num_tokens, minimum=0)
    freed = 0
    while freed < num_tokens:
        leaf = pop_lru_leaf(tree)
        if leaf is None:
            break
        freed += evict_leaf(tree, leaf)
    return freed


def evict_for_alloc(tree: EvictableTree, num_tokens: int) -> int:
    """Free LRU unlocked leaves one at a time until the allocator has ``num_tokens`` free
    slots or nothing unlocked is left; return the slots freed.
    Source: 0.5.23 ``UnifiedRadixCache.evict_for_alloc``."""
    if tree.free_order == "sorted":  # free() sorts each call's pages: one leaf a call
        freed = 0
        while tree.allocator.available_size() < num_tokens:
            leaf = pop_lru_leaf(tree)
            if leaf is None:
                break
            freed += evict_leaf(tree, leaf)
        return freed
    # One free_segment over all the evicted leaves leaves the free list as one call per
    # leaf would: pages go to the back (page size 1), so in eviction order, or to the
    # front (page size > 1), so the last leaf's first. A leaf holds whole pages, so the
    # room grows by its length.
    freed, room, evicted = 0, tree.allocator.available_size(), []
    while room + freed < num_tokens:
        leaf = pop_lru_leaf(tree)
        if leaf is None:
            break
        evicted.append(leaf.value)
        freed += evict_leaf(tree, leaf, free=False)
    if len(evicted) > 1:
        tree.allocator.free_segment(np.concatenate(
            evicted if tree.page_size == 1 else evicted[::-1]))
    elif evicted:
        tree.allocator.free_segment(evicted[0])
    return freed
