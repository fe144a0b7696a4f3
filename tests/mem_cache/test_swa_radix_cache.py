"""The sliding-window radix tree: invariants over random inserts, matches, locks and
evictions, SGLang 0.5.23's answers on worked examples, and misuse refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.errors import AllocatorError, ConfigError
from pagedkv.mem_cache.allocator import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.swa_radix_cache import SWARadixCache

T = list(range(100, 124))


def make(p: int, window: int, full_pages: int = 40, swa_pages: int = 20):
    alloc = SWATokenToKVPoolAllocator(full_pages * p, swa_pages * p, p)
    return alloc, SWARadixCache(alloc, window)


def put(alloc, tree, tokens, released_pages=0) -> int | None:
    """As a finished request: slots for whole pages, its first pages' SWA released, insert."""
    p = alloc.page_size
    n = len(tokens) // p * p
    slots = alloc.alloc_extend([0], [n], [-1], n)
    if slots is None:
        return None
    evicted = min(released_pages * p, n)
    alloc.free_swa_segment(slots[:evicted], 0)
    return tree.insert(tokens[:n], slots, evicted)


def test_sglang_worked_example_window_gates_the_match() -> None:
    """SGLang 0.5.23 (``UnifiedRadixCache``, FULL + SWA, page 4, window 6), run on this CPU:
    16 tokens make a leaf capped at 8 and its parent; one SWA token asked for tombstones the
    least recent (the parent, 8 SWA slots, pages 1 and 2 back in row order); a match inside
    or just past the tombstone then stops at 0, the whole key still matches."""
    alloc, tree = make(4, 6)
    assert put(alloc, tree, T[:16]) == 0
    assert (tree.full_evictable_size(), tree.swa_evictable_size()) == (16, 16)
    assert tree.evict(0, 1) == (0, 8)
    assert (tree.full_evictable_size(), tree.swa_evictable_size()) == (16, 8)
    assert alloc.swa_attn_allocator.free_pages.tolist()[:3] == [1, 2, 5]
    assert tree.match_prefix(T[:8])[0] == 0
    assert tree.match_prefix(T[:12])[0] == 0
    n, slots, _ = tree.match_prefix([*T[:16], 7])
    assert n == 16 and slots.tolist() == list(range(4, 20))


def test_sglang_worked_example_revival_locked_and_not() -> None:
    """SGLang 0.5.23, page 4, window 5, 24 tokens: the SWA walk tombstones the parent and
    deletes the leaf; the same key revives the parent with the incoming slots (old full pages
    1-4 freed, in row order); locked, a tombstone keeps its full slots."""
    alloc, tree = make(4, 5)
    put(alloc, tree, T)
    assert tree.evict(0, 100) == (8, 24)
    assert put(alloc, tree, T) == 16
    assert alloc.full_attn_allocator.free_pages.tolist()[:6] == [1, 2, 3, 4, 11, 12]
    lock = tree.lock(tree.match_prefix(T)[2])
    assert (tree.full_protected_size(), tree.swa_evictable_size(), tree.swa_protected_size()) == (24, 16, 8)
    assert tree.evict(0, 100) == (0, 16)
    assert put(alloc, tree, T, released_pages=2) == 24
    assert tree.match_prefix(T)[1].tolist() == list(range(20, 44))
    tree.unlock(lock)
    assert tree.evict(100, 0) == (24, 16)
    assert alloc.full_available_size() == 160 and alloc.swa_available_size() == 80


def test_sglang_worked_example_decode_check_evicts_each_pools_shortfall() -> None:
    """SGLang 0.5.23 (page 4, window 6, pools of 10 full and 5 SWA pages): 16 cached tokens
    leave 24 full and 4 SWA slots free; a decode needing 8 is short of SWA only, and one
    inner node (8 SWA slots, pages 1 and 2) is tombstoned; one needing 120 empties the tree
    and still fails."""
    alloc, tree = make(4, 6, 10, 5)
    put(alloc, tree, T[:16])
    assert (alloc.full_available_size(), alloc.swa_available_size()) == (24, 4)
    assert alloc.check_decode_capacity(tree, 8)
    assert (alloc.full_available_size(), alloc.swa_available_size()) == (24, 12)
    assert alloc.swa_attn_allocator.free_pages.tolist() == [1, 2, 5]
    assert (tree.full_evictable_size(), tree.swa_evictable_size()) == (16, 8)
    assert not alloc.check_decode_capacity(tree, 120)
    assert (alloc.full_available_size(), alloc.swa_available_size()) == (40, 20)
    assert not list(tree.nodes())
    assert alloc.check_decode_capacity(None, 20) and not alloc.check_decode_capacity(None, 21)


