"""Small, exact allocator states that chapters 2 and 3 draw and the tests pin down.

Each function builds its state through the real pools and allocators (no hand-written
numbers), so a figure in the book is a picture of pagedkv state. Chapter 3's decode step that
does not fit is :mod:`pagedkv.lessons.decode_oom`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagedkv.errors import check_positive_int
from pagedkv.lessons.contiguous import ContiguousAllocator
from pagedkv.mem_cache.allocator import (
    BaseTokenToKVPoolAllocator,
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from pagedkv.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from pagedkv.releases import DEFAULT_SGLANG_VERSION, as_release

RESERVED = "×"  # label of page 0's slots: never handed out, padded tokens write there


# Chapter 2's external-fragmentation example: a pool of CONTIGUOUS_SLOTS slots; the requests
# reserve these runs in this order, then the FINISHING ones finish.
CONTIGUOUS_SLOTS = 16
CONTIGUOUS_REQUESTS = (("A", 4), ("x", 2), ("B", 4), ("y", 2), ("C", 4))
CONTIGUOUS_FINISHING = ("x", "y")


def contiguous_story() -> tuple[ContiguousAllocator, list[tuple[str, list[str]]]]:
    """Chapter 2's external-fragmentation picture, step by step.

    On :data:`CONTIGUOUS_SLOTS` slots, A, x, B, y, C reserve 4, 2, 4, 2, 4 slots first fit
    (:data:`CONTIGUOUS_REQUESTS`) and fill them; x and y finish, leaving free slots 4, 5,
    10, 11. Returns the final allocator and ``(caption, slot_labels)`` after each event.
    """
    mem, frames = ContiguousAllocator(CONTIGUOUS_SLOTS), []
    for name, n in CONTIGUOUS_REQUESTS:
        mem.alloc(name, n, used=n)
        frames.append((f"{name} reserves {n} slots", mem.slot_labels()))
    for name in CONTIGUOUS_FINISHING:
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
    """A page table plus allocator, with each live row's length and label.

    ``rows`` maps a request name to its row; ``batch`` names the requests in the order of
    their prefill batch (rows and pages were handed out in that order); ``free_rows``
    describes every row that holds no live request (the grey rows of the book's figure);
    ``next_row`` is the row the next request gets."""

    pool: ReqToTokenPool
    alloc: PagedTokenToKVPoolAllocator
    lens: dict[int, int]
    labels: dict[int, str]
    rows: dict[str, int]
    free_rows: dict[int, str]
    next_row: int
    batch: tuple[str, ...]

    def first_page(self, name: str) -> int:
        """The page that holds ``name``'s token 0: read from its row, which a finished
        request's row still holds (SGLang does not clear a freed row)."""
        return int(self.pool.req_to_token[self.rows[name], 0]) // self.alloc.page_size


#: Chapter 3's prefill batch, in order, and each request's four words.
PAGE_TABLE_BATCH = ("A", "x", "B")
_WORDS = {"A": "The cat sat down", "x": "Hi there you all", "B": "A dog ran off"}


def page_table_example(sglang_version: str = DEFAULT_SGLANG_VERSION) -> PageTableState:
    """Chapter 3's page table: three request rows of 8 positions at page size 4.

    Requests A, x, B are prefilled in one batch, in that order: as SGLang 0.5.23's
    ``alloc_for_extend`` (``mem_cache/allocation.py``) does, the batch takes its request rows
    in one call (``alloc_req_slots``) and its pages in the same request order, so A, x and B
    get pages 1, 2, 3 (slots 4-7, 8-11, 12-15); then x finishes, so its row and page 2 are
    free again. Which rows they get follows ``sglang_version``
    (:class:`~pagedkv.mem_cache.memory_pool.ReqToTokenPool`): in 0.5.9 rows 0, 1, 2 of a
    4-row table, row 3 never used and the next request taking it; in 0.5.23 rows 1, 2, 3 of
    a 3 + 1-row table, row 0 the padding row, and the next request taking x's row.
    """
    release = as_release(sglang_version)
    # the same four rows either way: 0.5.23's padding row is one of them
    pool = ReqToTokenPool.for_release(4 - release.req_pool_padding_row, 8, release)
    alloc = PagedTokenToKVPoolAllocator(12, 4)
    rows = dict(zip(PAGE_TABLE_BATCH, pool.alloc(len(PAGE_TABLE_BATCH)), strict=True))
    # the pages in the batch's request order too: one alloc_extend over the whole batch
    n = len(PAGE_TABLE_BATCH)
    out = alloc.alloc_extend([0] * n, [4] * n, [-1] * n, 4 * n)
    for k, name in enumerate(PAGE_TABLE_BATCH):
        pool.write(rows[name], [0, 1, 2, 3], out[4 * k:4 * k + 4])
    row_x = rows["x"]
    alloc.free(pool.req_to_token[row_x, :4].long())
    pool.free(row_x)
    live = {rows[name]: name for name in PAGE_TABLE_BATCH if name != "x"}
    next_row = pool.free_slots[-1 if release.req_pool_reuses_last_freed else 0]
    free_rows = {}
    for row in range(pool.rows):
        if row < pool.first_row:
            free_rows[row] = "padding row: never handed out, zeros from start-up (slot 0)"
        elif row == row_x:
            free_rows[row] = "free row (x finished): stale slots, nobody reads them"
        elif row not in live:
            free_rows[row] = "free row, never used: zeros from start-up (slot 0)"
    free_rows[next_row] += "; the next request takes it"
    return PageTableState(pool, alloc, dict.fromkeys(live, 4),
                          {row: f'request {name}: "{_WORDS[name]}"' for row, name in live.items()},
                          rows, free_rows, next_row, PAGE_TABLE_BATCH)


def free_slot_ids(mem: ContiguousAllocator) -> list[int]:
    """Every free slot of a contiguous allocator, in slot order (the runs expanded)."""
    return [s for start, n in mem.free_runs() for s in range(start, start + n)]


def div_ceil(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, as mini-sglang's ``div_ceil``: pages needed for ``a`` tokens
    at page size ``b``. Raises ConfigError unless ``b >= 1``."""
    check_positive_int("b", b)
    return -(-a // b)


@dataclass(frozen=True)
class Lookup:
    """One page-table read: ``req_to_token[row, pos] == slot`` is ``name``'s token ``word``."""

    row: int
    pos: int
    name: str
    word: str
    slot: int


def page_table_lookups(st: PageTableState, positions: int = 3) -> list[Lookup]:
    """The first ``positions`` entries of each live row of ``st``, highest row first."""
    out = []
    for row in sorted(st.lens, reverse=True):
        name, text = st.labels[row].split(": ")
        for pos, word in enumerate(text.strip('"').split()[:positions]):
            out.append(Lookup(row, pos, name, word, int(st.pool.req_to_token[row, pos])))
    return out


@dataclass(frozen=True)
class LayoutCheck:
    """SGLang's per-layer K/V tensors against mini-sglang's single buffer, same bytes.

    Shapes are tuples; ``same``: the token written at ``slot`` reads back identically at
    ``[0, layer, slot // p, slot % p]`` of the mini-sglang view; bytes include page 0.
    """

    sglang_k_shape: tuple[int, ...]
    mini_shape: tuple[int, ...]
    slot: int
    same: bool
    k_bytes: int
    v_bytes: int


def layout_check(slot: int = 13, size: int = 12, page_size: int = 4, layer: int = 1,
                 seed: int = 0) -> LayoutCheck:
    """Write one random fp16 token at ``slot`` of ``layer`` in an ``MHATokenToKVPool``
    (2 KV heads of 8, 3 layers) and find it in the mini-sglang view
    ``(2, layers, pages, page_size, heads, head_dim)`` of the same memory."""
    heads, dim, layers = 2, 8, 3
    kv = MHATokenToKVPool(size=size, page_size=page_size, dtype=torch.float16, head_num=heads,
                          head_dim=dim, layer_num=layers)
    k_new = torch.randn(1, heads, dim, generator=torch.Generator().manual_seed(seed))
    kv.set_kv_buffer(layer, torch.tensor([slot]), k_new, -k_new)
    stacked = torch.stack([torch.stack(kv.k_buffer), torch.stack(kv.v_buffer)])
    mini = stacked.view(2, layers, (size + page_size) // page_size, page_size, heads, dim)
    same = torch.equal(mini[0, layer, slot // page_size, slot % page_size],
                       kv.get_key_buffer(layer)[slot])
    k_bytes, v_bytes = kv.kv_size_bytes()
    return LayoutCheck(tuple(kv.get_key_buffer(layer).shape), tuple(mini.shape), slot, same,
                       k_bytes, v_bytes)


#: Chapter 3's reuse replay: after A and B finish, D takes this many slots, then E this many tokens.
REUSE_D_SLOTS, REUSE_E_TOKENS = 8, 6


@dataclass
class ReuseStory:
    """Chapter 3's reuse replay on its 16-slot pool (see :func:`page_reuse_story`)."""

    frames: list[tuple[str, list[str]]]
    free_pages: list[int]  # page ids after A and B finish, in hand-out order
    d: torch.Tensor  # D's 8 slots
    e: torch.Tensor  # E's 6 slots, still held


def page_reuse_story(st: PageTableState) -> ReuseStory:
    """On :func:`page_table_example`'s state: A and B finish, D takes :data:`REUSE_D_SLOTS`
    slots and finishes, E takes :data:`REUSE_E_TOKENS` tokens through ``alloc_extend``.
    Mutates ``st`` (E keeps its pages)."""
    alloc, table = st.alloc, st.pool.req_to_token
    owned = {"A": table[st.rows["A"], :4].long(), "B": table[st.rows["B"], :4].long()}
    frames = [(f"A and B hold pages {st.first_page('A')} and {st.first_page('B')}",
               paged_slot_labels(alloc, owned))]
    alloc.free(owned.pop("B"))
    alloc.free(owned.pop("A"))
    st.pool.free([st.rows["B"], st.rows["A"]])
    free_pages = alloc.free_pages.tolist()
    frames.append(("A and B finish", paged_slot_labels(alloc, owned)))
    d = alloc.alloc(REUSE_D_SLOTS)
    frames.append((f"D takes {_pages(d, alloc.page_size)} pages", paged_slot_labels(alloc, {"D": d})))
    alloc.free(d)
    e = alloc.alloc_extend([0], [REUSE_E_TOKENS], [-1], REUSE_E_TOKENS)
    frames.append((f"E: {len(e)} tokens in {_pages(e, alloc.page_size)} pages",
                   paged_slot_labels(alloc, {"E": e})))
    return ReuseStory(frames, free_pages, d, e)


def _pages(slots: torch.Tensor, page_size: int) -> int:
    return len(torch.unique(slots // page_size))


def decode_walk(alloc: PagedTokenToKVPoolAllocator, kv_len: int, last_loc: int,
                steps: int) -> list[tuple[int, int, str]]:
    """Decode ``steps`` tokens for one request whose KV holds ``kv_len`` tokens (``seq_len`` - 1,
    the book's rule), the last at ``last_loc``: ``(token index, slot, "new page" |
    "last_loc + 1")`` per token, each step's ``seq_len`` being ``kv_len`` + 1."""
    seq_len = kv_len
    out = []
    for _ in range(steps):
        seq_len += 1
        last_loc = int(alloc.alloc_decode([seq_len], [last_loc]))
        why = "new page" if (seq_len - 1) % alloc.page_size == 0 else "last_loc + 1"
        out.append((seq_len - 1, last_loc, why))
    return out


def page_size_frames(lens: list[int], page_sizes: list[int]) -> list[tuple[str, list[str]]]:
    """The same requests (named A, B, ...) allocated on a fresh, exactly full pool at each page
    size: ``(caption with the empty slots, slot labels)`` per page size."""
    seq = torch.tensor(lens)
    names = [chr(ord("A") + i) for i in range(len(lens))]
    frames = []
    for p in page_sizes:
        size = int(((seq + p - 1) // p).sum()) * p
        mem = TokenToKVPoolAllocator(size) if p == 1 else PagedTokenToKVPoolAllocator(size, p)
        out = mem.alloc_extend(torch.zeros(len(lens), dtype=torch.int64), seq,
                               torch.full((len(lens),), -1), sum(lens))
        parts = dict(zip(names, torch.split(out, lens), strict=True))
        waste = mem.size - mem.available_size() - sum(lens)
        frames.append((f"p = {p}: {waste} empty slots", paged_slot_labels(mem, parts)))
    return frames
