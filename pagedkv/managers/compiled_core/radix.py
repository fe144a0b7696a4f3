"""The radix tree as arrays, for the compiled core: match, insert, split, locks and LRU
eviction, exact to :class:`~pagedkv.mem_cache.radix_tree.RadixTree` (the reference).

The reference's nodes are objects; numba needs arrays, so a node is a row of ``nd`` (int64
``[cap, NN]``): its parent's row, where its key (token ids) and value (KV slots) start in the
flat buffers ``tok`` and ``val`` and how long they are, its ``lock_ref``, its
``last_access_time``, its ``id`` (creation order: the eviction order's tie-break, as the
reference's), and its children as a doubly linked list in insertion order (a split puts the
new node where the child was, as the reference's ``dict`` assignment keeps the key's
position). Rows and buffer space of evicted nodes are reused (a free stack of rows; the
buffers compacted when full).

The clock is the reference's: one tick per match or insert for every node it walks, a later
tick for every node it creates (``_new_node``). Unlocked leaves wait in a heap of
``(last_access_time, id)`` with stale entries dropped when popped, pushed exactly where the
reference pushes (``push_if_evictable``), so the leaves come out in the reference's order.

Eviction returns the evicted leaves' slots (in ``out``, leaf after leaf, with each leaf's end
in ``ends``): freeing them is the allocator's (``free_run``, in the release's order).

A request's life on the tree (match at admission, inserts, release, eviction for the
allocator) is :mod:`.radix_cache`'s.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba.core import types
from numba.experimental import structref

from pagedkv.managers.compiled_core.pools import jit

# ----- a node's columns (nd: int64 [cap, NN]) -----------------------------------------------
(N_PARENT, N_START, N_LEN, N_LOCK, N_TIME, N_ID, N_FIRST, N_LAST, N_NEXT, N_PREV,
 N_NCHILD) = range(11)
NN = 11
# ----- scalars (T: int64) -----------------------------------------------------------------
(T_CLOCK, T_IDS, T_NNODES, T_EVICTABLE, T_PROTECTED, T_BUF, T_NFREE, T_HEAP, T_EVICTED,
 T_P, T_ROWS, T_HUSED) = range(12)
NT = 12
ROOT = 0
NONE = -1
EMPTY, DELETED = -1, -2  # child table entries that hold no row


class RadixArrays(NamedTuple):
    """The tree's arrays (``cap`` node rows, ``buf`` key/value entries, ``heap`` entries).

    Attributes:
        nd: int64 ``[cap, NN]``: the nodes (see the ``N_`` columns); row 0 is the root.
        tok, val: int64 ``[buf]``: keys (token ids) and values (KV slots), a node's at
            ``[N_START, N_START + N_LEN)``.
        T: int64 ``[NT]``: the clock's next tick, the next id, the node count (root
            included), ``evictable_size_``, ``protected_size_``, the buffers' fill, the free
            rows' count, the heap's size, evicted slots so far, the page size, rows in use,
            the child table's used entries (live and deleted).
        free_rows: int64 ``[cap]``: rows of evicted nodes, a stack.
        heap: int64 ``[hcap, 3]``: ``(last_access_time, id, row)`` entries, a binary heap.
        slots: int64 ``[buf]``: a match's slots; ov: int64 ``[cap, 2]``: an insert's overlaps.
        ht: int64 ``[2^k >= 4 cap]``: every child filed under ``(parent, first page)``, an
            open-addressing table of rows (-1 empty, -2 deleted): a lookup costs the same
            however many children a node has (a root with thousands).
    """

    nd: np.ndarray
    tok: np.ndarray
    val: np.ndarray
    T: np.ndarray
    free_rows: np.ndarray
    heap: np.ndarray
    slots: np.ndarray
    ov: np.ndarray
    ht: np.ndarray


@structref.register
class TreeType(types.StructRef):
    """numba's type of a :class:`TreeRef`."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class TreeRef(structref.StructRefProxy):
    """:class:`RadixArrays`' fields behind one reference, as the loop passes the tree (see
    :class:`~pagedkv.managers.compiled_core.layout.StateRef`)."""


structref.define_constructor(TreeRef, TreeType, RadixArrays._fields)


@jit
def tree_ref(t) -> TreeRef:
    """The arrays of the :class:`RadixArrays` ``t`` behind one reference."""
    return TreeRef(t.nd, t.tok, t.val, t.T, t.free_rows, t.heap, t.slots, t.ov, t.ht)


