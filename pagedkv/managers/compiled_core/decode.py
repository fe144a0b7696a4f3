"""The compiled core's decode path and pass results: the memory check, retraction, a decode
step's slots, and what a pass's result does to its requests.

Mirrors the Python reference's ``Scheduler.update_running_batch`` with
:class:`~pagedkv.managers.scheduler_components.decode_memory_checker.DecodeMemoryChecker`
(SGLang 0.5.23 ``scheduler.py``: ``update_running_batch``, ``_reqs_finishing_inflight``;
``schedule_batch.py``: ``check_decode_mem`` and ``prepare_for_decode`` with their
evictions, ``retract_decode``, ``release_req``; ``new_token_ratio_tracker.py``), :mod:`~pagedkv.managers.
retract_decode` and :class:`~pagedkv.managers.scheduler_components.batch_result_processor.
SchedulerBatchResultProcessor` (``process_batch_result_prefill``, ``process_batch_result_decode``
and the overlap loop's batch in flight), with ``SchedulerRequestTracker``'s ``retract`` and
``finish``. The running batch is ``s.running[:I_NRUN]`` (rids, batch order); each request's
``generated`` and ``kv_committed_len`` live in ``s.R`` (the reference keeps them in the
batch's columns and syncs its ``Req`` objects whenever they are read: the same numbers).
"""

from __future__ import annotations

import numpy as np

from pagedkv.managers.compiled_core.admission import record_event
from pagedkv.managers.compiled_core.layout import (
    C_ABORT_LAST,
    C_GROUP_PREFILL,
    C_KEEP_LOG,
    C_NPAGES,
    C_P,
    C_RETRACT_STEPS,
    C_SKIP_FINISHING,
    CF_DECAY,
    CF_MIN,
    EV_ABORT,
    EV_FINISH,
    EV_RETRACT,
    F_CLOCK,
    F_RATIO,
    I_BATCH_FULL,
    I_CHUNKED,
    I_FHEAD,
    I_FLEN,
    I_INFL_MODE,
    I_INFL_N,
    I_LOGN,
    I_NFINISHED,
    I_NRUN,
    I_NSKIPS,
    I_NSTEPS,
    I_QHEAD,
    I_QLEN,
    I_QTOKENS,
    I_RETRACTIONS,
    LOG_RETRACT,
    MODE_NONE,
    R_CPL,
    R_FINISHED,
    R_GEN,
    R_KEPT,
    R_KV,
    R_MAXNEW,
    R_NRETRACT,
    R_PREFIX,
    R_PROMPT,
    R_REASON,
    R_RETRACTED,
    R_ROW,
    R_STOPAT,
    REASON_ABORT,
    REASON_LENGTH,
    REASON_STOP,
    RF_ENQUEUED,
    RF_FINISH,
    RF_FIRST_TOKEN,
)
from pagedkv.managers.compiled_core.pools import (
    available_size,
    free_group_begin,
    free_group_end,
    jit,
    jit_inline,
)
from pagedkv.managers.compiled_core.radix_cache import (
    cache_unfinished_req,
    evict_from_tree_cache,
    release_kv_cache,
)
from pagedkv.mem_cache.allocator.ownership import IN_USE


@jit
def finish(s, rid: int, reason: int) -> None:
    """The request stops (``reason``), releases its KV and row, and is counted finished at
    the loop's step and clock (``SchedulerRequestTracker.finish``)."""
    s.R[rid, R_FINISHED] = 1
    s.R[rid, R_REASON] = reason
    release_kv_cache(s, rid, True)
    s.RF[rid, RF_FINISH] = s.F[F_CLOCK]
    s.I[I_NFINISHED] += 1
    record_event(s, s.I[I_NSTEPS], EV_ABORT if reason == REASON_ABORT else EV_FINISH, rid,
                 s.R[rid, R_GEN], 0, 0)


