"""Allocator properties (random extend/decode/free sequences) and SGLang's worked examples."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_consistency import check_all_freed, check_pool_agreement

from pagedkv.errors import AllocatorError, ConfigError, OutOfMemoryError
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool

MAX_LEN = 300


def make(size: int, p: int):
    return TokenToKVPoolAllocator(size) if p == 1 else PagedTokenToKVPoolAllocator(size, p)


class Harness:
    """Drives a page table plus allocator the way SGLang's scheduler does."""

    def __init__(self, p: int, num_pages: int) -> None:
        self.p = p
        self.alloc = make(num_pages * p, p)
        self.pool = ReqToTokenPool(8, MAX_LEN)
        self.lens: dict[int, int] = {}

    def last_loc(self, row: int) -> int:
        n = self.lens[row]
        return int(self.pool.req_to_token[row, n - 1]) if n else -1

    def snapshot(self):
        return self.alloc.free_pages.clone(), self.alloc.slot_state.clone()

    def unchanged_since(self, snap) -> bool:
        free, state = snap
        return torch.equal(free, self.alloc.free_pages) and torch.equal(state,
                                                                        self.alloc.slot_state)

    def extend(self, rows: list[int], adds: list[int]) -> None:
        pre = [self.lens[r] for r in rows]
        seq = [n + a for n, a in zip(pre, adds, strict=True)]
        pages = [math.ceil(s / self.p) - math.ceil(n / self.p)
                 for n, s in zip(pre, seq, strict=True)]
        need = sum(pages)
        before, snap = self.alloc.available_size(), self.snapshot()
        out = self.alloc.alloc_extend(pre, seq, [self.last_loc(r) for r in rows], sum(adds))
        if out is None:
            assert need * self.p > before and self.unchanged_since(snap)
            return
        assert before - self.alloc.available_size() == need * self.p  # differential
        start = 0
        for r, n, s in zip(rows, pre, seq, strict=True):
            self.pool.write(r, list(range(n, s)), out[start:start + s - n])
            start += s - n
            self.lens[r] = s

    def decode(self, rows: list[int]) -> None:
        seq = [self.lens[r] + 1 for r in rows]
        need = sum((s - 1) % self.p == 0 for s in seq)
        before, snap = self.alloc.available_size(), self.snapshot()
        out = self.alloc.alloc_decode(seq, [self.last_loc(r) for r in rows])
        if out is None:
            assert need * self.p > before and self.unchanged_since(snap)
            return
        assert before - self.alloc.available_size() == need * self.p
        for r, s, slot in zip(rows, seq, out.tolist(), strict=True):
            self.pool.write(r, [s - 1], [slot])
            self.lens[r] = s

    def finish(self, row: int) -> None:
        self.alloc.free(self.pool.req_to_token[row, : self.lens.pop(row)].to(torch.int64))
        self.pool.free(row)

    def check(self) -> None:
        self.alloc.check_invariants()
        check_pool_agreement(self.pool, self.alloc, self.lens)
        for row, n in self.lens.items():  # token t sits at offset t % p of its page
            slots = self.pool.req_to_token[row, :n].to(torch.int64)
            t = torch.arange(n)
            assert torch.equal(slots % self.p, t % self.p)
            assert torch.equal(slots // self.p, slots[t - t % self.p] // self.p)


op = st.tuples(st.sampled_from(["new", "extend", "decode", "free"]),
               st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True),
               st.lists(st.integers(1, 40), min_size=4, max_size=4))


@pytest.mark.parametrize("p", [1, 2, 16, 64])
@settings(max_examples=1000, deadline=None)
@given(num_pages=st.integers(1, 12), ops=st.lists(op, max_size=12))
def test_random_extend_decode_free_keep_invariants(p: int, num_pages: int, ops) -> None:
    h = Harness(p, num_pages)
    for kind, picks, adds in ops:
        live = sorted(h.lens)
        if kind == "new" and h.pool.available_size():
            rows = h.pool.alloc(min(len(picks), h.pool.available_size()))
            h.lens.update({r: 0 for r in rows})
            h.extend(rows, adds[: len(rows)])
        elif kind == "extend" and live:
            rows = sorted({live[i % len(live)] for i in picks})
            h.extend(rows, adds[: len(rows)])
        elif kind == "decode" and live:
            h.decode(sorted({live[i % len(live)] for i in picks}))
        elif kind == "free" and live:
            h.finish(live[picks[0] % len(live)])
        h.check()
    for row in sorted(h.lens):
        h.finish(row)
    check_all_freed(h.pool, h.alloc)