def new_tree(page_size: int, cap: int, buf: int) -> RadixArrays:
    """An empty tree: the root only, locked, id 0, the clock at 1 (the reference's ``reset``).

    Sizes that always suffice (numba does not check indices): ``cap`` node rows, the
    pool's pages + 2 (every node but the root holds a page or more of distinct in-use slots;
    one more for a split in flight); ``buf`` key/value entries, the pool's slots
    plus the longest key inserted (a full buffer is compacted to the live nodes' entries,
    at most the pool's slots; ``insert`` reports -1 if the new leaf still does not fit).

    Raises:
        ConfigError: ``page_size``, ``cap`` or ``buf`` not a positive integer.
    """
    from pagedkv.errors import check_positive_int

    for name, value in (("page_size", page_size), ("cap", cap), ("buf", buf)):
        check_positive_int(name, value)
    nd = np.zeros((cap, NN), dtype=np.int64)
    nd[ROOT, N_PARENT] = NONE
    nd[ROOT, N_LOCK] = 1
    nd[ROOT, N_FIRST] = nd[ROOT, N_LAST] = nd[ROOT, N_NEXT] = nd[ROOT, N_PREV] = NONE
    T = np.zeros(NT, dtype=np.int64)
    T[T_CLOCK], T[T_IDS], T[T_NNODES], T[T_P], T[T_ROWS] = 1, 1, 1, page_size, 1
    return RadixArrays(nd, np.zeros(buf, dtype=np.int64), np.zeros(buf, dtype=np.int64), T,
                       np.zeros(cap, dtype=np.int64), np.zeros((4 * cap + 128, 3), dtype=np.int64),
                       np.zeros(buf, dtype=np.int64), np.zeros((cap, 2), dtype=np.int64),
                       np.full(1 << max(4, (4 * cap - 1).bit_length()), EMPTY, dtype=np.int64))


# ----- the LRU heap -----------------------------------------------------------------------
@jit
def heap_less(h, a: int, b: int) -> bool:
    return h[a, 0] < h[b, 0] or (h[a, 0] == h[b, 0] and h[a, 1] < h[b, 1])


@jit
def heap_push(t, time: int, nid: int, row: int) -> None:
    h, T = t.heap, t.T
    i = T[T_HEAP]
    h[i, 0], h[i, 1], h[i, 2] = time, nid, row
    T[T_HEAP] = i + 1
    while i > 0:
        up = (i - 1) // 2
        if not heap_less(h, i, up):
            break
        for c in range(3):
            h[i, c], h[up, c] = h[up, c], h[i, c]
        i = up


@jit
def heap_pop(t) -> None:
    """Drop the heap's top (read it first from ``t.heap[0]``)."""
    h, T = t.heap, t.T
    n = T[T_HEAP] - 1
    T[T_HEAP] = n
    for c in range(3):
        h[0, c] = h[n, c]
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        if a < n and heap_less(h, a, m):
            m = a
        if b < n and heap_less(h, b, m):
            m = b
        if m == i:
            break
        for c in range(3):
            h[i, c], h[m, c] = h[m, c], h[i, c]
        i = m


@jit
def is_candidate(t, row: int) -> bool:
    nd = t.nd
    return row != ROOT and nd[row, N_PARENT] != NONE and nd[row, N_NCHILD] == 0 and nd[row, N_LOCK] == 0


@jit
def push_if_evictable(t, row: int) -> None:
    """``push_if_evictable``: queue ``row`` if it is now an unlocked leaf; a heap of mostly
    stale entries is rebuilt from the tree's candidates."""
    if not is_candidate(t, row):
        return
    nd, T = t.nd, t.T
    if T[T_HEAP] >= len(t.heap):
        T[T_HEAP] = 0
        for r in range(T[T_ROWS]):
            if is_candidate(t, r):
                heap_push(t, nd[r, N_TIME], nd[r, N_ID], r)
        return  # the row is a candidate, so it is in the rebuilt heap
    heap_push(t, nd[row, N_TIME], nd[row, N_ID], row)


@jit
def pop_lru_leaf(t) -> int:
    """``pop_lru_leaf``: the least recently used unlocked leaf's row, or -1."""
    h, nd = t.heap, t.nd
    while t.T[T_HEAP] > 0:
        time, nid, row = h[0, 0], h[0, 1], h[0, 2]
        heap_pop(t)
        if nd[row, N_ID] == nid and is_candidate(t, row) and nd[row, N_TIME] == time:
            return row
    return NONE


