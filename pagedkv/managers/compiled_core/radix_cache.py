"""The compiled core's prefix cache over a request's life: its token ids, its match at
admission, what is inserted, freed, locked and evicted, and when.

Mirrors, over :class:`~pagedkv.managers.compiled_core.layout.State` and its array tree
(:mod:`.radix`), the Python reference's :class:`~pagedkv.mem_cache.radix_cache.RadixCache`
(``evict_from_tree_cache``, ``_insert_req``, ``cache_unfinished_req``, ``cache_finished_req``;
SGLang 0.5.9 ``mem_cache/radix_cache.py``, 0.5.23 ``mem_cache/unified_radix_cache.py`` and
``mem_cache/common.py``), ``release_kv_cache`` (``mem_cache/common.py``),
``Req.token_ids`` and ``Req.init_next_round_input`` (``managers/schedule_batch.py``) and
``WaitingQueue.touch_waiting_prefixes`` (0.5.23 ``SchedulePolicy._touch_waiting_prefixes``).
With the radix cache off (``C_RADIX`` 0) each function does what
:class:`~pagedkv.mem_cache.chunk_cache.ChunkCache` does. Release differences are ``C_``
flags (``Release`` fields ``free_order``, ``evict_until_free``,
``split_output_from_prompt``, ``touch_waiting_prefixes``).

A request's key is written into ``s.key`` (``token_ids``): its known ids from ``s.ids``, else
the made-up ids of :func:`pagedkv.managers.req.synthetic_ids`, computed, not stored.
"""

from __future__ import annotations

from pagedkv.managers.compiled_core.layout import (
    C_EVICT_UNTIL_FREE,
    C_P,
    C_RADIX,
    C_SPLIT_OUTPUT,
    C_TOUCH,
    I_QHEAD,
    I_QLEN,
    I_REFRESH,
    R_CPL,
    R_GEN,
    R_IDS_AT,
    R_IDS_IN,
    R_IDS_OUT,
    R_KV,
    R_NODE,
    R_PREFIX,
    R_PROMPT,
    R_ROW,
)
from pagedkv.managers.compiled_core.pools import (
    available_size,
    free_row,
    free_run,
    jit,
    jit_inline,
    release_chunk_cache,
)
from pagedkv.managers.compiled_core.radix import (
    dec_lock_ref,
    evict,
    inc_lock_ref,
    insert,
    insert_held_prefix,
    match_prefix,
    path_indices,
    walk,
)
from pagedkv.managers.req import _POSITION_BITS
from pagedkv.managers.scheduler_components.waiting_queue import (
    WAITING_PREFIX_REFRESH_INTERVAL,
    WAITING_PREFIX_REFRESH_REQS,
)


@jit
def token_ids(s, rid: int, end: int) -> None:
    """``Req.token_ids(end)`` into ``s.key[:end]``: the prompt's ids (or made-up ones), the
    known outputs, then made-up ids past them."""
    R, ids, key = s.R, s.ids, s.key
    prompt, at, n_in, n_out = R[rid, R_PROMPT], R[rid, R_IDS_AT], R[rid, R_IDS_IN], R[rid, R_IDS_OUT]
    made_up = (rid + 1) << _POSITION_BITS
    a = min(end, prompt)
    if n_in:
        key[:a] = ids[at:at + a]
    else:
        for pos in range(a):
            key[pos] = made_up | pos
    b = min(end, prompt + n_out)
    if b > a:
        key[a:b] = ids[at + n_in + a - prompt:at + n_in + b - prompt]
    for pos in range(max(a, b), end):
        key[pos] = made_up | pos


@jit_inline
def init_next_round_input(s, rid: int) -> None:
    """``Req.init_next_round_input``: match the prompt + output so far but the last token;
    ``prefix_len`` and ``cache_protected_len`` become the match's length, ``last_node`` its
    node (the cache off: nothing matches). The matched slots are the path to that node,
    which stays so while the request is locked (:func:`prefix_slots`)."""
    if s.C[C_RADIX]:
        match_request(s, rid)
    else:
        s.R[rid, R_PREFIX] = 0
        s.R[rid, R_CPL] = 0


