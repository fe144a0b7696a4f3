"""Prefill passes: build one with ``PrefillAdder`` and run it through the real allocator.

Follows ``python/sglang/srt/managers/scheduler.py`` (``get_new_batch_prefill``) and
``schedule_batch.py`` (``prepare_for_extend``: ``alloc_extend`` and the ``req_to_token``
writes). A request admitted for the first time, or again after a retraction, leaves the front
of the waiting queue and takes a ``req_to_token`` row; a chunked request keeps its row between
chunks. Every request whose prompt (plus kept output, after a retraction) is complete samples
one token and joins the running batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pagedkv.errors import OutOfMemoryError
from pagedkv.managers.schedule_policy import AddReqResult, PrefillAdder, ceil_to_page

if TYPE_CHECKING:
    from pagedkv.managers.scheduler import Scheduler


def get_new_batch_prefill(s: Scheduler) -> PrefillAdder | None:
    """SGLang's ``get_new_batch_prefill``: the pass's adder, or None if nobody is admitted.

    Sets ``batch_is_full`` when the pass stops for memory (NO_TOKEN) or for request slots.
    """
    if (s.running.batch_is_full or not s.waiting) and s.chunked_req is None:
        return None
    allocatable = s.max_running_requests - len(s.running)
    if allocatable <= 0 and s.chunked_req is None:
        s.running.batch_is_full = True
        return None
    adder = PrefillAdder(s.config, s.page_size, s.allocator.available_size(),
                         s.tokens_reserved)
    if s.chunked_req is not None:
        s.chunked_req = adder.add_chunked_req(s.chunked_req)
    for req in s.waiting:
        if len(adder.can_run_list) >= allocatable:
            s.running.batch_is_full = True
            break
        result = adder.add_one_req(req)
        if result is not AddReqResult.CONTINUE:
            if result is AddReqResult.NO_TOKEN:
                s.running.batch_is_full = True
            break
    if adder.new_chunked_req is not None:
        s.chunked_req = adder.new_chunked_req
    return adder if adder.can_run_list else None


def run_prefill(s: Scheduler, adder: PrefillAdder) -> None:
    """Allocate and write the admitted requests' KV; their first token is sampled."""
    step, start, p = s.num_steps, s.clock, s.page_size
    admitted = adder.can_run_list
    table = s.req_to_token_pool.req_to_token.numpy()  # a view: writes reach the pool
    for adm in admitted:
        req = adm.req
        if req.req_pool_idx < 0:  # new or retracted: leaves the queue, gets a row
            if s.waiting.popleft() is not req:
                raise AssertionError("admitted requests must be a prefix of the queue")
            req.req_pool_idx = s.req_to_token_pool.alloc(1)[0]
            req.queue_s += start - req.enqueued_s
            if req.first_admit_s is None:
                req.first_admit_s = start
            kind = "admit" if req.generated == 0 else "reprefill"
            s.trace.event(step, kind, req.rid, {"extend": adm.extend_len,
                                                "charge": adm.charge})
        if adm.truncated or req.kv_len > 0:
            s.trace.event(step, "chunk", req.rid, {"prefix": req.kv_len,
                                                   "tokens": adm.extend_len})
    prefix = np.fromiter((a.req.kv_len for a in admitted), np.int64, len(admitted))
    ext = np.fromiter((a.extend_len for a in admitted), np.int64, len(admitted))
    rows = np.fromiter((a.req.req_pool_idx for a in admitted), np.int64, len(admitted))
    last = np.full(len(admitted), -1, dtype=np.int64)
    chunked = prefix > 0  # a chunk continues a request whose earlier chunks hold slots
    if chunked.any():
        last[chunked] = table[rows[chunked], prefix[chunked] - 1]
    total = int(ext.sum())
    out = s.allocator.alloc_extend(prefix, prefix + ext, last, total)
    if out is None:
        raise OutOfMemoryError(f"prefill of {total} tokens does not fit "
                               f"{s.allocator.available_size()} free slots")
    # req_to_token[row, prefix .. prefix + ext - 1] = the new slots, for every request
    ends = np.cumsum(ext)
    positions = np.arange(total) - np.repeat(ends - ext - prefix, ext)
    slots = out.numpy()
    table[np.repeat(rows, ext), positions] = slots
    s.clock += s.step_time.prefill_s(total, s.tokens_used)
    done, done_last = [], []
    for adm, end in zip(admitted, ends.tolist(), strict=True):
        req = adm.req
        req.kv_len += adm.extend_len
        if not adm.truncated:
            req.generated += 1
            if req.first_token_s is None:
                req.first_token_s = s.clock
            done.append(req)
            done_last.append(int(slots[end - 1]))
    s.decoded += len(done)
    s.running.add(done, done_last)
    s.finish(s.running.generated >= s.running.output_len)
    usage = (s.max_total_num_tokens - s.allocator.available_size()) / s.max_total_num_tokens
    s.trace.add_log(step, f"Prefill batch. #new-seq: {len(admitted)}, #new-token: "
                          f"{sum(ceil_to_page(a.extend_len, p) for a in admitted)}, "
                          f"#cached-token: 0, token usage: {usage:.2f}, #running-req: "
                          f"{len(s.running)}, #queue-req: {len(s.waiting)}")