# ----- nodes ------------------------------------------------------------------------------
# ----- the child table: (parent, first page) -> row -----------------------------------------
@jit
def child_hash(t, parent: int, key, off: int) -> int:
    """Where ``(parent, key[off:off + p])`` starts probing (wrapping int64 arithmetic)."""
    h = parent * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
    for j in range(t.T[T_P]):
        h = (h ^ key[off + j]) * 0x100000001B3
        h ^= h >> 29
    return h & (len(t.ht) - 1)


@jit
def same_first_page(t, row: int, key, off: int) -> bool:
    tok, s = t.tok, t.nd[row, N_START]
    for j in range(t.T[T_P]):  # noqa: SIM110 (numba compiles no generators)
        if tok[s + j] != key[off + j]:
            return False
    return True


@jit
def find_child(t, node: int, key, off: int) -> int:
    """The child of ``node`` filed under ``key[off:]``'s first page (``get_child_key``)."""
    ht, nd, mask = t.ht, t.nd, len(t.ht) - 1
    i = child_hash(t, node, key, off)
    while ht[i] != EMPTY:
        r = ht[i]
        if r >= 0 and nd[r, N_PARENT] == node and same_first_page(t, r, key, off):
            return r
        i = (i + 1) & mask
    return NONE


@jit
def child_entry(t, row: int, vacant: bool) -> int:
    """The child table's entry holding ``row`` (filed under its parent and first page), or
    with ``vacant`` the first entry on that probe path holding no row."""
    ht, mask = t.ht, len(t.ht) - 1
    i = child_hash(t, t.nd[row, N_PARENT], t.tok, t.nd[row, N_START])
    while (ht[i] >= 0) if vacant else (ht[i] != row):
        i = (i + 1) & mask
    return i


@jit
def put_entry(t, row: int) -> None:
    i = child_entry(t, row, True)
    t.T[T_HUSED] += t.ht[i] == EMPTY
    t.ht[i] = row


@jit
def file_child(t, row: int) -> None:
    """File ``row`` under its parent and first page; a table half full of entries (deleted
    ones included) is rebuilt from the live nodes first."""
    ht, nd, T = t.ht, t.nd, t.T
    if 2 * (T[T_HUSED] + 1) > len(ht):
        ht[:] = EMPTY
        T[T_HUSED] = 0
        for r in range(1, T[T_ROWS]):
            if r != row and nd[r, N_PARENT] != NONE:
                put_entry(t, r)
    put_entry(t, row)


@jit
def link_child(t, parent: int, row: int) -> None:
    """Append ``row`` to ``parent``'s children."""
    nd = t.nd
    last = nd[parent, N_LAST]
    nd[row, N_PREV], nd[row, N_NEXT] = last, NONE
    if last == NONE:
        nd[parent, N_FIRST] = row
    else:
        nd[last, N_NEXT] = row
    nd[parent, N_LAST] = row
    nd[parent, N_NCHILD] += 1
    nd[row, N_PARENT] = parent
    file_child(t, row)


@jit
def bridge(t, parent: int, prev: int, nxt: int, a: int, b: int) -> None:
    """Point ``prev``'s next (or ``parent``'s first child) at ``a`` and ``nxt``'s previous
    (or ``parent``'s last child) at ``b``."""
    nd = t.nd
    if prev == NONE:
        nd[parent, N_FIRST] = a
    else:
        nd[prev, N_NEXT] = a
    if nxt == NONE:
        nd[parent, N_LAST] = b
    else:
        nd[nxt, N_PREV] = b


@jit
def unlink_child(t, row: int) -> None:
    nd = t.nd
    parent, prev, nxt = nd[row, N_PARENT], nd[row, N_PREV], nd[row, N_NEXT]
    t.ht[child_entry(t, row, False)] = DELETED
    bridge(t, parent, prev, nxt, nxt, prev)
    nd[parent, N_NCHILD] -= 1
    nd[row, N_PARENT] = NONE


@jit
def new_node(t, start: int, length: int, lock: int) -> int:
    """``_new_node``: a fresh row (unlinked) with the next id and the next tick."""
    T, nd = t.T, t.nd
    if T[T_NFREE]:
        T[T_NFREE] -= 1
        row = t.free_rows[T[T_NFREE]]
    else:
        row = T[T_ROWS]
        T[T_ROWS] += 1
    nd[row, N_START], nd[row, N_LEN], nd[row, N_LOCK] = start, length, lock
    nd[row, N_ID], nd[row, N_TIME] = T[T_IDS], T[T_CLOCK]
    T[T_IDS] += 1
    T[T_CLOCK] += 1
    nd[row, N_FIRST] = nd[row, N_LAST] = nd[row, N_NEXT] = nd[row, N_PREV] = NONE
    nd[row, N_NCHILD] = 0
    T[T_NNODES] += 1
    return row


