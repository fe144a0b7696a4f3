"""The compiled core's loop: SGLang's ``event_loop_overlap`` (the default) and
``event_loop_normal``, one iteration per step, and the totals a summary trace keeps.

Mirrors the Python reference :class:`~pagedkv.managers.scheduler.Scheduler` (``step``,
``event_loop_overlap``, ``event_loop_normal``, ``get_next_batch_to_run``, ``run_batch``,
``process_batch_result``, ``on_idle``, ``jump_to_next_arrival``; SGLang 0.5.23
``managers/scheduler.py``) step for step, with the simulator's step times
(:class:`~pagedkv.model_executor.sim_executor.RooflineStepTime` or ``FixedStepTime``, the
same floating-point operations in the same order), the step recorder's totals
(:class:`~pagedkv.managers.trace_summary.SummaryTrace`) and SGLang's prefill and decode log
records (formatted in Python). Every decode step is taken one by one (the reference's
fast-forward gives the same run). :func:`run_steps` runs until every request has finished, or
pauses after ``max_steps`` steps or when the event or log buffers are nearly full, so that the
caller can hand their records on and show progress.
"""

from __future__ import annotations

from pagedkv.managers.compiled_core.admission import get_new_batch_prefill
from pagedkv.managers.compiled_core.decode import (
    filter_finished,
    merge_in_flight_prefill,
    prepare_for_decode,
    process_decode_result,
    process_prefill_result,
    stash_chunked_request,
    update_running_batch,
)
from pagedkv.managers.compiled_core.layout import (
    C_CELL,
    C_FILTER_EVERY,
    C_KEEP_LOG,
    C_LOG_INTERVAL,
    C_N,
    C_NO_CONSEC,
    C_OVERLAP,
    C_PARAMS,
    C_RESET_IDLE,
    C_ROWS_SIZE,
    C_STEP_KIND,
    C_TOTAL,
    C_WEIGHTS,
    CF_BW,
    CF_INIT,
    CF_PEAK,
    CF_STEP_S,
    DONE,
    ERR_DECODE_OOM,
    ERR_EXTEND_OOM,
    ERR_LAST_REQUEST,
    ERR_LEAK,
    ERR_STUCK,
    F_CLOCK,
    F_INFL_END,
    F_LAST_CLOCK,
    F_RATIO,
    I_ARR,
    I_BATCH_FULL,
    I_BUSY,
    I_CHUNKED,
    I_DECODED,
    I_EVN,
    I_IDLE_BLOCKED,
    I_INFL_MODE,
    I_INFL_N,
    I_K_DECODE,
    I_K_IDLE,
    I_K_PREFILL,
    I_LAST_DECODED,
    I_LOGN,
    I_NDECODE,
    I_NFINISHED,
    I_NRUN,
    I_NSTEPS,
    I_PASS_MODE,
    I_PASS_N,
    I_PEAK_IN_USE,
    I_PEAK_USED,
    I_QHEAD,
    I_QLEN,
    I_QTOKENS,
    I_RLEN,
    LOG_DECODE,
    LOG_PREFILL,
    MODE_DECODE,
    MODE_EXTEND,
    MODE_NONE,
    PAUSED,
    R_EXTEND,
    R_FINISHED,
    R_GEN,
    R_KV,
    R_PROMPT,
    RF_ARRIVAL,
    StateRef,
)
from pagedkv.managers.compiled_core.pools import available_size, entry, jit, jit_inline
from pagedkv.managers.compiled_core.radix import T_EVICTABLE, T_PROTECTED, tree_ref

KIND_PREFILL, KIND_DECODE, KIND_IDLE = 0, 1, 2


@jit
def step_seconds(s, tokens: int, kv_tokens: int) -> float:
    """The step-time model's pass time (``RooflineStepTime._roofline`` of a dense model
    without window layers or state, or ``FixedStepTime``)."""
    if s.C[C_STEP_KIND] == 0:
        return s.CF[CF_STEP_S]
    read = (s.C[C_WEIGHTS] + kv_tokens * s.C[C_CELL]) / s.CF[CF_BW]
    return max(read, 2.0 * s.C[C_PARAMS] * tokens / s.CF[CF_PEAK])


@jit_inline
def tokens_in_use(s) -> int:
    """SGLang's ``#token``: ``max_total - available - evictable``."""
    return s.C[C_TOTAL] - available_size(s) - s.tree.T[T_EVICTABLE]