@jit_inline
def commit_token(s, rid: int) -> bool:
    """One more output token (``append_token``); finished if it ends the request."""
    s.R[rid, R_GEN] += 1
    if s.R[rid, R_GEN] < s.R[rid, R_STOPAT]:
        return False
    finish(s, rid, REASON_LENGTH if s.R[rid, R_GEN] >= s.R[rid, R_MAXNEW] else REASON_STOP)
    return True


@jit
def decode_need(s, idx, m: int) -> int:
    """Slots the next decode step of ``s.running[idx[:m]]`` needs
    (``new_tokens_required_next_decode``)."""
    p, R, running = s.C[C_P], s.R, s.running
    if p == 1:
        return m
    n = 0
    for j in range(m):
        n += R[running[idx[j]], R_KV] % p == 0
    return n * p


@jit
def filter_running(s, keep, m: int) -> None:
    """The running batch becomes ``running[keep[:m]]``, in that order (``filter_batch``)."""
    running, scratch = s.running, s.scratch
    for j in range(m):
        scratch[j] = running[keep[j]]
    running[:m] = scratch[:m]
    s.I[I_NRUN] = m


@jit
def filter_finished(s) -> int:
    """Drop finished requests; how many left."""
    n, m, R, running = s.I[I_NRUN], 0, s.R, s.running
    for j in range(n):
        rid = running[j]
        if not R[rid, R_FINISHED]:
            running[m] = rid
            m += 1
    s.I[I_NRUN] = m
    return n - m


@jit
def in_flight_holds(s, rid: int) -> bool:
    """Whether the batch in flight has ``rid``."""
    infl = s.infl
    for j in range(s.I[I_INFL_N]):  # noqa: SIM110 (numba compiles no generators)
        if infl[0, j] == rid:
            return True
    return False


@jit
def leave_out_finishing(s) -> bool:
    """0.5.23's ``_reqs_finishing_inflight``: running requests whose in-flight result reaches
    ``max_new_tokens`` leave the batch holding their KV. Whether there were any."""
    if s.I[I_INFL_MODE] == MODE_NONE or not s.C[C_SKIP_FINISHING]:
        return False
    n, m, R, running = s.I[I_NRUN], 0, s.R, s.running
    for j in range(n):
        rid = running[j]
        if not (R[rid, R_GEN] + 1 >= R[rid, R_MAXNEW] and in_flight_holds(s, rid)):
            running[m] = rid
            m += 1
    s.I[I_NRUN] = m
    return m < n


@jit
def retract_to_queue(s, rid: int) -> None:
    """``SchedulerRequestTracker.retract``: back of the queue, its output kept."""
    fill = s.R[rid, R_PROMPT] + s.R[rid, R_GEN]
    s.R[rid, R_NRETRACT] += 1
    s.R[rid, R_RETRACTED] = 1
    s.RF[rid, RF_ENQUEUED] = s.F[F_CLOCK]
    q = len(s.queue)
    s.queue[(s.I[I_QHEAD] + s.I[I_QLEN]) % q] = rid
    s.I[I_QLEN] += 1
    s.I[I_QTOKENS] += fill
    record_event(s, s.I[I_NSTEPS], EV_RETRACT, rid, s.R[rid, R_GEN], fill - 1, s.R[rid, R_KEPT])


@jit
def release_req(s, rid: int, remaining: int) -> None:
    """``release_req``: the victim's KV and row freed, nothing inserted (its prompt prefix
    stays in the tree), then room evicted for the ``remaining`` requests."""
    s.R[rid, R_KEPT] = s.R[rid, R_CPL]
    release_kv_cache(s, rid, False)
    evict_from_tree_cache(s, remaining * s.C[C_RETRACT_STEPS])


@jit_inline
def check_decode_mem(s, idx, m: int) -> bool:
    """``check_decode_mem``: whether the next decode step of ``s.running[idx[:m]]`` fits,
    after evicting from the tree to make room."""
    need = decode_need(s, idx, m)
    evict_from_tree_cache(s, need)
    return available_size(s) >= need


