"""The compiled core's Python side: whether it applies, packing a scheduler's state into
arrays, running the compiled loop, and handing back what the reference would have left.

:func:`compiled_core_refusal` says why a scheduler cannot take the compiled core (None: it
can); :func:`run_compiled` runs a fresh :class:`~pagedkv.managers.scheduler.Scheduler` to the
end with it and leaves the scheduler as the Python loop (the reference) would: every request's
fields, the counters and ``new_token_ratio``, the allocator's free list and slot record, the
request rows and ``req_to_token``, the summary trace's totals; its events and log lines are
handed to the trace's ``on_event`` and ``on_log`` in the order the reference hands them. What
is not rebuilt: the running batch and the batch in flight of a run stopped early (Ctrl-C).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import pagedkv.managers.compiled_core.layout as L
from pagedkv.errors import OutOfMemoryError
from pagedkv.managers.compiled_core.radix_pack import pack_token_ids, pack_tree, unpack_tree
from pagedkv.managers.config import Policy
from pagedkv.managers.scheduler_components.decode_memory_checker import retract_line
from pagedkv.managers.scheduler_components.metrics_reporter import decode_line, prefill_line
from pagedkv.managers.trace import Event
from pagedkv.managers.trace_summary import FinishedColumns, SummaryTrace
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.model_executor.sim_executor import FixedStepTime, RooflineStepTime, SimExecutor

if TYPE_CHECKING:
    from pagedkv.managers.scheduler import Scheduler

STEPS_PER_CALL = 50_000  # steps between two returns to Python (progress, Ctrl-C)
EVENT_ROWS = 1 << 16
LOG_ROWS = 1 << 12


def compiled_core_refusal(sched: Scheduler) -> str | None:
    """Why ``sched`` cannot run on the compiled core (None: it can): a dense model's one pool
    with the radix cache on or off, the simulator's dense step times, SGLang's policy, requests
    that follow none, a summary trace, not yet stepped."""
    ex = sched.executor
    step_time = getattr(ex, "step_time", None)
    checks = (
        (type(sched.trace) is SummaryTrace, "a full Trace keeps every step's row"),
        (type(sched.tree_cache) in (ChunkCache, RadixCache), "a hybrid model's prefix cache"),
        (type(sched.allocator) in (TokenToKVPoolAllocator, PagedTokenToKVPoolAllocator),
         "a hybrid model's pools"),
        (type(sched.req_to_token_pool) is ReqToTokenPool, "a hybrid model's state slots"),
        (type(ex) is SimExecutor and (type(step_time) is FixedStepTime or (
            type(step_time) is RooflineStepTime and step_time.experts is None
            and step_time.active_params is None and step_time.sliding_window is None
            and not step_time.state_bytes)),
         "step times other than a dense model's roofline"),
        (sched.config.policy is Policy.SGLANG, "a teaching admission policy"),
        (all(r.follows is None for r in sched.reqs), "conversations (requests that follow others)"),
        (sched.num_steps == 0, "the scheduler has already stepped"),
    )
    for ok, why in checks:
        if not ok:
            return why
    return None


def pack(sched: Scheduler) -> L.State:
    """A fresh scheduler's state as arrays (``req_to_token`` and the slot record shared)."""
    reqs, cfg, rel = sched.reqs, sched.config, sched.config.release
    n, p, total = len(reqs), sched.page_size, sched.max_total_num_tokens
    R = np.zeros((n, L.NR), dtype=np.int64)
    cols = {L.R_PROMPT: "prompt_len", L.R_MAXNEW: "max_new_tokens", L.R_IGNORE: "ignore_eos"}
    for col, name in cols.items():
        R[:, col] = np.fromiter((getattr(r, name) for r in reqs), np.int64, n)
    R[:, L.R_OUTLEN] = np.fromiter((-1 if r.output_len is None else r.output_len for r in reqs),
                                   np.int64, n)
    out = R[:, L.R_OUTLEN]
    R[:, L.R_STOPAT] = np.where(R[:, L.R_IGNORE].astype(bool) | (out < 0), R[:, L.R_MAXNEW],
                                np.minimum(out, R[:, L.R_MAXNEW]))
    R[:, L.R_ROW] = -1
    R[:, L.R_NODE] = -1
    ids = pack_token_ids(reqs, R)
    RF = np.full((n, L.NRF), np.nan)
    RF[:, L.RF_ARRIVAL] = np.fromiter((r.arrival_s for r in reqs), np.float64, n)
    RF[:, L.RF_QUEUE] = 0.0
    RF[:, L.RF_ENQUEUED] = RF[:, L.RF_ARRIVAL]
    alloc, pool = sched.allocator, sched.req_to_token_pool
    npages = alloc.num_pages
    free = np.zeros(npages, dtype=np.int64)
    fp = alloc.free_pages.numpy()
    free[:len(fp)] = fp
    rows = np.zeros(pool.size, dtype=np.int64)
    rows[:len(pool.free_slots)] = pool.free_slots
    I = np.zeros(L.NI, dtype=np.int64)  # noqa: E741
    I[L.I_CHUNKED] = -1
    I[L.I_FLEN], I[L.I_RLEN] = len(fp), len(pool.free_slots)
    F = np.zeros(L.NF)
    F[L.F_RATIO] = sched.ratio_tracker.current
    st = sched.executor.step_time
    roofline = isinstance(st, RooflineStepTime)
    radix = type(sched.tree_cache) is RadixCache
    longest = int((R[:, L.R_PROMPT] + R[:, L.R_MAXNEW]).max()) + p
    tree = pack_tree(p, npages, total, longest, radix)
    C = np.zeros(L.NC, dtype=np.int64)
    for col, value in {
        L.C_P: p, L.C_TOTAL: total, L.C_NPAGES: npages, L.C_MAXRUN: sched.max_running_requests,
        L.C_CHUNK: -1 if cfg.chunked_prefill_size is None else cfg.chunked_prefill_size,
        L.C_MAXPREFILL: cfg.max_prefill_tokens, L.C_CLIP: cfg.clip_max_new_tokens,
        L.C_OVERLAP: not cfg.disable_overlap_schedule,
        L.C_OVERHEAD: p if rel.extra_page_per_request else 0,
        L.C_IGNORE_EOS_ALL: rel.ignore_eos_reserves_all,
        L.C_BOTH_BUDGETS: rel.max_prefill_tokens_with_chunking,
        L.C_PAGE_BOUNDARY: rel.chunk_ends_on_page_boundary,
        L.C_RAW_TOKENS: rel.prefill_log_raw_tokens,
        L.C_COUNT_ROWS: rel.allocatable_counts_free_rows,
        L.C_FILTER_EVERY: rel.filter_finished_every_step,
        L.C_BUSY_RULE: rel.batch_full_only_when_busy,
        L.C_STOP_SPENT: rel.stop_pass_at_spent_budget, L.C_ABORT_LAST: rel.abort_last_request,
        L.C_RESET_IDLE: rel.reset_ratio_only_when_idle, L.C_GROUP_PREFILL: rel.group_prefill_frees,
        L.C_SKIP_FINISHING: rel.skip_finishing_decode_in_flight,
        L.C_ROW_LIFO: pool.reuse_last_freed, L.C_FREE_ROW_ORDER: rel.free_order == "row",
        L.C_RETRACT_STEPS: cfg.retract_decode_steps, L.C_LOG_INTERVAL: cfg.decode_log_interval,
        L.C_KEEP_LOG: sched.trace.keeps_log, L.C_KEEP_EVENTS: sched.trace.on_event is not None,
        L.C_NO_CONSEC: cfg.disable_consecutive_prefill_overlap,
        L.C_STEP_KIND: L.STEP_ROOFLINE if roofline else L.STEP_FIXED,
        L.C_WEIGHTS: st.weights_bytes if roofline else 0, L.C_CELL: st.cell_size if roofline else 0,
        L.C_PARAMS: st.num_params if roofline else 0, L.C_ROWS_SIZE: pool.size, L.C_N: n,
        L.C_RADIX: radix, L.C_EVICT_UNTIL_FREE: rel.evict_until_free,
        L.C_SPLIT_OUTPUT: rel.split_output_from_prompt, L.C_TOUCH: rel.touch_waiting_prefixes,
    }.items():
        C[col] = int(value)
    CF = np.zeros(L.NCF)
    tracker = sched.ratio_tracker
    CF[L.CF_INIT], CF[L.CF_MIN], CF[L.CF_DECAY] = tracker.init, tracker.min, tracker.decay
    if roofline:
        CF[L.CF_BW], CF[L.CF_PEAK] = st.hbm_bandwidth, st.peak_flops
    else:
        CF[L.CF_STEP_S] = st.step_s
    cap = pool.rows + 2
    arrival = RF[:, L.RF_ARRIVAL]
    return L.State(
        R=R, RF=RF, I=I, F=F, C=C, CF=CF, queue=np.zeros(n + 1, dtype=np.int64),
        arrivals=np.lexsort((np.arange(n), arrival)).astype(np.int64), free=free,
        group=np.zeros(npages, dtype=np.int64), slot_state=alloc._state,
        table=pool.req_to_token.numpy(), rows=rows, running=np.zeros(cap, dtype=np.int64),
        scratch=np.zeros(cap, dtype=np.int64), infl=np.zeros((2, cap), dtype=np.int64),
        infl_sample=np.zeros((2, cap), dtype=np.int64), infl_end=np.zeros((2, cap), dtype=np.int64),
        admitted=np.zeros(cap, dtype=np.int64), st_left=np.zeros(2 * cap + 2),
        st_occ=np.zeros(2 * cap + 2, dtype=np.int64), pages=np.zeros(total + p, dtype=np.int64),
        events=np.zeros((EVENT_ROWS + 8 * cap, 6), dtype=np.int64),
        logs=np.zeros((LOG_ROWS, 9), dtype=np.int64), logf=np.zeros((LOG_ROWS, 2)),
        tree=tree, ids=ids, key=np.zeros(longest, dtype=np.int64),
        vals=np.zeros(longest, dtype=np.int64),
        ev_out=np.zeros(total + p if radix else 1, dtype=np.int64),
        ev_ends=np.zeros(npages + 2 if radix else 1, dtype=np.int64))