@jit
def enqueue_arrivals(s) -> None:
    """``recv_requests``: what has arrived by now joins the back of the queue."""
    n, queue, arrivals, RF, R, I = s.C[C_N], s.queue, s.arrivals, s.RF, s.R, s.I  # noqa: E741
    q, clock = len(queue), s.F[F_CLOCK]
    while I[I_ARR] < n and RF[arrivals[I[I_ARR]], RF_ARRIVAL] <= clock:
        rid = arrivals[I[I_ARR]]
        I[I_ARR] += 1
        queue[(I[I_QHEAD] + I[I_QLEN]) % q] = rid
        I[I_QLEN] += 1
        I[I_QTOKENS] += R[rid, R_PROMPT] + R[rid, R_GEN]


@jit
def log_prefill(s, k: int, log_input: int, log_hit: int, running_bs: int, seconds: float,
                ext_total: int) -> None:
    """The prefill line's numbers (``report_prefill_stats``), when the run keeps its log."""
    if not s.C[C_KEEP_LOG]:
        return
    c = s.I[I_CHUNKED]
    pending = 0 if c < 0 else s.R[c, R_PROMPT] + s.R[c, R_GEN] - s.R[c, R_KV]
    e = s.I[I_LOGN]
    s.logs[e, 0], s.logs[e, 1], s.logs[e, 2], s.logs[e, 3] = LOG_PREFILL, s.I[I_NSTEPS], k, log_input
    s.logs[e, 4], s.logs[e, 5], s.logs[e, 6] = log_hit, tokens_in_use(s), running_bs
    s.logs[e, 7], s.logs[e, 8] = s.I[I_QLEN], s.I[I_QTOKENS] + pending
    s.logf[e, 0] = ext_total / seconds if seconds > 0 else 0.0
    s.I[I_LOGN] = e + 1


@jit
def log_decode(s, bs: int) -> None:
    """``DecodeStepRunner.log_decode``: every ``decode_log_interval`` decode steps, the
    throughput since the last line (``report_decode_stats``) and the line's numbers."""
    if s.I[I_NDECODE] % s.C[C_LOG_INTERVAL] != 0:
        return
    clock, decoded = s.F[F_CLOCK], s.I[I_DECODED]
    elapsed = clock - s.F[F_LAST_CLOCK]
    rate = (decoded - s.I[I_LAST_DECODED]) / elapsed if elapsed > 0 else 0.0
    s.F[F_LAST_CLOCK], s.I[I_LAST_DECODED] = clock, decoded
    if not s.C[C_KEEP_LOG]:
        return
    e = s.I[I_LOGN]
    s.logs[e, 0], s.logs[e, 1], s.logs[e, 2] = LOG_DECODE, s.I[I_NSTEPS], bs
    s.logs[e, 3], s.logs[e, 4] = tokens_in_use(s), s.I[I_QLEN]
    s.logf[e, 0] = rate
    s.I[I_LOGN] = e + 1


@jit
def on_idle(s) -> int:
    """``on_idle``: the idle memory check (``available + evictable + protected == pool``,
    no row held) and the ratio's reset (0.5.23: only when nothing
    waits or runs), the stuck check, then the clock jumps to the next arrival. 0, or an
    error code."""
    fully_idle = s.I[I_QLEN] == 0 and s.I[I_NRUN] == 0 and s.I[I_CHUNKED] < 0
    if not s.C[C_RESET_IDLE] or fully_idle:
        tree = s.tree.T[T_EVICTABLE] + s.tree.T[T_PROTECTED]
        if available_size(s) + tree != s.C[C_TOTAL] or s.I[I_RLEN] != s.C[C_ROWS_SIZE]:
            return ERR_LEAK
        s.F[F_RATIO] = s.CF[CF_INIT]
    if s.I[I_QLEN] and s.I[I_NRUN] == 0:
        s.I[I_IDLE_BLOCKED] += 1
        if s.I[I_IDLE_BLOCKED] > 2:
            return ERR_STUCK
    jump_to_next_arrival(s)
    return 0


@jit
def jump_to_next_arrival(s) -> None:
    """Nothing ran and nothing waits: the clock moves on to the next arrival."""
    if s.I[I_QLEN] == 0 and s.I[I_ARR] < s.C[C_N]:
        s.F[F_CLOCK] = max(s.F[F_CLOCK], s.RF[s.arrivals[s.I[I_ARR]], RF_ARRIVAL])