# ----- chapter 3's worked examples, exactly -------------------------------------------------
def sixteen_slot_state() -> tuple[PagedTokenToKVPoolAllocator, torch.Tensor]:
    """Pages 1..3 of 4 slots; requests A, X, B take pages 1, 2, 3; then A and B finish."""
    a = PagedTokenToKVPoolAllocator(12, 4)
    out = a.alloc_extend([0, 0, 0], [4, 4, 4], [-1, -1, -1], 12)
    a.free(out[8:])
    a.free(out[:4])
    return a, out


def test_free_pages_go_to_the_front_and_page_starts_expand_to_slots() -> None:
    a, _ = sixteen_slot_state()
    assert (a.free_pages * 4).tolist() == [4, 12]
    assert a.alloc(8).tolist() == [4, 5, 6, 7, 12, 13, 14, 15]


def test_six_tokens_at_page_size_four_take_two_pages_and_waste_two_slots() -> None:
    a, _ = sixteen_slot_state()
    out = a.alloc_extend([0], [6], [-1], 6)
    assert out.tolist() == [4, 5, 6, 7, 12, 13]
    assert a.available_size() == 0 and 2 * 4 - 6 == 2
    assert a.alloc_decode([7], [13]).tolist() == [14]  # the partial page stays with A


def test_decode_takes_a_new_page_exactly_at_the_boundary() -> None:
    a = PagedTokenToKVPoolAllocator(64, 4)
    out = a.alloc_extend([0], [4], [-1], 4)
    assert out.tolist() == [4, 5, 6, 7]
    assert a.alloc_decode([5], [7]).tolist() == [8]
    assert a.alloc_decode([6], [8]).tolist() == [9]


def test_extend_fills_partial_page_then_whole_pages_then_a_partial_page() -> None:
    a = PagedTokenToKVPoolAllocator(64, 4)
    a.alloc_extend([0], [2], [-1], 2)  # slots 4, 5 (page 1)
    out = a.alloc_extend([2], [11], [5], 9)
    assert out.tolist() == [6, 7, 8, 9, 10, 11, 12, 13, 14]
    assert a.free_pages[0].item() == 4


def test_page_size_one_appends_freed_slots_at_the_back() -> None:
    a = TokenToKVPoolAllocator(6)
    assert a.alloc(0).tolist() == [] and a.alloc_decode([], []).tolist() == []
    out = a.alloc(3)
    assert out.tolist() == [1, 2, 3]
    a.free(torch.tensor([2, 1]))
    assert a.free_pages.tolist() == [4, 5, 6, 2, 1]


def test_strict_raises_with_numbers_and_changes_nothing() -> None:
    a = PagedTokenToKVPoolAllocator(8, 4)
    with pytest.raises(OutOfMemoryError, match=r"needs 3 new pages \(12 slots at page_size=4\)"
                       r"; only 2 pages \(8 slots\) are free"):
        a.alloc_extend([0], [9], [-1], 9, strict=True)
    assert a.alloc_extend([0], [9], [-1], 9) is None
    assert a.available_size() == 8


# ----- every error path ---------------------------------------------------------------------
@pytest.mark.parametrize(("slots", "message"), [
    ([0], r"page 0 \(slots 0..3\) is reserved"),
    ([20], r"never allocated"),
    ([99], r"outside the pool \[0, 68\)"),
    ([4, 4], r"lists a slot twice"),
    ([4], r"would also free 1 in-use slots"),
])
def test_free_errors(slots: list[int], message: str) -> None:
    a = PagedTokenToKVPoolAllocator(64, 4)
    a.alloc_extend([0], [2], [-1], 2)
    with pytest.raises(AllocatorError, match=message):
        a.free(slots)