@jit
def retract(s) -> bool:
    """``DecodeMemoryChecker.retract`` over ``retract_decode``: victims in ``retraction_order``
    (fewest output tokens, then the longest prompt; popped from the end) until the rest's next
    step fits; a last request that still does not fit is aborted (0.5.23) or the run fails
    (0.5.9: False). The ratio becomes ``retract_ratio``; the warning is logged."""
    n, steps = s.I[I_NRUN], s.C[C_RETRACT_STEPS]
    old_available, old_ratio = available_size(s), s.F[F_RATIO]
    key, R, running = np.empty(n, dtype=np.int64), s.R, s.running
    for j in range(n):  # (generated, -prompt) descending, stable = (-generated, prompt) ascending
        rid = running[j]
        key[j] = -R[rid, R_GEN] * (1 << 32) + R[rid, R_PROMPT]
    order = np.argsort(key, kind="mergesort")
    victims = np.empty(n, dtype=np.int64)
    nv, m, first = 0, n, True
    while first or not check_decode_mem(s, order, m):
        if m == 1:
            break
        first = False
        m -= 1
        rid = s.running[order[m]]
        victims[nv] = rid
        nv += 1
        release_req(s, rid, m)
    aborted = -1
    if m <= 1 and not check_decode_mem(s, order, m):
        if not s.C[C_ABORT_LAST]:
            return False
        m -= 1
        aborted = s.running[order[m]]
        release_req(s, aborted, 0)
    filter_running(s, order, m)
    gen = 0
    maxnew = 0
    for j in range(m):
        gen += R[running[j], R_GEN]
        maxnew += R[running[j], R_MAXNEW]
    ratio = min(1.0, (gen + steps * m) / (maxnew + 1))
    s.F[F_RATIO] = ratio
    s.I[I_RETRACTIONS] += 1
    if s.C[C_KEEP_LOG]:
        e = s.I[I_LOGN]
        s.logs[e, 0], s.logs[e, 1], s.logs[e, 2] = LOG_RETRACT, s.I[I_NSTEPS], nv
        s.logs[e, 3] = available_size(s) - old_available
        s.logf[e, 0], s.logf[e, 1] = old_ratio, ratio
        s.I[I_LOGN] = e + 1
    for j in range(nv):
        retract_to_queue(s, victims[j])
    if aborted >= 0:
        s.R[aborted, R_FINISHED] = 1
        s.R[aborted, R_REASON] = REASON_ABORT
        s.RF[aborted, RF_FINISH] = s.F[F_CLOCK]
        s.I[I_NFINISHED] += 1
        record_event(s, s.I[I_NSTEPS], EV_ABORT, aborted, s.R[aborted, R_GEN], 0, 0)
    return True


@jit
def update_running_batch(s) -> int:
    """``update_running_batch``: 1 when the decode step goes ahead, 0 when there is none (no
    request left, or 0.5.23's overlap loop skips it while requests finishing in flight free
    KV), -1 when 0.5.9's last request does not fit (an error)."""
    initial = s.I[I_NRUN]
    filter_finished(s)
    finishing = leave_out_finishing(s)
    n = s.I[I_NRUN]
    if n == 0:
        s.I[I_BATCH_FULL] = 0
        return 0
    if check_decode_mem(s, np.arange(n), n):
        s.F[F_RATIO] = max(s.F[F_RATIO] - s.CF[CF_DECAY], s.CF[CF_MIN])
    elif finishing:
        s.I[I_NSKIPS] += 1
        s.I[I_BATCH_FULL] = 0
        return 0
    elif not retract(s):
        return -1
    if s.I[I_NRUN] < initial:
        s.I[I_BATCH_FULL] = 0
    return 1 if s.I[I_NRUN] > 0 else 0