@jit
def next_batch(s):
    """``get_next_batch_to_run``: ``(mode, k, log_input, log_hit, running_bs, error)``; a
    prefill pass's launch record is in row 1 of ``s.infl``."""
    stash_chunked_request(s)
    if s.C[C_FILTER_EVERY] and filter_finished(s):
        s.I[I_BATCH_FULL] = 0
    if s.I[I_INFL_MODE] == MODE_EXTEND:
        merge_in_flight_prefill(s)
    k, log_input, log_hit, running_bs, ok = get_new_batch_prefill(s, s.I[I_NSTEPS], s.F[F_CLOCK])
    if not ok:
        return MODE_EXTEND, k, 0, 0, running_bs, ERR_EXTEND_OOM
    if k:
        return MODE_EXTEND, k, log_input, log_hit, running_bs, 0
    if s.I[I_NRUN] == 0:
        return MODE_NONE, 0, 0, 0, 0, 0
    go = update_running_batch(s)
    if go < 0:
        return MODE_NONE, 0, 0, 0, 0, ERR_LAST_REQUEST
    return (MODE_DECODE if go else MODE_NONE), 0, 0, 0, 0, 0


@jit
def launch_decode(s) -> float:
    """``prepare_for_decode`` counted, its launch record in row 1; the pass's seconds (-1:
    the pool is short)."""
    n, R, running = s.I[I_NRUN], s.R, s.running
    kv = 0
    for j in range(n):
        kv += R[running[j], R_KV]
    if not prepare_for_decode(s):
        return -1.0
    s.I[I_NDECODE] += 1
    s.I[I_DECODED] += n
    s.infl[1, :n] = s.running[:n]
    s.I[I_PASS_MODE], s.I[I_PASS_N] = MODE_DECODE, n
    return step_seconds(s, n, kv)


@jit
def process_in_flight(s) -> None:
    """The overlap loop's ``process_batch_result`` for the batch in flight (row 0), at the
    clock its pass ended (``LoopCounters.at``)."""
    now = s.F[F_CLOCK]
    s.F[F_CLOCK] = s.F[F_INFL_END]
    n = s.I[I_INFL_N]
    if s.I[I_INFL_MODE] == MODE_DECODE:
        process_decode_result(s, s.infl[0], n)
    else:
        s.I[I_DECODED] += process_prefill_result(s, 0, n, False)
    s.F[F_CLOCK] = now
    s.I[I_INFL_MODE] = MODE_NONE


@jit
def event_loop_overlap(s) -> int:
    """One iteration of ``event_loop_overlap``; the step's kind, or an error code (< 0)."""
    enqueue_arrivals(s)
    mode, k, log_input, log_hit, running_bs, err = next_batch(s)
    if err:
        return err
    seconds, ext_total = 0.0, 0
    if mode == MODE_EXTEND:
        s.I[I_PASS_MODE], s.I[I_PASS_N] = MODE_EXTEND, k
        seconds, ext_total = prefill_seconds(s, k)
    elif mode == MODE_DECODE:
        seconds = launch_decode(s)
        if seconds < 0:
            return ERR_DECODE_OOM
    previous = s.I[I_INFL_MODE] != MODE_NONE
    if (previous and mode == MODE_EXTEND and s.I[I_INFL_MODE] == MODE_EXTEND
            and s.C[C_NO_CONSEC]):
        process_in_flight(s)
        previous = False
    if mode != MODE_NONE:
        s.F[F_CLOCK] += seconds
        s.I[I_IDLE_BLOCKED] = 0
        if mode == MODE_EXTEND:
            log_prefill(s, k, log_input, log_hit, running_bs, seconds, ext_total)
        else:
            log_decode(s, s.I[I_PASS_N])
    end_s = s.F[F_CLOCK]
    if previous:
        process_in_flight(s)
        if mode == MODE_NONE:
            jump_to_next_arrival(s)
    elif mode == MODE_NONE:
        err = on_idle(s)
        if err:
            return err
    s.I[I_INFL_MODE] = MODE_NONE
    if mode != MODE_NONE:  # the launched pass is now the batch in flight
        n = s.I[I_PASS_N]
        s.infl[0, :n] = s.infl[1, :n]
        s.infl_sample[0, :n] = s.infl_sample[1, :n]
        s.infl_end[0, :n] = s.infl_end[1, :n]
        s.I[I_INFL_MODE], s.I[I_INFL_N], s.F[F_INFL_END] = mode, n, end_s
        return KIND_PREFILL if mode == MODE_EXTEND else KIND_DECODE
    return KIND_IDLE