def test_double_free() -> None:
    a = TokenToKVPoolAllocator(4)
    out = a.alloc(2)
    a.free(out)
    with pytest.raises(AllocatorError, match=r"cannot free slots \[1, 2\]: double free"):
        a.free(out)


def test_bad_last_loc_and_bad_arguments() -> None:
    a = PagedTokenToKVPoolAllocator(64, 4)
    a.alloc_extend([0], [2], [-1], 2)
    with pytest.raises(AllocatorError, match=r"last_loc \[6\] is not the in-use last slot"):
        a.alloc_decode([3], [6])
    with pytest.raises(ConfigError, match=r"last_loc=\[1\] is invalid"):
        a.alloc_decode([3], [1])
    with pytest.raises(ConfigError, match=r"extend_num_tokens=3 is invalid; valid: sum"):
        a.alloc_extend([0], [2], [-1], 3)
    with pytest.raises(ConfigError, match=r"0 <= prefix_len <= seq_len"):
        a.alloc_extend([3], [2], [-1], -1)
    with pytest.raises(ConfigError, match=r"seq_lens=\[0\] is invalid"):
        a.alloc_decode([0], [-1])
    with pytest.raises(ConfigError, match=r"three equal lengths"):
        a.alloc_extend([0], [2, 2], [-1], 4)
    with pytest.raises(ConfigError, match=r"need_size=6 is invalid; valid: a multiple of"):
        a.alloc(6)
    with pytest.raises(ConfigError, match=r"size=10 is invalid; valid: a multiple of page_size=4"):
        PagedTokenToKVPoolAllocator(10, 4)
    with pytest.raises(ConfigError, match=r"page_size=0 is invalid"):
        PagedTokenToKVPoolAllocator(10, 0)


def test_stale_last_loc_clash_puts_pages_back() -> None:
    a = PagedTokenToKVPoolAllocator(64, 4)
    a.alloc_extend([0], [2], [-1], 2)  # slots 4, 5
    a.slot_state[6] = 1  # corrupt: slot 6 held by someone else
    free_before = a.free_pages.clone()
    with pytest.raises(AllocatorError, match=r"slots \[6\] are already in use"):
        a.alloc_decode([3, 1], [5, -1])
    assert torch.equal(a.free_pages, free_before)


def test_check_invariants_catches_corruption() -> None:
    a = PagedTokenToKVPoolAllocator(16, 4)
    a.free_pages = torch.tensor([1, 1, 2, 3])
    with pytest.raises(AllocatorError, match="on the free list twice"):
        a.check_invariants()
    a.clear()
    a.slot_state[5] = 1
    with pytest.raises(AllocatorError, match="free list holds an in-use slot"):
        a.check_invariants()
    a.clear()
    a.free_pages = a.free_pages[1:]
    with pytest.raises(AllocatorError, match=r"free pages 3 \+ used pages 0 != 4"):
        a.check_invariants()


def test_more_argument_and_corruption_errors() -> None:
    a = PagedTokenToKVPoolAllocator(16, 4)
    with pytest.raises(ConfigError, match=r"seq_lens.shape=\(1, 1\) is invalid; valid: a 1-D"):
        a.alloc_decode([[1]], [-1])
    with pytest.raises(ConfigError, match=r"two equal lengths"):
        a.alloc_decode([1, 1], [-1])
    with pytest.raises(ConfigError, match=r"need_size=-4 is invalid; valid: an integer >= 0"):
        a.alloc(-4)
    a.free_pages = torch.tensor([1, 2, 3, 9])
    with pytest.raises(AllocatorError, match=r"free list holds page ids outside 1..4"):
        a.check_invariants()
    a.clear()
    a.slot_state[1] = 1
    with pytest.raises(AllocatorError, match=r"page 0 is reserved but holds a token"):
        a.check_invariants()
