"""Many decode steps at once, for an executor that predicts its step times (the simulator).

pagedkv's own part (SGLang runs every step on the GPU; nothing in it corresponds). Between
events SGLang's loop does the same thing every decode step, so ``k`` steps can be taken with
one allocation and their trace rows worked out arithmetically. A window is taken only when no
prefill attempt, finish, eviction or retraction can happen inside it
(:meth:`DecodeFastForward.window_length`). It is exact, not approximate: every count, time
and ratio in the trace is what ``k`` single steps give, and the slots are handed out in the
single steps' order (:func:`decode_many`), so page tables and the free list are the
same too. What it skips is only the per-step Python work. The scheduler builds one only for
an executor that predicts its step times (``Executor.predicts_step_times``) and only when
per-step page tables are not recorded (they would need a snapshot per step);
``Scheduler(fast_forward=False)`` builds none. A linear-attention hybrid takes windows too (a
request's state slot is taken at admission and given back at finish or retraction, never
inside a window; the step time counts each slot's read and write); a sliding-window hybrid
takes none (the scheduler says why).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from pagedkv.errors import OutOfMemoryError
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.page_recorder import SchedulerView
from pagedkv.managers.req import Req
from pagedkv.managers.reservation import window_reservations
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components.loop_counters import LoopCounters
from pagedkv.managers.scheduler_components.metrics_reporter import SchedulerMetricsReporter
from pagedkv.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
from pagedkv.managers.scheduler_components.step_recorder import SchedulerStepRecorder
from pagedkv.managers.scheduler_components.waiting_queue import WaitingQueue
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.model_executor.forward_batch_info import StepTimePredictor

MAX_WINDOW = 4096  # decode steps per window at most


def decode_many(batch: ScheduleBatch, steps: int) -> None:
    """``steps`` decode steps' slots for ``batch`` at once, and ``steps`` sampled tokens each.

    The slots are those ``steps`` calls of :meth:`ScheduleBatch.prepare_for_decode` give
    (``alloc_decode_steps``: new pages in step order, then batch order), so the page tables
    and the free list end up exactly as after single steps. The caller checks that no request
    stops before the last step and that the pages fit without eviction.

    Raises:
        OutOfMemoryError: the pages do not fit.
    """
    out = batch.allocator.alloc_decode_steps(batch.kv_len, batch.last_loc, steps)
    if out is None:
        raise OutOfMemoryError(f"{steps} decode steps do not fit "
                               f"{batch.allocator.available_size()} free slots")
    rows = np.repeat(batch.req_pool_idx, steps)
    positions = (batch.kv_len[:, None] + np.arange(steps)).ravel()
    batch.table[rows, positions] = out.ravel()
    batch.last_loc = out[:, -1].copy()
    batch.kv_len += steps
    batch.generated += steps


class DecodeWindow(NamedTuple):
    """``steps`` decode steps of a batch of ``size`` holding ``kv_sum`` KV tokens at the
    start; ``free[j]``: free slots after step ``j``; ``reserved[j]``: ``tokens_reserved``
    after step ``j`` (zeros for a trace that keeps no rows)."""

    steps: int
    size: int
    kv_sum: int
    free: list[int]
    reserved: list[float]


@dataclass(slots=True, kw_only=True)
class DecodeFastForward:
    """Finds and takes windows of quiet decode steps.

    Attributes:
        executor: predicts each decode step's time.
        config: the scheduler's constants (log interval, reservation rule).
        page_size, max_total_num_tokens: the pool's page size and slots.
        token_to_kv_pool_allocator, tree_cache: the pool and the tree.
        waiting: the waiting queue (arrivals during a window join it).
        ratio_tracker: ``new_token_ratio`` (it decays every step).
        metrics_reporter, step_recorder: the log lines and rows of the window's steps.
        windows_taken: windows taken so far.
        last_launch_s: the clock (seconds) at which the last window's last step was
            launched, the end of the step before it (the overlap loop processes that
            step's result then).
    """

    executor: StepTimePredictor
    config: SchedulerConfig
    page_size: int
    max_total_num_tokens: int
    token_to_kv_pool_allocator: BaseTokenToKVPoolAllocator
    tree_cache: RadixCache | ChunkCache
    waiting: WaitingQueue
    ratio_tracker: NewTokenRatioTracker
    metrics_reporter: SchedulerMetricsReporter
    step_recorder: SchedulerStepRecorder
    windows_taken: int = 0
    last_launch_s: float = 0.0

    def window_length(self, running: ScheduleBatch, chunked_req: Req | None, clock: float,
                      limit: int | None = MAX_WINDOW) -> int:
        """How many decode steps, from this one, can be taken together (1: none).
        ``limit``: the loop's own bound (the overlap loop's; None: no window).

        Needs: no chunked prefill pending and no prefill attempt before the last step
        (``batch_is_full``, or nobody waiting and nobody arriving in time); nobody stops
        before the last step; the free list covers every step without eviction (with
        evictable tokens in the tree, also SGLang's up-front ``bs * page_size`` ask); and
        the window pays for itself (``k >= batch / 8``).
        """
        b, p = running, self.page_size
        if chunked_req is not None or (self.waiting and not b.batch_is_full):
            return 1
        size = len(b)
        k = min(int((b.stop_at - b.generated).min()), MAX_WINDOW)
        k = 0 if limit is None else min(k, limit)
        if k < max(2, size // 8):
            return 1
        # step j writes position kv_len + j: a new page when (kv_len + j) % p == 0
        first = np.bincount((-b.kv_len) % p, minlength=p)
        need = p * first[np.arange(k) % p]
        cum = np.cumsum(need)
        before = self.token_to_kv_pool_allocator.available_size() - np.concatenate(([0], cum[:-1]))
        ask = need if self.tree_cache.evictable_size() == 0 else np.maximum(need, size * p)
        ok = before >= ask
        k = min(k, int(np.argmin(ok)) if not ok.all() else k)
        arrive = self.waiting.next_arrival_s()
        if not b.batch_is_full and arrive is not None:
            kv_sum = int(b.kv_len.sum())
            for j in range(1, k):  # step j starts at the end of step j - 1
                clock += self.executor.decode_seconds(size, kv_sum + (j - 1) * size)
                if clock >= arrive:
                    k = j
                    break
        return k if k >= 2 else 1

    def plan(self, k: int, running: ScheduleBatch, records_steps: bool) -> DecodeWindow:
        """The window of ``k`` steps from the batch as it is now (before any of them is
        applied to it; the first step's memory check and ratio decay are done).
        ``records_steps``: the trace keeps rows (else ``reserved`` is not worked out)."""
        b, p, cfg = running, self.page_size, self.config
        size, available = len(b), self.token_to_kv_pool_allocator.available_size()
        kv0, gen0 = b.kv_len.copy(), b.generated.copy()
        need = p * np.bincount((-kv0) % p, minlength=p)[np.arange(k) % p]
        free = (available - np.cumsum(need)).tolist()
        trial = replace(self.ratio_tracker)  # each step's ratio, after its decay
        ratios = [trial.current]
        for _ in range(k - 1):
            trial.decay_step()
            ratios.append(trial.current)
        reserved = (window_reservations(cfg, p, np.array(ratios[:-1]), b.prompt_len,
                                        b.max_new_tokens, gen0 + 1, kv0 + 1, b.ignore_eos).tolist()
                    if records_steps else [0.0] * (k - 1))
        return DecodeWindow(k, size, int(kv0.sum()), free, reserved)

    def run(self, window: DecodeWindow, counters: LoopCounters) -> None:
        """Account for the window's steps: the clock, the counts, the ratio's decay and
        arrivals for every step; the rows and log lines of steps ``0 .. k-2`` (the caller
        records the last, as for a single step). ``counters`` end as after the last step."""
        c = counters
        size, kv_sum, k = window.size, window.kv_sum, window.steps
        interval = self.config.decode_log_interval
        for j in range(k):
            if j:
                self.ratio_tracker.decay_step()
                self.waiting.recv_requests(c.clock)  # only while batch_is_full: they wait
            self.last_launch_s = c.clock
            c.pass_ran(self.executor.decode_seconds(size, kv_sum + j * size))
            c.decode_launched(size)
            if j == k - 1:
                break
            free = window.free[j]
            if c.num_decode_steps % interval == 0:  # evictable is constant here
                self.metrics_reporter.report_decode_stats(
                    c.num_steps, c.clock, c.decoded, size,
                    self.max_total_num_tokens - free - self.tree_cache.evictable_size())
            self.step_recorder.record_row(c.num_steps, c.clock, "decode", kv_sum + (j + 1) * size,
                                          window.reserved[j], free, size)
            c.num_steps += 1
        self.windows_taken += 1

    def take(self, k: int, running: ScheduleBatch, counters: LoopCounters,
             view: SchedulerView | None) -> None:
        """Take the window of ``k`` steps from ``running`` (:meth:`plan`, :meth:`run`, the
        slots by :func:`decode_many`); ``counters`` end as after its last step, which the
        caller records and whose result it processes. ``view``: the scheduler, when its
        trace records page events: the first step is recorded alone (it may follow a
        retraction), the middle ones as quiet (``PageRecorder.record_quiet_decodes``)."""
        window = self.plan(k, running, self.step_recorder.trace.records_steps)
        pages = None if view is None else view.trace.page_events
        if view is not None and pages is not None:
            decode_many(running, 1)
            pages.record(view, "decode")
        self.run(window, counters)
        if view is None or pages is None:
            decode_many(running, k)
            return
        if k > 2:
            decode_many(running, k - 2)
            pages.record_quiet_decodes(view, counters.num_steps - (k - 2), k - 2)
        decode_many(running, 1)
