"""Prefill passes: choose them with ``PrefillAdder``, give them slots, cache their prompts.

Follows SGLang's ``python/sglang/srt/managers/scheduler.py`` (``get_new_batch_prefill`` /
``_get_new_batch_prefill_raw``), ``schedule_batch.py`` (``Req.init_next_round_input``,
``prepare_for_extend``) and ``schedule_policy.py`` (``calc_priority``). A mixin of
:class:`~pagedkv.managers.scheduler.Scheduler`.

A pass: the chunked request (if any) goes first and is always admitted; then the waiting
queue in FCFS order, each request matched against the tree (at most all but its last token:
one token must be computed to get the next token's logits), until a request does not fit.
Admitted requests leave the queue and get a ``req_to_token`` row; their prefix slots are
written into it and the rest is allocated (evicting from the tree first if short). After the
forward pass each request whose prompt is complete samples a token and is cached
(``cache_unfinished_req``), or released if that token ends it
(:class:`~pagedkv.managers.scheduler_components.SchedulerBatchResultProcessor`).
"""

from __future__ import annotations

import numpy as np

from pagedkv.errors import OutOfMemoryError
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_policy import AddReqResult, PrefillAdder
from pagedkv.managers.scheduler_state import SchedulerState
from pagedkv.managers.trace import Event
from pagedkv.model_executor.forward_batch_info import ForwardBatch

WAITING_PREFIX_REFRESH_INTERVAL = 32  # 0.5.23: refresh waiting prefixes every 32 passes
WAITING_PREFIX_REFRESH_REQS = 128  # ... of the first 128 waiting requests
_NO_KEY = np.empty(0, dtype=np.int64)


