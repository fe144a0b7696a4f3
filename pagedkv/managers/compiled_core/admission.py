"""The compiled core's prefill pass: whom it admits (``PrefillAdder``'s arithmetic), their
events, and their slots.

Mirrors the Python reference's :meth:`~pagedkv.managers.scheduler_components.prefill_manager.
PrefillManager.get_new_batch_prefill` (SGLang 0.5.23 ``scheduler.py``:
``get_new_batch_prefill``, ``get_num_allocatable_reqs``), :class:`~pagedkv.managers.
schedule_policy.PrefillAdder` with SGLang's policy (``schedule_policy.py``:
``add_chunked_req``, ``add_one_req`` with its prefix locks, ``add_one_req_ignore_eos`` with
the radix cache off, ``budget_state``, ``_update_prefill_budget``; room is free plus
evictable slots; the running batch's reservation of ``reservation.py``), each waiting
request matched against the tree first (:mod:`.radix_cache`),
``SchedulerRequestTracker.admit`` (``Req.admit``) and ``ScheduleBatch.prepare_for_extend``
(``alloc_req_slots``, the matched prefix's slots, eviction, ``alloc_extend``). Release
differences are ``C_`` flags (``Release`` fields), never release names. The pass's admitted
rids go to ``s.admitted``; its launch record (rids, sample flags, extend ends) to row 1 of
``s.infl``.
"""

from __future__ import annotations

import numpy as np

from pagedkv.managers.compiled_core.layout import (
    C_BOTH_BUDGETS,
    C_BUSY_RULE,
    C_CHUNK,
    C_CLIP,
    C_COUNT_ROWS,
    C_IGNORE_EOS_ALL,
    C_KEEP_EVENTS,
    C_MAXPREFILL,
    C_MAXRUN,
    C_NPAGES,
    C_OVERHEAD,
    C_P,
    C_PAGE_BOUNDARY,
    C_RADIX,
    C_RAW_TOKENS,
    C_STOP_SPENT,
    EV_ABORT,
    EV_ADMIT,
    EV_CHUNK,
    EV_FINISH,
    EV_REPREFILL,
    F_RATIO,
    I_BATCH_FULL,
    I_CHUNKED,
    I_CHUNKS,
    I_EVN,
    I_FHEAD,
    I_FLEN,
    I_NRUN,
    I_QHEAD,
    I_QLEN,
    I_QTOKENS,
    I_RLEN,
    R_ADMITTED,
    R_CACHED,
    R_EXTEND,
    R_GEN,
    R_IGNORE,
    R_KV,
    R_MAXNEW,
    R_NODE,
    R_PREFIX,
    R_PROMPT,
    R_RECOMP,
    R_RETRACTED,
    R_ROW,
    RF_ENQUEUED,
    RF_FIRST_ADMIT,
    RF_QUEUE,
)
from pagedkv.managers.compiled_core.pools import (
    alloc_rows,
    available_size,
    extend_pages,
    jit,
    jit_inline,
)
from pagedkv.managers.compiled_core.radix import T_EVICTABLE, dec_lock_ref, inc_lock_ref
from pagedkv.managers.compiled_core.radix_cache import (
    evict_from_tree_cache,
    init_next_round_input,
    prefix_slots,
    touch_waiting_prefixes,
)
from pagedkv.mem_cache.allocator.ownership import IN_USE

CONTINUE, NO_TOKEN, OTHER = 0, 1, 2  # AddReqResult
# the adder's int state (A); its float state is AF[0], rem_total_token_offset
A_CUR_OFF, A_REM_INPUT, A_REM_CHUNK, A_K, A_NEW_CHUNKED, A_LOG_HIT, A_LOG_INPUT, A_NSTATES = range(8)


