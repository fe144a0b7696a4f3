"""SGLang's prefix cache: a radix tree whose edges are token ids and whose values are KV slots.

Follows ``python/sglang/srt/mem_cache/radix_cache.py`` (``RadixCache``, ``TreeNode``). Each
node holds a run of token ids (``key``) and the KV slots that hold those tokens' K/V
(``value``, one slot per token). The path from the root to a node spells a token prefix; a
request whose prompt starts with that prefix reuses those slots instead of recomputing them.

- :meth:`RadixCache.match_prefix` walks the tree along a key and returns the slots of the
  longest cached prefix. A match that ends inside a node splits it in two, so that every
  match ends on a node boundary.
- :meth:`RadixCache.insert` adds a key and its slots, splitting where the key leaves an
  existing edge and adding a new leaf for the rest; it returns how much was already there.
- ``lock_ref``: a running request locks the path to its last matched node
  (:meth:`inc_lock_ref`), so eviction cannot free slots it reads.
- :meth:`RadixCache.evict` frees least-recently-used unlocked leaves until enough slots are
  free; a parent whose last child goes becomes a leaf and a candidate in turn.

With ``page_size`` p > 1 the tree works in whole pages: keys are cut to a multiple of p,
children are keyed by their first page of token ids, and matches advance a page at a time.

Where we simplify: access times come from a counter, not ``time.monotonic()``, so eviction
order is the same on every run; LRU is the only eviction policy (SGLang's default of
``--radix-eviction-policy``); no ``extra_key`` namespaces (LoRA, cache salt), no host
(hierarchical) cache and no ``pop_committed_kv_cache`` bookkeeping.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count

import numpy as np
import torch

from pagedkv.errors import AllocatorError, bad_value, check_positive_int
from pagedkv.mem_cache.allocator import IN_USE, BaseTokenToKVPoolAllocator, IntsLike

ChildKey = int | tuple[int, ...]  # first token (p = 1) or first page of tokens (p > 1)


@dataclass(eq=False)
class TreeNode:
    """One edge of the tree and the node it leads to.

    Attributes:
        id: creation order (the root is 0).
        key: token ids on the edge into this node; a multiple of ``page_size`` long.
        value: int64 ``[len(key)]`` KV slots of those tokens.
        parent: None for the root.
        children: child nodes keyed by their first token (first page when p > 1).
        lock_ref: running requests whose matched path passes through this node.
        last_access_time: the cache's access counter when a match or insert last touched it.
    """

    id: int
    key: tuple[int, ...] = ()
    value: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    parent: TreeNode | None = None
    children: dict[ChildKey, TreeNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access_time: int = 0

    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class MatchResult:
    """What :meth:`RadixCache.match_prefix` found.

    Attributes:
        device_indices: int64 ``[n]`` KV slots of the first ``n`` tokens of the key.
        last_device_node: the node the match ended on (the root when nothing matched); lock
            it with :meth:`RadixCache.inc_lock_ref` while a request uses the slots.
    """

    device_indices: torch.Tensor
    last_device_node: TreeNode


class RadixCache:
    """The prefix tree over one KV pool.

    Args:
        allocator: the pool's allocator; the tree frees evicted slots into it and takes its
            ``page_size``.

    Attributes:
        root_node: the empty-key root, always locked (``lock_ref`` 1) so it is never evicted.
        evictable_size_: slots in nodes no running request locks (SGLang's name).
        protected_size_: slots in locked nodes.

    Source: ``mem_cache/radix_cache.py`` (``RadixCache``; ``match_prefix``, ``insert``,
    ``_split_node``, ``evict``, ``inc_lock_ref``, ``dec_lock_ref``).
    """

    def __init__(self, allocator: BaseTokenToKVPoolAllocator) -> None:
        self.allocator = allocator
        self.page_size = allocator.page_size
        self.reset()

    def reset(self) -> None:
        """Drop every node (their slots are NOT freed: call on an empty tree or a fresh pool)."""
        self._ids = count()
        self._clock = count(1)
        self.root_node = TreeNode(id=next(self._ids), lock_ref=1)
        self.evictable_size_ = 0
        self.protected_size_ = 0

    # ----- sizes ------------------------------------------------------------------------
    def evictable_size(self) -> int:
        """Slots :meth:`evict` could free now; SGLang counts them as available for admission."""
        return self.evictable_size_

    def protected_size(self) -> int:
        """Slots in nodes locked by running requests."""
        return self.protected_size_

    def total_size(self) -> int:
        """Slots held by the tree, locked or not."""
        return self.evictable_size_ + self.protected_size_

    # ----- keys -------------------------------------------------------------------------
    def _page_aligned(self, key: Sequence[int]) -> tuple[int, ...]:
        """``key`` as a tuple of ints, cut to whole pages; ConfigError if it is not token ids."""
        if isinstance(key, (str, bytes)) or not all(isinstance(t, (int, np.integer))
                                                    for t in key):
            raise bad_value("key", key if len(key) < 20 else f"{key[:20]}...",
                            "a sequence of integer token ids")
        key = tuple(int(t) for t in key)
        return key[:len(key) // self.page_size * self.page_size]

    def _child_key(self, key: tuple[int, ...]) -> ChildKey:
        return key[0] if self.page_size == 1 else key[:self.page_size]

    def _key_match(self, a: tuple[int, ...], b: tuple[int, ...]) -> int:
        """Length of the common prefix of ``a`` and ``b``, in whole pages."""
        n = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            n += 1
        return n // self.page_size * self.page_size

    def _touch(self, node: TreeNode) -> None:
        node.last_access_time = next(self._clock)

    # ----- match and insert -------------------------------------------------------------
    def match_prefix(self, key: Sequence[int]) -> MatchResult:
        """Slots of the longest cached prefix of ``key`` (token ids; cut to whole pages).

        Splits the node the match ends inside, marks every node on the path as just used.
        Returns an empty ``device_indices`` and the root when nothing matches.
        """
        key = self._page_aligned(key)
        node, found = self.root_node, []
        self._touch(node)
        while key and self._child_key(key) in node.children:
            child = node.children[self._child_key(key)]
            self._touch(child)
            n = self._key_match(child.key, key)
            if n < len(child.key):
                node = self._split_node(child, n)
                found.append(node.value)
                break
            found.append(child.value)
            node, key = child, key[n:]
        slots = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
        return MatchResult(torch.from_numpy(slots), node)

    def _split_node(self, child: TreeNode, n: int) -> TreeNode:
        """Cut ``child``'s edge after ``n`` tokens; return the new node holding the first part."""
        parent = child.parent
        assert parent is not None and 0 < n < len(child.key)
        new = TreeNode(id=next(self._ids), key=child.key[:n], value=child.value[:n],
                       parent=parent, lock_ref=child.lock_ref,
                       last_access_time=child.last_access_time)
        parent.children[self._child_key(new.key)] = new
        child.key, child.value, child.parent = child.key[n:], child.value[n:], new
        new.children[self._child_key(child.key)] = child
        return new

    def insert(self, key: Sequence[int], value: IntsLike) -> int:
        """Add ``key`` (token ids) with ``value`` (their slots, int64 ``[len(key)]``).

        Both are cut to whole pages. Returns the length of the prefix that was already in
        the tree: the caller owns ``value[:that]`` twice over and must free those slots
        (the tree keeps its own copy). New nodes are unlocked, so they count as evictable.
        Raises ConfigError when ``len(value) != len(key)``.
        """
        slots = np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value,
                           dtype=np.int64)
        if len(slots) != len(key):
            raise bad_value("len(value)", len(slots), f"len(key) = {len(key)}")
        key = self._page_aligned(key)
        slots = slots[:len(key)]
        node, done = self.root_node, 0
        self._touch(node)
        while done < len(key) and self._child_key(key[done:]) in node.children:
            child = node.children[self._child_key(key[done:])]
            self._touch(child)
            n = self._key_match(child.key, key[done:])
            if n < len(child.key):
                child = self._split_node(child, n)
            node, done = child, done + n
        if done < len(key):
            leaf = TreeNode(id=next(self._ids), key=key[done:], value=slots[done:].copy(),
                            parent=node)
            self._touch(leaf)
            node.children[self._child_key(leaf.key)] = leaf
            self.evictable_size_ += len(leaf.key)
        return done

    # ----- locks ------------------------------------------------------------------------
    def inc_lock_ref(self, node: TreeNode) -> None:
        """Lock the path from ``node`` up to the root: its slots stop being evictable."""
        while node is not self.root_node:
            if node.lock_ref == 0:
                self.evictable_size_ -= len(node.key)
                self.protected_size_ += len(node.key)
            node.lock_ref += 1
            assert node.parent is not None
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Undo one :meth:`inc_lock_ref` on the same node; AllocatorError if not locked."""
        walk = node
        while walk is not self.root_node:
            if walk.lock_ref < 1:
                raise AllocatorError(f"dec_lock_ref on node {node.id}: node {walk.id} is not "
                                     "locked (unlocked twice?)")
            assert walk.parent is not None
            walk = walk.parent
        while node is not self.root_node:
            if node.lock_ref == 1:
                self.evictable_size_ += len(node.key)
                self.protected_size_ -= len(node.key)
            node.lock_ref -= 1
            assert node.parent is not None
            node = node.parent

    # ----- eviction ---------------------------------------------------------------------
    def evict(self, num_tokens: int) -> int:
        """Free unlocked leaves, least recently used first, until ``num_tokens`` slots are
        freed or nothing unlocked is left. Returns the slots freed (may exceed the ask by
        up to one node, or fall short)."""
        check_positive_int("num_tokens", num_tokens, minimum=0)
        heap = [(n.last_access_time, n.id, n) for n in self.nodes()
                if n.is_leaf() and n.lock_ref == 0 and n is not self.root_node]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            self.allocator.free(leaf.value)
            del parent.children[self._child_key(leaf.key)]
            self.evictable_size_ -= len(leaf.key)
            freed += len(leaf.key)
            if parent.is_leaf() and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access_time, parent.id, parent))
        return freed

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

        Checks: every edge is non-empty, whole pages long, keyed by its first page and as
        long as its slots; parents (below the root, which stays at 1) hold at least their
        children's locks; the two size
        counters equal the unlocked and locked slot totals; no slot is in two nodes; and
        the allocator holds every slot the tree holds.
        """
        evictable = protected = 0
        slots = []
        for node in self.nodes():
            for ck, child in node.children.items():
                if child.parent is not node or ck != self._child_key(child.key):
                    raise AllocatorError(f"node {child.id} is filed under the wrong parent or key")
                if node is not self.root_node and child.lock_ref > node.lock_ref:
                    raise AllocatorError(f"node {child.id} has more locks than its parent")
            if node is self.root_node:
                continue
            if not node.key or len(node.key) % self.page_size or len(node.value) != len(node.key):
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
        held = np.concatenate(slots) if slots else np.empty(0, dtype=np.int64)
        if len(np.unique(held)) != len(held):
            raise AllocatorError("a KV slot is held by two tree nodes")
        if (self.allocator.slot_state.numpy()[held] != IN_USE).any():
            raise AllocatorError("the tree holds slots the allocator does not")