@jit
def prepare_for_decode(s) -> bool:
    """``prepare_for_decode``: every running request's next slot (``alloc_decode``: a fresh
    page from the free list's front when its next token starts a page, else the slot after
    its last); False when the pool is short (the memory check was skipped: an error)."""
    n, p = s.I[I_NRUN], s.C[C_P]
    evict_from_tree_cache(s, n if p == 1 else n * p)
    if decode_need(s, np.arange(n), n) > s.I[I_FLEN] * p:
        return False
    R, running, table, state, free, I = s.R, s.running, s.table, s.slot_state, s.free, s.I  # noqa: E741
    p, cap = s.C[C_P], s.C[C_NPAGES]
    head, flen = I[I_FHEAD], I[I_FLEN]
    for j in range(n):
        rid = running[j]
        row, kv = R[rid, R_ROW], R[rid, R_KV]
        if kv % p == 0:
            slot = free[head] * p
            head = (head + 1) % cap
            flen -= 1
        else:
            slot = table[row, kv - 1] + 1
        state[slot] = IN_USE
        table[row, kv] = slot
        R[rid, R_KV] = kv + 1
    I[I_FHEAD], I[I_FLEN] = head, flen
    return True


@jit
def process_prefill_result(s, slot: int, n: int, merge: bool) -> int:
    """``process_batch_result_prefill`` for the pass in ``s.infl[slot, :n]`` at the loop's
    clock: each request that samples (and is neither finished nor retracted since) commits
    its first token; one it ends is released, the others are cached up to the pass's end
    and, with ``merge`` (the normal loop), join the running batch (``merge_prefill``).
    Returns how many sampled."""
    group = s.C[C_GROUP_PREFILL] != 0
    if group:
        free_group_begin(s)
    nrun0 = s.I[I_NRUN]
    sampled = done = 0
    for j in range(n):
        rid = s.infl[slot, j]
        if not s.infl_sample[slot, j] or s.R[rid, R_FINISHED] or s.R[rid, R_RETRACTED]:
            continue
        sampled += 1
        if np.isnan(s.RF[rid, RF_FIRST_TOKEN]):
            s.RF[rid, RF_FIRST_TOKEN] = s.F[F_CLOCK]
        if commit_token(s, rid):
            continue
        cache_unfinished_req(s, rid, s.infl_end[slot, j])
        if merge:
            s.running[s.I[I_NRUN]] = rid
            s.I[I_NRUN] += 1
            done += 1
    if group:
        free_group_end(s)
    if merge and (done < n or nrun0 == 0):
        s.I[I_BATCH_FULL] = 0
    return sampled


@jit
def process_decode_result(s, rids, n: int) -> None:
    """A decode step's result for ``rids[:n]`` (the normal loop: the running batch; the
    overlap loop: the batch in flight): each request still live takes its token and every
    request its token ends is released, in batch order, in one free group."""
    free_group_begin(s)
    R = s.R
    for j in range(n):
        rid = rids[j]
        if R[rid, R_FINISHED] or R[rid, R_RETRACTED]:
            continue
        R[rid, R_GEN] += 1  # commit_token, its common case inline
        if R[rid, R_GEN] >= R[rid, R_STOPAT]:
            finish(s, rid, REASON_LENGTH if R[rid, R_GEN] >= R[rid, R_MAXNEW] else REASON_STOP)
    free_group_end(s)


@jit
def merge_in_flight_prefill(s) -> None:
    """The overlap loop's ``get_next_batch_to_run``: the in-flight prefill's requests (but the
    one still being chunked and those finished) join the running batch."""
    n, nrun0, merged = s.I[I_INFL_N], s.I[I_NRUN], 0
    infl, R, running, chunked = s.infl, s.R, s.running, s.I[I_CHUNKED]
    for j in range(n):
        rid = infl[0, j]
        if rid != chunked and not R[rid, R_FINISHED]:
            running[nrun0 + merged] = rid
            merged += 1
    s.I[I_NRUN] = nrun0 + merged
    if merged < n or nrun0 == 0:
        s.I[I_BATCH_FULL] = 0


@jit
def stash_chunked_request(s) -> None:
    """``stash_chunked_request``: the chunk computed so far becomes the request's prefix."""
    c = s.I[I_CHUNKED]
    if c >= 0 and s.R[c, R_KV] > s.R[c, R_PREFIX]:
        cache_unfinished_req(s, c, s.R[c, R_KV])


