"""Slots and pages outside the free list: the page arithmetic, the allocator's per-slot
ownership record and the checks that read it.

:func:`ceil_to_page` and :func:`decode_need` are SGLang's page arithmetic (both releases).

SGLang's allocators (``mem_cache/allocator/base.py``, 0.5.23; ``mem_cache/allocator.py``,
0.5.9) keep only the free list; a double free or a freed page 0 goes unnoticed there and
corrupts the cache later. pagedkv adds one int8 state per slot (``NEVER``, ``IN_USE``,
``FREED``) so that such misuse raises :class:`~pagedkv.errors.AllocatorError` at once,
before the free list changes. :class:`~pagedkv.mem_cache.allocator.base.BaseTokenToKVPoolAllocator`
keeps the record and the free list; this module holds the states, the conversion of its
inputs, and the checks, each a few whole-array numpy operations (a simulator frees thousands
of times), the exact message worked out only once a check has failed.
"""

from __future__ import annotations

import numpy as np
import torch

from pagedkv.errors import AllocatorError, bad_value

NEVER, IN_USE, FREED = 0, 1, 2  # per-slot ownership states
IntsLike = torch.Tensor | np.ndarray | list[int]


def as_i64(name: str, values: IntsLike) -> np.ndarray:
    """``values`` as a 1-D int64 numpy array; ``ConfigError`` naming ``name`` otherwise."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    a = np.asarray(values, dtype=np.int64)
    if a.ndim != 1:
        raise bad_value(f"{name}.shape", tuple(a.shape), "a 1-D tensor")
    return a


def ceil_to_page(tokens: int | np.ndarray, page_size: int) -> int | np.ndarray:
    """``tokens`` rounded up to whole pages (SGLang's ``ceil_paged_tokens``); works on ints
    and on int64 arrays."""
    return -(-tokens // page_size) * page_size


def decode_need(kv_lens: IntsLike, page_size: int) -> int:
    """Slots the next decode step must find free: ``page_size`` per request whose ``kv_len``
    (tokens cached, = the position it writes next) is a multiple of ``page_size``, i.e. whose
    newest token starts a page; every request when ``page_size == 1``.

    Source: ``ScheduleBatch.new_tokens_required_next_decode`` (0.5.9 and 0.5.23).
    """
    kv = as_i64("kv_lens", kv_lens)
    if page_size == 1:  # every token starts a page
        return len(kv)
    return int(np.count_nonzero(kv % page_size == 0)) * page_size


def check_free_slots(state: np.ndarray, idx: np.ndarray, page_size: int) -> None:
    """AllocatorError unless ``idx`` (int64 ``[n]``, ``n >= 1``) are distinct in-use slots
    of the record ``state`` (int8 ``[size + page_size]``) outside page 0."""
    p, end = page_size, len(state)
    srt = np.sort(idx)
    if srt[0] < p or srt[-1] >= end:
        bad = (idx < 0) | (idx >= end)
        if bad.any():
            raise AllocatorError(f"cannot free slots {idx[bad].tolist()}: "
                                 f"outside the pool [0, {end})")
        raise AllocatorError(f"cannot free slots {idx[idx < p].tolist()}: page 0 "
                             f"(slots 0..{p - 1}) is reserved for padded tokens")
    if (srt[1:] == srt[:-1]).any():
        raise AllocatorError("free_index lists a slot twice")
    st = state[idx]
    if (st != IN_USE).any():
        for code, why in ((FREED, "double free"), (NEVER, "never allocated")):
            if (st == code).any():
                raise AllocatorError(f"cannot free slots {idx[st == code].tolist()}: {why}")


def check_free_page_ids(state: np.ndarray, pages: np.ndarray, page_size: int,
                        num_pages: int) -> None:
    """AllocatorError unless ``pages`` (int64 ``[n]``, ``n >= 1``) are distinct page ids in
    ``1 .. num_pages`` each holding at least one in-use slot of ``state``."""
    srt = np.sort(pages) if len(pages) > 1 else pages  # its ends are the range
    if srt[0] < 1 or srt[-1] > num_pages:
        raise AllocatorError(f"cannot free pages {pages.tolist()}: outside 1..{num_pages}")
    if len(pages) > 1 and np.count_nonzero(srt[1:] == srt[:-1]):
        raise AllocatorError("page_ids lists a page twice")
    # a page holds a token if a slot does
    held = (state[pages] == IN_USE if page_size == 1
            else (state.reshape(-1, page_size)[pages] == IN_USE).any(axis=1))
    if np.count_nonzero(held) != len(held):
        raise AllocatorError(f"cannot free pages {pages[~held].tolist()}: they hold no token")


def check_free_list(free: np.ndarray, state: np.ndarray, page_size: int, num_pages: int) -> None:
    """AllocatorError unless the free list ``free`` (int64 page ids) and the record
    ``state`` agree: free page ids unique and in ``1 .. num_pages``; page 0 never in use; no
    free page holds an in-use slot; free pages + pages holding a token == ``num_pages``."""
    if len(np.unique(free)) != len(free):
        raise AllocatorError("a page is on the free list twice")
    if len(free) and (free.min() < 1 or free.max() > num_pages):
        raise AllocatorError(f"free list holds page ids outside 1..{num_pages}")
    in_use = (state.reshape(-1, page_size) == IN_USE).any(axis=1)
    if in_use[0]:
        raise AllocatorError("page 0 is reserved but holds a token")
    if in_use[free].any():
        raise AllocatorError("a page on the free list holds an in-use slot")
    used = int(np.count_nonzero(in_use))
    if len(free) + used != num_pages:
        raise AllocatorError(f"free pages {len(free)} + used pages {used} != {num_pages}")
