"""The structure under :class:`~pagedkv.mem_cache.mamba_radix_cache.MambaRadixCache`: nodes that
hold full-attention KV slots and, at some of them, one recurrent-state slot; splits; the
state LRU list; locks; the four ledgers and the checks that they add up.

Follows SGLang 0.5.23's tree core for ``UnifiedRadixCache`` with the components
``(FULL, MAMBA)``: ``unified_cache/unified_tree_core.py`` (``UnifiedTreeNode``,
``UnifiedLRUList``, ``_split_node``, ``_is_device_leaf``) and ``unified_cache/components/
{full,mamba}.py`` (``acquire_component_lock``, ``release_component_lock``,
``redistribute_on_node_split``, ``commit_insert_component_data``). What a request does with
the tree (match, insert, evict) is :mod:`pagedkv.mem_cache.mamba_radix_cache`.

A state slot is the state after the node's last token: it is only worth anything at the end of
a match, so, unlike KV, it is not path data. Hence: a split leaves the upper half without a
state; a lock pins the state of its own node only (the KV of the whole path); the state LRU
list is refreshed for the node a match ends on, never its ancestors.

Access times copy SGLang's clock (only their order matters): every walked node of an insert
and every new or split node takes the next tick (a new node two: SGLang stamps its creation
time too); a match stamps its node and, 1e-5 apart, its ancestors. The full side evicts leaves
by these times; the state side by its LRU list.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count

import numpy as np

from pagedkv.errors import AllocatorError
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator, MambaSlotAllocator
from pagedkv.mem_cache.radix_node import EMPTY_SLOTS, descendants, get_child_key, path_full


@dataclass(eq=False)
class MambaNode:
    """One edge of the tree. ``full``: its KV slots (int64 ``[len(key)]``); ``mamba``: the
    state slot after its last token, or None (a *tombstone* for the state: the KV stays
    matchable, but a match cannot end here); the lock counts of both."""

    id: int
    time: float
    key: np.ndarray = field(default_factory=lambda: EMPTY_SLOTS)
    full: np.ndarray = field(default_factory=lambda: EMPTY_SLOTS)
    mamba: int | None = None
    parent: MambaNode | None = None
    children: dict[object, MambaNode] = field(default_factory=dict)
    full_lock: int = 0
    mamba_lock: int = 0


class MambaRadixTree:
    """The FULL + MAMBA radix tree over a token allocator and a state-slot allocator.

    Args:
        allocator: the full-attention layers' KV allocator (its page size is the tree's).
        mamba_allocator: the state slots' free list (the request table's
            ``MambaSlotAllocator``); the tree frees the states it drops into it.
    """

    def __init__(self, allocator: BaseTokenToKVPoolAllocator,
                 mamba_allocator: MambaSlotAllocator) -> None:
        self.allocator = allocator
        self.mamba_allocator = mamba_allocator
        self.page_size = allocator.page_size
        self.reset()

    def reset(self) -> None:
        """An empty tree (the allocators are left alone)."""
        self._ids, self._clock = count(), count()
        self.root = self._node(EMPTY_SLOTS, None)
        # the state LRU list: least recently used first (SGLang's tail), most recent last
        self._lru: OrderedDict[int, MambaNode] = OrderedDict()
        self.full_evictable = self.full_protected = 0
        self.mamba_evictable = self.mamba_protected = 0

    # ----- sizes (SGLang's names) --------------------------------------------------------
    def full_evictable_size(self) -> int:
        return self.full_evictable

    def full_protected_size(self) -> int:
        return self.full_protected

    def mamba_evictable_size(self) -> int:
        return self.mamba_evictable

    def mamba_protected_size(self) -> int:
        return self.mamba_protected

    # ----- helpers -----------------------------------------------------------------------
    def _tick(self) -> float:
        return float(next(self._clock))

    def _node(self, key: np.ndarray, parent: MambaNode | None) -> MambaNode:
        """A new node: its access time, then a tick for SGLang's ``creation_time``."""
        time, _ = self._tick(), self._tick()
        return MambaNode(next(self._ids), time, key, parent=parent)

    def _child_key(self, key: np.ndarray) -> object:
        return get_child_key(key, self.page_size)

    def is_leaf(self, node: MambaNode) -> bool:
        """SGLang's device leaf (``_is_device_leaf``): not the root, nothing locked, no
        child (every child holds KV: a node without KV is deleted at once)."""
        return (node is not self.root and not node.children and node.full_lock == 0
                and node.mamba_lock == 0)

    def _lru_mru(self, node: MambaNode) -> None:
        """``insert_mru`` / ``reset_node_mru``: ``node`` becomes the most recent state."""
        self._lru[node.id] = node
        self._lru.move_to_end(node.id)

    def _set_mamba(self, node: MambaNode, slot: int) -> None:
        """``set_component_device_value``: store a state, most recent, on the ledger its
        lock says (a state stored under a lock is protected)."""
        node.mamba = slot
        self._lru_mru(node)
        if node.mamba_lock > 0:
            self.mamba_protected += 1
        else:
            self.mamba_evictable += 1

    def _split(self, child: MambaNode, n: int) -> MambaNode:
        """Split ``child`` after ``n`` tokens; return the new upper node, which takes the
        KV lock count but neither the state nor its lock (``redistribute_on_node_split``)."""
        new = self._node(child.key[:n], child.parent)
        new.children = {self._child_key(child.key[n:]): child}
        new.full_lock = child.full_lock
        new.full, child.full = child.full[:n], child.full[n:]
        child.key = child.key[n:]
        new.parent.children[self._child_key(new.key)] = new
        child.parent = new
        child.time = self._tick()
        return new

    # ----- locks -------------------------------------------------------------------------
    def lock(self, node: MambaNode) -> MambaNode:
        """Protect ``node``'s KV path to the root and ``node``'s own state (counted on a
        tombstone too); returns the handle :meth:`unlock` takes.
        Source: ``inc_lock_ref``; ``FullComponent`` / ``MambaComponent.acquire_component_lock``."""
        if node is self.root:
            return node
        cur = node
        while cur is not self.root:
            if cur.full_lock == 0:
                self.full_evictable -= len(cur.full)
                self.full_protected += len(cur.full)
            cur.full_lock += 1
            cur = cur.parent
        if node.mamba_lock == 0 and node.mamba is not None:
            self.mamba_evictable -= 1
            self.mamba_protected += 1
        node.mamba_lock += 1
        return node

    def unlock(self, node: MambaNode) -> None:
        """Undo :meth:`lock`: the state first, then the KV path (``dec_lock_ref``).

        Raises:
            AllocatorError: ``node`` (or a node on its path) is not locked.
        """
        if node is self.root:
            return
        if node.mamba_lock <= 0:
            raise AllocatorError(f"unlock of a state that is not locked (node {node.id})")
        if node.mamba_lock == 1 and node.mamba is not None:
            self.mamba_evictable += 1
            self.mamba_protected -= 1
        node.mamba_lock -= 1
        cur = node
        while cur is not self.root:
            if cur.full_lock <= 0:
                raise AllocatorError(f"unlock of a path that is not locked (node {cur.id})")
            if cur.full_lock == 1:
                self.full_evictable += len(cur.full)
                self.full_protected -= len(cur.full)
            cur.full_lock -= 1
            cur = cur.parent

    # ----- reading -----------------------------------------------------------------------
    def nodes(self) -> Iterator[MambaNode]:
        """Every node but the root, parents before children."""
        return descendants(self.root)

    def path_full(self, node: MambaNode) -> np.ndarray:
        """The full slots from the root to ``node``."""
        return path_full(node, self.root)

    def held_slots(self) -> list[int]:
        """The state slots the tree holds, least recently used first."""
        return [n.mamba for n in self._lru.values()]

    def check_invariants(self) -> None:
        """Raise AllocatorError unless the ledgers add up, the state LRU list holds exactly
        the nodes with a state, no state slot is held twice or free, and no KV slot is
        held twice."""
        fe = fp = me = mp = 0
        with_state, slots, kv = set(), [], []
        for n in self.nodes():
            if len(n.full) != len(n.key) or len(n.key) % self.page_size or not len(n.key):
                raise AllocatorError(f"node {n.id}: {len(n.full)} KV slots for a key of "
                                     f"{len(n.key)} tokens")
            if n.full_lock:
                fp += len(n.full)
            else:
                fe += len(n.full)
            kv.append(n.full)
            if n.mamba is not None:
                with_state.add(n.id)
                slots.append(n.mamba)
                if n.mamba_lock:
                    mp += 1
                else:
                    me += 1
                if not self.mamba_allocator.is_allocated(n.mamba):
                    raise AllocatorError(f"node {n.id} holds state slot {n.mamba}, which is free")
        got = (self.full_evictable, self.full_protected, self.mamba_evictable, self.mamba_protected)
        if got != (fe, fp, me, mp):
            raise AllocatorError(f"ledgers {got} != counted {(fe, fp, me, mp)}")
        if set(self._lru) != with_state:
            raise AllocatorError("the state LRU list and the nodes holding a state differ")
        if len(set(slots)) != len(slots):
            raise AllocatorError("a state slot is held by two nodes")
        flat = np.concatenate(kv) if kv else EMPTY_SLOTS
        if len(np.unique(flat)) != len(flat):
            raise AllocatorError("a KV slot is held by two nodes")