@jit
def split_node(t, child: int, n: int) -> int:
    """``_split_node``: cut ``child``'s edge after ``n`` tokens; the new upper node takes the
    child's place among its parent's children. Returns the new node's row."""
    nd = t.nd
    new = new_node(t, nd[child, N_START], n, nd[child, N_LOCK])
    parent, prev, nxt = nd[child, N_PARENT], nd[child, N_PREV], nd[child, N_NEXT]
    t.ht[child_entry(t, child, False)] = new  # the same parent and first page
    nd[new, N_PARENT], nd[new, N_PREV], nd[new, N_NEXT] = parent, prev, nxt
    bridge(t, parent, prev, nxt, new, new)
    nd[child, N_START] += n
    nd[child, N_LEN] -= n
    link_child(t, new, child)
    return new


@jit
def key_match(t, row: int, key, off: int, n: int) -> int:
    """Tokens of ``row``'s key equal to ``key[off:n]``, in whole pages (``key_match``)."""
    nd, tok, p = t.nd, t.tok, t.T[T_P]
    s, m = nd[row, N_START], min(nd[row, N_LEN], n - off)
    i = 0
    while i < m and tok[s + i] == key[off + i]:
        i += 1
    return i // p * p


@jit
def stamp(t, row: int, tick: int) -> None:
    t.nd[row, N_TIME] = tick
    push_if_evictable(t, row)


@jit
def walk(t, key, n: int) -> tuple[int, int, int]:
    """The walk of a match or insert over ``key[:n]`` (``n`` whole pages): one tick for the
    root and every node walked, a split where the key leaves a node's edge (the walk ends
    there). The matched slots go to ``t.slots``, each node's ``(start, end)`` range of the key
    to ``t.ov``. Returns ``(last node's row, matched length, nodes walked)``."""
    nd, val, slots, ov = t.nd, t.val, t.slots, t.ov
    tick = t.T[T_CLOCK]
    t.T[T_CLOCK] += 1
    node, done, k = ROOT, 0, 0
    nd[ROOT, N_TIME] = tick
    while done < n:
        child = find_child(t, node, key, done)
        if child == NONE:
            break
        stamp(t, child, tick)
        m = key_match(t, child, key, done, n)
        cut = m < nd[child, N_LEN]
        if cut:  # past the split nothing more can match: the next page differs, or key ends
            child = split_node(t, child, m)
        s = nd[child, N_START]
        slots[done:done + m] = val[s:s + m]
        ov[k, 0], ov[k, 1] = done, done + m
        k += 1
        node, done = child, done + m
        if cut:
            break
    return node, done, k


