"""The running batch: decode steps, the decode memory check and ``retract_decode``.

Follows SGLang ``python/sglang/srt/managers/schedule_batch.py`` (``ScheduleBatch``:
``check_decode_mem``, ``new_tokens_required_next_decode``, ``retract_decode``,
``prepare_for_decode``). The batch is kept as numpy arrays (one entry per request) so that
a decode step costs a handful of vector operations whatever the batch size; the :class:`Req`
objects are brought up to date whenever a request leaves the batch.

All KV memory goes through the real allocator (:mod:`pagedkv.mem_cache.allocator`) and the real page
table (:class:`pagedkv.mem_cache.memory_pool.ReqToTokenPool`), so page rounding is what SGLang's is. The
batch hands the allocator numpy arrays and writes the page table through its numpy view
(``req_to_token.numpy()``, the same memory): torch indexing on small tensors costs more.

Where we simplify: one decode token per step (no speculative decoding); no radix cache to
evict before retracting; every request samples until ``output_len`` (no stop strings).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pagedkv.errors import OutOfMemoryError
from pagedkv.managers.request import Req
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator, decode_need
from pagedkv.mem_cache.memory_pool import ReqToTokenPool

_FIELDS = ("prompt_len", "max_new_tokens", "output_len", "generated", "kv_len", "req_pool_idx")


class RunningBatch:
    """Requests that have been prefilled and now decode one token per step.

    Attributes:
        reqs: the requests, in batch order.
        prompt_len, max_new_tokens, output_len, generated, kv_len, req_pool_idx, last_loc:
            int64 ``[len(reqs)]``; ``last_loc`` is the slot of each request's last KV token.
        batch_is_full: SGLang's flag: admission found no room; prefill is not tried again
            until ``update_running_batch`` sees the batch shrink (the scheduler clears it).
    """

    def __init__(self) -> None:
        self.reqs: list[Req] = []
        for name in (*_FIELDS, "last_loc"):
            setattr(self, name, np.zeros(0, dtype=np.int64))
        self.batch_is_full = False

    def __len__(self) -> int:
        return len(self.reqs)

    def add(self, reqs: Sequence[Req], last_loc: Sequence[int]) -> None:
        """Append prefilled requests; ``last_loc`` is each one's last KV slot."""
        if not reqs:
            return
        self.reqs.extend(reqs)
        for name in _FIELDS:
            new = np.fromiter((getattr(r, name) for r in reqs), np.int64, len(reqs))
            setattr(self, name, np.concatenate((getattr(self, name), new)))
        self.last_loc = np.concatenate((self.last_loc, np.asarray(last_loc, dtype=np.int64)))

    def sync(self) -> None:
        """Copy ``generated`` and ``kv_len`` back into the :class:`Req` objects."""
        for r, g, k in zip(self.reqs, self.generated.tolist(), self.kv_len.tolist(), strict=True):
            r.generated, r.kv_len = g, k

    def remove(self, mask: np.ndarray) -> list[Req]:
        """Take the requests where ``mask`` is True out of the batch (synced) and return them."""
        idx = np.flatnonzero(mask).tolist()
        if not idx:
            return []
        out = [self.reqs[i] for i in idx]
        for i in idx:
            self.reqs[i].generated = int(self.generated[i])
            self.reqs[i].kv_len = int(self.kv_len[i])
        for i in reversed(idx):
            del self.reqs[i]
        keep = ~mask
        for name in (*_FIELDS, "last_loc"):
            setattr(self, name, getattr(self, name)[keep])
        return out

    def new_tokens_required_next_decode(self, page_size: int,
                                        mask: np.ndarray | None = None) -> int:
        """Slots the next decode step needs: requests starting a new page, times ``page_size``.

        A request writes position ``kv_len`` next; it needs a new page when ``kv_len % p == 0``
        (all of them when ``p == 1``). ``mask`` selects a subset (used while retracting).
        Source: ``ScheduleBatch.new_tokens_required_next_decode``.
        """
        return decode_need(self.kv_len if mask is None else self.kv_len[mask], page_size)

    def decode(self, allocator: BaseTokenToKVPoolAllocator, pool: ReqToTokenPool) -> None:
        """One decode step: a slot for every request's newest token, then sample one more.

        Raises:
            OutOfMemoryError: the allocator is short (call :meth:`retract_decode` first).
        Source: ``ScheduleBatch.prepare_for_decode`` (``alloc_for_decode``).
        """
        out = allocator.alloc_decode(self.kv_len + 1, self.last_loc)
        if out is None:
            raise OutOfMemoryError(
                f"decode needs {self.new_tokens_required_next_decode(allocator.page_size)} slots, "
                f"{allocator.available_size()} free: the memory check was skipped")
        self.last_loc = out.numpy()
        pool.req_to_token.numpy()[self.req_pool_idx, self.kv_len] = self.last_loc
        self.kv_len += 1
        self.generated += 1

    def decode_many(self, allocator: BaseTokenToKVPoolAllocator, pool: ReqToTokenPool,
                    steps: int) -> None:
        """``steps`` decode steps at once, with one ``alloc_extend`` from ``kv_len`` to
        ``kv_len + steps`` per request.

        Takes the same number of pages per request as ``steps`` calls of :meth:`decode`; only
        which page ids each request gets differs (the free list is walked request by request
        instead of step by step). The caller must have checked that no request finishes
        before the last step and that the pages fit.

        Raises:
            OutOfMemoryError: the allocator is short.
        """
        out = allocator.alloc_extend(self.kv_len, self.kv_len + steps, self.last_loc,
                                     len(self.reqs) * steps)
        if out is None:
            raise OutOfMemoryError(f"{steps} decode steps do not fit "
                                   f"{allocator.available_size()} free slots")
        rows = np.repeat(self.req_pool_idx, steps)
        positions = (self.kv_len[:, None] + np.arange(steps)).ravel()
        pool.req_to_token.numpy()[rows, positions] = out.numpy()
        self.last_loc = out.numpy()[steps - 1::steps].copy()
        self.kv_len += steps
        self.generated += steps

    def retraction_order(self) -> np.ndarray:
        """Batch indices in the order ``retract_decode`` picks victims.

        Fewest output tokens first; among equals, the longer prompt first.
        Source: ``ScheduleBatch.retract_decode`` (sort by ``(len(output_ids),
        -len(origin_input_ids))``, popped from the small end).
        """
        return np.lexsort((-self.prompt_len, self.generated))

    def retract_decode(self, available_size: int, page_size: int,
                       retract_decode_steps: int) -> tuple[np.ndarray, float]:
        """Choose victims until the rest of the batch's next step fits; return them and a ratio.

        At least one request is retracted. Victims free all their pages, so after
        retracting a request ``available_size`` grows by ``ceil_to_page(kv_len)``.
        The new ``new_token_ratio`` is ``min(1, (sum generated + retract_decode_steps *
        remaining) / (sum max_new_tokens + 1))`` over the requests that stay.

        Returns:
            (bool mask ``[len(reqs)]`` of victims, new ratio). Nothing is freed here: the
            caller releases the victims' KV and rows.
        Raises:
            OutOfMemoryError: a single request cannot take its next step (pool too small).
        Source: ``ScheduleBatch.retract_decode``; ``SGLANG_RETRACT_DECODE_STEPS``.
        """
        victims = np.zeros(len(self.reqs), dtype=bool)
        order = self.retraction_order().tolist()
        p = page_size
        while True:
            if len(order) == 1:
                raise OutOfMemoryError(
                    f"one request alone cannot decode: {available_size} slots free, "
                    f"kv_len={int(self.kv_len[order[0]])}; the pool is too small for it")
            i = order.pop(0)
            victims[i] = True
            available_size += -(-int(self.kv_len[i]) // p) * p
            if self.new_tokens_required_next_decode(p, ~victims) <= available_size:
                break
        stay = ~victims
        return victims, retract_ratio(self.generated[stay], self.max_new_tokens[stay],
                                      retract_decode_steps)


def retract_ratio(decoded: Sequence[int] | np.ndarray, max_new_tokens: Sequence[int] | np.ndarray,
                  retract_decode_steps: int = 20) -> float:
    """``min(1, (sum decoded + steps * n) / (sum max_new_tokens + 1))`` over ``n`` survivors.

    Source: ``ScheduleBatch.retract_decode``; ``SGLANG_RETRACT_DECODE_STEPS``.
    """
    n = len(decoded)
    return min(1.0, (int(np.sum(decoded)) + retract_decode_steps * n) / (int(np.sum(max_new_tokens)) + 1))
