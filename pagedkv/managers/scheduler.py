"""The scheduler: one loop of prefill passes, decode steps and idle steps, as in SGLang.

Follows SGLang's ``python/sglang/srt/managers/scheduler.py`` (``event_loop_normal``,
``get_next_batch_to_run``, ``get_new_batch_prefill``, ``update_running_batch``, and the idle
path ``self_check_during_idle`` in 0.5.9 / ``on_idle`` in 0.5.23), in the release chosen by
``config.release`` (0.5.23 by default). One step:

1. Requests whose arrival time has passed join the waiting queue (FCFS). A later turn of a
   conversation (``follows``) arrives when the turn before it finishes.
2. The chunked request's computed chunk is cached in the tree (``stash_chunked_request``);
   the last prefill pass's requests join the running batch; 0.5.23 drops finished ones.
3. A prefill pass if anyone is admitted (:mod:`pagedkv.managers.scheduler_prefill`);
   otherwise a decode step (:mod:`pagedkv.managers.scheduler_decode`); otherwise idle:
   0.5.9 resets ``new_token_ratio`` and checks memory whenever there is nothing to run,
   0.5.23 only when nothing is waiting or running. The clock jumps to the next arrival.

The prefix cache is a constructor argument: :class:`~pagedkv.mem_cache.radix_cache.RadixCache`
(SGLang's default) or, with ``radix_cache=False`` (``--disable-radix-cache``),
:class:`~pagedkv.mem_cache.chunk_cache.ChunkCache`. The executor is the other: the fast
:class:`~pagedkv.model_executor.sim_executor.SimExecutor` (default) or a real model.

Two loops, as in SGLang: the normal loop above (``event_loop_normal``, SGLang's
``--disable-overlap-schedule``), and the overlap loop (``event_loop_overlap``, SGLang's
default; ``SchedulerConfig(disable_overlap_schedule=False)``;
:mod:`pagedkv.managers.scheduler_overlap`), where batch ``N + 1`` is scheduled while batch
``N`` is in flight, so memory decisions see the previous step's tokens one step late.
Both are checked step by step against SGLang 0.5.23's own loops (``tests/reference``).

Where we simplify: FCFS only; no priorities, LoRA, speculative decoding or disaggregation.
A request whose prompt can never be served is refused up front with an error (SGLang aborts it at arrival).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from pagedkv.errors import PagedKVError, bad_value, check_positive_int
from pagedkv.managers.config import Policy, SchedulerConfig
from pagedkv.managers.in_flight_recorder import joining_requests
from pagedkv.managers.page_recorder import PageRecorder
from pagedkv.managers.req import Req, RequestLike
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.schedule_policy import footprint, running_reservation
from pagedkv.managers.scheduler_components import (
    DecodeFastForward,
    NewTokenRatioTracker,
    SchedulerBatchResultProcessor,
    SchedulerInvariantChecker,
    SchedulerMetricsReporter,
    SchedulerStepRecorder,
    WaitingQueue,
)
from pagedkv.managers.scheduler_decode import SchedulerDecodeMixin
from pagedkv.managers.scheduler_overlap import InFlight, SchedulerOverlapMixin
from pagedkv.managers.scheduler_prefill import SchedulerPrefillMixin
from pagedkv.managers.trace import Event, Trace, TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.allocator import ceil_to_page, make_allocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.model_executor.forward_batch_info import Executor, StepTimePredictor
from pagedkv.model_executor.sim_executor import SimExecutor, StepTime
from pagedkv.sizing import max_req_input_len


def default_max_running_requests(max_total_num_tokens: int, context_len: int | None) -> int:
    """``min(clamp(tokens / context_len * 512, 2048, 4096), tokens // 2)`` (SGLang, both
    releases; 4096 rows without a context length)."""
    rows = 4096 if context_len is None else min(max(int(max_total_num_tokens / context_len * 512),
                                                    2048), 4096)
    return max(1, min(rows, max_total_num_tokens // 2))


class Scheduler(SchedulerPrefillMixin, SchedulerDecodeMixin, SchedulerOverlapMixin):
    """SGLang's scheduler over a fixed list of requests.

    Args:
        requests: workload entries (``prompt_len``, ``output_len``, ``max_new_tokens``,
            ``arrival_s``; optional ``input_ids``, ``output_ids``, ``follows``,
            ``ignore_eos``); request ``i`` gets ``rid = i``.
        max_total_num_tokens: KV slots in the pool, a multiple of ``page_size``.
        page_size: tokens per page.
        config: constants, policy and release (default: SGLang 0.5.23's).
        radix_cache: the prefix cache on (SGLang's default) or off.
        context_len: the model's context length (bounds prompts and ``max_new_tokens`` as
            SGLang does); None: only the pool bounds them.
        executor: what runs the passes (default: :class:`SimExecutor` over ``step_time``).
        step_time: the simulated executor's step-time model (default: 10 ms per step).
        meta: the trace's ``meta`` block (default: built from the pool size).
        record_page_tables: keep every step's page tables in the trace (small pools only).
        record_pages: record every page's owner changes (``trace.page_events``: what the
            visualizer replays at card scale).
        fast_forward: take decode steps between events together (simulator only; the
            results, the trace and the memory are the same either way: see
            :mod:`pagedkv.managers.scheduler_decode`); False forces the step-by-step path,
            the reference the fast path is tested against.
        trace: where the run is recorded (default: a new :class:`Trace` over ``meta``); a
            :class:`~pagedkv.managers.trace_summary.SummaryTrace` keeps totals only, for runs
            too long to keep every step (the scheduler's steps are the same either way).

    Raises:
        ConfigError: a size out of range; a prompt longer than SGLang serves
            (``max_req_input_len``); a ``follows`` that does not name an earlier request;
            page tables asked of a trace that keeps none.
    """

    def __init__(self, requests: Sequence[RequestLike], *, max_total_num_tokens: int,
                 page_size: int = 1, config: SchedulerConfig | None = None,
                 radix_cache: bool = True, context_len: int | None = None,
                 executor: Executor | None = None, step_time: StepTime | None = None,
                 meta: TraceMeta | None = None, record_page_tables: bool = False,
                 record_pages: bool = False, fast_forward: bool = True,
                 trace: Trace | SummaryTrace | None = None) -> None:
        self.page_size = p = check_positive_int("page_size", page_size)
        self.config = cfg = config or SchedulerConfig()
        self.max_total_num_tokens = check_positive_int("max_total_num_tokens",
                                                       max_total_num_tokens, minimum=p)
        if max_total_num_tokens % p:
            raise bad_value("max_total_num_tokens", max_total_num_tokens,
                            f"a multiple of page_size={p}")
        if cfg.chunked_prefill_size is not None and cfg.chunked_prefill_size < p:
            raise bad_value("chunked_prefill_size", cfg.chunked_prefill_size,
                            f"None or an integer >= page_size={p}")
        self.context_len = None if context_len is None else check_positive_int("context_len", context_len)
        self.reqs = [Req.from_spec(i, spec) for i, spec in enumerate(requests)]
        self.max_running_requests = (cfg.max_running_requests
                                     or default_max_running_requests(max_total_num_tokens, context_len))
        self._admit_checks(radix_cache)
        self.allocator = make_allocator(max_total_num_tokens, p)
        longest = max((r.prompt_len + r.max_new_tokens for r in self.reqs), default=1)
        # 0.5.23 sizes the rows to max_running_requests (plus its padding row 0); 0.5.9's
        # pool has at least as many rows, and one more here keeps a carried chunk's row
        # apart from the running batch's (0.5.9 does not count rows in num_allocatable_reqs)
        release = cfg.release
        rows = self.max_running_requests + (not release.allocatable_counts_free_rows)
        self.req_to_token_pool = ReqToTokenPool.for_release(rows, longest + p, release)
        cache = RadixCache if radix_cache else ChunkCache
        self.tree_cache = cache.for_release(self.req_to_token_pool, self.allocator, release)
        self.executor = executor or SimExecutor(step_time)
        # an executor that predicts its step times is a model of the GPU: it samples no tokens
        self.real_tokens = not self.executor.predicts_step_times
        # the overlap loop (SGLang's default) or, with disable_overlap_schedule, the normal one
        self.overlap = not cfg.disable_overlap_schedule
        self.in_flight: InFlight | None = None
        self.record_page_tables = record_page_tables  # no fast-forward windows then
        if trace is not None and record_page_tables and trace.page_tables is None:
            raise bad_value("trace", type(trace).__name__, "a Trace with page tables when "
                            "record_page_tables=True")
        if trace is not None and record_pages and getattr(trace, "page_events", None) is None:
            raise bad_value("trace", type(trace).__name__, "a Trace with page events when "
                            "record_pages=True")
        if trace is None:
            trace = Trace(meta or TraceMeta(max_total_num_tokens, p, policy=cfg.policy.value,
                                            sglang_version=cfg.sglang_version,
                                            radix_cache=radix_cache),
                          record_page_tables,
                          PageRecorder(max_total_num_tokens // p) if record_pages else None)
        self.trace = trace
        self.waiting = WaitingQueue.from_reqs(self.reqs)
        self.running = ScheduleBatch(self.req_to_token_pool, self.allocator, self.tree_cache)
        self.chunked_req: Req | None = None
        self.ratio_tracker = NewTokenRatioTracker.from_config(cfg)
        self.clock = 0.0
        self.num_steps = self.num_decode_steps = self.num_finished = self.decoded = 0
        self.num_decode_skips = 0  # overlap loop: decode steps skipped instead of retracting
        self._refresh_calls = 0
        self._idle_blocked = 0
        self.metrics_reporter = SchedulerMetricsReporter(
            config=cfg, max_total_num_tokens=max_total_num_tokens, trace=trace,
            waiting=self.waiting, get_tokens_in_use=self.tokens_in_use)
        pools = {"token_to_kv_pool_allocator": self.allocator,
                 "req_to_token_pool": self.req_to_token_pool, "tree_cache": self.tree_cache,
                 "waiting": self.waiting, "ratio_tracker": self.ratio_tracker}
        self.step_recorder = SchedulerStepRecorder(
            trace=trace, page_size=p, max_total_num_tokens=max_total_num_tokens, **pools)
        self.invariant_checker = SchedulerInvariantChecker(
            page_size=p, max_total_num_tokens=max_total_num_tokens,
            max_running_requests=self.max_running_requests, **pools,
            get_running_batch=lambda: self.running, get_chunked_req=lambda: self.chunked_req,
            get_num_finished=lambda: self.num_finished,
            get_in_flight_reqs=lambda: [] if self.in_flight is None else self.in_flight.batch.reqs)
        self.batch_result_processor = SchedulerBatchResultProcessor(
            token_to_kv_pool_allocator=self.allocator, req_to_token_pool=self.req_to_token_pool,
            tree_cache=self.tree_cache, group_prefill_frees=release.group_prefill_frees,
            samples_tokens=self.real_tokens,
            eos_token_ids=frozenset(self.executor.eos_token_ids), on_finish=self.on_finish)
        # many decode steps at once: only an executor that predicts its step times
        predictor = cast(StepTimePredictor, self.executor)
        self.fast_forward = (DecodeFastForward(
            executor=predictor, config=cfg, page_size=p, max_total_num_tokens=max_total_num_tokens,
            token_to_kv_pool_allocator=self.allocator, tree_cache=self.tree_cache,
            waiting=self.waiting, ratio_tracker=self.ratio_tracker,
            metrics_reporter=self.metrics_reporter, step_recorder=self.step_recorder)
            if fast_forward and predictor.predicts_step_times and not record_page_tables
            else None)

    def _admit_checks(self, radix_cache: bool) -> None:
        """Refuse what SGLang could never serve; clamp ``max_new_tokens`` as it does at arrival.

        ``max_req_len = min(context_len - 1, max_total_num_tokens - 1)``, prompts must be
        shorter than ``max_req_input_len = max_req_len - 5``; ``max_new_tokens`` becomes
        ``min(max_new_tokens, max_req_len - prompt_len - 1)`` (0.5.23: and at most
        ``max_total_num_tokens - ceil_to_page(prompt_len) - page_size - 1``). With the radix
        cache off, an ignore-EOS request must pass SGLang's worst-case test on an empty pool
        (``pool - ceil_to_page(prompt) - overhead - max_new_tokens > 1``), or SGLang would
        keep it waiting forever.
        Source: ``TpModelWorker`` (``max_req_input_len``), ``Scheduler.handle_generate_request``,
        ``PrefillAdder.add_one_req_ignore_eos``.
        """
        cfg, p, total = self.config, self.page_size, self.max_total_num_tokens
        limit = max_req_input_len(total, self.context_len or total)
        max_req_len = limit + 5
        overhead = p if cfg.release.extra_page_per_request else 0
        for r in self.reqs:
            if r.prompt_len >= limit:
                raise bad_value(f"request {r.rid} prompt_len", r.prompt_len,
                                f"< max_req_input_len={limit} (min(context_len - 1, "
                                f"max_total_num_tokens - 1) - 5; a larger pool, e.g. a higher "
                                f"mem_fraction_static, takes longer prompts)")
            if r.follows is not None and not 0 <= r.follows < r.rid:
                raise bad_value(f"request {r.rid} follows", r.follows, f"an earlier rid in [0, {r.rid})")
            prompt_pages = int(ceil_to_page(r.prompt_len, p))
            cap = max_req_len - r.prompt_len - 1
            if cfg.release.cap_max_new_tokens_by_pool:
                cap = min(cap, total - prompt_pages - p - 1)
            r.max_new_tokens = max(1, min(r.max_new_tokens, cap))
            slack = total - prompt_pages - overhead - r.max_new_tokens
            if r.ignore_eos and not radix_cache and slack <= 1:
                raise bad_value(f"request {r.rid} (ignore_eos) prompt_len + max_new_tokens",
                                r.prompt_len + r.max_new_tokens,
                                f"< {total - overhead - 1} so that admission ever takes it "
                                "with the radix cache off")
            # admission refuses a need >= rem_total_tokens, so the footprint must stay below
            if cfg.policy is Policy.RESERVE_ALL and footprint(r.prompt_len, r.max_new_tokens, p) >= total:
                raise bad_value(f"request {r.rid} prompt_len + max_new_tokens",
                                r.prompt_len + r.max_new_tokens,
                                f"a footprint below max_total_num_tokens={total} under reserve_all")

    # ----- queries ------------------------------------------------------------------------
    def tokens_in_use(self) -> int:
        """SGLang's ``#token``: ``max_total - available - evictable`` (locked tree tokens and
        requests' own tokens; evictable cached tokens count as free)."""
        return (self.max_total_num_tokens - self.allocator.available_size()
                - self.tree_cache.evictable_size())

    def token_usage(self) -> float:
        """SGLang's ``token usage``: :meth:`tokens_in_use` over the pool."""
        return self.tokens_in_use() / self.max_total_num_tokens

    @property
    def tokens_used(self) -> int:
        """KV tokens the live requests hold (running and a request being chunked), shared
        prefixes counted once per request."""
        b = self.running
        chunked = self.chunked_req.kv_committed_len if self.chunked_req is not None else 0
        return int(b.kv_len[~b.finished].sum()) + chunked

    @property
    def tokens_reserved(self) -> float:
        """What admission holds back for running requests (``running_reservation``)."""
        b = self.running
        cols = (b.prompt_len, b.max_new_tokens, b.generated, b.kv_len, b.ignore_eos)
        if b.finished.any():  # 0.5.9 keeps finished requests in the batch until the next step
            live = ~b.finished
            cols = tuple(c[live] for c in cols)
        return running_reservation(self.config, self.page_size, self.new_token_ratio, *cols)

    def check_memory(self) -> None:
        """SGLang's idle memory check (:meth:`SchedulerInvariantChecker.check_memory`)."""
        self.invariant_checker.check_memory()

    def check_invariants(self) -> None:
        """Every slot and request accounted for
        (:meth:`SchedulerInvariantChecker.check_invariants`)."""
        self.invariant_checker.check_invariants(self.tokens_reserved)

    def done(self) -> bool:
        """Whether every request has finished."""
        return self.num_finished == len(self.reqs)

    def next_arrival_s(self) -> float | None:
        """When the next request arrives (None: none is due)."""
        return self.waiting.next_arrival_s()

    # ----- the loop -----------------------------------------------------------------------
    def run(self) -> Trace:
        """Step until every request has finished; return the trace."""
        while self.step():
            pass
        return self.trace

    def step(self) -> bool:
        """Run one step (prefill, decode or idle) and record it; False once all are done.
        A step is one iteration of SGLang's ``event_loop_overlap`` (the default;
        :meth:`step_overlap`) or of ``event_loop_normal`` (``disable_overlap_schedule``)."""
        if self.done():
            return False
        if self.overlap:
            return self.step_overlap()
        self.enqueue_arrivals()
        self.prepare_step()
        adder = self.get_new_batch_prefill()
        if adder is not None:
            kind = "prefill"
            self.run_prefill(adder)
            self._idle_blocked = 0
        elif len(self.running) and self.update_running_batch():
            kind = "decode"
            self.run_decode()
            self._idle_blocked = 0
        else:
            kind = "idle"
            self.on_idle()
        self.record(kind)
        self.num_steps += 1
        return True

    def record(self, kind: str) -> None:
        """The step's row and page tables, then its page events, in the trace."""
        self.step_recorder.record(self.num_steps, self.clock, kind, self.running,
                                  self.chunked_req, lambda: self.tokens_reserved,
                                  joining_requests(self))
        if self.trace.page_events is not None:
            self.trace.page_events.record(self, kind)

    def on_idle(self) -> None:
        """Nothing to run: check memory and reset ``new_token_ratio`` (0.5.9: always; 0.5.23:
        only when nothing waits or runs); jump the clock to the next arrival.
        Source: 0.5.9 ``self_check_during_idle``, 0.5.23 ``Scheduler.on_idle``.

        Raises:
            PagedKVError: waiting requests can never be admitted (nothing runs, nothing is
                due to arrive, admission refused them twice).
        """
        fully_idle = not self.waiting and not len(self.running) and self.chunked_req is None
        if not self.config.release.reset_ratio_only_when_idle or fully_idle:
            self.check_memory()
            self.ratio_tracker.reset()
        if self.waiting and not len(self.running):  # consecutive idle steps with a queue
            self._idle_blocked += 1
            if self._idle_blocked > 2:
                head = self.waiting[0]
                raise PagedKVError(f"stuck: request {head.rid} (prompt_len={head.prompt_len}, "
                                   f"max_new_tokens={head.max_new_tokens}) is refused by an "
                                   f"idle server with {self.allocator.available_size()} slots "
                                   "free; the pool is too small for it")
        self.jump_to_next_arrival()

    def jump_to_next_arrival(self) -> None:
        """Nothing ran and nothing waits: the clock moves on to the next arrival."""
        arrival = self.waiting.next_arrival_s()
        if not self.waiting and arrival is not None:
            self.clock = max(self.clock, arrival)

    def enqueue_arrivals(self) -> None:
        """Move requests whose arrival time has passed into the waiting queue."""
        self.waiting.recv_requests(self.clock)

    def prepare_step(self) -> None:
        """``get_next_batch_to_run`` before admission: cache the chunked request's last
        chunk in the tree (``stash_chunked_request``); 0.5.23 also drops finished requests
        from the running batch (a shrink clears ``batch_is_full``)."""
        if self.chunked_req is not None:
            self.tree_cache.cache_unfinished_req(self.chunked_req)
        if self.config.release.filter_finished_every_step and self.running.filter_finished():
            self.running.batch_is_full = False

    # ----- what happens to a request ------------------------------------------------------
    def on_finish(self, req: Req) -> None:
        """Bookkeeping once ``req`` has released its KV: time, event, its followers arrive."""
        req.finish_s = self.clock
        self.num_finished += 1
        self.trace.record_event(Event(self.num_steps,
                                      "abort" if req.finish_reason == "abort" else "finish",
                                      req.rid, {"output_len": req.generated}))
        self.waiting.send_followers(req, self.clock)

    def on_retract(self, req: Req) -> None:
        """``req`` was retracted: it waits at the back of the queue, its output kept (in
        the overlap loop, the result of a pass it was in is dropped: ``is_retracted``)."""
        freed = req.fill_len - 1
        req.num_retractions += 1
        req.is_retracted = True
        req.enqueued_s = self.clock
        self.waiting.append(req)
        self.trace.record_event(Event(self.num_steps, "retract", req.rid,
                                      {"output_len": req.generated, "freed": freed,
                                       "kept": req.kept_at_retract}))
