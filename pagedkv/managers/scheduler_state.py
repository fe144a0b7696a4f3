"""The scheduler's state as its prefill and decode halves see it, every name typed.

:class:`~pagedkv.managers.scheduler.Scheduler` sets these in ``__init__``; the two halves
(:mod:`pagedkv.managers.scheduler_prefill`, :mod:`pagedkv.managers.scheduler_decode`) read
them. Declaring them here keeps those modules free of imports of ``scheduler.py`` (no import
circle) and of one another. The parts with a job of their own are components
(:mod:`pagedkv.managers.scheduler_components`), each built with what it uses.
"""

from __future__ import annotations

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.schedule_policy import PrefillAdder
from pagedkv.managers.scheduler_components import (
    DecodeFastForward,
    NewTokenRatioTracker,
    SchedulerBatchResultProcessor,
    SchedulerMetricsReporter,
    SchedulerStepRecorder,
    WaitingQueue,
)
from pagedkv.managers.trace import Trace
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.model_executor.forward_batch_info import Executor, ForwardBatch


class SchedulerState:
    """Attributes the scheduler's halves read (set by ``Scheduler.__init__``)."""

    # the setting
    config: SchedulerConfig
    page_size: int
    max_total_num_tokens: int
    max_running_requests: int
    record_page_tables: bool
    # the pools, the tree and the executor
    allocator: BaseTokenToKVPoolAllocator
    req_to_token_pool: ReqToTokenPool
    tree_cache: RadixCache | ChunkCache
    executor: Executor
    real_tokens: bool  # the executor samples the tokens (it does not predict its step times)
    overlap: bool  # SGLang's overlap loop (else the normal one)
    fast_forward: DecodeFastForward | None  # only for an executor that predicts step times
    # the requests
    reqs: list[Req]
    waiting: WaitingQueue
    running: ScheduleBatch
    chunked_req: Req | None
    # the run so far
    clock: float  # seconds
    num_steps: int
    num_decode_steps: int
    num_finished: int
    decoded: int  # tokens sampled
    num_decode_skips: int  # overlap loop: decode steps skipped instead of retracting
    _refresh_calls: int  # prefill passes that could touch waiting prefixes (0.5.23)
    _idle_blocked: int  # consecutive idle steps with a queue (a stuck request after 3)
    # components
    ratio_tracker: NewTokenRatioTracker
    batch_result_processor: SchedulerBatchResultProcessor
    metrics_reporter: SchedulerMetricsReporter
    step_recorder: SchedulerStepRecorder
    trace: Trace | SummaryTrace

    @property
    def new_token_ratio(self) -> float:
        """SGLang's ``new_token_ratio``: the tracker's current value."""
        return self.ratio_tracker.current

    @new_token_ratio.setter
    def new_token_ratio(self, value: float) -> None:
        self.ratio_tracker.current = value

    # what a request's life needs from the loop (defined in scheduler.py)
    def enqueue_arrivals(self) -> None:
        """Requests whose arrival time has passed join the waiting queue."""
        raise NotImplementedError

    def next_arrival_s(self) -> float | None:
        """When the next request arrives (None: none is due)."""
        raise NotImplementedError

    def on_finish(self, req: Req) -> None:
        """Bookkeeping once ``req`` has released its KV."""
        raise NotImplementedError

    def on_retract(self, req: Req) -> None:
        """``req`` was retracted: it waits at the back of the queue."""
        raise NotImplementedError

    def prepare_step(self) -> None:
        """``get_next_batch_to_run`` before admission."""
        raise NotImplementedError

    def on_idle(self) -> None:
        """Nothing to run: the idle checks, then the clock jumps to the next arrival."""
        raise NotImplementedError

    def jump_to_next_arrival(self) -> None:
        """Nothing ran and nothing waits: the clock moves on to the next arrival."""
        raise NotImplementedError

    def record(self, kind: str) -> None:
        """The step's row, page tables and page events."""
        raise NotImplementedError

    # what the halves read of one another (each defined in one of them)
    def finishing_in_flight(self) -> list[int]:
        """Running-batch indices of requests whose in-flight result ends them (overlap)."""
        raise NotImplementedError

    def get_new_batch_prefill(self) -> PrefillAdder | None:
        """The pass's adder, or None if nobody is admitted (prefill half)."""
        raise NotImplementedError

    def prepare_prefill(self, adder: PrefillAdder) -> ForwardBatch:
        """``prepare_for_extend`` (prefill half)."""
        raise NotImplementedError

    def log_prefill(self, adder: PrefillAdder, running_bs: int, extend_tokens: int,
                    seconds: float) -> None:
        """SGLang's prefill line (prefill half)."""
        raise NotImplementedError

    def log_decode(self, bs: int) -> None:
        """SGLang's decode line (decode half)."""
        raise NotImplementedError

    def update_running_batch(self) -> bool:
        """The decode step's memory check (decode half)."""
        raise NotImplementedError
