"""What the scheduler builds when it starts: the pools and the tree, the trace, its components.

Follows SGLang 0.5.23's ``Scheduler.__init__`` (``python/sglang/srt/managers/scheduler.py``),
which builds the pools and the tree with ``mem_cache/kv_cache_builder.py``'s
``build_kv_cache`` and each part with an ``init_*`` method (``init_running_status``,
``init_metrics_reporter``, ``init_overlap``, ...; the parts in
``managers/scheduler_components/``); here they are functions, each given what it uses, so that
``scheduler.py`` holds the loop. :class:`~pagedkv.managers.scheduler.Scheduler` calls them in
this order: requests checked (:func:`~pagedkv.managers.scheduler_components.validate_requests`),
pools and tree, trace, components.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

from pagedkv.errors import bad_value
from pagedkv.hybrid_pools import mamba_tracking_slots
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.page_recorder import PageRecorder, SchedulerView
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components import (
    DecodeFastForward,
    DecodeMemoryChecker,
    DecodeStepRunner,
    LoopCounters,
    NewTokenRatioTracker,
    OverlapResultQueue,
    PrefillManager,
    SchedulerBatchResultProcessor,
    SchedulerInvariantChecker,
    SchedulerMetricsReporter,
    SchedulerPoolStatsObserver,
    SchedulerRequestTracker,
    SchedulerStepRecorder,
    WaitingQueue,
)
from pagedkv.managers.trace import Trace, TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator, make_allocator
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.mamba_cache import MambaPrefixCache
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool, MambaPool
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.mem_cache.swa_cache import SWAPrefixCache
from pagedkv.model_executor.forward_batch_info import Executor, StepTimePredictor


class KVCache(NamedTuple):
    """The token pool's allocator, the request rows and the prefix cache."""

    allocator: BaseTokenToKVPoolAllocator | SWATokenToKVPoolAllocator
    req_to_token_pool: ReqToTokenPool
    tree_cache: RadixCache | ChunkCache | SWAPrefixCache | MambaPrefixCache


class SlidingWindowPools(NamedTuple):
    """A sliding-window hybrid's second pool: its window and tokens (SGLang 0.5.23's
    ``sliding_window_size`` and ``swa_tokens_per_layer``; the full pool is
    ``max_total_num_tokens``)."""

    sliding_window_size: int
    max_total_num_tokens_swa: int


def check_hybrid_release(config: SchedulerConfig, *, linear: bool, swa: bool,
                         radix_cache: bool) -> None:
    """Refuse a hybrid's scheduler under a release whose hybrid behaviour pagedkv does not
    model: what :func:`build_kv_cache` refuses, for a front door to refuse before any run
    (:class:`~pagedkv.entrypoints.engine.Engine` calls it when it is built).

    Args:
        config: the scheduler's configuration (its ``release`` is read).
        linear: a linear-attention hybrid's state slots (Qwen3-Next: a ``mamba_pool``).
        swa: a sliding-window hybrid's full and SWA pools (``swa``).
        radix_cache: the prefix cache on (SGLang's default) or off (``--disable-radix-cache``).

    Raises:
        ConfigError: ``linear`` with the radix cache on under a release that resolves the
            default ``--mamba-radix-cache-strategy`` to ``no_buffer`` (0.5.9: its
            ``MambaRadixCache`` and ``no_buffer`` scheduling are not modelled); ``swa`` under
            a release whose tree is not 0.5.23's unified one (0.5.9), naming
            ``sglang_version``, its value and the valid choices.
    """
    if linear and radix_cache and not config.release.mamba_auto_extra_buffer:
        raise bad_value("sglang_version", config.sglang_version,
                        "0.5.23 for a linear-attention hybrid with the radix cache (0.5.9's "
                        "MambaRadixCache and its no_buffer scheduling are not modelled), or "
                        "radix_cache=False (--disable-radix-cache)")
    # the hybrid scheduler follows 0.5.23, whose tree checkpoints and splits as its
    # UnifiedRadixCache does (split_output_from_prompt is that tree's behaviour)
    if swa and not config.release.split_output_from_prompt:
        raise bad_value("sglang_version", config.sglang_version,
                        "0.5.23 for a sliding-window hybrid's scheduler")


