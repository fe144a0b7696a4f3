"""What a forward pass's result does to its requests: sampled tokens, finishes, the tree.

Follows SGLang 0.5.23's ``managers/scheduler_components/batch_result_processor.py``
(``SchedulerBatchResultProcessor.process_batch_result_prefill``,
``process_batch_result_decode``) and 0.5.9's ``scheduler_output_processor_mixin.py`` (the
same two methods). After a prefill pass each request whose prompt is complete samples a token
and is cached in the tree (``cache_unfinished_req``), or, if that token ends it, released
(``release_kv_cache`` with insert); a chunk cut short does nothing here (it is cached at the
start of the next step). After a decode step every request whose latest token ends it is
released, all in one free group. What a finish means for the scheduler (its time, its event,
the turns that follow it) is the scheduler's ``on_finish``, handed in as SGLang hands its
processor ``abort_request``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.common import release_kv_cache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.model_executor.forward_batch_info import ForwardBatch


@dataclass(slots=True, kw_only=True, frozen=True)
class SchedulerBatchResultProcessor:
    """Applies a pass's result to its requests and frees what finished.

    Attributes:
        token_to_kv_pool_allocator, req_to_token_pool, tree_cache: the pools and the tree.
        group_prefill_frees: a prefill's frees go in one free group (``Release`` field).
        samples_tokens: the executor samples the tokens (a real model), so a request may
            also stop at an EOS token; False: requests stop at their workload length.
        eos_token_ids: tokens that end a request that does not ignore EOS.
        on_finish: called for each request once it has released its KV.
    """

    token_to_kv_pool_allocator: BaseTokenToKVPoolAllocator
    req_to_token_pool: ReqToTokenPool
    tree_cache: RadixCache | ChunkCache
    group_prefill_frees: bool
    samples_tokens: bool
    eos_token_ids: frozenset[int]
    on_finish: Callable[[Req], None]

    def hit_eos(self, req: Req) -> bool:
        """Whether a real model's latest token is an end-of-sequence token (and counts)."""
        return (not req.ignore_eos and bool(req.output_ids)
                and req.output_ids[-1] in self.eos_token_ids)

    def append_token(self, req: Req, token: int | None) -> None:
        """``req`` sampled one more token (``token`` from a real model, else None); mark it
        finished if that ends it (``Req.check_finished``)."""
        req.generated += 1
        if token is not None:
            req.output_ids.append(token)
        reason = req.should_stop() or ("stop" if token is not None and self.hit_eos(req) else "")
        if reason:
            req.finished, req.finish_reason = True, reason

    def process_batch_result_prefill(self, batch: ForwardBatch, tokens: np.ndarray | None,
                                     clock: float) -> list[Req]:
        """The pass ``batch`` ended at ``clock`` (seconds) and sampled ``tokens`` (int64
        ``[bs]``, or None from the simulator). Returns the requests that sampled and go on
        running, in batch order (the caller merges them into the running batch)."""
        group = self.group_prefill_frees
        if group:
            self.token_to_kv_pool_allocator.free_group_begin()
        done: list[Req] = []
        for i, req in enumerate(batch.reqs):
            if not batch.sample[i]:
                continue
            self.append_token(req, None if tokens is None else int(tokens[i]))
            if req.first_token_s is None:
                req.first_token_s = clock
            if req.finished:
                release_kv_cache(req, self.tree_cache, self.req_to_token_pool, is_insert=True)
                self.on_finish(req)
            else:
                self.tree_cache.cache_unfinished_req(req)
                done.append(req)
        if group:
            self.token_to_kv_pool_allocator.free_group_end()
        return done

    def process_batch_result_decode(self, batch: ScheduleBatch) -> None:
        """Release every request of ``batch`` whose latest token ends it (one free group)
        and mark it finished in the batch (0.5.9 drops it at the next step's filter)."""
        stop = batch.stopping()
        if self.samples_tokens:
            stop |= np.fromiter((self.hit_eos(r) for r in batch.reqs), bool, len(batch))
        if not stop.any():
            return
        self.token_to_kv_pool_allocator.free_group_begin()
        for i in np.flatnonzero(stop).tolist():
            req = batch.reqs[i]
            batch.sync([i])
            req.finish_reason = req.should_stop() or "stop"
            req.finished = True
            release_kv_cache(req, self.tree_cache, self.req_to_token_pool, is_insert=True)
            self.on_finish(req)
        self.token_to_kv_pool_allocator.free_group_end()
        batch.finished |= stop