class SchedulerPrefillMixin(SchedulerState):
    """Prefill-side methods of the scheduler (state lives on the scheduler)."""

    def num_allocatable_reqs(self, running_bs: int, held_rows: int = 0) -> int:
        """``max_running_requests - running_bs`` (0.5.23: also at most the free rows plus
        ``held_rows``, the rows already held by requests counted against the result: a
        continuing chunk in the pass's admitted list).
        Source: ``Scheduler.get_num_allocatable_reqs`` (``num_held_rows``)."""
        n = self.max_running_requests - running_bs
        if self.config.release.allocatable_counts_free_rows:
            n = min(n, self.req_to_token_pool.available_size() + held_rows)
        return n

    def _touch_waiting_prefixes(self) -> None:
        """0.5.23, FCFS with the tree on: every 32nd pass, mark the prefixes of the first 128
        waiting requests as just used (head last). Source: ``SchedulePolicy.
        _touch_waiting_prefixes``."""
        if (not self.config.release.touch_waiting_prefixes or self.tree_cache.disable
                or not self.waiting):
            return
        refresh = self._refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0
        self._refresh_calls += 1
        if refresh:
            head = [self.waiting[i] for i in range(min(WAITING_PREFIX_REFRESH_REQS, len(self.waiting)))]
            for req in reversed(head):
                self.tree_cache.touch_prefix(req.token_ids(req.fill_len))

    def init_next_round_input(self, req: Req) -> None:
        """Match ``req``'s prompt + output so far (all but the last token) against the tree.
        Source: ``Req.init_next_round_input``."""
        # a disabled cache (ChunkCache) never matches: its key need not be built
        key = _NO_KEY if self.tree_cache.disable else req.token_ids(max(req.fill_len - 1, 0))
        match = self.tree_cache.match_prefix(key)
        req.prefix_len = req.cache_protected_len = len(match.device_indices)
        req.last_node = match.last_device_node
        req._prefix_slots = match.device_indices

    def get_new_batch_prefill(self) -> PrefillAdder | None:
        """SGLang's ``get_new_batch_prefill``: the pass's adder, or None if nobody is admitted.

        Sets ``batch_is_full`` when the pass stops for memory (0.5.23: only if something is
        admitted or running) or for request rows.
        """
        busy_rule = self.config.release.batch_full_only_when_busy
        running = self.running
        if busy_rule and not len(running):
            running.batch_is_full = False
        if (running.batch_is_full or not self.waiting) and self.chunked_req is None:
            return None
        running_bs = len(running)
        allocatable = self.num_allocatable_reqs(running_bs)
        if allocatable <= 0 and (self.chunked_req is None) == busy_rule:
            running.batch_is_full = True
            return None
        self._touch_waiting_prefixes()
        adder = PrefillAdder(self.config, self.tree_cache, self.allocator, running,
                             self.new_token_ratio)
        if self.chunked_req is not None:
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting:
            if (self.config.release.stop_pass_at_spent_budget
                    and adder.budget_state() is AddReqResult.OTHER):
                break
            # a carried chunk holds its row whether or not this pass finishes it (SGLang
            # counts ``req.kv.holds_kv`` over the admitted list, not ``chunked_req``)
            held = sum(r.req_pool_idx >= 0 for r in adder.can_run_list)
            if len(adder.can_run_list) >= self.num_allocatable_reqs(running_bs, held):
                running.batch_is_full = True
            if running.batch_is_full:
                break
            self.init_next_round_input(req)
            result = adder.add_one_req(req)
            if result is not AddReqResult.CONTINUE:
                if result is AddReqResult.NO_TOKEN:
                    running.batch_is_full = (not busy_rule or bool(adder.can_run_list)
                                             or bool(len(running)))
                break
        if not adder.can_run_list:
            return None
        if adder.new_chunked_req is not None:
            self.chunked_req = adder.new_chunked_req
        return adder

    def run_prefill(self, adder: PrefillAdder) -> None:
        """``prepare_for_extend``, the forward pass and ``process_batch_result_prefill``."""
        running_bs = len(self.running)
        batch = self.prepare_prefill(adder)
        result = self.executor.forward(batch)
        self.clock += result.seconds
        done = self.batch_result_processor.process_batch_result_prefill(
            batch, result.next_token_ids, self.clock)
        self.decoded += int(batch.sample.sum())
        # SGLang merges the pass into the running batch at the start of the next step; no
        # one looks in between, so it is done here. A pass that lost requests (finished, or
        # the chunked one held back) clears batch_is_full, and so does an empty running
        # batch (SGLang makes the pass the new running batch).
        running = self.running
        if len(done) < len(batch.reqs) or not len(running):
            running.batch_is_full = False
        running.merge(done)
        self.log_prefill(adder, running_bs, int(batch.extend_lens.sum()), result.seconds)

    def log_prefill(self, adder: PrefillAdder, running_bs: int, extend_tokens: int,
                    seconds: float) -> None:
        """SGLang's prefill line for the pass just run (after its result, in the normal
        loop; after its launch, in the overlap loop)."""
        c = self.chunked_req
        self.metrics_reporter.report_prefill_stats(
            self.num_steps, adder, running_bs, extend_tokens, seconds,
            0 if c is None else c.fill_len - c.kv_committed_len)

    def prepare_prefill(self, adder: PrefillAdder) -> ForwardBatch:
        """``prepare_for_extend``: admitted requests leave the queue and get a row, their
        prefix slots and the slots of the tokens they compute now; returns the pass.

        Raises:
            OutOfMemoryError: the allocator is short (admission should have prevented it).
        """
        step, start, p = self.num_steps, self.clock, self.allocator.page_size
        admitted = adder.can_run_list
        table = self.req_to_token_pool.req_to_token.numpy()  # a view: writes reach the pool
        for req in admitted:
            if req.req_pool_idx >= 0:  # the chunked request keeps its row
                self.trace.record_event(Event(step, "chunk", req.rid, {"prefix": req.prefix_len,
                                                                       "tokens": req.extend_len}))
                continue
            if self.waiting.popleft() is not req:
                raise AssertionError("admitted requests must be a prefix of the queue (FCFS)")
            req.is_retracted = False
            req.req_pool_idx = self.req_to_token_pool.alloc(1)[0]
            table[req.req_pool_idx, :req.prefix_len] = req._prefix_slots
            req._prefix_slots = None  # used once; kept, a million finished requests would hold a tensor each
            req.queue_s += start - req.enqueued_s
            req.cached_tokens += req.prefix_len
            if req.first_admit_s is None:
                req.first_admit_s = start
            if req.admitted_before:  # its freed KV, less what the tree still had, is computed again
                req.recomputed_tokens += req.fill_len - 1 - req.prefix_len
            kind = "reprefill" if req.admitted_before else "admit"
            req.admitted_before = True
            self.trace.record_event(Event(step, kind, req.rid, {"extend": req.extend_len,
                                                                "cached": req.prefix_len}))
            if req is adder.new_chunked_req:
                self.trace.record_event(Event(step, "chunk", req.rid, {"prefix": req.prefix_len,
                                                                       "tokens": req.extend_len}))
        n = len(admitted)
        prefix_l = [r.prefix_len for r in admitted]
        ext_l = [r.extend_len for r in admitted]
        rows_l = [r.req_pool_idx for r in admitted]
        prefix, ext, rows = (np.array(v, dtype=np.int64) for v in (prefix_l, ext_l, rows_l))
        total = sum(ext_l)
        # the slot of each request's last cached token (-1: none), for its partial page
        last = np.array([table[row, pre - 1] if pre else -1
                         for row, pre in zip(rows_l, prefix_l, strict=True)], dtype=np.int64)
        self.tree_cache.evict_from_tree_cache(total if p == 1 else total + n * p)
        out = self.allocator.alloc_extend(prefix, prefix + ext, last, total)
        if out is None:
            raise OutOfMemoryError(f"prefill of {total} tokens does not fit "
                                   f"{self.allocator.available_size()} free slots")
        slots = out.numpy()
        start = 0
        for req, row, pre, e in zip(admitted, rows_l, prefix_l, ext_l, strict=True):
            table[row, pre:pre + e] = slots[start:start + e]
            start += e
            req.kv_committed_len = pre + e
        sample = np.array([r is not self.chunked_req for r in admitted], dtype=bool)
        return ForwardBatch("extend", list(admitted), rows, prefix, ext, slots, sample,
                            sum(prefix_l), self.req_to_token_pool)