@jit
def event_loop_normal(s) -> int:
    """One iteration of ``event_loop_normal``; the step's kind, or an error code (< 0)."""
    enqueue_arrivals(s)
    mode, k, log_input, log_hit, running_bs, err = next_batch(s)
    if err:
        return err
    if mode == MODE_NONE:
        err = on_idle(s)
        return err if err else KIND_IDLE
    if mode == MODE_DECODE:
        seconds = launch_decode(s)
        if seconds < 0:
            return ERR_DECODE_OOM
        s.F[F_CLOCK] += seconds
        s.I[I_IDLE_BLOCKED] = 0
        n = s.I[I_NRUN]
        process_decode_result(s, s.running, n)
        log_decode(s, n)
        return KIND_DECODE
    seconds, ext_total = prefill_seconds(s, k)
    s.F[F_CLOCK] += seconds
    s.I[I_IDLE_BLOCKED] = 0
    sampled = 0
    for j in range(k):
        sampled += s.infl_sample[1, j]
    process_prefill_result(s, 1, k, True)
    s.I[I_DECODED] += sampled
    log_prefill(s, k, log_input, log_hit, running_bs, seconds, ext_total)
    return KIND_PREFILL


@jit
def prefill_seconds(s, k: int):
    """A prefill pass's seconds and extend tokens (row 1 of ``s.infl``): ``prefill_s(sum
    extend, kv_tokens = sum prefix)`` (``SimExecutor.forward``)."""
    ext = pre = 0
    for j in range(k):
        e = s.R[s.infl[1, j], R_EXTEND]
        ext += e
        pre += s.infl_end[1, j] - e
    return step_seconds(s, ext, pre), ext


@jit
def record_step(s, kind: int) -> None:
    """``SchedulerStepRecorder.record`` into a summary trace: the step's kind, the tokens
    live requests hold (the running batch's, a chunked request's, an in-flight prefill's
    requests not yet merged) and the pool's use."""
    used, R, running, infl = 0, s.R, s.running, s.infl
    for j in range(s.I[I_NRUN]):
        rid = running[j]
        if not R[rid, R_FINISHED]:
            used += R[rid, R_KV]
    c = s.I[I_CHUNKED]
    if c >= 0:
        used += R[c, R_KV]
    if s.I[I_INFL_MODE] == MODE_EXTEND:
        for j in range(s.I[I_INFL_N]):
            rid = infl[0, j]
            if rid != c and not R[rid, R_FINISHED] and R[rid, R_KV] > 0:
                used += R[rid, R_KV]
    in_use = tokens_in_use(s)
    if kind == KIND_PREFILL:
        s.I[I_K_PREFILL] += 1
    elif kind == KIND_DECODE:
        s.I[I_K_DECODE] += 1
    else:
        s.I[I_K_IDLE] += 1
    s.I[I_PEAK_USED] = max(s.I[I_PEAK_USED], used)
    s.I[I_PEAK_IN_USE] = max(s.I[I_PEAK_IN_USE], in_use)
    if kind != KIND_IDLE:
        s.I[I_BUSY] += in_use


@entry
def run_steps(state, max_steps: int, event_room: int, log_room: int) -> int:
    """Step the :class:`~pagedkv.managers.compiled_core.layout.State` ``state`` until every
    request has finished (DONE), or pause (PAUSED) after ``max_steps`` steps or when fewer
    than ``event_room`` event rows or ``log_room`` log rows are left; an error code (< 0)
    stops it. The loop runs on its arrays behind one reference (``StateRef``)."""
    s = StateRef(*state[:-1], tree_ref(state.tree))  # the tree is State's last field
    return step_until(s, max_steps, event_room, log_room)


@jit
def step_until(s, max_steps: int, event_room: int, log_room: int) -> int:
    """:func:`run_steps` on a ``StateRef``."""
    overlap = s.C[C_OVERLAP] != 0
    for _ in range(max_steps):
        if s.I[I_NFINISHED] == s.C[C_N]:
            return DONE
        if s.I[I_EVN] + event_room > len(s.events) or s.I[I_LOGN] + log_room > len(s.logs):
            return PAUSED
        kind = event_loop_overlap(s) if overlap else event_loop_normal(s)
        if kind < 0:
            return kind
        record_step(s, kind)
        s.I[I_NSTEPS] += 1
    return DONE if s.I[I_NFINISHED] == s.C[C_N] else PAUSED