@pytest.mark.parametrize("released, swa_evictable, matched", [(0, 16, 16), (1, 12, 8)])
def test_sglang_worked_example_next_checkpoint(released, swa_evictable, matched) -> None:
    """SGLang 0.5.23 (page 4, window 6): a request checkpoints 8 tokens, computes 8 more and
    checkpoints again with ``prev_prefix_len=8``: nothing of its first 8 is freed. With its
    first new page window-released, that page is a tombstone and a match of all 16 stops at
    8 (only 4 live tokens follow the tombstone)."""
    alloc, tree = make(4, 6)
    first = alloc.alloc_extend([0], [8], [-1], 8)
    assert tree.insert_node(T[:8], first)[0] == 0
    row = tree.path_full(tree.insert_node(T[:8], first, prev_prefix_len=8)[1])
    assert row.tolist() == first.tolist()
    new = alloc.alloc_extend([8], [16], [int(row[-1])], 8)
    alloc.free_swa_segment(new[:4 * released], 8)
    evicted = 12 if released else 0
    assert tree.insert(T[:16], list(row) + new.tolist(), evicted, prev_prefix_len=8) == 8
    assert (tree.full_evictable_size(), tree.swa_evictable_size()) == (16, swa_evictable)
    assert (alloc.full_available_size(), alloc.swa_available_size()) == (144, 80 - swa_evictable)
    assert tree.match_prefix(T[:16])[0] == matched


op = st.tuples(st.sampled_from(["insert", "match", "lock", "unlock", "evict"]),
               st.integers(0, 5), st.integers(0, 30), st.integers(0, 40))


@settings(max_examples=300, deadline=None)
@given(p=st.sampled_from([1, 4]), window=st.integers(1, 12), ops=st.lists(op, max_size=25))
def test_ledgers_pools_and_tree_agree(p, window, ops) -> None:
    """After every step the tree's ledgers equal its nodes' slots, each node's SWA slots are
    its full slots' peers, the eviction queue's next leaf is the least recent one, the pools
    hold exactly the tree's slots, an eviction falls short only when nothing more is
    evictable; unlocking everything and evicting everything empties both pools."""
    alloc, tree = make(p, window, 30, 12)
    keys = [[(i * 7 + j) % 5 for j in range(40)] for i in range(3)]
    locks = []
    for kind, a, b, c in ops:
        key = [*keys[a % 3][:b + 1], a]
        if kind == "insert":
            put(alloc, tree, key, c % 6)
        elif kind == "match":
            n, slots, _ = tree.match_prefix(key)
            assert len(slots) == n and n % p == 0
        elif kind == "lock":
            locks.append(tree.lock(tree.match_prefix(key)[2]))
        elif kind == "unlock" and locks:
            tree.unlock(locks.pop(a % len(locks)))
        elif kind == "evict":
            full, swa = tree.evict(b, c)
            if full < b:  # short only when no unlocked leaf is left
                assert not any(tree._is_leaf(n) for n in tree.nodes())
            if swa < c:  # short only when every SWA slot left is locked
                assert all(n.swa_lock > 0 for n in tree.nodes() if n.swa is not None)
        tree.check_invariants()  # every leaf queued for eviction with its current time
        alloc.check_invariants()
        leaves = [n for n in tree.nodes() if tree._is_leaf(n)]
        if leaves:  # the queue's next pick is the least recent leaf a full scan finds
            assert len({n.time for n in leaves}) == len(leaves)
            assert min(e for e in tree._leaf_heap if tree._queued_leaf(e))[2] is min(
                leaves, key=lambda n: n.time)
        held = sum(len(n.full) for n in tree.nodes())
        assert alloc.full_available_size() == alloc.size_full - held
        live = sum(len(n.swa) for n in tree.nodes() if n.swa is not None)
        assert alloc.swa_available_size() == alloc.size_swa - live
    for lock in locks:
        tree.unlock(lock)
    tree.evict(10**6, 10**6)
    assert (alloc.full_available_size(), alloc.swa_available_size()) == (alloc.size_full, alloc.size_swa)
    assert not list(tree.nodes())


def test_misuse_is_refused() -> None:
    alloc, tree = make(4, 6)
    with pytest.raises(ConfigError, match="sliding_window_size"):
        SWARadixCache(alloc, 0)
    slots = alloc.alloc_extend([0], [8], [-1], 8)
    with pytest.raises(ConfigError, match="evicted_seqlen"):
        tree.insert(T[:8], slots, 2)
    with pytest.raises(ConfigError, match="len"):
        tree.insert(T[:8], slots[:4])
    with pytest.raises(ConfigError, match="swa_num_tokens"):
        tree.evict(0, -1)
    tree.insert(T[:8], slots)
    lock = tree.lock(tree.match_prefix(T[:8])[2])
    tree.unlock(lock)
    with pytest.raises(AllocatorError, match="not locked"):
        tree.unlock(lock)
    assert np.array_equal(tree.path_full(tree.match_prefix(T[:8])[2]), slots.numpy())