@jit
def match_request(s, rid: int) -> None:
    """:func:`init_next_round_input`'s match, the cache on."""
    n = max(s.R[rid, R_PROMPT] + s.R[rid, R_GEN] - 1, 0)
    token_ids(s, rid, n)
    node, m = match_prefix(s.tree, s.key, n)
    s.R[rid, R_PREFIX] = m
    s.R[rid, R_CPL] = m
    s.R[rid, R_NODE] = node


@jit_inline
def prefix_slots(s, rid: int) -> None:
    """``prepare_for_extend``'s ``table[row, :prefix_len] = _prefix_slots`` for an admitted
    request (locked since its match: its path's slots are the match's)."""
    if s.C[C_RADIX] and s.R[rid, R_PREFIX]:
        copy_path(s, s.R[rid, R_NODE], s.R[rid, R_ROW])


@jit
def copy_path(s, node: int, row: int) -> None:
    """The slots from the root to ``node`` into the front of ``row``."""
    n = path_indices(s.tree, node, s.vals)
    s.table[row, :n] = s.vals[:n]


@jit_inline
def touch_waiting_prefixes(s) -> None:
    """0.5.23, the tree on: every 32nd pass, the first 128 waiting requests' sequences
    walked (head last), as just used."""
    if s.C[C_TOUCH] and s.C[C_RADIX] and s.I[I_QLEN]:
        refresh = s.I[I_REFRESH] % WAITING_PREFIX_REFRESH_INTERVAL == 0
        s.I[I_REFRESH] += 1
        if refresh:
            touch_prefixes(s)