def ring(buf: np.ndarray, head: int, n: int) -> np.ndarray:
    """A ring's ``n`` entries from ``head``, in order."""
    return buf[(head + np.arange(n)) % len(buf)]


_INT_COLS = [L.R_GEN, L.R_KV, L.R_ROW, L.R_PREFIX, L.R_EXTEND, L.R_CPL, L.R_NRETRACT, L.R_RECOMP,
             L.R_CACHED, L.R_KEPT]
_REASONS = np.array(L.REASONS, dtype=object)


def unpack_requests(sched: Scheduler, s: L.State, rids: np.ndarray) -> None:
    """Write the requests ``rids``' (int64) fields back into their ``Req`` objects: each
    column into Python values at once, then one pass that writes each request's fields
    together (one visit to each object: they lie scattered in memory)."""
    R, RF = s.R[rids], s.RF[rids]
    ints = R[:, _INT_COLS].T.tolist()
    flags = R[:, [L.R_FINISHED, L.R_RETRACTED, L.R_ADMITTED]].T.astype(bool).tolist()
    times = RF[:, [L.RF_QUEUE, L.RF_ENQUEUED]].T.tolist()
    at = RF[:, [L.RF_FIRST_ADMIT, L.RF_FIRST_TOKEN, L.RF_FINISH]].T
    maybe = at.astype(object)
    maybe[np.isnan(at)] = None  # not yet: None
    reqs = sched.reqs
    for (r, gen, kv, row, prefix, extend, cpl, nretract, recomp, cached, kept, finished, retracted,
         admitted, queue, enqueued, first_admit, first_token, finish, reason) in zip(
            [reqs[rid] for rid in rids.tolist()], *ints, *flags, *times, *maybe.tolist(),
            _REASONS[R[:, L.R_REASON]].tolist(), strict=True):
        r.generated, r.kv_committed_len, r.req_pool_idx = gen, kv, row
        r.prefix_len, r.extend_len, r.cache_protected_len = prefix, extend, cpl
        r.num_retractions, r.recomputed_tokens, r.cached_tokens = nretract, recomp, cached
        r.kept_at_retract, r.finished, r.is_retracted, r.admitted_before = kept, finished, retracted, admitted
        r.queue_s, r.enqueued_s, r.first_admit_s = queue, enqueued, first_admit
        r.first_token_s, r.finish_s, r.finish_reason = first_token, finish, reason


