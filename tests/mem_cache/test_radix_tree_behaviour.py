"""RadixTree (the radix cache's core): hand-checked trees, splits, locks, LRU eviction,
pages, and a reference model."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv.errors import AllocatorError, ConfigError
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pagedkv.mem_cache.radix_tree import RadixTree


def cache(size: int = 64, p: int = 1) -> RadixTree:
    alloc = TokenToKVPoolAllocator(size) if p == 1 else PagedTokenToKVPoolAllocator(size, p)
    return RadixTree(alloc)


def put(tree: RadixTree, key: list[int]) -> list[int]:
    """Allocate slots for ``key``, insert it, free what the tree already had; return the slots."""
    slots = tree.allocator.alloc(len(key), strict=True).tolist()
    had, _, _ = tree.insert(key, slots)
    tree.allocator.free(slots[:had])
    return slots


def edges(tree: RadixTree) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
    """Each node's key mapped to its children's keys (root's key is ())."""
    return {tuple(n.key.tolist()): [tuple(c.key.tolist()) for c in n.children.values()]
            for n in tree.nodes()}


def test_inserts_split_edges_into_the_expected_tree():
    tree = cache()
    for key in ([1, 2, 3], [1, 2, 3, 4, 5], [1, 2, 4, 5, 6, 7], [8, 9, 10, 11, 12]):
        put(tree, key)
    assert edges(tree) == {
        (): [(1, 2), (8, 9, 10, 11, 12)],
        (1, 2): [(3,), (4, 5, 6, 7)],
        (3,): [(4, 5)],
        (4, 5): [],
        (4, 5, 6, 7): [],
        (8, 9, 10, 11, 12): [],
    }
    assert tree.evictable_size() == 2 + 1 + 2 + 4 + 5 and tree.protected_size() == 0
    tree.check_invariants()


def test_insert_returns_the_length_already_cached():
    tree = cache()
    assert tree.insert([1, 2, 3], tree.allocator.alloc(3).tolist())[0] == 0
    slots = tree.allocator.alloc(5).tolist()
    assert tree.insert([1, 2, 3, 4, 5], slots)[0] == 3
    tree.allocator.free(slots[:3])
    tree.check_invariants()


def test_match_returns_first_inserted_slots_and_splits_inside_a_node():
    tree = cache()
    first = put(tree, [5, 6, 7, 8])
    match = tree.match_prefix([5, 6, 9])
    assert match.device_indices.tolist() == first[:2]
    assert match.last_device_node.key.tolist() == [5, 6]
    assert edges(tree)[(5, 6)] == [(7, 8)]
    assert tree.match_prefix([9]).device_indices.tolist() == []
    assert tree.match_prefix([9]).last_device_node is tree.root_node
    tree.check_invariants()


def test_locks_move_tokens_between_evictable_and_protected():
    tree = cache()
    put(tree, [1, 2, 3, 4])
    node = tree.match_prefix([1, 2]).last_device_node  # splits (1,2) | (3,4)
    tree.inc_lock_ref(node)
    assert (tree.protected_size(), tree.evictable_size()) == (2, 2)
    tree.inc_lock_ref(node)
    tree.dec_lock_ref(node)
    assert (tree.protected_size(), tree.evictable_size()) == (2, 2)
    tree.dec_lock_ref(node)
    assert (tree.protected_size(), tree.evictable_size()) == (0, 4)
    with pytest.raises(AllocatorError, match="not locked"):
        tree.dec_lock_ref(node)
    tree.check_invariants()


def test_eviction_is_lru_over_leaves_and_skips_locked_paths():
    tree = cache()
    put(tree, [1, 2, 3])  # touched first
    put(tree, [4, 5])
    put(tree, [6, 7, 8, 9])
    tree.match_prefix([1, 2, 3])  # now [4, 5] is the least recently used
    assert tree.evict(1) == 2
    assert set(edges(tree)[()]) == {(1, 2, 3), (6, 7, 8, 9)}
    locked = tree.match_prefix([6, 7, 8, 9]).last_device_node
    tree.inc_lock_ref(locked)
    assert tree.evict(100) == 3  # only [1, 2, 3] can go
    assert edges(tree)[()] == [(6, 7, 8, 9)] and tree.evictable_size() == 0
    assert tree.allocator.available_size() == 64 - 4
    tree.check_invariants()


def test_a_parent_left_without_children_is_evicted_next():
    tree = cache()
    put(tree, [1, 2, 3])
    put(tree, [1, 2, 4])  # (1,2) -> (3,), (4,)
    assert tree.evict(4) == 4  # both leaves, then their parent
    assert edges(tree) == {(): []}
    assert tree.allocator.available_size() == 64


def test_pages_cut_keys_and_match_a_page_at_a_time():
    tree = cache(size=64, p=4)
    slots = tree.allocator.alloc(8).tolist() + tree.allocator.alloc(4).tolist()
    key = list(range(100, 110))  # 10 tokens: two whole pages, 2 tokens cut off
    assert tree.insert(key, slots[:10])[0] == 0
    assert tree.total_size() == 8
    tree.allocator.free(slots[8:])  # the partial page is the caller's to free
    # the same first page, then a change inside the second page: only one page matches
    match = tree.match_prefix([100, 101, 102, 103, 104, 105, 999, 107])
    assert match.device_indices.tolist() == slots[:4]
    assert edges(tree)[()] == [(100, 101, 102, 103)]
    assert tree.match_prefix([100, 101, 102]).device_indices.tolist() == []
    tree.check_invariants()


def test_bad_input_is_named():
    tree = cache()
    with pytest.raises(ConfigError, match=r"len\(value\)=2 is invalid"):
        tree.insert([1, 2, 3], [5, 6])
    with pytest.raises(ConfigError, match="num_tokens=-1"):
        tree.evict(-1)
    with pytest.raises(ConfigError, match=r"num_tokens=1\.5"):
        tree.evict(1.5)
    with pytest.raises(ConfigError, match=r"key='abc'.*token ids"):
        tree.match_prefix("abc")


def test_check_invariants_catches_a_wrong_counter():
    tree = cache()
    put(tree, [1, 2])
    tree.evictable_size_ += 1
    with pytest.raises(AllocatorError, match="size counters"):
        tree.check_invariants()


keys = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=keys, probes=keys, p=st.sampled_from([1, 2, 4]))
def test_matches_agree_with_a_dictionary_of_prefixes(keys, probes, p):
    """Without eviction, page j of a match holds the slots of the first insert that reached
    that prefix of whole pages; a dictionary of page prefixes says the same."""
    tree = cache(size=512, p=p)
    first: dict[tuple[int, ...], list[int]] = {}
    for key in keys:
        key = key[:len(key) // p * p]
        slots = put(tree, key) if key else []
        for j in range(0, len(key), p):
            first.setdefault(tuple(key[:j + p]), slots[j:j + p])
        tree.check_invariants()
    for probe in probes:
        want: list[int] = []
        while len(want) + p <= len(probe) and tuple(probe[:len(want) + p]) in first:
            want += first[tuple(probe[:len(want) + p])]
        assert tree.match_prefix(probe).device_indices.tolist() == want
        tree.check_invariants()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=keys, locks=st.lists(st.integers(0, 11), max_size=6), ask=st.integers(0, 80))
def test_eviction_frees_only_unlocked_slots_and_keeps_counts(keys, locks, ask):
    tree = cache(size=512)
    for key in keys:
        put(tree, key)
    matches = [tree.match_prefix(keys[i % len(keys)]) for i in locks]
    for m in matches:
        tree.inc_lock_ref(m.last_device_node)
    before_free, protected = tree.allocator.available_size(), tree.protected_size()
    freed = tree.evict(ask)
    # locks reach up to the root, so every unlocked node is evictable in time
    assert freed >= ask or tree.evictable_size() == 0
    assert tree.allocator.available_size() == before_free + freed
    assert tree.protected_size() == protected
    for i, m in zip(locks, matches, strict=True):  # every locked path is still there, whole
        again = tree.match_prefix(keys[i % len(keys)]).device_indices
        assert again.tolist()[:len(m.device_indices)] == m.device_indices.tolist()
    tree.check_invariants()
    for m in matches:
        tree.dec_lock_ref(m.last_device_node)
    tree.evict(10**6)
    assert tree.total_size() == 0 and tree.allocator.available_size() == 512
