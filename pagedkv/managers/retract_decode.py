"""Retraction: when the running batch's next decode step does not fit, requests go back.

Follows SGLang's ``python/sglang/srt/managers/schedule_batch.py`` (``ScheduleBatch.
retract_decode``, ``release_req``; 0.5.9 and 0.5.23) and 0.5.23's
``scheduler_components/new_token_ratio_tracker.py`` (``estimate_new_token_ratio_after_retract``,
0.5.9's formula in ``retract_decode``). Functions over a
:class:`~pagedkv.managers.schedule_batch.ScheduleBatch` (what they read of it is
:class:`RetractableBatch`), which calls them from its methods of the same names: victims are
chosen in :func:`retraction_order` (fewest output tokens first, then the longest prompt), each
is released as it is chosen (:func:`release_req`: its KV and row freed, its prompt prefix left
in the tree), until the rest of the batch's next step fits; the new ``new_token_ratio`` is
:func:`retract_ratio` over the survivors. The scheduler sends the victims back to the waiting
queue (``DecodeMemoryChecker``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from pagedkv.errors import OutOfMemoryError
from pagedkv.managers.req import Req
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.base_prefix_cache import BasePrefixCache
from pagedkv.mem_cache.common import release_kv_cache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool


class RetractableBatch(Protocol):
    """What retraction reads and calls of a running batch
    (:class:`~pagedkv.managers.schedule_batch.ScheduleBatch` has it all): its requests, their
    per-request int64 arrays ``[len(reqs)]`` (tokens generated, prompt length, KV slots
    held, ``max_new_tokens``), the pools and cache they hold memory in, and its memory check,
    write-back and filter."""

    reqs: list[Req]
    generated: np.ndarray
    prompt_len: np.ndarray
    kv_len: np.ndarray
    max_new_tokens: np.ndarray
    tree_cache: BasePrefixCache
    req_to_token_pool: ReqToTokenPool
    allocator: BaseTokenToKVPoolAllocator

    def sync(self, idx: Sequence[int] | None = None) -> None:
        """Write the arrays' entries ``idx`` (None: all) back into their ``Req`` objects."""

    def check_decode_mem(self, idx: Sequence[int] | np.ndarray | None = None) -> bool:
        """Whether the next decode step of the requests ``idx`` fits, after eviction."""

    def filter_batch(self, keep: Sequence[int] | np.ndarray) -> None:
        """Keep only the requests ``keep``, in that order."""


def retract_ratio(decoded: Sequence[int] | np.ndarray, max_new_tokens: Sequence[int] | np.ndarray,
                  retract_decode_steps: int = 20) -> float:
    """``min(1, (sum decoded + steps * n) / (sum max_new_tokens + 1))`` over ``n`` survivors.

    Source: ``ScheduleBatch.retract_decode`` (0.5.9), ``NewTokenRatioTracker.
    estimate_new_token_ratio_after_retract`` (0.5.23); ``SGLANG_RETRACT_DECODE_STEPS``.
    """
    n = len(decoded)
    return min(1.0, (int(np.sum(decoded)) + retract_decode_steps * n) / (int(np.sum(max_new_tokens)) + 1))


def retraction_order(batch: RetractableBatch) -> list[int]:
    """Batch indices sorted the way ``retract_decode`` sorts them; victims are popped
    from the END: fewest output tokens first, then the longest prompt, and among exact
    ties the later batch index (Python's stable sort with ``reverse=True``)."""
    order = list(range(len(batch.reqs)))
    gen, prompt = batch.generated.tolist(), batch.prompt_len.tolist()
    order.sort(key=lambda i: (gen[i], -prompt[i]), reverse=True)
    return order


def release_req(batch: RetractableBatch, i: int, remaining: int, retract_decode_steps: int) -> None:
    """Free victim ``i``'s KV without inserting it (its prompt prefix stays in the tree,
    now evictable) and its row, then evict ``remaining * retract_decode_steps`` slots'
    worth of room. Source: ``ScheduleBatch.release_req``."""
    batch.sync([i])
    req = batch.reqs[i]
    req.kept_at_retract = req.cache_protected_len
    release_kv_cache(req, batch.tree_cache, batch.req_to_token_pool, is_insert=False)
    batch.tree_cache.evict_from_tree_cache(remaining * retract_decode_steps)


def retract_decode(batch: RetractableBatch, retract_decode_steps: int, *,
                   abort_last_request: bool) -> tuple[list[Req], float, list[Req]]:
    """Retract requests of ``batch`` until the rest of the batch's next step fits.

    Victims in :func:`retraction_order`, at least one, never the last one: each is
    released (:func:`release_req`) as it is chosen; then the survivors stay in sorted
    order. If even one request cannot decode, it is aborted (frees its KV, empties the
    batch) with ``abort_last_request`` (0.5.23, ``Release.abort_last_request``); 0.5.9
    raises. The new ``new_token_ratio`` is :func:`retract_ratio` over the survivors.

    Returns:
        ``(retracted in pop order, new ratio, aborted)``; the retracted requests have
        no KV and no row, their ``generated`` kept.
    Raises:
        OutOfMemoryError: a single request cannot take its next step and
            ``abort_last_request`` is False (0.5.9).
    Source: ``ScheduleBatch.retract_decode`` (0.5.9 and 0.5.23).
    """
    order = retraction_order(batch)
    retracted: list[Req] = []
    first = True
    while first or not batch.check_decode_mem(order):
        if len(order) == 1:
            break
        first = False
        i = order.pop()
        retracted.append(batch.reqs[i])
        release_req(batch, i, len(order), retract_decode_steps)
    aborted: list[Req] = []
    if len(order) <= 1 and not batch.check_decode_mem(order):
        if not abort_last_request:
            raise OutOfMemoryError(
                "Out of memory even after retracting all other requests in the decode "
                f"batch: {batch.allocator.available_size()} slots free, kv_len="
                f"{int(batch.kv_len[order[0]])}; the pool is too small for one request")
        last = order.pop()
        release_req(batch, last, 0, retract_decode_steps)
        aborted.append(batch.reqs[last])
    batch.filter_batch(order)
    ratio = retract_ratio(batch.generated, batch.max_new_tokens, retract_decode_steps)
    return retracted, ratio, aborted