def finished_columns(s: L.State, rids: np.ndarray) -> FinishedColumns:
    """The requests ``rids``' (int64, in finish order) fields a per-request table reads."""
    R, RF = s.R[rids], s.RF[rids]
    return FinishedColumns(
        rids, R[:, L.R_PROMPT], R[:, L.R_GEN], R[:, L.R_CACHED], R[:, L.R_NRETRACT],
        R[:, L.R_RECOMP], RF[:, L.RF_ARRIVAL], RF[:, L.RF_QUEUE], RF[:, L.RF_FIRST_TOKEN],
        RF[:, L.RF_FINISH], [L.REASONS[k] for k in R[:, L.R_REASON].tolist()])


def unpack(sched: Scheduler, s: L.State) -> None:
    """Leave ``sched`` as the reference loop would have (see the module docstring)."""
    I, F = s.I, s.F  # noqa: E741
    # finished requests were brought up to date when their finish was handed on
    unpack_requests(sched, s, np.flatnonzero(s.R[:, L.R_FINISHED] == 0))
    sched.allocator.free_pages = ring(s.free, I[L.I_FHEAD], I[L.I_FLEN])
    pool = sched.req_to_token_pool
    pool.free_slots = ring(s.rows, I[L.I_RHEAD], I[L.I_RLEN]).tolist()
    pool._row_free[:] = False
    pool._row_free[pool.free_slots] = True
    c = sched.counters
    c.clock, c.num_steps, c.num_decode_steps = float(F[L.F_CLOCK]), int(I[L.I_NSTEPS]), int(I[L.I_NDECODE])
    c.decoded, c.num_decode_skips = int(I[L.I_DECODED]), int(I[L.I_NSKIPS])
    c.idle_blocked = int(I[L.I_IDLE_BLOCKED])
    sched.ratio_tracker.current = float(F[L.F_RATIO])
    sched.request_tracker.num_finished = int(I[L.I_NFINISHED])
    chunked = int(I[L.I_CHUNKED])
    sched.prefill_manager.chunked_req = None if chunked < 0 else sched.reqs[chunked]
    sched.running.batch_is_full = bool(I[L.I_BATCH_FULL])
    waiting = sched.waiting
    waiting.queue = deque(sched.reqs[rid] for rid in ring(s.queue, I[L.I_QHEAD], I[L.I_QLEN]).tolist())
    waiting.tokens = int(I[L.I_QTOKENS])
    later = s.arrivals[I[L.I_ARR]:].tolist()
    waiting.arrivals = [(sched.reqs[rid].arrival_s, rid) for rid in later]
    heapq.heapify(waiting.arrivals)
    reporter = sched.metrics_reporter
    reporter.last_clock, reporter.last_decoded = float(F[L.F_LAST_CLOCK]), int(I[L.I_LAST_DECODED])
    sched.waiting.refresh_calls = int(I[L.I_REFRESH])
    if type(sched.tree_cache) is RadixCache:
        unpack_tree(sched, s)