@jit
def touch_prefixes(s) -> None:
    """``touch_prefix`` of the first 128 waiting requests' sequences, head last."""
    p, q = s.C[C_P], len(s.queue)
    for j in range(min(WAITING_PREFIX_REFRESH_REQS, s.I[I_QLEN]) - 1, -1, -1):
        rid = s.queue[(s.I[I_QHEAD] + j) % q]
        n = s.R[rid, R_PROMPT] + s.R[rid, R_GEN]
        token_ids(s, rid, n)
        walk(s.tree, s.key, n // p * p)


@jit_inline
def evict_from_tree_cache(s, num_tokens: int) -> None:
    """``evict_from_tree_cache``: when fewer than ``num_tokens`` slots are free, LRU leaves
    are evicted (0.5.9: ``num_tokens`` slots' worth; 0.5.23: until that many are free) and
    their slots freed (:func:`evict_and_free`)."""
    if s.C[C_RADIX] and available_size(s) < num_tokens:
        evict_and_free(s, num_tokens)


@jit
def evict_and_free(s, num_tokens: int) -> None:
    """The evicted leaves' slots freed leaf after leaf (one ``free_segment`` over them all
    leaves the free list the same)."""
    k = evict(s.tree, num_tokens, available_size(s), s.C[C_EVICT_UNTIL_FREE] != 0,
              s.ev_out, s.ev_ends)
    start = 0
    for j in range(k):
        free_run(s, s.ev_out, start, s.ev_ends[j])
        start = s.ev_ends[j]


@jit
def free_row_run(s, row: int, start: int, end: int) -> None:
    """``_free_row``: free ``table[row, start:end]`` if not empty."""
    if end > start:
        free_run(s, s.table[row], start, end)


@jit
def insert_req(s, rid: int, row: int, n: int) -> None:
    """``_insert_req``: insert the key ``s.key[:n]`` with the row's slots, free the
    request's copies of slots the tree had, repoint the row to the tree's slots and move
    the request's lock to the new deepest node."""
    t, table, R = s.tree, s.table, s.R
    cpl = R[rid, R_CPL]
    had, node, k = insert(t, s.key, table[row], n)
    if had < 0:
        raise AssertionError("the radix tree's buffers are full")
    if s.C[C_SPLIT_OUTPUT]:  # 0.5.23's checkpoint_into_tree
        for j in range(k):  # the walk frees duplicates node by node
            free_row_run(s, row, max(t.ov[j, 0], cpl), t.ov[j, 1])
        p = s.C[C_P]
        prompt = R[rid, R_PROMPT] // p * p
        if 0 < prompt < n:  # split at the prompt boundary (frees nothing)
            insert_held_prefix(t, node, prompt)
        # the path's slots (path_indices): the tree's where it had the key, which the insert's
        # walk gathered in t.slots, then the row's own (already in the row)
        if had > cpl:
            table[row, cpl:had] = t.slots[cpl:had]
    else:
        free_row_run(s, row, cpl, had)
        node, _ = match_prefix(t, s.key, n)
        table[row, cpl:n] = t.slots[cpl:n]
    R[rid, R_CPL] = n
    if R[rid, R_NODE] >= 0:
        dec_lock_ref(t, R[rid, R_NODE])
    inc_lock_ref(t, node)
    R[rid, R_NODE] = node


@jit_inline
def cache_unfinished_req(s, rid: int, end: int) -> None:
    """``cache_unfinished_req(req, up_to=end)``: the first ``end`` computed tokens, cut to
    whole pages, go into the tree; ``prefix_len`` becomes ``end`` (the cache off: only
    that)."""
    if s.C[C_RADIX]:
        insert_unfinished(s, rid, end)
    s.R[rid, R_PREFIX] = end


@jit
def insert_unfinished(s, rid: int, end: int) -> None:
    """:func:`cache_unfinished_req`'s insert, the cache on."""
    p = s.C[C_P]
    n = end // p * p
    token_ids(s, rid, n)
    insert_req(s, rid, s.R[rid, R_ROW], n)


@jit
def cache_finished_req(s, rid: int, is_insert: bool) -> None:
    """``cache_finished_req``: with ``is_insert`` (it finished) prompt and output but the
    last token, page-aligned, stay cached; without (retracted) nothing is inserted. Every
    slot it holds outside the tree is freed and its lock dropped."""
    t, R = s.tree, s.R
    row, committed, p = R[rid, R_ROW], R[rid, R_KV], s.C[C_P]
    n = committed // p * p
    if is_insert:
        token_ids(s, rid, n)
    cpl = R[rid, R_CPL]
    if s.C[C_SPLIT_OUTPUT]:  # 0.5.23's release_kv_cache
        if is_insert:
            insert_req(s, rid, row, n)
        free_row_run(s, row, R[rid, R_CPL], committed)
    else:
        if is_insert:
            had, _, _ = insert(t, s.key, s.table[row], n)
            if had < 0:
                raise AssertionError("the radix tree's buffers are full")
            free_row_run(s, row, cpl, had)
        else:
            free_row_run(s, row, cpl, n)
        free_row_run(s, row, n, committed)  # the partial last page
    if R[rid, R_NODE] >= 0:
        dec_lock_ref(t, R[rid, R_NODE])
    R[rid, R_NODE] = -1
    R[rid, R_CPL] = 0
    R[rid, R_PREFIX] = 0


@jit_inline
def release_kv_cache(s, rid: int, is_insert: bool) -> None:
    """``release_kv_cache``: the cache keeps or frees the request's KV
    (``cache_finished_req``), then its row is freed; it holds nothing afterwards."""
    if s.C[C_RADIX]:
        cache_finished_req(s, rid, is_insert)
    else:
        release_chunk_cache(s, rid)
    free_row(s, s.R[rid, R_ROW])
    s.R[rid, R_ROW] = -1
    s.R[rid, R_KV] = 0
