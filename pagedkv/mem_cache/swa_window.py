"""A running request's sliding window: when its old tokens give back their SWA slots, and how
its row is freed afterwards.

Follows SGLang 0.5.23's ``python/sglang/srt/mem_cache/common.py``
(``free_swa_out_of_window_slots``, ``free_kv_row_segments``, ``coalesce_ranges``) and the
request's KV record in ``managers/schedule_batch.py`` (``swa_dead_lo``, the per-component
``evicted_seqlen`` cursor). On a sliding-window hybrid ``ScheduleBatch.maybe_evict_swa`` calls
the release once per decode step, inside one free group, for every request that has decoded
at least once and whose window has moved ``eviction_interval`` tokens past its cursor
(``SGLANG_SWA_EVICTION_INTERVAL``, default 128; :func:`swa_eviction_due`); with a cache that
does not share prefixes (``--disable-radix-cache``) prefill chunks release too.

A request's row ``[0, len)`` then reads, from the left: the tree-owned prefix
``[0, cache_protected_len)``, tokens whose SWA slots are gone ``[dead_lo, evicted_seqlen)``
(full slots only) and live tokens (both). When it finishes or is retracted its own part is
freed with :func:`free_kv_row_segments`: the SWA-less part by ``free_full_segment``, the
rest by ``free_segment``.
"""

from __future__ import annotations

import numpy as np

from pagedkv.errors import AllocatorError, bad_value, check_positive_int
from pagedkv.mem_cache.allocator import IntsLike, as_i64
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator


