"""The prefill pass: whom a pass admits, the request carried from chunk to chunk, its log line.

Follows SGLang 0.5.23's ``python/sglang/srt/managers/scheduler.py``
(``get_new_batch_prefill`` / ``_get_new_batch_prefill_raw``, ``get_num_allocatable_reqs``,
``stash_chunked_request`` and the ``chunked_req`` it keeps) and the prefill line of
``scheduler_components/metrics_reporter.py`` (``report_prefill_stats``); 0.5.9 where a
:class:`~pagedkv.releases.Release` field says. SGLang keeps this job on its ``Scheduler``;
pagedkv makes it a component, as mini-sglang's ``PrefillManager``, so that ``scheduler.py``
holds the loop: ``Scheduler.get_new_batch_prefill`` calls
:meth:`PrefillManager.get_new_batch_prefill`. Each pass builds a
:class:`~pagedkv.managers.schedule_policy.PrefillAdder`, offers it the carried chunk first
and then the waiting queue in FCFS order, and prepares what it admitted
(``ScheduleBatch.init_new``, ``prepare_for_extend``).

Where we simplify: FCFS only (no priorities, no preemption, no prefill delayer, no dynamic
chunk size, no LoRA or grammar queue).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.schedule_policy import AddReqResult, PrefillAdder
from pagedkv.managers.scheduler_components.metrics_reporter import SchedulerMetricsReporter
from pagedkv.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
from pagedkv.managers.scheduler_components.request_tracker import SchedulerRequestTracker
from pagedkv.managers.scheduler_components.waiting_queue import WaitingQueue
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.mamba_cache import MambaPrefixCache
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.mem_cache.swa_cache import SWAPrefixCache
from pagedkv.model_executor.forward_batch_info import ForwardBatch


class PrefillPass(NamedTuple):
    """A prefill pass chosen and prepared (SGLang's new batch after ``prepare_for_extend``),
    its adder (the log line's numbers) and the running batch's size when it was chosen."""

    batch: ForwardBatch
    adder: PrefillAdder
    running_bs: int


@dataclass(slots=True, kw_only=True)
class PrefillManager:
    """Chooses and prepares prefill passes; holds the request being chunked.

    Attributes:
        config: the scheduler's constants, policy and release.
        max_running_requests: the running batch's size limit.
        req_to_token_pool, token_to_kv_pool_allocator, tree_cache: the pools and the tree.
        waiting: the waiting queue (admission walks it; the admitted leave it).
        ratio_tracker: ``new_token_ratio``, what the running batch reserves.
        request_tracker: records the admitted and the chunked.
        metrics_reporter: the prefill log line.
        is_hybrid_swa: a sliding-window hybrid (SGLang clears ``batch_is_full`` every pass).
        chunked_req: the request whose prompt is being prefilled chunk by chunk (SGLang's
            ``chunked_req``); None: none.
    """

    config: SchedulerConfig
    max_running_requests: int
    req_to_token_pool: ReqToTokenPool
    token_to_kv_pool_allocator: BaseTokenToKVPoolAllocator | SWATokenToKVPoolAllocator
    tree_cache: RadixCache | ChunkCache | SWAPrefixCache
    waiting: WaitingQueue
    ratio_tracker: NewTokenRatioTracker
    request_tracker: SchedulerRequestTracker
    metrics_reporter: SchedulerMetricsReporter
    is_hybrid_swa: bool
    chunked_req: Req | None = None

    def num_allocatable_reqs(self, running_bs: int, held_rows: int = 0) -> int:
        """``max_running_requests - running_bs`` (0.5.23: also at most the free rows plus
        ``held_rows``, rows held by requests counted against the result: a continuing chunk
        in the admitted list; a linear-attention hybrid: also at most the free state slots
        plus ``held_rows``, pagedkv's own bound: SGLang's rows never outnumber its slots,
        but pagedkv's 0.5.9 pool keeps a row more). Source: ``get_num_allocatable_reqs``."""
        n = self.max_running_requests - running_bs
        if self.config.release.allocatable_counts_free_rows:
            n = min(n, self.req_to_token_pool.available_size() + held_rows)
        if (isinstance(self.req_to_token_pool, HybridReqToTokenPool)
                and not isinstance(self.tree_cache, MambaPrefixCache)):  # the tree evicts states
            slots = self.req_to_token_pool.mamba_allocator  # those taken ahead are free too
            n = min(n, slots.available_size() + slots.taken_ahead + held_rows)
        return n

    def stash_chunked_request(self) -> None:
        """The chunk computed so far goes into the tree (``cache_unfinished_req``) before the
        next pass. Source: ``Scheduler.stash_chunked_request``."""
        chunked = self.chunked_req
        # a chunk parked by a sliding-window hybrid's admission computed nothing: no stash
        if chunked is not None and chunked.kv_committed_len > chunked.prefix_len:
            self.tree_cache.cache_unfinished_req(chunked)

    def get_new_batch_prefill(self, running: ScheduleBatch, step: int,
                              clock: float) -> PrefillPass | None:
        """SGLang's ``get_new_batch_prefill`` beside the ``running`` batch, at ``step`` and
        ``clock`` seconds: the chunked request first (always admitted), then the queue in
        FCFS order, each matched against the tree, until one does not fit; the admitted
        leave the queue and the pass is prepared. None: nobody admitted. Sets
        ``running.batch_is_full`` when the pass stops for memory (0.5.23: only if something
        is admitted or running) or for request rows. A linear-attention hybrid's pass (0.5.23)
        takes one state slot ahead per waiting request and puts the unused ones back at the
        end of the free list (``Release.mamba_slots_taken_ahead``)."""
        release = self.config.release
        busy_rule = release.batch_full_only_when_busy
        if self.is_hybrid_swa or (busy_rule and not len(running)):  # SGLang: every pass on SWA
            running.batch_is_full = False
        if (running.batch_is_full or not self.waiting) and self.chunked_req is None:
            return None
        running_bs, chunked = len(running), self.chunked_req
        carried = int(chunked is not None and chunked.req_pool_idx >= 0)  # its row and slot
        if self.num_allocatable_reqs(running_bs, carried) <= 0 and (chunked is None) == busy_rule:
            running.batch_is_full = True
            return None
        if release.touch_waiting_prefixes:
            self.waiting.touch_waiting_prefixes(self.tree_cache)
        adder = PrefillAdder(self.config, self.tree_cache, self.token_to_kv_pool_allocator,
                             running, self.ratio_tracker.current)
        if self.chunked_req is not None:
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        hybrid = (isinstance(self.req_to_token_pool, HybridReqToTokenPool)
                  and release.mamba_slots_taken_ahead)
        if hybrid:  # slots taken ahead for the pass; unused ones go back to the list's end
            self.req_to_token_pool.mamba_allocator.alloc_group_begin(len(self.waiting))
        for req in self.waiting:
            if release.stop_pass_at_spent_budget and adder.budget_state() is AddReqResult.OTHER:
                break
            # a carried chunk holds its row whether or not this pass finishes it (SGLang
            # counts ``req.kv.holds_kv`` over the admitted list, not ``chunked_req``)
            held = sum(r.req_pool_idx >= 0 for r in adder.can_run_list)
            if len(adder.can_run_list) >= self.num_allocatable_reqs(running_bs, held):
                running.batch_is_full = True
            if running.batch_is_full:
                break
            req.init_next_round_input(self.tree_cache)
            result = adder.add_one_req(req)
            if result is not AddReqResult.CONTINUE:
                if result is AddReqResult.NO_TOKEN:
                    running.batch_is_full = (not busy_rule or bool(adder.can_run_list)
                                             or bool(len(running)))
                not_added = not adder.can_run_list or adder.can_run_list[-1] is not req
                if not_added and req.mamba_pool_idx >= 0:  # its match's state slot goes back
                    self.req_to_token_pool.mamba_allocator.free([req.mamba_pool_idx])
                    req.mamba_pool_idx = -1
                break
        if hybrid:
            self.req_to_token_pool.mamba_allocator.alloc_group_end()
        if not adder.can_run_list:
            return None
        if adder.new_chunked_req is not None:
            self.chunked_req = adder.new_chunked_req
        self.request_tracker.admit(adder.can_run_list, adder.new_chunked_req, step, clock)
        batch = ScheduleBatch.init_new(adder.can_run_list, self.req_to_token_pool,
                                       self.token_to_kv_pool_allocator, self.tree_cache)
        return PrefillPass(batch.prepare_for_extend(self.chunked_req), adder, running_bs)

    def log_prefill(self, prefill: PrefillPass, step: int, seconds: float) -> None:
        """SGLang's prefill line for the pass at ``step`` that took ``seconds`` (after its
        result in the normal loop, at its launch in the overlap loop), with the tokens the
        request being chunked has still to prefill."""
        c = self.chunked_req
        self.metrics_reporter.report_prefill_stats(
            step, prefill.adder, prefill.running_bs, int(prefill.batch.extend_lens.sum()),
            seconds, 0 if c is None else c.fill_len - c.kv_committed_len)