@jit
def match_prefix(t, key, n: int) -> tuple[int, int]:
    """``match_prefix`` of ``key[:n]`` (cut to whole pages): the matched slots in
    ``t.slots``. Returns ``(last node's row, matched length)``."""
    p = t.T[T_P]
    node, done, _ = walk(t, key, n // p * p)
    return node, done


@jit
def compact(t, need: int) -> bool:
    """Pack the live nodes' keys and values to the buffers' front; whether ``need`` more
    entries now fit."""
    nd, T, tok, val = t.nd, t.T, t.tok, t.val
    rows = np.empty(T[T_ROWS], dtype=np.int64)
    k = 0
    for r in range(1, T[T_ROWS]):
        if nd[r, N_PARENT] != NONE:
            rows[k] = r
            k += 1
    order = np.argsort(nd[rows[:k], N_START], kind="mergesort")
    at = 0
    for j in range(k):
        r = rows[order[j]]
        s, m = nd[r, N_START], nd[r, N_LEN]
        for i in range(m):
            tok[at + i], val[at + i] = tok[s + i], val[s + i]
        nd[r, N_START] = at
        at += m
    T[T_BUF] = at
    return at + need <= len(tok)


@jit
def insert(t, key, vals, n: int) -> tuple[int, int, int]:
    """``insert`` of ``key[:n]`` with slots ``vals[:n]`` (cut to whole pages). Returns
    ``(prefix_len, node's row, k)``: ``t.ov[:k]`` holds the ``(start, end)`` of each existing
    node walked. A prefix_len of -1: the buffers are full (nothing changed but the walk's
    stamps and splits)."""
    p, T = t.T[T_P], t.T
    n = n // p * p
    node, done, k = walk(t, key, n)
    if done < n:
        m = n - done
        if T[T_BUF] + m > len(t.tok) and not compact(t, m):
            return -1, node, k
        s = T[T_BUF]
        t.tok[s:s + m] = key[done:n]
        t.val[s:s + m] = vals[done:n]
        T[T_BUF] = s + m
        leaf = new_node(t, s, m, 0)
        link_child(t, node, leaf)
        T[T_EVICTABLE] += m
        push_if_evictable(t, leaf)
        node = leaf
    return done, node, k


@jit
def insert_held_prefix(t, node: int, depth: int) -> None:
    """``insert_held_prefix``: the path to ``node`` stamped down to ``depth`` tokens and
    split so that a node ends there."""
    nd = t.nd
    path = np.empty(t.T[T_NNODES], dtype=np.int64)
    k = 0
    while node != ROOT:
        path[k] = node
        k += 1
        node = nd[node, N_PARENT]
    tick = t.T[T_CLOCK]
    t.T[T_CLOCK] += 1
    nd[ROOT, N_TIME] = tick
    done = 0
    for j in range(k - 1, -1, -1):
        if done >= depth:
            break
        child = path[j]
        stamp(t, child, tick)
        m = min(nd[child, N_LEN], depth - done)
        if m < nd[child, N_LEN]:
            split_node(t, child, m)
        done += m


@jit
def path_indices(t, node: int, out) -> int:
    """The slots from the root to ``node`` in ``out``; how many."""
    nd, val = t.nd, t.val
    n, r = 0, node
    while r != ROOT:
        n += nd[r, N_LEN]
        r = nd[r, N_PARENT]
    end = n
    while node != ROOT:
        s, m = nd[node, N_START], nd[node, N_LEN]
        out[end - m:end] = val[s:s + m]
        end -= m
        node = nd[node, N_PARENT]
    return n


# ----- locks and eviction -----------------------------------------------------------------
@jit
def inc_lock_ref(t, node: int) -> None:
    """``inc_lock_ref``: lock the path from ``node`` up to the root."""
    nd, T = t.nd, t.T
    while node != ROOT:
        if nd[node, N_LOCK] == 0:
            T[T_EVICTABLE] -= nd[node, N_LEN]
            T[T_PROTECTED] += nd[node, N_LEN]
        nd[node, N_LOCK] += 1
        node = nd[node, N_PARENT]


@jit
def dec_lock_ref(t, node: int) -> bool:
    """``dec_lock_ref``; False (nothing changed) when a node on the path is not locked."""
    nd, T = t.nd, t.T
    r = node
    while r != ROOT:
        if nd[r, N_LOCK] < 1:
            return False
        r = nd[r, N_PARENT]
    while node != ROOT:
        if nd[node, N_LOCK] == 1:
            T[T_EVICTABLE] += nd[node, N_LEN]
            T[T_PROTECTED] -= nd[node, N_LEN]
        nd[node, N_LOCK] -= 1
        if nd[node, N_LOCK] == 0:
            push_if_evictable(t, node)
        node = nd[node, N_PARENT]
    return True


@jit
def evict_leaf(t, leaf: int, out, at: int) -> int:
    """``evict_leaf`` without the free: the leaf's slots copied to ``out[at:]``, the leaf
    unlinked and its row freed, its parent queued if now a candidate. Returns its length."""
    nd, T = t.nd, t.T
    s, m = nd[leaf, N_START], nd[leaf, N_LEN]
    out[at:at + m] = t.val[s:s + m]
    parent = nd[leaf, N_PARENT]
    unlink_child(t, leaf)
    nd[leaf, N_ID] = NONE
    t.free_rows[T[T_NFREE]] = leaf
    T[T_NFREE] += 1
    T[T_NNODES] -= 1
    T[T_EVICTABLE] -= m
    T[T_EVICTED] += m
    push_if_evictable(t, parent)
    return m


@jit
def evict(t, num_tokens: int, room: int, until_free: bool, out, ends) -> int:
    """``evict`` (``until_free`` False: until ``num_tokens`` slots are freed) or
    ``evict_for_alloc`` (True: until ``room``, the allocator's free slots, plus those freed
    reach ``num_tokens``), LRU leaves first. The leaves' slots go to ``out`` and each leaf's
    end to ``ends``; returns how many leaves (the caller frees them as the release does)."""
    freed, k = 0, 0
    while (room + freed < num_tokens) if until_free else (freed < num_tokens):
        leaf = pop_lru_leaf(t)
        if leaf == NONE:
            break
        freed += evict_leaf(t, leaf, out, freed)
        ends[k] = freed
        k += 1
    return k