@jit_inline
def ceil_to_page(tokens: int, p: int) -> int:
    return -(-tokens // p) * p


@jit
def record_event(s, step: int, kind: int, rid: int, a: int, b: int, c: int) -> None:
    """One event row (``Trace.record_event``'s payload), kept when the run keeps events
    (finishes always: the caller brings finished requests up to date from them)."""
    if kind == EV_CHUNK:
        s.I[I_CHUNKS] += 1
    if s.C[C_KEEP_EVENTS] or kind == EV_FINISH or kind == EV_ABORT:  # noqa: SIM109 (numba)
        e = s.I[I_EVN]
        s.events[e, 0], s.events[e, 1], s.events[e, 2] = step, kind, rid
        s.events[e, 3], s.events[e, 4], s.events[e, 5] = a, b, c
        s.I[I_EVN] = e + 1


@jit
def queue_rid(s, q: int) -> int:
    """The ``q``-th waiting request's rid, front first."""
    return s.queue[(s.I[I_QHEAD] + q) % len(s.queue)]


@jit
def num_allocatable_reqs(s, running_bs: int, held: int) -> int:
    """``get_num_allocatable_reqs`` (0.5.23: also at most the free rows plus ``held``)."""
    n = s.C[C_MAXRUN] - running_bs
    if s.C[C_COUNT_ROWS]:
        n = min(n, s.I[I_RLEN] + held)
    return n


@jit
def running_reservation(s) -> float:
    """``_get_running_request_total_token_offset``: the Python-order sum of
    ``min(max_new_tokens - generated, CLIP) * ratio`` (0.5.23: ratio 1 for ignore-EOS)."""
    nrun, ratio, clip, R, running = s.I[I_NRUN], s.F[F_RATIO], s.C[C_CLIP], s.R, s.running
    per_eos = False
    if s.C[C_IGNORE_EOS_ALL]:
        for j in range(nrun):
            per_eos = per_eos or R[running[j], R_IGNORE] != 0
    total = 0.0
    for j in range(nrun):
        rid = running[j]
        left = min(R[rid, R_MAXNEW] - R[rid, R_GEN], clip)
        total += left * (1.0 if per_eos and R[rid, R_IGNORE] else ratio)
    return total


@jit_inline
def room_tokens(s) -> int:
    """``PrefillAdder._room``: free slots plus the tree's evictable ones."""
    return available_size(s) + s.tree.T[T_EVICTABLE]


@jit
def budget_state(s, A, AF) -> int:
    """``PrefillAdder.budget_state``."""
    room = room_tokens(s)
    if room - AF[0] <= 0 or room - A[A_CUR_OFF] <= 0:
        return NO_TOKEN
    if A[A_REM_INPUT] <= 0 or (s.C[C_CHUNK] >= 0 and A[A_REM_CHUNK] <= 0):
        return OTHER
    return CONTINUE


@jit
def charge(s, A, AF, rid: int, extend: int, future: int, new_chunk: bool) -> None:
    """``_update_prefill_budget``: admit ``rid`` for ``extend`` tokens."""
    pages = ceil_to_page(extend, s.C[C_P])
    overhead = s.C[C_OVERHEAD]
    AF[0] += pages + overhead + future
    A[A_CUR_OFF] += pages + overhead
    A[A_REM_INPUT] -= pages
    if s.C[C_CHUNK] >= 0:
        A[A_REM_CHUNK] -= pages
    if s.R[rid, R_ROW] < 0:
        A[A_LOG_HIT] += s.R[rid, R_PREFIX]
    A[A_LOG_INPUT] += extend if s.C[C_RAW_TOKENS] else pages
    s.R[rid, R_EXTEND] = extend
    s.admitted[A[A_K]] = rid
    A[A_K] += 1
    if new_chunk:
        A[A_NEW_CHUNKED] = rid


@jit
def future_tokens(s, rid: int, truncated: bool) -> int:
    """``_future`` (SGLang's policy): 0 for a partial chunk, else ``min(max_new_tokens, CLIP)``."""
    return 0 if truncated else min(s.R[rid, R_MAXNEW], s.C[C_CLIP])


@jit
def add_chunked_req(s, A, AF, rid: int) -> int:
    """``add_chunked_req``: the next chunk; returns ``rid`` if it is still not done, else -1."""
    rem_chunk = A[A_REM_CHUNK]
    room = min(rem_chunk, int(room_tokens(s) - AF[0]))
    if room <= 0:
        room = rem_chunk
    extend = s.R[rid, R_PROMPT] + s.R[rid, R_GEN] - s.R[rid, R_PREFIX]
    truncated = extend > room
    extend = min(extend, room)
    charge(s, A, AF, rid, extend, future_tokens(s, rid, truncated), False)
    return rid if truncated else -1


@jit
def insert_state(s, A, rid: int, build: bool) -> None:
    """``ignore_eos_states`` for ``rid``: ``(max_new_tokens * ratio - generated, prompt +
    generated)`` put into the sorted states (a stable insertion when building; else SGLang's
    scan, which puts a state larger than all but none before the last)."""
    R, st_left, st_occ = s.R, s.st_left, s.st_occ
    ratio = 1.0 if R[rid, R_IGNORE] else s.F[F_RATIO]
    left = R[rid, R_MAXNEW] * ratio - R[rid, R_GEN]
    if not left > 0:
        return
    n = A[A_NSTATES]
    i = 0
    if build:
        i = n
        while i > 0 and st_left[i - 1] > left:
            i -= 1
    else:
        for i in range(n):
            if left <= st_left[i]:
                break
    for j in range(n, i, -1):
        st_left[j], st_occ[j] = st_left[j - 1], st_occ[j - 1]
    st_left[i] = left
    st_occ[i] = R[rid, R_PROMPT] + R[rid, R_GEN]
    A[A_NSTATES] = n + 1


@jit
def add_one_req_ignore_eos(s, A, AF, rid: int) -> int:
    """``add_one_req_ignore_eos``: the worst case in which every request runs to its limit."""
    p, room = s.C[C_P], room_tokens(s)
    cur_rem, rem_total = room - A[A_CUR_OFF], room - AF[0]
    extend = s.R[rid, R_PROMPT] + s.R[rid, R_GEN] - s.R[rid, R_PREFIX]
    paged = ceil_to_page(extend, p) + s.C[C_OVERHEAD]
    if paged > cur_rem or paged > rem_total:
        return NO_TOKEN
    if A[A_NSTATES] < 0:  # the pass's first: this request, the running batch, the admitted
        A[A_NSTATES] = 0
        insert_state(s, A, rid, True)
        for j in range(s.I[I_NRUN]):
            insert_state(s, A, s.running[j], True)
        for j in range(A[A_K]):
            insert_state(s, A, s.admitted[j], True)
    else:
        insert_state(s, A, rid, False)
    freed, n, rem, st_left, st_occ = 0, A[A_NSTATES], cur_rem - paged, s.st_left, s.st_occ
    for i in range(n):
        bs = n - i
        if rem + freed - st_left[i] * bs <= bs:  # IGNORE_EOS_RESERVE_TOKENS = 1 per request
            return NO_TOKEN
        freed += st_occ[i]
    chunk = s.C[C_CHUNK]
    if chunk < 0 or extend <= A[A_REM_CHUNK]:
        charge(s, A, AF, rid, extend, future_tokens(s, rid, False), False)
    else:
        if A[A_REM_CHUNK] <= 0:
            return OTHER
        charge(s, A, AF, rid, A[A_REM_CHUNK], 0, True)
    return budget_state(s, A, AF)


@jit
def add_one_req(s, A, AF, rid: int) -> int:
    """``add_one_req``: the budgets checked before (0.5.9) and after its matched prefix is
    locked (it stops being evictable while admission decides); admitted whole or as a chunk,
    it keeps a lock until it releases its KV."""
    if s.R[rid, R_IGNORE] and not s.C[C_RADIX]:
        return add_one_req_ignore_eos(s, A, AF, rid)
    p, prefix = s.C[C_P], s.R[rid, R_PREFIX]
    extend = s.R[rid, R_PROMPT] + s.R[rid, R_GEN] - prefix
    input_tokens = ceil_to_page(extend, p)
    need = extend + min(max(s.R[rid, R_MAXNEW] - s.R[rid, R_GEN], 0), s.C[C_CLIP]) + s.C[C_OVERHEAD]
    both = s.C[C_BOTH_BUDGETS] != 0
    if both:
        if need >= room_tokens(s) - AF[0]:
            return NO_TOKEN
        if input_tokens >= A[A_REM_INPUT] and A[A_K] > 0:
            return OTHER
    radix, node = s.C[C_RADIX] != 0, s.R[rid, R_NODE]
    if radix:
        inc_lock_ref(s.tree, node)
    result = add_locked(s, A, AF, rid, extend, input_tokens, need)
    if radix:
        dec_lock_ref(s.tree, node)
    return budget_state(s, A, AF) if result == CONTINUE else result


@jit_inline
def add_locked(s, A, AF, rid: int, extend: int, input_tokens: int, need: int) -> int:
    """``add_one_req``'s part under the prefix's lock: NO_TOKEN or OTHER, or CONTINUE once
    admitted (a second lock taken)."""
    p, prefix, chunked = s.C[C_P], s.R[rid, R_PREFIX], s.C[C_CHUNK] >= 0
    both = s.C[C_BOTH_BUDGETS] != 0
    if not need < room_tokens(s) - AF[0]:
        return NO_TOKEN
    if (both or not chunked) and A[A_K] > 0 and input_tokens >= A[A_REM_INPUT]:
        return OTHER
    limit = A[A_REM_CHUNK]
    truncated = chunked and input_tokens > limit
    if truncated:
        extend = limit // p * p
        if s.C[C_PAGE_BOUNDARY]:
            extend = (prefix + extend) // p * p - prefix
        if extend <= 0:
            return OTHER
    if s.C[C_RADIX]:
        inc_lock_ref(s.tree, s.R[rid, R_NODE])  # held until the request releases its KV
    charge(s, A, AF, rid, extend, future_tokens(s, rid, truncated), truncated)
    return CONTINUE


@jit
def admit(s, k: int, new_chunked: int, step: int, clock: float) -> None:
    """``SchedulerRequestTracker.admit``: the new ones (no row yet) counted (``Req.admit``)
    with an admit or reprefill event and popped from the queue's front; every chunk gets a
    chunk event."""
    new = 0
    for j in range(k):
        rid = s.admitted[j]
        if s.R[rid, R_ROW] < 0:
            new += 1
            s.R[rid, R_RETRACTED] = 0
            s.RF[rid, RF_QUEUE] += clock - s.RF[rid, RF_ENQUEUED]
            s.R[rid, R_CACHED] += s.R[rid, R_PREFIX]
            if np.isnan(s.RF[rid, RF_FIRST_ADMIT]):
                s.RF[rid, RF_FIRST_ADMIT] = clock
            fill = s.R[rid, R_PROMPT] + s.R[rid, R_GEN]
            if s.R[rid, R_ADMITTED]:
                s.R[rid, R_RECOMP] += fill - 1 - s.R[rid, R_PREFIX]
            kind = EV_REPREFILL if s.R[rid, R_ADMITTED] else EV_ADMIT
            s.R[rid, R_ADMITTED] = 1
            record_event(s, step, kind, rid, s.R[rid, R_EXTEND], s.R[rid, R_PREFIX], 0)
        if s.R[rid, R_ROW] >= 0 or rid == new_chunked:
            record_event(s, step, EV_CHUNK, rid, s.R[rid, R_PREFIX], s.R[rid, R_EXTEND], 0)
    for _ in range(new):  # they are the queue's front, in order (FCFS)
        rid = s.queue[s.I[I_QHEAD]]
        s.I[I_QHEAD] = (s.I[I_QHEAD] + 1) % len(s.queue)
        s.I[I_QLEN] -= 1
        s.I[I_QTOKENS] -= s.R[rid, R_PROMPT] + s.R[rid, R_GEN]


@jit
def prepare_for_extend(s, k: int) -> bool:
    """``prepare_for_extend``: rows for the requests without one (one call), then every
    extend token's slot (``alloc_extend``: the rest of a partial page, then new pages from the
    free list's front, request after request). False: the pool is short (nothing changed
    but the rows, which the caller reports as an error). The launch record goes to row 1 of
    ``s.infl``."""
    R, admitted, scratch = s.R, s.admitted, s.scratch
    fresh = 0
    for j in range(k):
        if R[admitted[j], R_ROW] < 0:
            scratch[fresh] = admitted[j]
            fresh += 1
    if fresh:
        alloc_rows(s, scratch, fresh)
    p, need, total = s.C[C_P], 0, 0
    for j in range(fresh):
        prefix_slots(s, scratch[j])
    for j in range(k):
        rid = admitted[j]
        need += extend_pages(s, R[rid, R_PREFIX], R[rid, R_PREFIX] + R[rid, R_EXTEND])
        total += R[rid, R_EXTEND]
    evict_from_tree_cache(s, total if p == 1 else total + k * p)
    if need > s.I[I_FLEN]:
        return False
    table, state, free, I = s.table, s.slot_state, s.free, s.I  # noqa: E741
    infl, infl_sample, infl_end, cap = s.infl, s.infl_sample, s.infl_end, s.C[C_NPAGES]
    chunked = I[I_CHUNKED]
    for j in range(k):
        rid = admitted[j]
        row, pre, e = R[rid, R_ROW], R[rid, R_PREFIX], R[rid, R_EXTEND]
        last = table[row, pre - 1] if pre else -1
        room = min(pre + e, -(-pre // p) * p) - pre
        slot = 0
        for t in range(e):
            if t < room:
                slot = last + 1 + t
            elif (t - room) % p == 0:  # a new page from the free list's front
                slot = free[I[I_FHEAD]] * p
                I[I_FHEAD] = (I[I_FHEAD] + 1) % cap
                I[I_FLEN] -= 1
            else:
                slot += 1
            state[slot] = IN_USE
            table[row, pre + t] = slot
        R[rid, R_KV] = pre + e
        infl[1, j] = rid
        infl_sample[1, j] = rid != chunked
        infl_end[1, j] = pre + e
    return True


@jit
def get_new_batch_prefill(s, step: int, clock: float):
    """``get_new_batch_prefill`` beside the running batch: the waiting prefixes touched
    (0.5.23), the carried chunk first, then the queue in FCFS order, each matched against
    the tree, until one does not fit. Returns ``(k, log_input_tokens,
    log_hit_tokens, running_bs, ok)``: ``k`` admitted (0: no pass), ``ok`` False when the
    pool could not hold the pass's extend (an error)."""
    busy, nrun, chunked = s.C[C_BUSY_RULE] != 0, s.I[I_NRUN], s.I[I_CHUNKED]
    if busy and nrun == 0:
        s.I[I_BATCH_FULL] = 0
    if (s.I[I_BATCH_FULL] or s.I[I_QLEN] == 0) and chunked < 0:
        return 0, 0, 0, nrun, True
    carried = 1 if chunked >= 0 and s.R[chunked, R_ROW] >= 0 else 0
    if num_allocatable_reqs(s, nrun, carried) <= 0 and (chunked < 0) == busy:
        s.I[I_BATCH_FULL] = 1
        return 0, 0, 0, nrun, True
    touch_waiting_prefixes(s)
    A = np.zeros(8, dtype=np.int64)
    AF = np.zeros(1)
    A[A_REM_INPUT], A[A_REM_CHUNK] = s.C[C_MAXPREFILL], s.C[C_CHUNK]
    A[A_NEW_CHUNKED], A[A_NSTATES] = -1, -1
    if nrun:
        AF[0] += running_reservation(s)
    if chunked >= 0:
        s.I[I_CHUNKED] = add_chunked_req(s, A, AF, chunked)
    for q in range(s.I[I_QLEN]):
        if s.C[C_STOP_SPENT] and budget_state(s, A, AF) == OTHER:
            break
        held, R, admitted = 0, s.R, s.admitted
        for j in range(A[A_K]):
            held += R[admitted[j], R_ROW] >= 0
        if A[A_K] >= num_allocatable_reqs(s, nrun, held):
            s.I[I_BATCH_FULL] = 1
        if s.I[I_BATCH_FULL]:
            break
        rid = queue_rid(s, q)
        init_next_round_input(s, rid)
        result = add_one_req(s, A, AF, rid)
        if result != CONTINUE:
            if result == NO_TOKEN:
                s.I[I_BATCH_FULL] = 1 if (not busy or A[A_K] > 0 or nrun > 0) else 0
            break
    k = A[A_K]
    if k == 0:
        return 0, 0, 0, nrun, True
    if A[A_NEW_CHUNKED] >= 0:
        s.I[I_CHUNKED] = A[A_NEW_CHUNKED]
    admit(s, k, A[A_NEW_CHUNKED], step, clock)
    ok = prepare_for_extend(s, k)
    return k, A[A_LOG_INPUT], A[A_LOG_HIT], nrun, ok