def build_kv_cache(reqs: Sequence[Req], config: SchedulerConfig, page_size: int,
                   max_total_num_tokens: int, max_running_requests: int,
                   radix_cache: bool, mamba_pool: MambaPool | None = None,
                   swa: SlidingWindowPools | None = None) -> KVCache:
    """``max_total_num_tokens`` slots in pages of ``page_size``; one ``req_to_token`` row per
    running request, each as long as the longest request (prompt + ``max_new_tokens``) plus
    a page; :class:`RadixCache` or, with ``radix_cache`` False, :class:`ChunkCache`.
    With ``mamba_pool`` (a linear-attention hybrid's state slots: its size and state), the
    rows are a :class:`HybridReqToTokenPool`, which gives each request a state slot with its
    row. With ``swa`` (a sliding-window hybrid): :class:`SWATokenToKVPoolAllocator` over the
    full and SWA pools and :class:`SWAPrefixCache` (disabled with ``radix_cache`` False),
    SGLang 0.5.23's (``is_hybrid_swa``).

    With both ``mamba_pool`` and ``radix_cache`` (SGLang 0.5.23's default server for
    Qwen3-Next): :class:`~pagedkv.mem_cache.mamba_cache.MambaPrefixCache`, over a request
    table whose requests also hold the strategy's track slots
    (:func:`~pagedkv.hybrid_pools.mamba_tracking_slots`: ``extra_buffer`` with the overlap
    loop or pages over one token, else ``no_buffer``).

    Raises:
        ConfigError: ``mamba_pool`` with the radix cache on under 0.5.9 (its no_buffer
            scheduling and tree are not modelled); ``swa`` with a release
            whose tree is not 0.5.23's unified one (the hybrid scheduler follows 0.5.23
            only), a window or SWA pool below 1 (a page).
    Source: 0.5.23 ``mem_cache/kv_cache_builder.py``, ``build_kv_cache``;
    ``mem_cache/registry.py``, ``default_radix_cache_factory``.
    """
    check_hybrid_release(config, linear=mamba_pool is not None, swa=swa is not None,
                         radix_cache=radix_cache)
    if swa is not None:
        allocator: BaseTokenToKVPoolAllocator | SWATokenToKVPoolAllocator = \
            SWATokenToKVPoolAllocator(max_total_num_tokens, swa.max_total_num_tokens_swa, page_size)
    else:
        allocator = make_allocator(max_total_num_tokens, page_size)
    longest = max((r.prompt_len + r.max_new_tokens for r in reqs), default=1)
    # 0.5.23 sizes the rows to max_running_requests (plus its padding row 0); 0.5.9's
    # pool has at least as many rows, and one more here keeps a carried chunk's row
    # apart from the running batch's (0.5.9 does not count rows in num_allocatable_reqs)
    release = config.release
    rows = max_running_requests + (not release.allocatable_counts_free_rows)
    req_to_token_pool = (
        ReqToTokenPool.for_release(rows, longest + page_size, release) if mamba_pool is None
        else HybridReqToTokenPool.for_release(
            rows, longest + page_size, release, mamba_size=mamba_pool.size,
            cache_params=mamba_pool.cache_params,
            mamba_tracking_slots=mamba_tracking_slots(
                disable_radix_cache=not radix_cache, page_size=page_size,
                disable_overlap_schedule=config.disable_overlap_schedule,
                auto_extra_buffer=release.mamba_auto_extra_buffer)))
    if swa is not None:
        assert isinstance(allocator, SWATokenToKVPoolAllocator)
        return KVCache(allocator, req_to_token_pool, SWAPrefixCache(
            req_to_token_pool, allocator, swa.sliding_window_size, disable=not radix_cache,
            eviction_interval=config.swa_eviction_interval,
            enable_overlap=not config.disable_overlap_schedule,
            chunked_prefill_size=config.chunked_prefill_size))
    if mamba_pool is not None and radix_cache:
        assert isinstance(req_to_token_pool, HybridReqToTokenPool)
        return KVCache(allocator, req_to_token_pool, MambaPrefixCache(req_to_token_pool, allocator))
    cache = RadixCache if radix_cache else ChunkCache
    assert isinstance(allocator, BaseTokenToKVPoolAllocator)
    return KVCache(allocator, req_to_token_pool,
                   cache.for_release(req_to_token_pool, allocator, release))


