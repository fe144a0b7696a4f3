"""The decode step once the running batch goes ahead: its slots, its pass, its result, its
log line; and, for a simulator, many quiet steps at once.

Follows SGLang 0.5.23's decode path through ``python/sglang/srt/managers/scheduler.py``
(``update_running_batch`` ends with ``batch.prepare_for_decode()``; ``run_batch``;
``process_batch_result`` → ``SchedulerBatchResultProcessor.process_batch_result_decode``;
the decode log every ``decode_log_interval`` steps, ``SchedulerMetricsReporter.
report_decode_stats``) and, in the overlap loop, its future map (``overlap_utils.py``,
``FutureMap``: the in-flight pass's tokens are the next step's input). The normal loop runs a
step here from start to end; the overlap loop launches it here (:meth:`DecodeStepRunner.
prepare_decode`) and processes it a step later. The fast-forward hook
(:meth:`DecodeStepRunner.run_decode_window`) is pagedkv's own: SGLang runs every step.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.managers.page_recorder import SchedulerView
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components.batch_result_processor import (
    InFlight,
    SchedulerBatchResultProcessor,
)
from pagedkv.managers.scheduler_components.decode_fast_forward import (
    MAX_WINDOW,
    DecodeFastForward,
)
from pagedkv.managers.scheduler_components.loop_counters import LoopCounters
from pagedkv.managers.scheduler_components.metrics_reporter import SchedulerMetricsReporter
from pagedkv.managers.scheduler_components.overlap_result_queue import OverlapResultQueue
from pagedkv.model_executor.forward_batch_info import Executor, ForwardBatch


@dataclass(slots=True, kw_only=True, frozen=True)
class DecodeStepRunner:
    """Prepares, runs and finishes decode steps of the running batch.

    Attributes:
        executor: runs the passes.
        overlap: the overlap loop (False: the normal loop, ``disable_overlap_schedule``).
        decode_log_interval: a decode line every this many decode steps.
        counters: the loop's clock and counts (moved by every step).
        result_queue: the overlap loop's batch in flight (the future map; a window's last
            step is left in it).
        batch_result_processor: commits tokens and releases who finished.
        metrics_reporter: the decode log line.
        fast_forward: the simulator's quiet-window finder (None: every step is run).
        page_view: the scheduler, when its trace records page events (a window records its
            steps' pages); else None.
    """

    executor: Executor
    overlap: bool
    decode_log_interval: int
    counters: LoopCounters
    result_queue: OverlapResultQueue
    batch_result_processor: SchedulerBatchResultProcessor
    metrics_reporter: SchedulerMetricsReporter
    fast_forward: DecodeFastForward | None
    page_view: SchedulerView | None

    def prepare_decode(self, running: ScheduleBatch) -> ForwardBatch:
        """``prepare_for_decode`` (every request's next slot), counted, and the decode pass;
        in the overlap loop its input tokens are the in-flight pass's (the future map)."""
        running.prepare_for_decode()
        self.counters.decode_launched(len(running))
        ids = self.result_queue.future_input_ids(running) if self.overlap else None
        return running.get_model_worker_batch(ids)

    def run_decode_step(self, running: ScheduleBatch) -> None:
        """The normal loop's decode step: prepared, run (a simulator's time is predicted,
        no pass built), its tokens committed and its result processed."""
        ff, c = self.fast_forward, self.counters
        if ff is not None:
            kv_tokens = int(running.kv_len.sum())
            running.prepare_for_decode()
            c.decode_launched(len(running))
            c.pass_ran(ff.executor.decode_seconds(len(running), kv_tokens))
        else:
            result = self.executor.forward(self.prepare_decode(running))
            c.pass_ran(result.seconds)
            if result.next_token_ids is not None:
                for req, token in zip(running.reqs, result.next_token_ids.tolist(), strict=True):
                    req.output_ids.append(int(token))
        running.generated += 1
        self.process_batch_result_decode(running)

    def run_decode_window(self, running: ScheduleBatch, chunked_req: Req | None) -> bool:
        """Take the next ``k >= 2`` quiet decode steps at once if the fast-forward finds them
        (:class:`DecodeFastForward`: the same slots, counts, rows and log lines as ``k``
        single steps; the caller records the last). The overlap loop's window logs its last
        step at launch, releases at the end of the step before it (as a single step's result
        is timed) and leaves its last step in flight. False: no window."""
        ff, b, c = self.fast_forward, running, self.counters
        if ff is None:
            return False
        limit = self.result_queue.window_limit(b) if self.overlap else MAX_WINDOW
        k = ff.window_length(b, chunked_req, c.clock, limit)
        if k < 2:
            return False
        ff.take(k, b, c, self.page_view)
        if not self.overlap:
            self.process_batch_result_decode(b)
            return True
        self.log_decode(len(b))  # at the last step's launch
        with c.at(ff.last_launch_s):  # the step before it ends then
            self.batch_result_processor.process_batch_result_decode(b)
        self.result_queue.in_flight = InFlight(b.get_model_worker_batch(), None,
                                               c.num_decode_steps, c.clock)
        return True

    def process_batch_result_decode(self, running: ScheduleBatch) -> None:
        """The normal loop's decode result: release every request whose latest token ends
        it, then log."""
        self.batch_result_processor.process_batch_result_decode(running)
        self.log_decode(len(running))

    def log_decode(self, bs: int) -> None:
        """SGLang's decode line for a batch of ``bs``, at the loop's step and clock, if this
        decode step is one of every ``decode_log_interval``."""
        c = self.counters
        if c.num_decode_steps % self.decode_log_interval == 0:
            self.metrics_reporter.report_decode_stats(c.num_steps, c.clock, c.decoded, bs)
