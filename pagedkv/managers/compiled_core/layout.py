"""The compiled step core's state: every number the Python scheduler keeps, as columns of arrays.

The compiled core (:mod:`pagedkv.managers.compiled_core`) runs the loop of
:class:`~pagedkv.managers.scheduler.Scheduler` (the reference, which the book shows) with numba
over plain arrays, so its state cannot be objects. This module names the columns: one row per
request (``R``, int64; ``RF``, float64 seconds, NaN for None), the loop's scalars (``I``,
int64; ``F``, float64), the configuration (``C``, int64; ``CF``, float64), and the buffers
(the waiting queue, the free lists, the running batch, the batch in flight, the events and
log records handed back to Python). :class:`State` bundles them as a namedtuple for Python, which
reads the arrays between calls; the loop runs on the same arrays behind one reference
(:class:`StateRef`, a numba structref), because numba passes a namedtuple by value: every
call would copy each of its ~40 array descriptors and count a reference to each, which cost
a radix-off run a third of its time.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba.core import types
from numba.experimental import structref

# ----- one row per request (R: int64) -------------------------------------------------------
(R_PROMPT, R_MAXNEW, R_STOPAT, R_OUTLEN, R_IGNORE, R_GEN, R_KV, R_ROW, R_PREFIX, R_EXTEND,
 R_FINISHED, R_REASON, R_NRETRACT, R_RECOMP, R_CACHED, R_RETRACTED, R_ADMITTED, R_CPL,
 R_KEPT, R_NODE, R_IDS_AT, R_IDS_IN, R_IDS_OUT) = range(23)
NR = 23
# R_NODE: the tree row of ``last_node`` (-1: None); R_IDS_AT: where its token ids start in
# ``ids`` (its prompt's R_IDS_IN = prompt_len of them, or 0: made-up ids, then R_IDS_OUT
# known output ids)
# finish reasons (R_REASON)
REASON_NONE, REASON_LENGTH, REASON_STOP, REASON_ABORT = range(4)
REASONS = ("", "length", "stop", "abort")
# RF: float64 seconds, NaN for None
RF_ARRIVAL, RF_QUEUE, RF_FIRST_ADMIT, RF_FIRST_TOKEN, RF_FINISH, RF_ENQUEUED = range(6)
NRF = 6

# ----- the loop's scalars (I: int64, F: float64) --------------------------------------------
(I_NSTEPS, I_NDECODE, I_DECODED, I_NSKIPS, I_IDLE_BLOCKED, I_NFINISHED, I_CHUNKED,
 I_BATCH_FULL, I_NRUN, I_QHEAD, I_QLEN, I_QTOKENS, I_ARR, I_FHEAD, I_FLEN, I_GROUP, I_GLEN,
 I_RHEAD, I_RLEN, I_INFL_MODE, I_INFL_N, I_K_PREFILL, I_K_DECODE, I_K_IDLE, I_CHUNKS,
 I_RETRACTIONS, I_PEAK_USED, I_PEAK_IN_USE, I_BUSY, I_EVN, I_LOGN, I_LAST_DECODED,
 I_PASS_MODE, I_PASS_N, I_REFRESH) = range(35)
NI = 35
F_CLOCK, F_RATIO, F_LAST_CLOCK, F_INFL_END = range(4)
NF = 4
# the batch in flight (I_INFL_MODE)
MODE_NONE, MODE_EXTEND, MODE_DECODE = range(3)

# ----- configuration (C: int64, CF: float64) ------------------------------------------------
(C_P, C_TOTAL, C_NPAGES, C_MAXRUN, C_CHUNK, C_MAXPREFILL, C_CLIP, C_OVERLAP, C_OVERHEAD,
 C_IGNORE_EOS_ALL, C_BOTH_BUDGETS, C_PAGE_BOUNDARY, C_RAW_TOKENS, C_COUNT_ROWS, C_FILTER_EVERY,
 C_BUSY_RULE, C_STOP_SPENT, C_ABORT_LAST, C_RESET_IDLE, C_GROUP_PREFILL, C_SKIP_FINISHING,
 C_ROW_LIFO, C_FREE_ROW_ORDER, C_RETRACT_STEPS, C_LOG_INTERVAL, C_KEEP_LOG, C_KEEP_EVENTS,
 C_NO_CONSEC, C_STEP_KIND, C_WEIGHTS, C_CELL, C_PARAMS, C_ROWS_SIZE, C_N, C_RADIX,
 C_EVICT_UNTIL_FREE, C_SPLIT_OUTPUT, C_TOUCH) = range(38)
NC = 38
CF_INIT, CF_MIN, CF_DECAY, CF_BW, CF_PEAK, CF_STEP_S = range(6)
NCF = 6
STEP_FIXED, STEP_ROOFLINE = range(2)

# ----- records handed back to Python --------------------------------------------------------
# events: [step, kind, rid, a, b, c] (the payload of pagedkv.managers.trace.Event)
EV_ADMIT, EV_REPREFILL, EV_CHUNK, EV_RETRACT, EV_FINISH, EV_ABORT = range(6)
EVENT_KINDS = ("admit", "reprefill", "chunk", "retract", "finish", "abort")
# logs: ints [kind, step, a, b, c, d, e, f, g], floats [x, y]
LOG_PREFILL, LOG_DECODE, LOG_RETRACT = range(3)

# ----- the run's outcome (the loop's return value) ------------------------------------------
DONE, PAUSED = 0, 1
ERR_EXTEND_OOM, ERR_DECODE_OOM, ERR_STUCK, ERR_LEAK, ERR_LAST_REQUEST = -1, -2, -3, -4, -5


class State(NamedTuple):
    """Every array the compiled loop reads and writes (shapes: ``n`` requests, ``rows``
    request rows, ``pages`` pool pages, ``cap`` running-batch entries).

    Attributes:
        R, RF: int64 ``[n, NR]``, float64 ``[n, NRF]``: each request's fields (``Req``'s).
        I, F, C, CF: the loop's scalars and the configuration (see the ``I_``, ``F_``,
            ``C_``, ``CF_`` names).
        queue: int64 ``[n + 1]``: the waiting queue's rids, a ring (``I_QHEAD``, ``I_QLEN``).
        arrivals: int64 ``[n]``: rids in ``(arrival_s, rid)`` order (``I_ARR`` received).
        free: int64 ``[pages]``: the allocator's free page ids, a ring (``I_FHEAD``, ``I_FLEN``).
        group: int64 ``[pages]``: pages held by an open free group (``I_GLEN``).
        slot_state: int8 ``[total + page]``: the allocator's per-slot record.
        table: int32 ``[rows, cols]``: ``req_to_token``.
        rows: int64 ``[rows]``: the free request rows, a ring (``I_RHEAD``, ``I_RLEN``).
        running, scratch: int64 ``[cap]``: the running batch's rids (``I_NRUN``) and room to
            rebuild it.
        infl, infl_sample, infl_end: int64 ``[2, cap]``: row 0 the batch in flight (its
            rids, whether each samples, each one's ``prefix + extend`` at launch; ``I_INFL_N``
            of them), row 1 the pass being launched (it becomes row 0 at the step's end).
        admitted: int64 ``[cap]``: a prefill pass's admitted rids.
        st_left, st_occ: ``[2 * cap]``: the ignore-EOS worst case's states.
        pages: int64 ``[total + page]``: room for the pages of one free.
        events: int64 ``[E, 6]``; logs: int64 ``[L, 9]``; logf: float64 ``[L, 2]``.
        ids: int64: every request's known token ids, one after another (``R_IDS_AT``).
        key, vals: int64 ``[longest sequence + page]``: a key being matched or inserted
            and its slots.
        ev_out, ev_ends: int64 ``[total + page]``, ``[pages + 2]``: an eviction's slots
            and each evicted leaf's end in them.
        tree: the radix tree (:class:`~pagedkv.managers.compiled_core.radix.RadixArrays`;
            an empty one, never used, with the radix cache off); the last field.
    """

    R: np.ndarray
    RF: np.ndarray
    I: np.ndarray  # noqa: E741 (SGLang-free name: the int scalars)
    F: np.ndarray
    C: np.ndarray
    CF: np.ndarray
    queue: np.ndarray
    arrivals: np.ndarray
    free: np.ndarray
    group: np.ndarray
    slot_state: np.ndarray
    table: np.ndarray
    rows: np.ndarray
    running: np.ndarray
    scratch: np.ndarray
    infl: np.ndarray
    infl_sample: np.ndarray
    infl_end: np.ndarray
    admitted: np.ndarray
    st_left: np.ndarray
    st_occ: np.ndarray
    pages: np.ndarray
    events: np.ndarray
    logs: np.ndarray
    logf: np.ndarray
    ids: np.ndarray
    key: np.ndarray
    vals: np.ndarray
    ev_out: np.ndarray
    ev_ends: np.ndarray
    tree: tuple  # a RadixArrays (radix.py, which imports this module); last: see StateRef)


@structref.register
class StateType(types.StructRef):
    """numba's type of a :class:`StateRef` (its fields typed as :class:`State`'s arrays)."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class StateRef(structref.StructRefProxy):
    """:class:`State`'s fields, in its order, behind one reference: the loop's functions take
    it as one pointer (built inside the loop's entry, :func:`~pagedkv.managers.compiled_core.
    loop.run_steps`; Python keeps the :class:`State`)."""


structref.define_constructor(StateRef, StateType, State._fields)
