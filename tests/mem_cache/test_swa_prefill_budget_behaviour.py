"""Admission budgets on a sliding-window hybrid: hand-checked charges and SGLang 0.5.23's
answers on a worked pass (checked against its own ``SWAPrefillBudget`` in
tests/reference/test_swa_prefill_budget.py)."""

from __future__ import annotations

import pytest

from pagedkv.errors import ConfigError
from pagedkv.mem_cache.allocator import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.swa_prefill_budget import SWAPrefillBudget, estimate_swa_kv_tokens
from pagedkv.mem_cache.swa_radix_cache import SWARadixCache


def test_the_swa_charge_is_what_the_window_holds_at_once() -> None:
    # no window: everything, plus a page
    assert estimate_swa_kv_tokens(100, 20, sliding_window_size=None, page_size=4) == 124
    # a window of 8: the 92 tokens it leaves behind, then at most a window, then a page
    assert estimate_swa_kv_tokens(100, 20, sliding_window_size=8, page_size=4) == 92 + 8 + 4
    # a chunk of 30 leaves 22 behind in this pass
    assert estimate_swa_kv_tokens(100, 20, sliding_window_size=8, page_size=4,
                                  allocation_limit=30) == 22 + 8 + 4
    # short: prompt and output inside the window
    assert estimate_swa_kv_tokens(3, 2, sliding_window_size=8, page_size=4) == 5 + 4


def test_sglang_worked_pass_page_4() -> None:
    """Empty pools of 40 full and 8 SWA pages, window 8 (page 4): SGLang 0.5.23's answers."""
    alloc = SWATokenToKVPoolAllocator(160, 32, 4)
    b = SWAPrefillBudget(alloc, SWARadixCache(alloc, 8))
    assert (b.remaining_total, b.remaining_current, b.remaining_swa) == (160, 160, 32)
    # 80 tokens charge 72 + 8 + 4 = 84 SWA slots >= the pool's 32: chunked to 32 - 8 = 24
    assert b.check_prefill(extend_input_len=80, total_tokens=84, max_new_tokens=4,
                           chunk_limit=256) == (True, 24)
    assert b.check_prefill(extend_input_len=80, total_tokens=84, max_new_tokens=4,
                           chunk_limit=None) == (False, None)
    assert b.check_prefill(extend_input_len=4, total_tokens=8, max_new_tokens=4,
                           chunk_limit=256) == (True, 256)
    b.reserve(24, 4)  # 24 + 4 + 4 full, 16 + 8 + 4 SWA
    assert (b.remaining_total, b.remaining_current, b.remaining_swa) == (128, 132, 4)
    assert b.check_prefill(extend_input_len=4, total_tokens=8, max_new_tokens=4,
                           chunk_limit=256) == (False, None)  # waits: 12 SWA slots > 4
    assert b.available_chunk_tokens(256) is None
    assert b.has_capacity()
    assert not b.can_allocate_prefill(paged_input=4, extend_input_len=4, max_new_tokens=4,
                                      chunk_limit=None)
    with pytest.raises(ConfigError, match="chunk_limit"):
        b.available_chunk_tokens(-1)


def test_evictable_tree_slots_count_as_room() -> None:
    alloc = SWATokenToKVPoolAllocator(160, 32, 4)
    tree = SWARadixCache(alloc, 8)
    slots = alloc.alloc_extend([0], [16], [-1], 16)
    tree.insert(list(range(16)), slots)
    b = SWAPrefillBudget(alloc, tree)
    assert (b.remaining_total, b.remaining_swa) == (160, 32)  # 144 + 16 free-or-evictable
    tree.lock(tree.match_prefix(list(range(16)))[2])
    assert (b.remaining_total, b.remaining_swa) == (144, 24)  # window 8 locked: 8 SWA stay
