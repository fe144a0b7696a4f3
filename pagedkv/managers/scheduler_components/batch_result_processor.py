"""What a forward pass's result does to its requests: sampled tokens, finishes, the tree.

Follows SGLang 0.5.23's ``managers/scheduler_components/batch_result_processor.py``
(``SchedulerBatchResultProcessor.process_batch_result_prefill``,
``process_batch_result_decode``) and 0.5.9's ``scheduler_output_processor_mixin.py`` (the
same two methods), which serve both of SGLang's loops. After a prefill pass each request whose
prompt is complete samples a token and is cached in the tree (``cache_unfinished_req``, up to
the pass's extend end), or, if that token ends it, released (``release_kv_cache`` with
insert); a chunk cut short does nothing here (it is cached at the start of the next step).
After a decode step every request whose latest token ends it is released, all in one free
group. The normal loop processes a pass right after it runs; the overlap loop a step later
(:class:`InFlight`, :meth:`SchedulerBatchResultProcessor.process_batch_result`), when its
requests are already in the running batch (their columns get the token) and some may have
finished or been retracted meanwhile (their result is dropped). What a finish means for the
scheduler (its time, its event, the turns that follow it) is ``on_finish``
(``SchedulerRequestTracker.finish`` at the scheduler's step and clock), handed in as SGLang
hands its processor ``abort_request``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.common import release_kv_cache
from pagedkv.mem_cache.mamba_track import process_decode_track
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.model_executor.forward_batch_info import ForwardBatch

FINISHED, RETRACTED = attrgetter("finished"), attrgetter("is_retracted")  # read in C, per request


@dataclass
class InFlight:
    """A launched batch whose result has not been processed (SGLang's ``result_queue``
    entry): the pass, its sampled tokens (None: the simulator samples none), for a decode
    step its number (for the decode log), and ``end_s``, the clock (seconds) at which the
    pass ends: its tokens exist from then, though the loop processes them after launching
    the next pass."""

    batch: ForwardBatch
    tokens: np.ndarray | None
    decode_step: int = 0
    end_s: float = 0.0


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

    def append_token(self, req: Req, token: int | None, running: ScheduleBatch | None = None,
                     i: int | None = None) -> bool:
        """``req`` sampled one more token (``token`` from a real model, else None); mark it
        finished if that ends it (``Req.check_finished``) and return whether it did.
        ``running``, ``i``: the running batch and ``req``'s index in it, if it is there (the
        overlap loop): its columns count the token."""
        if i is not None and running is not None:
            running.generated[i] += 1
            running.sync([i])
        else:
            req.generated += 1
        if token is not None:
            req.output_ids.append(token)
        reason = req.should_stop() or ("stop" if token is not None and self.hit_eos(req) else "")
        if reason:
            req.finished, req.finish_reason = True, reason
            if i is not None and running is not None:
                running.finished[i] = True
        return bool(reason)

    def process_batch_result_prefill(self, batch: ForwardBatch, tokens: np.ndarray | None,
                                     clock: float, running: ScheduleBatch | None = None
                                     ) -> list[Req]:
        """The pass ``batch`` ended by ``clock`` (seconds) and sampled ``tokens`` (int64
        ``[bs]``, or None from the simulator). Returns the requests that sampled and go on
        running, in batch order (the normal loop merges them into the running batch).
        ``running``: the running batch the pass's requests already joined (the overlap
        loop); a request finished or retracted since the launch is skipped."""
        group = self.group_prefill_frees
        if group:
            self.token_to_kv_pool_allocator.free_group_begin()
        # a request still live holds the row it was launched with: that finds it in ``running``
        index = ([-1] * len(batch.reqs) if running is None
                 else running.live_index(batch.req_pool_indices).tolist())
        table = self.req_to_token_pool.req_to_token.numpy()
        ends = (batch.prefix_lens + batch.extend_lens).tolist()
        done: list[Req] = []
        for i, req in enumerate(batch.reqs):
            if not batch.sample[i] or req.finished or req.is_retracted:
                continue
            if req.first_token_s is None:
                req.first_token_s = clock
            j = index[i] if index[i] >= 0 else None
            if self.append_token(req, None if tokens is None else int(tokens[i]), running, j):
                release_kv_cache(req, self.tree_cache, self.req_to_token_pool, is_insert=True)
                self.on_finish(req)
                continue
            self.tree_cache.cache_unfinished_req(req, up_to=ends[i])  # checkpoint_kv_cache
            done.append(req)
            if j is not None and running is not None:  # the tree may repoint the row to its pages
                running.last_loc[j] = table[req.req_pool_idx, running.kv_len[j] - 1]
        if group:
            self.token_to_kv_pool_allocator.free_group_end()
        return done

    def process_batch_result_decode(self, batch: ScheduleBatch) -> None:
        """Release every request of ``batch`` whose latest token ends it (one free group)
        and mark it finished in the batch (0.5.9 drops it at the next step's filter)."""
        track = batch.mamba_track
        if track is not None:  # the states the step recorded, before any finish is cached
            batch.mamba_track = None
            kv = batch.kv_len.tolist()
            for i, req in enumerate(batch.reqs):
                process_decode_track(req, i, track, kv[i], self.req_to_token_pool)
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

    def process_batch_result_decode_in_flight(self, f: InFlight, running: ScheduleBatch) -> None:
        """The overlap loop's decode result: each request still live commits its token
        (in ``running``'s columns if it is there, as the normal loop's decode step does, the
        :class:`Req` brought up to date when it finishes; else on the request); those it ends
        release their KV, in batch order (one free group). A request already finished (seen
        a step late) or retracted is skipped: its slot of this step was freed with the rest
        of its KV. The batch's requests are read once; the tokens are counted on the columns
        (a decode step's cost must not grow with Python work per request)."""
        reqs, n = f.batch.reqs, len(f.batch.reqs)
        live = ~(np.fromiter(map(FINISHED, reqs), bool, n) | np.fromiter(map(RETRACTED, reqs), bool, n))
        where = np.where(live, running.live_index(f.batch.req_pool_indices), -1)
        inside = where >= 0
        cols = where[inside]
        running.generated[cols] += 1
        ends = np.zeros(n, dtype=bool)
        ends[inside] = running.generated[cols] >= running.stop_at[cols]  # Req.should_stop
        for i in np.flatnonzero(live & ~inside).tolist():  # left out of the running batch
            reqs[i].generated += 1
            ends[i] = bool(reqs[i].should_stop())
        if f.tokens is not None:  # a real model's tokens, and its EOS
            for i, token in zip(np.flatnonzero(live).tolist(), f.tokens[live].tolist(), strict=True):
                reqs[i].output_ids.append(int(token))
                ends[i] |= self.hit_eos(reqs[i])
        track = f.batch.mamba_track
        if track is not None:  # the states the step recorded, before any finish is cached
            for i in np.flatnonzero(live).tolist():
                j = int(where[i])
                kv = int(running.kv_len[j]) if j >= 0 else reqs[i].kv_committed_len
                process_decode_track(reqs[i], i, track, kv, self.req_to_token_pool)
        self.token_to_kv_pool_allocator.free_group_begin()
        for i in np.flatnonzero(ends).tolist():
            req, j = reqs[i], int(where[i])
            if j >= 0:
                running.sync([j])
                running.finished[j] = True
            req.finished, req.finish_reason = True, req.should_stop() or "stop"
            release_kv_cache(req, self.tree_cache, self.req_to_token_pool, is_insert=True)
            self.on_finish(req)
        self.token_to_kv_pool_allocator.free_group_end()

    def process_batch_result(self, f: InFlight, clock: float, running: ScheduleBatch) -> int:
        """The overlap loop's ``process_batch_result`` for the batch in flight, at ``clock``
        (seconds). Returns the tokens a prefill's result sampled (a decode's were counted at
        launch: 0)."""
        if f.batch.mode != "extend":
            self.process_batch_result_decode_in_flight(f, running)
            return 0
        sampled = sum(bool(s) and not r.finished and not r.is_retracted
                      for r, s in zip(f.batch.reqs, f.batch.sample.tolist(), strict=True))
        self.process_batch_result_prefill(f.batch, f.tokens, clock, running)
        return sampled
