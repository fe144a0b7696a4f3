"""The window release of a running request and its row free: SGLang 0.5.23's answers on a
worked example, invariants over random growth and releases, and misuse refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.errors import AllocatorError, ConfigError
from pagedkv.mem_cache import swa_window as W
from pagedkv.mem_cache.allocator import SWATokenToKVPoolAllocator


def grow(alloc, row: list[int], n: int) -> bool:
    out = alloc.alloc_extend([len(row)], [len(row) + n], [row[-1] if row else -1], n)
    if out is not None:
        row += out.tolist()
    return out is not None


def test_sglang_worked_example_decode_past_the_window() -> None:
    """SGLang 0.5.23's ``free_swa_out_of_window_slots`` run on this CPU: page 4, window 5,
    prefix sharing on, a request on one tree-owned page that prefilled 13 tokens decodes ten
    steps, releasing after each: the cursor moves a page at a time, 8 tokens
    (``ceil(max(5, 4) / 4) * 4``) behind the decode position; the finish frees ``[4, 16)``
    full side only and the rest in both pools."""
    p, alloc = 4, SWATokenToKVPoolAllocator(120, 48, 4)
    row: list[int] = []
    grow(alloc, row, p)  # the tree-owned page
    grow(alloc, row, 3 * p + 1)
    cursors = []
    cursor = 0
    for _ in range(10):
        grow(alloc, row, 1)
        cursor = W.free_swa_out_of_window_slots(row, len(row), cursor, cache_protected_len=p,
                                                sliding_window_size=5, allocator=alloc)
        cursors.append(cursor)
    assert cursors == [8, 8, 12, 12, 12, 12, 16, 16, 16, 16]
    assert (alloc.full_available_size(), alloc.swa_available_size()) == (92, 32)
    half = p + (len(row) - p) // 2
    W.free_kv_row(alloc, row, [(p, half), (half, len(row))], swa_evicted_seqlen=cursor,
                  swa_dead_lo=W.swa_dead_lo(p, p))
    assert (alloc.full_available_size(), alloc.swa_available_size()) == (116, 44)
    assert alloc.swa_attn_allocator.free_pages.tolist()[:4] == [5, 3, 4, 2]
    assert alloc.full_attn_allocator.free_pages.tolist()[:5] == [5, 6, 7, 2, 3]


def test_the_interval_and_the_floor_decide_when_and_from_where() -> None:
    assert W.swa_eviction_due(seq_len=12, window=8, evicted_seqlen=2, interval=1)
    assert not W.swa_eviction_due(seq_len=12, window=8, evicted_seqlen=2, interval=2)
    assert W.swa_dead_lo(8, 4) == 8
    assert W.swa_dead_lo(8, 4, swa_evict_floor=9) == 12  # the floor, rounded up to a page
    assert W.swa_dead_lo(8, 1, swa_evict_floor=9) == 9
    assert W.coalesce_ranges([(0, 3), (3, 8), (9, 10)]) == [(0, 8), (9, 10)]


@settings(max_examples=400, deadline=None)
@given(p=st.sampled_from([1, 2, 4]), window=st.integers(1, 12), cpl_pages=st.integers(0, 2),
       ops=st.lists(st.tuples(st.integers(1, 9), st.booleans(), st.integers(1, 3)), max_size=25))
def test_released_part_is_exactly_cursor_bounded(p, window, cpl_pages, ops) -> None:
    """After every release: the cursor never moves back, sits on a page boundary once it
    moved past the tree-owned prefix, stays ``window`` behind the position; exactly the tokens
    ``[cache_protected_len, cursor)`` have no SWA slot; the SWA pool holds the rest. Freeing
    the row then leaves only the tree-owned prefix in either pool."""
    alloc = SWATokenToKVPoolAllocator(80 * p, 80 * p, p)
    row: list[int] = []
    cpl = cpl_pages * p
    if cpl:
        grow(alloc, row, cpl)
    cursor = 0
    for n, sharing, interval in ops:
        grow(alloc, row, n)
        before = cursor
        cursor = W.free_swa_out_of_window_slots(row, len(row), cursor, cache_protected_len=cpl,
                                                sliding_window_size=window, allocator=alloc,
                                                supports_prefix_sharing=sharing,
                                                eviction_interval=interval)
        assert cursor >= before
        if cursor > cpl:
            assert cursor % p == 0 and cursor <= len(row) - window
        peers = alloc.translate_loc_from_full_to_swa(row).numpy()
        lo = min(cpl, cursor) if cursor else 0
        assert (peers[lo:cursor] == 0).all() and (peers[cursor:] > 0).all() and (peers[:lo] > 0).all()
        live_pages = -(-len(row) // p) - (cursor - lo) // p
        assert alloc.swa_available_size() == alloc.size_swa - live_pages * p
        alloc.check_invariants()
    W.free_kv_row(alloc, row, [(cpl, len(row))], swa_evicted_seqlen=cursor,
                  swa_dead_lo=W.swa_dead_lo(cpl, p))
    alloc.check_invariants()
    assert alloc.full_available_size() == alloc.size_full - cpl
    assert alloc.swa_available_size() == alloc.size_swa - cpl


def test_misuse_is_refused() -> None:
    alloc = SWATokenToKVPoolAllocator(64, 32, 4)
    row: list[int] = []
    grow(alloc, row, 16)
    with pytest.raises(ConfigError, match="cache_protected_len"):
        W.free_swa_out_of_window_slots(row, 16, 0, cache_protected_len=2, sliding_window_size=4,
                                       allocator=alloc)
    with pytest.raises(ConfigError, match="sliding_window_size"):
        W.free_swa_out_of_window_slots(row, 16, 0, cache_protected_len=0, sliding_window_size=0,
                                       allocator=alloc)
    cursor = W.free_swa_out_of_window_slots(row, 16, 0, cache_protected_len=0,
                                            sliding_window_size=4, allocator=alloc,
                                            supports_prefix_sharing=False)
    assert cursor == 12
    with pytest.raises(AllocatorError, match="splits a page"):
        W.free_kv_row_segments(alloc, [(row[:16], 0)], swa_evicted_seqlen=10)
    with pytest.raises(AllocatorError, match="shares a page"):
        W.free_kv_row_segments(alloc, [(row[:6], 0), (row[6:], 6)], swa_evicted_seqlen=0)