def hand_on(sched: Scheduler, s: L.State) -> None:
    """The events and log lines recorded since the last call, to the trace's ``on_event``
    and ``on_log`` (finished requests brought up to date first: ``on_event`` reads them)."""
    trace, I = sched.trace, s.I  # noqa: E741
    ev = s.events[:I[L.I_EVN]]
    if len(ev):
        done = ev[(ev[:, 1] == L.EV_FINISH) | (ev[:, 1] == L.EV_ABORT), 2]
        unpack_requests(sched, s, done)
        wanted = trace.event_kinds
        if trace.on_finished is not None:  # the finished requests as columns, not events
            trace.on_finished(finished_columns(s, done))
            ev = ev[(ev[:, 1] != L.EV_FINISH) & (ev[:, 1] != L.EV_ABORT)]
        if trace.on_event is None:
            ev = ev[:0]
        elif wanted is not None:
            ev = ev[np.isin(ev[:, 1], [L.EVENT_KINDS.index(k) for k in wanted])]
        for step, kind, rid, a, b, c in ev.tolist():
            extra = ({"extend": a, "cached": b} if kind in (L.EV_ADMIT, L.EV_REPREFILL) else
                     {"prefix": a, "tokens": b} if kind == L.EV_CHUNK else
                     {"output_len": a, "freed": b, "kept": c} if kind == L.EV_RETRACT else
                     {"output_len": a})
            trace.on_event(Event(step, L.EVENT_KINDS[kind], rid, extra))
    I[L.I_EVN] = 0
    cfg, total = sched.config, sched.max_total_num_tokens
    for ints, floats in zip(s.logs[:I[L.I_LOGN]].tolist(), s.logf[:I[L.I_LOGN]].tolist(), strict=True):
        kind = ints[0]
        if kind == L.LOG_PREFILL:
            line = prefill_line(cfg, ints[2], ints[3], ints[4], ints[5] / total, ints[6], ints[7],
                                ints[8], floats[0])
        elif kind == L.LOG_DECODE:
            line = decode_line(cfg, ints[2], ints[3], ints[3] / total, floats[0], ints[4])
        else:
            line = retract_line(ints[2], ints[3], floats[0], floats[1])
        trace.on_log(line)
    I[L.I_LOGN] = 0


