"""How freed pages go back: ``free`` (sorted pages), ``free_page_ids`` / ``free_segment``
(row order, 0.5.23's cache paths) and free groups, by hand."""

from __future__ import annotations

import pytest

from pagedkv.errors import AllocatorError
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator


def paged(pages: int = 8, p: int = 4) -> PagedTokenToKVPoolAllocator:
    return PagedTokenToKVPoolAllocator(pages * p, p)


def test_free_sorts_pages_and_free_segment_keeps_row_order() -> None:
    a = paged()
    a.free_pages = [5, 2, 7, 1, 3, 4, 6, 8]           # a shuffled free list
    row = a.alloc_extend([0], [12], [-1], 12).numpy()  # 3 pages: 5, 2, 7 in row order
    assert (row[::4] // 4).tolist() == [5, 2, 7]
    b = paged()
    b.free_pages = [5, 2, 7, 1, 3, 4, 6, 8]
    row_b = b.alloc_extend([0], [12], [-1], 12).numpy()
    a.free(row)                   # sorted pages to the front
    b.free_segment(row_b)         # row order to the front
    assert a.free_pages.tolist()[:3] == [2, 5, 7]
    assert b.free_pages.tolist()[:3] == [5, 2, 7]
    a.check_invariants()
    b.check_invariants()


def test_free_group_releases_slot_frees_then_page_frees() -> None:
    a = paged()
    out = a.alloc_extend([0, 0, 0], [4, 4, 4], [-1, -1, -1], 12).numpy()  # pages 1, 2, 3
    a.free_group_begin()
    a.free_page_ids([3])
    a.free(out[4:8])  # page 2, as slots
    a.free_page_ids([1])
    assert a.available_size() == 5 * 4  # nothing released yet
    a.free_group_end()
    # the slot frees as one sorted block, then the page-id block in call order in front
    assert a.free_pages.tolist()[:3] == [3, 1, 2]
    a.check_invariants()
    with pytest.raises(AllocatorError, match="without free_group_begin"):
        a.free_group_end()


def test_page_size_1_appends_every_free_in_order() -> None:
    a = TokenToKVPoolAllocator(8)
    out = a.alloc(6).numpy()
    a.free_group_begin()
    a.free_segment(out[3:5])
    a.free(out[:2])
    a.free_group_end()
    # SGLang 0.5.23's token allocator frees page ids (and segments) as plain frees: the group
    # releases in call order (held against SGLang by tests/reference)
    assert a.free_pages.tolist() == [7, 8, 4, 5, 1, 2]
    a.free_page_ids([3])
    assert a.free_pages.tolist()[-1] == 3


def test_page_frees_check_their_pages() -> None:
    a = paged()
    a.alloc_extend([0], [4], [-1], 4)
    with pytest.raises(AllocatorError, match="hold no token"):
        a.free_page_ids([2])
    with pytest.raises(AllocatorError, match="twice"):
        a.free_page_ids([1, 1])
    with pytest.raises(AllocatorError, match=r"outside 1\.\.8"):
        a.free_page_ids([9])
    with pytest.raises(AllocatorError, match="nested"):
        a.free_group_begin()
        a.free_group_begin()
