"""The compiled core's pools: the allocator's free list and slot record, the request rows, and
runs of slots freed as a release frees them.

Mirrors, over :class:`~pagedkv.managers.compiled_core.layout.State`'s arrays, the Python
reference's :class:`~pagedkv.mem_cache.allocator.BaseTokenToKVPoolAllocator` (``alloc_extend``,
``alloc_decode``, ``free``, ``free_page_ids``, free groups; SGLang's
``mem_cache/allocator/paged.py``, ``base.py``), :class:`~pagedkv.mem_cache.memory_pool.
ReqToTokenPool` (rows taken from the front, 0.5.9, or the back, 0.5.23, of its free list) and
:class:`~pagedkv.mem_cache.chunk_cache.ChunkCache`'s release (``cache_finished_req``): a run of
slots freed in row order (0.5.23's ``free_segment``) or as sorted pages (0.5.9's ``free``);
the radix cache's release is :mod:`.radix_cache`'s. The free list is a ring of page ids (``I_FHEAD``,
``I_FLEN``): pages are taken from its front and given back at its back (page size 1) or front.
The ownership record is kept as the reference keeps it (the final state is compared), but its
misuse checks are not repeated: the loop is the reference's, which never trips them.
"""

from __future__ import annotations

import numba
import numpy as np

from pagedkv.managers.compiled_core.layout import (
    C_FREE_ROW_ORDER,
    C_NPAGES,
    C_P,
    C_ROW_LIFO,
    C_ROWS_SIZE,
    I_FHEAD,
    I_FLEN,
    I_GLEN,
    I_GROUP,
    I_RHEAD,
    I_RLEN,
    R_CPL,
    R_KV,
    R_PREFIX,
    R_ROW,
)
from pagedkv.mem_cache.allocator.ownership import FREED, IN_USE

# Each read of an array from the state (``s.R``) is reference-counted (an atomic increment and
# decrement: measured, most of the loop's time when done per request), so loops over requests
# read the arrays they use into locals first. Small per-call helpers are inlined in numba's IR.
jit = numba.njit(cache=True, nogil=True)
jit_inline = numba.njit(cache=True, nogil=True, inline="always")
entry = jit


@jit_inline
def available_size(s) -> int:
    """Free slots in whole pages (``available_size``)."""
    return s.I[I_FLEN] * s.C[C_P]


@jit_inline
def take_page(s) -> int:
    """Pop the free list's front page (the caller checked there is one)."""
    cap = s.C[C_NPAGES]
    page = s.free[s.I[I_FHEAD]]
    s.I[I_FHEAD] = (s.I[I_FHEAD] + 1) % cap
    s.I[I_FLEN] -= 1
    return page


@jit
def push_pages(s, n: int, front: bool) -> None:
    """Put ``s.pages[:n]`` (in order) at the front or the back of the free list."""
    cap, free, pages, I = s.C[C_NPAGES], s.free, s.pages, s.I  # noqa: E741
    if front:
        head = (I[I_FHEAD] - n) % cap
        for k in range(n):
            free[(head + k) % cap] = pages[k]
        I[I_FHEAD] = head
    else:
        tail = I[I_FHEAD] + I[I_FLEN]
        for k in range(n):
            free[(tail + k) % cap] = pages[k]
    I[I_FLEN] += n


@jit_inline
def hand_out(s, slot: int) -> None:
    """Mark a slot in use (``_hand_out``)."""
    s.slot_state[slot] = IN_USE


@jit_inline
def extend_pages(s, prefix: int, seq: int) -> int:
    """New pages an extend of ``prefix .. seq - 1`` takes."""
    p = s.C[C_P]
    return (seq + p - 1) // p - (prefix + p - 1) // p


@jit
def free_group_begin(s) -> None:
    """Hold frees back until :func:`free_group_end`."""
    s.I[I_GROUP] = 1
    s.I[I_GLEN] = 0


@jit
def free_group_end(s) -> None:
    """Release the held pages: page size 1 at the back in call order; else at the front, one
    sorted block (0.5.9's ``free``) or in call order (0.5.23's ``free_page_ids``)."""
    s.I[I_GROUP] = 0
    n = s.I[I_GLEN]
    if n == 0:
        return
    if s.C[C_P] > 1 and not s.C[C_FREE_ROW_ORDER]:
        pages = np.unique(s.group[:n])
        n = len(pages)
        s.pages[:n] = pages
    else:
        s.pages[:n] = s.group[:n]
    push_pages(s, n, s.C[C_P] > 1)


@jit
def free_run(s, slots, start: int, end: int) -> None:
    """Free the slots ``slots[start:end]`` (a run of a request's row starting on a page
    boundary, or an evicted leaf's) as the release's cache does (``free_run``): page size
    1, in order; else the first slot of each page in order (0.5.23's ``free_segment``) or
    the pages holding them, sorted and de-duplicated (0.5.9's ``free``)."""
    p, state, pages = s.C[C_P], s.slot_state, s.pages
    n = 0
    if p == 1:
        for k in range(start, end):
            slot = slots[k]
            state[slot] = FREED
            pages[n] = slot
            n += 1
    elif s.C[C_FREE_ROW_ORDER]:
        for k in range(start, end, p):
            page = slots[k] // p
            state[page * p:page * p + p] = FREED
            pages[n] = page
            n += 1
    else:
        for k in range(start, end):
            pages[n] = slots[k] // p
            n += 1
        uniq = np.unique(pages[:n])
        n = len(uniq)
        for k in range(n):
            pages[k] = uniq[k]
            state[uniq[k] * p:uniq[k] * p + p] = FREED
    if s.I[I_GROUP]:
        g = s.I[I_GLEN]
        s.group[g:g + n] = pages[:n]
        s.I[I_GLEN] = g + n
    else:
        push_pages(s, n, p > 1)


@jit
def alloc_rows(s, rids, k: int) -> None:
    """Give the ``k`` requests ``rids[:k]`` a row each, in one call (``alloc_req_slots``):
    the first ``k`` of the free list (0.5.9) or its last ``k`` in list order (0.5.23)."""
    cap, R, rows = s.C[C_ROWS_SIZE], s.R, s.rows
    head, n = s.I[I_RHEAD], s.I[I_RLEN]
    if s.C[C_ROW_LIFO]:
        start = head + n - k
    else:
        start = head
        s.I[I_RHEAD] = (head + k) % cap
    for j in range(k):
        R[rids[j], R_ROW] = rows[(start + j) % cap]
    s.I[I_RLEN] = n - k


@jit
def free_row(s, row: int) -> None:
    """Return ``row`` to the back of the free rows."""
    cap = s.C[C_ROWS_SIZE]
    s.rows[(s.I[I_RHEAD] + s.I[I_RLEN]) % cap] = row
    s.I[I_RLEN] += 1


@jit
def release_chunk_cache(s, rid: int) -> None:
    """``ChunkCache.cache_finished_req`` (the radix cache off): every slot of the request's
    row freed; it keeps no prefix."""
    kv = s.R[rid, R_KV]
    if kv > 0:
        free_run(s, s.table[s.R[rid, R_ROW]], 0, kv)
    s.R[rid, R_PREFIX] = 0
    s.R[rid, R_CPL] = 0