@functools.cache
def clear_stale_cache() -> None:
    """numba's cache (``cache=True``) checks each compiled function against its own file only,
    so a loop compiled with an older version of a helper in another file would be reused:
    when this package's sources differ from those the in-tree cache was built from (a stamp
    file beside it), its cached code is removed and compiled again. An installed release
    changes every file at once, which numba notices by itself."""
    folder = Path(__file__).parent
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.glob("*.py")))).hexdigest()
    cache, stamp = folder / "__pycache__", folder / "__pycache__" / "compiled_core.sources"
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    try:
        for path in [*cache.glob("*.nbi"), *cache.glob("*.nbc")]:
            path.unlink()
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:  # not writable: numba caches in its user-wide folder instead
        pass


def compiled_core_cached() -> bool | None:
    """Whether numba's in-tree cache holds the compiled step loop, so that a run starts at
    once (False: the first run compiles it, about a minute and a half; None: the cache is
    not in the tree, e.g. a read-only install, and this cannot tell)."""
    clear_stale_cache()
    cache = Path(__file__).parent / "__pycache__"
    if not (cache / "compiled_core.sources").exists():
        return None
    return any(cache.glob("loop.run_steps*.nbi"))


def run_compiled(sched: Scheduler, on_pause: Callable[[Scheduler], None] | None = None) -> None:
    """Run a fresh ``sched`` (see :func:`compiled_core_refusal`) to the end on the compiled
    core. ``on_pause`` is called with it every ``STEPS_PER_CALL`` steps (its finished requests
    up to date). Ctrl-C between two calls leaves it as the reference leaves an interrupted run
    (finished requests, counters, totals) and propagates.

    Raises:
        OutOfMemoryError, PagedKVError: what the reference raises on the same run (a pool too
            small for one request, a stuck queue, a leak).
    """
    clear_stale_cache()
    from pagedkv.managers.compiled_core.loop import run_steps

    s = pack(sched)
    cap = len(s.running)
    status = L.PAUSED
    try:
        while status == L.PAUSED:
            status = run_steps(s, STEPS_PER_CALL, 8 * cap, 8)
            hand_on(sched, s)
            if status == L.PAUSED and on_pause is not None:
                on_pause(sched)
    finally:
        I = s.I  # noqa: E741
        sched.trace.record_totals(int(I[L.I_K_PREFILL]), int(I[L.I_K_DECODE]), int(I[L.I_K_IDLE]),
                                  int(I[L.I_CHUNKS]), int(I[L.I_RETRACTIONS]), int(I[L.I_PEAK_USED]),
                                  int(I[L.I_PEAK_IN_USE]), int(I[L.I_BUSY]))
        unpack(sched, s)
    raise_error(sched, status)


def raise_error(sched: Scheduler, status: int) -> None:
    """The reference's error for a compiled run's error code (none for DONE)."""
    if status == L.ERR_STUCK:
        sched.invariant_checker.check_not_stuck(3)
    if status == L.ERR_LEAK:
        sched.check_memory()
    if status == L.ERR_LAST_REQUEST:
        raise OutOfMemoryError("Out of memory even after retracting all other requests in the "
                               f"decode batch: {sched.allocator.available_size()} slots free; "
                               "the pool is too small for one request")
    if status in (L.ERR_EXTEND_OOM, L.ERR_DECODE_OOM):
        raise OutOfMemoryError(f"a pass does not fit {sched.allocator.available_size()} free slots")
    if status != L.DONE:
        raise AssertionError(f"compiled core stopped with status {status}")
