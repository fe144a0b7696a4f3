"""The radix tree over state slots (a linear-attention hybrid's prefix cache): invariants over
random inserts, matches, locks and evictions with requests holding slots outside the tree,
SGLang 0.5.23's answers on worked examples, and misuse refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.errors import AllocatorError, ConfigError
from pagedkv.mem_cache.allocator import MambaSlotAllocator, make_allocator
from pagedkv.mem_cache.mamba_radix_cache import MambaRadixCache

T = list(range(100, 300))


def make(p: int, pages: int = 40, slots: int = 6):
    alloc, states = make_allocator(pages * p, p), MambaSlotAllocator(slots)
    return alloc, states, MambaRadixCache(alloc, states)


def put(alloc, states, tree, tokens) -> tuple[int, bool] | None:
    """As a finished request: KV for whole pages and a state slot, inserted; the slot freed
    when the tree kept its own state."""
    p = alloc.page_size
    n = len(tokens) // p * p
    kv, slot = alloc.alloc(n), states.alloc(1)
    if kv is None or slot is None or not n:
        if kv is not None:
            alloc.free(kv)
        if slot is not None:
            states.free(slot)
        return None
    had, exist, _ = tree.insert(tokens[:n], kv, slot[0])
    if exist:
        states.free(slot)
    return had, exist


def test_sglang_worked_example_a_state_ends_the_match() -> None:
    """SGLang 0.5.23 (``UnifiedRadixCache``, FULL + MAMBA, page 1), run on this CPU: 8 tokens
    with state slot 1; a match of 6 of them and a stranger splits the node and finds nothing
    (the upper half has no state) after a KV walk of 6; evicting one state deletes the lower
    half (2 KV slots and the state), the upper 6 stay."""
    alloc, states, tree = make(1, 64, 6)
    kv, slot = alloc.alloc(8), states.alloc(1)
    assert slot == [1]
    assert tree.insert(T[:8], kv, 1)[:2] == (0, False)
    m = tree.match_prefix([*T[:6], 99])
    assert (len(m.device_indices), tree.full_kv_hit_length, m.mamba_branching_seqlen) == (0, 6, None)
    assert (tree.mamba_evictable_size(), tree.full_evictable_size(), states.available_size()) == (1, 8, 5)
    assert tree.evict(0, 1) == (2, 1)
    assert (tree.mamba_evictable_size(), tree.full_evictable_size(), states.available_size(),
            alloc.available_size()) == (0, 6, 6, 58)
    assert states.free_slots == [2, 3, 4, 5, 6, 1]


def test_the_checkpoint_grid_is_the_chunk_or_the_page() -> None:
    assert make(1)[2].mamba_checkpoint_grid == 64
    assert make(16)[2].mamba_checkpoint_grid == 64
    assert make(128, 4)[2].mamba_checkpoint_grid == 128


def test_an_existing_state_is_kept_and_the_incoming_one_refused() -> None:
    alloc, states, tree = make(4)
    assert put(alloc, states, tree, T[:8]) == (0, False)
    assert put(alloc, states, tree, T[:8]) == (8, True)
    assert (tree.mamba_evictable_size(), states.available_size()) == (1, 5)
    assert (tree.full_evictable_size(), alloc.available_size()) == (8, 152)


def test_a_lock_pins_its_own_state_and_the_whole_paths_kv() -> None:
    """The inner node's state is evictable under a lock of the leaf; the leaf's is not."""
    alloc, states, tree = make(4)
    put(alloc, states, tree, T[:8])
    put(alloc, states, tree, T[:16])
    handle = tree.lock(tree.match_prefix(T[:16]).last_device_node)
    assert (tree.full_protected_size(), tree.mamba_protected_size(),
            tree.mamba_evictable_size()) == (16, 1, 1)
    assert tree.evict(100, 100) == (0, 1)
    assert len(tree.match_prefix(T[:8]).device_indices) == 0
    tree.unlock(handle)
    assert tree.evict(100, 100) == (16, 1)
    assert (alloc.available_size(), states.available_size()) == (160, 6)


ops = st.lists(st.tuples(st.sampled_from(["insert", "match", "lock", "unlock", "evict", "room",
                                          "hold", "give"]),
                         st.integers(0, 5), st.integers(0, 40), st.integers(0, 4)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(p=st.sampled_from([1, 4]), slots=st.integers(2, 8), ops=ops)
def test_slots_held_by_the_tree_and_requests_and_free_add_up(p, slots, ops) -> None:
    """After every step: state slots held by the tree + held by running requests + free =
    the pool's slots; KV slots held by the tree + free = the pool's; the ledgers equal the
    nodes' slots; a locked state is never evicted; an eviction falls short only when nothing
    more is evictable. Unlocking everything and evicting everything empties the tree."""
    alloc, states, tree = make(p, 30, slots)
    keys = [[(i * 7 + j) % 5 for j in range(48)] for i in range(3)]
    locks, held = [], []
    for kind, a, b, c in ops:
        key = [*keys[a % 3][:b + 1], a]
        if kind == "insert":
            put(alloc, states, tree, key)
        elif kind == "match":
            m = tree.match_prefix(key)
            assert len(m.device_indices) % p == 0
            assert len(m.device_indices) == 0 or m.last_device_node.mamba is not None
        elif kind == "lock":
            node = tree.match_prefix(key).last_device_node
            locks.append((tree.lock(node), node.mamba))
        elif kind == "unlock" and locks:
            tree.unlock(locks.pop(a % len(locks))[0])
        elif kind in ("evict", "room"):
            full, n = (tree.evict if kind == "evict" else tree.evict_for_alloc)(b, c)
            if kind == "evict" and full < b:  # short only when no unlocked leaf is left
                assert not any(tree.is_leaf(x) for x in tree.nodes())
            if kind == "evict" and n < c:  # short only when every state left is locked
                assert all(x.mamba_lock > 0 for x in tree.nodes() if x.mamba is not None)
        elif kind == "hold":
            held.extend(states.alloc(1) or [])
        elif kind == "give" and held:
            states.free(held)
            held.clear()
        tree.check_invariants()
        alloc.check_invariants()
        states.check_invariants()
        in_tree = tree.mamba_evictable_size() + tree.mamba_protected_size()
        assert in_tree + len(held) + states.available_size() == slots
        assert tree.full_evictable_size() + tree.full_protected_size() + \
            alloc.available_size() == 30 * p
        for handle, state in locks:  # a lock taken on a state keeps it
            if state is not None:
                assert handle.mamba == state
    for handle, _ in locks:
        tree.unlock(handle)
    tree.evict(10**6, 10**6)
    assert (alloc.available_size(), states.available_size() + len(held)) == (30 * p, slots)
    assert not list(tree.nodes())


def test_misuse_is_refused() -> None:
    alloc, states, tree = make(4)
    with pytest.raises(ConfigError, match="mamba_chunk_size"):
        MambaRadixCache(make_allocator(96, 48), states)
    with pytest.raises(ConfigError, match="mamba_chunk_size"):
        MambaRadixCache(alloc, states, mamba_chunk_size=0)
    with pytest.raises(ConfigError, match="mamba_value"):
        tree.insert(T[:4], alloc.alloc(4), 3)  # slot 3 is free
    slot = states.alloc(1)[0]
    with pytest.raises(ConfigError, match="len\\(value\\)"):
        tree.insert(T[:8], [1, 2, 3, 4], slot)
    with pytest.raises(ConfigError, match="prev_prefix_len"):
        tree.insert(T[:4], [4, 5, 6, 7], slot, prev_prefix_len=-1)
    with pytest.raises(ConfigError, match="mamba_num"):
        tree.evict(0, -1)
    with pytest.raises(ConfigError, match="key"):
        tree.match_prefix("abc")
    with pytest.raises(AllocatorError, match="not locked"):
        tree.unlock(tree.insert(T[:4], alloc.alloc(4), slot)[2])
