"""The structure under :class:`~pagedkv.mem_cache.swa_radix_cache.SWARadixCache`: nodes that
hold full-attention slots and, unless tombstoned, sliding-window slots; splits; the SWA LRU
list; window-bounded locks; the four ledgers and the checks that they add up.

Follows SGLang 0.5.23's tree core for ``UnifiedRadixCache`` with the components
``(FULL, SWA)``: ``unified_cache/unified_tree_core.py`` (``UnifiedTreeNode``,
``UnifiedLRUList``, ``_split_node``, ``_is_device_leaf``) and ``unified_cache/components/
{full,swa}.py`` (``acquire_component_lock``, ``release_component_lock``,
``redistribute_on_node_split``, ``set_component_device_value``). What a request does with the
tree (match, insert, evict) is :mod:`pagedkv.mem_cache.swa_radix_cache`.

Access times copy SGLang's float clock: every walked node of an insert and every new or split
node takes the next tick (a new node two: SGLang stamps its creation time too); a match stamps
its node and, 1e-5 apart, its ancestors. The full side evicts by these times; the SWA side by
its LRU list, which only the window of a match's or insert's last node refreshes.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count

import numpy as np

from pagedkv.errors import AllocatorError, check_positive_int
from pagedkv.mem_cache.allocator import IntsLike, as_i64
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.radix_node import descendants, path_full

NO_SLOTS = np.empty(0, dtype=np.int64)


@dataclass(eq=False)
class SWANode:
    """One edge of the tree. ``full``: its full slots (``None`` once evicted); ``swa``: its
    SWA slots (``None``: a tombstone); the lock counts of both; ``boundary``: the id of the
    SWA lock whose window ends here (SGLang's ``metadata["uuid"]``)."""

    id: int
    time: float
    key: np.ndarray = field(default_factory=lambda: NO_SLOTS)
    full: np.ndarray | None = None
    swa: np.ndarray | None = None
    parent: SWANode | None = None
    children: dict[object, SWANode] = field(default_factory=dict)
    full_lock: int = 0
    swa_lock: int = 0
    boundary: int | None = None


@dataclass(frozen=True)
class SWALock:
    """What :meth:`SWARadixTree.lock` returns and :meth:`~SWARadixTree.unlock` takes."""

    node: SWANode
    boundary: int | None


class SWARadixTree:
    """The FULL + SWA radix tree over a sliding-window allocator.

    Args:
        allocator: the pools' allocator (its page size is the tree's).
        sliding_window_size: tokens a window layer reads back (SGLang's
            ``swa_retain_window``: the model's window, wider for a speculative draft).

    Raises:
        ConfigError: a window below 1.
    """

    def __init__(self, allocator: SWATokenToKVPoolAllocator, sliding_window_size: int) -> None:
        self.allocator = allocator
        self.page_size = allocator.page_size
        self.window = check_positive_int("sliding_window_size", sliding_window_size)
        self.version = 0
        self.reset()

    def reset(self) -> None:
        """An empty tree (the allocator is left alone)."""
        self._ids, self._locks = count(), count(1)
        self._clock = 0.0
        self.root = self._node(NO_SLOTS, None)
        self.root.full = NO_SLOTS
        self._lru: list[SWANode] = []  # SWA LRU, most recent first
        # the full side's LRU leaves: (time, id, node), pushed whenever a node may have
        # become a leaf or changed its time; stale entries are dropped when popped
        self._leaf_heap: list[tuple[float, int, SWANode]] = []
        self._leaf_heap_built = 0  # its length when last rebuilt
        self.full_evictable = self.full_protected = 0
        self.swa_evictable = self.swa_protected = 0
        # bumped by every change to which slots the nodes hold or to whether a node's side is
        # locked (what the page recorder reads); a split moves slots between nodes but changes
        # neither, so it leaves the count alone
        self.version += 1

    @property
    def sliding_window_size(self) -> int:
        """The window the tree keeps live (SGLang's ``UnifiedRadixCache.sliding_window_size``)."""
        return self.window

    # ----- sizes --------------------------------------------------------------------------
    def full_evictable_size(self) -> int:
        return self.full_evictable

    def full_protected_size(self) -> int:
        return self.full_protected

    def swa_evictable_size(self) -> int:
        return self.swa_evictable

    def swa_protected_size(self) -> int:
        return self.swa_protected

    # ----- helpers ------------------------------------------------------------------------
    def _tick(self) -> float:
        t, self._clock = self._clock, self._clock + 1.0
        return t

    def _node(self, key: np.ndarray, parent: SWANode | None) -> SWANode:
        node = SWANode(next(self._ids), self._tick(), key, parent=parent)
        self._tick()  # SGLang stamps creation_time too
        return node

    def _child_key(self, key: np.ndarray) -> object:
        return int(key[0]) if self.page_size == 1 else key[:self.page_size].tobytes()

    def _match_len(self, a: np.ndarray, b: np.ndarray) -> int:
        n = min(len(a), len(b))
        diff = np.flatnonzero(a[:n] != b[:n])
        m = int(diff[0]) if len(diff) else n
        return m // self.page_size * self.page_size

    def _is_leaf(self, node: SWANode) -> bool:
        """SGLang's device leaf: full slots held, nothing locked, no child holds full slots."""
        return (node is not self.root and node.full is not None and node.full_lock == 0
                and node.swa_lock == 0 and all(c.full is None for c in node.children.values()))

    def _push_if_leaf(self, node: SWANode) -> None:
        """Queue ``node`` for the full side's eviction if it is a leaf now (called whenever
        a node may have become one or its time changed); rebuild the queue once it is mostly
        stale entries."""
        if not self._is_leaf(node):
            return
        heapq.heappush(self._leaf_heap, (node.time, node.id, node))
        if len(self._leaf_heap) > 4 * self._leaf_heap_built + 1024:
            self._leaf_heap = [(n.time, n.id, n) for n in self.nodes() if self._is_leaf(n)]
            heapq.heapify(self._leaf_heap)
            self._leaf_heap_built = len(self._leaf_heap)

    def _queued_leaf(self, entry: tuple[float, int, SWANode]) -> bool:
        """Whether a queue entry is current: its node still in the tree, a leaf, its time
        unchanged since it was queued."""
        t, _, node = entry
        parent = node.parent
        return (node.time == t and parent is not None
                and parent.children.get(self._child_key(node.key)) is node
                and self._is_leaf(node))

    def pop_lru_leaf(self) -> SWANode | None:
        """The least recently used leaf on the full side (SGLang's heap of device leaves
        by last access time), or None; stale queue entries are dropped on the way. Access
        times are unique (ticks 1.0 apart; a match's ancestors 1e-5 apart below its tick,
        on paths far shorter than 100,000 nodes), so this is the leaf with the least time."""
        heap = self._leaf_heap
        while heap:
            entry = heapq.heappop(heap)
            if self._queued_leaf(entry):
                return entry[2]
        return None

    def _lru_remove(self, node: SWANode) -> None:
        self._lru.remove(node)

    def _refresh_window(self, node: SWANode) -> None:
        """``reset_node_and_window_ancestors_mru``: the node and its ancestors within one
        window plus a page move to the MRU end, in path order (the node first)."""
        at, seen = 0, 0
        while node is not self.root and seen < self.window + self.page_size:
            if node.swa is not None:
                self._lru_remove(node)
                self._lru.insert(at, node)
                at += 1
            seen += len(node.key)
            node = node.parent

    def _set_swa(self, node: SWANode, swa: np.ndarray) -> None:
        """``set_component_device_value``: store SWA slots, MRU, on the ledger."""
        node.swa = swa
        self.version += 1
        self._lru.insert(0, node)
        if node.swa_lock > 0:
            self.swa_protected += len(swa)
        else:
            self.swa_evictable += len(swa)

    def _split(self, child: SWANode, n: int) -> SWANode:
        """Split ``child`` after ``n`` tokens; return the new upper node."""
        new = self._node(child.key[:n], child.parent)
        new.children = {self._child_key(child.key[n:]): child}
        new.full_lock, new.swa_lock = child.full_lock, child.swa_lock
        new.full = None if child.full is None else child.full[:n]
        if child.full is not None:
            child.full = child.full[n:]
        new.swa = None if child.swa is None else child.swa[:n]
        if child.swa is not None:
            child.swa = child.swa[n:]
        new.boundary, child.boundary = child.boundary, None  # the lock's older edge moves up
        child.key = child.key[n:]
        new.parent.children[self._child_key(new.key)] = new
        child.parent = new
        if new.swa is not None:  # beside the child, just less recent
            self._lru.insert(self._lru.index(child) + 1, new)
        child.time = self._tick()
        self._push_if_leaf(child)
        return new

    # ----- keys ---------------------------------------------------------------------------
    def page_aligned(self, key: IntsLike) -> np.ndarray:
        k = as_i64("key", key)
        return k[:len(k) // self.page_size * self.page_size]

    # ----- locks --------------------------------------------------------------------------
    def lock(self, node: SWANode) -> SWALock:
        """Protect ``node``'s path: full slots up to the root, SWA slots (tombstones
        counted) up to the node where one window is covered, which is stamped as the lock's
        boundary. Source: ``FullComponent`` / ``SWAComponent.acquire_component_lock``."""
        boundary, cur, covered = None, node, 0
        while cur is not self.root and covered < self.window:
            if cur.swa_lock == 0 and cur.swa is not None:
                self.swa_evictable -= len(cur.swa)
                self.swa_protected += len(cur.swa)
                self.version += 1
            cur.swa_lock += 1
            covered += len(cur.key)
            if covered >= self.window:
                if cur.boundary is None:
                    cur.boundary = next(self._locks)
                boundary = cur.boundary
            cur = cur.parent
        cur = node
        while cur is not self.root:
            if cur.full_lock == 0:
                self.full_evictable -= len(cur.full)
                self.full_protected += len(cur.full)
                self.version += 1
            cur.full_lock += 1
            cur = cur.parent
        return SWALock(node, boundary)

    def unlock(self, handle: SWALock) -> None:
        """Undo :meth:`lock`: the SWA segment up to its boundary, then the full path.
        Source: ``release_component_lock`` (SWA first, then FULL)."""
        cur = handle.node
        while cur is not self.root:
            if cur.swa_lock <= 0:
                raise AllocatorError(f"unlock of an SWA segment that is not locked (node {cur.id})")
            if cur.swa_lock == 1 and cur.swa is not None:
                self.swa_evictable += len(cur.swa)
                self.swa_protected -= len(cur.swa)
                self.version += 1
            cur.swa_lock -= 1
            self._push_if_leaf(cur)
            if handle.boundary is not None and cur.boundary == handle.boundary:
                break
            cur = cur.parent
        cur = handle.node
        while cur is not self.root:
            if cur.full_lock <= 0:
                raise AllocatorError(f"unlock of a path that is not locked (node {cur.id})")
            if cur.full_lock == 1:
                self.full_evictable += len(cur.full)
                self.full_protected -= len(cur.full)
                self.version += 1
            cur.full_lock -= 1
            self._push_if_leaf(cur)
            cur = cur.parent

    # ----- checks -------------------------------------------------------------------------
    def nodes(self) -> Iterator[SWANode]:
        """Every node but the root, parents before children."""
        return descendants(self.root)

    def path_full(self, node: SWANode) -> np.ndarray:
        """The full slots from the root to ``node``."""
        return path_full(node, self.root)

    def check_invariants(self) -> None:
        """Raise AllocatorError unless the ledgers add up, the SWA LRU list holds exactly
        the nodes with SWA slots, and each node's SWA slots are its full slots' peers."""
        sizes = {"fe": 0, "fp": 0, "se": 0, "sp": 0}
        with_swa = set()
        for n in self.nodes():
            if n.full is None or len(n.full) != len(n.key):
                raise AllocatorError(f"node {n.id} lost its full slots")
            sizes["fp" if n.full_lock else "fe"] += len(n.full)
            if n.swa is not None:
                with_swa.add(n.id)
                sizes["sp" if n.swa_lock else "se"] += len(n.swa)
                peers = self.allocator.translate_loc_from_full_to_swa(n.full).numpy()
                if not np.array_equal(peers, n.swa):
                    raise AllocatorError(f"node {n.id}: SWA slots are not its full slots' peers")
        got = (self.full_evictable, self.full_protected, self.swa_evictable, self.swa_protected)
        if got != (sizes["fe"], sizes["fp"], sizes["se"], sizes["sp"]):
            raise AllocatorError(f"ledgers {got} != counted {tuple(sizes.values())}")
        if {n.id for n in self._lru} != with_swa or len(self._lru) != len(with_swa):
            raise AllocatorError("the SWA LRU list and the nodes holding SWA slots differ")
        queued = {e[1] for e in self._leaf_heap if self._queued_leaf(e)}
        if any(self._is_leaf(n) and n.id not in queued for n in self.nodes()):
            raise AllocatorError("a full-side leaf is missing from the eviction queue")
