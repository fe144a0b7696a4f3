"""Small, exact allocator states that chapters 2 and 3 draw and the tests pin down.

Each function builds its state through the real pools and allocators (no hand-written
numbers), so a figure in the book is a picture of pagedkv state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pagedkv.allocator import BaseTokenToKVPoolAllocator, PagedTokenToKVPoolAllocator
from pagedkv.contiguous import ContiguousAllocator
from pagedkv.pools import ReqToTokenPool

RESERVED = "×"  # label of page 0's slots: never handed out, padded tokens write there


def contiguous_story() -> tuple[ContiguousAllocator, list[tuple[str, list[str]]]]:
    """The seed's external-fragmentation picture over 16 slots, step by step.

    A, x, B, y, C reserve 4, 2, 4, 2, 4 slots first fit and fill them; x and y finish,
    leaving free slots 4, 5, 10, 11. Returns the final allocator and
    ``(caption, slot_labels)`` after each event.
    """
    mem, frames = ContiguousAllocator(16), []
    for name, n in (("A", 4), ("x", 2), ("B", 4), ("y", 2), ("C", 4)):
        mem.alloc(name, n, used=n)
        frames.append((f"{name} reserves {n} slots", mem.slot_labels()))
    for name in ("x", "y"):
        mem.free(name)
        frames.append((f"{name} finishes", mem.slot_labels()))
    return mem, frames


def paged_slot_labels(alloc: BaseTokenToKVPoolAllocator,
                      owned: dict[str, torch.Tensor]) -> list[str]:
    """Per slot of ``alloc``'s pool: ``"A3"`` (A's token 3 lives here), ``"A·"`` (an empty
    slot in a page A holds), ``RESERVED`` (page 0) or ``""`` (free). Names are one letter.
    """
    p = alloc.page_size
    labels = [RESERVED] * p + [""] * (len(alloc.slot_state) - p)
    for name, slots in owned.items():
        for page in torch.unique(slots // p).tolist():
            labels[page * p:(page + 1) * p] = [f"{name}·"] * p
        for t, slot in enumerate(slots.tolist()):
            labels[slot] = f"{name}{t}"
    return labels


@dataclass
class PageTableState:
    """A page table plus allocator, with each live row's length and label."""

    pool: ReqToTokenPool
    alloc: PagedTokenToKVPoolAllocator
    lens: dict[int, int]
    labels: dict[int, str]


def seed_page_table() -> PageTableState:
    """The seed's ``[4, 8]`` page table at page size 4.

    Rows 0, 1, 2 go to requests x, B, A; in one prefill batch A, x, B take pages 1, 2, 3
    (slots 4-7, 8-11, 12-15); then x finishes, so row 0 and page 2 are free again. Row 3
    was never used: all zeros, i.e. every position points at the reserved slot 0.
    """
    pool, alloc = ReqToTokenPool(4, 8), PagedTokenToKVPoolAllocator(12, 4)
    row_x, row_b, row_a = pool.alloc(3)
    words = {row_a: "The cat sat down", row_x: "Hi there you all", row_b: "A dog ran off"}
    order = [row_a, row_x, row_b]
    out = alloc.alloc_extend([0, 0, 0], [4, 4, 4], [-1, -1, -1], 12)
    for k, row in enumerate(order):
        pool.write(row, [0, 1, 2, 3], out[4 * k:4 * k + 4])
    alloc.free(out[4:8])
    pool.free(row_x)
    names = {row_a: "A", row_b: "B"}
    return PageTableState(pool, alloc, {row_a: 4, row_b: 4},
                          {row: f'request {names[row]}: "{words[row]}"' for row in names})


@dataclass
class DecodeOOMCase:
    """A batch about to decode, with free slots that cannot serve it."""

    alloc: PagedTokenToKVPoolAllocator
    seq_lens: torch.Tensor  # int64 [bs], including the token about to be decoded
    last_loc: torch.Tensor  # int64 [bs]
    crossing: int  # requests whose next token starts a new page
    empty_tail_slots: int  # unused slots inside the batch's own partial pages


def decode_oom_case(num_requests: int = 148, free_pages: int = 32, page_size: int = 64,
                    crossing: int = 40, seed: int = 0) -> DecodeOOMCase:
    """The "decode out of memory although 2048 tokens are free, 148 needed" state.

    ``num_requests`` requests hold random lengths; ``crossing`` of them have exactly full
    last pages, so their next token needs a new page; ``free_pages`` pages are free.
    """
    rng = np.random.default_rng(seed)
    full = rng.integers(1, 9, size=num_requests) * page_size
    lens = full - np.where(np.arange(num_requests) < crossing, 0,
                           rng.integers(1, page_size, size=num_requests))
    lens = rng.permutation(lens)
    used_pages = int(np.ceil(lens / page_size).sum())
    alloc = PagedTokenToKVPoolAllocator((used_pages + free_pages) * page_size, page_size)
    seq = torch.as_tensor(lens, dtype=torch.int64)
    out = alloc.alloc_extend(torch.zeros_like(seq), seq, torch.full_like(seq, -1),
                             int(seq.sum()))
    last = out[torch.cumsum(seq, 0) - 1]
    tails = int((torch.ceil(seq / page_size) * page_size - seq).sum())
    return DecodeOOMCase(alloc, seq + 1, last, crossing, tails)