def init_trace(trace: Trace | SummaryTrace | None, meta: TraceMeta | None, *,
               config: SchedulerConfig, page_size: int, max_total_num_tokens: int,
               radix_cache: bool, record_page_tables: bool,
               record_pages: bool, swa_tokens: int | None = None) -> Trace | SummaryTrace:
    """``trace`` checked, or a new :class:`Trace` over ``meta`` (default: built from the
    pool) keeping page tables and page events if asked (``swa_tokens``: a sliding-window
    hybrid's SWA pool, whose pages the page events follow too).

    Raises:
        ConfigError: page tables or page events asked of a trace that keeps none.
    """
    if trace is not None and record_page_tables and trace.page_tables is None:
        raise bad_value("trace", type(trace).__name__, "a Trace with page tables when "
                        "record_page_tables=True")
    if trace is not None and record_pages and getattr(trace, "page_events", None) is None:
        raise bad_value("trace", type(trace).__name__, "a Trace with page events when "
                        "record_pages=True")
    if trace is not None:
        return trace
    total, p = max_total_num_tokens, page_size
    return Trace(meta or TraceMeta(total, p, policy=config.policy.value,
                                   sglang_version=config.sglang_version, radix_cache=radix_cache),
                 record_page_tables,
                 PageRecorder(total // p, None if swa_tokens is None else swa_tokens // p)
                 if record_pages else None)


class SchedulerComponents(NamedTuple):
    """The scheduler's components (:mod:`pagedkv.managers.scheduler_components`)."""

    counters: LoopCounters
    waiting: WaitingQueue
    ratio_tracker: NewTokenRatioTracker
    result_queue: OverlapResultQueue
    request_tracker: SchedulerRequestTracker
    pool_stats: SchedulerPoolStatsObserver
    metrics_reporter: SchedulerMetricsReporter
    step_recorder: SchedulerStepRecorder
    invariant_checker: SchedulerInvariantChecker
    batch_result_processor: SchedulerBatchResultProcessor
    prefill_manager: PrefillManager
    fast_forward: DecodeFastForward | None
    decode_memory_checker: DecodeMemoryChecker
    decode_step_runner: DecodeStepRunner


def init_components(reqs: Sequence[Req], pools: KVCache, trace: Trace | SummaryTrace,
                    executor: Executor, *, config: SchedulerConfig, page_size: int,
                    max_total_num_tokens: int, max_running_requests: int, fast_forward: bool,
                    is_hybrid_swa: bool, get_running_batch: Callable[[], ScheduleBatch],
                    page_view: SchedulerView | None) -> SchedulerComponents:
    """Every component, each given what it uses. The decode fast-forward only for an
    executor that predicts its step times and ``fast_forward`` (the caller turns it off
    when page tables are recorded: they need every step). ``is_hybrid_swa``: the pools are
    a sliding-window hybrid's. ``page_view``: the scheduler, when its trace records page
    events (a fast-forward window records its steps' pages)."""
    cfg, p, total = config, page_size, max_total_num_tokens
    counters = LoopCounters()
    mem = {"token_to_kv_pool_allocator": pools.allocator, "tree_cache": pools.tree_cache}
    waiting = WaitingQueue.from_reqs(reqs)
    ratio = NewTokenRatioTracker.from_config(cfg)
    samples_tokens = not executor.predicts_step_times
    result_queue = OverlapResultQueue(
        skip_finishing_decode_in_flight=cfg.release.skip_finishing_decode_in_flight,
        samples_tokens=samples_tokens)
    request_tracker = SchedulerRequestTracker(trace=trace, waiting=waiting)
    pool_stats = SchedulerPoolStatsObserver(config=cfg, page_size=p, max_total_num_tokens=total,
                                            **mem, ratio_tracker=ratio)
    metrics = SchedulerMetricsReporter(config=cfg, max_total_num_tokens=total, trace=trace,
                                       waiting=waiting, get_tokens_in_use=pool_stats.tokens_in_use)
    shared = {**mem, "req_to_token_pool": pools.req_to_token_pool, "waiting": waiting,
              "ratio_tracker": ratio}
    prefill = PrefillManager(config=cfg, max_running_requests=max_running_requests, **shared,
                             request_tracker=request_tracker, metrics_reporter=metrics,
                             is_hybrid_swa=is_hybrid_swa)
    recorder = SchedulerStepRecorder(trace=trace, page_size=p, max_total_num_tokens=total, **shared)
    checker = SchedulerInvariantChecker(
        page_size=p, max_total_num_tokens=total, max_running_requests=max_running_requests,
        **shared, get_running_batch=get_running_batch,
        get_chunked_req=lambda: prefill.chunked_req,
        get_num_finished=lambda: request_tracker.num_finished,
        get_in_flight_reqs=result_queue.in_flight_reqs)
    processor = SchedulerBatchResultProcessor(
        **mem, req_to_token_pool=pools.req_to_token_pool,
        group_prefill_frees=cfg.release.group_prefill_frees, samples_tokens=samples_tokens,
        eos_token_ids=frozenset(executor.eos_token_ids),
        on_finish=lambda req: request_tracker.finish(req, counters.num_steps, counters.clock))
    ff = None
    if fast_forward and executor.predicts_step_times:
        ff = DecodeFastForward(executor=cast(StepTimePredictor, executor), config=cfg, page_size=p,
                               max_total_num_tokens=total, **mem, waiting=waiting,
                               ratio_tracker=ratio, metrics_reporter=metrics,
                               step_recorder=recorder)
    memory_checker = DecodeMemoryChecker(
        token_to_kv_pool_allocator=pools.allocator, ratio_tracker=ratio,
        request_tracker=request_tracker, trace=trace, counters=counters,
        retract_decode_steps=cfg.retract_decode_steps,
        abort_last_request=cfg.release.abort_last_request,
        mamba_slots=(pools.req_to_token_pool.mamba_allocator
                     if isinstance(pools.req_to_token_pool, HybridReqToTokenPool)
                     and cfg.release.retract_log_counts_mamba_slots else None))
    runner = DecodeStepRunner(
        executor=executor, overlap=not cfg.disable_overlap_schedule,
        decode_log_interval=cfg.decode_log_interval, counters=counters, result_queue=result_queue,
        batch_result_processor=processor, metrics_reporter=metrics, fast_forward=ff,
        page_view=page_view)
    return SchedulerComponents(counters, waiting, ratio, result_queue, request_tracker, pool_stats,
                               metrics, recorder, checker, processor, prefill, ff, memory_checker,
                               runner)
