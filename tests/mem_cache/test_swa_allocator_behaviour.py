"""The sliding-window allocator: invariants over random extend/decode/window/free sequences,
SGLang 0.5.23's answers on a worked example, and misuse refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.errors import AllocatorError, ConfigError
from pagedkv.mem_cache.allocator import SWATokenToKVPoolAllocator


class Rows:
    """Requests' rows over one allocator, the way the scheduler and its cache call it."""

    def __init__(self, p: int, full_pages: int, swa_pages: int) -> None:
        self.p = p
        self.a = SWATokenToKVPoolAllocator(full_pages * p, swa_pages * p, p)
        self.rows: list[list[int]] = []
        self.cursor: list[int] = []  # end of each row's window-released part

    def extend(self, i: int | None, n: int) -> bool:
        row = [] if i is None else self.rows[i]
        out = self.a.alloc_extend([len(row)], [len(row) + n], [row[-1] if row else -1], n)
        if out is None:
            return False
        if i is None:
            self.rows.append(out.tolist())
            self.cursor.append(0)
        else:
            row += out.tolist()
        return True

    def decode(self, i: int) -> bool:
        row = self.rows[i]
        out = self.a.alloc_decode([len(row) + 1], [row[-1]])
        if out is not None:
            row.append(int(out[0]))
        return out is not None

    def window(self, i: int, keep: int) -> None:
        row, lo = self.rows[i], self.cursor[i]
        hi = max(lo, (len(row) - keep) // self.p * self.p)
        if hi > lo:
            self.a.free_swa_segment(row[lo:hi], lo)
            self.cursor[i] = hi

    def release(self, i: int) -> None:
        row, ev = self.rows.pop(i), self.cursor.pop(i)
        self.a.free_full_segment(row[:ev], 0)
        self.a.free_segment(row[ev:], ev)

    def check(self) -> None:
        a, p = self.a, self.p
        a.check_invariants()
        assert a.available_size() == min(a.full_available_size(), a.swa_available_size())
        pages = sum(-(-len(r) // p) for r in self.rows)
        assert a.full_available_size() == a.size_full - pages * p
        swa_pages = sum(-(-len(r) // p) - c // p for r, c in zip(self.rows, self.cursor, strict=True))
        assert a.swa_available_size() == a.size_swa - swa_pages * p
        for row, c in zip(self.rows, self.cursor, strict=True):
            m = a.translate_loc_from_full_to_swa(row).numpy()
            assert (m[:c] == 0).all() and (m[c:] > 0).all()


op = st.tuples(st.sampled_from(["new", "chunk", "decode", "window", "release"]),
               st.integers(0, 7), st.integers(1, 40))


@settings(max_examples=500, deadline=None)
@given(p=st.sampled_from([1, 2, 4, 16]), full_pages=st.integers(2, 16),
       swa_pages=st.integers(1, 16), ops=st.lists(op, max_size=20))
def test_pools_stay_paired_and_everything_comes_back(p, full_pages, swa_pages, ops) -> None:
    """After every step: each pool's own invariants, every live token's SWA slot mapped
    unless window-released, the free counts equal to what the rows hold; an extend or decode
    that does not fit changes nothing; releasing every row empties both pools."""
    r = Rows(p, full_pages, swa_pages)
    for kind, which, n in ops:
        i = which % len(r.rows) if r.rows else None
        before = (r.a.full_attn_allocator.free_pages.tolist(), r.a.swa_attn_allocator.free_pages.tolist())
        ok = True
        if kind == "new" or i is None:
            ok = r.extend(None, n)
        elif kind == "chunk":
            ok = r.extend(i, n)
        elif kind == "decode":
            ok = r.decode(i)
        elif kind == "window":
            r.window(i, n % (2 * p + 1))
        else:
            r.release(i)
        if not ok:
            assert before == (r.a.full_attn_allocator.free_pages.tolist(),
                              r.a.swa_attn_allocator.free_pages.tolist())
        r.check()
    while r.rows:
        r.release(0)
    r.check()
    assert r.a.full_available_size() == r.a.size_full and r.a.swa_available_size() == r.a.size_swa


def test_sglang_worked_example_page_size_4() -> None:
    """SGLang 0.5.23's ``SWATokenToKVPoolAllocator(32, 16, 4, ...)``, run on this CPU: an
    extend of 6 tokens, the SWA side of its first page released, then the rest freed."""
    a = SWATokenToKVPoolAllocator(32, 16, 4)
    out = a.alloc_extend([0], [6], [-1], 6)
    assert out.tolist() == [4, 5, 6, 7, 8, 9]
    assert a.full_attn_allocator.free_pages.tolist() == [3, 4, 5, 6, 7, 8]
    assert a.swa_attn_allocator.free_pages.tolist() == [3, 4]
    assert a.full_to_swa_index_mapping[4:10].tolist() == [4, 5, 6, 7, 8, 9]
    a.free_swa(out[:4])
    assert a.full_to_swa_index_mapping[4:10].tolist() == [0, 0, 0, 0, 8, 9]
    assert a.swa_attn_allocator.free_pages.tolist() == [1, 3, 4]
    a.free(out[4:])
    assert a.full_attn_allocator.free_pages.tolist() == [2, 3, 4, 5, 6, 7, 8]
    assert a.swa_attn_allocator.free_pages.tolist() == [2, 1, 3, 4]
    assert a.available_size() == 16 and a.size == 16
    assert a.full_to_swa_index_mapping[-1] == -1


def test_the_smaller_pool_decides_and_a_short_pool_changes_nothing() -> None:
    a = SWATokenToKVPoolAllocator(40, 8, 4)
    assert a.available_size() == 8
    assert a.alloc_extend([0], [9], [-1], 9) is None  # 3 pages; the SWA pool has 2
    assert a.full_available_size() == 40 and a.swa_available_size() == 8
    out = a.alloc_extend([0], [8], [-1], 8)
    assert a.alloc_decode([9], [int(out[-1])]) is None  # a new page, none left in the SWA pool
    assert a.full_available_size() == 32


def test_page_size_1_releases_go_to_the_back_in_row_order() -> None:
    a = SWATokenToKVPoolAllocator(6, 4, 1)
    out = a.alloc(3)
    assert out.tolist() == [1, 2, 3] and a.swa_attn_allocator.free_pages.tolist() == [4]
    a.free_swa_segment(out[[1, 0]], 0)
    assert a.swa_attn_allocator.free_pages.tolist() == [4, 2, 1]
    a.free_group_begin()
    a.free_full(out[:2])
    a.free(out[2:])
    assert a.full_available_size() == 3  # held back
    a.free_group_end()
    assert a.full_attn_allocator.free_pages.tolist() == [4, 5, 6, 1, 2, 3]
    assert a.swa_attn_allocator.free_pages.tolist() == [4, 2, 1, 3]


def test_misuse_is_refused() -> None:
    a = SWATokenToKVPoolAllocator(16, 8, 4)
    out = a.alloc_extend([0], [4], [-1], 4)
    with pytest.raises(AllocatorError, match="still hold an SWA slot"):
        a.free_full(out)
    a.free_swa_segment(out, 0)
    with pytest.raises(AllocatorError, match="have no SWA slot"):
        a.free_swa_segment(out, 0)
    with pytest.raises(AllocatorError, match="have no SWA slot"):
        a.free_segment(out, 0)
    with pytest.raises(ConfigError, match="start_pos"):
        a.free_swa_segment(out, 2)
    with pytest.raises(ConfigError, match="page_size"):
        a.alloc(4)
    with pytest.raises(ConfigError, match="kv_indices"):
        a.translate_loc_from_full_to_swa([99])
    with pytest.raises(ConfigError, match="size_swa"):
        SWATokenToKVPoolAllocator(16, 2, 4)
    a.free_group_begin()
    with pytest.raises(AllocatorError, match="nested"):
        a.free_group_begin()
    a.free_group_end()
    a.free_full(out)
    a.check_invariants()
    assert np.array_equal(a.full_to_swa_index_mapping[:-1].numpy(), np.zeros(20))
