"""The allocators against a plain-list model of SGLang's free list: same slots, same order.

The model is the loop SGLang's ``alloc_extend_kernel`` describes, one request and one page
at a time, with the free list a Python list: ``free`` appends slots at the back for page
size 1 and puts ``sorted(unique(slots // p))`` at the front otherwise. Frees of several
requests go in one call, as the scheduler makes them.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator


class ListModel:
    def __init__(self, num_pages: int, p: int) -> None:
        self.p, self.free = p, list(range(1, num_pages + 1))

    def extend(self, pre: list[int], seq: list[int], last: list[int]) -> list[int] | None:
        p = self.p
        need = sum(math.ceil(s / p) - math.ceil(n / p) for n, s in zip(pre, seq, strict=True))
        if need > len(self.free):
            return None
        pages, self.free = iter(self.free[:need]), self.free[need:]
        out: list[int] = []
        for n, s, loc in zip(pre, seq, last, strict=True):
            room = min(s, math.ceil(n / p) * p) - n
            out += range(loc + 1, loc + 1 + room)
            left = s - n - room
            while left > 0:
                page = next(pages)
                out += range(page * p, page * p + min(p, left))
                left -= p
        return out

    def release(self, slots: list[int]) -> None:
        if self.p == 1:
            self.free += slots
        else:
            self.free = sorted({s // self.p for s in slots}) + self.free


step = st.tuples(st.sampled_from(["new", "decode", "free"]),
                 st.lists(st.integers(1, 30), min_size=1, max_size=3),
                 st.lists(st.booleans(), min_size=6, max_size=6))


@pytest.mark.parametrize("p", [1, 4, 16])
@settings(max_examples=300, deadline=None)
@given(num_pages=st.integers(1, 40), steps=st.lists(step, max_size=25))
def test_slots_and_free_list_match_the_list_model(p: int, num_pages: int, steps) -> None:
    alloc = (TokenToKVPoolAllocator(num_pages) if p == 1
             else PagedTokenToKVPoolAllocator(num_pages * p, p))
    model = ListModel(num_pages, p)
    live: list[list[int]] = []  # each request's slots
    for kind, lens, picks in steps:
        if kind == "new":
            pre, seq, last = [0] * len(lens), lens, [-1] * len(lens)
        elif kind == "decode" and live:
            pre = [len(r) for r in live]
            seq, last = [n + 1 for n in pre], [r[-1] for r in live]
        elif kind == "free" and live:
            chosen = [picks[i % len(picks)] for i in range(len(live))]
            gone = [r for r, pick in zip(live, chosen, strict=True) if pick]
            live = [r for r, pick in zip(live, chosen, strict=True) if not pick]
            slots = [s for r in gone for s in r]
            alloc.free(slots)
            model.release(slots)
            assert alloc.free_pages.tolist() == model.free
            continue
        else:
            continue
        want = model.extend(pre, seq, last)
        got = (alloc.alloc_extend(pre, seq, last, sum(seq) - sum(pre)) if kind == "new"
               else alloc.alloc_decode(seq, last))
        assert (got if got is None else got.tolist()) == want
        assert alloc.free_pages.tolist() == model.free
        if want is None:
            continue
        if kind == "new":
            ends = list(itertools.accumulate(lens))
            live += [want[b - n:b] for n, b in zip(lens, ends, strict=True)]
        else:
            for r, slot in zip(live, want, strict=True):
                r.append(slot)
        alloc.check_invariants()
