"""The trace's row for each step: the pool's and the queues' numbers, and the page tables.

pagedkv's own part: SGLang samples the same numbers for its metrics and logs (0.5.23's
``managers/scheduler_components/pool_stats_observer.py``, ``SchedulerPoolStatsObserver``:
available, evictable and protected sizes, running and queued requests); pagedkv writes them
down after every step as a :class:`~pagedkv.managers.trace.StepRow` (the columns are
described in :mod:`pagedkv.managers.trace`), and, for small pools, every request's page table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
from pagedkv.managers.scheduler_components.waiting_queue import WaitingQueue
from pagedkv.managers.trace import StepRow, Trace
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache

PageTable = list[list[object]]  # [[rid, kv_len, [page ids]], ...]


@dataclass(slots=True, kw_only=True)
class SchedulerStepRecorder:
    """Writes one :class:`StepRow` per step (and the page tables, if the trace keeps them).

    Attributes:
        trace: where rows go (a :class:`SummaryTrace` counts them).
        page_size, max_total_num_tokens: the pool's page size and slots.
        token_to_kv_pool_allocator, req_to_token_pool, tree_cache: the pools and the tree.
        waiting: the waiting queue (``num_waiting``).
        ratio_tracker: ``new_token_ratio``.
    """

    trace: Trace | SummaryTrace
    page_size: int
    max_total_num_tokens: int
    token_to_kv_pool_allocator: BaseTokenToKVPoolAllocator
    req_to_token_pool: ReqToTokenPool
    tree_cache: RadixCache | ChunkCache
    waiting: WaitingQueue
    ratio_tracker: NewTokenRatioTracker

    def record(self, step: int, clock: float, kind: str, running: ScheduleBatch,
               chunked: Req | None, tokens_reserved: Callable[[], float],
               joining: Sequence[Req] = ()) -> None:
        """Step ``step``'s row, read now (at its end), and its page tables.

        Args:
            step, clock: the step and the clock (seconds) at its end.
            kind: ``"prefill"``, ``"decode"`` or ``"idle"``.
            running: the running batch (0.5.9 keeps finished requests in it until the next
                step: they are not counted); chunked: the request being chunked, or None.
            tokens_reserved: what admission holds back now; called only for a trace that
                keeps rows (a summary trace does not read it).
        """
        if running.finished.any():
            live_mask = ~running.finished
            live, used = int(np.count_nonzero(live_mask)), int(running.kv_len[live_mask].sum())
        else:
            live, used = len(running), int(running.kv_len.sum())
        if chunked is not None:
            live, used = live + 1, used + chunked.kv_committed_len
        used += sum(r.kv_committed_len for r in joining)
        reserved = tokens_reserved() if self.trace.records_steps else 0.0
        self.record_row(step, clock, kind, used, reserved,
                        self.token_to_kv_pool_allocator.full_available_size(), live)
        if self.trace.page_tables is not None:
            self.trace.page_tables.append(self.page_tables(running, chunked, joining))

    def record_row(self, step: int, clock: float, kind: str, used: int, reserved: float,
                   free: int, num_running: int) -> None:
        """One row from numbers the caller knows (a fast-forward window's middle steps);
        the tree's split, the queue and the ratio are read now."""
        tree = self.tree_cache
        self.trace.record_step(StepRow(
            step, clock, kind, used, reserved, free,
            (self.max_total_num_tokens - free) // self.page_size, num_running,
            len(self.waiting), self.ratio_tracker.current, tree.evictable_size(),
            tree.protected_size()))

    def page_tables(self, running: ScheduleBatch, chunked: Req | None,
                    joining: Sequence[Req] = ()) -> PageTable:
        """``[[rid, kv_len, [page ids]], ...]`` for the running batch's live requests, a
        chunked request and the requests ``joining`` it."""
        running.sync()
        reqs = [r for r, f in zip(running.reqs, running.finished.tolist(), strict=True) if not f]
        if chunked is not None:
            reqs.append(chunked)
        reqs += joining
        table, p = self.req_to_token_pool.req_to_token, self.page_size
        return [[r.rid, r.kv_committed_len,
                 (table[r.req_pool_idx, :r.kv_committed_len:p] // p).tolist()] for r in reqs]
