"""The scheduler: SGLang's loop of prefill passes, decode steps and idle steps.

Follows SGLang 0.5.23's ``python/sglang/srt/managers/scheduler.py`` (0.5.9 where a
:class:`~pagedkv.releases.Release` field says), which keeps the loop here and its parts in
``scheduler_components/``: ``event_loop_normal`` / ``event_loop_overlap``,
``get_next_batch_to_run``, ``get_new_batch_prefill``, ``update_running_batch``, ``run_batch``,
``process_batch_result``, ``on_idle``. The batch work is
:class:`~pagedkv.managers.schedule_batch.ScheduleBatch`'s; every other job is a component
(:mod:`pagedkv.managers.scheduler_components`, built by :mod:`pagedkv.managers.scheduler_init`),
the prefill pass's and the decode step's included (:class:`PrefillManager`,
:class:`DecodeMemoryChecker`, :class:`DecodeStepRunner`). The
normal loop (``disable_overlap_schedule``) processes each pass's result at once; the overlap
loop (SGLang's default) a step later: batch ``N + 1`` is scheduled while batch ``N`` runs.
CONTRIBUTING.md walks one step method by method; ``tests/reference`` checks both loops step
by step against SGLang's own. Where we simplify: FCFS only; no priorities, LoRA, speculative
decoding or disaggregation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.in_flight_recorder import joining_requests
from pagedkv.managers.req import Req, RequestLike
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components import (
    InFlight,
    PrefillPass,
    default_max_running_requests,
    validate_requests,
    validate_sizes,
)
from pagedkv.managers.scheduler_init import (
    SlidingWindowPools,
    build_kv_cache,
    init_components,
    init_trace,
)
from pagedkv.managers.trace import Trace, TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.mamba_cache import MambaPrefixCache
from pagedkv.mem_cache.mamba_pool import MambaPool
from pagedkv.model_executor.forward_batch_info import Executor, ForwardBatch, ForwardResult
from pagedkv.model_executor.sim_executor import SimExecutor, StepTime


class Scheduler:
    """SGLang's scheduler over a fixed list of requests.

    Args:
        requests: workload entries (``prompt_len``, ``output_len``, ``max_new_tokens``,
            ``arrival_s``; optional ``input_ids``, ``output_ids``, ``follows``,
            ``ignore_eos``); request ``i`` gets ``rid = i``.
        max_total_num_tokens: KV slots in the pool, a multiple of ``page_size``.
        page_size: tokens per page.
        config: constants, policy, loop and release (default: SGLang 0.5.23's).
        radix_cache: the prefix cache on (SGLang's default) or off (``ChunkCache``).
        context_len: the model's context length (bounds prompts and ``max_new_tokens``,
            :func:`validate_requests`); None: only the pool bounds them.
        executor: what runs the passes (default: :class:`SimExecutor` over ``step_time``).
        step_time: the simulated executor's step-time model (default: 10 ms per step).
        meta, record_page_tables, record_pages, trace: the record (:func:`init_trace`; on a
            sliding-window hybrid the page events follow both pools).
        fast_forward: take quiet decode steps together (``DecodeFastForward``: an executor
            that predicts its step times, no page tables; exact); False: one by one.
        mamba_pool: a linear-attention hybrid's state slots (their count and state): each
            request holds one from admission to finish or retraction (radix cache off).
        swa: a sliding-window hybrid's window and SWA pool (SGLang 0.5.23's
            ``is_hybrid_swa``; :func:`build_kv_cache`); None: one pool. Decode steps are then
            taken one by one.

    Raises:
        ConfigError: a size out of range; a request SGLang would never serve; page tables
            or page events asked of a trace that keeps none.
    """

    def __init__(self, requests: Sequence[RequestLike], *, max_total_num_tokens: int,
                 page_size: int = 1, config: SchedulerConfig | None = None,
                 radix_cache: bool = True, context_len: int | None = None,
                 executor: Executor | None = None, step_time: StepTime | None = None,
                 meta: TraceMeta | None = None, record_page_tables: bool = False,
                 record_pages: bool = False, fast_forward: bool = True,
                 trace: Trace | SummaryTrace | None = None,
                 mamba_pool: MambaPool | None = None,
                 swa: SlidingWindowPools | None = None) -> None:
        self.config = cfg = config or SchedulerConfig()
        p, total, self.context_len = validate_sizes(page_size, max_total_num_tokens, cfg, context_len)
        self.page_size, self.max_total_num_tokens = p, total
        self.reqs = [Req.from_spec(i, spec) for i, spec in enumerate(requests)]
        self.max_running_requests = (cfg.max_running_requests
                                     or default_max_running_requests(total, context_len))
        validate_requests(self.reqs, config=cfg, page_size=p, max_total_num_tokens=total,
                          context_len=self.context_len, radix_cache=radix_cache)
        pools = build_kv_cache(self.reqs, cfg, p, total, self.max_running_requests,
                               radix_cache, mamba_pool, swa)
        self.allocator, self.req_to_token_pool, self.tree_cache = pools
        self.executor = executor or SimExecutor(step_time)
        # an executor that predicts its step times is a model of the GPU: it samples no tokens
        self.real_tokens = not self.executor.predicts_step_times
        self.overlap = not cfg.disable_overlap_schedule
        self.record_page_tables = record_page_tables  # no fast-forward windows then
        self.trace = init_trace(trace, meta, config=cfg, page_size=p, max_total_num_tokens=total,
                                radix_cache=radix_cache, record_page_tables=record_page_tables,
                                record_pages=record_pages,
                                swa_tokens=None if swa is None else swa.max_total_num_tokens_swa)
        self.running = ScheduleBatch(self.req_to_token_pool, self.allocator, self.tree_cache)
        self.running.enable_overlap = self.overlap
        (self.counters, self.waiting, self.ratio_tracker, self.result_queue,
         self.request_tracker, self.pool_stats, self.metrics_reporter, self.step_recorder,
         self.invariant_checker, self.batch_result_processor, self.prefill_manager,
         self.fast_forward, self.decode_memory_checker, self.decode_step_runner) = init_components(
            self.reqs, pools, self.trace, self.executor, config=cfg, page_size=p,
            max_total_num_tokens=total, max_running_requests=self.max_running_requests,
            # a linear-attention hybrid takes windows (its state slots change only at
            # admission, finish and retraction; decode_seconds counts their reads). A
            # sliding-window hybrid does not: each decode step may release a request's old
            # window (maybe_evict_swa_decode, every swa_eviction_interval tokens), allocates
            # and evicts in two pools (SWATokenToKVPoolAllocator) and reads
            # sum(min(len, window)) per step, none of which a window's arithmetic
            # (decode_many, decode_seconds(batch, kv_sum)) reproduces yet
            # nor does one with the mamba radix cache (states recorded, donated, evicted)
            fast_forward=(fast_forward and not record_page_tables and swa is None
                          and not isinstance(self.tree_cache, MambaPrefixCache)),
            is_hybrid_swa=swa is not None, get_running_batch=lambda: self.running,
            page_view=self if self.trace.page_events is not None else None)

    # ----- state --------------------------------------------------------------------------
    @property
    def clock(self) -> float:
        """The modelled time now, in seconds (:class:`LoopCounters`)."""
        return self.counters.clock

    @property
    def num_steps(self) -> int:
        """Steps run so far."""
        return self.counters.num_steps

    @property
    def new_token_ratio(self) -> float:
        """SGLang's ``new_token_ratio`` (the tracker's current value; settable)."""
        return self.ratio_tracker.current

    @new_token_ratio.setter
    def new_token_ratio(self, value: float) -> None:
        self.ratio_tracker.current = value

    @property
    def chunked_req(self) -> Req | None:
        """The request being prefilled chunk by chunk (:class:`PrefillManager`); None: none."""
        return self.prefill_manager.chunked_req

    @property
    def num_finished(self) -> int:
        """Requests finished so far."""
        return self.request_tracker.num_finished

    @property
    def in_flight(self) -> InFlight | None:
        """The overlap loop's batch launched and not yet processed (None: none)."""
        return self.result_queue.in_flight

    def done(self) -> bool:
        """Whether every request has finished."""
        return self.num_finished == len(self.reqs)

    def check_memory(self) -> None:
        """SGLang's idle memory check (``SchedulerInvariantChecker.check_memory``)."""
        self.invariant_checker.check_memory()

    def check_invariants(self) -> None:
        """Every slot and request accounted for (``SchedulerInvariantChecker``)."""
        self.invariant_checker.check_invariants(self.pool_stats.tokens_reserved(self.running))
        self.counters.check_invariants()

    # ----- the loop -----------------------------------------------------------------------
    def steps(self) -> Iterator[Scheduler]:
        """The event loop, one iteration per item: each ``next`` runs one :meth:`step` and
        yields this scheduler, until every request has finished. The only loop over
        :meth:`step`: :meth:`run`, ``Engine.run_scheduler`` and the book's step-by-step
        walks all iterate it (a walk may stop early and read the scheduler's state)."""
        while self.step():
            yield self

    def run(self) -> Trace | SummaryTrace:
        """Step until every request has finished; return the trace."""
        for _ in self.steps():
            pass
        return self.trace

    def step(self) -> bool:
        """One iteration of ``event_loop_overlap`` (the default) or ``event_loop_normal``
        (``disable_overlap_schedule``), recorded; False once every request has finished."""
        if self.done():
            return False
        kind = self.event_loop_overlap() if self.overlap else self.event_loop_normal()
        self.step_recorder.record(self.num_steps, self.clock, kind, self.running, self.chunked_req,
                                  lambda: self.pool_stats.tokens_reserved(self.running),
                                  joining_requests(self))
        if self.trace.page_events is not None:
            self.trace.page_events.record(self, kind)
        self.counters.num_steps += 1
        return True

    def enqueue_arrivals(self) -> None:
        """Requests whose arrival time has passed join the waiting queue
        (``recv_requests``)."""
        self.waiting.recv_requests(self.clock)

    def event_loop_normal(self) -> str:
        """One iteration of SGLang's ``event_loop_normal``: choose a batch, run it, process
        its result; or idle. Returns the step's kind."""
        self.enqueue_arrivals()
        batch = self.get_next_batch_to_run()
        if batch is None:
            self.on_idle()
            return "idle"
        if isinstance(batch, ScheduleBatch):
            runner = self.decode_step_runner
            if not runner.run_decode_window(batch, self.chunked_req):
                runner.run_decode_step(batch)
            return "decode"
        result = self.run_batch(batch.batch)
        self.process_batch_result(batch, result)
        return "prefill"

    def event_loop_overlap(self) -> str:
        """One iteration of SGLang's ``event_loop_overlap``: choose and launch a batch, then
        process the previous batch's result (before the launch for two prefills in a row with
        ``disable_consecutive_prefill_overlap``: ``is_disable_overlap_for_batch``); idle
        only when there is neither. Returns the step's kind."""
        self.enqueue_arrivals()
        batch, runner = self.get_next_batch_to_run(), self.decode_step_runner
        if isinstance(batch, ScheduleBatch) and runner.run_decode_window(batch, self.chunked_req):
            return "decode"
        launch = (batch.batch if isinstance(batch, PrefillPass) else
                  None if batch is None else runner.prepare_decode(batch))
        previous = self.result_queue.pop()
        if (previous is not None and launch is not None and launch.mode == "extend"
                and previous.batch.mode == "extend"
                and self.config.disable_consecutive_prefill_overlap):
            self.process_batch_result(previous)
            previous = None
        if launch is not None:
            result = self.run_batch(launch)
            self.result_queue.in_flight = InFlight(launch, result.next_token_ids,
                                                   self.counters.num_decode_steps, self.clock)
            if isinstance(batch, PrefillPass):
                self.prefill_manager.log_prefill(batch, self.num_steps, result.seconds)
            else:
                runner.log_decode(len(launch.reqs))
        if previous is not None:
            self.process_batch_result(previous)
            if launch is None:
                self.jump_to_next_arrival()
        elif launch is None:
            self.on_idle()
        return "idle" if launch is None else "prefill" if launch.mode == "extend" else "decode"

    def get_next_batch_to_run(self) -> PrefillPass | ScheduleBatch | None:
        """:meth:`prepare_step`; the overlap loop merges the prefill in flight. Then a
        prefill pass, else the running batch if its decode step goes ahead (prepared by
        :class:`DecodeStepRunner`; SGLang prepares it in ``update_running_batch``, here a
        simulator first looks for a window), else None."""
        self.prepare_step()
        merged = self.result_queue.prefill_to_merge(self.chunked_req)
        if merged is not None:
            self.merge_prefill(merged, len(self.result_queue.in_flight_reqs()))
        new = self.get_new_batch_prefill()
        if new is not None:
            return new
        return self.running if len(self.running) and self.update_running_batch() else None

    def prepare_step(self) -> None:
        """``get_next_batch_to_run`` before the merge and admission: ``stash_chunked_request``
        and (0.5.23) finished requests dropped (a shrink clears ``batch_is_full``)."""
        self.prefill_manager.stash_chunked_request()
        if self.config.release.filter_finished_every_step and self.running.filter_finished():
            self.running.batch_is_full = False

    def merge_prefill(self, reqs: list[Req], passed: int) -> None:
        """A pass's ``reqs`` that go on join the running batch (``merge_batch``). A pass that
        lost some of its ``passed`` requests (finished, or the chunked one), or an empty
        running batch (SGLang makes the pass the new one), clears ``batch_is_full``."""
        if len(reqs) < passed or not len(self.running):
            self.running.batch_is_full = False
        self.running.merge_batch(reqs)

    # ----- choosing the batch -------------------------------------------------------------
    def get_new_batch_prefill(self) -> PrefillPass | None:
        """SGLang's ``get_new_batch_prefill`` beside the running batch: the carried chunk, then
        the queue in FCFS order, until one does not fit (:class:`PrefillManager`); None:
        nobody admitted."""
        return self.prefill_manager.get_new_batch_prefill(self.running, self.num_steps, self.clock)

    def update_running_batch(self) -> bool:
        """Drop finished requests, check memory (retract, or decay the ratio). False when no
        request is left to decode, and in the overlap loop (0.5.23) when the step is
        skipped: it does not fit while requests finishing in flight, left out of it, are
        about to free their KV. Source: ``Scheduler.update_running_batch``."""
        batch = self.running
        initial = len(batch)
        batch.filter_finished()
        finishing = self.result_queue.leave_out_finishing(batch)
        if not len(batch):
            batch.batch_is_full = False
            return False
        if not self.decode_memory_checker.check_decode_mem(batch, can_skip=bool(finishing)):
            batch.batch_is_full = False  # skipped: requests finishing in flight free KV
            return False
        if len(batch) < initial:
            batch.batch_is_full = False
        return len(batch) > 0

    # ----- running it ---------------------------------------------------------------------
    def run_batch(self, batch: ForwardBatch) -> ForwardResult:
        """The executor runs the pass; the clock moves by its time."""
        result = self.executor.forward(batch)
        self.counters.pass_ran(result.seconds)
        return result

    # ----- results ------------------------------------------------------------------------
    def process_batch_result(self, batch: PrefillPass | InFlight,
                             result: ForwardResult | None = None) -> None:
        """Commit a pass's tokens and release who finished: a prefill pass just run (the
        normal loop: its survivors join the running batch, its line is logged) or the batch
        in flight (the overlap loop). Source: ``Scheduler.process_batch_result``."""
        processor = self.batch_result_processor
        if isinstance(batch, InFlight):  # timed at the pass's end: SGLang processes it then
            with self.counters.at(batch.end_s) as c:  # (``copy_done``), while the next runs
                c.decoded += processor.process_batch_result(batch, c.clock, self.running)
            return
        assert result is not None
        done = processor.process_batch_result_prefill(batch.batch, result.next_token_ids, self.clock)
        self.counters.decoded += int(batch.batch.sample.sum())
        self.merge_prefill(done, len(batch.batch.reqs))
        self.prefill_manager.log_prefill(batch, self.num_steps, result.seconds)

    # ----- the idle path ------------------------------------------------------------------
    def on_idle(self) -> None:
        """Nothing to run: check memory and reset ``new_token_ratio`` (0.5.9: always; 0.5.23:
        only when nothing waits or runs); jump the clock to the next arrival.
        Source: 0.5.9 ``self_check_during_idle``, 0.5.23 ``Scheduler.on_idle``.

        Raises:
            PagedKVError: waiting requests can never be admitted
                (``SchedulerInvariantChecker.check_not_stuck``).
        """
        fully_idle = not self.waiting and not len(self.running) and self.chunked_req is None
        if not self.config.release.reset_ratio_only_when_idle or fully_idle:
            self.check_memory()
            self.ratio_tracker.reset()
        if self.waiting and not len(self.running):  # consecutive idle steps with a queue
            self.counters.idle_blocked += 1
            self.invariant_checker.check_not_stuck(self.counters.idle_blocked)
        self.jump_to_next_arrival()

    def jump_to_next_arrival(self) -> None:
        """Nothing ran and nothing waits: the clock moves on to the next arrival."""
        arrival = self.waiting.next_arrival_s()
        if not self.waiting and arrival is not None:
            self.counters.clock = max(self.clock, arrival)
