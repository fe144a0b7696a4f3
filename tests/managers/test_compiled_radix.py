"""The compiled core's radix tree (arrays) against :class:`~pagedkv.mem_cache.radix_tree.
RadixTree` (the reference): the same operations give the same results, the same nodes (ids,
parents, keys, slots, locks, access times, children in order), sizes and eviction order.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.managers.compiled_core import numba_available
from pagedkv.mem_cache import radix_eviction
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pagedkv.mem_cache.radix_tree import RadixTree

pytestmark = pytest.mark.skipif(not numba_available(), reason="numba is not installed")

POOL = 64


class Pair:
    """The reference tree and the array tree, driven together; every result compared."""

    def __init__(self, p: int, free_order: str, cap: int = 80, buf: int = 96) -> None:
        from pagedkv.managers.compiled_core import radix as rx

        self.rx, self.p = rx, p
        alloc = TokenToKVPoolAllocator(POOL) if p == 1 else PagedTokenToKVPoolAllocator(POOL, p)
        self.ref = RadixTree(alloc, free_order=free_order)
        self.t = rx.new_tree(p, cap, buf)
        self.out = np.zeros(POOL + 8, dtype=np.int64)
        self.ends = np.zeros(POOL + 8, dtype=np.int64)
        self.locked: list[int] = []  # node ids locked, in order

    def row(self, node_id: int) -> int:
        rows = np.flatnonzero(self.t.nd[:self.t.T[self.rx.T_ROWS], self.rx.N_ID] == node_id)
        rows = [r for r in rows.tolist() if r == 0 or self.t.nd[r, self.rx.N_PARENT] != -1]
        assert len(rows) == 1
        return rows[0]

    def node(self, node_id: int):
        found = [n for n in self.ref.nodes() if n.id == node_id]
        assert len(found) == 1
        return found[0]

    def insert(self, key: list[int]) -> None:
        n = len(key) // self.p * self.p
        slots = self.ref.allocator.alloc(n)
        if slots is None:
            return
        had, node, overlaps = self.ref.insert(np.array(key, dtype=np.int64)[:n], slots.numpy())
        self.ref.allocator.free(slots[:had])
        k = np.array(key, dtype=np.int64)
        done, row, m = self.rx.insert(self.t, k, slots.numpy().astype(np.int64), len(key))
        assert (done, self.t.nd[row, self.rx.N_ID]) == (had, node.id)
        assert [tuple(o) for o in self.t.ov[:m].tolist()] == overlaps

    def match(self, key: list[int]) -> None:
        result = self.ref.match_prefix(key)
        row, n = self.rx.match_prefix(self.t, np.array(key, dtype=np.int64), len(key))
        assert self.t.nd[row, self.rx.N_ID] == result.last_device_node.id
        assert self.t.slots[:n].tolist() == result.device_indices.tolist()

    def lock(self, key: list[int]) -> None:
        result = self.ref.match_prefix(key)
        row, _ = self.rx.match_prefix(self.t, np.array(key, dtype=np.int64), len(key))
        self.ref.inc_lock_ref(result.last_device_node)
        self.rx.inc_lock_ref(self.t, row)
        self.locked.append(result.last_device_node.id)

    def unlock(self, i: int) -> None:
        if self.locked:
            node_id = self.locked.pop(i % len(self.locked))
            # a split above keeps the lock on the lower node: the same id in both trees
            self.ref.dec_lock_ref(self.node(node_id))
            assert self.rx.dec_lock_ref(self.t, self.row(node_id))

    def held_prefix(self, key: list[int], depth: int) -> None:
        result = self.ref.match_prefix(key)
        row, n = self.rx.match_prefix(self.t, np.array(key, dtype=np.int64), len(key))
        d = min(depth * self.p, n)
        self.ref.insert_held_prefix(result.last_device_node, d)
        self.rx.insert_held_prefix(self.t, row, d)
        m = self.rx.path_indices(self.t, row, self.out)
        assert self.out[:m].tolist() == self.ref.path_indices(result.last_device_node).tolist()

    def evict(self, tokens: int, until_free: bool) -> None:
        leaves: list[list[int]] = []
        real = radix_eviction.evict_leaf

        def spy(tree, leaf, free=True):
            leaves.append(leaf.value.tolist())
            return real(tree, leaf, free)

        room = self.ref.allocator.available_size()
        with mock.patch.object(radix_eviction, "evict_leaf", spy):
            (self.ref.evict_for_alloc if until_free else self.ref.evict)(tokens)
        k = self.rx.evict(self.t, tokens, room, until_free, self.out, self.ends)
        starts = [0, *self.ends[:k - 1].tolist()] if k else []
        mine = [self.out[a:b].tolist() for a, b in zip(starts, self.ends[:k].tolist(), strict=True)]
        assert mine == leaves

    def same(self) -> None:
        rx, t = self.rx, self.t
        nd = t.nd
        ref = {}
        for n in self.ref.nodes():
            ref[n.id] = (None if n.parent is None else n.parent.id, n.key.tolist(), n.value.tolist(),
                         n.lock_ref, n.last_access_time, [c.id for c in n.children.values()])
        mine = {}
        for r in range(t.T[rx.T_ROWS]):
            if r and nd[r, rx.N_PARENT] == -1:
                continue
            s, m = nd[r, rx.N_START], nd[r, rx.N_LEN]
            kids, c = [], nd[r, rx.N_FIRST]
            while c != -1:
                kids.append(int(nd[c, rx.N_ID]))
                c = nd[c, rx.N_NEXT]
            parent = nd[r, rx.N_PARENT]
            mine[int(nd[r, rx.N_ID])] = (None if parent == -1 else int(nd[parent, rx.N_ID]),
                                         t.tok[s:s + m].tolist(), t.val[s:s + m].tolist(),
                                         int(nd[r, rx.N_LOCK]), int(nd[r, rx.N_TIME]), kids)
        assert mine == ref
        assert (t.T[rx.T_EVICTABLE], t.T[rx.T_PROTECTED], t.T[rx.T_NNODES]) == (
            self.ref.evictable_size(), self.ref.protected_size(), self.ref.num_nodes)
        assert t.T[rx.T_EVICTED] == self.ref.evicted_tokens


def test_hand_checked_inserts_matches_and_eviction() -> None:
    pair = Pair(1, "row")
    for key in ([1, 2, 3], [1, 2, 3, 4, 5], [1, 2, 4, 5, 6, 7], [8, 9, 10, 11, 12]):
        pair.insert(key)
    pair.match([1, 2, 4, 5, 9])
    pair.lock([1, 2, 3, 4])
    pair.same()
    pair.evict(6, until_free=False)
    pair.same()
    # 14 tokens cached; the lock protects (1, 2), (3), (4); eviction freed at least 6 of the rest
    T, rx = pair.t.T, pair.rx
    assert T[rx.T_PROTECTED] == 4 and T[rx.T_EVICTED] >= 6
    assert T[rx.T_EVICTABLE] == 14 - 4 - T[rx.T_EVICTED]


def test_full_buffers_are_compacted_and_rows_reused() -> None:
    """Inserting and evicting far more than the buffers and the child table hold (a small
    table, rebuilt whenever deleted entries fill half of it): the same tree throughout."""
    pair = Pair(2, "row", cap=40, buf=70)
    pair.t = pair.t._replace(ht=np.full(64, pair.rx.EMPTY, dtype=np.int64))
    rng = np.random.default_rng(0)
    for i in range(200):
        pair.insert(rng.integers(0, 4, size=int(rng.integers(2, 20))).tolist())
        if i % 3 == 0:
            pair.evict(int(rng.integers(1, 40)), until_free=bool(i % 2))
        pair.same()
    assert pair.t.T[pair.rx.T_IDS] > 40  # rows were reused


OPS = st.one_of(
    st.tuples(st.just("insert"), st.lists(st.integers(0, 3), min_size=0, max_size=24)),
    st.tuples(st.just("match"), st.lists(st.integers(0, 3), min_size=0, max_size=24)),
    st.tuples(st.just("lock"), st.lists(st.integers(0, 3), min_size=0, max_size=24)),
    st.tuples(st.just("unlock"), st.integers(0, 10)),
    st.tuples(st.just("held"), st.lists(st.integers(0, 3), min_size=0, max_size=24),
              st.integers(0, 12)),
    st.tuples(st.just("evict"), st.integers(0, 70), st.booleans()),
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from((1, 2, 4)), st.sampled_from(("row", "sorted")), st.lists(OPS, max_size=40))
def test_the_array_tree_matches_the_reference(p: int, free_order: str, ops: list[tuple]) -> None:
    pair = Pair(p, free_order)
    for op, *args in ops:
        if op == "insert":
            pair.insert(args[0])
        elif op == "match":
            pair.match(args[0])
        elif op == "lock":
            pair.lock(args[0])
        elif op == "unlock":
            pair.unlock(args[0])
        elif op == "held":
            pair.held_prefix(args[0], args[1])
        else:
            pair.evict(args[0], args[1])
        pair.same()