def swa_dead_lo(cache_protected_len: int, page_size: int, swa_evict_floor: int = 0) -> int:
    """The lowest row position a request may release SWA slots from itself: above the
    tree-owned prefix and the eviction floor, rounded up to a page when the floor decides.
    Source: ``ReqKVState.swa_dead_lo`` (0.5.23)."""
    lo = max(cache_protected_len, swa_evict_floor)
    if page_size > 1 and lo > cache_protected_len:
        lo = -(-lo // page_size) * page_size
    return lo


def swa_eviction_due(seq_len: int, window: int, evicted_seqlen: int, interval: int = 1) -> bool:
    """Whether a decoding request's window has moved ``interval`` tokens past its release
    cursor (``seq_len`` counts the token being decoded). Source:
    ``ScheduleBatch._swa_eviction_trigger`` (0.5.23)."""
    return seq_len - 1 - window >= evicted_seqlen + interval


def free_swa_out_of_window_slots(
    row: IntsLike,
    pre_len: int,
    evicted_seqlen: int,
    *,
    cache_protected_len: int,
    sliding_window_size: int,
    allocator: SWATokenToKVPoolAllocator,
    supports_prefix_sharing: bool = True,
    retain_floor: int | None = None,
    eviction_interval: int = 1,
    swa_evict_floor: int = 0,
) -> int:
    """Release the SWA slots of a request's tokens that left its window; return its new
    release cursor (``evicted_seqlen``).

    Nothing happens (the cursor is returned as is) unless ``pre_len - window >= cursor +
    eviction_interval``. The cursor is first raised to :func:`swa_dead_lo`; then tokens up to
    ``pre_len - window`` (no prefix sharing) or ``pre_len - ceil(max(window, p) / p) * p``
    (prefix sharing: a key ending at a page boundary keeps a whole window of live SWA), at
    most ``retain_floor`` (prefix sharing only), floored to a page, lose their SWA slots
    with one ``free_swa_segment`` call.

    Args:
        row: the request's ``req_to_token`` row (int64 full slots; at least ``pre_len``).
        pre_len: tokens whose KV is written (the decode position, or a chunk's start).
        evicted_seqlen: the request's cursor; ``cache_protected_len``: its tree-owned
            prefix (page-aligned).

    Raises:
        ConfigError: a ``cache_protected_len`` that is not page-aligned, a negative length.
    Source: ``mem_cache/common.py: free_swa_out_of_window_slots`` (0.5.23).
    """
    p = allocator.page_size
    check_positive_int("sliding_window_size", sliding_window_size)
    check_positive_int("eviction_interval", eviction_interval)
    for name, v in (("pre_len", pre_len), ("evicted_seqlen", evicted_seqlen)):
        check_positive_int(name, v, minimum=0)
    if cache_protected_len % p or cache_protected_len < 0:
        raise bad_value("cache_protected_len", cache_protected_len, f"a multiple of page_size={p}, >= 0")
    if pre_len - sliding_window_size < evicted_seqlen + eviction_interval:
        return evicted_seqlen
    evicted = max(evicted_seqlen, swa_dead_lo(cache_protected_len, p, swa_evict_floor))
    if not supports_prefix_sharing:
        threshold = pre_len - sliding_window_size
    else:
        threshold = pre_len - -(-max(sliding_window_size, p) // p) * p
        if retain_floor is not None:
            threshold = min(threshold, retain_floor)
    new = max(evicted, threshold)
    if p > 1:
        new = new // p * p
    if new > evicted:
        allocator.free_swa_segment(as_i64("row", row)[evicted:new], evicted)
        return new
    return evicted


def coalesce_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge adjacent half-open ranges (``coalesce_ranges``), so a seam inside a page does
    not free it twice."""
    merged: list[tuple[int, int]] = []
    for start, end in ranges:
        if merged and start == merged[-1][1]:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def free_kv_row_segments(allocator: SWATokenToKVPoolAllocator,
                         segments: list[tuple[np.ndarray, int]], *, swa_evicted_seqlen: int,
                         swa_dead_lo: int = 0) -> None:
    """Free ascending, page-disjoint ``(slots, start_pos)`` segments of one request's row:
    the part inside ``[swa_dead_lo, swa_evicted_seqlen)`` (SWA slots gone) with
    ``free_full_segment``, all of them first, then the rest with ``free_segment``.

    Raises:
        AllocatorError: two segments share a page, or the cursor splits a page between a
            released and a live part.
    Source: ``mem_cache/common.py: free_kv_row_segments`` (0.5.23).
    """
    p = allocator.page_size
    lo, hi = swa_dead_lo, max(swa_evicted_seqlen, swa_dead_lo)
    dead, alive = [], []
    prev_end = None
    for slots, start in segments:
        slots = as_i64("slots", slots)
        end = start + len(slots)
        if len(slots) and prev_end is not None and start // p <= (prev_end - 1) // p:
            raise AllocatorError(f"segment at {start} shares a page with the one ending at {prev_end}")
        if len(slots):
            prev_end = end
        a, b = min(max(lo, start), end), min(max(hi, start), end)
        if b <= a:
            alive.append((slots, start))
            continue
        dead.append((slots[a - start:b - start], a))
        if a > start:
            alive.append((slots[:a - start], start))
        if end > b:
            alive.append((slots[b - start:], b))
    if dead and alive and swa_evicted_seqlen % p:
        raise AllocatorError(f"SWA release cursor {swa_evicted_seqlen} splits a page (page_size {p})")
    for slots, start in dead:
        allocator.free_full_segment(slots, start)
    for slots, start in alive:
        allocator.free_segment(slots, start)


def free_kv_row(allocator: SWATokenToKVPoolAllocator, row: IntsLike,
                ranges: list[tuple[int, int]], *, swa_evicted_seqlen: int,
                swa_dead_lo: int = 0) -> None:
    """Give back ranges ``[start, end)`` of a request's row (``BasePrefixCache.free_kv_row``:
    coalesced, then :func:`free_kv_row_segments`)."""
    r = as_i64("row", row)
    free_kv_row_segments(allocator, [(r[s:e], s) for s, e in coalesce_ranges(ranges)],
                         swa_evicted_seqlen=swa_evicted_seqlen, swa_dead_lo=swa_dead_lo)
